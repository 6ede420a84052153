"""docs/harnesses.md's examples run as written: SWE-ReX's deployment (the image named by
SWEREX_IMAGE, here the test image with Python and swe-rex) and mini-swe-agent's environment (the
starter image under this run's tag), each a Python script of its own against this run's
server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from markdown import DOCS, example, with_address, with_image
from python_image import ensure_swerex_image
from support import ContainerLabel, ServerProcess

HARNESSES = DOCS / "harnesses.md"


def run_python(script: Path, **env: str) -> str:
    out = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )
    assert out.returncode == 0, f"exit {out.returncode}\nstdout:\n{out.stdout}\nstderr:\n{out.stderr}"
    return out.stdout


def test_swerex_example(server: ServerProcess, label: ContainerLabel, tmp_path: Path) -> None:
    before = set(label.containers())
    script = tmp_path / "swerex_example.py"
    script.write_text(with_address(example("harnesses-swerex", HARNESSES), server.address))
    out = run_python(script, SWEREX_IMAGE=ensure_swerex_image())
    # SWE-ReX logs to stdout too: the example's own lines, in order.
    printed = [line for line in out.splitlines() if line in ("/tmp", "kept")]
    assert printed == ["/tmp", "kept"], out
    label.settle(before)


def test_minisweagent_example(server: ServerProcess, starter: str, label: ContainerLabel, tmp_path: Path) -> None:
    before = set(label.containers())
    script = tmp_path / "minisweagent_example.py"
    script.write_text(with_image(with_address(example("harnesses-minisweagent", HARNESSES), server.address), starter))
    out = run_python(script)
    expected = ["{'output': 'hello\\n', 'returncode': 0, 'exception_info': ''}", "-1 TimeoutExpired TIMEOUT"]
    assert [line for line in out.splitlines() if line in expected] == expected, out
    label.settle(before)
