#!/usr/bin/env python3
"""The rollout bench (issue 29): rollouts through NeMo Gym's own provider interface, Gym's Docker
provider beside sandboxd's Gym provider in one run.

One rollout: `create` (a claim when a pool serves it), upload 64 KiB, 20 tool calls (`exec`),
download the file, `close`. `--rollouts` of them, `--in-flight` at once, per provider:
- `gym-docker`: Gym 0.7.0's `DockerProvider` (`docker run` / `exec` / `cp` / `rm -f`);
- `sandboxd`: `sandboxd.gym.SandboxdProvider`, unchanged create/close, against a server whose
  pool for the image recycles (`CreatePool(recycle=true, target=2 × --in-flight, max=3 ×)`, made by the bench and filled before the run):
  a closed sandbox is reset and handed back instead of removed;
- `sandboxd-batch`: `--batch` sandboxes from one `CreateBatch`, each running `--episodes`
  rollouts separated by `Reset` (no close, no create), then closed.

Usage (a running sandboxd, e.g. `target/release/sandboxd --listen 127.0.0.1:50051`; Python with
`pip install ./clients/python` and nemo-gym 0.7.0's provider layer, as scripts/test-python.sh
installs them):
    python benches/gym_rollouts.py --address 127.0.0.1:50051 [--rollouts 64 --in-flight 16 --batch 256]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "clients" / "python" / "tests"))

import gym_loader  # noqa: E402

gym_loader.install()

from nemo_gym.sandbox.providers.base import SandboxSpec  # noqa: E402
from nemo_gym.sandbox.providers.docker.provider import DockerProvider  # noqa: E402

import sandboxd  # noqa: E402
from sandboxd.gym import SandboxdProvider  # noqa: E402

TOOL_CALLS = 20
PAYLOAD = 64 * 1024
POOL = "rollout-bench"


async def episode(provider, handle, work: Path, i: int, timings: dict[str, list[float]]) -> None:
    """Upload, 20 tool calls, download: the part of a rollout between create and close."""
    src, dst = work / f"in-{i}", work / f"out-{i}"
    t = time.perf_counter()
    await provider.upload_file(handle, src, "/tmp/payload.bin")
    for step in range(TOOL_CALLS):
        result = await provider.exec(handle, f"echo step {step} && wc -c < /tmp/payload.bin")
        if result.return_code != 0 or str(PAYLOAD) not in result.stdout:
            raise RuntimeError(f"tool call {step} failed: {result}")
    await provider.download_file(handle, "/tmp/payload.bin", dst)
    if dst.stat().st_size != PAYLOAD:
        raise RuntimeError("the download is not the upload")
    timings["episode"].append(time.perf_counter() - t)


async def rollouts(provider, image: str, count: int, in_flight: int, work: Path) -> dict:
    timings: dict[str, list[float]] = {"create": [], "episode": [], "close": []}
    gate = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with gate:
            t = time.perf_counter()
            handle = await provider.create(SandboxSpec(image=image, ttl_s=600))
            timings["create"].append(time.perf_counter() - t)
            try:
                await episode(provider, handle, work, i, timings)
            finally:
                t = time.perf_counter()
                await provider.close(handle)
                timings["close"].append(time.perf_counter() - t)

    started = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    wall = time.perf_counter() - started
    return {"wall_s": wall, "per_min": count / wall * 60, **{k: statistics.median(v) for k, v in timings.items()}}


async def batch_run(address: str, image: str, size: int, episodes: int, in_flight: int, work: Path) -> dict:
    client = sandboxd.Client(address)
    provider = SandboxdProvider(address=address)
    from nemo_gym.sandbox.providers.base import SandboxHandle

    timings: dict[str, list[float]] = {"episode": [], "reset": []}
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
        for e in range(episodes):
            async with gate:
                await episode(provider, handle, work, i, timings)
                r = time.perf_counter()
                await sandbox.reset()
                timings["reset"].append(time.perf_counter() - r)

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
        "episode": statistics.median(timings["episode"]),
        "reset": statistics.median(timings["reset"]),
        "close_all_s": close_s,
    }


async def reset_vs_churn(address: str, image: str, runs: int, work: Path) -> dict:
    """One sandbox: after each of `runs` episodes, `Reset` it; beside it, `close` + `create` a
    fresh one after each episode (sequential, nothing else in flight): medians."""
    client = sandboxd.Client(address)
    provider = SandboxdProvider(address=address)
    from nemo_gym.sandbox.providers.base import SandboxHandle

    timings: dict[str, list[float]] = {"episode": [], "reset": [], "churn": []}
    sandbox = await client.create(sandboxd.SandboxSpec(image=image, ttl_s=600))
    for i in range(runs):
        handle = SandboxHandle(sandbox_id=sandbox.sandbox_id, provider_name="sandboxd", raw=sandbox.ref)
        await episode(provider, handle, work, i, timings)
        t = time.perf_counter()
        await sandbox.reset()
        timings["reset"].append(time.perf_counter() - t)
    for i in range(runs):
        handle = SandboxHandle(sandbox_id=sandbox.sandbox_id, provider_name="sandboxd", raw=sandbox.ref)
        await episode(provider, handle, work, i, timings)
        t = time.perf_counter()
        await sandbox.close()
        sandbox = await client.create(sandboxd.SandboxSpec(image=image, ttl_s=600))
        timings["churn"].append(time.perf_counter() - t)
    await sandbox.close()
    await client.close()
    return {k: statistics.median(v) for k, v in timings.items() if v}


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", default="127.0.0.1:50051")
    ap.add_argument("--image", default="sandboxd-test/bash:1")
    ap.add_argument("--rollouts", type=int, default=64)
    ap.add_argument("--in-flight", type=int, default=16)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--episodes", type=int, default=2)
    ap.add_argument("--skip-gym", action="store_true")
    ap.add_argument("--reset-runs", type=int, default=10)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sandboxd-rollouts-"))
    payload = os.urandom(PAYLOAD)
    for i in range(max(args.rollouts, args.batch)):
        (work / f"in-{i}").write_bytes(payload)

    client = sandboxd.Client(args.address)
    if POOL not in {p.name for p in await client.list_pools()}:
        await client.create_pool(
            POOL, args.image, target=args.in_flight * 2, max=args.in_flight * 3, recycle=True
        )
    for _ in range(600):
        pool = next(p for p in await client.list_pools() if p.name == POOL)
        if pool.ready >= args.in_flight * 2:
            break
        await asyncio.sleep(0.2)

    rows = []
    if not args.skip_gym:
        gym = DockerProvider(create={"extra_run_args": ["--label", "sandboxd.bench=rollouts"]})
        rows.append(("gym-docker", await rollouts(gym, args.image, args.rollouts, args.in_flight, work)))
    sd = SandboxdProvider(address=args.address)
    rows.append(("sandboxd (recycling pool)", await rollouts(sd, args.image, args.rollouts, args.in_flight, work)))
    pool = next(p for p in await client.list_pools() if p.name == POOL)
    await client.delete_pool(POOL)
    print(f"pool: claimed {pool.claimed}, created {pool.created}, recycled {pool.recycled}")
    batch = None
    if args.batch:
        batch = await batch_run(args.address, args.image, args.batch, args.episodes, args.in_flight, work)
    churn = await reset_vs_churn(args.address, args.image, args.reset_runs, work) if args.reset_runs else None
    await client.close()

    print(f"{args.rollouts} rollouts, {args.in_flight} in flight, image {args.image}")
    print("| provider | rollouts/min | wall (s) | create/claim (median) | upload+20 calls+download (median) | close (median) |")
    print("|---|---|---|---|---|---|")
    for name, r in rows:
        print(
            f"| {name} | {r['per_min']:.1f} | {r['wall_s']:.1f} | {r['create'] * 1000:.0f} ms "
            f"| {r['episode'] * 1000:.0f} ms | {r['close'] * 1000:.0f} ms |"
        )
    if len(rows) == 2:
        print(f"ratio sandboxd / gym-docker: {rows[1][1]['per_min'] / rows[0][1]['per_min']:.1f}x")
    if batch:
        print(
            f"batch: CreateBatch of {args.batch} made {batch['made']} in {batch['batch_s']:.1f} s; "
            f"{args.episodes} episodes each separated by Reset: {batch['per_min']:.1f} episodes/min "
            f"({batch['per_min_with_batch_and_close']:.1f} counting the batch and the closes); "
            f"episode {batch['episode'] * 1000:.0f} ms, reset {batch['reset'] * 1000:.0f} ms (medians); "
            f"closing all {batch['close_all_s']:.1f} s"
        )
    if churn:
        print(
            f"reset vs close+create (one sandbox, after an episode, {args.reset_runs} each, medians): "
            f"reset {churn['reset'] * 1000:.0f} ms, close+create {churn['churn'] * 1000:.0f} ms, "
            f"ratio {churn['reset'] / churn['churn']:.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
