"""`sandboxd.minisweagent`: mini-swe-agent 2.4.6's environment tests (its local and Docker
environments' tests, `tests/environments/test_local.py` and `test_docker.py`, adapted: the same
checks with this class in place of `docker` and a sandbox of the test bash image in place of a
container), its environment loader, sandboxd's failures in mini-swe-agent's result form, and one
agent run end to end with mini-swe-agent's deterministic test model on a task of several
commands, on a real server and daemon."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
import yaml  # type: ignore[import-untyped]

import sandboxd
from sandboxd.minisweagent import SandboxdEnvironment, SandboxdEnvironmentConfig, duration_s

from support import NO_SUCH_IMAGE, ContainerLabel, Images, ServerProcess

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")

from minisweagent import package_dir  # noqa: E402
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.environments import get_environment  # noqa: E402
from minisweagent.models.test_models import DeterministicModel, make_output  # noqa: E402

ENV_CLASS = "sandboxd.minisweagent.SandboxdEnvironment"


@pytest.fixture
def make_env(server: ServerProcess, images: Images) -> Iterator[Any]:
    """Environments of the test bash image on the session's server, cleaned up after the test."""
    made: list[SandboxdEnvironment] = []

    def make(**config: Any) -> SandboxdEnvironment:
        env = SandboxdEnvironment(image=images.bash, address=server.address, **config)
        made.append(env)
        return env

    yield make
    for env in made:
        env.cleanup()


def test_config_defaults() -> None:
    """test_docker_environment_config_defaults."""
    config = SandboxdEnvironmentConfig(image="python:3.11")
    assert config.image == "python:3.11"
    assert config.cwd == "/"
    assert config.env == {}
    assert config.forward_env == []
    assert config.timeout == 30
    assert config.interpreter == ["bash", "-lc"]
    assert duration_s(config.container_timeout) == 7200
    assert duration_s("90") == 90 and duration_s("3s") == 3 and duration_s("30m") == 1800
    with pytest.raises(ValueError, match="container_timeout"):
        duration_s("soon")


def test_loaded_by_import_path(server: ServerProcess, images: Images) -> None:
    """mini-swe-agent's own loader builds it from a config naming the class."""
    env = get_environment({"environment_class": ENV_CLASS, "image": images.bash, "address": server.address})
    try:
        assert isinstance(env, SandboxdEnvironment)
        assert env.execute({"command": "echo 'hello world'"}) == {
            "output": "hello world\n",
            "returncode": 0,
            "exception_info": "",
        }
        assert env.serialize()["info"]["config"]["environment_type"] == ENV_CLASS
    finally:
        env.cleanup()  # type: ignore[attr-defined]


def test_execution_env_cwd_and_output(make_env: Any) -> None:
    """test_docker_environment_basic_execution, set_env_variables, forward_env_variables,
    forward_nonexistent_env_variables, combined_env_and_forward, env_override_forward,
    custom_cwd, cwd_parameter_override, command_failure; test_local's stderr_capture,
    nonexistent_command, return_codes, multiline_output, file_operations, shell_features."""
    host = {"HOST_VAR": "from_host", "CONFLICT_VAR": "from_host"}
    with patch.dict(os.environ, host):
        env = make_env(
            env={"TEST_VAR": "test_value", "ANOTHER_VAR": "another_value", "CONFLICT_VAR": "from_config"},
            forward_env=["HOST_VAR", "CONFLICT_VAR", "NONEXISTENT_VAR"],
            cwd="/tmp",
        )
        # Forwarded when the command runs, as the Docker environment reads them.
        assert env.execute({"command": "echo $HOST_VAR $CONFLICT_VAR"})["output"] == "from_host from_config\n"
    result = env.execute({"command": "echo 'hello world'"})
    assert result["returncode"] == 0 and "hello world" in result["output"]
    assert "test_value another_value" in env.execute({"command": "echo $TEST_VAR $ANOTHER_VAR"})["output"]
    assert "[]" in env.execute({"command": 'echo "[$NONEXISTENT_VAR]"'})["output"]
    assert env.execute({"command": "pwd"})["output"] == "/tmp\n"
    assert env.execute({"command": "pwd"}, cwd="/")["output"] == "/\n"
    for command, code in (("echo 'test'", 0), ("exit 1", 1), ("exit 42", 42)):
        assert env.execute({"command": command})["returncode"] == code
    assert env.execute({"command": "exit 1"})["output"] == ""
    missing = env.execute({"command": "nonexistent_command_12345"})
    assert missing["returncode"] != 0 and "nonexistent_command_12345" in missing["output"]
    both = env.execute({"command": "echo out; echo 'error message' >&2; echo out2"})
    assert both == {"output": "out\nerror message\nout2\n", "returncode": 0, "exception_info": ""}
    lines = env.execute({"command": "echo -e 'line1\\nline2\\nline3'"})["output"].strip().split("\n")
    assert lines == ["line1", "line2", "line3"]
    assert env.execute({"command": "echo 'test content' > test.txt && cat test.txt"})["output"] == "test content\n"
    assert env.execute({"command": "cat /tmp/test.txt"})["output"] == "test content\n"
    assert env.execute({"command": "echo 'hello world' | grep 'world'"})["output"] == "hello world\n"
    assert env.execute({"command": "echo $(echo 'nested')"})["output"] == "nested\n"


def test_timeout_is_reported_as_local_and_docker_do(make_env: Any) -> None:
    """test_local_environment_timeout and timeout_kills_child_process: a structured result
    (returncode -1, `TimeoutExpired`), the command's whole process tree gone, plus the kind."""
    env = make_env(timeout=1)
    started = time.monotonic()
    result = env.execute({"command": "sleep 300 & echo $! > /tmp/child.pid; wait"})
    assert time.monotonic() - started < 30
    assert result["returncode"] == -1
    assert "timed out" in result["exception_info"]
    assert result["extra"]["exception_type"] == "TimeoutExpired"
    assert result["extra"]["failure_kind"] == "TIMEOUT" and result["extra"]["is_task_fault"]
    gone = env.execute({"command": "kill -0 $(cat /tmp/child.pid) 2>/dev/null && echo alive || echo gone"}, timeout=10)
    assert gone["output"] == "gone\n"


def test_container_timeout_ends_the_sandbox(make_env: Any) -> None:
    """test_docker_environment_custom_container_timeout: after its lease the sandbox is removed,
    and a command then reads as an infrastructure failure (SANDBOX_GONE), not the task's."""
    env = make_env(container_timeout="2s")
    assert env.execute({"command": "echo 'container is running'"})["output"] == "container is running\n"
    deadline = time.monotonic() + 30
    while (result := env.execute({"command": "echo still running"}))["returncode"] == 0:
        assert time.monotonic() < deadline, "the sandbox outlived its lease by 30 s"
        time.sleep(0.5)
    assert result["returncode"] == -1
    assert result["extra"]["failure_kind"] == "SANDBOX_GONE"
    assert result["extra"]["is_task_fault"] is False and result["extra"]["is_retry_safe"] is True
    assert result["extra"]["exception_type"] in {"SandboxGone", "SandboxGoneSandboxNotFound"}


def test_create_failure_is_docker_runs_error(server: ServerProcess, label: ContainerLabel) -> None:
    """A sandbox that cannot be made raises what a failed `docker run` raises in the Docker
    environment (`subprocess.CalledProcessError`), which is also sandboxd's typed failure."""
    before = set(label.containers())
    with pytest.raises(subprocess.CalledProcessError) as raised:
        SandboxdEnvironment(image=NO_SUCH_IMAGE, address=server.address)
    assert isinstance(raised.value, sandboxd.CreateRejected)
    assert raised.value.failure_kind is sandboxd.FailureKind.CREATE_FAILED
    label.settle(before)


def test_agent_run_end_to_end(server: ServerProcess, images: Images, label: ContainerLabel) -> None:
    """mini-swe-agent's DefaultAgent with its default config and deterministic test model on a
    task of several commands (make a file, count its lines into another, check, submit); the
    trajectory's observations are the sandbox's outputs, the submission is the count, and the
    sandbox is gone after cleanup."""
    before = set(label.containers())
    agent_config = yaml.safe_load((Path(package_dir) / "config" / "default.yaml").read_text())["agent"]
    steps = [
        ("Make the input.", "mkdir -p /work && printf 'a\\nb\\nc\\n' > /work/in.txt"),
        ("Count its lines.", "cd /work && wc -l < in.txt | tr -d ' ' > count.txt"),
        ("Check the count.", "cat /work/count.txt"),
        ("Submit.", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat /work/count.txt"),
    ]
    model = DeterministicModel(  # type: ignore[no-untyped-call]
        outputs=[make_output(thought, [{"command": cmd}]) for thought, cmd in steps]
    )
    env = SandboxdEnvironment(image=images.bash, address=server.address, env={"PAGER": "cat"})
    try:
        agent = DefaultAgent(model, env, **agent_config)
        info = agent.run("Count the lines of /work/in.txt into /work/count.txt.")
        assert info["exit_status"] == "Submitted"
        assert info["submission"] == "3\n"
        observations = [m["content"] for m in agent.messages if m["role"] == "user"][1:]
        assert len(observations) == 3
        assert "<returncode>0</returncode>" in observations[0] and "3" in observations[2]
        assert env.execute({"command": "cat /work/in.txt"})["output"] == "a\nb\nc\n"
    finally:
        env.cleanup()
    label.settle(before)
