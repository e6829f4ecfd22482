//! Issue 12, Must show 3 and 4: mount(8)'s helper form. Every failure
//! reason reaches the caller's stderr with a non-zero exit; `remount,ro`
//! takes effect (EROFS) or fails; `-o` carries sessionfs's own options
//! (seen by their effects and in `.sessionfs-status`); `-o ro` gives
//! EROFS; `-o allow_othr` fails naming the option; mount(8)'s generic
//! options are accepted silently.
//!
//! Budget: 60 s per test; each mount(8) call runs under timeout(1).

mod common;
mod lifecycle_support;

use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use lifecycle_support::{
    canon, cleanup_mount, corpus_copy, event_line, install_for_mount_helper, mount_point, next_seq,
    pid_ended, run_timeout, status_of, wait_until,
};

const VIEW: &str = "--root--/cwd-root/session.jsonl";
const BACKING: &str = "--root--/cwd-root/session.jsonl.zstd";

/// `mount -t fuse.sessionfs ROOT MNT [-o OPTIONS]`.
fn mount8(root: &Path, mnt: &Path, options: Option<&str>) -> Output {
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("-t"),
        OsStr::new("fuse.sessionfs"),
        root.as_os_str(),
        mnt.as_os_str(),
    ];
    if let Some(o) = options {
        args.push(OsStr::new("-o"));
        args.push(OsStr::new(o));
    }
    run_timeout(40, "mount", &args)
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Unmounts (through umount(8)) and waits for the daemon to exit, on
/// every path.
struct Mounted {
    mnt: std::path::PathBuf,
}

impl Mounted {
    fn new(mnt: &Path) -> Self {
        Mounted {
            mnt: mnt.to_path_buf(),
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if !common::is_mounted(&self.mnt) {
            return;
        }
        let pid = fs::read_to_string(self.mnt.join(".sessionfs-status"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .and_then(|v| v["pid"].as_u64());
        let _ = run_timeout(10, "umount", &[self.mnt.as_os_str()]);
        if let Some(pid) = pid {
            wait_until(Duration::from_secs(5), || pid_ended(pid as u32));
        }
        cleanup_mount(&self.mnt);
    }
}

fn assert_fails(out: &Output, needle: &str, what: &str) {
    let err = stderr(out);
    assert!(
        !out.status.success(),
        "{what}: mount(8) succeeded; stderr: {err}"
    );
    assert!(
        err.contains(needle),
        "{what}: stderr does not give the daemon's reason ({needle:?}): {err}"
    );
}

#[test]
fn failure_reasons_reach_the_caller_with_a_non_zero_exit() {
    install_for_mount_helper();
    let began = Instant::now();
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    let missing = root.path().join("no-such-root");

    let out = mount8(&missing, &mnt, None);
    assert_fails(&out, "no-such-root", "root missing");
    assert!(!common::is_mounted(&mnt));

    let out = mount8(root.path(), &mnt, Some("auto_unmount"));
    assert_fails(
        &out,
        "auto_unmount needs allow_root or allow_other",
        "auto_unmount alone",
    );
    assert!(!common::is_mounted(&mnt));

    let inside = root.path().join("--root--");
    let out = mount8(root.path(), &inside, None);
    assert_fails(
        &out,
        "inside the session root",
        "mount point inside the root",
    );

    let outer = tempfile::tempdir().unwrap();
    let outer_path = canon(outer.path());
    fs::create_dir(outer_path.join("root")).unwrap();
    let out = mount8(&outer_path.join("root"), &outer_path, None);
    assert_fails(
        &out,
        "contains the session root",
        "mount point containing the root",
    );
    assert!(!common::is_mounted(&outer_path));

    let out = mount8(root.path(), &mnt, Some("attr_timeout=soon"));
    assert_fails(&out, "attr_timeout=soon", "a bad value");

    // A missing root onto a live mount point: the live mount stays, and
    // mount(8) still reports the failure.
    let out = mount8(root.path(), &mnt, Some("ro"));
    assert!(out.status.success(), "{}", stderr(&out));
    let _live = Mounted::new(&mnt);
    let out = mount8(&missing, &mnt, None);
    assert_fails(&out, "no-such-root", "root missing onto a live mount point");
    assert!(
        fs::read(mnt.join(VIEW)).is_ok(),
        "the live mount was disturbed"
    );
    assert!(began.elapsed() < Duration::from_secs(60));
}

#[test]
fn remount_ro_takes_effect_and_rw_comes_back() {
    install_for_mount_helper();
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    let out = mount8(root.path(), &mnt, Some("batch_ms=0"));
    assert!(out.status.success(), "{}", stderr(&out));
    let _m = Mounted::new(&mnt);
    let view = mnt.join(VIEW);

    let out = run_timeout(
        20,
        "mount",
        &[OsStr::new("-o"), OsStr::new("remount,ro"), mnt.as_os_str()],
    );
    if out.status.success() {
        let r = fs::OpenOptions::new().append(true).open(&view);
        common::assert_errno(r, libc::EROFS, "append after remount,ro");
        assert!(fs::read(&view).is_ok(), "reading stopped after remount,ro");
    } else {
        // Refusing is allowed, with a reason.
        assert!(
            !stderr(&out).is_empty(),
            "remount,ro failed without a message"
        );
    }

    let out = run_timeout(
        20,
        "mount",
        &[OsStr::new("-o"), OsStr::new("remount,rw"), mnt.as_os_str()],
    );
    assert!(out.status.success(), "remount,rw: {}", stderr(&out));
    let line = event_line(next_seq(&view), "after remount,rw");
    let mut f = fs::OpenOptions::new().append(true).open(&view).unwrap();
    f.write_all(line.as_bytes()).unwrap();
    drop(f);
    let stored = common::zstd_dc(&root.path().join(BACKING));
    assert!(String::from_utf8_lossy(&stored).ends_with(&line));

    // Options other than ro/rw cannot change on a live mount: refused.
    let out = run_timeout(
        20,
        "mount",
        &[
            OsStr::new("-o"),
            OsStr::new("remount,attr_timeout=3"),
            mnt.as_os_str(),
        ],
    );
    assert_fails(&out, "attr_timeout", "remount with a sessionfs option");
}

#[test]
fn remount_rw_of_a_read_only_mount_is_refused() {
    install_for_mount_helper();
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    let out = mount8(root.path(), &mnt, Some("ro"));
    assert!(out.status.success(), "{}", stderr(&out));
    let _m = Mounted::new(&mnt);
    let out = run_timeout(
        20,
        "mount",
        &[OsStr::new("-o"), OsStr::new("remount,rw"), mnt.as_os_str()],
    );
    assert_fails(&out, "mounted read-only", "remount,rw of an ro mount");
    let r = fs::OpenOptions::new().append(true).open(mnt.join(VIEW));
    common::assert_errno(r, libc::EROFS, "append to an ro mount");
}

/// `-o attr_timeout=0.5,batch_ms=0`: growth on disk shows within 0.5 s
/// (plus a margin), a written line is committed at once while its
/// descriptor stays open, and `.sessionfs-status` lists every option.
#[test]
fn o_options_take_effect_and_the_status_file_lists_them() {
    install_for_mount_helper();
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    let out = mount8(
        root.path(),
        &mnt,
        Some("attr_timeout=0.5,batch_ms=0,cache_size=32M,index_cache=none,compression=zstd"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let _m = Mounted::new(&mnt);

    let status = status_of(&mnt);
    let options = &status["options"];
    assert_eq!(options["attr_timeout"], "0.5", "{status}");
    assert_eq!(options["batch_ms"], "0", "{status}");
    assert_eq!(options["cache_size"], "32M", "{status}");
    assert_eq!(options["index_cache"], "none", "{status}");
    assert_eq!(options["compression"], "zstd", "{status}");
    assert_eq!(options["ro"], false, "{status}");
    for name in ["allow_other", "allow_root", "auto_unmount"] {
        assert_eq!(options[name], false, "{name}: {status}");
    }
    assert_eq!(status["cache"]["cap_bytes"], 32u64 << 20, "{status}");
    assert_eq!(
        status["root"],
        canon(root.path()).to_str().unwrap(),
        "{status}"
    );
    // The status file is hidden and read-only.
    let names = common::list_dir(&mnt);
    assert!(
        !names.iter().any(|n| n == ".sessionfs-status"),
        "listed: {names:?}"
    );
    let r = fs::OpenOptions::new()
        .write(true)
        .open(mnt.join(".sessionfs-status"));
    common::assert_errno(r, libc::EROFS, "writing .sessionfs-status");

    // batch_ms=0: committed on the write itself, the descriptor still open.
    let view = mnt.join(VIEW);
    let line = event_line(next_seq(&view), "batch_ms=0");
    let held = lifecycle_support::append_held(&view, &line);
    let stored = common::zstd_dc(&root.path().join(BACKING));
    assert!(
        String::from_utf8_lossy(&stored).ends_with(&line),
        "batch_ms=0: the line is not on disk while its descriptor is open"
    );
    drop(held);

    // attr_timeout=0.5: growth written outside the mount shows within
    // 0.5 s plus a margin.
    let before = fs::metadata(&view).unwrap().len();
    let more = event_line(next_seq(&view), "grown outside the mount");
    let frame = sessionfs::store::frame::encode_frame(more.as_bytes()).unwrap();
    let mut backing = fs::OpenOptions::new()
        .append(true)
        .open(root.path().join(BACKING))
        .unwrap();
    backing.write_all(&frame).unwrap();
    drop(backing);
    let grown_at = Instant::now();
    let shown = wait_until(Duration::from_secs(3), || {
        fs::metadata(&view).is_ok_and(|m| m.len() == before + more.len() as u64)
    });
    let took = grown_at.elapsed();
    assert!(shown, "the growth never showed");
    assert!(
        took <= Duration::from_millis(900),
        "growth showed after {took:?}, more than attr_timeout=0.5 s plus a margin"
    );
    assert!(
        status_of(&mnt)["requests"]["total"].as_u64().unwrap() > 0,
        "no request counted"
    );
}

#[test]
fn o_ro_gives_erofs() {
    install_for_mount_helper();
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    let out = mount8(root.path(), &mnt, Some("ro"));
    assert!(out.status.success(), "{}", stderr(&out));
    let _m = Mounted::new(&mnt);
    let r = fs::OpenOptions::new().append(true).open(mnt.join(VIEW));
    common::assert_errno(r, libc::EROFS, "append with -o ro");
    let r = fs::create_dir(mnt.join("--new-project--"));
    common::assert_errno(r, libc::EROFS, "mkdir with -o ro");
    assert_eq!(status_of(&mnt)["options"]["ro"], true);
}

#[test]
fn a_misspelt_option_fails_naming_it() {
    install_for_mount_helper();
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    let out = mount8(root.path(), &mnt, Some("ro,allow_othr"));
    let _m = Mounted::new(&mnt);
    assert_fails(&out, "\"allow_othr\"", "-o allow_othr");
    assert!(
        !common::is_mounted(&mnt),
        "mounted despite the unknown option"
    );
}

/// The options mount(8), mount.fuse3, fstab and systemd add are accepted
/// without a word.
#[test]
fn generic_options_are_accepted_silently() {
    install_for_mount_helper();
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    let out = mount8(
        root.path(),
        &mnt,
        Some(
            "rw,defaults,dev,suid,exec,nodev,nosuid,atime,relatime,noatime,_netdev,nofail,\
             auto,noauto,user,users,x-systemd.automount,x-systemd.device-timeout=10,\
             comment=x,default_permissions",
        ),
    );
    let _m = Mounted::new(&mnt);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "generic options made noise");
    assert!(fs::read(mnt.join(VIEW)).is_ok());
}

/// `.sessionfs-status` counts the bytes written and not yet committed
/// (a line held in a long batch window), and no longer once committed;
/// it names the root's file system and the commit protocol, and holds no
/// lock file once nothing is being committed.
#[test]
fn the_status_file_shows_pending_bytes() {
    let root = corpus_copy("normal");
    let mount = common::Mount::start(root.path(), &["--batch-ms", "60000"]);
    let view = mount.join(VIEW);
    // The next seq from the backing file, not through the mount: a read of
    // the view's last page that the kernel sends late (readahead) would
    // commit the pending line below (read-your-writes) before the status
    // is read.
    let stored = String::from_utf8(common::zstd_dc(&root.path().join(BACKING))).unwrap();
    let last: serde_json::Value = serde_json::from_str(stored.lines().last().unwrap()).unwrap();
    let line = event_line(last["seq"].as_u64().unwrap() + 1, "pending");
    let held = lifecycle_support::append_held(&view, &line);
    let status = status_of(mount.path());
    assert_eq!(status["pending_bytes"], line.len() as u64, "{status}");
    assert_eq!(status["writers"], 1, "{status}");
    assert_eq!(status["options"]["batch_ms"], "60000", "{status}");
    // Options left to their defaults show the value in effect.
    let options = status["options"].as_object().unwrap();
    let unset: Vec<&String> = options
        .iter()
        .filter(|(_, v)| v.is_null())
        .map(|(k, _)| k)
        .collect();
    assert!(
        unset.is_empty(),
        "options shown as null: {unset:?} in {status}"
    );
    assert_eq!(
        status["options"]["cache_size"],
        status["cache"]["cap_bytes"].to_string(),
        "{status}"
    );
    drop(held);
    // close() commits at flush; the handle goes at release, which the
    // kernel sends asynchronously, and the commit's lock file is released
    // with them (each may show a moment after the others on a loaded
    // machine: the wait is for all three).
    let mut last = serde_json::Value::Null;
    let settled = wait_until(Duration::from_secs(10), || {
        last = status_of(mount.path());
        last["pending_bytes"] == 0 && last["writers"] == 0 && last["locks_held"] == 0
    });
    assert!(settled, "pending bytes, writers or locks left: {last}");
    // What the root lives on, as findmnt(8) names its file system type.
    let findmnt = std::process::Command::new("findmnt")
        .args(["-n", "-o", "FSTYPE", "-T"])
        .arg(root.path())
        .output()
        .expect("findmnt (util-linux)");
    let fstype = String::from_utf8_lossy(&findmnt.stdout).trim().to_string();
    assert!(!fstype.is_empty(), "findmnt found no file system type");
    let root_fs = last["root_fs"].as_str().unwrap_or_default();
    assert!(
        root_fs.contains(&format!("({fstype},")),
        "{fstype} vs {last}"
    );
    let protocol = last["commit_protocol"].as_str().unwrap_or_default();
    assert!(["local", "remote"].contains(&protocol), "{last}");
    mount.stop();
}
