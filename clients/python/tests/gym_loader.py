"""Loads NeMo Gym's provider layer (nemo-gym 0.7.0 from PyPI) on this Python without the
dependencies `nemo_gym.sandbox/__init__.py` pulls in (yaml, pydantic, aiohttp, telemetry).

`nemo_gym.sandbox` is registered as an empty package whose search path is the wheel's real
`nemo_gym/sandbox` directory, so `nemo_gym.sandbox.providers` and every submodule load from
the wheel's own files. In a full Gym install (Python >= 3.13 with its dependencies) nothing
here is needed.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from pathlib import Path


def install() -> None:
    if "nemo_gym.sandbox" in sys.modules:
        return
    try:
        import nemo_gym
    except ImportError as exc:
        raise RuntimeError(
            "nemo-gym is not installed; scripts/test-python.sh installs nemo-gym==0.7.0 from PyPI "
            "(pip download --no-deps --python-version 3.14 --only-binary=:all: nemo-gym==0.7.0, then "
            "pip install --no-deps --ignore-requires-python the wheel)"
        ) from exc
    directory = str(Path(nemo_gym.__file__).parent / "sandbox")
    package = types.ModuleType("nemo_gym.sandbox")
    spec = importlib.machinery.ModuleSpec("nemo_gym.sandbox", None, is_package=True)
    spec.submodule_search_locations = [directory]
    package.__spec__ = spec
    package.__path__ = [directory]
    package.__package__ = "nemo_gym.sandbox"
    sys.modules["nemo_gym.sandbox"] = package
    nemo_gym.sandbox = package
    import nemo_gym.sandbox.providers  # noqa: F401  (fails here if the wheel is broken)
