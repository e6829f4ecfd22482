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

/// A line is held in memory until its newline arrives: one longer than
/// 16 MiB is refused with EFBIG and dropped whole, its start included, so
/// the handle's next line is taken (helper 28: the start stayed held and
/// every later write was refused); nothing of the long line reaches the
/// store.
#[test]
fn an_overlong_line_is_refused_with_efbig() {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let backing = root.path().join("--root--/cwd-root/session.jsonl.zstd");
    let before = common::zstd_dc(&backing);
    let mount = Mount::start(root.path(), &[]);
    let script = r#"
import errno, json, sys
last = open(sys.argv[1], "rb").read().splitlines()[-1]
seq = json.loads(last)["seq"] + 1
f = open(sys.argv[1], "ab", buffering=0)
try:
    for _ in range(20):
        f.write(b"x" * (1 << 20))
    print("accepted")
except OSError as e:
    print("EFBIG" if e.errno == errno.EFBIG else "errno %d" % e.errno)
line = json.dumps({"type": "x-note", "seq": seq, "time": 1, "data": {}, "ignorable": True})
f.write((line + "\n").encode())
f.close()
print(line)
"#;
    let out = Command::new("timeout")
        .args(["60", "python3", "-c", script])
        .arg(mount.join("--root--/cwd-root/session.jsonl"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let printed: Vec<&str> = stdout.lines().collect();
    assert!(
        out.status.success() && printed.len() == 2 && printed[0] == "EFBIG",
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    mount.stop();
    let mut want = before;
    want.extend_from_slice(printed[1].as_bytes());
    want.push(b'\n');
    assert!(
        common::zstd_dc(&backing) == want,
        "the store is not the old transcript and the next line"
    );
}
