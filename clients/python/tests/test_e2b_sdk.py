"""The `e2b` SDK (PyPI, pinned in pyproject's test extras), unchanged, against sandboxd's E2B
endpoint (`server.e2b`) on the real daemon: pointed at it by `E2B_API_URL` and
`E2B_SANDBOX_URL` only, as a user of E2B would point it at a self-hosted service.

The server has two tenants: every call is tenant A's unless a test says otherwise, and B must
never see A's sandboxes through either half of the API."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import httpx
import pytest
from e2b import (
    AsyncSandbox,
    AuthenticationException,
    CommandExitException,
    FilesystemEventType,
    InvalidArgumentException,
    NotFoundException,
    Sandbox,
    SandboxException,
    SandboxQuery,
    TimeoutException,
)
from e2b.sandbox.commands.command_handle import PtySize

from markdown import example
from support import REPO_ROOT, ContainerLabel, Images, ServerProcess

README = REPO_ROOT / "README.md"

KEY_A = secrets.token_hex(16)
KEY_B = secrets.token_hex(16)
DOMAIN = "sandboxd.test"


@pytest.fixture(scope="module")
def e2b_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2b")


@pytest.fixture(scope="module")
def e2b_server(images: Images, binary: Path, label: ContainerLabel, e2b_workdir: Path) -> Iterator[ServerProcess]:
    workdir = e2b_workdir
    tenants = workdir / "tenants.json"
    tenants.write_text(
        json.dumps(
            {
                "tenants": [
                    {"name": "a", "key_sha256": hashlib.sha256(KEY_A.encode()).hexdigest()},
                    {"name": "b", "key_sha256": hashlib.sha256(KEY_B.encode()).hexdigest()},
                ]
            }
        )
    )
    server = ServerProcess(
        binary,
        label,
        workdir,
        server={
            "auth": {"tenants_file": str(tenants)},
            "audit": str(workdir / "audit.jsonl"),
            "e2b": {"listen": "127.0.0.1:0", "templates": {"base": images.bash}, "domain": DOMAIN},
        },
    )
    assert server.e2b_address is not None, "no `sandboxd e2b on` line"
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def e2b_env(e2b_server: ServerProcess, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"http://{e2b_server.e2b_address}"
    monkeypatch.setenv("E2B_API_URL", url)
    monkeypatch.setenv("E2B_SANDBOX_URL", url)
    monkeypatch.setenv("E2B_API_KEY", KEY_A)
    return url


@pytest.fixture
def sbx() -> Iterator[Sandbox]:
    sandbox = Sandbox.create(timeout=300)
    yield sandbox
    sandbox.kill()


def test_create_with_template_metadata_envs_and_timeout_then_kill() -> None:
    tag = secrets.token_hex(4)
    before = datetime.now(timezone.utc)
    sandbox = Sandbox.create("base", timeout=120, metadata={"suite": "e2b", "tag": tag}, envs={"GREETING": "hi"})
    after = datetime.now(timezone.utc)
    try:
        info = sandbox.get_info()
        assert info.template_id == "base"
        assert info.metadata == {"suite": "e2b", "tag": tag}
        # The 120 s lease runs from the create (its start is the container's, before the
        # create's readiness wait, so it is not the reference: a loaded host takes seconds).
        assert before <= info.started_at <= after
        assert 119 <= (info.end_at - before).total_seconds() and (info.end_at - after).total_seconds() <= 121
        assert sandbox.commands.run("echo $GREETING").stdout == "hi\n"
        assert sandbox.is_running()
    finally:
        assert sandbox.kill()
    assert not Sandbox.kill(sandbox.sandbox_id), "a second kill finds nothing (E2B's 404)"
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sandbox.sandbox_id)


def test_unknown_template_and_bad_bodies_are_refused_e2b_style(e2b_env: str) -> None:
    # E2B's SDK raises its base exception for a create's 404, carrying the status.
    with pytest.raises(SandboxException, match="template") as unknown:
        Sandbox.create("no-such-template")
    assert getattr(unknown.value, "status_code", None) == 404
    before = [s.sandbox_id for s in Sandbox.list().next_items()]
    headers = {"X-API-Key": KEY_A}
    bad = httpx.post(f"{e2b_env}/sandboxes", json={"templateID": "base", "timeout": "soon"}, headers=headers)
    assert bad.status_code == 400
    assert bad.json()["code"] == 400 and "timeout" in bad.json()["message"]
    zero = httpx.post(f"{e2b_env}/sandboxes", json={"templateID": "base", "timeout": 0}, headers=headers)
    assert zero.status_code == 400 and "timeout" in zero.json()["message"]
    state = httpx.get(f"{e2b_env}/v2/sandboxes", params={"state": "dead"}, headers=headers)
    assert state.status_code == 400 and "running, paused" in state.json()["message"]
    assert [s.sandbox_id for s in Sandbox.list().next_items()] == before, "a refused create made nothing"


def test_commands_output_exit_codes_env_cwd_user(sbx: Sandbox) -> None:
    r = sbx.commands.run("echo out; echo err >&2; echo $FOO", envs={"FOO": "bar"})
    assert (r.stdout, r.stderr, r.exit_code) == ("out\nbar\n", "err\n", 0)
    assert sbx.commands.run("pwd", cwd="/tmp").stdout == "/tmp\n"
    assert sbx.commands.run("id -u", user="root").stdout.strip() == "0"
    with pytest.raises(CommandExitException) as failed:
        sbx.commands.run("echo nope >&2; exit 3")
    assert failed.value.exit_code == 3
    assert failed.value.stderr == "nope\n"
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 30", timeout=1)


def test_background_commands_stdin_list_connect_and_kill(sbx: Sandbox) -> None:
    reader = sbx.commands.run("read line; echo got:$line", background=True, stdin=True)
    attached = sbx.commands.connect(reader.pid)
    sbx.commands.send_stdin(reader.pid, "abc\n")
    assert "got:abc" in attached.wait().stdout

    sleeper = sbx.commands.run("sleep 300", background=True)
    assert sleeper.pid in [p.pid for p in sbx.commands.list()]
    assert sbx.commands.kill(sleeper.pid)
    with pytest.raises(CommandExitException):
        sleeper.wait()
    deadline = time.monotonic() + 10
    while sleeper.pid in [p.pid for p in sbx.commands.list()] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sleeper.pid not in [p.pid for p in sbx.commands.list()]
    assert not sbx.commands.kill(sleeper.pid), "killing a gone process reports False (NotFound)"


def test_files_write_read_list_info_dirs_rename_remove(sbx: Sandbox) -> None:
    sbx.files.write("/tmp/work/a.txt", "hello")
    sbx.files.write("/tmp/work/bin.dat", b"\x00\x01\xff")
    assert sbx.files.read("/tmp/work/a.txt") == "hello"
    assert bytes(sbx.files.read("/tmp/work/bin.dat", format="bytes")) == b"\x00\x01\xff"
    assert sbx.files.make_dir("/tmp/work/sub/deeper")
    assert not sbx.files.make_dir("/tmp/work/sub"), "an existing directory is False"
    sbx.files.write("/tmp/work/sub/deeper/c.txt", "c")
    one = {e.path for e in sbx.files.list("/tmp/work")}
    assert one == {"/tmp/work/a.txt", "/tmp/work/bin.dat", "/tmp/work/sub"}
    three = {e.path for e in sbx.files.list("/tmp/work", depth=3)}
    assert "/tmp/work/sub/deeper/c.txt" in three
    info = sbx.files.get_info("/tmp/work/a.txt")
    assert (info.name, info.type.value if info.type else None, info.size) == ("a.txt", "file", 5)
    assert sbx.files.get_info("/tmp/work/sub").type is not None
    moved = sbx.files.rename("/tmp/work/a.txt", "/tmp/work/b.txt")
    assert moved.path == "/tmp/work/b.txt"
    assert not sbx.files.exists("/tmp/work/a.txt")
    assert sbx.files.exists("/tmp/work/b.txt")
    sbx.files.remove("/tmp/work/sub")
    assert not sbx.files.exists("/tmp/work/sub/deeper/c.txt")
    with pytest.raises(NotFoundException):
        sbx.files.read("/tmp/work/missing")
    # A relative path is below the user's home, as on E2B.
    sbx.files.write("relative.txt", "r")
    assert sbx.files.read("/root/relative.txt") == "r"
    assert sbx.files.exists("relative.txt")
    with pytest.raises(InvalidArgumentException, match="path"):
        sbx.files.get_info("")


def test_watch_dir_reports_changes(sbx: Sandbox) -> None:
    sbx.files.make_dir("/tmp/watched")
    handle = sbx.files.watch_dir("/tmp/watched")
    sbx.files.write("/tmp/watched/new.txt", "x")
    deadline = time.monotonic() + 10
    seen: list[tuple[str, FilesystemEventType]] = []
    while not any(n == "new.txt" for n, _ in seen) and time.monotonic() < deadline:
        seen += [(e.name, e.type) for e in handle.get_new_events()]
        time.sleep(0.2)
    handle.stop()
    assert ("new.txt", FilesystemEventType.CREATE) in seen or ("new.txt", FilesystemEventType.WRITE) in seen, seen


def test_pty_create_input_resize_kill(sbx: Sandbox) -> None:
    output = bytearray()
    terminal = sbx.pty.create(PtySize(rows=24, cols=80))
    done = threading.Event()

    def read() -> None:
        try:
            for _, _, pty in terminal:
                if pty:
                    output.extend(pty)
        except Exception:  # the stream ends with the kill
            pass
        done.set()

    threading.Thread(target=read, daemon=True).start()
    sbx.pty.resize(terminal.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(terminal.pid, b"stty size; echo mark$((40+2))\n")
    deadline = time.monotonic() + 10
    while b"mark42" not in output and time.monotonic() < deadline:
        time.sleep(0.1)
    assert b"mark42" in output, bytes(output)
    assert b"30 100" in output, bytes(output)
    assert sbx.pty.kill(terminal.pid)
    assert done.wait(10)


def test_timeout_list_with_metadata_connect_pause_resume() -> None:
    tag = secrets.token_hex(4)
    sandbox = Sandbox.create(timeout=60, metadata={"tag": tag})
    try:
        before = sandbox.get_info().end_at
        sandbox.set_timeout(600)
        assert (sandbox.get_info().end_at - before).total_seconds() > 400
        listed = Sandbox.list(query=SandboxQuery(metadata={"tag": tag})).next_items()
        assert [s.sandbox_id for s in listed] == [sandbox.sandbox_id]
        assert Sandbox.list(query=SandboxQuery(metadata={"tag": "other"})).next_items() == []

        again = Sandbox.connect(sandbox.sandbox_id)
        assert again.commands.run("echo again").stdout == "again\n"

        assert sandbox.pause()
        assert Sandbox.get_info(sandbox.sandbox_id).state.value == "paused"
        assert not sandbox.pause(), "already paused"
        resumed = Sandbox.connect(sandbox.sandbox_id)
        assert Sandbox.get_info(sandbox.sandbox_id).state.value == "running"
        assert resumed.commands.run("echo back").stdout == "back\n"
    finally:
        sandbox.kill()


def test_tenants_never_see_each_other(e2b_env: str) -> None:
    mine = Sandbox.create(timeout=120)
    try:
        assert mine.sandbox_id not in [s.sandbox_id for s in Sandbox.list(api_key=KEY_B).next_items()]
        with pytest.raises(NotFoundException):
            Sandbox.get_info(mine.sandbox_id, api_key=KEY_B)
        with pytest.raises(NotFoundException):
            Sandbox.connect(mine.sandbox_id, api_key=KEY_B)
        assert not Sandbox.kill(mine.sandbox_id, api_key=KEY_B)
        with pytest.raises(AuthenticationException):
            Sandbox.list(api_key="wrong").next_items()

        theirs = Sandbox.create(timeout=120, api_key=KEY_B)
        try:
            # A's envd token reaches A's sandbox only.
            health = f"{e2b_env}/health"
            token = mine._envd_access_token
            assert token
            ok = httpx.get(health, headers={"E2b-Sandbox-Id": mine.sandbox_id, "X-Access-Token": token})
            assert ok.status_code == 204
            other = httpx.get(health, headers={"E2b-Sandbox-Id": theirs.sandbox_id, "X-Access-Token": token})
            assert other.status_code == 403, other.text
            # Host-name routing: `49983-<sandbox id>.<server.e2b.domain>` names the sandbox.
            host = {"Host": f"49983-{mine.sandbox_id}.{DOMAIN}", "X-Access-Token": token}
            assert httpx.get(health, headers=host).status_code == 204
            assert mine.get_host(49983) == f"49983-{mine.sandbox_id}.{DOMAIN}"
            anonymous = httpx.get(health, headers={"E2b-Sandbox-Id": mine.sandbox_id})
            assert anonymous.status_code == 401
            assert "message" in anonymous.json()
        finally:
            theirs.kill()
    finally:
        mine.kill()


async def test_async_client_commands_files_and_watch() -> None:
    sandbox = await AsyncSandbox.create(timeout=120, metadata={"client": "async"})
    try:
        r = await sandbox.commands.run("echo async; echo e >&2")
        assert (r.stdout, r.stderr) == ("async\n", "e\n")
        await sandbox.files.write("/tmp/x.txt", "async file")
        assert await sandbox.files.read("/tmp/x.txt") == "async file"
        await sandbox.files.make_dir("/tmp/aw")
        events: list[str] = []
        got = asyncio.Event()

        def on_event(e: object) -> None:
            events.append(getattr(e, "name", ""))
            if "f.txt" in events:
                got.set()

        watcher = await sandbox.files.watch_dir("/tmp/aw", on_event)
        await sandbox.files.write("/tmp/aw/f.txt", "1")
        await asyncio.wait_for(got.wait(), 10)
        await watcher.stop()  # type: ignore[no-untyped-call]  # the SDK leaves it unannotated
        assert not [n for n in events if "sandboxd-upload" in n], events
        with pytest.raises(CommandExitException):
            await sandbox.commands.run("exit 5")
    finally:
        await sandbox.kill()


def test_http1_and_the_binary_connect_codec(e2b_env: str) -> None:
    # The SDK speaks HTTP/2 (h2c) by default; HTTP/1.1 when told.
    sandbox = Sandbox.create(timeout=120, http_version="1.1")
    try:
        assert sandbox.commands.run("echo one-one").stdout == "one-one\n"
        sandbox.files.write("/tmp/h1.txt", "h1")
        assert sandbox.files.read("/tmp/h1.txt") == "h1"
        # Connect's binary codec (application/proto): ListRequest is empty, and the answer's
        # first field is the repeated ProcessInfo (tag 0x0a) while a process runs.
        running = sandbox.commands.run("sleep 30", background=True)
        headers = {
            "E2b-Sandbox-Id": sandbox.sandbox_id,
            "X-Access-Token": sandbox._envd_access_token or "",
            "Content-Type": "application/proto",
        }
        listed = httpx.post(f"{e2b_env}/process.Process/List", content=b"", headers=headers)
        assert listed.status_code == 200 and listed.headers["content-type"] == "application/proto"
        assert listed.content[:1] == b"\x0a"
        # A Connect error is JSON with the code's name.
        unknown = httpx.post(f"{e2b_env}/process.Process/Nope", content=b"", headers=headers)
        assert unknown.status_code == 501 and unknown.json()["code"] == "unimplemented"
        running.kill()
    finally:
        sandbox.kill()


def test_readme_e2b_example_runs(e2b_env: str, tmp_path: Path) -> None:
    """README's "e2b-example", as a reader runs it: its own process, the SDK's variables set."""
    code = example("e2b-example", README)
    env = {**os.environ, "E2B_API_URL": e2b_env, "E2B_SANDBOX_URL": e2b_env, "E2B_API_KEY": KEY_A}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "hi from e2b\nkept\n"


def test_fork_starts_children_from_the_filesystem(sbx: Sandbox) -> None:
    sbx.files.write("/tmp/forked.txt", "from the parent")
    children = sbx.fork(count=2, timeout=120)
    try:
        assert len(children) == 2
        for child in children:
            assert isinstance(child, Sandbox), child
            assert child.sandbox_id != sbx.sandbox_id
            assert child.files.read("/tmp/forked.txt") == "from the parent"
        assert sbx.commands.run("echo parent runs on").stdout == "parent runs on\n"
    finally:
        for child in children:
            if isinstance(child, Sandbox):
                child.kill()


async def test_one_front_end_one_authority(e2b_server: ServerProcess, e2b_env: str) -> None:
    """A sandbox made through E2B is the gRPC API's sandbox, and the gRPC API's scopes hold on
    envd: a read token can stat files but not start, feed or signal processes."""
    from sandboxd import AsyncSandbox as GrpcSandbox

    made = Sandbox.create(timeout=120, metadata={"via": "e2b"})
    try:
        grpc = await GrpcSandbox.connect(made.sandbox_id, address=e2b_server.address, token=KEY_A)
        assert (await grpc.exec("echo seen by grpc")).stdout == b"seen by grpc\n"
        read = (await grpc.grant("read")).token
        await grpc.client.close()
        running = made.commands.run("sleep 60", background=True)
        base = {"E2b-Sandbox-Id": made.sandbox_id, "X-Access-Token": read, "Content-Type": "application/json"}
        stat = httpx.post(f"{e2b_env}/filesystem.Filesystem/Stat", json={"path": "/tmp"}, headers=base)
        assert stat.status_code == 200, stat.text
        for method, body in [
            ("SendInput", {"process": {"pid": running.pid}, "input": {"stdin": "eA=="}}),
            ("SendSignal", {"process": {"pid": running.pid}, "signal": "SIGNAL_SIGKILL"}),
            ("List", {}),
        ]:
            refused = httpx.post(f"{e2b_env}/process.Process/{method}", json=body, headers=base)
            assert refused.status_code == 403, (method, refused.text)
            assert refused.json()["code"] == "permission_denied"
        assert running.pid in [p.pid for p in made.commands.list()], "nothing was signalled"
        running.kill()
    finally:
        made.kill()


def test_calls_through_the_e2b_endpoint_are_audited(e2b_server: ServerProcess, e2b_workdir: Path) -> None:
    """The E2B endpoint's calls reach the same audit log as gRPC calls, with the tenant and the
    sandbox: a process started or a file written through E2B is never unlogged."""
    log = e2b_workdir / "audit.jsonl"
    sandbox = Sandbox.create("base", timeout=120)
    try:
        sandbox.commands.run("true")
        sandbox.files.write("/tmp/audited.txt", "x")
        sandbox.files.make_dir("/tmp/audited-dir")
    finally:
        sandbox.kill()
    mine = [
        line
        for line in (json.loads(text) for text in log.read_text().splitlines())
        if line.get("sandbox_id") == sandbox.sandbox_id
    ]
    methods = {line["method"] for line in mine}
    assert {"Create", "Grant", "Pty", "Upload", "MakeDir", "Close"} <= methods, methods
    assert all(line["tenant"] == "a" for line in mine), mine
    assert not methods & {"Status", "List", "Stat", "ListDir"}, "reads leave no line"
