#!/usr/bin/env python3
"""The issue's targets measured through a Python grpcio client (what trainers use), beside the
raw docker CLI against the same container, as a table of medians.

Usage: python benches/python_compare.py ADDR    (a running sandboxd, e.g. the release binary;
stubs are generated into a temporary directory with grpc_tools.protoc)
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import grpc

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
IMAGE = "sandboxd-test/busybox:1"


def stubs():
    out = tempfile.mkdtemp(prefix="sandboxd-bench-stubs-")
    from grpc_tools import protoc

    protoc.main(["protoc", "-I", os.path.join(REPO_ROOT, "proto"), f"--python_out={out}",
                 f"--grpc_python_out={out}", "sandbox/v1/sandbox.proto"])
    sys.path.insert(0, out)
    from sandbox.v1 import sandbox_pb2, sandbox_pb2_grpc

    return sandbox_pb2, sandbox_pb2_grpc


def timed(fn, runs):
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def docker(*args, stdin=None):
    subprocess.run(["docker", *args], check=True, stdout=subprocess.DEVNULL, input=stdin)


def main() -> int:
    pb, pbg = stubs()
    opts = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
    stub = pbg.SandboxServiceStub(grpc.insecure_channel(sys.argv[1], options=opts))
    sid = stub.Create(pb.CreateRequest(spec=pb.SandboxSpec(image=IMAGE))).sandbox.sandbox_id
    rows = []
    try:
        def exec_x():
            assert stub.Exec(pb.ExecRequest(sandbox_id=sid, command="printf x")).stdout == b"x"

        rows.append(("exec `printf x`", timed(exec_x, 21),
                     timed(lambda: docker("exec", sid, "sh", "-c", "printf x"), 21)))

        def many(fn):
            with ThreadPoolExecutor(32) as pool:
                list(pool.map(lambda i: fn(i), range(32)))

        rows.append(("32 execs in flight (wall)",
                     timed(lambda: many(lambda i: stub.Exec(pb.ExecRequest(sandbox_id=sid, command=f"echo {i}"))), 3),
                     timed(lambda: many(lambda i: docker("exec", sid, "sh", "-c", f"echo {i}")), 3)))

        rows.append(("status (vs docker inspect)",
                     timed(lambda: stub.Status(pb.StatusRequest(sandbox_id=sid)), 21),
                     timed(lambda: docker("inspect", "-f", "{{.State.Status}}", sid), 21)))

        tmp = tempfile.mkdtemp(prefix="sandboxd-bench-")
        for label, size in (("1 MiB", 1 << 20), ("64 MiB", 64 << 20)):
            data = os.urandom(size)
            local = os.path.join(tmp, "f")
            with open(local, "wb") as f:
                f.write(data)
            chunk = 1 << 20

            def upload():
                def reqs():
                    yield pb.UploadRequest(header=pb.UploadHeader(sandbox_id=sid, path="/tmp/up.bin", size=size))
                    for i in range(0, size, chunk):
                        yield pb.UploadRequest(chunk=data[i:i + chunk])
                assert stub.Upload(reqs()).bytes_written == size

            def download():
                got = sum(len(m.chunk) for m in stub.Download(pb.DownloadRequest(sandbox_id=sid, path="/tmp/up.bin")))
                assert got == size

            runs = 7 if size <= 1 << 20 else 3
            rows.append((f"upload + download {label} (vs docker cp)",
                         timed(lambda: (upload(), download()), runs),
                         timed(lambda: (docker("cp", local, f"{sid}:/tmp/raw.bin"),
                                        docker("cp", f"{sid}:/tmp/raw.bin", os.path.join(tmp, "back"))), runs)))
    finally:
        stub.Close(pb.CloseRequest(sandbox_id=sid))
    print("| operation (Python grpcio) | sandboxd | raw docker | ratio |")
    print("|---|---:|---:|---:|")
    for op, ours, raw in rows:
        print(f"| {op} | {ours * 1e3:.1f} ms | {raw * 1e3:.1f} ms | {ours / raw:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
