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

# --- a node's daemons and server: started the same way by cluster-up.sh and cluster-node.sh --

# start_containerd I: the node's containerd, in the node's network namespace (so the shims and
# containers it starts are there); waits for its socket.
start_containerd() {
  local i="$1" name ns dir
  name="$(node_name "$i")"
  ns="$(node_ns "$i")"
  dir="$CLUSTER_DIR/$name"
  if [[ ! -f "$dir/containerd.toml" ]]; then
    cat >"$dir/containerd.toml" <<EOF
version = 2
root = "$dir/containerd-root"
state = "$dir/containerd-state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$dir/containerd.sock"
[ttrpc]
  address = "$dir/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
EOF
  fi
  setsid nsenter --net="/run/netns/$ns" containerd --config "$dir/containerd.toml" \
    </dev/null >>"$dir/containerd.log" 2>&1 &
  echo $! >"$dir/containerd.pid"
  wait_for 30 "containerd of $name" test -S "$dir/containerd.sock"
}

# start_dockerd I: the node's dockerd (its own data root, exec root, bridge and hostname).
# nsenter, not `ip netns exec`: that remounts /sys and dockerd then fails ("Devices cgroup
# isn't mounted"). A UTS namespace of its own gives the node its own name in the swarm.
start_dockerd() {
  local i="$1" name ns dir
  name="$(node_name "$i")"
  ns="$(node_ns "$i")"
  dir="$CLUSTER_DIR/$name"
  if [[ ! -f "$dir/daemon.json" ]]; then
    local runsc_nodes="${SANDBOXD_CLUSTER_RUNSC_NODES:-}"
    if [[ " ${runsc_nodes//,/ } " == *" $i "* ]]; then
      # A gVisor node: runsc registered and its *default* runtime (a Swarm task has no
      # --runtime; it runs on its node's default). Arguments as scripts/runsc-daemon.sh's, less
      # --host-uds (a Swarm task has no agent socket: cluster mode execs with `docker exec`).
      # gVisor 2024 (Debian 13's, scripts/install-deps.sh) on systrap; RUNSC=/usr/bin/runsc
      # runs the 2022 release, which has ptrace only.
      local runsc="${RUNSC:-/opt/sandboxd/runsc-2024/usr/bin/runsc}" platform=ptrace
      [[ "$("$runsc" flags 2>&1)" == *systrap* ]] && platform=systrap
      cat >"$dir/daemon.json" <<EOF
{
  "runtimes": {
    "runsc": {"path": "$runsc", "runtimeArgs": ["--platform=$platform", "--overlay2=none", "--network=host"]}
  },
  "default-runtime": "runsc"
}
EOF
    else
      echo '{}' >"$dir/daemon.json"
    fi
  fi
  setsid nsenter --net="/run/netns/$ns" unshare --uts -- sh -c 'hostname "$1"; shift; exec "$@"' sh "$name" \
    dockerd --config-file "$dir/daemon.json" -H "unix://$dir/docker.sock" \
    --containerd "$dir/containerd.sock" --containerd-namespace "sbxc-$name" \
    --containerd-plugins-namespace "sbxc-$name-plugins" \
    --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/docker.pid" \
    --bip "172.$((29 + i)).0.1/16" </dev/null >>"$dir/dockerd.log" 2>&1 &
  echo $! >"$dir/dockerd.launcher.pid"
}

# wait_dockerd I: until the node's dockerd answers.
wait_dockerd() {
  wait_for 60 "dockerd of $(node_name "$1")" docker -H "$(node_docker_host "$1")" info --format '{{.ServerVersion}}'
}

# start_sandboxd I: the node's sandboxd on the node's address, with the binary and config
# cluster-up.sh recorded; returns once it listens (dies with its log's tail if it exits).
start_sandboxd() {
  local i="$1" name ns dir since end
  name="$(node_name "$i")"
  ns="$(node_ns "$i")"
  dir="$CLUSTER_DIR/$name"
  since="$(stat -c %s "$dir/sandboxd.log" 2>/dev/null || echo 0)"
  DOCKER_HOST="$(node_docker_host "$i")" setsid nsenter --net="/run/netns/$ns" \
    "$(cat "$CLUSTER_DIR/sandboxd.bin")" --config "$dir/sandboxd.yaml" --listen "$(node_addr "$i"):$SANDBOXD_PORT" \
    --auth-token-file "$CLUSTER_DIR/token" </dev/null >>"$dir/sandboxd.log" 2>&1 &
  echo $! >"$dir/sandboxd.pid"
  end=$((SECONDS + 60))
  until tail -c "+$((since + 1))" "$dir/sandboxd.log" 2>/dev/null | grep -q 'listening on'; do
    kill -0 "$(cat "$dir/sandboxd.pid")" 2>/dev/null || die "the sandboxd of $name exited: $(tail -n 5 "$dir/sandboxd.log")"
    ((SECONDS < end)) || die "the sandboxd of $name did not listen within 60s: $(tail -n 5 "$dir/sandboxd.log")"
    sleep 0.2
  done
}
