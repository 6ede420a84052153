"""`sandboxd.swerex`: SWE-ReX's deployment interface on a real server and daemon, with the test
image that has Python and swe-rex inside (tests/python_image.py). SWE-ReX's own deployment tests
adapted (start, alive, stop; `get_deployment` of the config), a SWE-agent-style session driven as
SWE-agent drives one (each call in its own `asyncio.run`), the two tests of SWE-ReX's own suite
that need the server's filesystem to be the test's (tests/swe-rex/skips.txt) done through
sandboxd instead, and sandboxd's failures arriving as SWE-ReX's exception types."""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import pydantic
import pytest
from swerex.deployment.config import get_deployment
from swerex.exceptions import (
    CommandTimeoutError,
    DeploymentNotStartedError,
    DeploymentStartupError,
    NonZeroExitCodeError,
    SwerexException,
)
from swerex.runtime.abstract import (
    BashAction,
    BashInterruptAction,
    BashObservation,
    CloseBashSessionRequest,
    Command,
    CreateBashSessionRequest,
    ReadFileRequest,
    UploadRequest,
    WriteFileRequest,
)

import sandboxd
from sandboxd import AsyncSandbox
from sandboxd.swerex import SandboxdDeployment, SandboxdDeploymentConfig, SandboxdRuntime

from python_image import ensure_swerex_image
from support import NO_SUCH_IMAGE, ContainerLabel, ServerProcess, require_docker


@pytest.fixture(scope="session")
def swerex_image() -> str:
    require_docker()
    return ensure_swerex_image()


@pytest.fixture(scope="module")
def shared(server: ServerProcess, swerex_image: str) -> Iterator[SandboxdDeployment]:
    """One started deployment for the tests that only use it (started and stopped in loops of
    their own)."""
    deployment = deployment_of(server, swerex_image, env={"GREETING": "hi"})
    asyncio.run(deployment.start())
    yield deployment
    asyncio.run(deployment.stop())


def deployment_of(server: ServerProcess, image: str, **config: object) -> SandboxdDeployment:
    return SandboxdDeployment(image=image, address=server.address, startup_timeout=120, **config)  # type: ignore[arg-type]


def test_get_deployment_names_the_config_class() -> None:
    """SWE-ReX's test_get_deployment, for this config: its own `get_deployment` builds it."""
    deployment = get_deployment(SandboxdDeploymentConfig(image="test"))  # type: ignore[arg-type]
    assert isinstance(deployment, SandboxdDeployment)
    assert SandboxdDeploymentConfig(image="test").type == "sandboxd"
    with pytest.raises(pydantic.ValidationError, match="docker_args"):
        SandboxdDeploymentConfig(image="test", docker_args=["--privileged"])  # type: ignore[call-arg]


def test_deployment_starts_answers_and_stops(server: ServerProcess, swerex_image: str, label: ContainerLabel) -> None:
    """SWE-ReX's test_docker_deployment on sandboxd: not alive (an error) before start, alive
    after, and stop removes the sandbox; each step in its own event loop."""
    before = set(label.containers())
    deployment = deployment_of(server, swerex_image)
    with pytest.raises(DeploymentNotStartedError):
        asyncio.run(deployment.is_alive())
    asyncio.run(deployment.start())
    try:
        assert asyncio.run(deployment.is_alive())
        assert deployment.sandbox_id in {info.ref.sandbox_id for info in asyncio.run(_listed(server))}
    finally:
        asyncio.run(deployment.stop())
    label.settle(before)
    with pytest.raises(DeploymentNotStartedError):
        asyncio.run(deployment.is_alive())


async def _listed(server: ServerProcess) -> list[sandboxd.SandboxInfo]:
    async with sandboxd.Client(server.address) as client:
        return [info async for info in client.list_all(labels={"swe-rex": "1"})]


def test_swe_agent_style_session(shared: SandboxdDeployment, tmp_path: Path) -> None:
    """What SWE-agent does with a deployment: a bash session, commands whose state carries over,
    a failing command, a timeout and the interrupt after it, files written, read and uploaded,
    the session closed; every call in its own `asyncio.run`, as SWE-agent makes them."""
    runtime = shared.runtime
    asyncio.run(runtime.create_session(CreateBashSessionRequest(session="main")))
    try:

        def run(command: str, check: Literal["silent", "raise", "ignore"]) -> BashObservation:
            return asyncio.run(
                runtime.run_in_session(BashAction(command=command, session="main", timeout=10, check=check))
            )

        run("mkdir -p /repo && cd /repo && export ANSWER=42", check="raise")
        assert run("pwd; echo $ANSWER", check="raise").output == "/repo\n42\n"
        assert run("false", check="silent").exit_code == 1
        with pytest.raises(NonZeroExitCodeError):
            run("false", check="raise")
        with pytest.raises(CommandTimeoutError):
            asyncio.run(runtime.run_in_session(BashAction(command="sleep 30", session="main", timeout=0.5)))
        asyncio.run(runtime.run_in_session(BashInterruptAction(session="main")))
        assert run("echo after", check="raise").output == "after\n"

        asyncio.run(runtime.write_file(WriteFileRequest(path="/repo/src/app.py", content="print('hi')\n")))
        assert asyncio.run(runtime.read_file(ReadFileRequest(path="/repo/src/app.py"))).content == "print('hi')\n"
        assert run("python src/app.py", check="raise").output == "hi\n"
        source = tmp_path / "upload"
        (source / "pkg").mkdir(parents=True)
        (source / "pkg" / "data.txt").write_text("uploaded")
        asyncio.run(runtime.upload(UploadRequest(source_path=str(source), target_path="/repo/up")))
        assert run("cat /repo/up/pkg/data.txt", check="raise").output == "uploaded"
        listing = asyncio.run(runtime.execute(Command(command=["ls", "/repo"], shell=False)))
        assert listing.stdout.split() == ["src", "up"]
    finally:
        asyncio.run(runtime.close_session(CloseBashSessionRequest(session="main")))


async def test_files_seen_by_sandboxd_and_by_swerex(shared: SandboxdDeployment) -> None:
    """SWE-ReX's test_read_write_file and test_read_large_file with the sandbox's filesystem in
    place of the test's own: what the server writes, sandboxd reads, and a 1 MB file sandboxd
    uploads, the server reads whole."""
    runtime, sandbox = shared.runtime, shared.sandbox
    await runtime.write_file(WriteFileRequest(path="/tmp/written.txt", content="test"))
    assert await shared.call(sandbox.download_file("/tmp/written.txt")) == b"test"
    content = "x" * 1024 * 1024
    await shared.call(sandbox.upload_file("/tmp/large.txt", content.encode()))
    assert len((await runtime.read_file(ReadFileRequest(path="/tmp/large.txt"))).content) == len(content)


def test_create_failure_is_a_deployment_startup_error(server: ServerProcess, label: ContainerLabel) -> None:
    """A sandbox that cannot be created: SWE-ReX's `DeploymentStartupError`, also sandboxd's
    typed failure (CREATE_FAILED: the same spec fails again), nothing left behind."""
    before = set(label.containers())
    deployment = deployment_of(server, NO_SUCH_IMAGE)
    with pytest.raises(DeploymentStartupError) as raised:
        asyncio.run(deployment.start())
    assert isinstance(raised.value, sandboxd.CreateRejected)
    assert raised.value.failure_kind is sandboxd.FailureKind.CREATE_FAILED
    assert not raised.value.is_retry_safe
    label.settle(before)
    with pytest.raises(DeploymentNotStartedError):
        _ = deployment.runtime


def test_a_server_that_never_answers_fails_the_start(
    server: ServerProcess, swerex_image: str, label: ContainerLabel
) -> None:
    """A `remote_command` that exits: the start fails with what it printed, and the sandbox is
    removed."""
    before = set(label.containers())
    deployment = deployment_of(server, swerex_image, remote_command="echo no server here; exit 3 #")
    deployment._config.startup_timeout = 5
    with pytest.raises(SwerexException, match="no server here"):
        asyncio.run(deployment.start())
    label.settle(before)


def test_a_sandbox_gone_mid_run_is_a_swerex_exception(server: ServerProcess, swerex_image: str) -> None:
    """The sandbox removed from outside while the agent runs: the next call raises a
    `SwerexException` (SWE-agent ends the run as an environment error) that is also
    `sandboxd.SandboxGone`, so a trainer masks the rollout; `is_alive` raises the same."""
    deployment = deployment_of(server, swerex_image)
    asyncio.run(deployment.start())
    try:
        runtime: SandboxdRuntime = deployment.runtime
        asyncio.run(runtime.create_session(CreateBashSessionRequest()))
        subprocess.run(["docker", "rm", "-f", deployment.sandbox_id], check=True, capture_output=True, timeout=60)
        with pytest.raises(SwerexException) as raised:
            asyncio.run(runtime.run_in_session(BashAction(command="echo hi", timeout=5)))
        assert isinstance(raised.value, sandboxd.SandboxGone)
        assert raised.value.failure_kind is sandboxd.FailureKind.SANDBOX_GONE
        assert not raised.value.is_task_fault
        with pytest.raises(sandboxd.SandboxGone):
            asyncio.run(deployment.is_alive())
    finally:
        asyncio.run(deployment.stop())


async def test_a_sandbox_of_the_package_runs_the_server_too(shared: SandboxdDeployment, server: ServerProcess) -> None:
    """The deployment's sandbox is an ordinary one: the package's own calls reach it, and the
    config's environment is the server's."""
    sandbox = await AsyncSandbox.connect(shared.sandbox_id, address=server.address)
    result = await sandbox.exec('echo "$GREETING"; ps | grep -c "[s]werex"')
    assert result.stdout_text.split() == ["hi", "1"]
    await sandbox.client.close()
    observed = await shared.runtime.execute(Command(command="echo $GREETING", shell=True))
    assert observed.stdout == "hi\n"
