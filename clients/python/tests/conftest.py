"""Session fixtures: Docker, the test images, the server binary, one running server (and one
with a bearer token), all sharing a per-session container label that is swept at the end."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

import gym_loader
from support import ContainerLabel, Images, ServerProcess, ensure_images, require_docker, server_binary

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
