"""The README's feature examples (and docs/pools.md's) run as written against a server of their
own, with the starter image: typed file calls, processes and port forwarding, a network and a
volume the service owns, an egress policy set on a running sandbox, a narrower token, a warm
pool. Each leaves nothing behind: what it makes it removes."""

from __future__ import annotations

import json
from pathlib import Path

from markdown import DOCS, README, example, example_env, run_shell, with_image
from support import ContainerLabel, ServerProcess, docker


def run_example(name: str, path: Path, server: ServerProcess, starter: str, binaries: Path, cwd: Path) -> str:
    out = run_shell(with_image(example(name, path), starter), example_env(binaries, server.address), cwd=cwd)
    return out.stdout + out.stderr


def test_files_example_runs(
    example_server: ServerProcess, starter: str, binaries: Path, example_label: ContainerLabel, tmp_path: Path
) -> None:
    before = set(example_label.containers())
    out = run_example("files-ctl", README, example_server, starter, binaries, tmp_path)
    assert "drwxr-x--- 0:0" in out and "/work/out" in out
    assert "a name\nwith a newline" in out  # the NUL-separated listing kept the newline whole
    example_label.settle(before)


def test_processes_and_port_forward_example_runs(
    example_server: ServerProcess, starter: str, binaries: Path, example_label: ContainerLabel, tmp_path: Path
) -> None:
    before = set(example_label.containers())
    lines = run_example("processes-port-forward", README, example_server, starter, binaries, tmp_path).splitlines()
    assert "Forwarding from 127.0.0.1:18080 -> 8080" in lines
    assert "hi" in lines
    assert any(line.startswith("PROCESS ID") for line in lines)
    assert "exit status: 143" in lines
    example_label.settle(before)


def test_network_and_volume_example_runs(
    example_server: ServerProcess, starter: str, binaries: Path, example_label: ContainerLabel, tmp_path: Path
) -> None:
    before = set(example_label.containers())
    out = run_example("runtime-network-volume", README, example_server, starter, binaries, tmp_path)
    assert "\tlab" in out and "shared\nreached" in out, out
    example_label.settle(before)
    # The network went with its last sandbox, the volume with `volume rm`.
    for kind in ("network", "volume"):
        left = docker(kind, "ls", "-q", "--filter", f"label=sandboxd.test.case={example_label.value}", check=False)
        assert left.stdout.split() == [], f"{kind}s left: {left.stdout}"


def test_egress_example_runs(
    example_server: ServerProcess, starter: str, binaries: Path, example_label: ContainerLabel, tmp_path: Path
) -> None:
    before = set(example_label.containers())
    out = run_example("egress-set-policy", README, example_server, starter, binaries, tmp_path)
    assert "refused" in out and "Segmentation fault" not in out, out
    example_label.settle(before)


def test_tokens_example_runs(
    example_server: ServerProcess, starter: str, binaries: Path, example_label: ContainerLabel, tmp_path: Path
) -> None:
    before = set(example_label.containers())
    out = run_example("tokens-grant", README, example_server, starter, binaries, tmp_path)
    assert "graded" in out and "token id" in out
    assert "sandboxctl: PERMISSION_DENIED: " in out and "exit status: 1" in out
    example_label.settle(before)


def test_pools_example_runs(
    example_server: ServerProcess, starter: str, binaries: Path, example_label: ContainerLabel, tmp_path: Path
) -> None:
    before = set(example_label.containers())
    out = run_example("pools-ctl", DOCS / "pools.md", example_server, starter, binaries, tmp_path)
    assert "hi from /tmp" in out and "unclaimed sandboxes removed" in out, out
    example_label.settle(before)
    pools = run_shell("sandboxctl pool ls -o json", example_env(binaries, example_server.address)).stdout
    assert json.loads(pools) == []
