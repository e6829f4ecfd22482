#!/usr/bin/env bash
# Long runs of the damage and crash tests, beyond the CI budget, ending in
# a table of what was tried and what broke.
#
# This version runs the store half of issue 9: the mutation tests over the
# corpus (store level and through a mount under RLIMIT_AS 256 MiB) with
# raised case counts, and the torn-tail tests. Counts can be overridden:
#   SESSIONFS_MUTATION_CASES (default here 20000; CI: 400)
#   SESSIONFS_MUTATION_MOUNT_ROUNDS (default here 20; CI: 2; 23 sessions each)
#   SESSIONFS_CRASH_RUNS (doctor --repair killed; default here 500; CI: 50)
#
# Usage: scripts/torture.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

export SESSIONFS_MUTATION_CASES="${SESSIONFS_MUTATION_CASES:-20000}"
export SESSIONFS_MUTATION_MOUNT_ROUNDS="${SESSIONFS_MUTATION_MOUNT_ROUNDS:-20}"
export SESSIONFS_CRASH_RUNS="${SESSIONFS_CRASH_RUNS:-500}"

rows=()
run() { # name, what was tried, cargo test arguments...
  local name="$1" tried="$2"
  shift 2
  local log status
  log="$(mktemp)"
  if cargo test --release "$@" >"$log" 2>&1; then
    status="ok"
  else
    status="BROKE (log: $log)"
  fi
  rows+=("| $name | $tried | $status |")
  [ "$status" = ok ] && rm -f "$log"
}

run "mutations, store level" "$SESSIONFS_MUTATION_CASES mutated corpus transcripts" \
  --test mutation mutated_corpus_transcripts_serve_exactly_the_verified_prefix
run "mutations, through a mount (RLIMIT_AS 256 MiB)" \
  "$((SESSIONFS_MUTATION_MOUNT_ROUNDS * 23)) mutated sessions, reads under a 10 s deadline" \
  --test mutation mutated_transcripts_through_a_mount_under_an_address_space_limit
run "torn tails" "every byte offset of the last frame; 20 through a mount" --test torn_tail
run "doctor --repair killed" "$SESSIONFS_CRASH_RUNS SIGKILLs at random moments of a repair" \
  --test doctor_crash
run "issue 9 regression inputs" "damage in the middle, 1.5 GiB frame, long header, bad middle frame" \
  --test damage

echo
echo "| suite | tried | result |"
echo "|---|---|---|"
printf '%s\n' "${rows[@]}"
for r in "${rows[@]}"; do
  case "$r" in *BROKE*) exit 1 ;; esac
done
