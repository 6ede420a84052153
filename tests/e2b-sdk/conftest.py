"""Runs E2B's own Python SDK tests (upstream/, vendored from e2b-dev/E2B under the MIT
license, see LICENSE and README.md) against a sandboxd with its E2B endpoint: one server for
the session, on the real daemon, its `base` template the test suite's bash image, the SDK
pointed at it by E2B_API_URL / E2B_SANDBOX_URL. Tests that need what only E2B's cloud has are
skipped by skips.txt, each with its reason."""

from __future__ import annotations

import os
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
    ensure_images,
    require_docker,
    server_binary,
)

sys.path.insert(0, str(HERE))
import base_template  # noqa: E402

# The CA of the stand-in public hosts (PEM) when the suite runs where they are served
# (scripts/test-e2b-network.sh): the template's curl trusts it, and the tests that reach public
# hosts run instead of being skipped.
STAND_INS_CA = os.environ.get("SANDBOXD_E2B_STAND_INS_CA") or None


def _skips() -> dict[str, str]:
    """`skips.txt`, plus `skips-<SDK version>.txt` when the suite runs with an SDK that has one
    (scripts/test-e2b-sdk.sh sets SANDBOXD_E2B_SDK_VERSION), plus `skips-public-internet.txt`
    unless the stand-in public hosts are there: `<node id prefix> | <reason>` a line; `#`
    starts a comment."""
    out: dict[str, str] = {}
    files = [HERE / "skips.txt"]
    version = os.environ.get("SANDBOXD_E2B_SDK_VERSION")
    if version:
        files.append(HERE / f"skips-{version}.txt")
    if STAND_INS_CA is None:
        files.append(HERE / "skips-public-internet.txt")
    for path in files:
        if not path.exists():
            continue
        for line in path.read_text().splitlines():
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


@pytest.fixture(scope="session", autouse=True)
def sandboxd_e2b(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    require_docker()
    images = ensure_images()
    label = ContainerLabel()
    workdir = tmp_path_factory.mktemp("sandboxd-e2b-upstream")
    base = base_template.build(
        images.bash, images.version, workdir, extra_ca=Path(STAND_INS_CA) if STAND_INS_CA else None
    )
    server = ServerProcess(
        server_binary(),
        label,
        workdir,
        server={
            "e2b": {
                "listen": "127.0.0.1:0",
                "templates": {"base": base},
                # The images E2B's template tests start from, on a machine without a registry:
                # `from_base_image()` (E2B's base) and `from_image("ubuntu:22.04")` build on the
                # same local image.
                "images": {"e2bdev/base": base, "ubuntu:22.04": base},
            }
        },
        create=base_template.SERVER_CREATE,
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


def _admit_newer_request_build_arguments() -> list[tuple[object, object]]:
    """The vendored `test_stacktrace.py` (both suites) mocks `request_build` with the
    signature of its own commit's SDK; the pinned SDK (2.63.0) also passes `min_free_disk_mb`.
    While a test runs, a mock without that parameter is wrapped to drop it (the tests never
    reach a server: every API call of theirs is mocked). Returns what to put back."""
    import inspect

    import e2b.template_async.main as async_main
    import e2b.template_sync.main as sync_main

    replaced: list[tuple[object, object]] = []
    for module in (sync_main, async_main):
        current = module.request_build
        params = inspect.signature(current).parameters
        if "min_free_disk_mb" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
            continue
        if inspect.iscoroutinefunction(current):

            async def shim(*args, _mock=current, **kwargs):  # type: ignore[no-untyped-def]
                kwargs.pop("min_free_disk_mb", None)
                return await _mock(*args, **kwargs)

        else:

            def shim(*args, _mock=current, **kwargs):  # type: ignore[no-untyped-def]
                kwargs.pop("min_free_disk_mb", None)
                return _mock(*args, **kwargs)

        module.request_build = shim
        replaced.append((module, current))
    return replaced


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    replaced = _admit_newer_request_build_arguments()
    try:
        yield
    finally:
        for module, original in replaced:
            module.request_build = original  # type: ignore[attr-defined]
