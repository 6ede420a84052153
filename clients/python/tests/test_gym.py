"""`sandboxd.gym.SandboxdProvider` through NeMo Gym's own registry and protocols (nemo-gym
0.7.0 from PyPI), and the conformance run against Gym's own Docker provider."""

from __future__ import annotations

import asyncio
import importlib.metadata
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nemo_gym.sandbox.providers import (
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxExecResult,
    SandboxHandle,
    SandboxPtyError,
    SandboxPtySession,
    SandboxPtySpec,
    SandboxSpec,
    SandboxStatus,
    create_provider,
)
from nemo_gym.sandbox.providers import base as gym_base

from sandboxd import PermissionDenied
from sandboxd import gym as sandboxd_gym
from sandboxd import types as sd
from sandboxd.gym import SandboxdProvider

from conformance import EXPECTED_HIGHLIGHTS, run_conformance
from support import NO_SUCH_IMAGE, ContainerLabel, Images, ServerProcess


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


# Gym's optional capabilities this provider implements, and those that need server features
# of later issues (sandbox networks, runtime requirements, shared storage, port forwarding,
# background services): `isinstance` must be true exactly for the first set.
IMPLEMENTED = (
    "ConnectableProvider",
    "SupportsSandboxEndpoint",
    "SupportsSandboxPty",
    "SupportsSandboxPtyAttach",
    "SupportsSandboxPauseResume",
    "SupportsSandboxSnapshot",
    "SupportsSandboxPortForwarding",
    "SupportsSandboxBackgroundServices",
    "SupportsSandboxNetwork",
    "SupportsSandboxRuntimeRequirements",
    "SupportsSandboxSharedStorage",
)
NOT_IMPLEMENTED: tuple[str, ...] = ()


async def test_create_provider_builds_it_with_exactly_its_capabilities(provider: Any, server: ServerProcess) -> None:
    assert isinstance(provider, SandboxdProvider) and provider.name == "sandboxd"
    assert provider.client.address == server.address
    by_url = create_provider({"sandboxd": {"address": f"http://{server.address}"}})
    assert by_url.client.address == server.address
    await by_url.aclose()
    defined = {name: getattr(gym_base, name) for name in IMPLEMENTED + NOT_IMPLEMENTED if hasattr(gym_base, name)}
    # nemo-gym 0.7.0 defines all but SupportsSandboxSnapshot (newer main's checkpointer protocol).
    assert set(NOT_IMPLEMENTED) <= set(defined) and {"ConnectableProvider", "SupportsSandboxPty"} <= set(defined)
    assert {"SupportsSandboxNetwork", "SupportsSandboxRuntimeRequirements", "SupportsSandboxSharedStorage"} <= set(
        defined
    )
    assert {"SupportsSandboxPortForwarding", "SupportsSandboxBackgroundServices"} <= set(defined)
    observed = {name: isinstance(provider, protocol) for name, protocol in defined.items()}
    assert observed == {name: name in IMPLEMENTED for name in defined}
    for method in ("snapshot", "delete_snapshot", "pause", "resume", "create_pty", "attach_pty", "endpoint"):
        assert callable(getattr(provider, method)), method


async def test_serialize_handle_with_a_scope_carries_a_granted_token(
    provider: Any, images: Images, server: ServerProcess
) -> None:
    handle = await provider.create(SandboxSpec(image=images.busybox))
    try:
        plain = await provider.serialize_handle(handle)
        assert plain["sandbox_id"] == handle.sandbox_id
        assert await provider.serialize_handle(handle, scope=None) == plain
        operate = await provider.serialize_handle(handle, scope="operate")
        assert operate["sandbox_id"] == handle.sandbox_id
        assert operate["token"] and operate["token"] != plain.get("token")
        with pytest.raises(ValueError, match=r"scope must be one of"):
            await provider.serialize_handle(handle, scope="admin")
        # A verifier's provider connects with the operate descriptor: it may run commands, not
        # end the sandbox.
        verifier = create_provider(sandboxd_config(server))
        try:
            attached = await verifier.connect(operate)
            assert (await verifier.exec(attached, "echo graded")).stdout == "graded\n"
            with pytest.raises(PermissionDenied):
                await verifier.close(attached)
        finally:
            await verifier.aclose()
        assert await provider.status(handle) == SandboxStatus.RUNNING
    finally:
        await provider.close(handle)


async def test_snapshot_and_create_from_it_as_gyms_checkpointer_does(provider: Any, images: Images) -> None:
    handle = await provider.create(SandboxSpec(image=images.busybox, workdir="/work"))
    restored = None
    snapshot_id = None
    try:
        assert (await provider.exec(handle, "echo kept > /work/state")).return_code == 0
        snapshot_id = await provider.snapshot(handle, name="ng-session-1")
        assert isinstance(snapshot_id, str) and snapshot_id
        assert await provider.status(handle) == SandboxStatus.RUNNING  # the source keeps running
        [info] = [s for s in await provider.client.list_snapshots() if s.snapshot_id == snapshot_id]
        assert info.labels.get("nemo-gym.name") == "ng-session-1"
        # As Gym's checkpointer restores: no image, the snapshot in provider_options.
        restored = await provider.create(SandboxSpec(image=None, provider_options={"snapshot_id": snapshot_id}))
        assert restored.sandbox_id != handle.sandbox_id
        assert (await provider.exec(restored, "cat /work/state; pwd")).stdout == "kept\n/work\n"
        with pytest.raises(RuntimeError, match="FAILED_PRECONDITION"):
            await provider.delete_snapshot(snapshot_id)  # a sandbox still runs from it
        with pytest.raises(SandboxCreateError, match="snapshot_id"):
            await provider.create(SandboxSpec(image=None, provider_options={"snapshot_id": 7}))
        with pytest.raises(SandboxCreateError, match="snapshot"):
            await provider.create(SandboxSpec(image=None, provider_options={"snapshot_id": "sandboxd-snapshot:0"}))
    finally:
        if restored is not None:
            await provider.close(restored)
        await provider.close(handle)
    assert snapshot_id is not None
    await provider.delete_snapshot(snapshot_id)
    await provider.delete_snapshot(snapshot_id)  # already gone counts as done
    assert snapshot_id not in [s.snapshot_id for s in await provider.client.list_snapshots()]


# What a session of a removed sandbox says: the server's own words when its stream failed first
# ("the sandbox's container is no longer running"), the provider's when it saw the end first.
SANDBOX_GONE = r"is gone|no longer running"


async def test_pty_session_whose_sandbox_is_gone_raises(provider: Any, server: ServerProcess, images: Images) -> None:
    # Closed through this provider: reads and wait_exit raise SandboxPtyError, not b""/137.
    handle = await provider.create(SandboxSpec(image=images.bash))
    session = await provider.create_pty(handle, SandboxPtySpec(command="sleep 600"))
    await provider.close(handle)
    with pytest.raises(SandboxPtyError, match=SANDBOX_GONE):
        while await session.read(timeout_s=30):
            pass
    with pytest.raises(SandboxPtyError, match=SANDBOX_GONE):
        await session.wait_exit(timeout_s=30)
    await session.close()

    # Removed by someone else (another process's provider): the same, found from its status.
    handle = await provider.create(SandboxSpec(image=images.bash))
    piped = await provider.create_pty(handle, SandboxPtySpec(command="sleep 600", pty=False))
    other = create_provider(sandboxd_config(server))
    try:
        await other.close(await other.connect({"sandbox_id": handle.sandbox_id}))
    finally:
        await other.aclose()
    with pytest.raises(SandboxPtyError, match=SANDBOX_GONE):
        await piped.wait_exit(timeout_s=30)
    with pytest.raises(SandboxPtyError, match=SANDBOX_GONE):
        await piped.read_stderr(timeout_s=30)
    await piped.close()

    # A program killed by SIGKILL in a sandbox that stays is an exit code, not an error.
    handle = await provider.create(SandboxSpec(image=images.bash))
    try:
        killed = await provider.create_pty(handle, SandboxPtySpec(command="sleep 600", pty=False))
        async with killed:
            await killed.send_signal("SIGKILL")
            assert await killed.wait_exit(timeout_s=30) == 137
            assert await killed.read(timeout_s=30) == b""
    finally:
        await provider.close(handle)


def test_provider_works_with_a_gym_without_paused(server: ServerProcess, images: Images) -> None:
    """Gym main before its pause/resume work has no `SandboxStatus.PAUSED` and no
    `SupportsSandboxPauseResume`: the provider still imports, and reports a paused sandbox as
    RUNNING, as Gym's Docker provider does there. Run in a fresh interpreter whose Gym module
    set is patched to lack both."""
    script = Path(__file__).with_name("gym_without_paused.py")
    out = subprocess.run(
        [sys.executable, str(script), server.address, images.busybox],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=script.parent,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "imported: sandboxd",
        "PAUSED is RUNNING: True",
        "capabilities: all 9",
        "paused status: running",
        "resumed status: running",
        "exec after resume: ok",
    ]


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


async def test_pause_keeps_the_processes_and_on_runc_is_a_freeze(provider: Any, images: Images) -> None:
    """Gym's `SupportsSandboxPauseResume`: `pause` asks for `Hibernate` first (gVisor: processes
    and memory to disk, host memory freed) and, refused with FAILED_PRECONDITION as it is on runc
    (this suite's runtime), freezes the sandbox instead; either way its processes go on after
    `resume` from where they were. (The hibernate path itself is tested on gVisor by the Rust
    suite `server/tests/live_fork.rs`; this suite has no gVisor daemon.)"""
    assert isinstance(provider, gym_base.SupportsSandboxPauseResume)
    handle = await provider.create(SandboxSpec(image=images.busybox))
    try:
        # A counter whose value lives only in its shell's memory.
        loop = (
            "sh -c 'i=0; echo $$ > /tmp/pid; while :; do i=$((i+1)); echo $i > /tmp/c; sleep 0.05; done' "
            ">/dev/null 2>&1 &"
        )
        assert (await provider.exec(handle, loop)).return_code == 0
        seen = await provider.exec(handle, "sleep 0.3; cat /tmp/pid /tmp/c")
        pid, before = (seen.stdout or "").split()
        await provider.pause(handle)
        assert await provider.status(handle) == SandboxStatus.PAUSED
        sandbox_id = handle.raw.sandbox_id
        assert await provider.client.status(sandbox_id) == sd.SandboxStatus.PAUSED, "runc: frozen, not hibernated"
        await provider.resume(handle)
        assert await provider.status(handle) == SandboxStatus.RUNNING
        after = await provider.exec(handle, "sleep 0.3; cat /tmp/pid /tmp/c")
        pid_after, count = (after.stdout or "").split()
        assert pid_after == pid, "the same process goes on after resume"
        assert int(count) > int(before)
    finally:
        await provider.close(handle)


def test_a_hibernated_sandbox_is_paused_for_gym() -> None:
    """A sandbox `pause` hibernated (gVisor) is Gym's PAUSED until `resume`."""
    assert sandboxd_gym._STATUS[sd.SandboxStatus.HIBERNATED] == sandboxd_gym.PAUSED


async def test_errors_map_to_gyms(provider: Any, images: Images) -> None:
    with pytest.raises(SandboxCreateError, match="image"):
        await provider.create(SandboxSpec(image=None))
    with pytest.raises(SandboxCreateError):
        await provider.create(SandboxSpec(image=NO_SUCH_IMAGE))
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


async def _until_foreground(provider: Any, handle: Any, program: str) -> None:
    """Waits until `program` is the foreground job of its terminal (its process group is the
    terminal's: fields 5 and 8 of /proc/PID/stat)."""
    probe = f"awk '$2 == \"({program})\" && $5 == $8 {{ print $1 }}' /proc/[0-9]*/stat"
    deadline = asyncio.get_running_loop().time() + 30
    while asyncio.get_running_loop().time() < deadline:
        result = await provider.exec(handle, probe)
        if (result.stdout or "").strip():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{program} never became the terminal's foreground job")


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
            # As a person would: Ctrl-C once the job runs. Sent while the shell still reads the
            # line, SIGINT reaches the shell's line editor (the foreground then) and eats the line.
            await _until_foreground(provider, handle, "sleep")
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
