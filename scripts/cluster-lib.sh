#!/usr/bin/env bash
# Names and helpers shared by cluster-up.sh and cluster-down.sh (sourced, not run).
# One place knows how a node is named, addressed and reached.

CLUSTER_NAME="${SANDBOXD_CLUSTER_NAME:-sbxc}"
[[ "$CLUSTER_NAME" =~ ^[a-z][a-z0-9]{0,7}$ ]] || {
  printf 'cluster: ERROR: SANDBOXD_CLUSTER_NAME must be 1-8 lowercase letters or digits, starting with a letter\n' >&2
  exit 2
}
CLUSTER_DIR="${SANDBOXD_CLUSTER_DIR:-/tmp/$CLUSTER_NAME}"
HUB_NS="$CLUSTER_NAME-hub"
# The port every node's sandboxd listens on, on its own address.
SANDBOXD_PORT=50051

log() { printf 'cluster: %s\n' "$*" >&2; }
die() { printf 'cluster: ERROR: %s\n' "$*" >&2; exit 1; }

node_name() { printf '%s-n%s' "$CLUSTER_NAME" "$1"; }
node_ns() { node_name "$1"; }
# 10.231.0.11, .12, …: only inside the cluster's own namespaces.
node_addr() { printf '10.231.0.%s' "$((10 + $1))"; }
node_docker_host() { printf 'unix://%s/%s/docker.sock' "$CLUSTER_DIR" "$(node_name "$1")"; }
ndocker() {
  local i="$1"
  shift
  docker -H "$(node_docker_host "$i")" "$@"
}

# wait_for SECONDS WHAT COMMAND…: polls every 0.2 s; dies naming WHAT when time runs out.
wait_for() {
  local limit="$1" what="$2" end
  shift 2
  end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || die "$what: not within ${limit}s"
    sleep 0.2
  done
}
