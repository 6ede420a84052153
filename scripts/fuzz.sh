#!/usr/bin/env bash
# Fuzzes the agent's frame decoder (agent/fuzz, target `frames`) with libFuzzer.
#   scripts/fuzz.sh --short          # 30 s (what scripts/test.sh runs)
#   scripts/fuzz.sh --seconds 1800   # a long run, on demand
# Installs cargo-fuzz from crates.io when missing; needs the nightly toolchain (rustup).
# Everything read from the agent's socket is untrusted input: a crash here fails the run, and
# libFuzzer leaves the input that crashed under agent/fuzz/artifacts/frames/.
set -euo pipefail

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
seconds=30
case "${1:-}" in
  --short | "") ;;
  --seconds)
    seconds="${2:?--seconds needs a number}"
    [[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: --seconds must be a positive whole number, got '$seconds'" >&2; exit 2; }
    ;;
  *) echo "fuzz.sh: unknown option '$1' (allowed: --short, --seconds N)" >&2; exit 2 ;;
esac

rustup toolchain list | grep -q '^nightly' || {
  echo "fuzz.sh: the nightly toolchain is missing (rustup toolchain install nightly)" >&2
  exit 1
}
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz.sh: installing cargo-fuzz" >&2
  cargo install --locked cargo-fuzz >&2
fi
cd "$REPO_ROOT/agent/fuzz"
# A corpus of its own per run (temp), so runs do not grow the tree; crashes still land in
# artifacts/ for the failing run to show.
corpus="$(mktemp -d)"
trap 'rm -rf "$corpus"' EXIT
cargo +nightly fuzz run frames "$corpus" -- -max_total_time="$seconds" -rss_limit_mb=1024 2>&1 | tail -n 5
