"""Runs SWE-ReX's own tests (the `tests/` of its 1.4.0 source distribution from PyPI, which
ships them without their conftest) against `sandboxd.swerex.SandboxdDeployment`: this file is
copied there as `tests/conftest.py` by scripts/test-python.sh and gives the fixtures those tests
name (`remote_server`, `remote_runtime`, `runtime_with_default_session`, `_Action`, `_Command`,
`TEST_API_KEY`). Their server is `swerex-remote` in one sandbox of a sandboxd on the real daemon,
reached through sandboxd's port forward; tests that assume the server shares the test's own
filesystem are skipped by skips.txt, each with its reason."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(os.environ["SANDBOXD_REPO_ROOT"])
sys.path.insert(0, str(REPO / "clients" / "python" / "tests"))

from python_image import ensure_swerex_image  # noqa: E402
from swerex.runtime.abstract import (  # noqa: E402
    BashAction,
    CloseBashSessionRequest,
    Command,
    CreateBashSessionRequest,
)

from sandboxd.swerex import SandboxdDeployment, SandboxdRuntime  # noqa: E402

from support import ContainerLabel, ServerProcess, require_docker, server_binary  # noqa: E402

TEST_API_KEY = "sandboxd-swerex-upstream-key"


def _skips() -> dict[str, str]:
    """`skips.txt`: `<node id> | <reason>` a line; `#` starts a comment."""
    out: dict[str, str] = {}
    for line in (REPO / "tests" / "swe-rex" / "skips.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            node, _, reason = line.partition("|")
            out[node.strip()] = reason.strip()
    return out


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skips = _skips()
    for item in items:
        reason = skips.get(item.nodeid)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


@dataclass
class RemoteServer:
    port: int

    @property
    def headers(self) -> dict[str, str]:
        return {"X-API-Key": TEST_API_KEY}


@pytest.fixture(scope="session")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxdDeployment]:
    """One sandbox with `swerex-remote` for the session, on a sandboxd of its own; started and
    stopped in loops of their own, as SWE-agent does."""
    require_docker()
    image = ensure_swerex_image()
    label = ContainerLabel()
    server = ServerProcess(server_binary(), label, tmp_path_factory.mktemp("sandboxd"))
    deployment = SandboxdDeployment(image=image, address=server.address, auth_token=TEST_API_KEY)
    try:
        asyncio.run(deployment.start())
        yield deployment
    finally:
        asyncio.run(deployment.stop())
        server.stop()
        label.remove_all()


@pytest.fixture(scope="session")
def remote_server(deployment: SandboxdDeployment) -> RemoteServer:
    port = deployment.runtime._config.port
    assert port is not None
    return RemoteServer(port)


@pytest.fixture
async def remote_runtime(deployment: SandboxdDeployment, remote_server: RemoteServer) -> AsyncIterator[SandboxdRuntime]:
    runtime = SandboxdRuntime(deployment, host="http://127.0.0.1", port=remote_server.port, auth_token=TEST_API_KEY)
    yield runtime
    await runtime.close()


@pytest.fixture
async def runtime_with_default_session(remote_runtime: SandboxdRuntime) -> AsyncIterator[SandboxdRuntime]:
    await remote_runtime.create_session(CreateBashSessionRequest())
    yield remote_runtime
    await remote_runtime.close_session(CloseBashSessionRequest())


class _Action(BashAction):
    timeout: float | None = 5


class _Command(Command):
    timeout: float | None = 5
