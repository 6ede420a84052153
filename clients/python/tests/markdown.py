"""The documented examples, read from the markdown at test time.

Every fenced block with a language in README.md, clients/python/README.md and docs/*.md carries
a marker on the line before it, one of:

    <!-- example NAME: FILE -->          FILE (a test, or a script) runs it as written
    <!-- example not run: REASON -->     it cannot run as written (several hosts, minutes, ...)

Tests find an example by its NAME, so a reworded page never loses one silently, and
test_markdown_examples.py checks every block is marked and every named FILE runs its NAME.
Running "as written" allows only what a reader's machine does differently from this test's:
the starter image under this run's own tag, and the server at this run's own address.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from support import REPO_ROOT

README = REPO_ROOT / "README.md"
PACKAGE_README = REPO_ROOT / "clients" / "python" / "README.md"
DOCS = REPO_ROOT / "docs"
STARTER = "sandboxd-starter:latest"
# The address every example names (the server's and sandboxctl's default).
DEFAULT_ADDRESS = "127.0.0.1:50051"

MARKER = re.compile(r"^<!-- example (?:not run: (?P<reason>.+?)|(?P<name>[a-z0-9-]+): (?P<runner>\S+)) -->$")


def covered() -> list[Path]:
    """The documents whose examples must run."""
    return [README, PACKAGE_README, *sorted(DOCS.glob("*.md"))]


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    body: str
    marker: str | None  # the line before the fence

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"

    def parsed(self) -> re.Match[str] | None:
        return MARKER.match(self.marker) if self.marker is not None else None


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a document that name a language (a block without one is a diagram
    or an output, not an example)."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("```"):
            language = line[3:].strip()
            end = index + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if end == len(lines):
                raise AssertionError(f"{path}:{index + 1}: a fence that is never closed")
            if language:
                marker = lines[index - 1] if index > 0 else None
                body = "\n".join(lines[index + 1 : end]) + "\n"
                found.append(Block(path, index + 1, language, body, marker))
            index = end + 1
            continue
        index += 1
    return found


def example(name: str, path: Path | None = None) -> str:
    """The body of the example marked NAME (in `path`, or in exactly one covered document)."""
    found = [
        b
        for p in ([path] if path is not None else covered())
        for b in blocks(p)
        if (m := b.parsed()) is not None and m["name"] == name
    ]
    assert len(found) == 1, f"one example named {name!r}: {[b.where for b in found]}"
    return found[0].body


def with_image(text: str, tag: str) -> str:
    """The example with the starter image read as this run's tag."""
    assert STARTER in text, "the example does not use the starter image"
    return text.replace(STARTER, tag)


def with_address(text: str, address: str, default: str = DEFAULT_ADDRESS) -> str:
    """The example with its server address read as this run's (asserting it names one)."""
    assert default in text, f"the example does not name {default}"
    return text.replace(default, address)


def venv_bin() -> Path:
    """Where grpcurl and python live (the venv the tests run in)."""
    return Path(sys.executable).parent


def example_env(binaries: Path, address: str, **extra: str) -> dict[str, str]:
    """A reader's shell after the quick start: the binaries and the venv on PATH, and the
    server's address where sandboxctl and the examples read it."""
    return {
        **os.environ,
        "PATH": f"{binaries}:{venv_bin()}:{os.environ['PATH']}",
        "SANDBOXD_ADDR": address,
        **extra,
    }


def run_shell(
    script: str, env: dict[str, str], *, cwd: Path = REPO_ROOT, strict: bool = True, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """Runs `script` with bash (`strict`: -euo pipefail, and a non-zero exit fails the test), in
    a process group of its own: past `timeout` the whole group is killed, so a server or a
    forwarder the example started in the background never outlives a failed run."""
    argv = ["bash", "-euo", "pipefail", "-c", script] if strict else ["bash", "-c", script]
    process = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        raise AssertionError(f"not done within {timeout} s\nstdout:\n{stdout}\nstderr:\n{stderr}") from None
    out = subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)
    if strict:
        assert out.returncode == 0, f"exit {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    return out
