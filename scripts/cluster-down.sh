#!/usr/bin/env bash
# Removes everything scripts/cluster-up.sh made, whatever state it is in (half made, daemons
# killed, run twice): sandboxd and its forwarders, the daemons, their shims and container
# processes, mounts, network namespaces, the state directory. Touches nothing else: processes
# are found by the cluster's directory in their command line, its namespaces, and the
# cgroups of the containers its daemons made.
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/cluster-lib.sh
source "$REPO_ROOT/scripts/cluster-lib.sh"

kill_pidfile() {
  local file="$1" pid
  [[ -f "$file" ]] || return 0
  pid="$(cat "$file")"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -KILL "$pid" 2>/dev/null
  return 0
}

# Every pid whose command line names the cluster directory (containerd, dockerd, shims, socat).
pids_naming_dir() {
  local p
  for p in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- "$CLUSTER_DIR/" && printf '%s\n' "${p#/proc/}"
  done
}

# Processes of the containers the cluster's daemons made: their cgroups are named by ids that
# only those daemons' data roots hold (cgroup v1 and v2).
container_pids() {
  local id f
  for id in $(ls "$CLUSTER_DIR"/*/data/containers 2>/dev/null | grep -E '^[0-9a-f]{64}$'); do
    for f in /sys/fs/cgroup/*/docker/"$id"/cgroup.procs /sys/fs/cgroup/docker/"$id"/cgroup.procs; do
      [[ -r "$f" ]] && cat "$f"
    done
  done
}

if [[ -d "$CLUSTER_DIR" ]]; then
  # The server side first, so nothing starts new containers while the daemons go.
  for f in "$CLUSTER_DIR"/*/socat.pid "$CLUSTER_DIR"/*/sandboxd.pid; do kill_pidfile "$f"; done
  # The daemons, then whatever outlived them, until nothing of the cluster runs.
  for f in "$CLUSTER_DIR"/*/docker.pid "$CLUSTER_DIR"/*/dockerd.launcher.pid "$CLUSTER_DIR"/*/containerd.pid; do
    kill_pidfile "$f"
  done
  for _ in 1 2 3 4 5; do
    pids="$( (pids_naming_dir; container_pids) | sort -u)"
    [[ -z "$pids" ]] && break
    # shellcheck disable=SC2086 # one pid a word
    kill -KILL $pids 2>/dev/null
    sleep 0.3
  done
fi

# Whatever is left in the cluster's namespaces (a node's forwarders, a process entered there).
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$CLUSTER_NAME-(hub|n[0-9]+)$"); do
  pids="$(ip netns pids "$ns" 2>/dev/null)"
  # shellcheck disable=SC2086
  [[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null
done
sleep 0.2

if [[ -d "$CLUSTER_DIR" ]]; then
  # Mounts the daemons left (overlays, netns files, shm), deepest first.
  awk -v dir="$CLUSTER_DIR/" 'index($5, dir) == 1 { print $5 }' /proc/self/mountinfo \
    | awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2- | uniq \
    | while read -r mount; do umount -l "$mount" 2>/dev/null; done
fi

for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$CLUSTER_NAME-(hub|n[0-9]+)$"); do
  ip netns del "$ns" 2>/dev/null || log "could not delete network namespace $ns"
done

if [[ -d "$CLUSTER_DIR" ]]; then
  rm -rf "$CLUSTER_DIR" 2>/dev/null || {
    sleep 1
    rm -rf "$CLUSTER_DIR" || die "could not remove $CLUSTER_DIR"
  }
fi
log "removed cluster $CLUSTER_NAME"
