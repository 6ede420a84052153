"""`sandboxd.harbor`: a real Harbor trial (Harbor from PyPI, under Python >= 3.12 in a venv of
its own that scripts/test-python.sh makes and names in SANDBOXD_HARBOR_PYTHON) of a small local
task with Harbor's oracle agent, on a running sandboxd and the real daemon; the verifier's
reward is read back from the trial's result."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from markdown import example, with_address
from support import REPO_ROOT, ContainerLabel, Images, ServerProcess

README = REPO_ROOT / "README.md"

HARBOR_PYTHON = os.environ.get("SANDBOXD_HARBOR_PYTHON")

pytestmark = pytest.mark.skipif(
    not HARBOR_PYTHON,
    reason="SANDBOXD_HARBOR_PYTHON is unset: scripts/test-python.sh makes Harbor's Python 3.12 venv and sets it",
)

TASK_TOML = """schema_version = "1.4"
artifacts = []
[verifier]
timeout_sec = 120.0
environment_mode = "shared"
[agent]
timeout_sec = 120.0
[environment]
network_mode = "public"
build_timeout_sec = 120.0
os = "linux"
"""


def make_task(root: Path, image: str, answer: str) -> Path:
    """A task whose verifier rewards `hello harbor` in /app/hello.txt; the oracle's solution
    writes `answer` there."""
    task = root / "hello"
    for sub in ("environment", "solution", "tests"):
        (task / sub).mkdir(parents=True)
    (task / "task.toml").write_text(TASK_TOML)
    (task / "instruction.md").write_text('Write "hello harbor" to /app/hello.txt.\n')
    (task / "environment" / "Dockerfile").write_text(f"FROM {image}\nWORKDIR /app\n")
    solve = task / "solution" / "solve.sh"
    solve.write_text(f'#!/bin/bash\nmkdir -p /app && echo "{answer}" > /app/hello.txt\n')
    test = task / "tests" / "test.sh"
    test.write_text(
        "#!/bin/bash\nmkdir -p /logs/verifier\n"
        'if [ "$(cat /app/hello.txt)" = "hello harbor" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n'
    )
    solve.chmod(0o755)
    test.chmod(0o755)
    return task


def run_trial(task: Path, server: ServerProcess, trials: Path) -> dict[str, float]:
    """README's "harbor-trial" command, as a reader runs it from the task's parent directory
    with Harbor's venv on PATH, at this run's server address."""
    assert HARBOR_PYTHON is not None
    command = with_address(example("harbor-trial", README), server.address)
    env = {**os.environ, "PATH": f"{Path(HARBOR_PYTHON).parent}:{os.environ['PATH']}"}
    out = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", f"{command.strip()} --trials-dir {trials}"],
        cwd=task.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    results = list(trials.glob("*/result.json"))
    assert len(results) == 1, out.stdout
    verifier = json.loads(results[0].read_text())["verifier_result"]
    rewards: dict[str, float] = verifier["rewards"]
    return rewards


@pytest.mark.parametrize(("answer", "reward"), [("hello harbor", 1.0), ("wrong", 0.0)])
def test_oracle_trial_on_sandboxd(
    answer: str, reward: float, server: ServerProcess, images: Images, label: ContainerLabel, tmp_path: Path
) -> None:
    before = set(label.containers())
    task = make_task(tmp_path, images.bash, answer)
    assert run_trial(task, server, tmp_path / "trials") == {"reward": reward}
    label.settle(before)  # the trial's sandbox was removed when it stopped
