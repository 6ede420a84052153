"""Failure kinds and usage through the Python package and the Gym provider, caused for real
against the server and Docker: a paused sandbox raises `SandboxPaused` (still a
`FailedPrecondition`), a closed one `SandboxGone`, an OOM kill and a timeout are results with
their kind; `usage()` and `close()` report the sandbox's totals; the Gym provider turns kinds
into `error_type` and reports `resource_usage`."""

from __future__ import annotations

from typing import Any

import pytest
from nemo_gym.sandbox.providers import create_provider
from nemo_gym.sandbox.providers.base import SandboxSpec as GymSpec

import sandboxd
from sandboxd import (
    AsyncSandbox,
    Client,
    FailedPrecondition,
    FailureKind,
    OomKilled,
    SandboxGone,
    SandboxNotFound,
    SandboxPaused,
    SandboxSpec,
)
from sandboxd._pb import sandbox_pb2 as pb
from sandboxd.failures import kind_from_wire, status_details
from sandboxd.gym import gym_error_type

from support import Images, ServerProcess


def test_every_proto_kind_has_a_class_and_reason() -> None:
    names = [n for n in pb.FailureKind.keys() if n != "FAILURE_KIND_UNSPECIFIED"]
    assert sorted(k.value for k in FailureKind) == sorted(n.removeprefix("FAILURE_KIND_") for n in names)
    assert set(sandboxd.FAILURE_CLASSES) == set(FailureKind)
    assert kind_from_wire(pb.FAILURE_KIND_OOM_KILLED) is FailureKind.OOM_KILLED
    assert FailureKind.OOM_KILLED.is_task_fault and not FailureKind.SANDBOX_GONE.is_task_fault
    assert FailureKind.SANDBOX_GONE.is_retry_safe and not FailureKind.EXEC_REFUSED.is_retry_safe
    assert status_details([("grpc-status-details-bin", b"\xff\xff")]) == (None, None)


async def test_errors_are_typed_by_kind_and_code(client: Client, images: Images) -> None:
    sandbox = await client.create(SandboxSpec(image=images.busybox))
    await sandbox.pause()
    with pytest.raises(SandboxPaused) as paused:
        await sandbox.exec("true")
    assert isinstance(paused.value, FailedPrecondition), "the code's class too"
    assert paused.value.failure_kind is FailureKind.SANDBOX_PAUSED and not paused.value.is_task_fault
    await sandbox.resume()

    usage = await sandbox.usage()
    assert usage.wall_time_s > 0 and usage.peak_memory_bytes > 0
    await sandbox.close()
    assert sandbox.final_usage is not None and sandbox.final_usage.wall_time_s >= usage.wall_time_s
    # The receipt Close returned is the one the tenant's period keeps (`TenantUsage`).
    spent = await client.tenant_usage()
    assert spent.period_start_unix_ms < spent.period_end_unix_ms
    receipts = [r for r in spent.receipts if r.sandbox_id == sandbox.sandbox_id]
    assert [r.usage for r in receipts] == [sandbox.final_usage]
    assert spent.sandbox_seconds >= sandbox.final_usage.wall_time_s

    with pytest.raises(SandboxGone) as gone:
        await client.exec(sandbox.sandbox_id, "true")
    assert isinstance(gone.value, SandboxNotFound) and gone.value.is_retry_safe


async def test_results_carry_their_kind(client: Client, images: Images) -> None:
    spec = SandboxSpec.from_mapping({"image": images.busybox, "resources": {"memory_mib": 32}})
    async with await client.create(spec) as sandbox:
        plain = await sandbox.exec("exit 3")
        assert (plain.return_code, plain.failure_kind) == (3, None)
        hog = await sandbox.exec("dd if=/dev/zero of=/dev/null bs=300M count=1")
        assert (hog.return_code, hog.failure_kind) == (137, FailureKind.OOM_KILLED)
        slow = await sandbox.exec("sleep 10", timeout_s=0.5)
        assert slow.failure_kind is FailureKind.TIMEOUT
        last = None
        async for event in sandbox.exec_stream("sleep 10", timeout_s=0.5):
            last = event
        assert isinstance(last, sandboxd.ExecExit) and last.failure_kind is FailureKind.TIMEOUT


async def test_gym_provider_reports_kinds_duration_and_usage(server: ServerProcess, images: Images) -> None:
    provider: Any = create_provider({"sandboxd": {"address": server.address}})
    try:
        handle = await provider.create(GymSpec(image=images.busybox, resources={"memory_mib": 32}))
        ok = await provider.exec(handle, "echo hi")
        assert (ok.return_code, ok.error_type) == (0, None)
        if hasattr(ok, "duration_ms"):
            assert ok.duration_ms is not None and ok.duration_ms >= 0
        hog = await provider.exec(handle, "dd if=/dev/zero of=/dev/null bs=300M count=1")
        assert (hog.return_code, hog.error_type) == (137, "oom_killed")
        live = await provider.resource_usage(handle)
        assert live.wall_time_s > 0 and live.cpu_time_s > 0
        await provider.close(handle)
        closed = await provider.resource_usage(handle)
        assert closed.wall_time_s >= live.wall_time_s
        gone = await provider.exec(handle, "true")
        assert (gone.return_code, gone.error_type) == (125, "sandbox")
    finally:
        await provider.aclose()
    assert gym_error_type(None, None) is None and gym_error_type(FailureKind.TIMEOUT, None) == "timeout"
    assert {gym_error_type(k, None) for k in FailureKind if not k.is_task_fault} == {"sandbox"}


def test_unknown_reason_and_unknown_wire_value() -> None:
    assert FailureKind.from_reason("NOT_A_KIND") is None
    assert FailureKind.from_reason("FAILURE_KIND_QUOTA") is FailureKind.QUOTA
    assert kind_from_wire(0) is None
    assert kind_from_wire(999) is FailureKind.INTERNAL
    assert isinstance(OomKilled("x"), sandboxd.Failure)


async def test_create_batch_yields_sandboxes_and_typed_errors(client: Client, images: Images) -> None:
    made = [item async for item in client.create_batch(SandboxSpec(image=images.busybox), 3)]
    assert len(made) == 3 and all(isinstance(s, AsyncSandbox) for s in made)
    assert len({s.sandbox_id for s in made if isinstance(s, AsyncSandbox)}) == 3
    for sandbox in made:
        assert isinstance(sandbox, AsyncSandbox)
        assert (await sandbox.exec("echo up")).stdout == b"up\n"
        await sandbox.close()
    failed = [item async for item in client.create_batch(SandboxSpec(image="sandboxd-test/no-such:none"), 2)]
    assert len(failed) == 2
    for error in failed:
        assert isinstance(error, sandboxd.CreateRejected) and error.failure_kind is FailureKind.CREATE_FAILED
    with pytest.raises(sandboxd.InvalidArgument, match="count"):
        async for _ in client.create_batch(SandboxSpec(image=images.busybox), 0):
            pass
