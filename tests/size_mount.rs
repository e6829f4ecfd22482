//! Size operations see the lines still pending in a handle's batch
//! (MOUNT.md, Attributes; issue 10, part 2): inside the mount, a
//! transcript's size is its committed length plus the complete lines
//! pending in its handles; a truncate to exactly that size succeeds and
//! changes nothing; any truncate below fails with EPERM and changes
//! nothing, pending lines included; `lseek(SEEK_END/SEEK_DATA/SEEK_HOLE)`,
//! `fallocate` and `copy_file_range` judge by the same size. `rsync
//! --append` and `--append-verify` of a longer copy exit 0 and leave the
//! transcript equal to the copy. Each probe runs with the default batch
//! window and with `--batch-ms 0`.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{copy_tree, corpus_dir, zstd_dc, Mount};

/// A session of the `normal` corpus case, relative to the root.
const SESSION: &str = "--home-alice-work-app--/3f6c1d2e-8a4b-4c1f-9e2d-7b5a6c8d9e0f";

/// The probes, on one transcript (argv[1]); prints "ok" at the end and
/// fails with a message at the first wrong outcome.
const PROBE: &str = r#"
import ctypes, errno, json, os, sys
path, scratch = sys.argv[1], sys.argv[2]
libc = ctypes.CDLL(None, use_errno=True)
libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
def check(cond, what):
    if not cond:
        sys.exit("FAILED: " + what)
def errno_of(fn):
    try:
        fn()
    except OSError as e:
        return e.errno
    return 0
def fallocate(fd, mode, off, length):
    r = libc.fallocate(fd, mode, off, length)
    return 0 if r == 0 else ctypes.get_errno()
data = open(path, "rb").read()
seq = json.loads(data.splitlines()[-1])["seq"] + 1
def line(n):
    return (json.dumps({"type": "x-note", "seq": n, "time": 1, "data": {}, "ignorable": True}) + "\n").encode()

size0 = os.stat(path).st_size
check(size0 == len(data), "stat size is the read length")
fd = os.open(path, os.O_WRONLY | os.O_APPEND)
rfd = os.open(path, os.O_RDONLY)
first = line(seq)
check(os.write(fd, first) == len(first), "write")
size1 = size0 + len(first)
check(os.fstat(fd).st_size == size1, "fstat after write shows the pending line: %d != %d" % (os.fstat(fd).st_size, size1))
check(os.stat(path).st_size == size1, "stat(path) after write shows the pending line")
check(os.fstat(rfd).st_size == size1, "fstat of another descriptor shows it")
# Truncate below the size: EPERM, nothing changes, the line stays.
check(errno_of(lambda: os.ftruncate(fd, size0)) == errno.EPERM, "ftruncate below the size is EPERM")
check(errno_of(lambda: os.truncate(path, size0)) == errno.EPERM, "truncate(path) below the size is EPERM")
check(errno_of(lambda: os.ftruncate(fd, 0)) == errno.EPERM, "ftruncate to 0 is EPERM")
check(os.fstat(fd).st_size == size1, "a refused truncate changes no size")
# Truncate to exactly the size: a no-op success.
check(errno_of(lambda: os.ftruncate(fd, size1)) == 0, "ftruncate to the size succeeds")
check(errno_of(lambda: os.truncate(path, size1)) == 0, "truncate(path) to the size succeeds")
check(errno_of(lambda: os.ftruncate(fd, size1 + 1)) == errno.EPERM, "ftruncate beyond the size is EPERM")
# Offsets.
check(os.lseek(rfd, 0, os.SEEK_END) == size1, "SEEK_END is the size")
check(os.lseek(rfd, 0, os.SEEK_DATA) == 0, "SEEK_DATA at 0")
check(os.lseek(rfd, 0, os.SEEK_HOLE) == size1, "SEEK_HOLE is the size")
check(os.lseek(rfd, size0, os.SEEK_DATA) == size0, "SEEK_DATA inside the pending line")
check(errno_of(lambda: os.lseek(rfd, size1, os.SEEK_DATA)) == errno.ENXIO, "SEEK_DATA at the end is ENXIO")
# fallocate: within the size a no-op, anything that would change the size
# or the bytes refused.
check(fallocate(fd, 0, 0, size1) == 0, "fallocate within the size succeeds")
check(fallocate(fd, 1, 0, size1 + 4096) == 0, "fallocate KEEP_SIZE succeeds")
check(fallocate(fd, 0, 0, size1 + 1) == errno.EPERM, "fallocate beyond the size is EPERM")
check(fallocate(fd, 3, 0, 10) == errno.EPERM, "punching a hole is EPERM")
check(os.fstat(fd).st_size == size1, "fallocate changed no size")
# copy_file_range into the transcript: at the end it appends, inside it is
# refused, and nothing else changes.
src = open(scratch, "wb")
second = line(seq + 1)
src.write(second)
src.close()
sfd = os.open(scratch, os.O_RDONLY)
wfd = os.open(path, os.O_WRONLY)
e = errno_of(lambda: os.copy_file_range(sfd, wfd, len(second), 0, size0))
check(e == errno.EPERM, "copy_file_range inside the transcript is refused (%d)" % e)
check(os.fstat(wfd).st_size == size1, "a refused copy_file_range changes no size")
e = errno_of(lambda: os.copy_file_range(sfd, wfd, len(second), 0, size1))
check(e == 0, "copy_file_range at the end appends (errno %d)" % e)
size2 = size1 + len(second)
check(os.fstat(wfd).st_size == size2, "size after the copy")
os.fsync(fd)
os.fsync(wfd)
os.close(wfd)
os.close(fd)
check(os.stat(path).st_size == size2, "size after commit")
got = open(path, "rb").read()
check(got == data + first + second, "the transcript holds exactly the two lines")
os.close(rfd)
os.close(sfd)
os.unlink(scratch)
print("ok")
"#;

fn run_probe(batch_ms: Option<&str>) {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let args: Vec<&str> = batch_ms.map_or(vec![], |ms| vec!["--batch-ms", ms]);
    let mount = Mount::start(root.path(), &args);
    // The source of copy_file_range: a file in the same session directory
    // (same file system, so the kernel copies through the mount's writes).
    let scratch = mount.join(SESSION).join("copy-source.txt");
    let out = Command::new("timeout")
        .args(["60", "python3", "-c", PROBE])
        .arg(mount.join(SESSION).join("session.jsonl"))
        .arg(&scratch)
        .output()
        .unwrap();
    let log = mount.stop();
    assert!(
        out.status.success() && out.stdout == b"ok\n",
        "batch window {batch_ms:?}: {}{}\nlog:\n{log}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn size_operations_see_pending_lines() {
    run_probe(None);
}

#[test]
fn size_operations_with_no_batch_window() {
    run_probe(Some("0"));
}

/// A copy of the transcript with two more events.
fn longer_copy(mounted: &Path, dir: &Path) -> PathBuf {
    let data = fs::read(mounted).unwrap();
    let text = String::from_utf8(data.clone()).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    let seq = last["seq"].as_u64().unwrap();
    let mut copy = data;
    for n in [seq + 1, seq + 2] {
        copy.extend(
            format!(
                "{{\"type\":\"x-note\",\"seq\":{n},\"time\":1,\"data\":{{}},\"ignorable\":true}}\n"
            )
            .as_bytes(),
        );
    }
    let path = dir.join("session.jsonl");
    fs::write(&path, copy).unwrap();
    path
}

fn rsync_onto_transcript(mode: &str, batch_ms: Option<&str>) {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let args: Vec<&str> = batch_ms.map_or(vec![], |ms| vec!["--batch-ms", ms]);
    let mount = Mount::start(root.path(), &args);
    let target = mount.join(SESSION).join("session.jsonl");
    let src_dir = tempfile::tempdir().unwrap();
    let src = longer_copy(&target, src_dir.path());
    let out = Command::new("timeout")
        .args(["60", "rsync", mode])
        .arg(&src)
        .arg(&target)
        .output()
        .expect("rsync runs (.ci/run installs it)");
    let after = fs::read(&target).unwrap();
    let log = mount.stop();
    assert!(
        out.status.success(),
        "rsync {mode} (batch {batch_ms:?}) exit {}: {}\nlog:\n{log}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        after == fs::read(&src).unwrap(),
        "rsync {mode}: the transcript equals the copy"
    );
    // And it is committed: the stored file decompresses (`zstd -dc`) to it.
    assert!(zstd_dc(&root.path().join(SESSION).join("session.jsonl.zstd")) == after);
}

#[test]
fn rsync_append_onto_a_transcript() {
    rsync_onto_transcript("--append", None);
    rsync_onto_transcript("--append", Some("0"));
}

#[test]
fn rsync_append_verify_onto_a_transcript() {
    rsync_onto_transcript("--append-verify", None);
    rsync_onto_transcript("--append-verify", Some("0"));
}
