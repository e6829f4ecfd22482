#!/usr/bin/env python3
"""Issue 11's figures, each against its baseline in the same run:

  S1  `stat` and a one-line append + fsync of one transcript at
      --attr-timeout 0, median of N, with 12 and with 3,012 project
      directories in the root (the same root plus 3,000 empty ones);
  S2  `ls -l` of a 10,000-session project through the mount against native
      `ls -l` of the backing directory;
  S3  `find MNT -name session.jsonl | wc -l` over a 500 x 40 root (views
      included) against native `find` over the backing root, also with
      opendir answered (SESSIONFS_NO_OPENDIR=0);
  S4  `ls -l MNT/.by-id` of 10,000 sessions against `ls -l` of the
      10,000-session project through the mount;
  S5  the daemon's peak RSS after walking (stat of) every entry of the
      20,000-session root, reading every transcript's first line and
      appending to one, against the README's 64 MiB budget.

Called by scripts/bench.sh as: bench_scale.py SESSIONFS_BINARY WORK_DIR,
where WORK_DIR holds one/ (1 project x 10,000 sessions), wide/ (500 x 40)
and small/ (12 projects). Listings are timed once per attribute timeout
(the kernel's caches expire between runs), median of REPS.
"""
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import time

BIN, WORK = sys.argv[1], sys.argv[2]
N = int(os.environ.get("BENCH_SCALE_N", "200"))
REPS = int(os.environ.get("BENCH_SCALE_REPS", "5"))
# Readdirplus settings to compare ("1" on, the daemon's default; "0" off,
# with SESSIONFS_READDIRPLUS=0): S2, S3 and S4 are measured with both.
PLUS = os.environ.get("BENCH_SCALE_PLUS", "1,0").split(",")


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


class Mount:
    count = 0

    def __init__(self, root, *args, env=None):
        Mount.count += 1
        self.mnt = os.path.join(WORK, f"smnt{Mount.count}")
        os.makedirs(self.mnt, exist_ok=True)
        log = open(os.path.join(WORK, f"smount{Mount.count}.log"), "w")
        full_env = dict(os.environ, RUST_LOG="warn", **(env or {}))
        self.proc = subprocess.Popen([BIN, "mount", root, self.mnt, *args], stderr=log, env=full_env)
        deadline = time.time() + 20
        while not mounted(self.mnt):
            if self.proc.poll() is not None or time.time() > deadline:
                self.close()
                sys.exit(f"bench: mounting {root} failed; see {log.name}")
            time.sleep(0.005)

    def status(self, key):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith(key):
                    return int(line.split()[1])
        return 0

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if mounted(self.mnt):
            subprocess.run(["umount", "-l", self.mnt], check=False)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def timed_shell(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def listing_median(cmd, wait=1.1):
    """Median of REPS runs of `cmd`, each after the attribute timeout."""
    values = []
    for _ in range(REPS):
        time.sleep(wait)
        values.append(timed_shell(cmd))
    return statistics.median(values)


def ms(s):
    return f"{s * 1000:.1f} ms"


def one_transcript(root):
    """The first session's (project, session) of a gen_store root."""
    path = sorted(glob.glob(os.path.join(root, "--bench-project-*", "*", "session.jsonl.zstd")))[0]
    session = os.path.dirname(path)
    return os.path.basename(os.path.dirname(session)), os.path.basename(session)


def last_seq(path):
    with open(path, "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - 65536))
        lines = [l for l in f.read().split(b"\n") if l.strip()]
    return json.loads(lines[-1])["seq"]


def stat_and_append(root, label):
    project, session = one_transcript(root)
    with Mount(root, "--attr-timeout", "0", "--batch-ms", "0") as m:
        view = os.path.join(m.mnt, project, session, "session.jsonl")
        os.stat(view)
        stats = []
        for _ in range(N):
            t = time.perf_counter()
            os.stat(view)
            stats.append(time.perf_counter() - t)
        seq = last_seq(view) + 1
        appends = []
        for i in range(N):
            line = json.dumps(
                {"type": "x-bench", "seq": seq + i, "time": 1, "data": {}, "ignorable": True}
            ).encode() + b"\n"
            t = time.perf_counter()
            fd = os.open(view, os.O_WRONLY | os.O_APPEND)
            os.write(fd, line)
            os.fsync(fd)
            os.close(fd)
            appends.append(time.perf_counter() - t)
    s, a = statistics.median(stats), statistics.median(appends)
    print(f"S1 {label}: stat {ms(s)}, append+fsync {ms(a)} (medians of {N})")
    return s, a


def main():
    one, wide, small, big_root = (os.path.join(WORK, d) for d in ("one", "wide", "small", "small3000"))

    # S1: 12 vs 3,012 project directories.
    s12, a12 = stat_and_append(small, "12 project directories")
    s3k, a3k = stat_and_append(big_root, "3,012 project directories")
    print(f"S1 ratio (3,012 / 12 projects): stat {s3k / s12:.2f}x, append {a3k / a12:.2f}x (goal <= 1.5x)")

    # S2 and S4: the 10,000-session project, with and without readdirplus.
    project = next(p for p in os.listdir(one) if p.startswith("--"))
    native = listing_median(f"ls -l {one}/{project}", wait=0)
    for plus in PLUS:
        with Mount(one, env={"SESSIONFS_READDIRPLUS": plus}) as m:
            through = listing_median(f"ls -l {m.mnt}/{project}")
            by_id = listing_median(f"ls -l {m.mnt}/.by-id")
        name = "with readdirplus" if plus == "1" else "without readdirplus"
        print(
            f"S2 ls -l of 10,000 sessions {name}: mount {ms(through)}, native {ms(native)}: "
            f"{through / native:.2f}x (goal <= 3x)"
        )
        print(
            f"S4 ls -l .by-id {name}: {ms(by_id)}, project through the mount {ms(through)}: "
            f"{by_id / through:.2f}x (goal <= 3x)"
        )

    # S3: find over the whole root, views included; readdirplus on and
    # off, and (with it on) opendir declined (the default of a mount only
    # its owner reaches) and answered (SESSIONFS_NO_OPENDIR=0).
    native = listing_median(f"find {wide} -name session.jsonl.zstd | wc -l", wait=0)
    settings = [(plus, "1") for plus in PLUS] + [("1", "0")] * ("1" in PLUS)
    for plus, no_opendir in settings:
        env = {"SESSIONFS_READDIRPLUS": plus, "SESSIONFS_NO_OPENDIR": no_opendir}
        with Mount(wide, env=env) as m:
            through = listing_median(f"find {m.mnt} -name session.jsonl | wc -l")
        name = "with readdirplus" if plus == "1" else "without readdirplus"
        name += ", opendir declined" if no_opendir == "1" else ", opendir answered"
        print(
            f"S3 find over 500 x 40 sessions {name}: mount {ms(through)}, native {ms(native)}: "
            f"{through / native:.2f}x (goal <= 5x)"
        )

    # S5: peak RSS after walking every entry of the 20,000-session root.
    with Mount(wide) as m:
        subprocess.run(f"find {m.mnt} -exec stat {{}} + > /dev/null", shell=True, check=True)
        subprocess.run(f"ls -l {m.mnt}/.by-id > /dev/null", shell=True, check=True)
        subprocess.run(
            f"find {m.mnt} -name session.jsonl -exec head -qc 200 {{}} + > /dev/null",
            shell=True,
            check=True,
        )
        with open(os.path.join(m.mnt, ".sessionfs-status")) as f:
            status = json.load(f)
        peak = m.status("VmHWM")
    print(
        f"S5 peak RSS after walking 20,000 sessions: {peak / 1024:.1f} MiB (budget 64 MiB); "
        f"inodes held {status['inodes']}, catalog {status['catalog_bytes'] / 1024:.0f} KiB, "
        f"frame cache {status['cache']['bytes'] / 1024:.0f} KiB"
    )


if __name__ == "__main__":
    main()
