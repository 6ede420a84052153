#!/usr/bin/env bash
# A private containerd + dockerd with gVisor's `runsc` registered, for sandboxes on gVisor (tests,
# benches, a person trying it). Its own directory (data root, exec root, sockets, config), its own
# network namespace; the machine's daemon and /etc/docker/daemon.json are never touched.
#
# Usage: scripts/runsc-daemon.sh up [IMAGE…]   start it (or find it running), load IMAGEs from the
#                                              machine's daemon (`docker save | docker -H … load`),
#                                              print DOCKER_HOST=unix://… on the last line
#        scripts/runsc-daemon.sh down          remove everything `up` made (processes, mounts,
#                                              network namespace, directory); safe to run twice
#        scripts/runsc-daemon.sh host          print DOCKER_HOST=… (exit 1 when it is not up)
#
# Environment: SANDBOXD_RUNSC_DIR (default /tmp/sbxrunsc; short: socket paths are limited to
# 108 bytes), SANDBOXD_RUNSC_NS (the network namespace, default sbxrunsc), RUNSC (the runsc
# binary, default /opt/sandboxd/runsc-2024/usr/bin/runsc: gVisor 2024, Debian 13's, which
# scripts/install-deps.sh unpacks; RUNSC=/usr/bin/runsc runs Debian 12's 2022 release, on
# ptrace, without the direct checkpoints of docs/gvisor.md), SANDBOXD_RUNSC_NETWORK (`bridge`, the default: the daemon
# has a bridge of its own inside its namespace and sandboxes a network; `none`: no bridge, and
# sandboxes on runsc have no network but loopback), SANDBOXD_RUNSC_DNS (an IPv4 address: the
# daemon's `dns`, the resolver its containers ask; default the machine's, as Docker picks it).
#
# The runtime is registered as `runsc` with the arguments sandboxd needs (see docs/runtimes.md,
# "Sandboxes on gVisor"):
#   --platform=systrap  how the sentry intercepts system calls (ptrace with the 2022 release,
#                       which has no systrap: a stub process per task); `kvm` hung here
#   --overlay2=none     the root filesystem's writes go to the container's own layer on the
#                       host (docker commit, Reset and the file calls read them there); the
#                       2024 release's default (root:self) keeps them in a file of its own
#   --network=host      the sandbox's sockets are the host kernel's, inside the container's own
#                       network namespace (so docker's bridge, published ports and egress rules
#                       set in that namespace apply). gVisor's own stack (`sandbox`, the default)
#                       cannot start on this kernel with this runsc release: its root-namespace
#                       check reads /proc/sys/net/core/rmem_default, which kernel 6.x shows in
#                       every namespace ("cannot run with network enabled in root network
#                       namespace"). With SANDBOXD_RUNSC_NETWORK=none: --network=none.
#   --host-uds=create   the agent's socket, made inside the sandbox in the bind-mounted run
#                       directory, is a real host socket the server connects to (default `none`:
#                       the socket exists only inside gVisor, and sandboxd falls back to the
#                       `docker exec -i` channel). `create`, not `all`: code in the sandbox may
#                       not connect to host sockets a volume happens to show (`open`)
# A second one, `runsc-checkpoint`, has --network=none and no --host-uds (with the 2024 release
# it is registered through scripts/sandboxd-runsc, which restores a container the server names
# in <data root>/sandboxd-restore from the server's own checkpoint image, docs/gvisor.md): gVisor refuses to
# checkpoint a sandbox on the host's network stack ("checkpoint not supported when using
# hostinet") or one with a bound host socket ("Cannot save endpoint with bound host socket"), so
# live snapshots, live forks and hibernation (`docker checkpoint`, hence "experimental": true)
# need a sandbox with loopback only whose agent is reached by the `docker exec -i` channel (a
# relay to the sandbox's init agent, whose socket stays inside gVisor, so its terminal sessions
# are part of every checkpoint). sandboxd offers it as a runtime with `checkpoint: true` and
# `transport: channel`.
# `runc` stays the daemon's default runtime, so one daemon serves both side by side.
set -uo pipefail

DIR="${SANDBOXD_RUNSC_DIR:-/tmp/sbxrunsc}"
NS="${SANDBOXD_RUNSC_NS:-sbxrunsc}"
RUNSC="${RUNSC:-/opt/sandboxd/runsc-2024/usr/bin/runsc}"
NETWORK="${SANDBOXD_RUNSC_NETWORK:-bridge}"
DNS="${SANDBOXD_RUNSC_DNS:-}"
HOST="unix://$DIR/docker.sock"

log() { printf 'runsc-daemon: %s\n' "$*" >&2; }
die() { printf 'runsc-daemon: ERROR: %s\n' "$*" >&2; exit 1; }

[[ "$DIR" == /* && "$DIR" != / && ${#DIR} -le 80 ]] || die "SANDBOXD_RUNSC_DIR must be an absolute path of at most 80 characters"
[[ "$NETWORK" == bridge || "$NETWORK" == none ]] || die "SANDBOXD_RUNSC_NETWORK must be bridge or none"
[[ -z "$DNS" || "$DNS" =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]] || die "SANDBOXD_RUNSC_DNS must be an IPv4 address"
[[ "$NS" =~ ^[a-z][a-z0-9-]{0,14}$ ]] || die "SANDBOXD_RUNSC_NS must be 1-15 lowercase letters, digits or '-', starting with a letter"

answers() { docker -H "$HOST" info --format '{{.ServerVersion}}' >/dev/null 2>&1; }

# wait_for SECONDS WHAT COMMAND…: polls every 0.2 s; dies naming WHAT when time runs out.
wait_for() {
  local limit="$1" what="$2" end
  shift 2
  end=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || die "$what did not start within ${limit}s: $(tail -n 5 "$DIR"/*.log 2>/dev/null)"
    sleep 0.2
  done
}

# Every pid whose command line names the directory: containerd, dockerd, the shims, and runsc's
# sandbox and gofer processes (their --root is under the exec root).
pids_naming_dir() {
  local p
  for p in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- "$DIR/" && printf '%s\n' "${p#/proc/}"
  done
}

# Processes of the containers this daemon made (runc ones): cgroups named by ids only its data
# root holds (cgroup v1 and v2).
container_pids() {
  local id f
  for id in $(ls "$DIR/data/containers" 2>/dev/null | grep -E '^[0-9a-f]{64}$'); do
    for f in /sys/fs/cgroup/*/docker/"$id"/cgroup.procs /sys/fs/cgroup/docker/"$id"/cgroup.procs; do
      [[ -r "$f" ]] && cat "$f"
    done
  done
}

down() {
  local pids f
  if [[ -d "$DIR" ]]; then
    for f in "$DIR/docker.pid" "$DIR/dockerd.launcher.pid" "$DIR/containerd.pid"; do
      [[ -f "$f" ]] && [[ "$(cat "$f")" =~ ^[0-9]+$ ]] && kill -KILL "$(cat "$f")" 2>/dev/null
    done
    for _ in 1 2 3 4 5 6; do
      pids="$( (pids_naming_dir; container_pids) | sort -u)"
      [[ -z "$pids" ]] && break
      # shellcheck disable=SC2086 # one pid a word
      kill -KILL $pids 2>/dev/null
      sleep 0.3
    done
  fi
  if ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF "$NS"; then
    pids="$(ip netns pids "$NS" 2>/dev/null)"
    # shellcheck disable=SC2086
    [[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null
  fi
  sleep 0.2
  if [[ -d "$DIR" ]]; then
    # Mounts the daemons left (overlays, netns files, shm), deepest first.
    awk -v dir="$DIR/" 'index($5, dir) == 1 { print $5 }' /proc/self/mountinfo \
      | awk '{ print length($0) " " $0 }' | sort -rn | cut -d' ' -f2- | uniq \
      | while read -r mount; do umount -l "$mount" 2>/dev/null; done
  fi
  if ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF "$NS"; then
    ip netns del "$NS" 2>/dev/null || log "could not delete network namespace $NS"
  fi
  if [[ -d "$DIR" ]]; then
    rm -rf "$DIR" 2>/dev/null || {
      sleep 1
      rm -rf "$DIR" || die "could not remove $DIR"
    }
  fi
  log "removed the runsc daemon in $DIR"
}

up() {
  if ! answers; then
    # Whatever a killed or half-made run left, first.
    [[ -d "$DIR" ]] || ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF "$NS" && down
    [[ -x "$RUNSC" ]] || die "$RUNSC is missing: scripts/install-deps.sh unpacks it"
    for bin in containerd dockerd nsenter ip; do
      command -v "$bin" >/dev/null 2>&1 || die "$bin is missing"
    done
    mkdir -p "$DIR" || die "cannot make $DIR"
    chmod 0711 "$DIR"
    ip netns add "$NS" || die "cannot add network namespace $NS (root is needed)"
    ip -n "$NS" link set lo up
    cat >"$DIR/containerd.toml" <<EOF
version = 2
root = "$DIR/containerd-root"
state = "$DIR/containerd-state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "$DIR/containerd.sock"
[ttrpc]
  address = "$DIR/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
EOF
    local platform=ptrace net_arg=host bridge_args=(--bip 172.28.0.1/16)
    local flags checkpoint_path="$RUNSC" checkpoint_args=""
    flags="$("$RUNSC" flags 2>&1)"
    [[ "$flags" == *systrap* ]] && platform=systrap
    # A release whose checkpoint can be uncompressed (2024) is called directly by the server
    # for checkpoints and restored through scripts/sandboxd-runsc (docs/gvisor.md).
    if [[ "$("$RUNSC" help checkpoint 2>&1)" == *compression* ]]; then
      checkpoint_path="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/sandboxd-runsc"
      checkpoint_args="\"--sandboxd-runsc=$RUNSC\", \"--sandboxd-restore-dir=$DIR/data/sandboxd-restore\", "
    fi
    if [[ "$NETWORK" == none ]]; then
      net_arg=none bridge_args=(--bridge=none)
    fi
    local dns_setting=""
    [[ -n "$DNS" ]] && dns_setting="\"dns\": [\"$DNS\"],"
    cat >"$DIR/daemon.json" <<EOF
{
  "runtimes": {
    "runsc": {
      "path": "$RUNSC",
      "runtimeArgs": ["--platform=$platform", "--overlay2=none", "--network=$net_arg", "--host-uds=create"]
    },
    "runsc-checkpoint": {
      "path": "$checkpoint_path",
      "runtimeArgs": [$checkpoint_args"--platform=$platform", "--overlay2=none", "--network=none"]
    }
  },
  $dns_setting
  "experimental": true
}
EOF
    # nsenter, not `ip netns exec`: that remounts /sys and dockerd then fails ("Devices cgroup
    # isn't mounted").
    setsid nsenter --net="/run/netns/$NS" containerd --config "$DIR/containerd.toml" \
      </dev/null >>"$DIR/containerd.log" 2>&1 &
    echo $! >"$DIR/containerd.pid"
    wait_for 30 "containerd" test -S "$DIR/containerd.sock"
    # Its `docker0` (or, with --bridge=none, the deletion of one) and its iptables rules are
    # the namespace's own: the machine daemon's bridge and rules are never touched.
    setsid nsenter --net="/run/netns/$NS" dockerd --config-file "$DIR/daemon.json" -H "$HOST" \
      --containerd "$DIR/containerd.sock" --containerd-namespace sbxrunsc \
      --containerd-plugins-namespace sbxrunsc-plugins \
      --data-root "$DIR/data" --exec-root "$DIR/exec" --pidfile "$DIR/docker.pid" \
      --ip6tables=false --ip-masq=false "${bridge_args[@]}" \
      </dev/null >>"$DIR/dockerd.log" 2>&1 &
    echo $! >"$DIR/dockerd.launcher.pid"
    wait_for 60 "dockerd" answers
    docker -H "$HOST" info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"' \
      || die "the daemon does not list runsc: $(tail -n 5 "$DIR/dockerd.log")"
    log "started a containerd + dockerd with runsc in $DIR (network namespace $NS)"
  else
    log "already up in $DIR"
  fi
  local image
  for image in "$@"; do
    if [[ "$(docker image inspect --format '{{.Id}}' "$image" 2>/dev/null)" == \
      "$(docker -H "$HOST" image inspect --format '{{.Id}}' "$image" 2>/dev/null)" ]] \
      && [[ -n "$(docker -H "$HOST" image inspect --format '{{.Id}}' "$image" 2>/dev/null)" ]]; then
      continue
    fi
    log "loading $image"
    docker save "$image" | docker -H "$HOST" load >/dev/null || die "could not load $image"
  done
  printf 'DOCKER_HOST=%s\n' "$HOST"
}

case "${1:-}" in
  up) shift; up "$@" ;;
  down) down ;;
  host) answers || die "not up (scripts/runsc-daemon.sh up)"; printf 'DOCKER_HOST=%s\n' "$HOST" ;;
  *) sed -n '2,44p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
