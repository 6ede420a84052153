"""Test fixtures' machinery: the real sandboxd binary, the test images, Docker clean-up.

Nothing here mocks the server: every test talks to `target/debug/sandboxd` (built with cargo)
driving the real Docker daemon. Containers carry `sandboxd.test=1` plus a per-session
`sandboxd.test.case=<uuid>` label, so clean-up removes only this session's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
IMAGES_RS = REPO_ROOT / "testkit" / "src" / "images.rs"
# An image no daemon has, named on a registry at loopback that refuses: the pull the server's
# `missing` policy tries fails at once and never leaves the host.
NO_SUCH_IMAGE = "127.0.0.1:9/sandboxd-test/does-not-exist:1"
LISTENING = "sandboxd listening on "
# Printed before LISTENING when `server.e2b.listen` is set.
E2B_LISTENING = "sandboxd e2b on http://"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=120)


def require_docker() -> None:
    """Fail (never skip) when the daemon is unreachable."""
    if shutil.which("docker") is None:
        raise RuntimeError("the docker CLI is not installed; these tests need a real Docker daemon")
    out = docker("info", "--format", "{{.ServerVersion}}", check=False)
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError(f"the Docker daemon is unreachable (`docker info`): {out.stderr.strip()}")


@dataclass(frozen=True)
class Images:
    busybox: str
    bash: str
    nonroot: str
    version: str


def ensure_images() -> Images:
    """The images of testkit/src/images.rs, built by its cargo test when missing or outdated
    (that build is idempotent and takes a host lock, so it is safe beside other test runs)."""
    source = IMAGES_RS.read_text()

    def const(name: str) -> str:
        match = re.search(rf'pub const {name}: &str = "([^"]+)";', source)
        if match is None:
            raise RuntimeError(f"{IMAGES_RS}: no `pub const {name}`")
        return match.group(1)

    images = Images(const("BUSYBOX"), const("BASH"), const("NONROOT"), const("BUILD_VERSION"))
    label = const("VERSION_LABEL")
    tags = [images.busybox, images.bash, images.nonroot]

    def current() -> bool:
        out = docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{label}"}}}}', *tags, check=False)
        return out.returncode == 0 and out.stdout.split() == [images.version] * len(tags)

    if not current():
        subprocess.run(
            ["cargo", "test", "-q", "-p", "sandboxd", "--test", "images", "--", "--test-threads=2"],
            cwd=REPO_ROOT,
            check=True,
            timeout=900,
        )
        if not current():
            raise RuntimeError(f"test images {tags} are still missing after building them")
    return images


def server_binary() -> Path:
    """`target/debug/sandboxd`, rebuilt (incrementally) so a stale binary is never tested."""
    subprocess.run(
        ["cargo", "build", "-q", "-p", "sandboxd", "--bin", "sandboxd"], cwd=REPO_ROOT, check=True, timeout=1800
    )
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target"))
    binary = target / "debug" / "sandboxd"
    if not binary.is_file():
        raise RuntimeError(f"no server binary at {binary}")
    return binary


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ContainerLabel:
    """`sandboxd.test=1` plus a unique `sandboxd.test.case` value."""

    value: str = field(default_factory=lambda: uuid.uuid4().hex)

    def run_args(self) -> list[str]:
        return ["--label", "sandboxd.test=1", "--label", f"sandboxd.test.case={self.value}"]

    def containers(self, deadline_s: float = 30) -> list[str]:
        """This label's container ids, once the removals `Close` leaves to the background have
        ended: a closed sandbox is ended before the call returns and removed after it, so while
        a listed container is not running (killed, being removed) this waits (up to
        `deadline_s`), and running ones count once they stayed so for a second (a killed
        sandbox reads running until the daemon hears of it); one that stays stopped is listed
        after the wait."""
        deadline = time.monotonic() + deadline_s
        steady: float | None = None
        while True:
            out = docker(
                "ps",
                "-a",
                "--filter",
                f"label=sandboxd.test.case={self.value}",
                "--format",
                "{{.ID}} {{.State}} {{.Names}}",
                check=False,
            )
            listed = [line.split(" ", 2) for line in out.stdout.splitlines() if line.count(" ") >= 2]
            closing = any(
                name.startswith("sandboxd-closing-") or state in ("exited", "dead", "removing")
                for _, state, name in listed
            )
            # A sandbox killed by a close reads `running` until the daemon hears of its init's
            # exit: a listing of running containers counts once it held for a second.
            now = time.monotonic()
            if closing:
                steady = None
            elif steady is None:
                steady = now
            held = steady is not None and (not listed or now - steady >= 1.0)
            if held or now >= deadline:
                return [cid for cid, _, _ in listed]
            time.sleep(0.1)

    def settle(self, before: set[str], deadline_s: float = 60) -> None:
        """Waits until no container is left beyond `before` (a removal the server finishes in the
        background included); fails naming what is left after `deadline_s`."""
        deadline = time.monotonic() + deadline_s
        while (left := set(self.containers()) - before) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not left, f"left behind: {sorted(left)}"

    def remove_all(self) -> None:
        """This label's containers, networks, volumes, snapshot images and run directories:
        `scripts/remove-test-leftovers.sh --case`, the one place that knows what a test leaves."""
        script = REPO_ROOT / "scripts" / "remove-test-leftovers.sh"
        subprocess.run(
            ["bash", str(script), "--case", self.value],
            check=False,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=300,
        )


class ServerProcess:
    """A running `sandboxd --listen 127.0.0.1:PORT --config FILE [--auth-token-file FILE]`."""

    def __init__(
        self,
        binary: Path,
        label: ContainerLabel,
        workdir: Path,
        *,
        token: str | None = None,
        port: int = 0,
        create: dict[str, Any] | None = None,
        server: dict[str, Any] | None = None,
    ) -> None:
        config = workdir / f"config-{uuid.uuid4().hex[:8]}.json"
        config.write_text(
            json.dumps(
                {
                    "docker": {
                        "create": {"extra_run_args": label.run_args(), **(create or {})},
                        "exec": {"default_timeout_s": 60.0},
                    },
                    **({"server": server} if server is not None else {}),
                }
            )
        )
        argv = [str(binary), "--listen", f"127.0.0.1:{port}", "--config", str(config)]
        if token is not None:
            token_file = workdir / f"token-{uuid.uuid4().hex[:8]}"
            token_file.write_text(token)
            argv += ["--auth-token-file", str(token_file)]
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
        )
        self.e2b_address: str | None = None
        self.address = self._await_listening()

    def _await_listening(self) -> str:
        assert self.process.stdout is not None
        found: list[str] = []
        stdout = self.process.stdout

        def scan() -> None:
            for line in stdout:
                if line.startswith(E2B_LISTENING):
                    self.e2b_address = line[len(E2B_LISTENING) :].strip()
                if line.startswith(LISTENING) and not found:
                    found.append(line[len(LISTENING) :].strip())
                    ready.set()
            ready.set()

        ready = threading.Event()
        threading.Thread(target=scan, daemon=True).start()
        if not ready.wait(30) or not found:
            self.stop()
            raise RuntimeError("sandboxd did not print its listening line within 30 s")
        return found[0]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
