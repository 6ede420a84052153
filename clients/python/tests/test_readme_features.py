"""The feature examples of docs/features.md (and docs/access.md's, docs/pools.md's) run as written
against a server of their own, with the starter image: typed file calls, processes and port forwarding, a network and a
volume the service owns, an egress policy set on a running sandbox, a narrower token, a warm
pool. Each leaves nothing behind: what it makes it removes."""

from __future__ import annotations

import json
import time
from pathlib import Path

from markdown import DOCS, example, example_env, run_shell, with_image
from support import ContainerLabel, ServerProcess, docker

FEATURES = DOCS / "features.md"


def run_example(name: str, path: Path, server: ServerProcess, starter: str, binaries: Path, cwd: Path) -> str:
    out = run_shell(with_image(example(name, path), starter), example_env(binaries, server.address), cwd=cwd)
    return out.stdout + out.stderr


def test_files_example_runs(
    example_server: ServerProcess, starter: str, binaries: Path, example_label: ContainerLabel, tmp_path: Path
) -> None:
    before = set(example_label.containers())
    out = run_example("files-ctl", FEATURES, example_server, starter, binaries, tmp_path)
    assert "drwxr-x--- 0:0" in out and "/work/out" in out
    assert "a name\nwith a newline" in out  # the NUL-separated listing kept the newline whole
    example_label.settle(before)


def test_processes_and_port_forward_example_runs(
    example_server: ServerProcess, starter: str, binaries: Path, example_label: ContainerLabel, tmp_path: Path
) -> None:
    before = set(example_label.containers())
    lines = run_example("processes-port-forward", FEATURES, example_server, starter, binaries, tmp_path).splitlines()
    assert "Forwarding from 127.0.0.1:18080 -> 8080" in lines
    assert "hi" in lines
    assert any(line.startswith("PROCESS ID") for line in lines)
    assert "exit status: 143" in lines
    example_label.settle(before)


def test_network_and_volume_example_runs(
    example_server: ServerProcess, starter: str, binaries: Path, example_label: ContainerLabel, tmp_path: Path
) -> None:
    before = set(example_label.containers())
    out = run_example("runtime-network-volume", FEATURES, example_server, starter, binaries, tmp_path)
    assert "\tlab" in out and "shared\nreached" in out, out
    example_label.settle(before)

    # The volume went with `volume rm`; the network goes by the sweep once no sandbox used it
    # for `docker.create.network_idle_s` (1 s on this server).
    def left(kind: str) -> list[str]:
        out = docker(kind, "ls", "-q", "--filter", f"label=sandboxd.test.case={example_label.value}", check=False)
        return out.stdout.split()

    assert left("volume") == [], "volumes left"
    deadline = time.monotonic() + 30
    while left("network") and time.monotonic() < deadline:
        time.sleep(0.5)
    assert left("network") == [], "networks left past the sweep"


def test_egress_example_runs(
    example_server: ServerProcess, starter: str, binaries: Path, example_label: ContainerLabel, tmp_path: Path
) -> None:
    before = set(example_label.containers())
    out = run_example("egress-set-policy", FEATURES, example_server, starter, binaries, tmp_path)
    assert "refused" in out and "Segmentation fault" not in out, out
    example_label.settle(before)


def test_tokens_example_runs(
    example_server: ServerProcess, starter: str, binaries: Path, example_label: ContainerLabel, tmp_path: Path
) -> None:
    before = set(example_label.containers())
    out = run_example("tokens-grant", DOCS / "access.md", example_server, starter, binaries, tmp_path)
    assert "graded" in out and "token id" in out
    assert "sandboxctl: PERMISSION_DENIED: " in out and "exit status: 1" in out
    example_label.settle(before)


def test_pools_example_runs(
    example_server: ServerProcess, starter: str, binaries: Path, example_label: ContainerLabel, tmp_path: Path
) -> None:
    before = set(example_label.containers())
    out = run_example("pools-ctl", DOCS / "pools.md", example_server, starter, binaries, tmp_path)
    assert "hi from /tmp" in out and "unclaimed sandboxes removed" in out, out
    example_label.settle(before)
    pools = run_shell("sandboxctl pool ls -o json", example_env(binaries, example_server.address)).stdout
    assert json.loads(pools) == []
