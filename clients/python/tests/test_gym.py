"""`sandboxd.gym.SandboxdProvider` through NeMo Gym's own registry and protocols (nemo-gym
0.7.0 from PyPI), and the conformance run against Gym's own Docker provider."""

from __future__ import annotations

import asyncio
import importlib.metadata
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nemo_gym.sandbox.providers import (
    ConnectableProvider,
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxExecResult,
    SandboxHandle,
    SandboxPtyError,
    SandboxPtySession,
    SandboxPtySpec,
    SandboxSpec,
    SandboxStatus,
    SupportsSandboxEndpoint,
    SupportsSandboxPauseResume,
    SupportsSandboxPty,
    create_provider,
)

from sandboxd.gym import SandboxdProvider

from conformance import EXPECTED_HIGHLIGHTS, run_conformance
from support import ContainerLabel, Images, ServerProcess


def sandboxd_config(server: ServerProcess) -> dict[str, Any]:
    return {"sandboxd": {"address": server.address, "retry_attempts": 2}}


@pytest.fixture
async def provider(server: ServerProcess) -> AsyncIterator[Any]:
    provider = create_provider(sandboxd_config(server))
    yield provider
    await provider.aclose()


def test_entry_point_registers_the_provider(server: ServerProcess) -> None:
    points = importlib.metadata.entry_points(group="nemo_gym.sandbox_providers")
    assert [(p.name, p.value) for p in points if p.name == "sandboxd"] == [
        ("sandboxd", "sandboxd.gym:SandboxdProvider")
    ]


async def test_create_provider_builds_it_with_every_capability(provider: Any, server: ServerProcess) -> None:
    assert isinstance(provider, SandboxdProvider) and provider.name == "sandboxd"
    assert provider.client.address == server.address
    by_url = create_provider({"sandboxd": {"address": f"http://{server.address}"}})
    assert by_url.client.address == server.address
    await by_url.aclose()
    for protocol in (ConnectableProvider, SupportsSandboxEndpoint, SupportsSandboxPty, SupportsSandboxPauseResume):
        assert isinstance(provider, protocol), protocol.__name__


async def test_token_file_and_bad_config(
    server: ServerProcess, auth_server: ServerProcess, token: str, tmp_path: Any, images: Images
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    authed = create_provider({"sandboxd": {"address": auth_server.address, "token_file": str(token_file)}})
    try:
        handle = await authed.create(SandboxSpec(image=images.busybox))
        assert (await authed.exec(handle, "echo ok")).stdout == "ok\n"
        await authed.close(handle)
    finally:
        await authed.aclose()
    anonymous = create_provider({"sandboxd": {"address": auth_server.address}})
    try:
        with pytest.raises(SandboxCreateError, match="UNAUTHENTICATED"):
            await anonymous.create(SandboxSpec(image=images.busybox))
    finally:
        await anonymous.aclose()
    with pytest.raises(ValueError, match="not both"):
        create_provider({"sandboxd": {"token": "a", "token_file": str(token_file)}})
    with pytest.raises(TypeError):
        create_provider({"sandboxd": {"url": server.address}})  # unknown key


async def test_errors_map_to_gyms(provider: Any, images: Images) -> None:
    with pytest.raises(SandboxCreateError, match="image"):
        await provider.create(SandboxSpec(image=None))
    with pytest.raises(SandboxCreateError):
        await provider.create(SandboxSpec(image="sandboxd-test/does-not-exist:1"))
    with pytest.raises(SandboxCreateVerificationError):
        await provider.create(SandboxSpec(image=images.busybox, entrypoint=["/bin/false"]))
    with pytest.raises(SandboxCreateError):
        await provider.connect({"sandbox_id": "sandboxd-00000000000000000000000000000000"})
    with pytest.raises(SandboxCreateError, match="sandbox_id"):
        await provider.connect({})
    handle = await provider.create(SandboxSpec(image=images.busybox))
    try:
        with pytest.raises(ValueError, match="cwd"):
            await provider.exec(handle, "true", cwd="relative")
        with pytest.raises(ValueError, match="cwd"):
            await provider.create_pty(handle, SandboxPtySpec(command="true", cwd="relative"))
        try:
            await provider.pause(handle)
        except NotImplementedError:
            pass  # this server has no Pause yet
        else:
            assert await provider.status(handle) == SandboxStatus.PAUSED
            await provider.resume(handle)
            assert await provider.status(handle) == SandboxStatus.RUNNING
    finally:
        await provider.close(handle)
    with pytest.raises(SandboxPtyError):
        await provider.create_pty(handle, SandboxPtySpec())
    gone = SandboxHandle(sandbox_id="x", provider_name="sandboxd", raw=object())
    with pytest.raises(TypeError, match="not made by the sandboxd provider"):
        await provider.status(gone)


async def test_exec_timeouts_take_gyms_shape(server: ServerProcess, images: Images) -> None:
    # The provider's own deadline_s cutting an exec short is a timeout result, not an exception.
    provider = create_provider({"sandboxd": {"address": server.address, "deadline_s": 5}})
    try:
        handle = await provider.create(SandboxSpec(image=images.busybox))
        try:
            cut = await provider.exec(handle, "sleep 60")  # the server default (60 s) > deadline
            assert (cut.stdout, cut.return_code, cut.error_type) == (None, 125, "timeout")
            assert "timed out" in (cut.stderr or "") or "deadline" in (cut.stderr or "")
            stopped = await provider.exec(handle, "echo partial; sleep 60", timeout_s=1)
            assert (stopped.return_code, stopped.error_type) == (125, "timeout")
            assert "timed out" in (stopped.stderr or "")
        finally:
            await provider.close(handle)
    finally:
        await provider.aclose()


async def test_pty_session_follows_gyms_protocol(provider: Any, images: Images) -> None:
    handle = await provider.create(SandboxSpec(image=images.bash, env={"GREETING": "hi"}))
    try:
        session = await provider.create_pty(handle, SandboxPtySpec(rows=30, cols=100))
        assert isinstance(session, SandboxPtySession)
        async with session:
            assert session.mode == "pty" and not session.closed
            output, code = await session.run_detached('stty size </dev/tty; echo "$GREETING"; (exit 4)')
            assert (output.replace(b"\r\n", b"\n"), code) == (b"30 100\nhi\n", 4)
            await session.resize(40, 120)
            output, code = await session.run_detached("stty size </dev/tty")
            assert (output.replace(b"\r\n", b"\n"), code) == (b"40 120\n", 0)
            await session.write(b"sleep 60\n")
            await session.send_signal("SIGINT")  # reaches the foreground job, not the shell
            output, code = await session.run_detached("echo alive")
            assert output.endswith(b"alive\r\n") and code == 0
            await session.write(b"exit 6\n")
            assert await session.wait_exit(timeout_s=20) == 6
            assert b"exit 6" in b"".join([c async for c in session])  # the echo, then EOF
            assert await session.read(timeout_s=5) == b""
        assert session.closed
        with pytest.raises(SandboxPtyError):
            await session.write(b"late")
        piped = await provider.create_pty(handle, SandboxPtySpec(command="cat; echo done >&2", pty=False))
        async with piped:
            assert piped.mode == "pipe"
            await piped.write(b"echoed\n")
            assert await piped.read(timeout_s=20) == b"echoed\n"
            with pytest.raises(TimeoutError):
                await piped.read(timeout_s=0.2)
            await piped.send_signal("SIGTERM")
            assert await piped.wait_exit(timeout_s=20) == 128 + 15
    finally:
        await provider.close(handle)


async def test_conformance_gym_docker_and_sandboxd_agree(
    server: ServerProcess, images: Images, label: ContainerLabel
) -> None:
    """The same driver against Gym's Docker provider and create_provider({"sandboxd": ...})."""
    gym_docker_config = {"docker": {"create": {"extra_run_args": label.run_args()}}}
    docker_obs = await run_conformance(lambda: create_provider(gym_docker_config), images.bash)
    sandboxd_obs = await run_conformance(lambda: create_provider(sandboxd_config(server)), images.bash)
    assert set(docker_obs) == set(sandboxd_obs)
    differences = {k: (docker_obs[k], sandboxd_obs[k]) for k in docker_obs if docker_obs[k] != sandboxd_obs[k]}
    assert differences == {}, differences
    for key, expected in EXPECTED_HIGHLIGHTS.items():
        assert sandboxd_obs[key] == expected, key
    # Both providers removed what they created (Gym's Docker containers carry the session label).
    assert label.containers() == []


def test_provider_from_sync_config_serves_each_loop(server: ServerProcess, images: Images) -> None:
    # Gym may build providers while loading config, outside any event loop; a handle is plain
    # data, so it works in a later loop too.
    provider = create_provider(sandboxd_config(server))
    handle = asyncio.run(provider.create(SandboxSpec(image=images.busybox)))

    async def use() -> SandboxExecResult:
        result = await provider.exec(handle, "echo later")
        await provider.close(handle)
        await provider.aclose()
        return result

    assert asyncio.run(use()).stdout == "later\n"
