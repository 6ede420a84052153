#!/usr/bin/env bash
# The web console's browser tests (tests/console/): builds sandboxd and sandboxctl, installs
# selenium and pytest into the project venv, and runs the tests in headless Chromium (Debian's
# chromium + chromium-driver, from scripts/install-deps.sh) against a real sandboxd on the real
# Docker daemon. Screenshots: target/artifacts/console/*.png. Takes tens of seconds.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SANDBOXD_VENV:-$REPO_ROOT/.venv}"
cd "$REPO_ROOT"

die() { printf 'test-console.sh: ERROR: %s\n' "$*" >&2; exit 1; }

[[ -x /usr/bin/chromium && -x /usr/bin/chromedriver ]] \
  || die "chromium and chromium-driver are missing (scripts/install-deps.sh installs them)"
docker info >/dev/null 2>&1 || die "Docker is unreachable"
[[ -x "$VENV/bin/python" ]] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "selenium>=4.20,<5" pytest
# The vendored xterm.js is what Debian's packages give (when they are installed).
if [[ -d /usr/share/nodejs/xterm ]]; then python3 scripts/bundle-xterm.py --check; fi
cargo build -q -p sandboxd -p sandboxctl --bin sandboxd --bin sandboxctl
# The test image (sandboxd-test/busybox:1), built from nothing by the testkit when missing.
docker image inspect sandboxd-test/busybox:1 >/dev/null 2>&1 \
  || cargo test -q -p sandboxd --test images >/dev/null || die "building the test images failed"
"$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/console "$@"
