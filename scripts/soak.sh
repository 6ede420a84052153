#!/usr/bin/env bash
# Soak and fault run against the release server (examples/soak.rs is the driver).
#   scripts/soak.sh            CI mode: 2 minutes, 8 clients
#   scripts/soak.sh --long     30 minutes, 64 clients (what the README reports)
#   SOAK_MINUTES / SOAK_CLIENTS override either; SOAK_PROFILE=debug skips the release build.
# Only containers labelled with this run's own sandboxd.soak=<id> are created or removed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

minutes="${SOAK_MINUTES:-2}"
clients="${SOAK_CLIENTS:-8}"
if [[ "${1:-}" == "--long" ]]; then
  minutes="${SOAK_MINUTES:-30}"
  clients="${SOAK_CLIENTS:-64}"
fi
profile="${SOAK_PROFILE:-release}"
flag=(--release)
[[ "$profile" == "debug" ]] && flag=()

cargo build -q "${flag[@]}" -p sandboxd --bin sandboxd
cargo build -q "${flag[@]}" -p sandboxd-proto --example soak
exec "target/$profile/examples/soak" --minutes "$minutes" --clients "$clients" --server "target/$profile/sandboxd"
