#!/usr/bin/env bash
# Benchmarks of issue 3 (P1-P4, P6): builds sessionfs in release mode,
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

# Issue 13: `sessionfs doctor` over the 10,000-session store (every frame
# decoded and verified, every line parsed) against `zstd -tq` over the same
# transcripts (every frame decoded and verified); goal: within 3x.
ms() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
zstd_all() { find "$work/many" -name session.jsonl.zstd -print0 | xargs -0 zstd -tq; }
doc=(); ref=()
for _ in 1 2 3; do
  doc+=("$(ms target/release/sessionfs doctor "$work/many")")
  ref+=("$(ms zstd_all)")
done
med() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
d=$(med "${doc[@]}"); z=$(med "${ref[@]}")
n=$(find "$work/many" -name session.jsonl.zstd | wc -l)
awk -v d="$d" -v z="$z" -v n="$n" 'BEGIN {
  printf "%-52s %9.1fms %9.1fms %8.2fx  zstd -tq over the same files; target <= 3x\n",
    "D1 doctor scan of " n " sessions", d, z, (z > 0 ? d / z : 0) }'
