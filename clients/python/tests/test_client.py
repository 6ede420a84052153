"""`sandboxd.Client` / `AsyncSandbox` against the real server and Docker: every call, and the
failures a caller must be able to tell apart."""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import sandboxd
from sandboxd import AsyncSandbox, Client, SandboxSpec, SandboxStatus
from sandboxd._pb import sandbox_pb2 as pb

from support import NO_SUCH_IMAGE, Images, ServerProcess

UNKNOWN_ID = "sandboxd-00000000000000000000000000000000"


@pytest.fixture
async def sandbox(client: Client, images: Images) -> AsyncIterator[AsyncSandbox]:
    spec = SandboxSpec(
        image=images.bash,
        workdir="/work",
        env={"GREETING": "hello", "SHARED": "spec"},
        files={"/opt/seed/a.txt": "seeded ✓\n", "/opt/seed/b.bin": b"\x00\x01\xff"},
        ports=[8080],
        metadata={"suite": "python"},
    )
    async with await client.create(spec) as sandbox:
        yield sandbox


# --- create / exec -----------------------------------------------------------------------------


async def test_create_applies_env_files_workdir_and_ports(sandbox: AsyncSandbox) -> None:
    assert sandbox.sandbox_id.startswith("sandboxd-")
    assert sandbox.ports == (8080,)
    assert sandbox.workdir == "/work"
    result = await sandbox.exec('echo "$GREETING"; pwd; cat /opt/seed/a.txt; od -An -tx1 /opt/seed/b.bin')
    assert result.return_code == 0 and result.error_type is None and result.ok
    assert result.stdout_text.split("\n")[:3] == ["hello", "/work", "seeded ✓"]
    assert result.stdout_text.split()[-3:] == ["00", "01", "ff"]
    assert await sandbox.status() == SandboxStatus.RUNNING


async def test_exec_options_cwd_env_user_stdin(sandbox: AsyncSandbox) -> None:
    assert (await sandbox.exec("pwd", cwd="/etc")).stdout == b"/etc\n"
    env = await sandbox.exec('echo "$SHARED $EXTRA $GREETING"', env={"SHARED": "call", "EXTRA": "x"})
    assert env.stdout == b"call x hello\n"
    assert (await sandbox.exec("id -u", user="nobody")).stdout == b"65534\n"
    assert (await sandbox.exec("id -u", user=65534)).stdout == b"65534\n"
    assert (await sandbox.exec("id -u", user="root")).stdout == b"0\n"
    piped = await sandbox.exec("tr a-z A-Z", stdin=b"abc\x00def")
    assert piped.stdout == b"ABC\x00DEF"


async def test_failing_command_is_a_result_with_bytes_kept_exactly(sandbox: AsyncSandbox) -> None:
    result = await sandbox.exec("printf 'out\\377'; printf 'err\\n' >&2; exit 7")
    assert (result.stdout, result.stderr, result.return_code, result.error_type) == (b"out\xff", b"err\n", 7, None)
    assert not result.ok


async def test_exec_timeout_is_a_result_and_deadline_is_an_error(sandbox: AsyncSandbox) -> None:
    timed_out = await sandbox.exec("sleep 30", timeout_s=1)
    assert (timed_out.return_code, timed_out.error_type) == (125, "timeout")
    with pytest.raises(sandboxd.DeadlineExceeded) as info:
        await sandbox.exec("sleep 30", deadline_s=1)
    assert info.value.code is not None and info.value.code.name == "DEADLINE_EXCEEDED"
    # The sandbox is still usable afterwards.
    assert (await sandbox.exec("echo ok")).stdout == b"ok\n"


def test_exec_result_carries_usage_when_the_server_sends_it() -> None:
    # Conversion only: the Docker exec engine sends no usage; the agent engine does.
    with_usage = pb.ExecResponse(
        stdout=b"x",
        return_code=0,
        usage=pb.ExecUsage(wall_time_s=0.5, user_cpu_s=0.25, system_cpu_s=0.125, peak_rss_bytes=4096),
    )
    result = sandboxd.ExecResult.from_proto(with_usage)
    assert result.usage == sandboxd.ExecUsage(0.5, 0.25, 0.125, 4096)
    assert sandboxd.ExecResult.from_proto(pb.ExecResponse(error_type="timeout", return_code=125)).usage is None
    assert sandboxd.ExecResult.from_proto(pb.ExecResponse(error_type="timeout")).error_type == "timeout"


async def test_exec_stream_streams_or_says_unimplemented_and_falls_back(sandbox: AsyncSandbox) -> None:
    command = "echo one; echo two >&2; exit 3"
    reference = await sandbox.exec(command)
    events = [e async for e in sandbox.exec_stream(command, fallback=True)]
    assert isinstance(events[-1], sandboxd.ExecExit)
    assert (events[-1].return_code, events[-1].error_type) == (3, None)
    assert b"".join(e.data for e in events if isinstance(e, sandboxd.Stdout)) == reference.stdout
    assert b"".join(e.data for e in events if isinstance(e, sandboxd.Stderr)) == reference.stderr
    try:
        streamed = [e async for e in sandbox.exec_stream(command)]
    except sandboxd.Unimplemented as exc:
        assert "ExecStream" in str(exc)  # this server has no ExecStream yet: a clear, typed error
    else:
        last = streamed[-1]
        assert isinstance(last, sandboxd.ExecExit) and (last.return_code, last.error_type) == (3, None)
        assert b"".join(e.data for e in streamed if isinstance(e, sandboxd.Stdout)) == reference.stdout


# --- files ---------------------------------------------------------------------------------------


async def test_upload_download_bytes_path_and_file_objects(sandbox: AsyncSandbox, tmp_path: Path) -> None:
    blob = os.urandom(600 * 1024 + 7)  # several chunks, odd size
    assert await sandbox.upload_file("/data/in/blob.bin", blob) == len(blob)
    assert await sandbox.download_file("/data/in/blob.bin") == blob

    local = tmp_path / "local.bin"
    local.write_bytes(blob[:1000])
    assert await sandbox.upload_file("/data/from-path.bin", local, mode=0o600) == 1000
    listing = await sandbox.exec("stat -c '%u %a %s' /data/from-path.bin")
    assert listing.stdout == b"0 600 1000\n"

    read_end, write_end = os.pipe()  # a pipe cannot seek: no size is announced
    os.write(write_end, b"no size announced")
    os.close(write_end)
    stream = os.fdopen(read_end, "rb")
    assert not stream.seekable()
    with stream:
        assert await sandbox.upload_file("/data/stream.txt", stream) == len(b"no size announced")

    target = tmp_path / "nested" / "dir" / "out.bin"
    assert await sandbox.download_file("/data/in/blob.bin", target) == len(blob)
    assert target.read_bytes() == blob
    chunks = [c async for c in sandbox.iter_download("/data/stream.txt")]
    assert b"".join(chunks) == b"no size announced"


async def test_file_errors_are_typed_and_leave_nothing_behind(
    sandbox: AsyncSandbox, client: Client, tmp_path: Path
) -> None:
    target = tmp_path / "missing.bin"
    with pytest.raises(sandboxd.FileNotFound):
        await sandbox.download_file("/no/such/file", target)
    assert list(tmp_path.iterdir()) == []  # no partial file
    with pytest.raises(sandboxd.InvalidArgument, match="path"):
        await sandbox.upload_file("relative/path", b"x")
    with pytest.raises(sandboxd.SandboxNotFound):
        await client.upload_file(UNKNOWN_ID, "/tmp/x", b"x")
    with pytest.raises(sandboxd.SandboxNotFound):
        await client.download_file(UNKNOWN_ID, "/etc/passwd")


# --- status, endpoint, serialize/connect, close ----------------------------------------------------


async def test_endpoint_reaches_a_service_in_the_sandbox(sandbox: AsyncSandbox) -> None:
    started = await sandbox.exec("mkdir -p /www && echo served > /www/index.html && httpd -p 8080 -h /www")
    assert started.return_code == 0, started
    endpoint = await sandbox.endpoint(8080)
    assert endpoint.url.startswith("http://127.0.0.1:") and endpoint.headers == {}

    def fetch() -> bytes:
        with urllib.request.urlopen(endpoint.url + "/index.html", timeout=10) as response:
            return bytes(response.read())

    assert await asyncio.to_thread(fetch) == b"served\n"
    with pytest.raises(sandboxd.InvalidArgument, match="9999"):
        await sandbox.endpoint(9999)


async def test_serialize_and_connect_from_another_client(sandbox: AsyncSandbox, server: ServerProcess) -> None:
    descriptor = json.loads(json.dumps(sandbox.serialize()))
    assert descriptor["sandbox_id"] == sandbox.sandbox_id and descriptor["ports"] == [8080]
    again = await AsyncSandbox.connect(descriptor, address=server.address)
    try:
        assert again.sandbox_id == sandbox.sandbox_id
        assert again.image is not None and "bash" in again.image and again.shell == "bash"
        assert (await again.exec('echo "$GREETING"')).stdout == b"hello\n"
        assert (await again.endpoint(8080)).url == (await sandbox.endpoint(8080)).url
    finally:
        await again.client.close()  # not again.close(): that would remove the sandbox
    with pytest.raises(sandboxd.SandboxNotFound):
        await sandbox.client.connect(UNKNOWN_ID)
    with pytest.raises(ValueError, match="sandbox_id"):
        await sandbox.client.connect({"ports": [1]})


async def test_close_is_idempotent_and_status_follows(client: Client, images: Images) -> None:
    sandbox = await client.create({"image": images.busybox, "resources": {"cpu": 1, "memory_mib": 64}})
    assert await sandbox.status() == SandboxStatus.RUNNING
    await sandbox.close()
    assert sandbox.closed
    assert await client.status(sandbox.sandbox_id) == SandboxStatus.STOPPED
    await sandbox.close()
    await client.close_sandbox(sandbox.sandbox_id)
    # A gone id of the service's own shape reads STOPPED (the daemon decides, as after a
    # restart); an id it never issues is NOT_FOUND.
    assert await client.status(UNKNOWN_ID) == SandboxStatus.STOPPED
    with pytest.raises(sandboxd.SandboxNotFound):
        await client.status("sandboxd-not-an-id")
    with pytest.raises(sandboxd.SandboxNotFound):
        await client.exec(UNKNOWN_ID, "true")


async def test_async_with_owning_sandbox_closes_container_and_client(server: ServerProcess, images: Images) -> None:
    async with await AsyncSandbox.create(images.busybox, address=server.address) as sandbox:
        assert (await sandbox.exec("echo in")).stdout == b"in\n"
        sandbox_id = sandbox.sandbox_id
    async with Client(server.address) as other:
        assert await other.status(sandbox_id) == SandboxStatus.STOPPED
    with pytest.raises(sandboxd.SandboxdError):
        await sandbox.client.status(sandbox_id)  # its own client is closed


# --- create failures -------------------------------------------------------------------------------


async def test_create_failures_are_typed(client: Client, images: Images) -> None:
    with pytest.raises(sandboxd.InvalidArgument, match="image"):
        await client.create(SandboxSpec(image="-v"))
    with pytest.raises(sandboxd.InvalidArgument, match="ports"):
        await client.create(SandboxSpec(image=images.busybox, ports=[80, 80]))
    with pytest.raises(sandboxd.CreateFailed) as failed:
        await client.create(NO_SUCH_IMAGE)
    assert failed.value.code is not None and failed.value.code.name == "FAILED_PRECONDITION"
    with pytest.raises(sandboxd.PermissionDenied, match="volumes"):
        await client.create(SandboxSpec(image=images.busybox, volumes=["/:/host"]))
    with pytest.raises(sandboxd.PermissionDenied, match="run_args"):
        await client.create({"image": images.busybox, "provider_options": {"run_args": ["--privileged"]}})
    with pytest.raises(ValueError, match="imgae"):
        await client.create({"imgae": images.busybox})
    with pytest.raises(sandboxd.CreateVerificationFailed):
        # The readiness probe runs through the entrypoint-less keep-alive; an entrypoint that
        # exits at once leaves nothing to probe.
        await client.create(SandboxSpec(image=images.busybox, entrypoint=["/bin/false"]))


# --- terminals -------------------------------------------------------------------------------------


async def test_pty_session_size_io_resize_and_exit(sandbox: AsyncSandbox) -> None:
    async with sandbox.pty(rows=30, cols=100) as session:
        assert session.mode == "pty" and session.session_id
        await session.write(b'stty size; echo "sum=$((6*7))"\n')
        seen = b""
        while b"sum=42" not in seen or b"30 100" not in seen:
            seen += await session.read(timeout_s=20)
        await session.resize(40, 120)
        await session.write(b"stty size\n")
        while b"40 120" not in seen:
            seen += await session.read(timeout_s=20)
        await session.write(b"exit 3\n")
        rest = b"".join([chunk async for chunk in session])  # async iteration until EOF
        assert b"exit 3" in rest  # the terminal's echo of the last line
        assert await session.wait_exit(timeout_s=20) == 3
        assert await session.read(timeout_s=5) == b""
    assert session.closed
    with pytest.raises(sandboxd.PtySessionError):
        await session.write(b"late\n")


async def test_pty_signal_and_pipe_mode(sandbox: AsyncSandbox) -> None:
    session = await sandbox.pty("echo started; sleep 60", pipe=True)
    try:
        assert session.mode == "pipe"
        assert await session.read(timeout_s=20) == b"started\n"
        with pytest.raises(TimeoutError):
            await session.read(timeout_s=0.2)
        with pytest.raises(ValueError, match="SIGUSR1"):
            await session.send_signal("SIGUSR1")
        await session.send_signal("SIGTERM")
        assert await session.wait_exit(timeout_s=20) == 128 + 15
    finally:
        await session.close()
    async with sandbox.pty("echo out; echo err >&2; exit 5", pipe=True, env={"X": "1"}) as piped:
        assert await piped.read_all(timeout_s=20) == b"out\n"
        assert await piped.read_stderr(timeout_s=20) == b"err\n"
        assert await piped.wait_exit(timeout_s=20) == 5


async def test_pty_failures_are_typed(sandbox: AsyncSandbox, client: Client) -> None:
    with pytest.raises(sandboxd.SandboxNotFound):
        await client.open_pty(UNKNOWN_ID)
    with pytest.raises(sandboxd.InvalidArgument, match="cwd"):
        await sandbox.pty("true", cwd="relative")


# --- the round's calls: exercised where this server has them -----------------------------------------


async def test_round_calls_work_or_answer_unimplemented(sandbox: AsyncSandbox, client: Client) -> None:
    try:
        await sandbox.pause()
    except sandboxd.Unimplemented:
        pass
    else:
        assert await sandbox.status() == SandboxStatus.PAUSED
        await sandbox.resume()
        assert await sandbox.status() == SandboxStatus.RUNNING
    try:
        page = await client.list(labels={"suite": "python"})
    except sandboxd.Unimplemented:
        pass
    else:
        assert sandbox.sandbox_id in [info.ref.sandbox_id for info in page.sandboxes]
    try:
        expires = await sandbox.set_timeout(600)
    except sandboxd.Unimplemented:
        pass
    else:
        assert expires > 0


def test_client_built_outside_an_event_loop_serves_each_loop(server: ServerProcess, images: Images) -> None:
    client = Client(server.address)  # no running loop here: the channel is made on first use

    async def create() -> str:
        sandbox = await client.create(images.busybox)
        return sandbox.sandbox_id

    async def use_and_close(sandbox_id: str) -> bytes:
        result = await client.exec(sandbox_id, "echo second loop")
        await client.close_sandbox(sandbox_id)
        await client.close()
        return result.stdout

    sandbox_id = asyncio.run(create())
    assert asyncio.run(use_and_close(sandbox_id)) == b"second loop\n"
