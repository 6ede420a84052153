"""Gym main's provider protocols, as the tests model them.

Gym main at commit 011c3386d691fd51a0ee388026c59660fcbffdac (the newest
`nemo_gym/sandbox/providers/base.py` this project could read, in the public repository
NVIDIA-NeMo/Gym) defines nemo-gym 0.7.0's protocol set plus one optional capability,
`SupportsSandboxSnapshot`, which `nemo_gym/sandbox/checkpoint.py` uses. This module models that
capability with Gym's signatures (written here, not copied), so the package can be checked
against main with 0.7.0 installed; `protocols()` names each module set the tests check against.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from nemo_gym.sandbox.providers import base

MAIN_COMMIT = "011c3386d691fd51a0ee388026c59660fcbffdac"


@runtime_checkable
class SupportsSandboxSnapshot(Protocol):
    """Gym main's snapshot capability: a durable copy a later `create` starts from
    (`provider_options["snapshot_id"]`, no image)."""

    async def snapshot(self, handle: base.SandboxHandle, *, name: str | None = None) -> str: ...

    async def delete_snapshot(self, snapshot_id: str) -> None: ...


def is_protocol(value: Any) -> bool:
    """A protocol Gym defines (not `typing.Protocol` itself, which base.py imports)."""
    return isinstance(value, type) and bool(getattr(value, "_is_protocol", False)) and value.__module__ == base.__name__


def installed() -> dict[str, type]:
    """The provider protocols of the installed Gym (nemo-gym 0.7.0 in the tests)."""
    return {name: value for name, value in vars(base).items() if is_protocol(value)}


def protocols(module_set: str) -> dict[str, type]:
    """The provider protocols of a Gym: "0.7.0" (installed), "main" (011c338), or
    "main-before-paused" (main of 2026-08-22: no `SupportsSandboxPauseResume`, no
    `SandboxStatus.PAUSED`; gym_without_paused.py loads the provider against it)."""
    found = installed()
    if module_set == "main":
        found.setdefault("SupportsSandboxSnapshot", SupportsSandboxSnapshot)
    elif module_set == "main-before-paused":
        found.pop("SupportsSandboxPauseResume", None)
        found.pop("SupportsSandboxSnapshot", None)
    elif module_set != "0.7.0":
        raise ValueError(module_set)
    return found
