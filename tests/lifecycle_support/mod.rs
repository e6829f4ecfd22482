//! What the mount-lifecycle tests share beside `tests/common`: a daemon
//! started by hand (for signals at chosen moments), the binary installed
//! where mount(8)'s helper finds it, processes watched by pid, deadline
//! waits, and a store fixture.

#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::common;

/// The built binary.
pub const BIN: &str = env!("CARGO_BIN_EXE_sessionfs");

/// Where mount(8)'s helper (`mount.fuse3`, through `/bin/sh` with the
/// default PATH) finds `sessionfs`: the install location the README gives.
pub const INSTALLED: &str = "/usr/local/bin/sessionfs";

/// Makes `/usr/local/bin/sessionfs` a symbolic link to the built binary,
/// so that `mount -t fuse.sessionfs` runs it. Replaces only a link (an
/// earlier build's); panics on a real file there (an installed release,
/// which a test must not replace).
pub fn install_for_mount_helper() {
    // The tests of one binary run on several threads of one process: one
    // at a time here, or one's temporary link is another's to remove.
    static INSTALLING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|p| p.into_inner());
    let target = Path::new(BIN);
    let link = Path::new(INSTALLED);
    match fs::symlink_metadata(link) {
        Ok(m) if m.file_type().is_symlink() => {
            if fs::read_link(link).ok().as_deref() == Some(target) {
                return;
            }
        }
        Ok(_) => panic!(
            "{INSTALLED} is a real file (an installed sessionfs?); the helper-form tests \
             need it to be the built binary: move it aside"
        ),
        Err(_) => {}
    }
    let tmp = link.with_extension(format!("tmp{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp)
        .unwrap_or_else(|e| panic!("symlink {}: {e}", tmp.display()));
    fs::rename(&tmp, link).unwrap_or_else(|e| panic!("rename to {INSTALLED}: {e}"));
}

/// Polls `f` every 5 ms until it holds or `timeout` passes; returns
/// whether it held.
pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped).
pub fn pid_ended(pid: u32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// A copy of corpus case `case`'s root.
pub fn corpus_copy(case: &str) -> TempDir {
    let dir = tempfile::Builder::new()
        .prefix("sessionfs-root-")
        .tempdir()
        .unwrap();
    common::copy_tree(&common::corpus_dir().join(case).join("root"), dir.path());
    dir
}

/// A fresh, empty mount point directory (canonical path inside).
pub fn mount_point() -> TempDir {
    tempfile::Builder::new()
        .prefix("sessionfs-mnt-")
        .tempdir()
        .unwrap()
}

/// The canonical path of `dir`.
pub fn canon(dir: &Path) -> PathBuf {
    fs::canonicalize(dir).unwrap()
}

/// A `sessionfs` process started by a test (foreground `mount`, usually),
/// its output in a log file. On drop: SIGKILL if still running, and any
/// mount left at `mountpoint` is aborted and detached.
pub struct Daemon {
    pub child: Option<Child>,
    pub mountpoint: PathBuf,
    log: PathBuf,
    _log_dir: TempDir,
}

impl Daemon {
    /// Starts `sessionfs ARGS…` with its mount point `mountpoint` (for the
    /// cleanup) and `env` added. The daemon gets SIGTERM if the test dies.
    pub fn spawn(args: &[&std::ffi::OsStr], mountpoint: &Path, env: &[(&str, &str)]) -> Daemon {
        Daemon::spawn_with(BIN, args, mountpoint, env)
    }

    /// Starts `program ARGS…` (a wrapper such as setpriv that execs
    /// sessionfs) with its mount point `mountpoint`.
    pub fn spawn_program(program: &str, args: &[&std::ffi::OsStr], mountpoint: &Path) -> Daemon {
        Daemon::spawn_with(program, args, mountpoint, &[])
    }

    fn spawn_with(
        program: &str,
        args: &[&std::ffi::OsStr],
        mountpoint: &Path,
        env: &[(&str, &str)],
    ) -> Daemon {
        let log_dir = tempfile::Builder::new()
            .prefix("sessionfs-log-")
            .tempdir()
            .unwrap();
        let log = log_dir.path().join("daemon.log");
        let out = fs::File::create(&log).unwrap();
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(out.try_clone().unwrap()))
            .stderr(Stdio::from(out))
            .env("XDG_CACHE_HOME", log_dir.path().join("cache"))
            .env("RUST_LOG", "info");
        for (k, v) in env {
            cmd.env(k, v);
        }
        // The daemon starts with SIGINT, SIGTERM and SIGHUP at their default
        // action, as from an interactive shell: a harness that runs the
        // tests with SIGINT ignored (a background job of a script) would
        // otherwise hand that down through exec, and a signal sent before
        // main() installs its handler would be lost instead of ending the
        // daemon. SAFETY: prctl and signal are async-signal-safe; nothing
        // else runs in pre_exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                libc::signal(libc::SIGINT, libc::SIG_DFL);
                libc::signal(libc::SIGTERM, libc::SIG_DFL);
                libc::signal(libc::SIGHUP, libc::SIG_DFL);
                Ok(())
            });
        }
        let child = cmd.spawn().unwrap();
        Daemon {
            child: Some(child),
            mountpoint: mountpoint.to_path_buf(),
            log,
            _log_dir: log_dir,
        }
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    /// Sends signal `sig`.
    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.pid() as libc::pid_t, sig);
        }
    }

    /// Waits up to `timeout` for the daemon to exit.
    pub fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Whether the daemon has exited (without reaping it twice).
    pub fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_some())
    }

    /// Stops the drop from cleaning up the mount point: for a daemon that
    /// exited while another one's mount sits there.
    pub fn disown_mount_point(&mut self) {
        self.mountpoint = PathBuf::new();
    }

    /// The daemon's output so far.
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&fs::read(&self.log).unwrap_or_default()).into_owned()
    }

    /// Waits until the daemon's mount is up and answers a listing.
    pub fn wait_mounted(&mut self, timeout: Duration) {
        let mnt = self.mountpoint.clone();
        let up = wait_until(timeout, || {
            common::is_mounted(&mnt) && fs::read_dir(&mnt).is_ok() || self.exited()
        });
        assert!(
            up && !self.exited(),
            "sessionfs did not mount {} within {timeout:?}; log:\n{}",
            mnt.display(),
            self.log()
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            if child.try_wait().ok().flatten().is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if !self.mountpoint.as_os_str().is_empty() {
            cleanup_mount(&self.mountpoint);
        }
    }
}

/// Aborts and detaches every mount left at `path` (a test's leftovers).
pub fn cleanup_mount(path: &Path) {
    for _ in 0..4 {
        if !common::is_mounted(path) {
            return;
        }
        common::abort_fuse_connection(path);
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: umount2 with a valid NUL-terminated path.
        unsafe {
            libc::umount2(c.as_ptr(), libc::MNT_DETACH);
        }
    }
}

/// Runs `cmd args…` with a timeout of `secs` (through timeout(1)) and
/// returns its output.
pub fn run_timeout(secs: u32, cmd: &str, args: &[&std::ffi::OsStr]) -> std::process::Output {
    let out = Command::new("timeout")
        .arg(secs.to_string())
        .arg(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd}: {e}"));
    out
}

/// The pid of the daemon serving the mount at `mnt`, from its
/// `.sessionfs-status`.
pub fn status_of(mnt: &Path) -> serde_json::Value {
    let text = fs::read_to_string(mnt.join(".sessionfs-status"))
        .unwrap_or_else(|e| panic!("read {}/.sessionfs-status: {e}", mnt.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("status is not JSON ({e}): {text}"))
}

/// A complete event line with sequence number `seq`.
pub fn event_line(seq: u64, note: &str) -> String {
    format!(
        "{{\"type\":\"x-note\",\"seq\":{seq},\"time\":1,\"data\":{{\"n\":\"{note}\"}},\"ignorable\":true}}\n"
    )
}

/// The next sequence number of the transcript `view` (a mounted
/// `session.jsonl`).
pub fn next_seq(view: &Path) -> u64 {
    let text = fs::read_to_string(view).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    last["seq"].as_u64().unwrap() + 1
}

/// Appends `line` to `view` and keeps the descriptor open (so that only a
/// commit by the daemon makes it durable).
pub fn append_held(view: &Path, line: &str) -> fs::File {
    let mut f = fs::OpenOptions::new().append(true).open(view).unwrap();
    f.write_all(line.as_bytes()).unwrap();
    f
}
