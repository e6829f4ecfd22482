#!/usr/bin/env bash
# Builds sessionfs, mounts a session store and shows it with standard tools,
# then unmounts.
#
# Usage: scripts/demo.sh [ROOT]
#   Without ROOT, mounts a temporary copy of ../shared/corpus/normal/root
#   (23 sessions written by the reference harness). With ROOT, mounts that
#   store read-only.
#
# Needs a Rust toolchain and /dev/fuse; run as root (it mounts with mount(2)).
# zstd and fuse3 are installed with apt when missing and run as root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Where cargo puts its build output (CARGO_TARGET_DIR is honoured).
tgt=$(realpath -m "${CARGO_TARGET_DIR:-target}")

say() {
  if [ -t 1 ]; then printf '\n\033[1m$ %s\033[0m\n' "$*"; else printf '\n$ %s\n' "$*"; fi
}

missing=()
command -v zstd >/dev/null 2>&1 || missing+=(zstd)
command -v fusermount3 >/dev/null 2>&1 || missing+=(fuse3)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${missing[@]}"
  else
    echo "demo.sh: note: ${missing[*]} not installed (apt-get install ${missing[*]})" >&2
  fi
fi
if [ ! -e /dev/fuse ]; then
  echo "demo.sh: /dev/fuse is missing; sessionfs needs FUSE (modprobe fuse)" >&2
  exit 1
fi

cargo build --release
bin="$tgt"/release/sessionfs

work=$(mktemp -d "${TMPDIR:-/tmp}/sessionfs-demo.XXXXXX")
work=$(cd "$work" && pwd -P) # mountinfo shows the resolved path
mnt="$work/mnt"
log="$work/sessionfs.log"
mkdir "$mnt"
extra=()
if [ $# -ge 1 ]; then
  root=$1
  [ -d "$root" ] || { echo "demo.sh: $root is not a directory" >&2; exit 1; }
  extra+=(--read-only)
else
  root="$work/root"
  cp -R ../shared/corpus/normal/root "$root"
  chmod -R u+w "$root"
fi

is_mounted() {
  timeout 5 awk -v m="$1" '$5 == m { found = 1 } END { exit !found }' /proc/self/mountinfo
}

pid=
cleanup() {
  set +e
  cd / # a shell whose cwd is inside the mount would keep it busy
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  if is_mounted "$mnt"; then
    timeout 10 umount -l "$mnt"
  fi
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid"
  fi
  [ -n "$pid" ] && wait "$pid" 2>/dev/null
  # Never delete through a live mount: only remove the folder once unmounted.
  if is_mounted "$mnt"; then
    echo "demo.sh: $mnt is still mounted; left $work in place" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "demo.sh: mounting $root on $mnt (log: $log)"
RUST_LOG="${RUST_LOG:-info}" "$bin" mount "$root" "$mnt" "${extra[@]}" 2>"$log" &
pid=$!

for _ in $(seq 200); do
  is_mounted "$mnt" && break
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "demo.sh: sessionfs exited before the mount was ready; its log:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
done
if ! is_mounted "$mnt"; then
  echo "demo.sh: the mount did not appear within 20 s; sessionfs log:" >&2
  cat "$log" >&2
  exit 1
fi

cd "$mnt"
say "ls    # project directories"
ls

# The first readable transcript, preferring the sample store's main project.
transcript=
for t in --home-alice-work-app--/*/session.jsonl */*/session.jsonl; do
  if [ -f "$t" ] && [ -r "$t" ]; then
    transcript=$t
    break
  fi
done

if [ -z "$transcript" ]; then
  echo "(no readable session.jsonl in $root)"
else
  project=${transcript%%/*}
  say "ls -l -- $project    # one directory per session"
  ls -l -- "$project"
  say "ls -l -- $transcript    # the size is the decompressed length"
  ls -l -- "$transcript"
  say "head -c 400 -- $transcript | cut -c1-200"
  head -c 400 -- "$transcript" | cut -c1-200
  echo
  say "tail -n 2 -- $transcript | cut -c1-200"
  tail -n 2 -- "$transcript" | cut -c1-200
  say "grep -c '\"type\"' -- $transcript    # lines holding a record"
  grep -c '"type"' -- "$transcript" || true
  say "wc -l -- $transcript"
  wc -l -- "$transcript"
  if [ $# -eq 0 ]; then
    # The sample store is a scratch copy: show an append through the mount.
    next=$(tail -n 1 -- "$transcript" | python3 -c 'import json,sys; print(json.loads(sys.stdin.read()).get("seq", -1) + 1)')
    line="{\"type\":\"x-note\",\"seq\":$next,\"time\":$(date +%s000),\"data\":{\"text\":\"appended through sessionfs\"},\"ignorable\":true}"
    say "echo '$line' >> $transcript    # one new zstd frame"
    echo "$line" >> "$transcript"
    say "tail -n 1 -- $transcript"
    tail -n 1 -- "$transcript"
    say "zstd -dc -- $root/${transcript%session.jsonl}session.jsonl.zstd | tail -n 1    # the store itself"
    zstd -dc -- "$root/${transcript%session.jsonl}session.jsonl.zstd" | tail -n 1
  fi
fi
cd / # leave the mount, so it can be unmounted

echo
echo "demo.sh: unmounting"
