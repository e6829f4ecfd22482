//! The shared root across machines (issue 8, ../shared/spec/MOUNT.md
//! "Shared roots"), proven over real network file system clients that the
//! tests build from the distribution's packages (`tests/common/net.rs`):
//! one backing root served by an sshd on 127.0.0.1 and reached through two
//! sshfs clients, as two machines reach it, with a sessionfs mount over each
//! (the second in a UTS namespace of its own, so with another host name).
//!
//! CI time budget: about 6 minutes for the whole file (run with
//! `cargo test --test shared_root_net`; the tests run one at a time, see
//! `serial`).

mod common;
#[path = "common/net.rs"]
mod net;

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::IntoRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use sessionfs::store::naming::{encode_id, project_dir_name};
use tempfile::TempDir;

use common::{copy_tree, corpus_dir, expected_readraw_sha, sha256_hex, zstd_dc, Mount};
use net::{os_refs, other_host_wrapper, NetMount, Samba, Sshd};

const APP_CWD: &str = "/home/alice/work/app";
const ZSTD_NAME: &str = "session.jsonl.zstd";
const VIEW: &str = "session.jsonl";
/// Watchdog of every sessionfs mount here.
const WATCHDOG: Duration = Duration::from_secs(300);
/// The sshfs options the README recommends for a shared root.
const SSHFS_RECOMMENDED: &[&str] = &["dir_cache=no", "attr_timeout=0", "entry_timeout=0"];

/// The tests here share the machine's two cores with heavy races: one at a
/// time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn tempdir(prefix: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("create temporary directory")
}

/// The host name of the second "machine".
const HOST_B: &str = "sessionfs-net-b";

/// A sessionfs mount of `root` as machine A (this host).
fn mount_a(root: &Path, args: &[&str]) -> Mount {
    Mount::start_with_watchdog(root, args, WATCHDOG)
}

/// A sessionfs mount of `root` as machine B: in a UTS namespace of its own
/// with host name `HOST_B`.
fn mount_b(root: &Path, args: &[&str]) -> Mount {
    let w = other_host_wrapper(HOST_B);
    Mount::start_wrapped(root, args, WATCHDOG, &os_refs(&w), &[])
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A header line in the reference's key order.
fn header_line(id: &str, cwd: Option<&str>, created_at: u64) -> String {
    let mut s = format!(
        "{{\"type\":\"session\",\"version\":0,\"id\":{},\"createdAt\":{created_at}",
        json_str(id)
    );
    if let Some(cwd) = cwd {
        s.push_str(&format!(",\"cwd\":{}", json_str(cwd)));
    }
    s.push_str(",\"delegationDepth\":0}\n");
    s
}

/// One ignorable event line, serialized as `JSON.stringify` does.
fn note(seq: u64, writer: &str, n: u64) -> String {
    format!(
        "{{\"type\":\"x-sessionfs/note\",\"seq\":{seq},\"time\":{},\"data\":{{\"writer\":{},\"n\":{n}}},\"ignorable\":true}}\n",
        1_767_600_000_000u64 + seq,
        json_str(writer)
    )
}

fn seq_of(line: &str) -> u64 {
    let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"));
    v["seq"].as_u64().unwrap_or_else(|| panic!("no seq: {line:?}"))
}

fn session_rel(id: &str, cwd: Option<&str>) -> PathBuf {
    PathBuf::from(project_dir_name(cwd).unwrap()).join(encode_id(id).unwrap())
}

/// Closes `f` and returns what `close(2)` returned.
fn close_checked(f: File) -> io::Result<()> {
    let fd = f.into_raw_fd();
    // SAFETY: `fd` was just taken out of the `File`; nobody else owns it.
    if unsafe { libc::close(fd) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new().append(true).create(true).open(path)
}

/// One batch through a fresh O_APPEND descriptor: write, fsync, close; the
/// first error of the three.
fn append_batch(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut f = open_append(path)?;
    let r = f.write_all(data).and_then(|()| f.sync_all());
    let c = close_checked(f);
    r.and(c)
}

/// Creates the project directory (unless shown already) and the session
/// directory through a sessionfs mount.
fn mkdir_session(mnt: &Path, rel: &Path) {
    let project = mnt.join(rel.parent().unwrap());
    match fs::create_dir(&project) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => panic!("mkdir {}: {e}", project.display()),
    }
    fs::create_dir(mnt.join(rel)).unwrap_or_else(|e| panic!("mkdir {}: {e}", mnt.join(rel).display()));
}

/// The `seq` after the last line of the transcript at `view` (read through
/// a mount: the tail this writer sees), 0 after a header.
fn next_seq_through(view: &Path) -> io::Result<u64> {
    let mut f = File::open(view)?;
    let len = f.seek(SeekFrom::End(0))?;
    let start = len.saturating_sub(8192);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let last = text
        .trim_end_matches('\n')
        .rsplit('\n')
        .next()
        .unwrap_or_default();
    let v: Value = serde_json::from_str(last)
        .map_err(|e| io::Error::other(format!("last line of {} is not JSON ({e})", view.display())))?;
    Ok(if v["type"] == "session" {
        0
    } else {
        v["seq"].as_u64().unwrap_or(0) + 1
    })
}

// ---------------------------------------------------------------------------
// The reference oracle (installed by .ci/run; see tests/write_mount.rs)
// ---------------------------------------------------------------------------

fn oracle_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::var_os("SESSIONFS_ORACLE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| std::env::temp_dir().join("sessionfs-oracle"));
        let src = common::shared_dir().join("tools/oracle");
        let ready = dir.join("node_modules/.bin/node").exists()
            && ["oracle.mjs", "lib.mjs", "events.mjs", "package.json", "package-lock.json"]
                .iter()
                .all(|f| fs::read(dir.join(f)).ok() == fs::read(src.join(f)).ok());
        assert!(
            ready,
            "the reference oracle is not installed at {} (or differs from ../shared/tools/oracle): \
             .ci/run installs it (`cp -a ../shared/tools/oracle/. DIR && (cd DIR && npm ci)`, \
             then SESSIONFS_ORACLE_DIR=DIR); `cargo test --test write_mount` installs it too. \
             This test never skips.",
            dir.display()
        );
        dir
    })
    .clone()
}

/// Runs the oracle over a local copy of `root`; returns its report.
fn run_oracle(root: &Path) -> (Value, Output) {
    let dir = oracle_dir();
    let out = Command::new("timeout")
        .args(["-k", "5", "180"])
        .arg(dir.join("node_modules/.bin/node"))
        .arg(dir.join("oracle.mjs"))
        .arg(root)
        .arg("--content")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the oracle printed no JSON report ({}; {e}); stderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (report, out)
}

fn oracle_session<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["sessions"]
        .as_array()
        .expect("report.sessions")
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("the oracle found no session {id:?}"))
}

// ---------------------------------------------------------------------------
// 0. The test network itself
// ---------------------------------------------------------------------------

/// The harness: sshd up on 127.0.0.1, two sshfs clients of one backing
/// directory see each other's writes (with the recommended options), and
/// sessionfs mounted over an sshfs client serves the corpus byte for byte.
#[test]
fn the_test_network_serves_one_root_to_two_clients() {
    let _serial = serial();
    let tmp = tempdir("sessionfs-net-");
    let backing = tmp.path().join("root");
    copy_tree(&corpus_dir().join("normal/root"), &backing);
    let sshd = Sshd::start();
    let c1 = sshd.sshfs(&backing, SSHFS_RECOMMENDED);
    let c2 = sshd.sshfs(&backing, SSHFS_RECOMMENDED);

    // A file written through one client is read whole through the other.
    let probe = b"written through client 1\n";
    fs::write(c1.join("probe.txt"), probe).unwrap();
    assert_eq!(fs::read(c2.join("probe.txt")).unwrap(), probe);
    assert_eq!(fs::read(backing.join("probe.txt")).unwrap(), probe);
    // An append through client 2 is seen by client 1 at once (no attribute
    // cache with the recommended options).
    let mut f = OpenOptions::new().append(true).open(c2.join("probe.txt")).unwrap();
    f.write_all(b"appended through client 2\n").unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert_eq!(
        fs::read_to_string(c1.join("probe.txt")).unwrap(),
        "written through client 1\nappended through client 2\n"
    );
    fs::remove_file(c1.join("probe.txt")).unwrap();

    // sessionfs over client 2, as machine B: every session of the corpus
    // reads back as the reference's readRaw text.
    let m = mount_b(c2.path(), &["--read-only"]);
    let expected: Value =
        serde_json::from_slice(&fs::read(corpus_dir().join("normal/expected.json")).unwrap()).unwrap();
    let mut n = 0;
    for s in expected["report"]["sessions"].as_array().unwrap() {
        let id = s["id"].as_str().unwrap();
        let Some(dir) = s["dirs"][0].as_str() else { continue };
        let view = m.join(dir.trim_end_matches('/')).join(VIEW);
        let got = fs::read(&view).unwrap_or_else(|e| panic!("read {}: {e}", view.display()));
        assert_eq!(
            sha256_hex(&got),
            expected_readraw_sha("normal", id),
            "{id}: session.jsonl over sshfs differs from the reference's readRaw"
        );
        n += 1;
    }
    assert_eq!(n, 23, "the corpus has 23 sessions");
    let log = m.stop();
    eprintln!("sessionfs over sshfs: {n} sessions read; log:\n{log}");
    drop(c2);
    drop(c1);
    drop(sshd);
}
