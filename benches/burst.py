#!/usr/bin/env python3
"""The burst bench (issue 38): `--creates` (1,000) `Create` calls issued at once by `--clients`
(50) clients of `--tenants` (5) tenants, each client on a connection of its own naming itself
(`x-sandboxd-client`), every call with a `--deadline-s` deadline (30 s). A call refused with
RESOURCE_EXHAUSTED comes back after the delay its `google.rpc.RetryInfo` names (as a trainer
would), until it has a sandbox or `--patience-s` (900 s) has passed since the burst began (at
load 30 on 2 cores one host starts about 2.4 sandboxes a second: 1,000 take some 7 minutes).

Prints, per run: creates/s sustained (sandboxes handed out over the time to the last one), the
share of sandboxes each tenant got over the first half of them and over all, p50/p99 time to a
sandbox (from the burst's start), the count of each answer (OK, CAPACITY with its median retry
delay, QUOTA, DEADLINE_EXCEEDED, UNAVAILABLE, other), and the machine's load. No call may time
out or be dropped: DEADLINE_EXCEEDED, UNAVAILABLE or CANCELLED answers are counted and make the
bench exit 1, as does a container or network of the bench's label left after the run.

Runs (`--runs`, default `plain,pool`):
- `plain`: one host, every sandbox created on demand under the host's start slots
  (`server.admission`);
- `pool`: the same with a warm pool of the image (`--pool-size`, 64, recycling) the creates claim
  from (`spec.pool`); the rest are made on demand;
- `cluster`: the burst through the 3-node test cluster (`scripts/cluster-up.sh 3` with a cluster
  name of this bench's, `scripts/cluster-down.sh` after), clients spread over the nodes.

By default the bench starts the server itself (`--binary`, default the release binary, built by
`cargo build --release -p sandboxd` when missing) with a config of its own: the tenants file, a
label on every container, `--remove-on-shutdown`. `--address` uses a running server instead
(its tenants must be `burst-0`..`burst-N` with keys `burst-key-0`..).

Usage (Python with `pip install ./clients/python`, as scripts/install-deps.sh and
scripts/test-python.sh set up):
    python benches/burst.py [--creates 1000 --clients 50 --tenants 5 --runs plain,pool,cluster]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import grpc

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "clients" / "python" / "src"))

from sandboxd._pb import sandbox_pb2 as pb  # noqa: E402
from sandboxd._pb import sandbox_pb2_grpc as pb_grpc  # noqa: E402
from sandboxd.failures import status_details  # noqa: E402

IMAGE = "sandboxd-test/busybox:1"
POOL = "burst-bench"
LABEL = "sandboxd.bench=burst"
CLUSTER_NAME = "sbxburst"
CLUSTER_PORT = 50950
CLUSTER_NODES = 3


def tenant_name(i: int) -> str:
    return f"burst-{i}"


def tenant_key(i: int) -> str:
    return f"burst-key-{i}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tenants_file(path: Path, tenants: int) -> Path:
    entries = [
        {"name": tenant_name(i), "key_sha256": hashlib.sha256(tenant_key(i).encode()).hexdigest()}
        for i in range(tenants)
    ]
    path.write_text(json.dumps({"tenants": entries}))
    return path


def ensure_image(image: str) -> None:
    """The test suites' image, built from nothing by testkit (no registry) when missing."""
    present = subprocess.run(["docker", "image", "inspect", image], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if present.returncode == 0:
        return
    print(f"building the test image {image} (testkit)", file=sys.stderr)
    subprocess.run(
        ["cargo", "run", "-q", "--release", "-p", "sandboxd-benches", "--example", "test_images", "--", image],
        cwd=REPO_ROOT,
        check=True,
    )


def _labelled(kind: str) -> list[str]:
    args = ["docker", kind, "ls", *(["-a"] if kind == "container" else []), "-q", "--filter", f"label={LABEL}"]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout.split()


def leftovers() -> list[str]:
    """After the server stopped: the bench's tenant networks (a server keeps its networks until
    its sweep finds them idle for `docker.create.network_idle_s`, by design: docs/walls.md) are
    removed here, by the bench's label; what is still there of the label is returned."""
    networks = _labelled("network")
    if networks:
        subprocess.run(["docker", "network", "rm", *networks], stdout=subprocess.DEVNULL, check=False)
        print(f"  removed the bench's {len(networks)} networks (label {LABEL})")
    return [f"{kind} {name}" for kind in ("container", "network") for name in _labelled(kind)]


def release_binary() -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target"))
    binary = target / "release" / "sandboxd"
    if not binary.exists():
        subprocess.run(["cargo", "build", "-q", "--release", "-p", "sandboxd", "--bin", "sandboxd"], cwd=REPO_ROOT, check=True)
    return binary


class Server:
    """One sandboxd on a loopback port with the bench's tenants (and pool)."""

    def __init__(self, binary: Path, work: Path, tenants: int, pool_size: int) -> None:
        self.dir = work / f"server-{pool_size}"
        self.dir.mkdir()
        config: dict = {
            "docker": {"create": {"extra_run_args": ["--label", LABEL]}},
            "server": {
                "state_dir": str(self.dir / "state"),
                "auth": {"tenants_file": str(tenants_file(self.dir / "tenants.json", tenants))},
            },
        }
        if pool_size:
            config["pools"] = [{"name": POOL, "image": IMAGE, "target": pool_size, "max": pool_size, "recycle": True}]
        (self.dir / "config.json").write_text(json.dumps(config))
        self.address = f"127.0.0.1:{_free_port()}"
        self.log = open(self.dir / "server.log", "wb")
        self.process = subprocess.Popen(
            [str(binary), "--listen", self.address, "--config", str(self.dir / "config.json"), "--remove-on-shutdown"],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
        )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=300)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


async def wait_ready(address: str, key: str, pool_size: int) -> None:
    """The server answers, and its pool (if any) is full."""
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.SandboxServiceStub(channel)
        for _ in range(6000):
            try:
                pools = await stub.ListPools(pb.ListPoolsRequest(), metadata=(("authorization", f"Bearer {key}"),), timeout=2)
                ready = sum(p.ready for p in pools.pools if p.name == POOL)
                if ready >= pool_size:
                    return
            except grpc.aio.AioRpcError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"the server at {address} was not ready (pool {pool_size}) within 10 minutes")


class Tally:
    def __init__(self) -> None:
        self.answers: Counter[str] = Counter()
        self.retry_delays: list[float] = []
        self.served: list[tuple[float, int]] = []  # (seconds after the start, tenant)
        self.sandboxes: list[tuple[str, str, str]] = []  # (address, key, id)


async def client(
    index: int, tenant: int, address: str, count: int, args: argparse.Namespace, start: float, tally: Tally, pooled: bool
) -> None:
    key = tenant_key(tenant)
    metadata = (("authorization", f"Bearer {key}"), ("x-sandboxd-client", f"client-{index}"))
    spec = pb.SandboxSpec(image="" if pooled else IMAGE, ttl_s=args.patience_s + 600.0)  # outlives the burst
    if pooled:
        spec.pool = POOL
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.SandboxServiceStub(channel)

        async def one() -> None:
            while True:
                try:
                    made = await stub.Create(pb.CreateRequest(spec=spec), metadata=metadata, timeout=args.deadline_s)
                except grpc.aio.AioRpcError as e:
                    kind, delay = status_details(e.trailing_metadata())
                    name = e.code().name + (f"/{kind.value}" if kind else "")
                    tally.answers[name] += 1
                    if e.code() != grpc.StatusCode.RESOURCE_EXHAUSTED or delay is None:
                        return
                    tally.retry_delays.append(delay)
                    if time.perf_counter() + delay - start > args.patience_s:
                        return
                    await asyncio.sleep(delay)
                    continue
                tally.answers["OK"] += 1
                tally.served.append((time.perf_counter() - start, tenant))
                tally.sandboxes.append((address, key, made.sandbox.sandbox_id))
                return

        await asyncio.gather(*(one() for _ in range(count)))


async def close_all(tally: Tally) -> None:
    sem = asyncio.Semaphore(32)
    channels: dict[str, grpc.aio.Channel] = {}

    async def close(address: str, key: str, sandbox_id: str) -> None:
        async with sem:
            channel = channels.setdefault(address, grpc.aio.insecure_channel(address))
            stub = pb_grpc.SandboxServiceStub(channel)
            try:
                await stub.Close(pb.CloseRequest(sandbox_id=sandbox_id), metadata=(("authorization", f"Bearer {key}"),), timeout=120)
            except grpc.aio.AioRpcError as e:
                print(f"  close {sandbox_id}: {e.code().name} {e.details()}", file=sys.stderr)

    await asyncio.gather(*(close(*s) for s in tally.sandboxes))
    for channel in channels.values():
        await channel.close()


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def burst(name: str, addresses: list[str], args: argparse.Namespace, pooled: bool) -> bool:
    tally = Tally()
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    per_client = [args.creates // args.clients + (1 if i < args.creates % args.clients else 0) for i in range(args.clients)]
    await asyncio.gather(
        *(
            client(i, i % args.tenants, addresses[i % len(addresses)], per_client[i], args, start, tally, pooled)
            for i in range(args.clients)
        )
    )
    took = max((t for t, _ in tally.served), default=0.0)
    load_after = os.getloadavg()[0]
    served = sorted(tally.served)
    times = [t for t, _ in served]
    half = served[: max(1, len(served) // 2)]
    print(f"\n== {name}: {args.creates} creates at once, {args.clients} clients of {args.tenants} tenants, deadline {args.deadline_s:g} s")
    print(f"  load average {load_before:.1f} -> {load_after:.1f} on {os.cpu_count()} CPUs")
    print(f"  sandboxes: {len(served)} in {took:.1f} s = {len(served) / took if took else 0:.1f} creates/s sustained")
    print(f"  time to a sandbox: p50 {pct(times, 0.5):.2f} s, p99 {pct(times, 0.99):.2f} s")
    for label, part in (("first half", half), ("all", served)):
        shares = Counter(t for _, t in part)
        text = ", ".join(f"{tenant_name(t)} {shares[t] / max(1, len(part)) * 100:.1f}%" for t in range(args.tenants))
        print(f"  share ({label}, {len(part)}): {text}")
    delays = f" (retry delay p50 {pct(tally.retry_delays, 0.5):.2f} s)" if tally.retry_delays else ""
    print(f"  answers: {dict(sorted(tally.answers.items()))}{delays}")
    bad = sum(n for a, n in tally.answers.items() if a.split("/")[0] in ("DEADLINE_EXCEEDED", "UNAVAILABLE", "CANCELLED"))
    if bad:
        print(f"  FAIL: {bad} calls timed out or were dropped")
    closing = time.perf_counter()
    await close_all(tally)
    print(f"  closed {len(tally.sandboxes)} in {time.perf_counter() - closing:.1f} s")
    return bad == 0


def cluster_up(work: Path, tenants: int, binary: Path) -> list[str]:
    env = {
        **os.environ,
        "SANDBOXD_CLUSTER_NAME": CLUSTER_NAME,
        "SANDBOXD_CLUSTER_PORT": str(CLUSTER_PORT),
        "SANDBOXD_BIN": str(binary),
        "SANDBOXD_CLUSTER_IMAGES": IMAGE,
        "SANDBOXD_CLUSTER_CONFIG": f"server:\n  auth:\n    tenants_file: {tenants_file(work / 'cluster-tenants.json', tenants)}\n",
    }
    out = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "cluster-up.sh"), str(CLUSTER_NODES)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return [line.split()[1] for line in out.stdout.splitlines() if len(line.split()) == 4]


def cluster_down() -> None:
    env = {**os.environ, "SANDBOXD_CLUSTER_NAME": CLUSTER_NAME}
    subprocess.run(["bash", str(REPO_ROOT / "scripts" / "cluster-down.sh")], env=env, check=False)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--creates", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--tenants", type=int, default=5)
    ap.add_argument("--deadline-s", type=float, default=30.0)
    ap.add_argument("--patience-s", type=float, default=900.0)
    ap.add_argument("--pool-size", type=int, default=64)
    ap.add_argument("--runs", default="plain,pool", help="comma-separated: plain, pool, cluster")
    ap.add_argument("--binary", type=Path, help="the sandboxd binary (default: the release build)")
    ap.add_argument("--address", help="a running server (tenants burst-N with keys burst-key-N)")
    ap.add_argument("--work-dir", type=Path, help="keep the servers' configs and logs here (default: a temporary directory)")
    args = ap.parse_args()
    ok = True
    if not args.address:
        ensure_image(IMAGE)
    with tempfile.TemporaryDirectory(prefix="sandboxd-burst-") as tmp:
        work = Path(tmp)
        if args.work_dir:
            work = args.work_dir
            work.mkdir(parents=True, exist_ok=True)
        binary = args.binary or (None if args.address else release_binary())
        for run in args.runs.split(","):
            pooled = run == "pool"
            if run == "cluster":
                assert binary is not None, "--runs cluster needs the binary (not --address)"
                try:
                    addresses = cluster_up(work, args.tenants, binary)
                    ok &= await burst("cluster (3 nodes)", addresses, args, pooled=False)
                finally:
                    for log in Path("/tmp", CLUSTER_NAME).glob("*/sandboxd.log"):
                        (work / f"cluster-{log.parent.name}.log").write_bytes(log.read_bytes())
                    cluster_down()
                continue
            if args.address:
                ok &= await burst(run, [args.address], args, pooled)
                continue
            assert binary is not None
            server = Server(binary, work, args.tenants, args.pool_size if pooled else 0)
            try:
                await wait_ready(server.address, tenant_key(0), args.pool_size if pooled else 0)
                ok &= await burst(f"{run} (one host{f', pool of {args.pool_size}' if pooled else ''})", [server.address], args, pooled)
            finally:
                server.stop()
            left = leftovers()
            print(f"  left behind (label {LABEL}): {', '.join(left) if left else 'nothing'}")
            ok &= not left
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
