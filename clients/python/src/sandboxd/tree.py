"""Copy a directory out of a sandbox the way `docker cp` does: a tar stream read through
`ExecStream` (which, unlike `Exec`, keeps no output cap), unpacked on the host.

The archive comes from inside the sandbox, so it is untrusted: it is unpacked with tarfile's
`data` filter (no absolute paths, nothing outside the target, no device files, no links that
leave the tree, no set-uid bits) into a fresh directory beside the target, and moved into place
only when the whole archive unpacked.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import shlex
import shutil
import tarfile
import tempfile
import uuid
from pathlib import Path

from .client import Client
from .types import ExecExit, Stderr, Stdout

__all__ = ["TreeDownloadError", "download_tree", "tree_target"]


class TreeDownloadError(RuntimeError):
    """The directory could not be archived in the sandbox or unpacked on the host."""


def tree_target(source_path: str, target_path: Path) -> Path:
    """Where `docker cp CONTAINER:SRC TARGET` puts a directory: inside TARGET when it is an
    existing directory, else at TARGET itself."""
    name = posixpath.basename(posixpath.normpath(source_path))
    return target_path / name if target_path.is_dir() else target_path


async def download_tree(client: Client, sandbox_id: str, source_path: str, target_path: Path) -> Path:
    """Copy the sandbox directory `source_path` to the host; returns where it landed."""
    source = posixpath.normpath(source_path)
    parent, name = posixpath.split(source)
    if not name:
        raise TreeDownloadError(f"cannot copy the sandbox's root directory {source_path!r}")
    destination = tree_target(source_path, target_path)
    if destination.exists():
        raise TreeDownloadError(f"{str(destination)!r} already exists on the host")
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    try:
        archive = staging / f"{uuid.uuid4().hex}.tar"
        await _archive(client, sandbox_id, parent or "/", name, archive)
        unpacked = staging / "tree"
        unpacked.mkdir()
        await asyncio.to_thread(_unpack, archive, unpacked)
        root = unpacked / name
        if not root.is_dir() or root.is_symlink():
            raise TreeDownloadError(f"the sandbox's archive of {source_path!r} holds no directory {name!r}")
        os.replace(root, destination)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return destination


async def _archive(client: Client, sandbox_id: str, parent: str, name: str, archive: Path) -> None:
    command = f"tar -C {shlex.quote(parent)} -cf - {shlex.quote(name)}"
    stderr = bytearray()
    exit_event: ExecExit | None = None
    with open(archive, "wb") as out:
        async for event in client.exec_stream(sandbox_id, command, user="root"):
            if isinstance(event, Stdout):
                await asyncio.to_thread(out.write, event.data)
            elif isinstance(event, Stderr):
                stderr.extend(event.data[: 4096 - len(stderr)])
            else:
                exit_event = event
    if exit_event is None or exit_event.return_code != 0:
        code = "no exit" if exit_event is None else f"exit {exit_event.return_code}"
        detail = stderr.decode(errors="replace").strip()
        raise TreeDownloadError(f"tar of {posixpath.join(parent, name)!r} in the sandbox failed ({code}): {detail}")


def _unpack(archive: Path, into: Path) -> None:
    try:
        with tarfile.open(archive, mode="r:") as tar:
            tar.extractall(into, filter="data")
            directories = [m for m in tar.getmembers() if m.isdir()]
        # The `data` filter leaves directories at the default mode; give them the archive's,
        # less what it strips from files too (set-id, sticky, group and other write), deepest
        # first so no parent closes before its children are done.
        for member in sorted(directories, key=lambda m: m.name.count("/"), reverse=True):
            path = into / member.name
            if path.is_dir() and not path.is_symlink() and path.resolve().is_relative_to(into.resolve()):
                path.chmod(member.mode & 0o755)
    except (tarfile.TarError, OSError) as exc:
        raise TreeDownloadError(f"the sandbox's archive could not be unpacked safely: {exc}") from exc
