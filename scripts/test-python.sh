#!/usr/bin/env bash
# The Python package's checks (clients/python): installs it from the source tree into the
# project venv with its test extras and nemo-gym 0.7.0's provider layer, checks the stubs
# against the proto, lints with ruff, type-checks with mypy, and runs pytest against the real
# server and Docker.
# Fails when Docker is unreachable, and when pytest collects no tests (exit 5).
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SANDBOXD_VENV:-$REPO_ROOT/.venv}"
PKG="$REPO_ROOT/clients/python"
NEMO_GYM_VERSION="0.7.0"
cd "$REPO_ROOT"

step() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'test-python.sh: ERROR: %s\n' "$*" >&2; exit 1; }

if [[ ! -x "$VENV/bin/python" ]]; then
  step "creating venv $VENV"
  python3 -m venv "$VENV" || die "python3 -m venv $VENV failed (apt-get install python3-venv)"
fi
PY="$VENV/bin/python"
PIP=("$PY" -m pip install -q --disable-pip-version-check)

# The READMEs' example package-install: `pip install ./clients/python`, with the test extras.
step "pip install ./clients/python[test] (from the working tree)"
"${PIP[@]}" "$PKG[test]"
# The package itself is always rebuilt from the working tree, even at an unchanged version.
"${PIP[@]}" --no-deps --force-reinstall "$PKG"

# nemo-gym 0.7.0 declares Python >= 3.13 and heavy dependencies; only its provider layer is
# needed (tests/gym_loader.py loads it without them), so its wheel goes in without deps.
if [[ "$("$PY" -c 'import importlib.metadata as m; print(m.version("nemo-gym"))' 2>/dev/null)" != "$NEMO_GYM_VERSION" ]]; then
  step "installing nemo-gym==$NEMO_GYM_VERSION (provider layer, no dependencies)"
  wheels="$(mktemp -d)"
  trap 'rm -rf "$wheels"' EXIT
  "$PY" -m pip download -q --disable-pip-version-check --no-deps --python-version 3.14 \
    --only-binary=:all: -d "$wheels" "nemo-gym==$NEMO_GYM_VERSION"
  "${PIP[@]}" --no-deps --ignore-requires-python "$wheels"/nemo_gym-"$NEMO_GYM_VERSION"-*.whl
fi

step "stubs match proto/sandbox/v1/sandbox.proto"
"$PY" "$PKG/tools/generate_stubs.py" --check

step "ruff check + ruff format --check (clients/python)"
(cd "$PKG" && "$PY" -m ruff check src tests tools && "$PY" -m ruff format --check src tests tools)

step "mypy --strict (clients/python)"
(cd "$PKG" && "$PY" -m mypy)

# Harbor (tests/test_harbor.py) needs Python >= 3.12: a venv of its own, from python3.12 on PATH
# or pyenv's, with the package and its `harbor` extra.
HARBOR_VENV="${SANDBOXD_HARBOR_VENV:-$REPO_ROOT/.venv-harbor}"
if [[ ! -x "$HARBOR_VENV/bin/python" ]]; then
  # The first python3.12 that runs: pyenv's shim on PATH fails unless 3.12 is its selected version,
  # so its installed versions are tried too.
  PY312=""
  for candidate in "$(command -v python3.12 || true)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12; do
    if [[ -n "$candidate" && -x "$candidate" ]] && "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
      PY312="$candidate"
      break
    fi
  done
  [[ -n "$PY312" ]] || die "Harbor needs Python >= 3.12: install python3.12 (or pyenv install 3.12)"
  step "creating Harbor's venv $HARBOR_VENV ($PY312)"
  "$PY312" -m venv "$HARBOR_VENV"
fi
step "pip install ./clients/python[harbor] into $HARBOR_VENV"
"$HARBOR_VENV/bin/python" -m pip install -q --disable-pip-version-check "$PKG[harbor]"
"$HARBOR_VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$PKG"
export SANDBOXD_HARBOR_PYTHON="$HARBOR_VENV/bin/python"

step "pytest clients/python/tests (real server, real Docker)"
docker info --format '{{.ServerVersion}}' >/dev/null 2>&1 \
  || die "the Docker daemon is unreachable ('docker info' failed); these tests need it and never skip"
set +e
(cd "$PKG" && "$PY" -m pytest -p no:cacheprovider -q tests)
rc=$?
set -e
if [[ $rc -eq 5 ]]; then
  die "pytest collected no tests (exit 5)"
elif [[ $rc -ne 0 ]]; then
  die "pytest failed (exit $rc)"
fi
# E2B's own SDK tests (vendored in tests/e2b-sdk, MIT) against sandboxd's E2B endpoint, with
# the pinned e2b from the test extras; skips.txt there lists every skipped test and why.
step "pytest tests/e2b-sdk (E2B's SDK tests against sandboxd's E2B endpoint)"
# The same suite with older SDKs users still run: SANDBOXD_E2B_SDK_VERSIONS="2.45.1 ..." (on
# demand; scripts/test-e2b-sdk.sh VERSION runs one, docs/e2b.md has the figures per version).
SANDBOXD_VENV="$VENV" bash "$REPO_ROOT/scripts/test-e2b-sdk.sh"
# Its tests that reach public hosts (skips-public-internet.txt there), against stand-ins for
# those hosts in a private daemon's network namespace: nothing leaves the host.
step "pytest tests/e2b-sdk's network tests against stand-in public hosts"
SANDBOXD_VENV="$VENV" bash "$REPO_ROOT/scripts/test-e2b-network.sh"
for version in ${SANDBOXD_E2B_SDK_VERSIONS:-}; do
  step "pytest tests/e2b-sdk with e2b $version"
  bash "$REPO_ROOT/scripts/test-e2b-sdk.sh" "$version"
  bash "$REPO_ROOT/scripts/test-e2b-network.sh" "$version"
done
# SWE-ReX's own tests (the tests/ its 1.4.0 source distribution on PyPI ships, without their
# conftest) against sandboxd.swerex.SandboxdDeployment: tests/swe-rex/conftest.py gives their
# fixtures, tests/swe-rex/skips.txt lists every skipped test and why.
SWEREX_VERSION="1.4.0"
step "pytest SWE-ReX $SWEREX_VERSION's own tests (tests/swe-rex) against a SandboxdDeployment"
swerex_dir="$(mktemp -d)"
"$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$swerex_dir" "swe-rex==$SWEREX_VERSION"
tar -xzf "$swerex_dir/swe_rex-$SWEREX_VERSION.tar.gz" -C "$swerex_dir"
swerex_src="$swerex_dir/swe_rex-$SWEREX_VERSION"
cp "$REPO_ROOT/tests/swe-rex/conftest.py" "$swerex_src/tests/conftest.py"
touch "$swerex_src/tests/__init__.py"
set +e
(cd "$swerex_src" && SANDBOXD_REPO_ROOT="$REPO_ROOT" "$PY" -m pytest -p no:cacheprovider -q --timeout 120 \
  tests/test_execution.py tests/test_server.py tests/test_remote_deployment.py)
rc=$?
set -e
rm -rf "$swerex_dir"
if [[ $rc -eq 5 ]]; then
  die "pytest collected no SWE-ReX tests (exit 5)"
elif [[ $rc -ne 0 ]]; then
  die "SWE-ReX's own tests failed against sandboxd (exit $rc)"
fi
printf 'python package checks passed\n' >&2
