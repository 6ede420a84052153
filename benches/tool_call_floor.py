#!/usr/bin/env python3
"""Where the milliseconds of one tool call go (issue 38): `--calls` (200) sequential `Exec`s of
`true` in one sandbox through the Python client, split into

- spawn in the sandbox: the command's own wall time as the agent measured it (`ExecResponse.usage`:
  fork/exec of the shell and `true`, to its exit);
- agent and server: the server's time for the call (`sandboxd_rpc_duration_seconds` of Exec, from
  its metrics) less the command's wall time (the agent's framing and the socket, the server's
  handler, auth and audit);
- client and gRPC: the client's round trip less the server's time (the Python client, grpc's
  HTTP/2 over loopback);

beside a bare `docker exec <container> bash -c true` (the docker CLI, the daemon, runc) and a spawn
measured inside the container (`bash -c true` run 200 times by a shell in the sandbox).

It starts the server itself (`--binary`, default the release binary) with metrics on a free port,
or uses `--address` with `--metrics-url`. Prints medians and the machine's load.

    python benches/tool_call_floor.py [--calls 200] [--binary target/release/sandboxd]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
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
sys.path.insert(0, str(REPO_ROOT / "clients" / "python" / "src"))

import sandboxd  # noqa: E402

IMAGE = "sandboxd-test/bash:1"
LABEL = "sandboxd.bench=tool-call-floor"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def exec_seconds(url: str) -> tuple[float, float]:
    """(sum, count) of the server's Exec durations."""
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    total = count = 0.0
    for line in text.splitlines():
        if 'method="Exec"' not in line:
            continue
        m = re.match(r"^(\S+?)\{[^}]*\}\s+(\S+)", line)
        if m and m.group(1).endswith("rpc_duration_seconds_sum"):
            total = float(m.group(2))
        elif m and m.group(1).endswith("rpc_duration_seconds_count"):
            count = float(m.group(2))
    return total, count


def ms(x: float) -> str:
    return f"{x * 1000:.2f} ms"


async def measure(address: str, metrics_url: str, calls: int) -> None:
    client = sandboxd.Client(address)
    sandbox = await client.create(IMAGE)
    sandbox_id = sandbox.sandbox_id
    try:
        for _ in range(20):  # warm the agent channel
            await client.exec(sandbox_id, "true")
        load = os.getloadavg()[0]
        before = exec_seconds(metrics_url)
        rtts, walls = [], []
        for _ in range(calls):
            t = time.perf_counter()
            result = await client.exec(sandbox_id, "true")
            rtts.append(time.perf_counter() - t)
            if result.usage is not None:
                walls.append(result.usage.wall_time_s)
        after = exec_seconds(metrics_url)
        server = (after[0] - before[0]) / max(1.0, after[1] - before[1])
        container = subprocess.run(
            ["docker", "inspect", "-f", "{{.Id}}", sandbox_id], capture_output=True, text=True, check=True
        ).stdout.strip()
        docker = []
        for _ in range(20):
            t = time.perf_counter()
            subprocess.run(["docker", "exec", container, "bash", "-c", "true"], check=True)
            docker.append(time.perf_counter() - t)
        # bash's own clock (the image's `date` has no %N): 200 spawns timed inside the sandbox.
        loop = await client.exec(
            sandbox_id, "bash -c 's=$EPOCHREALTIME; for i in {1..200}; do bash -c true; done; echo $s $EPOCHREALTIME'"
        )
        start_s, end_s = (float(x) for x in loop.stdout.decode().split())
        spawn_in = (end_s - start_s) / 200
        rtt, wall = statistics.median(rtts), (statistics.median(walls) if walls else 0.0)
        print(f"load average {load:.1f} -> {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {calls} calls of `true`")
        print(f"  client round trip (p50)          {ms(rtt)}  (p90 {ms(sorted(rtts)[int(0.9 * len(rtts))])})")
        print(f"  server's time for Exec (mean)    {ms(server)}")
        print(f"  spawn in the sandbox (p50)       {ms(wall)}  (the command's wall time, from the agent)")
        print(f"  => agent + server                {ms(max(0.0, server - wall))}")
        print(f"  => client + gRPC                 {ms(max(0.0, rtt - server))}")
        print(f"  bare `docker exec C bash -c true` (p50) {ms(statistics.median(docker))}")
        print(f"  `bash -c true` spawned inside the container (mean of 200) {ms(spawn_in)}")
    finally:
        await client.close_sandbox(sandbox_id)
        await client.close()


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--binary", type=Path)
    ap.add_argument("--address")
    ap.add_argument("--metrics-url")
    args = ap.parse_args()
    if args.address:
        await measure(args.address, args.metrics_url, args.calls)
        return 0
    binary = args.binary or Path(os.environ.get("CARGO_TARGET_DIR", REPO_ROOT / "target")) / "release" / "sandboxd"
    with tempfile.TemporaryDirectory(prefix="sandboxd-floor-") as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps({"docker": {"create": {"extra_run_args": ["--label", LABEL]}}, "server": {"state_dir": f"{tmp}/state"}}))
        address, metrics = f"127.0.0.1:{_free_port()}", f"127.0.0.1:{_free_port()}"
        log = open(Path(tmp) / "server.log", "wb")
        server = subprocess.Popen(
            [str(binary), "--listen", address, "--metrics-listen", metrics, "--config", str(config), "--remove-on-shutdown"],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            probe = sandboxd.Client(address, deadline_s=2.0)
            for _ in range(600):
                try:
                    await probe.list_pools()
                    break
                except sandboxd.SandboxdError:
                    await asyncio.sleep(0.1)
            await probe.close()
            await measure(address, f"http://{metrics}/metrics", args.calls)
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=120)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
