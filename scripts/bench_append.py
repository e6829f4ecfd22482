#!/usr/bin/env python3
"""P7 of issue 8: a single-line append + fsync through the mount, on a local
root and on the same kind of root reached over sshfs, each the median of
200, as a ratio against the reference's own `append` of one event on the
same root (scripts/bench_ref_append.mjs over ../shared/tools/oracle's
lib.mjs).

Called by scripts/bench.sh as:
    bench_append.py SESSIONFS_BINARY WORK_DIR ORACLE_DIR
The sshfs root is served by an sshd this script starts on 127.0.0.1 (a free
port, throwaway host and client keys under WORK_DIR) and stops by process
group id on every path; the client uses the README's sshfs options.
"""
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BIN, WORK, ORACLE = sys.argv[1], sys.argv[2], sys.argv[3]
N = int(os.environ.get("BENCH_APPENDS", "200"))
HERE = os.path.dirname(os.path.abspath(__file__))
CWD = "/home/alice/code/bench"
PROJECT = "--home-alice-code-bench--"
SSHFS_OPTIONS = "dir_cache=no"

cleanups = []


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def wait_mounted(path, proc, what, log):
    deadline = time.time() + 20
    while not mounted(path):
        if proc.poll() is not None or time.time() > deadline:
            sys.exit(f"bench: {what} did not mount at {path}; see {log}")
        time.sleep(0.01)


def stop_group(proc):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=5)
        except (subprocess.TimeoutExpired, ProcessLookupError):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def unmount(path):
    if mounted(path):
        subprocess.run(["umount", path], check=False)
    if mounted(path):
        subprocess.run(["umount", "-l", path], check=False)


def start_sshd(d):
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(d, key)], check=True)
    os.rename(os.path.join(d, "client_key.pub"), os.path.join(d, "authorized_keys"))
    os.makedirs("/run/sshd", exist_ok=True)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    conf = os.path.join(d, "sshd_config")
    with open(conf, "w") as f:
        f.write(
            f"ListenAddress 127.0.0.1:{port}\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n"
            f"AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "Subsystem sftp /usr/lib/openssh/sftp-server\n"
        )
    log = open(os.path.join(d, "sshd.log"), "w")
    sshd = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", conf], stdout=log, stderr=log, start_new_session=True)
    cleanups.append(lambda: stop_group(sshd))
    deadline = time.time() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return port
        except OSError:
            if sshd.poll() is not None or time.time() > deadline:
                sys.exit(f"bench: sshd did not start; see {log.name}")
            time.sleep(0.02)


def sshfs(d, port, backing, mnt):
    os.makedirs(mnt)
    opts = ",".join([
        f"IdentityFile={d}/client_key", "IdentitiesOnly=yes", "StrictHostKeyChecking=no",
        "UserKnownHostsFile=/dev/null", "BatchMode=yes", f"Port={port}", SSHFS_OPTIONS,
    ])
    log = open(os.path.join(d, "sshfs.log"), "w")
    proc = subprocess.Popen(["sshfs", "-f", f"root@127.0.0.1:{backing}", mnt, "-o", opts],
                            stdout=log, stderr=log, start_new_session=True)
    cleanups.append(lambda: (unmount(mnt), stop_group(proc)))
    wait_mounted(mnt, proc, "sshfs", log.name)


def sessionfs_append(root, tag):
    """200 single-line appends + fsync through one O_APPEND descriptor of a
    new session's session.jsonl in a fresh sessionfs mount of ROOT."""
    mnt = tempfile.mkdtemp(prefix="mnt-", dir=WORK)
    log = open(os.path.join(WORK, f"sessionfs-{tag}.log"), "w")
    env = dict(os.environ, RUST_LOG="warn", XDG_CACHE_HOME=os.path.join(WORK, "cache"))
    proc = subprocess.Popen([BIN, "mount", root, mnt], stdout=log, stderr=log, env=env, start_new_session=True)
    try:
        wait_mounted(mnt, proc, "sessionfs", log.name)
        sid = f"bench-sessionfs-{tag}"
        os.makedirs(os.path.join(mnt, PROJECT, sid))
        view = os.path.join(mnt, PROJECT, sid, "session.jsonl")
        header = {"type": "session", "version": 0, "id": sid, "createdAt": 1767600000000,
                  "cwd": CWD, "delegationDepth": 0}
        fd = os.open(view, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        os.write(fd, (json.dumps(header, separators=(",", ":")) + "\n").encode())
        os.fsync(fd)
        times = []
        for seq in range(N):
            line = json.dumps({"type": "x-sessionfs/bench", "seq": seq, "time": 1767600000000 + seq,
                               "data": {"n": seq}, "ignorable": True}, separators=(",", ":")) + "\n"
            t = time.perf_counter()
            os.write(fd, line.encode())
            os.fsync(fd)
            times.append((time.perf_counter() - t) * 1000)
        os.close(fd)
        return statistics.median(times)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            stop_group(proc)
        unmount(mnt)


def reference_append(root, tag):
    node = os.path.join(ORACLE, "node_modules/.bin/node")
    out = subprocess.run([node, os.path.join(HERE, "bench_ref_append.mjs"), ORACLE, root,
                          f"bench-reference-{tag}", CWD, str(N)],
                         check=True, capture_output=True, text=True, timeout=600)
    return json.loads(out.stdout)["median_ms"]


def main():
    local = os.path.join(WORK, "append-local")
    backing = os.path.join(WORK, "append-backing")
    os.makedirs(local)
    os.makedirs(backing)
    d = tempfile.mkdtemp(prefix="sshd-", dir=WORK)
    port = start_sshd(d)
    remote = os.path.join(WORK, "mnt-sshfs")
    sshfs(d, port, backing, remote)
    print(f"P7 single-line append + fsync, median of {N} (ratio: sessionfs time / reference append time)")
    print("| root | sessionfs | reference append | ratio |")
    print("|---|---|---|---|")
    for tag, root in (("local", local), ("sshfs", remote)):
        ours = sessionfs_append(root, tag)
        ref = reference_append(root, tag)
        print(f"| {tag} | {ours:.2f} ms | {ref:.2f} ms | {ours / ref:.2f}x |", flush=True)


if __name__ == "__main__":
    try:
        main()
    finally:
        for c in reversed(cleanups):
            c()
