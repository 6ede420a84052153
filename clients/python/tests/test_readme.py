"""The README's quick path runs as written, from a clean state: the quick start, grpcurl, the
grpcio stubs and example, the Python package's example (in both READMEs), the NeMo Gym example
and the branching example.

Each example is read from the markdown by its marker (see markdown.py). The only image an
example may use is the starter image the quick start builds, here under this run's own tag
(`starter`); the quick start's build steps are replaced by the debug binaries this suite builds;
everything else runs as the reader would run it, against a server on a port of its own whose
containers carry this run's example label.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from markdown import DOCS, PACKAGE_README, README, example, example_env, run_shell, with_image
from support import REPO_ROOT, ContainerLabel, ServerProcess, free_port

TESTS = Path(__file__).resolve().parent
# Lines of the quick start that build what this suite has already built (debug binaries).
BUILD_STEPS = ("bash scripts/starter-image.sh", "cargo build --release", 'export PATH="$PWD/target/release:$PATH"')


def section(path: Path, heading: str) -> str:
    text = path.read_text()
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else len(text)]


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


def test_quick_start_runs_as_written(
    starter: str, binaries: Path, example_label: ContainerLabel, server_dir: Path, tmp_path: Path
) -> None:
    quick = example("quick-start", README)
    assert section(README, "## Quick start").count("```sh") == 1
    assert len(section(README, "## Quick start").splitlines()) < 60, "the quick start must fit in a page"
    lines = [line for line in quick.splitlines() if not line.startswith(BUILD_STEPS)]
    assert len(lines) == len(quick.splitlines()) - len(BUILD_STEPS)
    script = "\n".join(lines) + "\nwait $SERVER\n"
    config = server_dir / f"readme-{uuid.uuid4().hex[:8]}.json"
    config.write_text(json.dumps({"docker": {"create": {"extra_run_args": example_label.run_args()}}}))
    address = f"127.0.0.1:{free_port()}"
    env = example_env(binaries, address, SANDBOXD_LISTEN=address, SANDBOXD_CONFIG=str(config))
    out = run_shell(with_image(script, starter), env, cwd=tmp_path)
    assert out.stdout.splitlines()[-2:] == ["hello", out.stdout.splitlines()[-1]]
    assert re.fullmatch(r"sandboxd-[0-9a-f]{32}", out.stdout.splitlines()[-1])  # what `rm` removed
    assert f"sandboxd listening on {address}" in out.stdout
    assert example_label.containers() == []  # `rm` removed it; nothing else was made


def test_grpcurl_tour_runs(example_server: ServerProcess, starter: str, binaries: Path) -> None:
    env = example_env(binaries, example_server.address)
    out = run_shell(with_image(example("grpcurl-tour", README), starter), env)
    assert "rpc Create" in out.stdout
    assert base64.b64encode(b"hello\n").decode() in out.stdout
    assert '"owner": "me"' in out.stdout


def test_grpcio_stubs_and_example_run(
    example_server: ServerProcess, starter: str, binaries: Path, tmp_path: Path
) -> None:
    (tmp_path / "proto").symlink_to(REPO_ROOT / "proto")
    run_shell(example("grpcio-stubs", README), example_env(binaries, example_server.address), cwd=tmp_path)
    code = example("grpcio-example", README)
    assert run_python(with_image(code, starter), example_server, cwd=tmp_path) == "0 hi\nseeded\n"


def test_both_readmes_carry_the_same_package_example() -> None:
    assert example("package-example", README) == example("package-example", PACKAGE_README)


@pytest.mark.parametrize("readme", [README, PACKAGE_README], ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_package_example_runs(readme: Path, example_server: ServerProcess, starter: str) -> None:
    code = example("package-example", readme)
    assert run_python(with_image(code, starter), example_server) == "3 hi\nb'uploaded'\n"


def test_gym_example_runs(example_server: ServerProcess, starter: str) -> None:
    code = example("gym-example", README)
    assert run_python(with_image(code, starter), example_server, gym=True) == "hi from gym\n"


def test_branching_example_runs(example_server: ServerProcess, starter: str, example_label: ContainerLabel) -> None:
    before = set(example_label.containers())
    code = example("branching", DOCS / "features.md")
    assert run_python(with_image(code, starter), example_server) == (
        "best child: 2 changed paths: 4\nSandboxStatus.PAUSED\n"
    )
    example_label.settle(before)  # the root (closed by `async with`) and the children
