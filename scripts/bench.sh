#!/usr/bin/env bash
# Benchmarks of the read-path goals (P1-P4, P6) and of rendering session.md
# (P8; see bench.py): builds sessionfs in release mode,
# generates its own stores (a ~1 GiB-plaintext transcript in 20,000 frames
# and a root of 10,000 small sessions) with examples/gen_store.rs, mounts
# them and prints every figure as a ratio with its baseline. Then P7 of
# issue 8 (scripts/bench_append.py): a single-line append + fsync through
# the mount on a local root and over sshfs (an sshd it starts on 127.0.0.1),
# median of 200, against the reference's own append of one event on the
# same root (the oracle in $SESSIONFS_ORACLE_DIR, as .ci/run installs it).
#
# Needs root (mount(2)), /dev/fuse, zstd and python3, the packages of
# scripts/install-test-deps.sh and the installed oracle; about 1.5 GB of
# disk under $BENCH_DIR (default: a temporary directory, removed afterwards).
#
# P9 (issue 14, scripts/bench_views.py): the .by-date and .by-cwd views of
# a 10,000-session root (examples/gen_views_store.rs) on a second mount.
# Then issue 11's scale figures (scripts/bench_scale.py) over generated roots
# of 1 project x 10,000 sessions, 500 projects x 40 sessions, and 12 projects
# with and without 3,000 empty project directories.
#
# D1 (issue 13): `sessionfs doctor` over the 10,000-session root against
# `zstd -tq` over the same transcripts.
#
# Usage: scripts/bench.sh [PLAINTEXT_MB] [FRAMES] [SESSIONS]
#        BENCH_ONLY=append scripts/bench.sh    # P7 only
#        BENCH_ONLY=views scripts/bench.sh     # P9 only
#        BENCH_ONLY=scale scripts/bench.sh     # issue 11 only
#        BENCH_ONLY=read scripts/bench.sh      # bench.py (P1-P4, P6, P8) and D1
#        BENCH_ONLY=doctor scripts/bench.sh    # D1 only
#
# P1 also mounts the large transcript with ratarmount, installed from PyPI
# into a venv under $BENCH_DIR (needs python3-venv; see bench.py).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Where cargo puts its build output (CARGO_TARGET_DIR is honoured).
tgt=$(realpath -m "${CARGO_TARGET_DIR:-target}")

command -v zstd >/dev/null 2>&1 || { [ "$(id -u)" -eq 0 ] && apt-get update && apt-get install -y zstd; }
cargo build --release --bin sessionfs --example gen_store --example gen_views_store

work=${BENCH_DIR:-$(mktemp -d)}
cleanup() {
  for m in "$work"/mnt* "$work"/smnt* "$work"/append/mnt* "$work"/mnt-views* "$work"/rmnt*; do
    grep -qs " $m " /proc/self/mounts && timeout 10 umount -l "$m" || true
  done
  if [ -z "${BENCH_DIR:-}" ]; then rm -rf "$work"; fi
}
trap cleanup EXIT

mb=${1:-1024}
frames=${2:-20000}
sessions=${3:-10000}
if [ -z "${BENCH_ONLY:-}" ] || [ "${BENCH_ONLY}" = views ]; then
  [ -d "$work/views" ] || "$tgt"/release/examples/gen_views_store "$work/views" "$sessions"
  python3 scripts/bench_views.py "$tgt"/release/sessionfs "$work"
  [ "${BENCH_ONLY:-}" = views ] && exit 0
fi
if [ -z "${BENCH_ONLY:-}" ] || [ "${BENCH_ONLY}" = scale ]; then
  [ -d "$work/one" ] || "$tgt"/release/examples/gen_store many "$work/one" 10000 1
  [ -d "$work/wide" ] || "$tgt"/release/examples/gen_store many "$work/wide" 20000 500
  [ -d "$work/small" ] || "$tgt"/release/examples/gen_store many "$work/small" 120 12
  if [ ! -d "$work/small3000" ]; then
    cp -a "$work/small" "$work/small3000"
    "$tgt"/release/examples/gen_store projects "$work/small3000" 3000
  fi
  python3 scripts/bench_scale.py "$tgt"/release/sessionfs "$work"
  [ "${BENCH_ONLY:-}" = scale ] && exit 0
fi
if [ -z "${BENCH_ONLY:-}" ] || [ "${BENCH_ONLY}" = read ]; then
  [ -d "$work/big" ] || "$tgt"/release/examples/gen_store big "$work/big" "$mb" "$frames"
  [ -d "$work/many" ] || "$tgt"/release/examples/gen_store many "$work/many" "$sessions"
  python3 scripts/bench.py "$tgt"/release/sessionfs "$work"
fi
if [ -z "${BENCH_ONLY:-}" ] || [ "${BENCH_ONLY}" = read ] || [ "${BENCH_ONLY}" = doctor ]; then
  [ -d "$work/many" ] || "$tgt"/release/examples/gen_store many "$work/many" "$sessions"
  # Issue 13: `sessionfs doctor` over the 10,000-session store (every frame
  # decoded and verified, every line parsed) against `zstd -tq` over the same
  # transcripts (every frame decoded and verified); goal: within 3x.
  ms() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
  zstd_all() { find "$work/many" -name session.jsonl.zstd -print0 | xargs -0 zstd -tq; }
  doc=(); ref=()
  for _ in 1 2 3; do
    doc+=("$(ms "$tgt"/release/sessionfs doctor "$work/many")")
    ref+=("$(ms zstd_all)")
  done
  med() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
  d=$(med "${doc[@]}"); z=$(med "${ref[@]}")
  n=$(find "$work/many" -name session.jsonl.zstd | wc -l)
  awk -v d="$d" -v z="$z" -v n="$n" 'BEGIN {
    printf "%-52s %9.1fms %9.1fms %8.2fx  zstd -tq over the same files; target <= 3x\n",
      "D1 doctor scan of " n " sessions", d, z, (z > 0 ? d / z : 0) }'
  [ "${BENCH_ONLY:-}" = read ] || [ "${BENCH_ONLY:-}" = doctor ] && exit 0
fi

oracle=${SESSIONFS_ORACLE_DIR:-${TMPDIR:-/tmp}/sessionfs-oracle}
if [ ! -x "$oracle/node_modules/.bin/node" ]; then
  echo "bench: the reference oracle is not installed in $oracle (see ../shared/tools/oracle/README.md; .ci/run installs it)" >&2
  exit 1
fi
if [ "$(id -u)" -eq 0 ]; then scripts/install-test-deps.sh; fi
rm -rf "$work/append"
mkdir -p "$work/append"
python3 scripts/bench_append.py "$tgt"/release/sessionfs "$work/append" "$oracle"
