"""`Client.watch` and `Client.stats` against the real server and Docker: a watcher sees a
sandbox's life and one killed from outside, `include_existing` and label filters apply, and
usage moves when the sandbox allocates memory and burns CPU; grpcurl reaches both RPCs."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sandboxd import (
    Client,
    FailedPrecondition,
    SandboxEvent,
    SandboxEventKind,
    SandboxNotFound,
    SandboxSpec,
    SandboxStatus,
)

from support import Images, ServerProcess, docker

UNKNOWN_ID = "sandboxd-00000000000000000000000000000000"


async def until(events: AsyncIterator[SandboxEvent], sandbox_id: str, kind: SandboxEventKind) -> SandboxEvent:
    async def find() -> SandboxEvent:
        async for event in events:
            if event.sandbox_id == sandbox_id and event.kind == kind:
                return event
        raise AssertionError(f"the watch ended before {kind} of {sandbox_id}")

    return await asyncio.wait_for(find(), timeout=60)


async def test_watch_sees_a_sandbox_live_and_die(client: Client, images: Images) -> None:
    run = uuid.uuid4().hex
    events = client.watch(labels={"run": run})
    first = asyncio.ensure_future(events.__anext__())  # the call starts with the first read
    await asyncio.sleep(0.5)
    sandbox = await client.create(SandboxSpec(image=images.busybox, metadata={"run": run}))
    other = await client.create(SandboxSpec(image=images.busybox, metadata={"run": "not-" + run}))
    created = await first
    assert (created.kind, created.sandbox_id) == (SandboxEventKind.CREATED, sandbox.sandbox_id)
    assert created.sandbox is not None and created.sandbox.ref.metadata == {"run": run}
    ready = await until(events, sandbox.sandbox_id, SandboxEventKind.READY)
    assert ready.sandbox is not None and ready.sandbox.status == SandboxStatus.RUNNING
    await sandbox.pause()
    await until(events, sandbox.sandbox_id, SandboxEventKind.PAUSED)
    await sandbox.resume()
    await until(events, sandbox.sandbox_id, SandboxEventKind.RESUMED)

    # include_existing: the sandbox as List has it, first.
    existing = client.watch(labels={"run": run}, include_existing=True)
    seen = await asyncio.wait_for(existing.__anext__(), timeout=30)
    assert (seen.kind, seen.sandbox_id) == (SandboxEventKind.EXISTING, sandbox.sandbox_id)
    await existing.aclose()  # type: ignore[attr-defined]

    docker("kill", sandbox.sandbox_id)
    stopped = await until(events, sandbox.sandbox_id, SandboxEventKind.STOPPED)
    assert (stopped.exit_code, stopped.oom_killed) == (137, False)
    await sandbox.close()
    removed = await until(events, sandbox.sandbox_id, SandboxEventKind.REMOVED)
    assert removed.reason == "closed by Close (operator)"
    await other.close()
    await events.aclose()  # type: ignore[attr-defined]


async def test_stats_move_with_use(client: Client, images: Images) -> None:
    spec = SandboxSpec(image=images.busybox)
    async with await client.create(spec) as sandbox:
        before = await sandbox.stats()
        assert before.cgroup_version in ("v1", "v2")
        assert before.memory_limit_bytes > 0 and before.pids >= 1 and before.cpu_limit > 0
        script = (
            "dd if=/dev/zero of=/dev/shm/fill bs=1048576 count=32 2>/dev/null; "
            "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"
        )
        assert (await sandbox.exec(script)).ok
        after = await client.stats(sandbox.sandbox_id)
        assert after.memory_usage_bytes >= before.memory_usage_bytes + (28 << 20), (before, after)
        assert after.cpu_usage_ns > before.cpu_usage_ns + 50_000_000, (before, after)
        assert after.cpu_percent_since(before) > 0
        docker("kill", sandbox.sandbox_id)
        with pytest.raises(FailedPrecondition):
            await client.stats(sandbox.sandbox_id)
    with pytest.raises(SandboxNotFound):
        await client.stats(UNKNOWN_ID)


def test_grpcurl_reaches_watch_and_stats(server: ServerProcess, images: Images) -> None:
    """The RPCs through grpcurl and reflection alone: describe, one Stats, and Watch's
    EXISTING snapshot (grpcurl's JSON: camelCase names, int64 as strings, zero values omitted)."""
    grpcurl = str(Path(sys.executable).parent / "grpcurl")
    assert Path(grpcurl).exists(), "grpcurl comes with `bash scripts/install-deps.sh`"
    run = uuid.uuid4().hex

    def call(method: str, body: dict[str, object], *extra: str) -> subprocess.CompletedProcess[str]:
        argv = [
            grpcurl,
            "-plaintext",
            *extra,
            "-d",
            json.dumps(body),
            server.address,
            f"sandbox.v1.SandboxService/{method}",
        ]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    described = subprocess.run(
        [grpcurl, "-plaintext", server.address, "describe", "sandbox.v1.SandboxService"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "rpc Watch ( .sandbox.v1.WatchRequest ) returns ( stream .sandbox.v1.WatchResponse )" in described
    assert "rpc Stats ( .sandbox.v1.StatsRequest ) returns ( .sandbox.v1.StatsResponse )" in described

    created = call("Create", {"spec": {"image": images.busybox, "metadata": {"run": run}}})
    assert created.returncode == 0, created.stderr
    sandbox_id = json.loads(created.stdout)["sandbox"]["sandboxId"]
    try:
        stats = call("Stats", {"sandbox_id": sandbox_id})
        assert stats.returncode == 0, stats.stderr
        reading = json.loads(stats.stdout)
        assert int(reading["memoryUsageBytes"]) > 0 and int(reading["pids"]) >= 1, reading
        assert reading["cgroupVersion"] in ("v1", "v2"), reading
        # Watch runs until cancelled: -max-time ends it after the snapshot arrived.
        watched = call("Watch", {"labels": {"run": run}, "include_existing": True}, "-max-time", "3")
        assert "DeadlineExceeded" in watched.stderr or watched.returncode != 0, watched
        event = json.loads(watched.stdout)["event"]
        assert (event["kind"], event["sandboxId"]) == ("SANDBOX_EVENT_KIND_EXISTING", sandbox_id), event
    finally:
        call("Close", {"sandbox_id": sandbox_id})


async def test_stats_stream_reads_until_the_sandbox_stops(client: Client, images: Images) -> None:
    async with await client.create(SandboxSpec(image=images.busybox)) as sandbox:
        readings = []
        stream = client.stats_stream(sandbox.sandbox_id, interval_s=0.2)
        async for reading in stream:
            readings.append(reading)
            if len(readings) == 3:
                docker("kill", sandbox.sandbox_id)
            assert len(readings) < 50, "the stream went on after the sandbox stopped"
        assert len(readings) >= 3
        assert all(b.read_at_unix_ns > a.read_at_unix_ns for a, b in zip(readings, readings[1:], strict=False))
