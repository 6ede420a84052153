#!/usr/bin/env bash
# Where a gVisor checkpoint's time goes, without sandboxd in the path (docs/gvisor.md): on the
# daemon of scripts/runsc-daemon.sh (its `runsc-checkpoint` runtime registered through
# scripts/sandboxd-runsc), a sandbox holding MIB MiB of random data in memory is
#   1. checkpointed by Docker (`docker checkpoint create --leave-running`), and by runsc itself
#      (`runsc checkpoint --leave-running --compression=none --exclude-committed-zero-pages`)
#   2. restored into 1 and then COUNT new containers: through the wrapper (a plain `docker
#      start`, the container's id written into the restore directory) and, for one, by
#      `docker start --checkpoint` (containerd imports the image first); beside them, COUNT
#      plain `docker run -d` in parallel (Docker's and gVisor's boot without a restore)
# and every restored container is checked to run the checkpointed process (its shell loop's
# counter, kept in memory, goes on from where it was).
#
# Usage: SANDBOXD_RUNSC_DIR=… SANDBOXD_RUNSC_NS=… scripts/probe-runsc-checkpoint.sh [MIB] [COUNT]
# (the daemon must be up: scripts/runsc-daemon.sh up). Everything it makes is named sbxprobe-*
# and removed at the end.
set -euo pipefail
MIB="${1:-256}"
COUNT="${2:-8}"
DIR="${SANDBOXD_RUNSC_DIR:-/tmp/sbxrunsc}"
H="unix://$DIR/docker.sock"
RESTORE_DIR="$DIR/data/sandboxd-restore"
ROOT="$DIR/exec/runtime-runc/sbxrunsc"
WORK="$DIR/data/sbxprobe"
d() { docker -H "$H" "$@"; }
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
cleanup() {
  d ps -aq --filter name=sbxprobe- | xargs -r docker -H "$H" rm -f >/dev/null 2>&1 || true
  d rmi -f sbxprobe:1 >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
d info >/dev/null 2>&1 || { echo "the runsc daemon in $DIR is not up (scripts/runsc-daemon.sh up)" >&2; exit 1; }
runsc="$(d info --format '{{json .Runtimes}}' | python3 -c 'import json,sys; a=json.load(sys.stdin)["runsc-checkpoint"].get("runtimeArgs",[]); print(next((x.split("=",1)[1] for x in a if x.startswith("--sandboxd-runsc=")), ""))')"
[[ -x "$runsc" ]] || { echo "runsc-checkpoint is not registered through scripts/sandboxd-runsc" >&2; exit 1; }
mkdir -p "$WORK/img/bin"
cp /bin/busybox "$WORK/img/bin/"
for a in sh sleep cat head; do ln -sf busybox "$WORK/img/bin/$a"; done
printf 'FROM scratch\nCOPY bin /bin\n' >"$WORK/img/Dockerfile"
DOCKER_BUILDKIT=0 d build -q -t sbxprobe:1 "$WORK/img" >/dev/null 2>&1
echo "load: $(uptime)"
echo "runsc: $("$runsc" --version | head -1)"
src=$(d run -d --name sbxprobe-src --runtime=runsc-checkpoint sbxprobe:1 sh -c \
  "head -c $((MIB << 20)) /dev/urandom > /dev/sbx-ballast; i=0; while true; do i=\$((i+1)); echo \$i > /tmp/c; sleep 0.05; done")
until [[ "$(d exec sbxprobe-src cat /tmp/c 2>/dev/null || echo 0)" -gt 2 ]]; do sleep 0.2; done
t=$(date +%s%N)
"$runsc" --root "$ROOT" checkpoint --leave-running --compression=none --exclude-committed-zero-pages \
  --image-path "$WORK/direct" "$src"
echo "runsc checkpoint --leave-running --compression=none: $(ms "$t") ms, image $(du -sm "$WORK/direct" | cut -f1) MiB"
at="$(d exec sbxprobe-src cat /tmp/c)"
t=$(date +%s%N)
d checkpoint create --leave-running sbxprobe-src docker1 >/dev/null
echo "docker checkpoint create --leave-running: $(ms "$t") ms"
mkdir -p "$RESTORE_DIR"
restore() { # restore NAME: a new container restored from the direct image by the wrapper
  local id
  id=$(d create --name "$1" --runtime=runsc-checkpoint sbxprobe:1 sh -c 'exit 3')
  echo "$WORK/direct" >"$RESTORE_DIR/$id"
  d start "$1" >/dev/null
}
t=$(date +%s%N)
restore sbxprobe-one
echo "restore x1 through the wrapper (docker create + start): $(ms "$t") ms"
t=$(date +%s%N)
for k in $(seq 1 "$COUNT"); do restore "sbxprobe-f$k" & done
wait
echo "restore x$COUNT in parallel through the wrapper: $(ms "$t") ms"
for name in one $(seq -f 'f%g' 1 "$COUNT"); do
  n="$(d exec "sbxprobe-$name" cat /tmp/c)"
  [[ "$n" -ge "$at" ]] || { echo "sbxprobe-$name did not go on from the checkpoint ($n < $at)" >&2; exit 1; }
done
t=$(date +%s%N)
for k in $(seq 1 "$COUNT"); do d run -d --name "sbxprobe-b$k" --runtime=runsc-checkpoint sbxprobe:1 sleep 1000 >/dev/null & done
wait
echo "baseline: docker run -d x$COUNT in parallel, nothing restored: $(ms "$t") ms"
echo "every restored container went on from the checkpointed counter (>= $at)"
id=$(d create --name sbxprobe-docker --runtime=runsc-checkpoint sbxprobe:1 sh -c 'exit 3')
mkdir -p "$DIR/data/containers/$id/checkpoints"
cp -a "$DIR/data/containers/$src/checkpoints/docker1" "$DIR/data/containers/$id/checkpoints/"
t=$(date +%s%N)
d start --checkpoint docker1 sbxprobe-docker >/dev/null
echo "restore x1 by docker start --checkpoint: $(ms "$t") ms"
