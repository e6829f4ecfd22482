#!/usr/bin/env bash
# Benchmarks of issue 3 (P1-P4, P6) and issue 16 (P7, rendering): builds sessionfs in release mode,
# generates its own stores (a ~1 GiB-plaintext transcript in 20,000 frames
# and a root of 10,000 small sessions) with examples/gen_store.rs, mounts
# them and prints every figure as a ratio with its baseline.
#
# Needs root (mount(2)), /dev/fuse, zstd and python3; about 1.5 GB of disk
# under $BENCH_DIR (default: a temporary directory, removed afterwards).
#
# Usage: scripts/bench.sh [PLAINTEXT_MB] [FRAMES] [SESSIONS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command -v zstd >/dev/null 2>&1 || { [ "$(id -u)" -eq 0 ] && apt-get update && apt-get install -y zstd; }
cargo build --release --bin sessionfs --example gen_store

work=${BENCH_DIR:-$(mktemp -d)}
cleanup() {
  for m in "$work"/mnt*; do
    grep -qs " $m " /proc/self/mounts && timeout 10 umount -l "$m" || true
  done
  [ -z "${BENCH_DIR:-}" ] && rm -rf "$work"
}
trap cleanup EXIT

mb=${1:-1024}
frames=${2:-20000}
sessions=${3:-10000}
[ -d "$work/big" ] || target/release/examples/gen_store big "$work/big" "$mb" "$frames"
[ -d "$work/many" ] || target/release/examples/gen_store many "$work/many" "$sessions"
python3 scripts/bench.py target/release/sessionfs "$work"
