//! Issue 12, Must show 4 (and the systemd part of "What to build"): the
//! units under contrib/ pass `systemd-analyze verify`; `READY=1` reaches a
//! `NOTIFY_SOCKET` only once the mount serves requests; a normal user
//! mounts through fusermount3, and gets a clear message where it cannot.
//!
//! Budget: 60 s per test; each wait has its own timeout.

mod common;
mod lifecycle_support;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lifecycle_support::{canon, corpus_copy, install_for_mount_helper, mount_point, Daemon};

/// The unprivileged user of these tests.
const NOBODY: u32 = 65534;

/// The group through which that user reaches /dev/fuse in the mount test.
const FUSE_GROUP: u32 = 65533;
const FUSE_GROUP_STR: &str = "65533";

/// Held by every test that changes or reads /dev/fuse's owner and mode
/// (the tests of this binary run on parallel threads: one test's restore
/// must not take the device from another's daemon).
static DEV_FUSE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn dev_fuse_lock() -> std::sync::MutexGuard<'static, ()> {
    DEV_FUSE.lock().unwrap_or_else(|e| e.into_inner())
}

/// /dev/fuse opened to group [`FUSE_GROUP`] (mode 0660) until dropped.
struct DevFuseGroup {
    gid: u32,
    mode: u32,
    _lock: std::sync::MutexGuard<'static, ()>,
}

impl DevFuseGroup {
    fn grant() -> Self {
        use std::os::unix::fs::MetadataExt;
        let lock = dev_fuse_lock();
        let meta = fs::metadata("/dev/fuse").unwrap();
        let saved = DevFuseGroup {
            gid: meta.gid(),
            mode: meta.permissions().mode() & 0o7777,
            _lock: lock,
        };
        std::os::unix::fs::chown("/dev/fuse", None, Some(FUSE_GROUP)).unwrap();
        fs::set_permissions("/dev/fuse", fs::Permissions::from_mode(saved.mode | 0o060)).unwrap();
        saved
    }
}

impl Drop for DevFuseGroup {
    fn drop(&mut self) {
        let _ = std::os::unix::fs::chown("/dev/fuse", None, Some(self.gid));
        let _ = fs::set_permissions("/dev/fuse", fs::Permissions::from_mode(self.mode));
    }
}

#[test]
fn contrib_units_pass_systemd_analyze_verify() {
    // The units name /usr/local/bin/sessionfs, which verify requires.
    install_for_mount_helper();
    let contrib = Path::new(env!("CARGO_MANIFEST_DIR")).join("contrib");
    let service = contrib.join("sessionfs.service");
    let mount = contrib.join("mnt-sessions.mount");
    let out = lifecycle_support::run_timeout(
        60,
        "systemd-analyze",
        &[OsStr::new("verify"), service.as_os_str(), mount.as_os_str()],
    );
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "systemd-analyze verify ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = fs::read_to_string(&service).unwrap();
    assert!(
        text.contains("Type=notify"),
        "the service is not Type=notify"
    );
    let text = fs::read_to_string(&mount).unwrap();
    assert!(text.contains("Type=fuse.sessionfs"));
}

/// The test binds its own datagram socket as NOTIFY_SOCKET: `READY=1`
/// arrives, and at that moment the mount is there and answers; `STOPPING=1`
/// follows SIGTERM.
#[test]
fn ready_is_sent_only_once_the_mount_serves() {
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    let sock_dir = tempfile::tempdir().unwrap();
    let sock_path = sock_dir.path().join("notify");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let args: Vec<&OsStr> = vec![
        OsStr::new("mount"),
        root.path().as_os_str(),
        mnt.as_os_str(),
    ];
    let mut d = Daemon::spawn(
        &args,
        &mnt,
        &[("NOTIFY_SOCKET", sock_path.to_str().unwrap())],
    );
    let mut buf = [0u8; 4096];
    let n = sock
        .recv(&mut buf)
        .unwrap_or_else(|e| panic!("no notification within 20 s ({e}); log:\n{}", d.log()));
    let message = String::from_utf8_lossy(&buf[..n]).into_owned();
    // Checked at once, before anything else can make the mount ready.
    let mounted = common::is_mounted(&mnt);
    let listed = fs::read_dir(&mnt).map(|it| it.count());
    assert!(
        message.lines().any(|l| l == "READY=1"),
        "first notification: {message:?}"
    );
    assert!(mounted, "READY=1 before the mount appeared");
    assert!(
        listed.as_ref().is_ok_and(|&n| n > 0),
        "READY=1 but the mount does not list: {listed:?}"
    );
    let status = lifecycle_support::status_of(&mnt);
    let listings = ["readdir", "readdirplus"]
        .iter()
        .map(|op| status["requests"]["by_op"][op].as_u64().unwrap_or(0))
        .sum::<u64>();
    assert!(listings > 0, "{status}");
    d.signal(libc::SIGTERM);
    let n = sock.recv(&mut buf).expect("no STOPPING=1 after SIGTERM");
    let stopping = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(
        stopping.lines().any(|l| l == "STOPPING=1"),
        "after SIGTERM: {stopping:?}"
    );
    assert!(d.wait(Duration::from_secs(5)).is_some_and(|s| s.success()));
    assert!(!common::is_mounted(&mnt));
}

/// `setpriv` as the nobody user, the root's and mount point's modes
/// opened for it.
fn as_nobody(program: &str) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid",
        &NOBODY.to_string(),
        "--regid",
        &NOBODY.to_string(),
        "--clear-groups",
        "--",
        program,
    ]);
    cmd
}

fn open_for_nobody(root: &Path, mnt: &Path) {
    // The temporary directories are 0700 root; nobody needs to reach them.
    let out = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(root)
        .output()
        .unwrap();
    assert!(out.status.success());
    fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::chown(mnt, Some(NOBODY), Some(NOBODY)).unwrap();
}

/// Stops the user's daemon `d` with SIGTERM: it exits 0 within 5 s and
/// its mount at `mnt` is gone.
fn stop_cleanly(d: &mut Daemon, mnt: &Path) {
    d.signal(libc::SIGTERM);
    let status = d.wait(Duration::from_secs(5));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}; log:\n{}",
        d.log()
    );
    assert!(!common::is_mounted(mnt), "the user's mount is still there");
}

/// `setpriv` arguments that run `sessionfs mount ROOT MNT --read-only` as
/// the unprivileged user, in the group that reaches /dev/fuse.
fn mount_as_nobody<'a>(root: &'a Path, mnt: &'a Path) -> Vec<&'a OsStr> {
    vec![
        OsStr::new("--reuid"),
        OsStr::new("65534"),
        OsStr::new("--regid"),
        OsStr::new("65534"),
        OsStr::new("--groups"),
        OsStr::new(FUSE_GROUP_STR),
        OsStr::new("--"),
        OsStr::new(lifecycle_support::BIN),
        OsStr::new("mount"),
        root.as_os_str(),
        mnt.as_os_str(),
        OsStr::new("--read-only"),
        OsStr::new("--index-cache"),
        OsStr::new("none"),
    ]
}

#[test]
fn a_normal_users_mount_left_by_a_killed_daemon_is_recovered_by_that_user() {
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    open_for_nobody(root.path(), &mnt);
    let _dev = DevFuseGroup::grant();
    let mut first = spawn_program("setpriv", &mount_as_nobody(root.path(), &mnt), &mnt);
    first.wait_mounted_as_other_user(Duration::from_secs(20));
    first.signal(libc::SIGKILL);
    assert!(
        first.wait(Duration::from_secs(5)).is_some(),
        "the daemon did not die"
    );
    // The user's own next mount detaches the stale one (through
    // fusermount3: umount2 is root's) and serves.
    let mut second = spawn_program("setpriv", &mount_as_nobody(root.path(), &mnt), &mnt);
    let session = mnt.join("--home-alice-work-app--/Session-A/session.jsonl");
    let served = lifecycle_support::wait_until(Duration::from_secs(20), || {
        as_nobody("cat")
            .arg(&session)
            .output()
            .is_ok_and(|o| o.status.success())
    });
    assert!(
        served,
        "the second mount does not serve; log:\n{}",
        second.log()
    );
    stop_cleanly(&mut second, &mnt);
}

#[test]
fn a_normal_user_mounts_through_fusermount3() {
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    open_for_nobody(root.path(), &mnt);
    // The user reaches /dev/fuse through a group (as on a desktop, where
    // udev opens it to all); the device's owner and mode come back after.
    let _dev = DevFuseGroup::grant();
    // setpriv execs the daemon: the child's pid is the daemon's.
    let mut d = spawn_program("setpriv", &mount_as_nobody(root.path(), &mnt), &mnt);
    d.wait_mounted_as_other_user(Duration::from_secs(20));
    let entry = common::mount_entry(&mnt).expect("mounted");
    assert!(entry.fs_type.starts_with("fuse"), "{entry:?}");
    // Only its owner reaches the mount (no allow_other): read as nobody.
    let session = mnt.join("--home-alice-work-app--/Session-A/session.jsonl");
    let out = as_nobody("cat").arg(&session).output().unwrap();
    assert!(
        out.status.success(),
        "cat as nobody: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        common::sha256_hex(&out.stdout),
        common::expected_readraw_sha("normal", "Session-A")
    );
    stop_cleanly(&mut d, &mnt);
}

/// Where a normal user cannot mount, the message says why: no
/// `user_allow_other` for allow_other; no access to /dev/fuse and no
/// setuid fusermount3.
#[test]
fn a_normal_user_gets_clear_messages() {
    let root = corpus_copy("normal");
    let mnt_dir = mount_point();
    let mnt = canon(mnt_dir.path());
    open_for_nobody(root.path(), &mnt);
    let has_user_allow_other = fs::read_to_string("/etc/fuse.conf")
        .is_ok_and(|t| t.lines().any(|l| l.trim() == "user_allow_other"));
    let out = as_nobody(lifecycle_support::BIN)
        .arg("mount")
        .arg(root.path())
        .arg(&mnt)
        .args(["--read-only", "--allow-other"])
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    if has_user_allow_other {
        panic!(
            "/etc/fuse.conf has user_allow_other: this machine cannot show the message \
             (exit {}, {err})",
            out.status
        );
    }
    assert!(
        out.status.code() == Some(1) && err.contains("user_allow_other"),
        "allow_other without user_allow_other: {} {err}",
        out.status
    );
    assert!(!common::is_mounted(&mnt));

    // No access to /dev/fuse (root's alone here, as the assert below
    // checks): fusermount3 opens it as the user.
    let _dev = dev_fuse_lock();
    let dev_mode = fs::metadata("/dev/fuse").unwrap().permissions().mode();
    assert_eq!(
        dev_mode & 0o006,
        0,
        "/dev/fuse is open to everyone here (mode {dev_mode:o}): the message cannot be shown"
    );
    let out = as_nobody(lifecycle_support::BIN)
        .arg("mount")
        .arg(root.path())
        .arg(&mnt)
        .arg("--read-only")
        .env("RUST_LOG", "error")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code() == Some(1) && err.contains("no read-write access to /dev/fuse"),
        "no /dev/fuse access: {} {err}",
        out.status
    );
    assert!(!common::is_mounted(&mnt));
}

fn spawn_program(program: &str, args: &[&OsStr], mnt: &Path) -> lifecycle_support::Daemon {
    Daemon::spawn_program(program, args, mnt)
}

trait OtherUser {
    fn wait_mounted_as_other_user(&mut self, timeout: Duration);
}

impl OtherUser for Daemon {
    /// Waits for the mount to appear in mountinfo (root cannot list a
    /// mount made by another user without allow_other).
    fn wait_mounted_as_other_user(&mut self, timeout: Duration) {
        let mnt = self.mountpoint.clone();
        let up = lifecycle_support::wait_until(timeout, || {
            common::is_mounted(&mnt) && self.log().contains("mounted ") || self.exited()
        });
        assert!(
            up && !self.exited(),
            "the user's daemon did not mount within {timeout:?}; log:\n{}",
            self.log()
        );
    }
}
