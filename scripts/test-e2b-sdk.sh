#!/usr/bin/env bash
# E2B's own SDK tests (tests/e2b-sdk/upstream, vendored) against sandboxd's E2B endpoint, with
# the `e2b` SDK at a given version: `scripts/test-e2b-sdk.sh [VERSION]` (default: the version
# the Python package's test extras pin, 2.63.0, from the project venv). Another version gets a
# venv of its own (`.venv-e2b-<VERSION>`: that SDK, pytest and its plugins), so users' older
# SDKs are held to the same endpoint. Skipped: tests/e2b-sdk/skips.txt, plus
# skips-<VERSION>.txt when it exists (tests whose API that SDK does not have yet); each line
# says why. Prints pytest's summary line; fails when a test fails or none ran.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PINNED="2.63.0"
VERSION="${1:-$PINNED}"
cd "$REPO_ROOT"

die() { printf 'test-e2b-sdk.sh: ERROR: %s\n' "$*" >&2; exit 1; }
[[ "$VERSION" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "VERSION must be X.Y.Z (got '$VERSION')"

if [[ "$VERSION" == "$PINNED" ]]; then
  PY="${SANDBOXD_VENV:-$REPO_ROOT/.venv}/bin/python"
  [[ -x "$PY" ]] || die "no project venv: run scripts/test-python.sh (or install-deps.sh) first"
else
  VENV="$REPO_ROOT/.venv-e2b-$VERSION"
  if [[ ! -x "$VENV/bin/python" ]]; then
    python3 -m venv "$VENV" || die "python3 -m venv $VENV failed"
  fi
  PY="$VENV/bin/python"
  "$PY" -m pip install -q --disable-pip-version-check "e2b==$VERSION" pytest pytest-asyncio pytest-timeout httpx
fi
installed="$("$PY" -c 'import importlib.metadata as m; print(m.version("e2b"))')"
[[ "$installed" == "$VERSION" ]] || die "the venv has e2b $installed, not $VERSION"

docker info --format '{{.ServerVersion}}' >/dev/null 2>&1 \
  || die "the Docker daemon is unreachable ('docker info' failed); these tests need it and never skip"
set +e
(cd "$REPO_ROOT/tests/e2b-sdk" && SANDBOXD_E2B_SDK_VERSION="$VERSION" "$PY" -m pytest -q --timeout 120 upstream)
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  die "pytest collected no E2B SDK tests (exit 5)"
elif [[ $rc -ne 0 ]]; then
  die "E2B's SDK tests (e2b $VERSION) failed against sandboxd (exit $rc)"
fi
printf 'E2B SDK %s: tests passed\n' "$VERSION" >&2
