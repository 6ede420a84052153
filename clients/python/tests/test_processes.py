"""Background processes and port forwarding through the typed client and the Gym provider
(`SupportsSandboxPortForwarding`, `SupportsSandboxBackgroundServices`), against the real server
and Docker."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nemo_gym.sandbox.providers import SandboxSpec, create_provider

import sandboxd
from sandboxd import Client, ProcessAttached, ProcessExited, ProcessOutput

from support import Images, ServerProcess, docker


@pytest.fixture
async def provider(server: ServerProcess) -> AsyncIterator[Any]:
    provider = create_provider({"sandboxd": {"address": server.address}})
    yield provider
    await provider.aclose()


async def collect(
    client: Client, sandbox_id: str, process_id: str, since: int | None = None
) -> tuple[bytes, bytes, int]:
    out, err, first = bytearray(), bytearray(), None
    async for event in client.attach_process(sandbox_id, process_id, since=since):
        if isinstance(event, ProcessAttached):
            first = event.offset
        elif isinstance(event, ProcessOutput):
            (err if event.stderr else out).extend(event.data)
        elif isinstance(event, ProcessExited):
            assert first is not None
            return bytes(out), bytes(err), event.exit_code
    raise AssertionError("the stream ended without an exit")


async def test_a_process_runs_on_its_own_replays_and_is_signalled(client: Client, images: Images) -> None:
    async with await client.create(images.busybox) as sandbox:
        sid = sandbox.sandbox_id
        pid = await client.start_process(sid, "echo out-$X; echo err >&2; exit 4", env={"X": "1"}, cwd="/tmp")
        assert await collect(client, sid, pid) == (b"out-1\n", b"err\n", 4)
        argv = await client.start_process(sid, argv=["/bin/sh", "-c", "echo $0", "argv0"])
        assert (await collect(client, sid, argv))[0] == b"argv0\n"

        long = await client.start_process(sid, "echo ready; exec sleep 600")
        async for event in client.attach_process(sid, long):
            if isinstance(event, ProcessOutput):
                break  # leaving the loop detaches; the process runs on
        rows = {p.process_id: p for p in await client.list_processes(sid)}
        assert rows[pid].exit_code == 4 and not rows[pid].running
        assert rows[long].running and rows[long].command == "echo ready; exec sleep 600"
        assert rows[long].retained_bytes == len(b"ready\n")
        await client.signal_process(sid, long, "SIGTERM")
        assert await collect(client, sid, long, since=0) == (b"ready\n", b"", 143)

        with pytest.raises(sandboxd.InvalidArgument, match="signal"):
            await client.signal_process(sid, long, "SIGNOPE")
        with pytest.raises(sandboxd.NotFound):
            await client.signal_process(sid, "0123456789abcdef", "TERM")


async def test_forward_port_reaches_httpd_inside_the_sandbox(client: Client, images: Images) -> None:
    async with await client.create(images.busybox) as sandbox:
        sid = sandbox.sandbox_id
        page = f"page of {sid}\n"
        result = await sandbox.exec(f"mkdir -p /tmp/www && printf '%s\\n' 'page of {sid}' > /tmp/www/index.html")
        assert result.return_code == 0
        await client.start_process(sid, "exec httpd -f -p 127.0.0.1:8080 -h /tmp/www")
        server = await client.forward_port(sid, 8080)
        try:
            port = server.sockets[0].getsockname()[1]
            url = f"http://127.0.0.1:{port}/index.html"

            def get() -> str:
                with urllib.request.urlopen(url, timeout=20) as response:
                    return str(response.read().decode())

            body = ""
            for _ in range(50):
                try:
                    body = await asyncio.to_thread(get)
                    break
                except OSError:
                    await asyncio.sleep(0.2)
            assert body == page
            bodies = await asyncio.gather(*(asyncio.to_thread(get) for _ in range(8)))
            assert bodies == [page] * 8
        finally:
            server.close()
            await server.wait_closed()
        # One connection by hand: a refused port is SandboxUnavailable naming the address.
        with pytest.raises(sandboxd.SandboxUnavailable, match="127.0.0.1:9"):
            await client.port_forward(sid, 9)


async def test_gym_forward_ports_relays_loopback_to_a_peer(provider: Any, images: Images) -> None:
    peer = await provider.create(SandboxSpec(image=images.busybox))
    here = await provider.create(SandboxSpec(image=images.busybox))
    try:
        setup = "mkdir -p /tmp/www && echo peer-page > /tmp/www/index.html && (httpd -p 0.0.0.0:8080 -h /tmp/www)"
        assert (await provider.exec(peer, setup)).return_code == 0
        # Its address on its tenant's network (sandboxes are never on Docker's default bridge).
        address = docker(
            "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", peer.sandbox_id
        ).stdout.strip()
        assert address
        relay = asyncio.create_task(provider.forward_ports(here, address, (8080,), ready_file="/tmp/fwd-ready"))
        for _ in range(100):
            if (await provider.exec(here, "test -f /tmp/fwd-ready")).return_code == 0:
                break
            assert not relay.done(), relay
            await asyncio.sleep(0.1)
        # Inside `here`, its own loopback port reaches the peer.
        got = await provider.exec(here, "wget -qO- http://127.0.0.1:8080/index.html")
        assert (got.return_code, got.stdout) == (0, "peer-page\n")
        relay.cancel()
        with pytest.raises(asyncio.CancelledError):
            await relay
        gone = await provider.exec(here, "wget -qO- -T 2 http://127.0.0.1:8080/index.html")
        assert gone.return_code != 0, "the relay stopped with its task"
        with pytest.raises(ValueError):
            await provider.forward_ports(here, "not-an-ip", (80,), ready_file="/tmp/x")
    finally:
        await provider.close(here)
        await provider.close(peer)


async def test_gym_background_services_outlive_the_command(provider: Any, images: Images) -> None:
    handle = await provider.create(SandboxSpec(image=images.busybox))
    try:
        started = await provider.exec_with_background_services(
            handle, "sleep 5151 & echo started in $PWD", cwd="/tmp", timeout_s=30
        )
        assert (started.return_code, started.stdout, started.stderr) == (0, "started in /tmp\n", "")
        ps = await provider.exec(handle, "ps -o args | grep -c '^sleep 5151'")
        assert ps.stdout.strip() == "1", "the background service runs on after the command returned"
        slow = await provider.exec_with_background_services(handle, "echo partial; sleep 60", timeout_s=1)
        assert (slow.return_code, slow.error_type, slow.stdout) == (125, "timeout", "partial\n")
        ps = await provider.exec(handle, "ps -o args | grep -c '^sleep 60'")
        assert ps.stdout.strip() == "0", "the timed-out command's group was killed"
    finally:
        await provider.close(handle)


async def test_grpcurl_starts_lists_and_signals_a_process(
    client: Client, images: Images, server: ServerProcess
) -> None:
    grpcurl = Path(sys.executable).parent / "grpcurl"
    assert grpcurl.exists(), "grpcurl comes with `bash scripts/install-deps.sh`"

    def call(method: str, body: dict[str, Any]) -> dict[str, Any]:
        out = subprocess.run(
            [str(grpcurl), "-plaintext", "-d", json.dumps(body), server.address, f"sandbox.v1.SandboxService/{method}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        return dict(json.loads(out.stdout or "{}"))

    async with await client.create(images.busybox) as sandbox:
        sid = sandbox.sandbox_id
        started = await asyncio.to_thread(call, "StartProcess", {"sandbox_id": sid, "command": "exec sleep 4444"})
        listed = await asyncio.to_thread(call, "ListProcesses", {"sandbox_id": sid})
        [row] = [p for p in listed["processes"] if p["processId"] == started["processId"]]
        assert row["running"] and row["command"] == "exec sleep 4444"
        await asyncio.to_thread(
            call, "SignalProcess", {"sandbox_id": sid, "process_id": started["processId"], "signal": "KILL"}
        )
        [info] = [p for p in await client.list_processes(sid) if p.process_id == started["processId"]]
        for _ in range(50):
            if not info.running:
                break
            await asyncio.sleep(0.1)
            [info] = [p for p in await client.list_processes(sid) if p.process_id == started["processId"]]
        assert info.exit_code == 137
