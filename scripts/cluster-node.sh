#!/usr/bin/env bash
# Faults and repairs on one node of the test cluster of scripts/cluster-up.sh:
#
#   scripts/cluster-node.sh kill|stop|start|restart NODE [dockerd|sandboxd|all]
#
#   kill     SIGKILL (a crash: the daemon leaves its containers and its swarm without a word)
#   stop     SIGTERM, then SIGKILL after 30 s
#   start    start it again as cluster-up.sh did (nothing when it runs); waits until it answers
#   restart  stop, then start
#
# NODE is a node's name (`sbxc-n2`) or number (`2`); what defaults to dockerd. `all` is the
# node's sandboxd, dockerd and containerd (stopped in that order, started in the reverse one).
# Prints the pids of what it started. SANDBOXD_CLUSTER_NAME / SANDBOXD_CLUSTER_DIR pick the
# cluster, as for cluster-up.sh.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/cluster-lib.sh
source "$REPO_ROOT/scripts/cluster-lib.sh"

usage() { die "usage: cluster-node.sh kill|stop|start|restart NODE [dockerd|sandboxd|all]"; }
[[ $# -ge 2 && $# -le 3 ]] || usage
ACTION="$1"
NODE="$2"
WHAT="${3:-dockerd}"
[[ "$ACTION" =~ ^(kill|stop|start|restart)$ ]] || usage
[[ "$WHAT" =~ ^(dockerd|sandboxd|all)$ ]] || usage
[[ -f "$CLUSTER_DIR/nodes" ]] || die "no cluster in $CLUSTER_DIR (scripts/cluster-up.sh makes one)"
[[ "$(id -u)" -eq 0 ]] || die "needs root: it signals and starts the node's daemons"

# The node's number, from its name or number.
if [[ "$NODE" =~ ^[0-9]+$ ]]; then
  I="$NODE"
else
  I="${NODE##*-n}"
  [[ "$NODE" == "$(node_name "$I")" ]] || die "no node named $NODE in cluster $CLUSTER_NAME"
fi
DIR="$CLUSTER_DIR/$(node_name "$I")"
[[ -d "$DIR" ]] || die "no node $NODE in cluster $CLUSTER_NAME"

# Whether PID runs (a zombie waiting for its reaper does not).
alive() {
  local state
  state="$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)"
  [[ -n "$state" && "$state" != Z ]]
}

# The pid a component's pidfile names, when that process runs.
running_pid() {
  local file="$DIR/$1.pid" pid
  [[ -f "$file" ]] || return 1
  pid="$(cat "$file")"
  [[ "$pid" =~ ^[0-9]+$ ]] && alive "$pid" && printf '%s' "$pid"
}

# pidfile per component: dockerd writes docker.pid itself (its launcher execs into it).
pidfile_of() {
  case "$1" in
    dockerd) echo docker ;;
    *) echo "$1" ;;
  esac
}

signal() {
  local component="$1" sig="$2" pid
  pid="$(running_pid "$(pidfile_of "$component")")" || return 0
  kill "-$sig" "$pid" 2>/dev/null || true
  if [[ "$sig" == TERM ]]; then
    local end=$((SECONDS + 30))
    while alive "$pid"; do
      if ((SECONDS >= end)); then
        kill -KILL "$pid" 2>/dev/null || true
        break
      fi
      sleep 0.2
    done
  fi
  while alive "$pid"; do sleep 0.1; done
  log "$ACTION: $component of $(node_name "$I") (pid $pid)"
}

start() {
  local component="$1"
  if running_pid "$(pidfile_of "$component")" >/dev/null; then
    log "$component of $(node_name "$I") already runs"
    return 0
  fi
  case "$component" in
    containerd) start_containerd "$I" ;;
    dockerd)
      start_dockerd "$I"
      wait_dockerd "$I"
      ;;
    sandboxd) start_sandboxd "$I" ;;
  esac
  printf '%s %s\n' "$component" "$(running_pid "$(pidfile_of "$component")" || echo '?')"
}

case "$WHAT" in
  all) components=(sandboxd dockerd containerd) ;;
  *) components=("$WHAT") ;;
esac
reversed=()
for ((k = ${#components[@]} - 1; k >= 0; k--)); do reversed+=("${components[k]}"); done

case "$ACTION" in
  kill) for c in "${components[@]}"; do signal "$c" KILL; done ;;
  stop) for c in "${components[@]}"; do signal "$c" TERM; done ;;
  start) for c in "${reversed[@]}"; do start "$c"; done ;;
  restart)
    for c in "${components[@]}"; do signal "$c" TERM; done
    for c in "${reversed[@]}"; do start "$c"; done
    ;;
esac
