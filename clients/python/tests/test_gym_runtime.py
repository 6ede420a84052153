"""Gym's network, runtime-requirement and shared-storage capabilities of `SandboxdProvider`
against a real server and Docker: sandboxes on one server network reach each other by
`network_address` and by the names `set_hosts` gives; `cap_add` and `shm_size` go from
`validate_runtime_requirements`' metadata into the sandbox (and a capability the operator did
not allow is refused); a shared volume is mounted whole and through a `source` directory."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from nemo_gym.sandbox.providers import SandboxCreateError, SandboxSpec, create_provider

from support import ContainerLabel, Images, ServerProcess


@pytest.fixture(scope="module")
def ptrace_server(images: Images, binary: Path, label: ContainerLabel, server_dir: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(binary, label, server_dir, create={"allowed_cap_add": ["SYS_PTRACE"]})
    yield process
    process.stop()


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def provider(ptrace_server: ServerProcess) -> AsyncIterator[Any]:
    provider = create_provider(
        {
            "sandboxd": {
                "address": ptrace_server.address,
                "network": _unique("gym"),
                "shared_volume": _unique("shared"),
            }
        }
    )
    yield provider
    await provider.aclose()


async def test_sandboxes_reach_each_other_by_address_and_by_set_hosts(provider: Any, images: Images) -> None:
    provider.validate_networking()
    web = await provider.create(SandboxSpec(image=images.busybox))
    caller = await provider.create(SandboxSpec(image=images.busybox))
    try:
        address = await provider.network_address(web)
        assert address.count(".") == 3, address
        served = await provider.exec(web, "mkdir -p /www && echo lab > /www/index.html && httpd -p 8080 -h /www")
        assert served.return_code == 0, served.stderr
        await provider.set_hosts(caller, {"web.lab": address})
        await provider.set_hosts(caller, {"web.lab": address, "db.lab": "10.0.0.9"})  # replaces the first
        hosts = await provider.exec(caller, "cat /etc/hosts")
        assert hosts.stdout.count(f"{address} web.lab") == 1 and "10.0.0.9 db.lab" in hosts.stdout
        fetched = await provider.exec(caller, "timeout 5 wget -q -O- http://web.lab:8080/")
        assert (fetched.return_code, fetched.stdout.strip()) == (0, "lab"), fetched.stderr
        with pytest.raises(ValueError, match="not a host name"):
            await provider.set_hosts(caller, {"bad name; rm -rf /": address})
        with pytest.raises(ValueError, match="not an IP address"):
            await provider.set_hosts(caller, {"x": "$(reboot)"})
    finally:
        await provider.close(web)
        await provider.close(caller)


async def test_runtime_requirements_reach_the_sandbox(provider: Any, images: Images) -> None:
    metadata = provider.validate_runtime_requirements(cap_add=("CAP_SYS_PTRACE",), shm_size=96 << 20)
    assert metadata == {"sandboxd-cap-add": "SYS_PTRACE", "sandboxd-shm-size": str(96 << 20)}
    assert provider.validate_runtime_requirements(cap_add=(), shm_size=None) is None
    with pytest.raises(ValueError, match="not a Linux capability"):
        provider.validate_runtime_requirements(cap_add=("SYS_EVERYTHING",), shm_size=None)
    with pytest.raises(ValueError, match="shm_size"):
        provider.validate_runtime_requirements(cap_add=(), shm_size=10)

    handle = await provider.create(SandboxSpec(image=images.busybox, metadata={"task": "t1", **metadata}))
    try:
        await provider.configure_runtime(handle, cap_add=("SYS_PTRACE",), shm_size=96 << 20)
        shm = await provider.exec(handle, "df -k /dev/shm | tail -1")
        assert shm.stdout.split()[1] == str(96 << 10), shm.stdout
        # The requirement keys were turned into the spec's fields, not kept as labels.
        assert handle.raw.metadata == {"task": "t1"}
    finally:
        await provider.close(handle)

    plain = await provider.create(SandboxSpec(image=images.busybox))
    try:
        with pytest.raises(RuntimeError, match="lacks SYS_PTRACE"):
            await provider.configure_runtime(plain, cap_add=("SYS_PTRACE",), shm_size=None)
    finally:
        await provider.close(plain)
    # What the operator did not allow is refused, naming it.
    admin = provider.validate_runtime_requirements(cap_add=("SYS_NICE",), shm_size=None)
    with pytest.raises(SandboxCreateError, match="SYS_NICE"):
        await provider.create(SandboxSpec(image=images.busybox, metadata=admin))


async def test_shared_volume_is_mounted_whole_and_through_a_source_directory(provider: Any, images: Images) -> None:
    assert provider.shared_volume_metadata() == {}
    root = provider.shared_volume_options(None, "/shared")
    setup = await provider.create(SandboxSpec(image=images.busybox, provider_options=root))
    try:
        made = await provider.exec(setup, "mkdir -p /shared/tasks/7 && echo input > /shared/tasks/7/in")
        assert made.return_code == 0, made.stderr
    finally:
        await provider.close(setup)
    options = provider.shared_volume_options("tasks/7", "/task", read_only=True)
    worker = await provider.create(SandboxSpec(image=images.busybox, provider_options=options))
    try:
        read = await provider.exec(worker, "cat /task/in")
        assert read.stdout.strip() == "input"
        write = await provider.exec(worker, "echo x > /task/out")
        assert write.return_code != 0, "a read-only shared volume was written"
    finally:
        await provider.close(worker)
    with pytest.raises(ValueError, match="relative path"):
        provider.shared_volume_options("../etc", "/task")
    await provider.client.delete_volume(provider._shared_volume)
    assert provider._shared_volume not in [v.name for v in await provider.client.list_volumes()]


def test_the_runtime_goes_from_provider_options_into_the_spec() -> None:
    """`provider_options["runtime"]` (gVisor: `"runsc"`) becomes `SandboxSpec.runtime` on the
    wire; anything but a string is refused before a call; unset leaves the server's default."""
    from sandboxd import SandboxSpec as Spec
    from sandboxd.gym_runtime import runtime_spec_fields

    _, fields = runtime_spec_fields({}, {"runtime": "runsc"}, None)
    assert fields["runtime"] == "runsc"
    assert Spec(image="img", **fields).to_proto().runtime == "runsc"
    _, fields = runtime_spec_fields({}, {}, None)
    assert "runtime" not in fields and Spec(image="img", **fields).to_proto().runtime == ""
    with pytest.raises(ValueError, match=r"provider_options\['runtime'\] must be a string"):
        runtime_spec_fields({}, {"runtime": 1}, None)
