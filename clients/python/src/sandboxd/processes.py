"""Background processes and port forwarding at the boundary: plain dataclasses for
`ListProcesses` and `AttachProcess`, and `ForwardConnection`, one `PortForward` call (a TCP
connection made from inside the sandbox) with `splice` to join it to a local socket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from ._pb import sandbox_pb2 as pb
from .errors import from_rpc_error

__all__ = [
    "ForwardConnection",
    "ProcessAttached",
    "ProcessEvent",
    "ProcessExited",
    "ProcessInfo",
    "ProcessOutput",
]


@dataclass(frozen=True)
class ProcessInfo:
    """One process (or terminal session) of a sandbox."""

    process_id: str
    pid: int
    command: str
    user: str
    started_at_unix_ms: int
    running: bool
    exit_code: int | None
    retained_bytes: int
    pty: bool
    attached: bool
    oldest_offset: int
    end_offset: int

    @classmethod
    def from_proto(cls, p: pb.ProcessInfo) -> ProcessInfo:
        return cls(
            process_id=p.process_id,
            pid=p.pid,
            command=p.command,
            user=p.user,
            started_at_unix_ms=p.started_at_unix_ms,
            running=p.running,
            exit_code=p.exit_code if p.HasField("exit_code") else None,
            retained_bytes=p.retained_bytes,
            pty=p.pty,
            attached=p.attached,
            oldest_offset=p.oldest_offset,
            end_offset=p.end_offset,
        )


@dataclass(frozen=True)
class ProcessAttached:
    """First event: the offset of the first byte the stream carries."""

    offset: int
    pid: int


@dataclass(frozen=True)
class ProcessOutput:
    data: bytes
    offset: int
    stderr: bool


@dataclass(frozen=True)
class ProcessExited:
    """Last event."""

    exit_code: int


ProcessEvent = ProcessAttached | ProcessOutput | ProcessExited


def process_event(msg: pb.AttachProcessResponse) -> ProcessEvent:
    which = msg.WhichOneof("event")
    if which == "attached":
        return ProcessAttached(offset=msg.attached.offset, pid=msg.attached.pid)
    if which == "output":
        return ProcessOutput(data=bytes(msg.output.data), offset=msg.output.offset, stderr=msg.output.stderr)
    if which == "exited":
        return ProcessExited(exit_code=msg.exited.exit_code)
    raise RuntimeError("an empty AttachProcessResponse")


class ForwardConnection:
    """One forwarded TCP connection. `recv` gives the sandbox side's bytes, `b""` once it closed
    its half, `None` when the call ended (both halves closed); `close_write` closes ours."""

    def __init__(self, call: Any, requests: asyncio.Queue[pb.PortForwardRequest | None], address: str) -> None:
        self._call = call
        self._requests = requests
        self.address = address
        """Where the sandbox connected (`ip:port`)."""

    async def send(self, data: bytes) -> None:
        await self._requests.put(pb.PortForwardRequest(data=data))

    async def close_write(self) -> None:
        await self._requests.put(None)

    async def recv(self) -> bytes | None:
        try:
            msg = await self._call.read()
        except grpc.RpcError as exc:
            raise from_rpc_error(exc, call="PortForward") from None
        if msg is grpc.aio.EOF:
            return None
        which = msg.WhichOneof("message")
        if which == "data":
            return bytes(msg.data)
        if which == "eof":
            return b""
        raise RuntimeError(f"unexpected PortForwardResponse {which}")

    def cancel(self) -> None:
        # The request stream waits on the queue: ending it lets grpc's task that drains it end.
        with contextlib.suppress(asyncio.QueueFull):
            self._requests.put_nowait(None)
        self._call.cancel()

    async def splice(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Move bytes between a local connection and the sandbox side until both halves closed,
        passing each half-close on."""

        async def up() -> None:
            while data := await reader.read(64 * 1024):
                await self.send(data)
            await self.close_write()

        task = asyncio.create_task(up())
        try:
            while (data := await self.recv()) is not None:
                if data:
                    writer.write(data)
                    await writer.drain()
                elif writer.can_write_eof():
                    writer.write_eof()
        finally:
            task.cancel()
            self.cancel()
            with contextlib.suppress(Exception):
                writer.close()


async def request_stream(
    first: pb.PortForwardRequest, queue: asyncio.Queue[pb.PortForwardRequest | None]
) -> AsyncIterator[pb.PortForwardRequest]:
    """The request side of a `PortForward` call: `first`, then what `queue` gives until `None`."""
    yield first
    while (item := await queue.get()) is not None:
        yield item
