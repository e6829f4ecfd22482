#!/usr/bin/env python3
"""Views benchmark of issue 14 (P9): on a second mount (the views' catalog
persisted by a first one), `ls -l` of one `.by-date` day of 100 sessions
and `find MNT/.by-cwd | wc -l`, each as a ratio against `ls -l` of a
project directory of 100 sessions through the mount (goal within 3x). For
reference, `find | wc -l` of a native copy of the same `.by-cwd` tree (its
directories and links on the backing file system), timed the same way:
the find figure cannot go below it.

Called by scripts/bench.sh as: bench_views.py SESSIONFS_BINARY WORK_DIR,
where WORK_DIR/views holds the root written by examples/gen_views_store.rs
(TZ=UTC: its sessions are created at noon UTC, 100 per day). Every figure
is the median of 5 rounds, each on a freshly started mount with the
persisted catalog, so nothing is in the daemon's memory yet. Every mount
is unmounted on every path (SIGTERM, then umount -l).
"""
import json
import os
import signal
import statistics
import subprocess
import sys
import time

BIN, WORK = sys.argv[1], sys.argv[2]
ROOT = os.path.join(WORK, "views")
CACHE = os.path.join(WORK, "views-cache")
PROJECT = "--bench-views-project-042--"
DAY = ".by-date/2026/02/12"  # 2026-01-01 + 42 days, the sessions of project 042
ROUNDS = 5


def mounted(path):
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


class Mount:
    count = 0

    def __init__(self):
        Mount.count += 1
        self.mnt = os.path.join(WORK, f"mnt-views{Mount.count}")
        os.makedirs(self.mnt, exist_ok=True)
        self.log = open(os.path.join(WORK, f"mount-views{Mount.count}.log"), "w")
        env = dict(os.environ, RUST_LOG="warn", TZ="UTC")
        self.proc = subprocess.Popen([BIN, "mount", ROOT, self.mnt, "--index-cache", CACHE],
                                     stderr=self.log, env=env)
        deadline = time.time() + 20
        while not mounted(self.mnt):
            if self.proc.poll() is not None or time.time() > deadline:
                self.close()
                sys.exit(f"bench_views: mounting {ROOT} failed; see {self.log.name}")
            time.sleep(0.005)

    def status(self):
        with open(os.path.join(self.mnt, ".sessionfs-status")) as f:
            return json.load(f)

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
    out = subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t, out


def settle_root():
    """Waits (at most 10 s) until the root's project directories changed
    more than 2.5 s ago: a directory stamp younger than 2 s is not trusted
    (a change in the same clock tick would not show), so the first mount
    could not persist it. A freshly generated root is the only one this
    matters for."""
    newest = max(max(st.st_mtime, st.st_ctime)
                 for st in [os.stat(ROOT)] + [os.stat(e.path) for e in os.scandir(ROOT) if e.is_dir()])
    deadline = time.time() + 10
    while time.time() < min(newest + 2.5, deadline):
        time.sleep(0.1)


def main():
    settle_root()
    # First mount: builds the catalog (every session read once) and persists it.
    with Mount() as m:
        t0 = time.perf_counter()
        n = len(os.listdir(os.path.join(m.mnt, ".by-title")))
        first_scan = time.perf_counter() - t0
        read = m.status()["views"]["sessions_read"]
        # A native copy of the .by-cwd tree (its directories and links, on
        # the backing file system): what `find` itself costs over that many
        # entries, the floor of the find figure.
        native = os.path.join(WORK, "views-native-by-cwd")
        subprocess.run(["rm", "-rf", native], check=True)
        subprocess.run(["cp", "-a", os.path.join(m.mnt, ".by-cwd"), native], check=True)
    figures = {"project": [], "day": [], "find": [], "native": []}
    counts = {}
    decoded = []
    for _ in range(ROUNDS):
        for key, cmd in [("project", f"ls -l -- '{{mnt}}/{PROJECT}'"),
                         ("day", f"ls -l '{{mnt}}/{DAY}'"),
                         ("find", "find '{mnt}/.by-cwd' | wc -l")]:
            with Mount() as m:
                t, out = timed_shell(cmd.format(mnt=m.mnt))
                figures[key].append(t)
                counts[key] = out.strip().splitlines()[-1] if key == "find" else len(out.splitlines()) - 1
                decoded.append(m.status()["frames_decoded"])
        t, out = timed_shell(f"find '{native}' | wc -l")
        figures["native"].append(t)
        counts["native"] = out.strip()
    for key, values in figures.items():
        print(f"P9 rounds {key}: " + " ".join(f"{v * 1000:.1f}" for v in values) + " ms")
    base = statistics.median(figures["project"])
    print()
    print(f"P9 views over {n} sessions (first mount: catalog built in {first_scan * 1000:.0f} ms, "
          f"{read} sessions read; later mounts decoded {max(decoded)} frames)")
    print(f"{'figure':52} {'sessionfs':>11} {'baseline':>11} {'ratio':>9}  baseline; goal")
    print(f"{'P9 ls -l of a project dir (' + str(counts['project']) + ' sessions)':52} {base * 1000:9.1f}ms")
    for key, label in [("day", f"P9 ls -l of one .by-date day ({counts['day']} links)"),
                       ("find", f"P9 find MNT/.by-cwd | wc -l ({counts['find']} entries)")]:
        t = statistics.median(figures[key])
        print(f"{label:52} {t * 1000:9.1f}ms {base * 1000:9.1f}ms {t / base:8.2f}x  "
              f"ls -l of the project dir; goal within 3x")
    t = statistics.median(figures["native"])
    label = f"P9 find of a native copy of .by-cwd ({counts['native']})"
    print(f"{label:52} {t * 1000:9.1f}ms {base * 1000:9.1f}ms {t / base:8.2f}x  "
          f"ls -l of the project dir; the find figure's floor (no mount)")


if __name__ == "__main__":
    main()
