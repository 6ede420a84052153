"""One driver for any NeMo Gym sandbox provider: it exercises the provider protocols the way
Gym's `AsyncSandbox` does and returns every observable result, normalized only where a value
is unique per run (sandbox ids, host ports) or provider-specific text (a timeout's message, the
runtime's words for a command that could not start).

It covers exec (cwd, env, users, stdin, failure, timeout, a missing cwd, an unknown user, a
missing program, output that is not UTF-8), files (permissions, an upload onto a directory, a
missing local source, a missing remote file, a directory download to a new path and into an
existing directory, a file into a directory), status, endpoint, serialize/connect (plain and
with a scope), a PTY program and close; and, in a sandbox of their own, resource limits (as the
sandbox's cgroup reads them) and a custom entrypoint (what it ran, with the spec's env), and a
create without an image.

`run_conformance` is called with Gym's own Docker provider and with
`create_provider({"sandboxd": ...})`; the test asserts the two observation dicts are equal.

nemo-gym 0.7.0's Docker provider has no PTY sessions (`SupportsSandboxPty` is absent), so the
PTY step's reference there is the provider's `exec` of the same program: a pipe-mode session
must yield the same stdout, stderr and exit code as `exec` does.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import tempfile
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nemo_gym.sandbox.providers import (
    ConnectableProvider,
    SandboxCreateError,
    SandboxHandle,
    SandboxPtySpec,
    SandboxSpec,
    SandboxStatus,
    SupportsSandboxEndpoint,
    SupportsSandboxPty,
)

PTY_PROGRAM = "printf 'out\\n'; printf 'err\\n' >&2; exit 3"
# The cgroup's CPU quota and memory limit as the sandbox sees them (cgroup v2, else v1).
LIMITS = (
    "cat /sys/fs/cgroup/cpu.max 2>/dev/null || "
    "echo $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us); "
    "cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes"
)
ENTRYPOINT = ["/bin/sh", "-c", 'echo "$GREETING from the entrypoint" > /tmp/entrypoint.out; exec sleep 100000']
BLOB = bytes(range(256)) * 64 + b"tail"


def _result(result: Any) -> dict[str, Any]:
    return {
        "stdout": result.stdout,
        "stderr": result.stderr,
        "return_code": result.return_code,
        "error_type": result.error_type,
    }


async def _raises(call: Awaitable[Any]) -> str:
    """The Gym-level family of the exception `call` raises ("ok" when none)."""
    try:
        await call
    except ValueError:
        return "ValueError"
    except SandboxCreateError:
        return "SandboxCreateError"
    except RuntimeError:
        return "RuntimeError"
    return "ok"


def _start_failure(result: Any, named: str) -> dict[str, Any]:
    """A command that could not start, without the runtime's own wording."""
    return {
        "return_code": result.return_code,
        "error_type": result.error_type,
        "stderr": result.stderr,
        "stdout_names_it": named in (result.stdout or ""),
    }


def _tree(root: Path) -> dict[str, Any]:
    """A local tree as {relative path: (kind, permission bits, content or link target)}."""
    found: dict[str, Any] = {}
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        if path.is_symlink():
            found[relative] = ("link", None, os.readlink(path))
        elif path.is_dir():
            found[relative] = ("dir", stat.S_IMODE(path.stat().st_mode), None)
        else:
            found[relative] = ("file", stat.S_IMODE(path.stat().st_mode), path.read_bytes())
    return found


async def _file_differences(provider: Any, handle: SandboxHandle, tmp: Path) -> dict[str, Any]:
    """The file cases where sandboxd and Gym's Docker provider once differed."""
    obs: dict[str, Any] = {}
    # An upload onto an existing directory puts the file inside it, under the source's name.
    await provider.exec(handle, "mkdir -p /data/box", user="root")
    note = tmp / "note.txt"
    note.write_bytes(b"inside the directory\n")
    note.chmod(0o600)
    await provider.upload_file(handle, note, "/data/box")
    obs["upload_onto_directory"] = _result(
        await provider.exec(handle, "stat -c '%F %a' /data/box /data/box/note.txt; cat /data/box/note.txt")
    )
    # A local source that does not exist.
    obs["upload_missing_source"] = await _raises(provider.upload_file(handle, tmp / "absent.txt", "/data/absent.txt"))
    obs["upload_missing_source_left_file"] = (await provider.exec(handle, "test -e /data/absent.txt")).return_code
    # A directory download copies the tree: to a new path, and inside an existing directory.
    made = await provider.exec(
        handle,
        "mkdir -p /data/tree/sub/deeper && printf top > /data/tree/top.txt && printf deep > /data/tree/sub/deeper/d"
        " && printf '#!/bin/sh\\necho run\\n' > /data/tree/sub/run.sh && chmod 755 /data/tree/sub/run.sh"
        " && chmod 700 /data/tree/sub/deeper && ln -s top.txt /data/tree/link",
        user="root",
    )
    obs["tree_made"] = made.return_code
    await provider.download_file(handle, "/data/tree", tmp / "copied")
    obs["download_directory"] = _tree(tmp / "copied")
    (tmp / "existing").mkdir()
    await provider.download_file(handle, "/data/tree", tmp / "existing")
    obs["download_directory_into_existing"] = sorted(p.name for p in (tmp / "existing").iterdir())
    await provider.download_file(handle, "/data/tree/top.txt", tmp / "existing")
    obs["download_file_into_existing"] = sorted(p.name for p in (tmp / "existing").iterdir())
    return obs


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return bytes(response.read())


async def _pty_step(provider: Any, handle: SandboxHandle) -> dict[str, Any]:
    if not isinstance(provider, SupportsSandboxPty):
        reference = await provider.exec(handle, PTY_PROGRAM)
        return {"stdout": reference.stdout, "stderr": reference.stderr, "exit": reference.return_code}
    session = await provider.create_pty(handle, SandboxPtySpec(command=PTY_PROGRAM, pty=False))
    async with session:
        stdout, stderr, code = await asyncio.wait_for(
            asyncio.gather(_drain(session.read), _drain(session.read_stderr), session.wait_exit()), 60
        )
    return {"stdout": stdout.decode(), "stderr": stderr.decode(), "exit": code}


async def _drain(read: Callable[[], Awaitable[bytes]]) -> bytes:
    parts = bytearray()
    while chunk := await read():
        parts.extend(chunk)
    return bytes(parts)


async def run_conformance(make_provider: Callable[[], Any], image: str) -> dict[str, Any]:
    """Drive a provider through create, exec, files, status, endpoint, serialize/connect, PTY
    and close; return what a caller observes."""
    provider = make_provider()
    obs: dict[str, Any] = {}
    spec = SandboxSpec(
        image=image,
        workdir="/work",
        env={"GREETING": "hello", "SHARED": "spec"},
        files={"/opt/seed/a.txt": "seeded ✓\n"},
        ports=(8080,),
    )
    handle = await provider.create(spec)
    closed = False
    try:
        obs["handle"] = {"type": type(handle).__name__, "provider_name_is_name": handle.provider_name == provider.name}
        # As Gym's AsyncSandbox.start: the spec's files go in through upload_file.
        with tempfile.TemporaryDirectory() as tmp:
            for index, (target, content) in enumerate(spec.files.items()):
                source = Path(tmp) / f"file-{index}"
                source.write_text(content, encoding="utf-8")
                await provider.upload_file(handle, source, target)

        cwd = spec.workdir
        obs["exec_basic"] = _result(
            await provider.exec(
                handle, 'echo "$GREETING"; pwd; cat /opt/seed/a.txt; stat -c "%u %a" /opt/seed/a.txt', cwd=cwd
            )
        )
        obs["exec_cwd"] = _result(await provider.exec(handle, "pwd", cwd="/etc"))
        obs["exec_env"] = _result(
            await provider.exec(
                handle, 'echo "$SHARED $EXTRA $GREETING"', cwd=cwd, env={"SHARED": "call", "EXTRA": "x"}
            )
        )
        obs["exec_user_name"] = _result(await provider.exec(handle, "id -u; id -g", cwd=cwd, user="nobody"))
        obs["exec_user_root"] = _result(await provider.exec(handle, "id -u", cwd=cwd, user="root"))
        obs["exec_user_uid"] = _result(await provider.exec(handle, "id -u", cwd=cwd, user=65534))
        obs["exec_stdin"] = _result(await provider.exec(handle, "tr a-z A-Z; echo", cwd=cwd, stdin=b"piped in"))
        obs["exec_failure"] = _result(await provider.exec(handle, "echo out; echo err >&2; exit 7", cwd=cwd))
        obs["exec_not_utf8"] = _result(
            await provider.exec(handle, "printf '\\377\\376 ok\\n'; printf 'caf\\351\\n' >&2")
        )
        obs["exec_missing_program"] = (await provider.exec(handle, "no-such-program-here")).return_code
        # A command that cannot start: Gym's Docker provider answers 126 with the reason in stdout.
        missing_cwd = await provider.exec(handle, "pwd", cwd="/no/such/dir")
        obs["exec_missing_cwd"] = _start_failure(missing_cwd, "/no/such/dir")
        unknown_user = await provider.exec(handle, "id -u", cwd=cwd, user="nosuchuser")
        obs["exec_unknown_user"] = _start_failure(unknown_user, "nosuchuser")
        timed_out = await provider.exec(handle, "sleep 30", cwd=cwd, timeout_s=1)
        obs["exec_timeout"] = {
            "stdout": timed_out.stdout,
            "return_code": timed_out.return_code,
            "error_type": timed_out.error_type,
            "stderr_mentions_timeout": "timed out" in (timed_out.stderr or ""),
        }

        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "blob.bin"
            source.write_bytes(BLOB)
            source.chmod(0o640)
            await provider.upload_file(handle, source, "/data/in/blob.bin")
            obs["upload"] = _result(
                await provider.exec(
                    handle, "stat -c '%u %g %a %s' /data/in/blob.bin; md5sum < /data/in/blob.bin", cwd=cwd
                )
            )
            target = Path(tmp) / "nested" / "out" / "blob.bin"
            await provider.download_file(handle, "/data/in/blob.bin", target)
            obs["download_equal"] = target.read_bytes() == BLOB
            obs["download_missing"] = await _raises(
                provider.download_file(handle, "/no/such/file", Path(tmp) / "missing.bin")
            )
            obs["download_missing_left_file"] = (Path(tmp) / "missing.bin").exists()
            obs.update(await _file_differences(provider, handle, Path(tmp)))

        obs["status_running"] = (await provider.status(handle)).value

        obs["supports_endpoint"] = isinstance(provider, SupportsSandboxEndpoint)
        served = await provider.exec(
            handle, "mkdir -p /www && echo served > /www/index.html && httpd -p 8080 -h /www", cwd=cwd
        )
        obs["httpd"] = _result(served)
        endpoint = await provider.endpoint(handle, 8080)
        obs["endpoint"] = {
            "scheme_host": endpoint.endpoint.rsplit(":", 1)[0],
            "headers": endpoint.headers,
            "body": await asyncio.to_thread(_fetch, endpoint.endpoint + "/index.html"),
        }
        obs["endpoint_undeclared"] = await _raises(provider.endpoint(handle, 9999))

        obs["connectable"] = isinstance(provider, ConnectableProvider)
        # As Gym's AsyncSandbox.serialize: the descriptor carries the spec's ports and workdir.
        descriptor = await provider.serialize_handle(handle)
        descriptor = {**descriptor, "workdir": spec.workdir, "ports": list(spec.ports)}
        descriptor = json.loads(json.dumps(descriptor))
        other = make_provider()
        try:
            again = await other.connect(descriptor)
            obs["connect"] = {
                "same_id": again.sandbox_id == handle.sandbox_id,
                "exec": _result(await other.exec(again, 'echo "$GREETING"; pwd', cwd=spec.workdir)),
                "endpoint_same": (await other.endpoint(again, 8080)).endpoint == endpoint.endpoint,
            }
            # With a scope (Gym's lease scopes): sandboxd mints a token of that scope, Gym's Docker
            # provider ignores it; what the verifier may do with it is the same.
            scoped = json.loads(json.dumps(await provider.serialize_handle(handle, scope="operate")))
            scoped = {**scoped, "workdir": spec.workdir, "ports": list(spec.ports)}
            verifier = await other.connect(scoped)
            obs["connect_scoped"] = {
                "same_id": verifier.sandbox_id == handle.sandbox_id,
                "exec": _result(await other.exec(verifier, "echo graded")),
                "status": (await other.status(verifier)).value,
            }
            missing = {"sandbox_id": handle.sandbox_id[:-8] + "00000000"}
            obs["connect_missing"] = await _raises(other.connect(missing))
        finally:
            await other.aclose()

        obs["pty"] = await _pty_step(provider, handle)

        await provider.close(handle)
        closed = True
        obs["status_after_close"] = (await provider.status(handle)).value
        obs["close_again"] = await _raises(provider.close(handle))
        obs["exec_after_close"] = {
            k: v for k, v in _result(await provider.exec(handle, "true")).items() if k in ("return_code", "error_type")
        }
        obs.update(await _limits_and_entrypoint(provider, image))
        obs["create_without_image"] = await _raises(provider.create(SandboxSpec(image=None)))
    finally:
        if not closed:
            await provider.close(handle)
        await provider.aclose()
    return obs


async def _limits_and_entrypoint(provider: Any, image: str) -> dict[str, Any]:
    """A sandbox with resource limits and an entrypoint of its own: the limits its cgroup reads,
    what the entrypoint ran (with the spec's env), and that commands still run beside it."""
    spec = SandboxSpec(
        image=image,
        env={"GREETING": "hello"},
        resources={"cpu": 0.5, "memory_mib": 96},
        entrypoint=ENTRYPOINT,
    )
    handle = await provider.create(spec)
    try:
        limits = await provider.exec(handle, LIMITS)
        ran = await provider.exec(handle, "cat /tmp/entrypoint.out; echo beside it")
        return {
            "limits": {"lines": (limits.stdout or "").split(), "return_code": limits.return_code},
            "entrypoint": _result(ran),
        }
    finally:
        await provider.close(handle)


EXPECTED_HIGHLIGHTS: dict[str, Any] = {
    # Values the driver checks on top of agreement, so two providers broken alike cannot pass.
    "exec_basic": {"stdout": "hello\n/work\nseeded ✓\n0 644\n", "stderr": "", "return_code": 0, "error_type": None},
    "exec_env": {"stdout": "call x hello\n", "stderr": "", "return_code": 0, "error_type": None},
    "exec_user_name": {"stdout": "65534\n65534\n", "stderr": "", "return_code": 0, "error_type": None},
    "exec_stdin": {"stdout": "PIPED IN\n", "stderr": "", "return_code": 0, "error_type": None},
    "exec_timeout": {"stdout": None, "return_code": 125, "error_type": "timeout", "stderr_mentions_timeout": True},
    "exec_not_utf8": {"stdout": "\ufffd\ufffd ok\n", "stderr": "caf\ufffd\n", "return_code": 0, "error_type": None},
    "exec_missing_program": 127,
    "connect_scoped": {
        "same_id": True,
        "exec": {"stdout": "graded\n", "stderr": "", "return_code": 0, "error_type": None},
        "status": SandboxStatus.RUNNING.value,
    },
    "limits": {"lines": ["50000", "100000", str(96 << 20)], "return_code": 0},
    "entrypoint": {
        "stdout": "hello from the entrypoint\nbeside it\n",
        "stderr": "",
        "return_code": 0,
        "error_type": None,
    },
    "create_without_image": "SandboxCreateError",
    "download_equal": True,
    "status_running": SandboxStatus.RUNNING.value,
    "status_after_close": SandboxStatus.STOPPED.value,
    "pty": {"stdout": "out\n", "stderr": "err\n", "exit": 3},
    "exec_missing_cwd": {"return_code": 126, "error_type": None, "stderr": "", "stdout_names_it": True},
    "exec_unknown_user": {"return_code": 126, "error_type": None, "stderr": "", "stdout_names_it": True},
    "upload_onto_directory": {
        "stdout": "directory 755\nregular file 600\ninside the directory\n",
        "stderr": "",
        "return_code": 0,
        "error_type": None,
    },
    "upload_missing_source": "RuntimeError",
    "upload_missing_source_left_file": 1,
    "download_directory": {
        "link": ("link", None, "top.txt"),
        "sub": ("dir", 0o755, None),
        "sub/deeper": ("dir", 0o700, None),
        "sub/deeper/d": ("file", 0o644, b"deep"),
        "sub/run.sh": ("file", 0o755, b"#!/bin/sh\necho run\n"),
        "top.txt": ("file", 0o644, b"top"),
    },
    "download_directory_into_existing": ["tree"],
    "download_file_into_existing": ["top.txt", "tree"],
}
