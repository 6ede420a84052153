#!/usr/bin/env python3
"""The rollout bench (issue 29): rollouts through NeMo Gym's own provider interface, Gym's Docker
provider beside sandboxd's Gym provider in one run.

One rollout: `create` (a claim when a pool serves it), upload 64 KiB, 20 tool calls (`exec`),
download the file, `close`. `--rollouts` of them (64), `--in-flight` at once (16), per provider:
- `gym-docker`: Gym 0.7.0's `DockerProvider`, unchanged, with its defaults (`docker run` /
  `exec` / `cp` / `rm -f`; the bench adds only a label to its containers, to remove leftovers);
- `sandboxd, no pool` (unless `--skip-no-pool`): the same provider before any pool exists, so
  every create makes a container and every close removes one (every wall of the config on);
- `sandboxd`: `sandboxd.gym.SandboxdProvider`, unchanged create/close, against a server whose
  pool for the image recycles: `CreatePool(recycle=true, target=max=2 × --in-flight)`, made by the
  bench and filled before the run, so a closed sandbox is reset and handed back instead of
  removed and no container is created or removed while the rollouts run;
- `sandboxd-batch`: `--batch` (256) sandboxes from one `CreateBatch`, each running `--episodes`
  rollouts separated by `Reset` (no close, no create), then closed;
- one sandbox's `Reset` against `close` + `create` after an episode (`--reset-runs` each).

By default the bench builds and starts the server itself: `cargo build --release -p sandboxd`
(the release binary, in `$CARGO_TARGET_DIR` or `target/`), a config of its own in a temporary
directory (its state directory, Prometheus metrics on a free loopback port, a label on every
container), `--remove-on-shutdown`; it builds the test image (`sandboxd-test/bash:1`, from
Debian's `bash-static`, no registry) when missing. `--address` uses a running server instead.
Per provider it prints each phase's median (create/claim, upload, the 20 calls, download,
close), the machine's load (1-minute load average and CPU busy, from /proc) over the phase, the
CPU seconds the bench's own process (the Python client) and the server used, and from the
server's metrics each RPC's count and mean time in the server.

Usage (Python with `pip install ./clients/python` and nemo-gym 0.7.0's provider layer, as
scripts/test-python.sh installs them):
    python benches/gym_rollouts.py [--rollouts 64 --in-flight 16 --batch 256 --episodes 2 --reset-runs 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "clients" / "python" / "tests"))

import gym_loader  # noqa: E402

gym_loader.install()

from nemo_gym.sandbox.providers.base import SandboxHandle, SandboxSpec  # noqa: E402
from nemo_gym.sandbox.providers.docker.provider import DockerProvider  # noqa: E402

import sandboxd  # noqa: E402
from sandboxd.gym import SandboxdProvider  # noqa: E402

TOOL_CALLS = 20
PAYLOAD = 64 * 1024
POOL = "rollout-bench"
# The server's containers and Gym's carry labels of their own: Gym's leftovers are removed by label.
LABEL = "sandboxd.bench=rollouts"
GYM_LABEL = "sandboxd.bench=rollouts-gym"
PHASES = ("create", "upload", "calls", "download", "close")


# --- the machine ------------------------------------------------------------------------------


def _cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of every CPU so far, from /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


def _proc_stat(pid: int | str) -> tuple[str, list[str]] | None:
    """Process `pid`'s name and the fields of /proc/PID/stat after it (`None`: it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()


def _proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (its threads included)."""
    stat = _proc_stat(pid)
    if stat is None:
        return 0.0
    fields = stat[1]
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _cpu_by_process() -> dict[str, tuple[str, int]]:
    """Every process's (name, CPU ticks of its own and of its reaped children) from /proc."""
    out: dict[str, tuple[str, int]] = {}
    for pid in os.listdir("/proc"):
        stat = _proc_stat(pid) if pid.isdigit() else None
        if stat is not None:
            name, fields = stat
            out[pid] = (name, sum(int(f) for f in fields[11:15]))
    return out


def _cpu_by_name(before: dict[str, tuple[str, int]]) -> list[tuple[str, float]]:
    """CPU seconds per process name since `before` (a process's reaped children count as its
    own: a `docker` CLI as the server's, a tool call's shell as its sandbox's init), most first."""
    ticks = os.sysconf("SC_CLK_TCK")
    spent: dict[str, float] = {}
    for pid, (name, now) in _cpu_by_process().items():
        then = before.get(pid, (name, 0))[1]
        spent[name] = spent.get(name, 0.0) + (now - then) / ticks
    return sorted(((n, s) for n, s in spent.items() if s >= 0.05), key=lambda x: -x[1])


class Load:
    """The machine's load over one phase: the 1-minute load average at its start and end, the
    share of all CPUs busy, the CPU seconds of this process and of the server, and where the
    machine's CPU went by process name."""

    def __init__(self, server_pid: int | None) -> None:
        self.server_pid = server_pid
        self.load_start = os.getloadavg()[0]
        self.by_process = _cpu_by_process()
        self.ticks = _cpu_ticks()
        self.self_cpu = _self_cpu_s()
        self.server_cpu = _proc_cpu_s(server_pid) if server_pid else 0.0
        self.started = time.perf_counter()

    def end(self) -> dict:
        busy0, total0 = self.ticks
        busy1, total1 = _cpu_ticks()
        return {
            "load_start": self.load_start,
            "load_end": os.getloadavg()[0],
            "cpu_busy": (busy1 - busy0) / max(1, total1 - total0),
            "client_cpu_s": _self_cpu_s() - self.self_cpu,
            "server_cpu_s": (_proc_cpu_s(self.server_pid) - self.server_cpu) if self.server_pid else None,
            "wall_s": time.perf_counter() - self.started,
            "by_name": _cpu_by_name(self.by_process),
        }


def describe_load(load: dict) -> str:
    text = (
        f"load average {load['load_start']:.1f} -> {load['load_end']:.1f} on {os.cpu_count()} CPUs, "
        f"CPUs {load['cpu_busy'] * 100:.0f}% busy; this client {load['client_cpu_s']:.1f} CPU s"
    )
    if load["server_cpu_s"] is not None:
        text += f", the server {load['server_cpu_s']:.1f} CPU s"
    text += f" in {load['wall_s']:.1f} s"
    top = ", ".join(f"{name} {spent:.1f}" for name, spent in load.get("by_name", [])[:6])
    return text + (f"; CPU s by process: {top}" if top else "")


# --- the server -------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _image_present(image: str) -> bool:
    return (
        subprocess.run(["docker", "image", "inspect", image], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        == 0
    )


def ensure_image(image: str) -> None:
    """The test suites' image, built from nothing by testkit (no registry) when missing."""
    if _image_present(image):
        return
    print(f"building the test image {image} (testkit)", file=sys.stderr)
    subprocess.run(
        ["cargo", "run", "-q", "-p", "sandboxd-benches", "--example", "test_images", "--", image],
        cwd=REPO_ROOT,
        check=True,
    )


class Server:
    """The release server, started by the bench with a config of its own."""

    def __init__(self, work: Path, log: Path | None) -> None:
        subprocess.run(["cargo", "build", "-q", "--release", "-p", "sandboxd", "--bin", "sandboxd"], cwd=REPO_ROOT, check=True)
        target = Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target"))
        binary = target / "release" / "sandboxd"
        self.dir = work / "server"
        self.dir.mkdir()
        config = self.dir / "config.json"
        config.write_text(
            json.dumps(
                {
                    "docker": {"create": {"extra_run_args": ["--label", LABEL]}},
                    "server": {"state_dir": str(self.dir / "state")},
                }
            )
        )
        self.port, self.metrics_port = _free_port(), _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        self.log = open(log or self.dir / "server.log", "wb")
        self.process = subprocess.Popen(
            [
                str(binary),
                "--listen",
                self.address,
                "--metrics-listen",
                f"127.0.0.1:{self.metrics_port}",
                "--config",
                str(config),
                "--remove-on-shutdown",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": os.environ.get("RUST_LOG", "warn")},
        )
        self.binary = binary

    async def wait_ready(self) -> None:
        client = sandboxd.Client(self.address, deadline_s=2.0)
        try:
            for _ in range(300):
                if self.process.poll() is not None:
                    raise RuntimeError(f"the server exited ({self.process.returncode}); see {self.dir / 'server.log'}")
                try:
                    await client.list_pools()
                    return
                except sandboxd.SandboxdError:
                    await asyncio.sleep(0.1)
            raise RuntimeError("the server did not answer within 30 s")
        finally:
            await client.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


PREFIX = "sandboxd_"
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def scrape(url: str | None) -> dict[tuple[str, str], float]:
    """The server's counters and histogram sums/counts, by (name, labels)."""
    if url is None:
        return {}
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            try:
                samples[(m.group(1), m.group(2) or "")] = float(m.group(3))
            except ValueError:
                pass
    return samples


def server_profile(before: dict, after: dict) -> list[str]:
    """Each RPC's and docker command's count and mean time in the server between two scrapes."""
    lines = []
    for family, what in (("rpc_duration_seconds", "method"), ("docker_command_duration_seconds", "command")):
        family = PREFIX + family
        for (name, labels), count in sorted(after.items()):
            if name != f"{family}_count":
                continue
            n = count - before.get((name, labels), 0.0)
            if n <= 0:
                continue
            total = after.get((f"{family}_sum", labels), 0.0) - before.get((f"{family}_sum", labels), 0.0)
            label = re.search(rf'{what}="([^"]*)"', labels)
            kind = "docker" if what == "command" else "rpc"
            lines.append(f"{kind} {label.group(1) if label else labels}: {n:.0f}, mean {total / n * 1000:.1f} ms")
    wait = PREFIX + "docker_permit_wait_seconds"
    wait_n = after.get((f"{wait}_count", ""), 0.0) - before.get((f"{wait}_count", ""), 0.0)
    if wait_n > 0:
        wait_s = after.get((f"{wait}_sum", ""), 0.0) - before.get((f"{wait}_sum", ""), 0.0)
        lines.append(f"docker permit waits: {wait_n:.0f}, mean {wait_s / wait_n * 1000:.1f} ms")
    return lines


# --- rollouts ---------------------------------------------------------------------------------


async def episode(provider, handle, work: Path, i: int, timings: dict[str, list[float]]) -> None:
    """Upload, 20 tool calls, download: the part of a rollout between create and close."""
    src, dst = work / f"in-{i}", work / f"out-{i}"
    t0 = time.perf_counter()
    await provider.upload_file(handle, src, "/tmp/payload.bin")
    t1 = time.perf_counter()
    for step in range(TOOL_CALLS):
        t = time.perf_counter()
        result = await provider.exec(handle, f"echo step {step} && wc -c < /tmp/payload.bin")
        timings.setdefault("call", []).append(time.perf_counter() - t)
        if result.return_code != 0 or str(PAYLOAD) not in result.stdout:
            raise RuntimeError(f"tool call {step} failed: {result}")
    t2 = time.perf_counter()
    await provider.download_file(handle, "/tmp/payload.bin", dst)
    t3 = time.perf_counter()
    if dst.stat().st_size != PAYLOAD:
        raise RuntimeError("the download is not the upload")
    dst.unlink()
    for key, value in (("upload", t1 - t0), ("calls", t2 - t1), ("download", t3 - t2), ("episode", t3 - t0)):
        timings.setdefault(key, []).append(value)


def medians(timings: dict[str, list[float]]) -> dict[str, float]:
    return {k: statistics.median(v) for k, v in timings.items() if v}


async def rollouts(provider, image: str, count: int, in_flight: int, work: Path, server_pid: int | None) -> dict:
    timings: dict[str, list[float]] = {}
    gate = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with gate:
            t = time.perf_counter()
            handle = await provider.create(SandboxSpec(image=image, ttl_s=600))
            timings.setdefault("create", []).append(time.perf_counter() - t)
            try:
                await episode(provider, handle, work, i, timings)
            finally:
                t = time.perf_counter()
                await provider.close(handle)
                timings.setdefault("close", []).append(time.perf_counter() - t)

    load = Load(server_pid)
    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    wall = time.perf_counter() - started
    return {"wall_s": wall, "per_min": count / wall * 60, "load": load.end(), **medians(timings)}


async def batch_run(address: str, image: str, size: int, episodes: int, in_flight: int, work: Path, server_pid: int | None) -> dict:
    client = sandboxd.Client(address)
    provider = SandboxdProvider(address=address)
    timings: dict[str, list[float]] = {}
    load = Load(server_pid)
    t = time.perf_counter()
    made = [m async for m in client.create_batch(sandboxd.SandboxSpec(image=image, ttl_s=900), size)]
    sandboxes = [m for m in made if isinstance(m, sandboxd.AsyncSandbox)]
    batch_s = time.perf_counter() - t
    if len(sandboxes) != size:
        errors = [m for m in made if not isinstance(m, sandboxd.AsyncSandbox)]
        print(f"batch: {len(sandboxes)} of {size} made; first error: {errors[:1]}", file=sys.stderr)
    gate = asyncio.Semaphore(in_flight)

    async def run(i: int, sandbox) -> None:
        handle = SandboxHandle(sandbox_id=sandbox.sandbox_id, provider_name="sandboxd", raw=sandbox.ref)
        for _ in range(episodes):
            async with gate:
                await episode(provider, handle, work, i, timings)
                r = time.perf_counter()
                await sandbox.reset()
                timings.setdefault("reset", []).append(time.perf_counter() - r)

    started = time.perf_counter()
    await asyncio.gather(*(run(i, s) for i, s in enumerate(sandboxes)))
    wall = time.perf_counter() - started
    t = time.perf_counter()
    await asyncio.gather(*(s.close() for s in sandboxes))
    close_s = time.perf_counter() - t
    await client.close()
    n = len(sandboxes) * episodes
    return {
        "batch_s": batch_s,
        "made": len(sandboxes),
        "wall_s": wall,
        "per_min": n / wall * 60,
        "per_min_with_batch_and_close": n / (wall + batch_s + close_s) * 60,
        "close_all_s": close_s,
        "load": load.end(),
        **medians(timings),
    }


async def reset_vs_churn(address: str, image: str, runs: int, work: Path) -> dict:
    """One sandbox: after each of `runs` episodes, `Reset` it; beside it, `close` + `create` a
    fresh one after each episode (sequential, nothing else in flight): medians."""
    client = sandboxd.Client(address)
    provider = SandboxdProvider(address=address)
    timings: dict[str, list[float]] = {}
    sandbox = await client.create(sandboxd.SandboxSpec(image=image, ttl_s=600))
    for i in range(runs):
        handle = SandboxHandle(sandbox_id=sandbox.sandbox_id, provider_name="sandboxd", raw=sandbox.ref)
        await episode(provider, handle, work, i, timings)
        t = time.perf_counter()
        await sandbox.reset()
        timings.setdefault("reset", []).append(time.perf_counter() - t)
    for i in range(runs):
        handle = SandboxHandle(sandbox_id=sandbox.sandbox_id, provider_name="sandboxd", raw=sandbox.ref)
        await episode(provider, handle, work, i, timings)
        t = time.perf_counter()
        await sandbox.close()
        sandbox = await client.create(sandboxd.SandboxSpec(image=image, ttl_s=600))
        timings.setdefault("churn", []).append(time.perf_counter() - t)
    await sandbox.close()
    await client.close()
    return medians(timings)


def remove_gym_leftovers() -> None:
    """Containers Gym's provider left (a failed run): only the bench's own label."""
    ids = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={GYM_LABEL}"], capture_output=True, text=True, check=False
    ).stdout.split()
    if ids:
        subprocess.run(["docker", "rm", "-f", *ids], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


def _ms(value: float) -> str:
    return f"{value * 1000:.0f} ms"


async def bench(args: argparse.Namespace, work: Path, address: str, metrics_url: str | None, server_pid: int | None) -> None:
    client = sandboxd.Client(address)
    size = args.in_flight * 2
    if POOL in {p.name for p in await client.list_pools()}:
        await client.delete_pool(POOL)

    rows = []
    if not args.skip_gym:
        gym = DockerProvider(create={"extra_run_args": ["--label", GYM_LABEL]})
        try:
            rows.append(("Gym 0.7.0 `DockerProvider`", await rollouts(gym, args.image, args.rollouts, args.in_flight, work, server_pid)))
        finally:
            remove_gym_leftovers()
    if not args.skip_no_pool:
        # Before the pool exists: every create makes a container and every close removes one.
        plain = SandboxdProvider(address=address)
        plain_before = scrape(metrics_url)
        measured = await rollouts(plain, args.image, args.rollouts, args.in_flight, work, server_pid)
        plain_profile = server_profile(plain_before, scrape(metrics_url))
        rows.append(("sandboxd Gym provider, no pool", measured))
        await plain.client.close()

    await client.create_pool(POOL, args.image, target=size, max=size, recycle=True)
    for _ in range(3000):
        pool = next(p for p in await client.list_pools() if p.name == POOL)
        if pool.ready >= size:
            break
        await asyncio.sleep(0.2)
    else:
        raise RuntimeError(f"the pool did not fill: {pool}")
    sd = SandboxdProvider(address=address)
    before = scrape(metrics_url)
    rows.append(("sandboxd Gym provider, recycling pool", await rollouts(sd, args.image, args.rollouts, args.in_flight, work, server_pid)))
    after = scrape(metrics_url)
    await sd.client.close()
    pool = next(p for p in await client.list_pools() if p.name == POOL)
    await client.delete_pool(POOL)

    print(f"\n{args.rollouts} rollouts, {args.in_flight} in flight, image {args.image}, server {address}")
    print(
        f"sandboxd's pool: CreatePool(recycle=true, target={size}, max={size}), filled before the run; "
        f"claimed {pool.claimed}, created {pool.created} (all before the run), recycled {pool.recycled}"
    )
    print("| provider | rollouts/min | wall | create/claim | upload | 20 calls | download | close |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in rows:
        print(
            f"| {name} | {r['per_min']:.1f} | {r['wall_s']:.1f} s | "
            + " | ".join(_ms(r[p]) for p in ("create", "upload", "calls", "download", "close"))
            + " |"
        )
    for name, r in rows:
        print(f"{name}: one tool call {_ms(r['call'])} (median); {describe_load(r['load'])}")
    if not args.skip_gym:
        for name, r in rows[1:]:
            print(f"ratio {name} / Gym's Docker provider: {r['per_min'] / rows[0][1]['per_min']:.1f}x")
    if not args.skip_no_pool and plain_profile:
        print("in the server during the rollouts without a pool: " + "; ".join(plain_profile))
    profile = server_profile(before, after)
    if profile:
        print("in the server during the rollouts with the recycling pool: " + "; ".join(profile))

    if args.batch:
        batch = await batch_run(address, args.image, args.batch, args.episodes, args.in_flight, work, server_pid)
        print(
            f"batch: CreateBatch of {args.batch} made {batch['made']} in {batch['batch_s']:.1f} s; "
            f"{args.episodes} episodes each, separated by Reset, {args.in_flight} in flight: "
            f"{batch['per_min']:.1f} episodes/min ({batch['per_min_with_batch_and_close']:.1f} counting the batch "
            f"and the closes); episode {_ms(batch['episode'])}, reset {_ms(batch['reset'])} (medians); "
            f"closing all {batch['close_all_s']:.1f} s; {describe_load(batch['load'])}"
        )
    if args.reset_runs:
        churn = await reset_vs_churn(address, args.image, args.reset_runs, work)
        print(
            f"reset vs close+create (one sandbox, after an episode, {args.reset_runs} each, medians): "
            f"reset {_ms(churn['reset'])}, close+create {_ms(churn['churn'])}, "
            f"ratio {churn['reset'] / churn['churn']:.3f}"
        )
    await client.close()


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--address", help="a running server to use (default: build and start the release server)")
    ap.add_argument("--image", default="sandboxd-test/bash:1")
    ap.add_argument("--rollouts", type=int, default=64)
    ap.add_argument("--in-flight", type=int, default=16)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--episodes", type=int, default=2)
    ap.add_argument("--skip-gym", action="store_true")
    ap.add_argument("--skip-no-pool", action="store_true", help="only the recycling pool's row for sandboxd")
    ap.add_argument("--reset-runs", type=int, default=10)
    ap.add_argument("--server-log", type=Path, help="keep the started server's log here (RUST_LOG sets its filter)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sandboxd-rollouts-"))
    server = None
    try:
        ensure_image(args.image)
        payload = os.urandom(PAYLOAD)
        for i in range(max(args.rollouts, args.batch, args.reset_runs)):
            (work / f"in-{i}").write_bytes(payload)
        if args.address:
            address, metrics_url, server_pid = args.address, None, None
        else:
            server = Server(work, args.server_log)
            await server.wait_ready()
            address, metrics_url, server_pid = server.address, server.metrics_url, server.process.pid
            print(f"server: {server.binary} (release) on {address}", file=sys.stderr)
        await bench(args, work, address, metrics_url, server_pid)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
