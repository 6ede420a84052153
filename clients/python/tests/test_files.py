"""The file calls (`Client.list_dir`, `stat`, `make_dir`, `remove`, `rename`, `watch_dir`)
against the real server and Docker: names that are not UTF-8 round-trip as `os.fsdecode`
strings, errors are typed and name the path, and a watch sees changes as they happen."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator

import pytest

import sandboxd
from sandboxd import AsyncSandbox, Client, FileEventType, FileType, SandboxSpec

from support import Images


@pytest.fixture
async def sandbox(client: Client, images: Images) -> AsyncIterator[AsyncSandbox]:
    async with await client.create(SandboxSpec(image=images.busybox)) as sandbox:
        yield sandbox


async def test_odd_names_round_trip_and_types(client: Client, sandbox: AsyncSandbox) -> None:
    sid = sandbox.sandbox_id
    result = await sandbox.exec("mkdir /w && printf hi > \"/w/$(printf 'a b\\nc\\377')\" && ln -s target /w/link")
    assert result.return_code == 0, result.stderr
    entries = await client.list_dir(sid, "/w")
    assert [e.path_bytes for e in entries] == [b"/w/a b\nc\xff", b"/w/link"]
    odd = entries[0]
    assert (odd.type, odd.size, odd.uid, odd.mode) == (FileType.FILE, 2, 0, 0o644)
    assert entries[1].type == FileType.SYMLINK and entries[1].link_target == "target"
    # The str from an entry names the same bytes; so do bytes.
    assert (await client.stat(sid, odd.path)).size == 2
    await client.make_dir(sid, b"/w/d\xfe", mode=0o700)
    await client.rename(sid, odd.path, b"/w/d\xfe/moved\n")
    inside = await client.list_dir(sid, b"/w/d\xfe")
    assert [e.path_bytes for e in inside] == [b"/w/d\xfe/moved\n"]
    assert (await client.stat(sid, b"/w/d\xfe")).mode == 0o700
    await client.remove(sid, "/w", recursive=True)
    with pytest.raises(sandboxd.FileNotFound):
        await client.stat(sid, "/w")


async def test_errors_are_typed_and_name_the_path(client: Client, sandbox: AsyncSandbox) -> None:
    sid = sandbox.sandbox_id
    assert (await sandbox.exec("mkdir -p /e/full && : > /e/full/x && chmod 700 /e")).return_code == 0
    with pytest.raises(sandboxd.AlreadyExists, match="/e/full"):
        await client.make_dir(sid, "/e/full")
    with pytest.raises(sandboxd.FailedPrecondition, match="/e/full"):
        await client.remove(sid, "/e/full")
    with pytest.raises(sandboxd.InvalidArgument, match="relative"):
        await client.list_dir(sid, "relative")
    with pytest.raises(sandboxd.PermissionDenied, match="/e"):
        await client.list_dir(sid, "/e", user="nobody")
    with pytest.raises(sandboxd.FileNotFound, match="/nope"):
        await client.list_dir(sid, "/nope")


async def test_watch_dir_sees_changes(client: Client, sandbox: AsyncSandbox) -> None:
    sid = sandbox.sandbox_id
    assert (await sandbox.exec("mkdir /watch")).return_code == 0
    async with await client.watch_dir(sid, "/watch", recursive=True) as watch:
        assert (await sandbox.exec("cd /watch && echo x > f && mv f g && rm g")).return_code == 0
        seen: list[tuple[FileEventType, str]] = []

        async def collect() -> None:
            async for event in watch:
                seen.append((event.type, event.path))
                if (FileEventType.REMOVE, "/watch/g") in seen:
                    return

        await asyncio.wait_for(collect(), 20)
    kinds = [k for k, _ in seen]
    assert kinds[0] == FileEventType.CREATE and FileEventType.RENAME in kinds, seen
    assert os.fsencode(seen[-1][1]) == b"/watch/g"
