"""An asyncio loop on a daemon thread of its own, for integrations whose callers run each call in
a fresh event loop (SWE-agent and mini-swe-agent wrap every call in `asyncio.run`): a gRPC
channel and a port forward's listener belong to the loop they were made in, so they live here
and outlast the callers' loops."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["LoopThread"]

T = TypeVar("T")


class LoopThread:
    """One loop, one thread; `run` from synchronous code, `call` from any other loop."""

    def __init__(self, name: str) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=name, daemon=True)
        self._thread.start()

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        if self._loop.is_closed() or not self._thread.is_alive():
            # Stopped, or gone at interpreter exit (a finalizer's call would wait forever).
            coro.close()
            raise RuntimeError("the background loop is stopped")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Blocks the calling thread (never call it from this loop's own thread)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("LoopThread.run called from its own loop")
        return self.submit(coro).result(timeout)

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Awaits `coro` run on this loop, from another running loop."""
        return await asyncio.wrap_future(self.submit(coro))

    def stop(self) -> None:
        """Ends the loop and its thread (idempotent); pending tasks are cancelled."""
        if self._loop.is_closed():
            return

        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            asyncio.run_coroutine_threadsafe(cancel_all(), self._loop).result(10)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        if not self._loop.is_running():
            self._loop.close()
