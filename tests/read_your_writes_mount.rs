//! Reading a transcript while the same mount appends to it: reads never
//! return zeros (MOUNT.md, Details: "no zeros or short reads past the old
//! end"), whether a line is complete and pending in the batch window or
//! still incomplete on its writer's handle.

mod common;

use std::process::Command;

use common::{copy_tree, corpus_dir, Mount};

const SCRIPT: &str = r#"
import json, os, sys, threading, time
path, split = sys.argv[1], sys.argv[2] == "split"
last = open(path, "rb").read().splitlines()[-1]
seq = json.loads(last)["seq"] + 1
stop = time.time() + 6
reads, bad = [0], [0]
def writer():
    global seq
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    while time.time() < stop:
        line = (json.dumps({"type": "x-note", "seq": seq, "time": 1, "data": {}, "ignorable": True}) + "\n").encode()
        if split:
            os.write(fd, line[:10]); time.sleep(0.003); os.write(fd, line[10:])
        else:
            os.write(fd, line)
        seq += 1
        time.sleep(0.005)
    os.close(fd)
def reader():
    while time.time() < stop:
        fd = os.open(path, os.O_RDONLY)
        size = os.fstat(fd).st_size
        data = os.pread(fd, 1 << 16, max(0, size - 4096))
        os.close(fd)
        reads[0] += 1
        if b"\0" in data:
            bad[0] += 1
threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
[t.start() for t in threads]; [t.join() for t in threads]
print(reads[0], bad[0])
"#;

fn run(split: &str, session: &str) {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let mount = Mount::start(root.path(), &[]);
    let file = mount.join(session);
    let out = Command::new("timeout")
        .args(["60", "python3", "-c", SCRIPT])
        .arg(&file)
        .arg(split)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let counts: Vec<u64> = text
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(counts[0] > 100, "too few reads to mean anything: {text}");
    assert_eq!(
        counts[1], 0,
        "{} of {} reads held NUL bytes",
        counts[1], counts[0]
    );
    mount.stop();
}

#[test]
fn reads_racing_complete_appends_never_see_zeros() {
    run("whole", "--root--/cwd-root/session.jsonl");
}

#[test]
fn reads_racing_incomplete_lines_never_see_zeros() {
    run("split", "--root--/cwd-slash/session.jsonl");
}

/// A line is held in memory until its newline arrives; the limit is
/// 16 MiB with its newline, the length the store continues a session from
/// (helper 29: a line of 16 MiB plus its newline was taken, and then no
/// writer could open the session). A line of exactly that length is taken
/// and the session takes appends after it. One longer is refused with
/// EFBIG, and so is every write until its newline, the one holding the
/// newline included (one `write(2)` of such a line: a short count, then
/// EFBIG for the rest; helper 29: the rest was taken as a new line and
/// refused as not JSON); the next write starts a new line. Nothing of the
/// long line reaches the store.
#[test]
fn an_overlong_line_is_refused_with_efbig() {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let backing = root.path().join("--root--/cwd-root/session.jsonl.zstd");
    let before = common::zstd_dc(&backing);
    let mount = Mount::start(root.path(), &[]);
    let script = r#"
import errno, json, os, sys
path = sys.argv[1]
last = open(path, "rb").read().splitlines()[-1]
seq = json.loads(last)["seq"] + 1
def line(seq, length=None):
    l = json.dumps({"type": "x-note", "seq": seq, "time": 1, "data": {"pad": ""}, "ignorable": True})
    if length is not None:
        l = l.replace('"pad": ""', '"pad": "' + "p" * (length - len(l) - 1) + '"')
    return (l + "\n").encode()
def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
out = []
# Exactly 16 MiB with its newline: taken, and the session goes on.
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
big = line(seq, 16 << 20)
for i in range(0, len(big), 1 << 20):
    os.write(fd, big[i:i + (1 << 20)])
out.append(err(lambda: os.close(fd)))
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
os.write(fd, line(seq + 1))
out.append(err(lambda: os.close(fd)))
# One byte longer, in one write(2): a short count, then EFBIG for the
# rest; the next line, written whole, is taken.
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
big = line(seq + 2, (16 << 20) + 1)
n = os.write(fd, big)
out.append("short" if 0 < n < len(big) else "count %d" % n)
out.append(err(lambda: os.write(fd, big[n:])))
good = line(seq + 2)
os.write(fd, good)
out.append(err(lambda: os.close(fd)))
# In 1 MiB writes, then a whole line before the long one's newline: the
# writes fail with EFBIG until that newline (the whole line's own); the
# line after it is taken.
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
first = None
for _ in range(20):
    e = err(lambda: os.write(fd, b"x" * (1 << 20)))
    if e != "ok":
        first = e
        break
out.append(first)
out.append(err(lambda: os.write(fd, b"x" * 10)))
out.append(err(lambda: os.write(fd, line(seq + 3))))
good2 = line(seq + 3)
os.write(fd, good2)
out.append(err(lambda: os.close(fd)))
print(" ".join(out))
sys.stdout.flush()
sys.stdout.buffer.write(big[:0] + line(seq, 16 << 20) + line(seq + 1) + good + good2)
"#;
    let out = Command::new("timeout")
        .args(["120", "python3", "-c", script])
        .arg(mount.join("--root--/cwd-root/session.jsonl"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nl = out.stdout.iter().position(|&b| b == b'\n').unwrap();
    let results = String::from_utf8_lossy(&out.stdout[..nl]).into_owned();
    assert_eq!(
        results, "ok ok short EFBIG ok EFBIG EFBIG EFBIG ok",
        "close of the 16 MiB line, close after appending to it, one write(2) of a longer \
         line, its rest, close; 1 MiB writes, more of the line, a whole line, close"
    );
    let stored = &out.stdout[nl + 1..];
    mount.stop();
    let mut want = before;
    want.extend_from_slice(stored);
    assert!(
        common::zstd_dc(&backing) == want,
        "the store is not the old transcript, the 16 MiB line and the three lines after it"
    );
}
