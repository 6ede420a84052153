"""Loads `sandboxd.gym` against a NeMo Gym module set without `SandboxStatus.PAUSED` and without
`SupportsSandboxPauseResume` (as Gym main was before its pause/resume work), then pauses and
resumes a sandbox through it. Run by test_gym.py in a fresh interpreter:

    python gym_without_paused.py ADDRESS IMAGE
"""

from __future__ import annotations

import asyncio
import enum
import sys

import gym_loader


def strip_paused() -> None:
    from nemo_gym.sandbox import providers
    from nemo_gym.sandbox.providers import base

    class SandboxStatus(str, enum.Enum):
        STARTING = "starting"
        RUNNING = "running"
        STOPPED = "stopped"
        ERROR = "error"
        UNKNOWN = "unknown"

    for module in (base, providers):
        module.SandboxStatus = SandboxStatus
        if hasattr(module, "SupportsSandboxPauseResume"):
            delattr(module, "SupportsSandboxPauseResume")


async def main(address: str, image: str) -> None:
    from nemo_gym.sandbox.providers import SandboxSpec, SandboxStatus, base, create_provider

    import sandboxd.gym

    provider = create_provider({"sandboxd": {"address": address, "retry_attempts": 2}})
    print("imported:", provider.name)
    print("PAUSED is RUNNING:", sandboxd.gym.PAUSED is SandboxStatus.RUNNING)
    # Every capability this Gym defines, the provider implements (it has none it lacks).
    checkable = [
        value
        for name, value in vars(base).items()
        if name.startswith(("Supports", "Connectable")) and getattr(value, "_is_runtime_protocol", False)
    ]
    print("capabilities:", "all" if all(isinstance(provider, p) for p in checkable) else "missing", len(checkable))
    handle = await provider.create(SandboxSpec(image=image))
    try:
        await provider.pause(handle)
        print("paused status:", (await provider.status(handle)).value)
        await provider.resume(handle)
        print("resumed status:", (await provider.status(handle)).value)
        result = await provider.exec(handle, "echo ok")
        print("exec after resume:", result.stdout.strip())
    finally:
        await provider.close(handle)
        await provider.aclose()


if __name__ == "__main__":
    gym_loader.install()
    strip_paused()
    asyncio.run(main(sys.argv[1], sys.argv[2]))
