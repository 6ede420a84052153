"""Runs E2B's own Python SDK tests (upstream/, vendored from e2b-dev/E2B under the MIT
license, see LICENSE and README.md) against a sandboxd with its E2B endpoint: one server for
the session, on the real daemon, its `base` template the test suite's bash image, the SDK
pointed at it by E2B_API_URL / E2B_SANDBOX_URL. Tests that need what only E2B's cloud has are
skipped by skips.txt, each with its reason."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(REPO / "clients" / "python" / "tests"))

from support import (  # noqa: E402
    ContainerLabel,
    ServerProcess,
    docker,
    ensure_images,
    require_docker,
    server_binary,
)


def _skips() -> dict[str, str]:
    """`skips.txt`: `<node id prefix> | <reason>` a line; `#` starts a comment."""
    out: dict[str, str] = {}
    for line in (HERE / "skips.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            node, _, reason = line.partition("|")
            out[node.strip()] = reason.strip()
    return out


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skips = _skips()
    for item in items:
        node = item.nodeid.removeprefix("upstream/")
        for prefix, reason in skips.items():
            if node == prefix or node.startswith(prefix + "::") or node.startswith(prefix + "["):
                item.add_marker(pytest.mark.skip(reason=reason))


# E2B's `base` as its tests expect it: the test suite's bash image with a user `user` (uid 1000)
# whose home is the working directory. Built from the bash image with no download.
BASE_TAG = "sandboxd-test/e2b-base:1"
BASE_DOCKERFILE = """FROM {bash}
COPY passwd group /etc/
RUN mkdir -p /home/user && chown 1000:1000 /home/user && chmod 755 /home/user
USER user
WORKDIR /home/user
LABEL sandboxd.test-image={version}
"""


def base_image(bash: str, version: str, workdir: Path) -> str:
    current = docker("image", "inspect", "--format", '{{index .Config.Labels "sandboxd.test-image"}}', BASE_TAG, check=False)
    if current.returncode == 0 and current.stdout.strip() == version:
        return BASE_TAG
    context = workdir / "e2b-base"
    context.mkdir()
    (context / "Dockerfile").write_text(BASE_DOCKERFILE.format(bash=bash, version=version))
    (context / "passwd").write_text(
        "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000:user:/home/user:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"
    )
    (context / "group").write_text("root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n")
    subprocess.run(
        ["docker", "build", "-q", "-t", BASE_TAG, str(context)],
        check=True,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
        capture_output=True,
        timeout=300,
    )
    return BASE_TAG


@pytest.fixture(scope="session", autouse=True)
def sandboxd_e2b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_docker()
    images = ensure_images()
    label = ContainerLabel()
    workdir = tmp_path_factory.mktemp("sandboxd-e2b-upstream")
    base = base_image(images.bash, images.version, workdir)
    server = ServerProcess(
        server_binary(),
        label,
        workdir,
        server={"e2b": {"listen": "127.0.0.1:0", "templates": {"base": base}}},
    )
    url = f"http://{server.e2b_address}"
    saved = {k: os.environ.get(k) for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY", "E2B_DOMAIN")}
    os.environ.update(E2B_API_URL=url, E2B_SANDBOX_URL=url, E2B_API_KEY="e2b_" + "0" * 40, E2B_DOMAIN="sandboxd.test")
    try:
        yield url
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()
        label.remove_all()
