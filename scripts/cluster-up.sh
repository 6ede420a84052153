#!/usr/bin/env bash
# A test cluster on one machine: N private Docker daemons, each in a network namespace of its
# own (a "test host"), joined by one bridge, formed into a Docker Swarm, the test images loaded,
# and a sandboxd beside each daemon listening on that node's address.
#
#   scripts/cluster-up.sh [N]          # default 3 nodes; scripts/cluster-down.sh removes it all
#
# It ends by printing one line per node:
#   NODE_NAME SANDBOXD_ADDR DOCKER_HOST DOCKERD_PID
# SANDBOXD_ADDR is an address a client on the host can dial (a loopback port forwarded into the
# node's namespace); the node's own address inside the cluster is in $SANDBOXD_CLUSTER_DIR/nodes.
# Every sandboxd requires the bearer token in $SANDBOXD_CLUSTER_DIR/token.
#
# Environment:
#   SANDBOXD_CLUSTER_NAME    prefix of node names and namespaces (default sbxc)
#   SANDBOXD_CLUSTER_DIR     state directory (default /tmp/$SANDBOXD_CLUSTER_NAME; short: socket paths)
#   SANDBOXD_CLUSTER_IMAGES  images to load on every node (default: the test images)
#   SANDBOXD_BIN             the sandboxd binary (default target/release/sandboxd, else debug)
#   SANDBOXD_CLUSTER_CONFIG  a YAML fragment added to every node's sandboxd config (block style;
#                            a `server:` section of its own gets the node's state_dir)
#   SANDBOXD_CLUSTER_PORT    first loopback port on the host (default 50150: node i gets +i)
#   SANDBOXD_CLUSTER_MODE    the sandboxds' cluster.mode: swarm (default: one service answers for
#                            every node's sandboxes) or single (each node on its own)
#   SANDBOXD_CLUSTER_RUNSC_NODES  node numbers (e.g. "2" or "2,3") whose daemon has gVisor's runsc
#                            registered as its default runtime: their Swarm tasks run on gVisor,
#                            and each one's sandboxd advertises runsc (node label sandboxd.runtime)
#
# Why namespaces and private daemons: the machine's own daemon is never touched (never put in
# swarm mode); each test host has its own containerd, socket, data root, exec root, hostname and
# network stack, and traffic stays between these namespaces and the host's loopback.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=scripts/cluster-lib.sh
source "$REPO_ROOT/scripts/cluster-lib.sh"

N="${1:-3}"
[[ "$N" =~ ^[1-9][0-9]?$ && "$N" -le 20 ]] || die "N must be a number of nodes from 1 to 20, got '$N'"
IMAGES="${SANDBOXD_CLUSTER_IMAGES:-sandboxd-test/busybox:1 sandboxd-test/bash:1 sandboxd-test/nonroot:1 sandboxd-test/readonly:1}"
FIRST_PORT="${SANDBOXD_CLUSTER_PORT:-50150}"
MODE="${SANDBOXD_CLUSTER_MODE:-swarm}"
[[ "$MODE" == swarm || "$MODE" == single ]] || die "SANDBOXD_CLUSTER_MODE must be swarm or single, got '$MODE'"

if [[ -z "${SANDBOXD_BIN:-}" ]]; then
  if [[ -x "$REPO_ROOT/target/release/sandboxd" ]]; then
    SANDBOXD_BIN="$REPO_ROOT/target/release/sandboxd"
  else
    SANDBOXD_BIN="$REPO_ROOT/target/debug/sandboxd"
  fi
fi
[[ -x "$SANDBOXD_BIN" ]] || die "no sandboxd binary at $SANDBOXD_BIN: run 'cargo build --release -p sandboxd' (or set SANDBOXD_BIN)"
for tool in ip nsenter unshare dockerd containerd docker socat; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' is missing (scripts/install-deps.sh installs socat)"
done
[[ "$(id -u)" -eq 0 ]] || die "needs root: it makes network namespaces and starts daemons"
[[ ! -e "$CLUSTER_DIR/nodes" ]] || die "a cluster already exists in $CLUSTER_DIR: run scripts/cluster-down.sh first"
for image in $IMAGES; do
  docker image inspect "$image" >/dev/null 2>&1 || die "image $image is not on the machine's daemon (build the test images: cargo test -p sandboxd --test images)"
done

mkdir -p "$CLUSTER_DIR"
chmod 0700 "$CLUSTER_DIR"
# One bearer token for the whole cluster: clients present it, and nodes will present it to
# each other. Readable by root only.
(umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$CLUSTER_DIR/token")
# From here on a failure tears down what was made. The daemons run in sessions of their own
# (setsid), so they outlive this script and a Ctrl-C in its terminal.
trap 'rc=$?; if [[ $rc -ne 0 ]]; then log "failed; removing what was made"; bash "$REPO_ROOT/scripts/cluster-down.sh" >&2 || true; fi' EXIT

# --- the network: one hub namespace with a bridge, a veth to each node ----------------------
ip netns add "$HUB_NS"
ip -n "$HUB_NS" link add br0 type bridge
ip -n "$HUB_NS" link set br0 up
ip -n "$HUB_NS" link set lo up

for i in $(seq 1 "$N"); do
  name="$(node_name "$i")"
  ns="$(node_ns "$i")"
  addr="$(node_addr "$i")"
  ip netns add "$ns"
  ip link add "sbxc$i" netns "$HUB_NS" type veth peer name eth0 netns "$ns"
  ip -n "$HUB_NS" link set "sbxc$i" master br0 up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  mkdir -p "$CLUSTER_DIR/$name"
done

# --- a containerd and a dockerd per node (cluster-lib.sh) ------------------------------------
for i in $(seq 1 "$N"); do
  start_containerd "$i"
  start_dockerd "$i"
done
for i in $(seq 1 "$N"); do wait_dockerd "$i"; done

# --- the swarm: every node a manager (raft keeps working with one of three gone) ------------
log "forming the swarm"
ndocker 1 swarm init --advertise-addr "$(node_addr 1)" --listen-addr "$(node_addr 1):2377" >/dev/null
manager_token="$(ndocker 1 swarm join-token -q manager)"
for i in $(seq 2 "$N"); do
  ndocker "$i" swarm join --token "$manager_token" --advertise-addr "$(node_addr "$i")" \
    --listen-addr "$(node_addr "$i"):2377" "$(node_addr 1):2377" >/dev/null
done
wait_for 60 "all $N nodes Ready in the swarm" \
  sh -c "[ \"\$(docker -H '$(node_docker_host 1)' node ls --format '{{.Status}}' | grep -c Ready)\" -eq $N ]"

# --- the images --------------------------------------------------------------------------------
log "loading images: $IMAGES"
# shellcheck disable=SC2086 # one image a word
docker save $IMAGES >"$CLUSTER_DIR/images.tar"
loads=()
for i in $(seq 1 "$N"); do
  ndocker "$i" load -q -i "$CLUSTER_DIR/images.tar" >/dev/null &
  loads+=($!)
done
for pid in "${loads[@]}"; do wait "$pid" || die "docker load on a node failed"; done
rm -f "$CLUSTER_DIR/images.tar"

# --- a sandboxd per node, and a loopback port on the host forwarded to it --------------------
# The binary every node runs (and runs again when scripts/cluster-node.sh starts it).
printf '%s\n' "$SANDBOXD_BIN" >"$CLUSTER_DIR/sandboxd.bin"
: >"$CLUSTER_DIR/nodes"
for i in $(seq 1 "$N"); do
  name="$(node_name "$i")"
  ns="$(node_ns "$i")"
  dir="$CLUSTER_DIR/$name"
  addr="$(node_addr "$i")"
  host_port=$((FIRST_PORT + i))
  mkdir -p "$dir/state"
  # In swarm mode the token below is also the cluster token the nodes call each other with.
  {
    printf 'cluster:\n  mode: %s\n  peer_port: %s\n' "$MODE" "$SANDBOXD_PORT"
    if grep -q '^server:' <<<"${SANDBOXD_CLUSTER_CONFIG:-}"; then
      # The fragment's own (block-style) server section gets the node's state directory.
      awk -v dir="$dir/state" '{ print } /^server:/ { print "  state_dir: " dir }' <<<"$SANDBOXD_CLUSTER_CONFIG"
    else
      printf 'server:\n  state_dir: %s\n' "$dir/state"
      if [[ -n "${SANDBOXD_CLUSTER_CONFIG:-}" ]]; then printf '%s\n' "$SANDBOXD_CLUSTER_CONFIG"; fi
    fi
  } >"$dir/sandboxd.yaml"
  start_sandboxd "$i"
  # The host's way in: 127.0.0.1:PORT, each connection carried into the node's namespace.
  printf '#!/bin/sh\nexec nsenter --net=/run/netns/%s socat STDIO TCP:%s:%s\n' "$ns" "$addr" "$SANDBOXD_PORT" >"$dir/forward.sh"
  chmod 0700 "$dir/forward.sh"
  setsid socat "TCP-LISTEN:$host_port,bind=127.0.0.1,reuseaddr,fork" "EXEC:$dir/forward.sh" \
    </dev/null >>"$dir/socat.log" 2>&1 &
  echo $! >"$dir/socat.pid"
  printf '%s %s %s %s\n' "$name" "127.0.0.1:$host_port" "$(node_docker_host "$i")" "$(cat "$dir/docker.pid" 2>/dev/null || echo '?')" >>"$CLUSTER_DIR/nodes.host"
  printf '%s %s:%s\n' "$name" "$addr" "$SANDBOXD_PORT" >>"$CLUSTER_DIR/nodes"
done

# Up when each host port takes a connection (its socat listens).
for i in $(seq 1 "$N"); do
  wait_for 30 "the host port of $(node_name "$i")" bash -c "exec 3<>/dev/tcp/127.0.0.1/$((FIRST_PORT + i))"
done

trap - EXIT
cat "$CLUSTER_DIR/nodes.host"
