"""Every example of the READMEs and of docs/examples.md runs as written, from a clean state.

A clean state here: the only image an example may use is the starter image the README's quick
start builds (`bash scripts/starter-image.sh`). This module builds it under a tag of its own
(`sandboxd-readme-<hex>:latest`, so other test runs on the same daemon are not disturbed),
removes it at the end, and runs each example with `sandboxd-starter:latest` read as that tag.
The quick start's build steps (`cargo build --release`, the release `PATH`) are replaced by the
debug binaries this suite builds; everything else runs as the reader would run it, against a
server on a port of its own (`SANDBOXD_LISTEN` / `SANDBOXD_ADDR`), whose containers carry this
session's test label.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from support import REPO_ROOT, ContainerLabel, ServerProcess, docker, free_port

README = REPO_ROOT / "README.md"
PACKAGE_README = REPO_ROOT / "clients" / "python" / "README.md"
EXAMPLES = REPO_ROOT / "docs" / "examples.md"
STARTER = "sandboxd-starter:latest"
PACKAGE_EXAMPLE = "from sandboxd import AsyncSandbox, SandboxSpec\n\nasync def main() -> None:\n    spec"
TESTS = Path(__file__).resolve().parent
# Lines of the quick start that build what this suite has already built (debug binaries).
BUILD_STEPS = ("bash scripts/starter-image.sh", "cargo build --release", 'export PATH="$PWD/target/release:$PATH"')


def blocks(path: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", path.read_text(), flags=re.S)


def block_with(path: Path, language: str, marker: str) -> str:
    [found] = [b for b in blocks(path, language) if marker in b]
    return found


def section(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


@pytest.fixture(scope="module")
def starter() -> Iterator[str]:
    """The quick start's first step, under a tag of this run's own."""
    tag = f"sandboxd-readme-{uuid.uuid4().hex[:12]}:latest"
    out = subprocess.run(
        ["bash", "scripts/starter-image.sh", tag], cwd=REPO_ROOT, capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == tag
    try:
        yield tag
    finally:
        docker("rmi", "-f", tag, check=False)


@pytest.fixture(scope="module")
def binaries() -> Path:
    subprocess.run(
        ["cargo", "build", "-q", "-p", "sandboxd", "-p", "sandboxctl", "--bin", "sandboxd", "--bin", "sandboxctl"],
        cwd=REPO_ROOT,
        check=True,
        timeout=1800,
    )
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target")) / "debug"
    return target


@pytest.fixture(scope="module")
def example_server(starter: str, binaries: Path, label: ContainerLabel, server_dir: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(binaries / "sandboxd", label, server_dir)
    yield process
    process.stop()


def with_image(text: str, tag: str) -> str:
    assert STARTER in text, "the example does not use the starter image"
    return text.replace(STARTER, tag)


def run_python(code: str, server: ServerProcess, *, cwd: Path = REPO_ROOT, gym: bool = False) -> str:
    argv = [sys.executable, "-c", code]
    if gym:  # Gym's provider layer without its heavy dependencies (see gym_loader.py)
        argv = [sys.executable, "-c", f"import gym_loader; gym_loader.install()\nexec({code!r})"]
    out = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
        env={**os.environ, "SANDBOXD_ADDR": server.address, "PYTHONPATH": str(TESTS)},
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def venv_path() -> str:
    return f"{Path(sys.executable).parent}:{os.environ['PATH']}"


def test_both_readmes_carry_the_same_package_example() -> None:
    ours = block_with(
        README, "python", "from sandboxd import AsyncSandbox, SandboxSpec\n\nasync def main() -> None:\n    spec"
    )
    theirs = block_with(PACKAGE_README, "python", "from sandboxd import AsyncSandbox")
    assert ours == theirs


def test_every_example_uses_only_the_starter_image() -> None:
    for path in (README, PACKAGE_README, EXAMPLES):
        text = path.read_text()
        for image in re.findall(r'image[=:]\s*"([^"$]+)"', text) + re.findall(r'"image":\s*"([^"$]+)"', text):
            assert image in (STARTER, "image"), f"{path.name}: example image {image!r}"
        assert "busybox:latest" not in text and "python:3.12-slim" not in text and "sandboxd-test/" not in text
        assert "target/debug" not in text, f"{path.name} switches to a debug build"


def test_quick_start_runs_as_written(
    starter: str, binaries: Path, label: ContainerLabel, server_dir: Path, tmp_path: Path
) -> None:
    quick = block_with(README, "sh", "sandboxd & SERVER=$!")
    assert section(README, "## Quick start").count("```sh") == 1
    assert len(section(README, "## Quick start").splitlines()) < 60, "the quick start must fit in a page"
    lines = [line for line in quick.splitlines() if not line.startswith(BUILD_STEPS)]
    assert len(lines) == len(quick.splitlines()) - len(BUILD_STEPS)
    script = tmp_path / "quick-start.sh"
    script.write_text("set -euo pipefail\n" + with_image("\n".join(lines), starter) + "\nwait $SERVER\n")
    config = server_dir / f"readme-{uuid.uuid4().hex[:8]}.json"
    config.write_text(json.dumps({"docker": {"create": {"extra_run_args": label.run_args()}}}))
    address = f"127.0.0.1:{free_port()}"
    out = subprocess.run(
        ["bash", str(script)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={
            **os.environ,
            "PATH": f"{binaries}:{os.environ['PATH']}",
            "SANDBOXD_LISTEN": address,
            "SANDBOXD_ADDR": address,
            "SANDBOXD_CONFIG": str(config),
        },
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-2:] == ["hello", out.stdout.splitlines()[-1]]
    assert re.fullmatch(r"sandboxd-[0-9a-f]{32}", out.stdout.splitlines()[-1])  # what `rm` removed
    assert f"sandboxd listening on {address}" in out.stdout
    assert label.containers() == []  # `rm` removed it; nothing else was made


def test_readme_grpcurl_example_runs(example_server: ServerProcess, starter: str) -> None:
    grpcurl = Path(sys.executable).parent / "grpcurl"
    assert grpcurl.exists(), "grpcurl comes with `bash scripts/install-deps.sh`"
    block = block_with(README, "sh", "grpcurl -plaintext $ADDR describe")
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", with_image(block, starter)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PATH": venv_path(), "SANDBOXD_ADDR": example_server.address},
    )
    assert out.returncode == 0, out.stderr
    assert "rpc Create" in out.stdout
    assert base64.b64encode(b"hello\n").decode() in out.stdout
    assert '"owner": "me"' in out.stdout


def test_readme_grpcio_example_runs(example_server: ServerProcess, starter: str, tmp_path: Path) -> None:
    (tmp_path / "proto").symlink_to(REPO_ROOT / "proto")
    setup = block_with(README, "sh", "python -m grpc_tools.protoc")
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", setup],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": venv_path()},
    )
    assert out.returncode == 0, out.stderr
    code = block_with(README, "python", "sandbox_pb2_grpc as rpc")
    assert run_python(with_image(code, starter), example_server, cwd=tmp_path) == "0 hi\nseeded\n"


@pytest.mark.parametrize("readme", [README, PACKAGE_README], ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_package_example_runs(readme: Path, example_server: ServerProcess, starter: str) -> None:
    code = block_with(
        readme, "python", "from sandboxd import AsyncSandbox, SandboxSpec\n\nasync def main() -> None:\n    spec"
    )
    assert run_python(with_image(code, starter), example_server) == "3 hi\nb'uploaded'\n"


def test_gym_example_runs(example_server: ServerProcess, starter: str) -> None:
    code = block_with(README, "python", "create_provider")
    assert run_python(with_image(code, starter), example_server, gym=True) == "hi from gym\n"


def test_branching_example_runs(example_server: ServerProcess, starter: str) -> None:
    code = block_with(README, "python", "root.fork(")
    assert run_python(with_image(code, starter), example_server) == (
        "best child: 2 changed paths: 4\nSandboxStatus.PAUSED\n"
    )


def test_examples_md_quickstart_runs(example_server: ServerProcess, starter: str, tmp_path: Path) -> None:
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I",
            "proto",
            f"--python_out={stubs}",
            f"--grpc_python_out={stubs}",
        ]
        + [f"--pyi_out={stubs}", "sandbox/v1/sandbox.proto"],
        cwd=REPO_ROOT,
        check=True,
        timeout=120,
    )
    code = block_with(EXAMPLES, "python", "# quickstart.py")
    script = tmp_path / "quickstart.py"
    script.write_text(with_image(code, starter))
    out = subprocess.run(
        [sys.executable, str(script), example_server.address],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(stubs)},
    )
    assert out.returncode == 0, out.stderr
    [sandbox] = re.findall(r"^sandbox: (\S+)$", out.stdout, flags=re.M)
    assert out.stdout.rstrip().endswith(f"closed {sandbox}")
    assert "terminal exit code: 3" in out.stdout


def test_examples_md_grpcurl_examples_run(example_server: ServerProcess, starter: str) -> None:
    """Section 2's lifecycle and file blocks, in one shell, as a reader pastes them one after the
    other (the server of section 1 is this module's)."""
    grpcurl_section = section(EXAMPLES, "## 2. grpcurl")
    wanted = [b for b in blocks(EXAMPLES, "bash") if b in grpcurl_section and "$SID" in b]
    assert len(wanted) == 2, "the lifecycle block and the file block"
    script = "\n".join([f"ADDR={example_server.address}", *wanted])
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", with_image(script, starter)],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PATH": venv_path()},
    )
    assert out.returncode == 0, out.stderr
    assert "hello-grpcurl" in out.stdout and "SANDBOX_STATUS_RUNNING" in out.stdout
    assert base64.b64encode(b"uploaded by grpcurl\n").decode() in out.stdout
    assert '"bytesWritten": "20"' in out.stdout


def test_processes_and_port_forward_example_runs(example_server: ServerProcess, starter: str, binaries: Path) -> None:
    block = block_with(README, "sh", "sandboxctl port-forward $SB")
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", with_image(block, starter)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "PATH": f"{binaries}:{os.environ['PATH']}", "SANDBOXD_ADDR": example_server.address},
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "Forwarding from 127.0.0.1:18080 -> 8080" in lines
    assert "hi" in lines
    assert any(line.startswith("PROCESS ID") for line in lines)
    assert "exit status: 143" in lines
