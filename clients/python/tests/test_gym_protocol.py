"""`sandboxd.gym.SandboxdProvider` against Gym's protocols, signature by signature: for every
protocol of nemo-gym 0.7.0 (installed), of Gym main at 011c338 and of main before `PAUSED`
(gym_main.py), `isinstance` is true exactly for the capabilities the provider implements, and
every method has Gym's parameters (names, kinds, defaults, async or not), adding at most
optional keyword-only ones. No server needed: `isinstance` and signatures are about the class.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from typing import Any

import pytest
from nemo_gym.sandbox.providers import base, create_provider

from sandboxd.gym import SandboxdProvider, SandboxdPtySession

from gym_main import protocols

MODULE_SETS = ("0.7.0", "main", "main-before-paused")
# Every provider protocol Gym main defines, and whether the provider implements it (it
# implements them all; a protocol Gym adds later fails `test_no_protocol_is_unknown` until it
# is decided here).
CAPABILITIES = {
    "SandboxProvider": True,
    "ConnectableProvider": True,
    "SupportsSandboxEndpoint": True,
    "SupportsSandboxPty": True,
    "SupportsSandboxPtyAttach": True,
    "SupportsSandboxPauseResume": True,
    "SupportsSandboxSnapshot": True,
    "SupportsSandboxPortForwarding": True,
    "SupportsSandboxBackgroundServices": True,
    "SupportsSandboxNetwork": True,
    "SupportsSandboxRuntimeRequirements": True,
    "SupportsSandboxSharedStorage": True,
}
# Protocols a provider's objects implement rather than the provider.
SESSION_PROTOCOLS = {"SandboxPtySession": SandboxdPtySession}
# Dunder members a protocol may declare that are part of its contract.
CONTRACT_DUNDERS = ("__aiter__", "__aenter__", "__aexit__")


@pytest.fixture
async def provider() -> AsyncIterator[Any]:
    # Never dialled: isinstance and signatures need no server.
    provider = create_provider({"sandboxd": {"address": "127.0.0.1:9", "retry_attempts": 1}})
    yield provider
    await provider.aclose()


def members(protocol: type) -> dict[str, Any]:
    """What a protocol declares: its methods and properties, and its annotated attributes."""
    declared = {
        name: value
        for name, value in vars(protocol).items()
        if (not name.startswith("_") or name in CONTRACT_DUNDERS) and (callable(value) or isinstance(value, property))
    }
    for name in vars(protocol).get("__annotations__", {}):
        declared.setdefault(name, None)
    return declared


def same_parameters(ours: Any, gyms: Any) -> list[str]:
    """How `ours` differs from Gym's method: [] when it takes Gym's parameters (same names,
    kinds and defaults, in order) plus at most optional keyword-only ones, and is async exactly
    when Gym's is."""
    problems = []
    if inspect.iscoroutinefunction(ours) != inspect.iscoroutinefunction(gyms):
        problems.append("async differs")
    mine = list(inspect.signature(ours).parameters.values())
    theirs = list(inspect.signature(gyms).parameters.values())
    for index, param in enumerate(theirs):
        if index >= len(mine):
            problems.append(f"lacks {param.name}")
            continue
        have = mine[index]
        if (have.name, have.kind, have.default) != (param.name, param.kind, param.default):
            problems.append(f"{have} where Gym has {param}")
    for extra in mine[len(theirs) :]:
        if extra.kind is not inspect.Parameter.KEYWORD_ONLY or extra.default is inspect.Parameter.empty:
            problems.append(f"an extra parameter that is not optional and keyword-only: {extra}")
    return problems


def test_no_protocol_is_unknown() -> None:
    for module_set in MODULE_SETS:
        unknown = set(protocols(module_set)) - set(CAPABILITIES) - set(SESSION_PROTOCOLS)
        assert unknown == set(), f"Gym {module_set} defines protocols this test has not decided on: {unknown}"
    assert "SupportsSandboxSnapshot" in protocols("main") and "SupportsSandboxSnapshot" not in protocols("0.7.0")
    assert "SupportsSandboxPauseResume" not in protocols("main-before-paused")


@pytest.mark.parametrize("module_set", MODULE_SETS)
async def test_isinstance_is_true_exactly_for_what_the_provider_implements(module_set: str, provider: Any) -> None:
    checked = 0
    for name, protocol in protocols(module_set).items():
        if name in SESSION_PROTOCOLS or not getattr(protocol, "_is_runtime_protocol", False):
            continue  # SandboxProvider itself is not runtime-checkable: its signatures are below
        assert isinstance(provider, protocol) == CAPABILITIES[name], name
        checked += 1
    assert checked >= 9, "fewer runtime-checkable capabilities than Gym has"


@pytest.mark.parametrize("module_set", MODULE_SETS)
def test_every_method_takes_gyms_parameters(module_set: str) -> None:
    problems = {}
    for name, protocol in protocols(module_set).items():
        implementation = SESSION_PROTOCOLS.get(name, SandboxdProvider)
        if implementation is SandboxdProvider and not CAPABILITIES[name]:
            continue
        for member, declared in members(protocol).items():
            ours = inspect.getattr_static(implementation, member, None)
            if declared is None:  # an annotated attribute (`name`, `session_id`, `mode`)
                found = ours is not None or member in getattr(implementation, "__annotations__", {})
                found = (
                    found
                    or member in inspect.signature(implementation.__init__).parameters
                    or member
                    in (
                        "session_id",
                        "mode",
                    )
                )
                if not found:
                    problems[f"{name}.{member}"] = ["missing attribute"]
                continue
            if isinstance(declared, property):
                if not isinstance(ours, property):
                    problems[f"{name}.{member}"] = ["not a property"]
                continue
            if ours is None:
                problems[f"{name}.{member}"] = ["missing"]
                continue
            differences = same_parameters(getattr(implementation, member), declared)
            if differences:
                problems[f"{name}.{member}"] = differences
    assert problems == {}, problems


def test_the_checked_signatures_are_gyms_own() -> None:
    """A few of the parameters the comparison above rests on, spelled out."""
    exec_params = inspect.signature(base.SandboxProvider.exec).parameters
    assert list(exec_params) == ["self", "handle", "command", "cwd", "env", "timeout_s", "user"]
    assert "stdin" in inspect.signature(SandboxdProvider.exec).parameters  # an optional extra, as Gym's Docker's
    attach = inspect.signature(SandboxdProvider.attach_pty).parameters
    assert (attach["takeover"].default, attach["since"].default) == (True, None)
    assert (
        inspect.signature(SandboxdProvider.serialize_handle).parameters["scope"].kind is inspect.Parameter.KEYWORD_ONLY
    )
    snapshot = protocols("main")["SupportsSandboxSnapshot"]
    assert same_parameters(SandboxdProvider.snapshot, vars(snapshot)["snapshot"]) == []


async def test_shared_storage_without_its_option_names_it(provider: Any) -> None:
    with pytest.raises(NotImplementedError, match="shared_volume"):
        provider.shared_volume_options("tasks/1", "/task")
    with pytest.raises(NotImplementedError, match="shared_volume"):
        provider.shared_volume_metadata()
    configured = create_provider({"sandboxd": {"address": "127.0.0.1:9", "shared_volume": "shared"}})
    try:
        assert configured.shared_volume_metadata() == {}
        assert configured.shared_volume_options(None, "/shared") == {
            "volumes": [{"sandboxd_volume": "shared", "target": "/shared"}]
        }
    finally:
        await configured.aclose()
