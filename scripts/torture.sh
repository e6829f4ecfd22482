#!/usr/bin/env bash
# Long runs of the reliability tests (issue 9): the crash test (kill -9 of
# the daemon during appends) and the mutation tests, at counts far above
# what CI runs. Prints a table of what each step tried and what broke; the
# README's "Reliability" section holds the last run's table.
#
# Every step is one line of STEPS below: NAME|WHAT IT TRIES|COMMAND. A step
# passes when its command exits 0; its "tried" and "broke" columns come from
# the last line of its output of the form `torture-summary: TRIED | BROKE`
# (key=value pairs each), so a new step only has to print one. A failing
# step's "broke" column is its first panic message. Add steps by appending
# lines.
#
# Needs what scripts/test.sh needs (root, /dev/fuse, zstd, python3) and the
# reference oracle installed as .ci/run installs it ($SESSIONFS_ORACLE_DIR).
#
# Usage: scripts/torture.sh [STEP...]     (default: every step, in order)
#        TORTURE_SCALE=0.1 scripts/torture.sh   (a shortened run: counts x0.1)
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scale=${TORTURE_SCALE:-1}
n() { awk -v n="$1" -v s="$scale" 'BEGIN { v = int(n * s); print (v < 1 ? 1 : v) }'; }

STEPS=(
  "crash|kill -9 of the daemon during appends of 1 line to 1 MiB with fsync, $(n 1000) kills|SESSIONFS_CRASH_KILLS=$(n 1000) cargo test --test crash_mount -- --nocapture"
  "mutations|$(n 20000) mutated corpus transcripts at the store level (bit flips, insertions, deletions, truncations, duplicated and swapped frames, skippable frames, huge size claims)|SESSIONFS_MUTATION_CASES=$(n 20000) cargo test --release --test mutation mutated_corpus_transcripts_serve_exactly_the_verified_prefix"
  "mutations-mount|$(n 20) rounds of 23 mutated sessions read through a mount under RLIMIT_AS 256 MiB, each read under a 10 s deadline|SESSIONFS_MUTATION_MOUNT_ROUNDS=$(n 20) cargo test --release --test mutation mutated_transcripts_through_a_mount_under_an_address_space_limit"
  "torn-tails|every byte offset of the last frame (store level), 20 through a mount|cargo test --release --test torn_tail"
  "doctor-crash|kill -9 of sessionfs doctor --repair at random moments of a repair, $(n 500) kills|SESSIONFS_CRASH_RUNS=$(n 500) cargo test --release --test doctor_crash -- --nocapture"
  "shared-root|four writers on one transcript from two sshfs machines (sshd on 127.0.0.1), with the README's sshfs options and with sshfs's default cache, $(n 300) s each; every acknowledged line stored once, seq contiguous, the reference loads it|SESSIONFS_NET_RACE_SECS=$(n 300) cargo test --release --test shared_root_net four_writers -- --test-threads 1"
  "damage|issue 9's regression inputs: damage in the middle, 1.5 GiB frame, long header, bad middle frame|cargo test --release --test damage"
)

wanted=("$@")
want() {
  [ ${#wanted[@]} -eq 0 ] && return 0
  local w
  for w in "${wanted[@]}"; do [ "$w" = "$1" ] && return 0; done
  return 1
}

cargo build --all-targets || exit 1

logdir=$(mktemp -d "${TMPDIR:-/tmp}/sessionfs-torture-XXXXXX")
rows=()
status=0
for step in "${STEPS[@]}"; do
  IFS='|' read -r name what cmd <<<"$step"
  want "$name" || continue
  echo "torture: $name: $cmd" >&2
  start=$(date +%s)
  bash -c "$cmd" >"$logdir/$name.log" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  summary=$(grep -a '^torture-summary:' "$logdir/$name.log" | tail -1 | sed 's/^torture-summary: *//')
  tried=${summary%%|*}
  broke=${summary#*|}
  [ "$broke" != "$summary" ] || broke=""
  if [ "$rc" -eq 0 ]; then
    result=pass
  else
    result="FAIL (exit $rc)"
    status=1
    broke=$(grep -a -m1 -A1 'panicked at' "$logdir/$name.log" | tail -1 | cut -c1-200 | tr '|' '/')
  fi
  [ -n "$tried" ] || tried="(no summary; see the log)"
  rows+=("| $name | $what | ${tried% } | ${broke# } | $result | ${secs}s |")
done

echo
echo "sessionfs torture run, $(date -u +%Y-%m-%dT%H:%MZ), $(uname -r), scale $scale"
echo
echo "| step | what | tried | broke | result | time |"
echo "|---|---|---|---|---|---|"
printf '%s\n' "${rows[@]}"
echo
echo "logs: $logdir"
exit "$status"
