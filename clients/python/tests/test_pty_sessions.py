"""Terminal sessions that live in the sandbox's agent (issue 18), through the typed client and
the Gym provider, against the real server and Docker: detach, list, attach with `since` and
`takeover`, a `run_detached` that holds no stream between polls, and Gym's close semantics (the
creator's close ends the session, an attacher's detaches)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nemo_gym.sandbox.providers import create_provider
from nemo_gym.sandbox.providers.base import SandboxPtyError, SandboxPtySpec, SandboxSpec

import sandboxd
from sandboxd import AsyncSandbox, Client

from support import Images, ServerProcess


@pytest.fixture
async def sandbox(client: Client, images: Images) -> AsyncIterator[AsyncSandbox]:
    sandbox = await client.create(sandboxd.SandboxSpec(image=images.busybox))
    try:
        yield sandbox
    finally:
        await sandbox.close()


async def read_until(session: Any, needle: bytes) -> bytes:
    seen = b""
    while needle not in seen:
        chunk = await session.read(timeout_s=20)
        assert chunk, f"the session ended before {needle!r}; got {seen!r}"
        seen += chunk
    return seen


async def test_detach_list_attach_since_and_takeover(client: Client, sandbox: AsyncSandbox) -> None:
    sid = sandbox.sandbox_id
    command = "echo ready; read line; echo got:$line; sleep 600"
    first = await client.open_pty(sid, command, pipe=True, detach_timeout_s=60)
    assert first.offset == 0
    await read_until(first, b"ready\n")
    await first.detach()
    [listed] = await client.list_pty_sessions(sid)
    assert (listed.session_id, listed.command, listed.mode) == (first.session_id, command, "pipe")
    assert (listed.running, listed.attached, listed.exit_code, listed.retained_bytes) == (True, False, None, 6)

    second = await client.attach_pty(sid, first.session_id, since=2)
    assert second.offset == 2
    assert await second.read(timeout_s=20) == b"ady\n"
    with pytest.raises(sandboxd.PtySessionError, match="takeover"):
        await client.attach_pty(sid, first.session_id)
    with pytest.raises(sandboxd.NotFound):
        await client.attach_pty(sid, "0123456789abcdef", takeover=True)
    with pytest.raises(sandboxd.InvalidArgument):
        await client.attach_pty(sid, first.session_id, takeover=True, since=10**9)

    third = await client.attach_pty(sid, first.session_id, takeover=True)
    with pytest.raises(sandboxd.SandboxdError, match="taken over by another attach"):
        await second.read(timeout_s=20)
    assert await third.read(timeout_s=20) == b"ready\n"
    await third.write(b"x\n")
    assert await third.read(timeout_s=20) == b"got:x\n"
    await third.close()
    [ended] = await client.list_pty_sessions(sid)
    assert (ended.running, ended.exit_code) == (False, 129)


async def test_gym_run_detached_holds_no_stream_between_polls(server: ServerProcess, images: Images) -> None:
    provider = create_provider({"sandboxd": {"address": server.address}})
    handle = await provider.create(SandboxSpec(image=images.bash))
    try:
        session = await provider.create_pty(handle, SandboxPtySpec(rows=30, cols=100))
        async with session:
            probes: list[bool] = []

            async def watch() -> None:
                await asyncio.sleep(1.5)
                [row] = await provider.client.list_pty_sessions(handle.sandbox_id)
                probes.append(row.attached)

            watcher = asyncio.create_task(watch())
            output, code = await session.run_detached("sleep 3; stty size </dev/tty; (exit 4)", poll_interval_s=2.0)
            await watcher
            assert (output.replace(b"\r\n", b"\n"), code) == (b"30 100\n", 4)
            # Polls at about 0.3 s (then let go for 2 s) and 2.5 s: at 1.5 s nothing holds it.
            assert probes == [False], probes
            # Attach from elsewhere (another provider: another process's view), taking it over.
            other = create_provider({"sandboxd": {"address": server.address}})
            try:
                attached = await other.attach_pty(handle, session.session_id, takeover=True, since=0)
                assert b"30 100" in await read_until(attached, b"30 100")
                with pytest.raises(SandboxPtyError):
                    while await session.read(timeout_s=20):
                        pass
                # An attacher's close detaches: the session lives on.
                await attached.close()
                [row] = await provider.client.list_pty_sessions(handle.sandbox_id)
                assert (row.running, row.attached) == (True, False)
                # Re-attached by its creator's provider, the creator's close ends it.
                again = await provider.attach_pty(handle, session.session_id)
                await again.write(b"exit 9\n")
                assert await again.wait_exit(timeout_s=20) == 9
                await again.close()
            finally:
                await other.aclose()
        [row] = await provider.client.list_pty_sessions(handle.sandbox_id)
        assert (row.running, row.exit_code) == (False, 9)
    finally:
        await provider.close(handle)
        await provider.aclose()
