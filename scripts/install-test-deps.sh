#!/usr/bin/env bash
# Installs the Debian packages the tests use, in one place for .ci/run and
# scripts/test.sh:
# - the tools the tests compare against or drive: zstd, python3, fuse3
#   (fusermount3), npm (the reference oracle), rsync (rsync --append),
#   systemd (systemd-analyze verify of contrib/'s units), util-linux
#   (mount(8), setpriv), bsdutils (script(1): the doctor's progress bar
#   under a pseudo-terminal), python3-venv (scripts/bench.py installs
#   ratarmount from PyPI into a venv);
# - the shared-root network tests (tests/shared_root_net.rs): an SSH server
#   and sshfs (two sshfs clients of one loopback sshd), Samba and smbnetfs
#   (the second client kind), rclone (probed: refused read-only, see
#   README), and faketime (a mount whose clock is 30 s off).
#
# No system daemon is started: while apt-get runs, /usr/sbin/policy-rc.d
# exits 101 (a policy-rc.d already in place is left as it is; one written
# here is removed afterwards). The tests start their own servers on
# 127.0.0.1 with throwaway keys and stop them by process id.
#
# Usage (as root): scripts/install-test-deps.sh
# Does nothing when every tool is already present.
set -euo pipefail

need=()
command -v zstd >/dev/null 2>&1 || need+=(zstd)
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
command -v fusermount3 >/dev/null 2>&1 || need+=(fuse3)
command -v npm >/dev/null 2>&1 || need+=(npm)
command -v rsync >/dev/null 2>&1 || need+=(rsync)
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
command -v setpriv >/dev/null 2>&1 || need+=(util-linux)
command -v script >/dev/null 2>&1 || need+=(bsdutils)
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || need+=(openssh-server)
command -v ssh-keygen >/dev/null 2>&1 || need+=(openssh-client)
command -v sshfs >/dev/null 2>&1 || need+=(sshfs)
command -v smbd >/dev/null 2>&1 || [ -x /usr/sbin/smbd ] || need+=(samba)
command -v smbnetfs >/dev/null 2>&1 || need+=(smbnetfs)
command -v rclone >/dev/null 2>&1 || need+=(rclone)
command -v faketime >/dev/null 2>&1 || need+=(faketime)
[ ${#need[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "install-test-deps: missing ${need[*]}; install them as root (apt-get install ${need[*]})" >&2
  exit 1
fi

policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# written by sessionfs scripts/install-test-deps.sh: no daemon starts during apt-get\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  created_policy=1
fi
remove_policy() {
  if [ "$created_policy" -eq 1 ]; then rm -f "$policy"; fi
}
trap remove_policy EXIT

echo "install-test-deps: installing ${need[*]}" >&2
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}"
