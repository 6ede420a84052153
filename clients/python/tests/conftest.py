"""Session fixtures: Docker, the test images, the server binary, one running server (and one
with a bearer token), all sharing a per-session container label that is swept at the end; and
for the documented examples, the starter image under a tag of this run's own, the debug
`sandboxd` and `sandboxctl`, and a server of their own with a label of their own."""

from __future__ import annotations

import os
import secrets
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from sandboxd import Client

import gym_loader
from support import (
    REPO_ROOT,
    ContainerLabel,
    Images,
    ServerProcess,
    docker,
    ensure_images,
    require_docker,
    server_binary,
)

gym_loader.install()


@pytest.fixture(scope="session")
def images() -> Images:
    require_docker()
    return ensure_images()


@pytest.fixture(scope="session")
def binary() -> Path:
    return server_binary()


@pytest.fixture(scope="session")
def label() -> Iterator[ContainerLabel]:
    label = ContainerLabel()
    yield label
    label.remove_all()


@pytest.fixture(scope="session")
def server_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sandboxd-server")


@pytest.fixture(scope="session")
def server(images: Images, binary: Path, label: ContainerLabel, server_dir: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(binary, label, server_dir)
    yield process
    process.stop()


@pytest.fixture
async def client(server: ServerProcess) -> AsyncIterator[Client]:
    """A client of the session's server, closed after the test."""
    async with Client(server.address) as client:
        yield client


@pytest.fixture(scope="session")
def token() -> str:
    return secrets.token_hex(16)


@pytest.fixture(scope="session")
def auth_server(
    images: Images, binary: Path, label: ContainerLabel, server_dir: Path, token: str
) -> Iterator[ServerProcess]:
    process = ServerProcess(binary, label, server_dir, token=token)
    yield process
    process.stop()


@pytest.fixture(scope="session")
def starter() -> Iterator[str]:
    """The quick start's first step (`bash scripts/starter-image.sh`), under a tag of this run's
    own so other runs on the daemon are not disturbed; removed at the end. The examples may use
    no other image."""
    require_docker()
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


@pytest.fixture(scope="session")
def binaries() -> Path:
    """The quick start's `cargo build` (debug here, as the other tests use)."""
    subprocess.run(
        ["cargo", "build", "-q", "-p", "sandboxd", "-p", "sandboxctl", "--bin", "sandboxd", "--bin", "sandboxctl"],
        cwd=REPO_ROOT,
        check=True,
        timeout=1800,
    )
    return Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target")) / "debug"


@pytest.fixture(scope="session")
def example_label() -> Iterator[ContainerLabel]:
    """The label of what the examples make (apart from the other tests', so an example's
    "nothing left" is about its own containers only)."""
    label = ContainerLabel()
    yield label
    label.remove_all()


@pytest.fixture(scope="session")
def example_server(
    starter: str, binaries: Path, example_label: ContainerLabel, server_dir: Path
) -> Iterator[ServerProcess]:
    """The reader's `sandboxd &`, on a port of its own; its sweep removes a network no sandbox
    used for a second (the shipped 600 s would outlast the tests that look for it gone)."""
    process = ServerProcess(
        binaries / "sandboxd",
        example_label,
        server_dir,
        create={"network_idle_s": 1},
        server={"sweep_interval_s": 1},
    )
    yield process
    process.stop()
