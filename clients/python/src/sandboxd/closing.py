"""`AsyncClosing`: `async with x:` closes `x` on the way out, for every closeable of the package."""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from typing import Self

__all__ = ["AsyncClosing"]


class AsyncClosing:
    """Gives a class with an async `close()` the `async with` protocol: enter returns the
    object itself, exit awaits `close()` (also when the block raised)."""

    async def close(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    # Gym's parameter names (`SandboxPtySession.__aexit__`), for every closeable alike.
    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc_val: BaseException | None, exc_tb: TracebackType | None
    ) -> None:
        await self.close()
