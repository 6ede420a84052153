#!/usr/bin/env python3
"""The issue's targets measured through a Python grpcio client (what trainers use), beside the
raw docker CLI against the same container, as a table of medians.

Usage: python benches/python_compare.py ADDR    (a running sandboxd, e.g. the release binary;
stubs are generated into a temporary directory with grpc_tools.protoc)

SANDBOXD_BENCH_RUNTIMES=runc,runsc: the runtime table instead (issue 27). Each row on each OCI
runtime, in one run, beside the raw CLI on the same runtime (`docker run -d --runtime=R`,
`docker exec`, `docker cp`, `docker exec -t`): create, exec `printf x`, 32 execs in flight,
1 MiB and 64 MiB transfers, PTY output; the last columns are each runtime's cost over the first
one's. The server at ADDR must offer those runtimes (`docker.runtimes`) and the docker CLI must
reach the same daemon (`DOCKER_HOST`, e.g. from `scripts/runsc-daemon.sh up`).
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

    protoc.main(
        [
            "protoc",
            "-I",
            os.path.join(REPO_ROOT, "proto"),
            f"--python_out={out}",
            f"--grpc_python_out={out}",
            "sandbox/v1/sandbox.proto",
        ]
    )
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
    runtimes = [r.strip() for r in os.environ.get("SANDBOXD_BENCH_RUNTIMES", "").split(",") if r.strip()]
    if runtimes:
        return runtime_table(pb, stub, runtimes)
    sid = stub.Create(pb.CreateRequest(spec=pb.SandboxSpec(image=IMAGE))).sandbox.sandbox_id
    rows = []
    try:

        def exec_x():
            assert stub.Exec(pb.ExecRequest(sandbox_id=sid, command="printf x")).stdout == b"x"

        rows.append(
            ("exec `printf x`", timed(exec_x, 21), timed(lambda: docker("exec", sid, "sh", "-c", "printf x"), 21))
        )

        def many(fn):
            with ThreadPoolExecutor(32) as pool:
                list(pool.map(lambda i: fn(i), range(32)))

        rows.append(
            (
                "32 execs in flight (wall)",
                timed(lambda: many(lambda i: stub.Exec(pb.ExecRequest(sandbox_id=sid, command=f"echo {i}"))), 3),
                timed(lambda: many(lambda i: docker("exec", sid, "sh", "-c", f"echo {i}")), 3),
            )
        )

        rows.append(
            (
                "status (vs docker inspect)",
                timed(lambda: stub.Status(pb.StatusRequest(sandbox_id=sid)), 21),
                timed(lambda: docker("inspect", "-f", "{{.State.Status}}", sid), 21),
            )
        )

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
                        yield pb.UploadRequest(chunk=data[i : i + chunk])

                assert stub.Upload(reqs()).bytes_written == size

            def download():
                got = sum(len(m.chunk) for m in stub.Download(pb.DownloadRequest(sandbox_id=sid, path="/tmp/up.bin")))
                assert got == size

            runs = 7 if size <= 1 << 20 else 3
            rows.append(
                (
                    f"upload + download {label} (vs docker cp)",
                    timed(lambda: (upload(), download()), runs),
                    timed(
                        lambda: (
                            docker("cp", local, f"{sid}:/tmp/raw.bin"),
                            docker("cp", f"{sid}:/tmp/raw.bin", os.path.join(tmp, "back")),
                        ),
                        runs,
                    ),
                )
            )
    finally:
        stub.Close(pb.CloseRequest(sandbox_id=sid))
    print("| operation (Python grpcio) | sandboxd | raw docker | ratio |")
    print("|---|---:|---:|---:|")
    for op, ours, raw in rows:
        print(f"| {op} | {ours * 1e3:.1f} ms | {raw * 1e3:.1f} ms | {ours / raw:.2f} |")
    return 0


def raw_run(runtime):
    """`docker run -d --runtime=R` of an idle container like a sandbox's; its name."""
    out = subprocess.run(
        [
            "docker",
            "run",
            "-d",
            f"--runtime={runtime}",
            "--init",
            "--label",
            "sandboxd.test=1",
            "--entrypoint",
            "/bin/sh",
            IMAGE,
            "-c",
            "while :; do sleep 2147483647; done",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def pty_output(pb, stub, sid, command):
    """Bytes of output of a PTY session running `command` (the request stream stays open until
    its exit: a half-closed stream would end the session)."""
    import threading

    done = threading.Event()

    def reqs():
        yield pb.PtyRequest(open=pb.PtyOpen(sandbox_id=sid, command=command))
        done.wait()

    n = 0
    try:
        for m in stub.Pty(reqs()):
            kind = m.WhichOneof("response")
            if kind == "output":
                n += len(m.output)
            elif kind == "exit":
                break
    finally:
        done.set()
    return n


def runtime_table(pb, stub, runtimes) -> int:
    rows = {}  # op -> [(ours, raw) per runtime]

    def add(op, ours, raw):
        rows.setdefault(op, []).append((ours, raw))

    def create(rt):
        return stub.Create(pb.CreateRequest(spec=pb.SandboxSpec(image=IMAGE, runtime=rt))).sandbox.sandbox_id

    # create, one runtime after the other
    for rt in runtimes:
        ours, raw = [], []
        for _ in range(7):
            t = time.perf_counter()
            sid = create(rt)
            ours.append(time.perf_counter() - t)
            stub.Close(pb.CloseRequest(sandbox_id=sid))
            t = time.perf_counter()
            name = raw_run(rt)
            raw.append(time.perf_counter() - t)
            docker("rm", "-f", name)
        add("create (vs `docker run -d --runtime=R`)", statistics.median(ours), statistics.median(raw))

    ids = [create(rt) for rt in runtimes]
    tmp = tempfile.mkdtemp(prefix="sandboxd-bench-")
    try:
        for sid in ids:

            def exec_x(sid=sid):
                assert stub.Exec(pb.ExecRequest(sandbox_id=sid, command="printf x")).stdout == b"x"

            add(
                "exec `printf x` (vs `docker exec`)",
                timed(exec_x, 21),
                timed(lambda: docker("exec", sid, "sh", "-c", "printf x"), 21),
            )

        def many(fn):
            with ThreadPoolExecutor(32) as pool:
                list(pool.map(lambda i: fn(i), range(32)))

        for sid in ids:
            add(
                "32 execs in flight (wall)",
                timed(lambda: many(lambda i: stub.Exec(pb.ExecRequest(sandbox_id=sid, command=f"echo {i}"))), 3),
                timed(lambda: many(lambda i: docker("exec", sid, "sh", "-c", f"echo {i}")), 3),
            )

        for label, size in (("1 MiB", 1 << 20), ("64 MiB", 64 << 20)):
            data = os.urandom(size)
            local = os.path.join(tmp, "f")
            with open(local, "wb") as f:
                f.write(data)
            runs = 7 if size <= 1 << 20 else 3
            for sid in ids:

                def upload(sid=sid):
                    def reqs():
                        yield pb.UploadRequest(header=pb.UploadHeader(sandbox_id=sid, path="/tmp/up.bin", size=size))
                        for i in range(0, size, 1 << 20):
                            yield pb.UploadRequest(chunk=data[i : i + (1 << 20)])

                    assert stub.Upload(reqs()).bytes_written == size

                def download(sid=sid):
                    got = sum(
                        len(m.chunk) for m in stub.Download(pb.DownloadRequest(sandbox_id=sid, path="/tmp/up.bin"))
                    )
                    assert got == size

                add(
                    f"upload + download {label} (vs `docker cp` in + out)",
                    timed(lambda: (upload(), download()), runs),
                    timed(
                        lambda: (
                            docker("cp", local, f"{sid}:/tmp/raw.bin"),
                            docker("cp", f"{sid}:/tmp/raw.bin", os.path.join(tmp, "back")),
                        ),
                        runs,
                    ),
                )
                stub.Exec(pb.ExecRequest(sandbox_id=sid, command="rm -f /tmp/up.bin /tmp/raw.bin"))

        size = 16 << 20
        command = f"head -c {size} /dev/zero"
        for sid in ids:

            def pty(sid=sid):
                assert pty_output(pb, stub, sid, command) >= size

            def raw_pty(sid=sid):
                out = subprocess.run(
                    ["docker", "exec", "-t", sid, "sh", "-c", command],
                    check=True,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                )
                assert len(out.stdout) >= size

            add("PTY output 16 MiB (vs `docker exec -t`)", timed(pty, 3), timed(raw_pty, 3))
    finally:
        for sid in ids:
            stub.Close(pb.CloseRequest(sandbox_id=sid))

    head = "| operation (Python grpcio) |" + "".join(
        f" {rt}: sandboxd | {rt}: raw CLI | {rt}: ratio |" for rt in runtimes
    )
    head += "".join(f" {rt}/{runtimes[0]}: sandboxd | {rt}/{runtimes[0]}: raw |" for rt in runtimes[1:])
    rule = "|---|" + "---:|---:|---:|" * len(runtimes) + "---:|---:|" * (len(runtimes) - 1)
    print(head)
    print(rule)
    for op, pairs in rows.items():
        line = f"| {op} |" + "".join(f" {o * 1e3:.1f} ms | {r * 1e3:.1f} ms | {o / r:.2f} |" for o, r in pairs)
        base = pairs[0]
        line += "".join(f" {o / base[0]:.2f}× | {r / base[1]:.2f}× |" for o, r in pairs[1:])
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
