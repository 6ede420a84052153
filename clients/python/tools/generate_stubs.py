#!/usr/bin/env python3
"""Regenerates `src/sandboxd/_pb/` from `proto/sandbox/v1/sandbox.proto` (the one source).

    python clients/python/tools/generate_stubs.py            # rewrite the checked-in stubs
    python clients/python/tools/generate_stubs.py --check    # exit 1 when they differ

Needs `grpcio-tools` at the version pinned in `GRPCIO_TOOLS_VERSION` (the generated files carry
the protobuf and grpcio versions they were made with, so another version is a diff). The
generated service module imports `sandbox.v1.sandbox_pb2`; it is rewritten to a relative import
so the stubs live inside the `sandboxd` package and never claim a top-level `sandbox` package.
"""

from __future__ import annotations

import argparse
import difflib
import sys
import tempfile
from pathlib import Path

GRPCIO_TOOLS_VERSION = "1.85.1"
PACKAGE_ROOT = Path(__file__).resolve().parents[1]
REPO_ROOT = PACKAGE_ROOT.parents[1]
PROTO_ROOT = REPO_ROOT / "proto"
PROTO_FILE = "sandbox/v1/sandbox.proto"
STUBS_DIR = PACKAGE_ROOT / "src" / "sandboxd" / "_pb"
GENERATED = ("sandbox_pb2.py", "sandbox_pb2.pyi", "sandbox_pb2_grpc.py")
ABSOLUTE_IMPORT = "from sandbox.v1 import sandbox_pb2 as"
RELATIVE_IMPORT = "from . import sandbox_pb2 as"


def generate(out_dir: Path) -> dict[str, str]:
    """Runs protoc into `out_dir` and returns {file name: text} of the package's stub files."""
    import grpc_tools
    from grpc_tools import protoc  # only the generator needs grpcio-tools

    version = getattr(grpc_tools, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("grpcio-tools")
    if version != GRPCIO_TOOLS_VERSION:
        raise SystemExit(
            f"grpcio-tools {version} is installed; the stubs are generated with "
            f"grpcio-tools=={GRPCIO_TOOLS_VERSION} (pip install grpcio-tools=={GRPCIO_TOOLS_VERSION})"
        )
    well_known = Path(protoc.__file__).parent / "_proto"
    rc = protoc.main(
        [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{well_known}",
            f"--python_out={out_dir}",
            f"--pyi_out={out_dir}",
            f"--grpc_python_out={out_dir}",
            PROTO_FILE,
        ]
    )
    if rc != 0:
        raise SystemExit(f"grpc_tools.protoc failed with exit code {rc}")
    texts: dict[str, str] = {}
    for name in GENERATED:
        text = (out_dir / "sandbox" / "v1" / name).read_text()
        if name == "sandbox_pb2_grpc.py":
            if ABSOLUTE_IMPORT not in text:
                raise SystemExit(f"{name}: expected {ABSOLUTE_IMPORT!r} in the generated code")
            text = text.replace(ABSOLUTE_IMPORT, RELATIVE_IMPORT)
        texts[name] = text
    return texts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sandboxd-stubs-") as tmp:
        texts = generate(Path(tmp))
    if not args.check:
        STUBS_DIR.mkdir(parents=True, exist_ok=True)
        for name, text in texts.items():
            (STUBS_DIR / name).write_text(text)
        print(f"wrote {', '.join(texts)} to {STUBS_DIR}")
        return 0
    stale = False
    for name, text in texts.items():
        path = STUBS_DIR / name
        current = path.read_text() if path.exists() else ""
        if current != text:
            stale = True
            diff = difflib.unified_diff(
                current.splitlines(keepends=True), text.splitlines(keepends=True), str(path), f"generated {name}"
            )
            sys.stdout.writelines(list(diff)[:60])
    if stale:
        print("the checked-in stubs do not match proto/; run clients/python/tools/generate_stubs.py", file=sys.stderr)
        return 1
    print("stubs match proto/sandbox/v1/sandbox.proto")
    return 0


if __name__ == "__main__":
    sys.exit(main())
