#!/usr/bin/env bash
# E2B's tests that reach public hosts (test_network.py and test_internet_access.py, sync and
# async: E2B's per-sandbox firewall and internet access) against sandboxd, on machines that reach
# no internet: `scripts/test-e2b-network.sh [VERSION]` (default the pinned SDK, from the
# project venv; another version from the venv scripts/test-e2b-sdk.sh VERSION made).
#
# A private containerd + dockerd (scripts/runsc-daemon.sh in a directory and network namespace
# of its own) whose namespace holds stand-ins for the hosts the tests reach (tests/e2b-sdk/
# fake_internet.py): 1.1.1.1 and 8.8.8.8 over https, and connectivitycheck.gstatic.com by a DNS
# server the daemon gives its containers. Their addresses are on that namespace's loopback, and
# the namespace has no other way out: no packet leaves the host. Their certificate comes from
# a CA made for the run, which E2B's test template trusts. sandboxd (the suite's conftest.py)
# runs on that daemon; its egress policies decide what a sandbox reaches, as anywhere.
# Skipped: tests/e2b-sdk/skips.txt (E2B's cloud identity). Removes everything it made, also on
# failure. Prints pytest's summary line; fails when a test fails or none ran.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PINNED="2.63.0"
VERSION="${1:-$PINNED}"
cd "$REPO_ROOT"

export SANDBOXD_RUNSC_DIR="${SANDBOXD_E2B_NETWORK_DIR:-/tmp/sbxe2bnet}"
export SANDBOXD_RUNSC_NS="${SANDBOXD_E2B_NETWORK_NS:-sbxe2bnet}"
# TEST-NET-1 (RFC 5737): never a real resolver's address.
DNS="192.0.2.53"
export SANDBOXD_RUNSC_DNS="$DNS"
# The stand-ins' addresses (fake_internet.py's SITES) and the DNS server's.
ADDRESSES=(1.1.1.1 8.8.8.8 203.0.113.204 "$DNS")
TESTS=(
  upstream/sync/sandbox_sync/test_network.py
  upstream/async/sandbox_async/test_network.py
  upstream/sync/sandbox_sync/test_internet_access.py
  upstream/async/sandbox_async/test_internet_access.py
)

log() { printf 'test-e2b-network.sh: %s\n' "$*" >&2; }
die() { printf 'test-e2b-network.sh: ERROR: %s\n' "$*" >&2; exit 1; }
[[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "VERSION must be X.Y.Z (got '$VERSION')"

if [[ "$VERSION" == "$PINNED" ]]; then
  PY="${SANDBOXD_VENV:-$REPO_ROOT/.venv}/bin/python"
else
  PY="$REPO_ROOT/.venv-e2b-$VERSION/bin/python"
fi
[[ -x "$PY" ]] || die "no venv for e2b $VERSION: run scripts/test-python.sh (or scripts/test-e2b-sdk.sh $VERSION) first"
"$PY" -c 'import dnslib' 2>/dev/null || "$PY" -m pip install -q --disable-pip-version-check dnslib
for bin in openssl ip nsenter; do
  command -v "$bin" >/dev/null 2>&1 || die "$bin is missing"
done
docker info --format '{{.ServerVersion}}' >/dev/null 2>&1 \
  || die "the Docker daemon is unreachable ('docker info' failed); these tests need it and never skip"

PKI="$(mktemp -d /tmp/sbxe2bnet-pki.XXXXXX)"
STAND_INS=""
cleanup() {
  [[ -n "$STAND_INS" ]] && kill "$STAND_INS" 2>/dev/null
  bash "$REPO_ROOT/scripts/runsc-daemon.sh" down >/dev/null 2>&1 || log "could not remove the private daemon"
  rm -rf "$PKI"
}
trap cleanup EXIT

# The suite's images, built on the machine's daemon when missing, then loaded into the private one.
# (Their build, when it runs, prints to stdout too: the names are the last line.)
images="$(cd "$REPO_ROOT/clients/python/tests" && "$PY" -c \
  'from support import ensure_images; i = ensure_images(); print(i.busybox, i.bash, i.nonroot)' | tail -n 1)"
# shellcheck disable=SC2086 # three image names
host_line="$(bash "$REPO_ROOT/scripts/runsc-daemon.sh" up $images | tail -n 1)"
[[ "$host_line" == DOCKER_HOST=unix://* ]] || die "the private daemon did not start: $host_line"

# On the namespace's loopback (this kernel has no dummy interfaces): local to the namespace,
# so a sandbox's packets to them are delivered there and go no further.
for address in "${ADDRESSES[@]}"; do
  ip -n "$SANDBOXD_RUNSC_NS" addr add "$address/32" dev lo
done

# A CA for this run only and the stand-ins' certificate (every name and address they answer for).
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=sandboxd test stand-ins CA" \
  -keyout "$PKI/ca.key" -out "$PKI/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=stand-ins" -keyout "$PKI/site.key" -out "$PKI/site.csr" 2>/dev/null
printf 'subjectAltName=IP:1.1.1.1,IP:8.8.8.8,DNS:connectivitycheck.gstatic.com,DNS:one.one.one.one,DNS:dns.google\n' \
  >"$PKI/san.ext"
openssl x509 -req -in "$PKI/site.csr" -CA "$PKI/ca.pem" -CAkey "$PKI/ca.key" -CAcreateserial -days 2 \
  -extfile "$PKI/san.ext" -out "$PKI/site.pem" 2>/dev/null

setsid nsenter --net="/run/netns/$SANDBOXD_RUNSC_NS" "$PY" "$REPO_ROOT/tests/e2b-sdk/fake_internet.py" \
  --cert "$PKI/site.pem" --key "$PKI/site.key" --dns "$DNS" --ready "$PKI/ready" \
  </dev/null >"$PKI/stand-ins.log" 2>&1 &
STAND_INS=$!
for _ in $(seq 1 100); do
  [[ -f "$PKI/ready" ]] && break
  kill -0 "$STAND_INS" 2>/dev/null || die "the stand-in hosts did not start: $(tail -n 5 "$PKI/stand-ins.log")"
  sleep 0.1
done
[[ -f "$PKI/ready" ]] || die "the stand-in hosts did not start within 10 s"
log "stand-ins for ${ADDRESSES[*]} in network namespace $SANDBOXD_RUNSC_NS"

set +e
(cd "$REPO_ROOT/tests/e2b-sdk" && env "$host_line" SANDBOXD_E2B_STAND_INS_CA="$PKI/ca.pem" \
  SANDBOXD_E2B_SDK_VERSION="$VERSION" "$PY" -m pytest -p no:cacheprovider -q --timeout 120 "${TESTS[@]}")
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  die "pytest collected no tests (exit 5)"
elif [[ $rc -ne 0 ]]; then
  die "E2B's network tests (e2b $VERSION) failed against sandboxd (exit $rc)"
fi
log "E2B SDK $VERSION: network tests passed"
