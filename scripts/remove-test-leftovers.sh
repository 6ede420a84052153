#!/usr/bin/env bash
# Removes what the test suites leave behind on this machine, and nothing else. The one place
# that knows it: scripts/test.sh (before and after a run), testkit's TestLabel (each test, with
# --case) and the Python tests (each session, with --case) call it.
#
# Usage: scripts/remove-test-leftovers.sh [--case VALUE] [--state-dir DIR]... [--dry-run]
#
#   containers labelled sandboxd.test=1 (with --case: sandboxd.test.case=VALUE only), then the
#   networks, volumes and images (snapshots inherit their sandbox's labels) with that label, and
#   those containers' run directories (<state dir>/sandboxes/<sandbox id>) and loop disk files
#   (<state dir>/disks/<container id>.img) in the default state directory and each --state-dir.
#
#   Without --case, also what no label names, made only by the suites:
#   - run directories in those state directories older than 10 minutes whose sandbox has no
#     container (its test removed the container by label, or died);
#   - test clusters (testkit's TestCluster: /tmp/t<6 hex>, namespaces t<6 hex>-hub|nN), taken
#     down by scripts/cluster-down.sh under their own name;
#   - private Docker daemons (testkit's PrivateDocker: /tmp/sbxdd-<12 hex>): the processes that
#     name the directory, the mounts under it, the directory;
#   - the gVisor daemon of scripts/runsc-daemon.sh (its SANDBOXD_RUNSC_DIR / _NS, default
#     /tmp/sbxrunsc and namespace sbxrunsc), taken down by `runsc-daemon.sh down`; the one of
#     scripts/test-e2b-network.sh (/tmp/sbxe2bnet, namespace sbxe2bnet) likewise.
#   Never run it without --case while tests run: it removes every test's sandboxes.
#
# --dry-run prints what would be removed and removes nothing. Exits 0 unless the arguments are
# wrong; what cannot be removed is said on stderr.
set -uo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() { sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { printf 'remove-test-leftovers: %s\n' "$*" >&2; exit 2; }

case_value="" dry=0
state_dirs=()
while (($#)); do
  case "$1" in
    --case) [[ $# -ge 2 ]] || die "--case takes a value"; case_value="$2"; shift 2 ;;
    --state-dir) [[ $# -ge 2 ]] || die "--state-dir takes a directory"; state_dirs+=("$2"); shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done
if [[ -n "$case_value" ]]; then
  [[ "$case_value" =~ ^[A-Za-z0-9_.-]+$ ]] || die "--case: letters, digits, '_', '.', '-' only"
  filter="label=sandboxd.test.case=$case_value"
else
  filter="label=sandboxd.test=1"
fi

# The server's default state directory (server/src/config/server.rs, default_state_dir).
if [[ -n "${XDG_STATE_HOME:-}" ]]; then
  state_dirs+=("$XDG_STATE_HOME/sandboxd")
elif [[ -n "${HOME:-}" ]]; then
  state_dirs+=("$HOME/.local/state/sandboxd")
else
  state_dirs+=("/var/lib/sandboxd")
fi

# A daemon that answers `docker info` but hangs on one container (seen in CI: the script, run by
# test.sh's exit trap after a suite hung, never returned) must not hang the caller: every Docker
# question is bounded, and every removal too.
ask_docker() { timeout --kill-after=5s 60s docker "$@"; }

# remove WHAT COMMAND…: runs it (quietly, for at most 3 minutes), or says it would.
remove() {
  local what="$1"
  shift
  if ((dry)); then
    printf 'would remove %s: %s\n' "$what" "$*"
    return
  fi
  printf 'remove-test-leftovers: removing %s\n' "$what" >&2
  local rc=0
  timeout --kill-after=10s 180s "$@" >/dev/null 2>&1 || rc=$?
  case "$rc" in
    0) ;;
    124 | 137) printf 'remove-test-leftovers: could not remove %s within 180 s (%s)\n' "$what" "$*" >&2 ;;
    *) printf 'remove-test-leftovers: could not remove %s (%s)\n' "$what" "$*" >&2 ;;
  esac
}

# --- labelled: containers, then what they used ---------------------------------------------
names="$(ask_docker ps -a --filter "$filter" --format '{{.Names}}' 2>/dev/null)"
ids="$(ask_docker ps -aq --filter "$filter" 2>/dev/null)"
full_ids="$(ask_docker ps -aq --no-trunc --filter "$filter" 2>/dev/null)"
# shellcheck disable=SC2086 # one id a word
[[ -n "$ids" ]] && remove "$(wc -w <<<"$ids") container(s)" docker rm -f $ids
for kind in network volume; do
  list="$(ask_docker "$kind" ls -q --filter "$filter" 2>/dev/null)"
  # shellcheck disable=SC2086 # one name a word
  [[ -n "$list" ]] && remove "$(wc -w <<<"$list") ${kind}(s)" docker "$kind" rm $list
done
images="$(ask_docker images -q --filter "$filter" 2>/dev/null | sort -u)"
# shellcheck disable=SC2086 # one id a word
[[ -n "$images" ]] && remove "$(wc -w <<<"$images") image(s)" docker rmi -f $images

# A sandbox's id from its container's name (a create under way runs as sandboxd-creating-<hex>).
sandbox_id() {
  local hex="${1#sandboxd-creating-}"
  hex="${hex#sandboxd-}"
  [[ "$hex" =~ ^[0-9a-f]{32}$ ]] && printf 'sandboxd-%s' "$hex"
}

for dir in "${state_dirs[@]}"; do
  for name in $names; do
    id="$(sandbox_id "$name")" || continue
    [[ -d "$dir/sandboxes/$id" ]] && remove "the run directory of $id" rm -rf -- "$dir/sandboxes/$id"
  done
  # Docker unmounted each one as it removed the container's layer.
  for id in $full_ids; do
    [[ -f "$dir/disks/$id.img" ]] && remove "the disk file of ${id:0:12}" rm -f -- "$dir/disks/$id.img"
  done
done

[[ -n "$case_value" ]] && exit 0

# --- unlabelled, without --case only ---------------------------------------------------------
for dir in "${state_dirs[@]}"; do
  [[ -d "$dir/sandboxes" ]] || continue
  while IFS= read -r run; do
    id="$(basename "$run")"
    [[ "$id" =~ ^sandboxd-[0-9a-f]{32}$ ]] || continue
    hex="${id#sandboxd-}"
    ask_docker inspect --type container "$id" >/dev/null 2>&1 && continue
    ask_docker inspect --type container "sandboxd-creating-$hex" >/dev/null 2>&1 && continue
    remove "the run directory of $id (no container)" rm -rf -- "$run"
  done < <(find "$dir/sandboxes" -mindepth 1 -maxdepth 1 -type d -mmin +10 2>/dev/null)
done

# Test clusters: by their directory, and by a namespace whose directory is already gone.
clusters="$(
  {
    find /tmp -mindepth 1 -maxdepth 1 -type d -regextype posix-extended -regex '/tmp/t[0-9a-f]{6}' -printf '%f\n' 2>/dev/null
    ip netns list 2>/dev/null | awk '{print $1}' | sed -nE 's/^(t[0-9a-f]{6})-(hub|n[0-9]+)$/\1/p'
  } | sort -u
)"
for name in $clusters; do
  # Only what cluster-up.sh made: a node directory or namespace of that name.
  if compgen -G "/tmp/$name/$name-n*" >/dev/null || ip netns list 2>/dev/null | grep -qE "^$name-(hub|n[0-9]+)"; then
    remove "test cluster $name" env SANDBOXD_CLUSTER_NAME="$name" SANDBOXD_CLUSTER_DIR="/tmp/$name" \
      bash "$REPO_ROOT/scripts/cluster-down.sh"
  fi
done

# Private daemons: their processes name their directory; then their mounts; then the directory.
for dir in $(find /tmp -mindepth 1 -maxdepth 1 -type d -regextype posix-extended -regex '/tmp/sbxdd-[0-9a-f]{12}' 2>/dev/null); do
  pids=""
  for p in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -qF -- "$dir/" && pids="$pids ${p#/proc/}"
  done
  # shellcheck disable=SC2086 # one pid a word
  [[ -n "$pids" ]] && remove "the processes of $dir" kill -KILL $pids
  for mount in $(awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
    remove "mount $mount" umount -l "$mount"
  done
  remove "$dir" rm -rf -- "$dir"
done
# The gVisor daemon (scripts/runsc-daemon.sh): its directory or its namespace.
if [[ -d "${SANDBOXD_RUNSC_DIR:-/tmp/sbxrunsc}" ]] || ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF "${SANDBOXD_RUNSC_NS:-sbxrunsc}"; then
  remove "the runsc daemon" bash "$REPO_ROOT/scripts/runsc-daemon.sh" down
fi
# The private daemon of scripts/test-e2b-network.sh (the same script, its own directory and
# namespace) and the stand-in hosts' certificates.
if [[ -d /tmp/sbxe2bnet ]] || ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF sbxe2bnet; then
  remove "the E2B network tests' daemon" env SANDBOXD_RUNSC_DIR=/tmp/sbxe2bnet SANDBOXD_RUNSC_NS=sbxe2bnet \
    bash "$REPO_ROOT/scripts/runsc-daemon.sh" down
fi
for dir in /tmp/sbxe2bnet-pki.*; do
  [[ -d "$dir" ]] && remove "$dir" rm -rf -- "$dir"
done
exit 0
