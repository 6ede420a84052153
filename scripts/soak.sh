#!/usr/bin/env bash
# Soak: builds the release server, then drives it as a separate process with many client
# processes and faults (benches/soak.rs, package sandboxd-benches). Prints one summary line; non-zero on any violation.
#
#   scripts/soak.sh --ci                                  # CI: about 2 minutes
#   scripts/soak.sh --clients 16 --sandboxes 64 --minutes 30
#
# Flags (or SOAK_* env): --clients, --sandboxes, --minutes/--seconds, --warmup-s, --ttl-s,
# --seed, --engine, --private-daemon (a dockerd of the run's own, never the machine's). Containers carry sandboxd.test=1 and a per-run label; only those are removed.
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO_ROOT"
cargo build --release -p sandboxd --bin sandboxd
target="${CARGO_TARGET_DIR:-$REPO_ROOT/target}"
exec cargo bench -p sandboxd-benches --bench soak -- --server-bin "$target/release/sandboxd" "$@"
