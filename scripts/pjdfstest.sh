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
# Short paths: pjdfstest binds Unix sockets two temporary directories
# below the test directory, and a socket's path must fit in 108 bytes; the
# root's path is as long as the mount point's, so that a path pjdfstest
# makes just under PATH_MAX is as long on the backing file system.
work=$(mktemp -d /tmp/pjXXXX)
mnt="$work/m"
pid=
cleanup() {
  if grep -qs " $mnt " /proc/self/mounts; then timeout 10 umount "$mnt" || umount -l "$mnt"; fi
  if [ -n "$pid" ]; then wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
cp -r ../shared/corpus/normal/root "$work/r"
mkdir "$mnt"
cat > "$work/pjd.toml" <<'TOML'
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
"$tgt"/release/sessionfs mount "$work/r" "$mnt" --allow-other 2>"$work/log" &
pid=$!
for _ in $(seq 100); do grep -qs " $mnt " /proc/self/mounts && break; sleep 0.1; done
grep -qs " $mnt " /proc/self/mounts || { cat "$work/log"; exit 1; }
dir="$mnt/--home-alice-work-app--/Session-A/p"
mkdir "$dir"
[ $# -gt 0 ] || set -- rename link symlink
# The report's failures and summary (pjdfstest exits 1 when anything
# failed; the README lists the expected ones).
"$pjd_root/bin/pjdfstest" -c "$work/pjd.toml" -p "$dir" "$@" 2>&1 | grep -E "FAILED|Summary" || true
