"""The checked-in stubs are exactly what the proto generates (the proto stays the one source)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import sandboxd
from sandboxd._pb import sandbox_pb2

TOOLS = Path(__file__).resolve().parents[1] / "tools" / "generate_stubs.py"


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_stubs", TOOLS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["generate_stubs"] = module
    spec.loader.exec_module(module)
    return module


def test_checked_in_stubs_match_the_proto(tmp_path: Path) -> None:
    generator = load_generator()
    generated = generator.generate(tmp_path)
    assert set(generated) == {"sandbox_pb2.py", "sandbox_pb2.pyi", "sandbox_pb2_grpc.py"}
    for name, text in generated.items():
        checked_in = (generator.STUBS_DIR / name).read_text()
        assert checked_in == text, f"{name} is stale: run clients/python/tools/generate_stubs.py"


def test_installed_package_carries_the_same_stubs() -> None:
    # The installed wheel (not the source tree) is what the other tests import.
    installed = Path(sandbox_pb2.__file__).read_text()
    source = (load_generator().STUBS_DIR / "sandbox_pb2.py").read_text()
    assert installed == source
    assert (Path(sandboxd.__file__).parent / "py.typed").is_file()
    assert sandbox_pb2.DESCRIPTOR.services_by_name["SandboxService"].methods_by_name["Pty"] is not None
