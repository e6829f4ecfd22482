#!/usr/bin/env bash
# Runs the whole test suite: unit tests of the library and the integration
# tests that mount copies of ../shared/corpus through FUSE.
#
# Needs: a Rust toolchain, /dev/fuse, root (the tests mount with mount(2)),
# and the Debian packages scripts/install-test-deps.sh installs when run as
# root (zstd, fuse3, npm, rsync, systemd, util-linux, bsdutils, and the shared-root
# network tests' openssh-server, sshfs, samba, smbnetfs, rclone, faketime).
#
# Usage: scripts/test.sh [extra `cargo test` arguments]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ "$(id -u)" -eq 0 ]; then
  scripts/install-test-deps.sh
else
  echo "test.sh: not root: the mount tests need root; packages are not installed" >&2
fi

if [ ! -e /dev/fuse ]; then
  echo "test.sh: /dev/fuse is missing; the mount tests need FUSE (modprobe fuse, or give the container --device /dev/fuse)" >&2
  exit 1
fi
if [ ! -d ../shared/corpus ]; then
  echo "test.sh: ../shared/corpus is missing; the tests read the corpus from ../shared beside this repository" >&2
  exit 1
fi

# Run every test binary even when one fails (--no-fail-fast: one failure
# must not hide whole suites), then print one closing line with the totals
# over all test binaries (cargo prints one summary per binary) and name the
# binaries that failed, including any that died without a summary.
out=$(mktemp)
trap 'rm -f "$out"' EXIT
set +e
cargo test --no-fail-fast --all-targets "$@" 2>&1 | tee "$out"
status_targets=${PIPESTATUS[0]}
cargo test --no-fail-fast --doc 2>&1 | tee -a "$out"
status_doc=${PIPESTATUS[0]}
set -e
count() {
  awk -v word="$1" '/^test result:/ {
    for (i = 2; i <= NF; i++) if ($i == word ";" || $i == word) n += $(i - 1)
  } END { print n + 0 }' "$out"
}
binaries=$(grep -cE '^ +(Running|Doc-tests) ' "$out" || true)
summaries=$(grep -c '^test result:' "$out" || true)
failed_binaries=$(grep -oE 'to rerun pass `[^`]*`' "$out" | sed -E 's/to rerun pass `(.*)`/\1/' | sort -u | paste -sd, - || true)
echo
echo "tests: $(count passed) passed, $(count failed) failed, $(count ignored) skipped (#[ignore]), $(count filtered) filtered out; $binaries test binaries, $((binaries - summaries)) without a summary (crashed or not run)"
if [ "$status_targets" -ne 0 ] || [ "$status_doc" -ne 0 ]; then
  echo "test.sh: FAILED (cargo test exit status $status_targets, doc tests $status_doc)${failed_binaries:+; failed: $failed_binaries}" >&2
  exit 1
fi
