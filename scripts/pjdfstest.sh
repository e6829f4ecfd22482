#!/usr/bin/env bash
# pjdfstest's rename, link and symlink groups (and what they pull in:
# unlink, mknod, utimensat) against a session directory of a mount of a
# copy of the `normal` corpus case (issue 11). Installs pjdfstest 0.2.2
# from crates.io into $PJD_ROOT (default /tmp/sessionfs-pjdfstest) when it
# is missing. Needs root (mount(2), and pjdfstest switches users), and
# ../shared. Prints pjdfstest's report; the README lists the failures that
# remain and why.
#
# Usage: scripts/pjdfstest.sh [PATTERN...]   (default: rename link symlink)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Where cargo puts its build output (CARGO_TARGET_DIR is honoured).
tgt=$(realpath -m "${CARGO_TARGET_DIR:-target}")
pjd_root=${PJD_ROOT:-/tmp/sessionfs-pjdfstest}
if [ ! -x "$pjd_root/bin/pjdfstest" ]; then
  cargo install pjdfstest --version 0.2.2 --locked --root "$pjd_root"
fi
cargo build --release --bin sessionfs
# Short paths: pjdfstest binds Unix sockets four directories below the
# test directory (two temporary ones of 11 bytes, two of 33), and a
# socket's path must fit in 107 bytes: the mount point is `/tmp/pXXX` and
# the test directory `--a--/s/p` in it, a session made for the run (cwd
# `/a`, id `s`), 19 bytes. The backing root's path is as long as the mount
# point's, so that a path pjdfstest makes just under PATH_MAX is as long
# on the backing file system. Both are 0755 (mktemp makes them 0700): the
# users pjdfstest switches to reach the mount as they reach any mount
# point.
mnt=$(mktemp -d /tmp/pXXX)
root=$(mktemp -d /tmp/qXXX)
side=$(mktemp -d /tmp/pjXXXX)
chmod 755 "$mnt" "$root"
pid=
cleanup() {
  if grep -qs " $mnt " /proc/self/mounts; then timeout 10 umount "$mnt" || umount -l "$mnt"; fi
  if [ -n "$pid" ]; then wait "$pid" 2>/dev/null || true; fi
  rm -rf "$mnt" "$root" "$side"
}
trap cleanup EXIT
cp -r ../shared/corpus/normal/root/. "$root"
mkdir -p "$root/--a--/s"
chmod 755 "$root/--a--" "$root/--a--/s"
printf '%s\n' '{"type":"session","version":0,"id":"s","createdAt":1767654000000,"cwd":"/a","delegationDepth":0}' |
  zstd -q > "$root/--a--/s/session.jsonl.zstd"
cat > "$side/pjd.toml" <<'TOML'
[features]
posix_fallocate = {}
utimensat = {}
utime_now = {}
rename_ctime = {}
[settings]
naptime = 0.02
allow_remount = false
[dummy_auth]
entries = [["nobody", "nogroup"], ["daemon", "daemon"]]
TOML
"$tgt"/release/sessionfs mount "$root" "$mnt" --allow-other 2>"$side/log" &
pid=$!
for _ in $(seq 100); do grep -qs " $mnt " /proc/self/mounts && break; sleep 0.1; done
grep -qs " $mnt " /proc/self/mounts || { cat "$side/log"; exit 1; }
dir="$mnt/--a--/s/p"
mkdir "$dir"
[ $# -gt 0 ] || set -- rename link symlink
# The report's failures and summary (pjdfstest exits 1 when anything
# failed; the README lists the expected ones).
"$pjd_root/bin/pjdfstest" -c "$side/pjd.toml" -p "$dir" "$@" 2>&1 | grep -E "FAILED|Summary" || true
