//! Shared harness for the integration tests that mount sessionfs.
//!
//! The file system always runs in a child process (`CARGO_BIN_EXE_sessionfs`),
//! never inside the test process: a test process that serves its own mount
//! and is killed can leave a mount that hangs every later `stat`
//! (`../shared/notes/FUSE-NOTES.md` §3). `Mount` unmounts on every path,
//! panics included, and a watchdog aborts the FUSE connection if a test is
//! still using the mount long after it should have finished, so a daemon that
//! stops answering turns into a test failure instead of a hung run.
//!
//! Tests never mount or write `../shared`: they mount a copy (`copy_tree`).
//! No test skips silently: a missing `/dev/fuse` or a failed mount panics.

#![allow(dead_code)]

pub mod lines;
pub mod oracle;

use std::ffi::{CString, OsStr};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tempfile::TempDir;

/// How long `Mount::start` waits for the mount to appear.
pub const MOUNT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `Drop` waits for the daemon to exit after SIGTERM.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// Default lifetime of a mount before the watchdog aborts its connection.
/// Override with `SESSIONFS_TEST_WATCHDOG_SECS`.
pub const WATCHDOG_DEFAULT: Duration = Duration::from_secs(180);
/// Timeout for every external command run by `run`/`sh`.
pub const COMMAND_TIMEOUT_SECS: u32 = 30;

/// `../shared` beside the crate: the spec, notes and corpus (read-only in CI).
pub fn shared_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared")
}

/// `../shared/corpus`.
pub fn corpus_dir() -> PathBuf {
    shared_dir().join("corpus")
}

/// Lowercase hex sha256 of `data`.
pub fn sha256_hex(data: &[u8]) -> String {
    let digest = Sha256::digest(data);
    let mut s = String::with_capacity(64);
    for b in digest.iter() {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// A private copy of corpus case `case`'s root, as `(guard, TMP/root)`:
/// tests never mount or write `../shared` itself.
pub fn corpus_copy(case: &str) -> (TempDir, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix(&format!("sessionfs-corpus-{case}-"))
        .tempdir()
        .expect("create a temporary directory");
    let root = tmp.path().join("root");
    copy_tree(&corpus_dir().join(case).join("root"), &root);
    (tmp, root)
}

/// Copies the tree at `src` into `dst` (created if missing): directories
/// (empty ones included), regular files and symbolic links (copied as links,
/// never followed). Copies are made writable: directories 0755, files 0644
/// (0755 if any execute bit was set), whatever the source's modes.
pub fn copy_tree(src: &Path, dst: &Path) {
    let meta = fs::symlink_metadata(src)
        .unwrap_or_else(|e| panic!("copy_tree: cannot stat {}: {e}", src.display()));
    assert!(
        meta.is_dir(),
        "copy_tree: {} is not a directory",
        src.display()
    );
    copy_dir(src, dst);
}

fn copy_dir(src: &Path, dst: &Path) {
    fs::create_dir_all(dst)
        .unwrap_or_else(|e| panic!("copy_tree: cannot create {}: {e}", dst.display()));
    fs::set_permissions(dst, fs::Permissions::from_mode(0o755)).unwrap();
    let entries = fs::read_dir(src)
        .unwrap_or_else(|e| panic!("copy_tree: cannot list {}: {e}", src.display()));
    for entry in entries {
        let entry = entry.unwrap();
        let from = entry.path();
        let to = dst.join(entry.file_name());
        let ft = entry.file_type().unwrap();
        if ft.is_symlink() {
            let target = fs::read_link(&from).unwrap();
            symlink(&target, &to)
                .unwrap_or_else(|e| panic!("copy_tree: cannot create link {}: {e}", to.display()));
        } else if ft.is_dir() {
            copy_dir(&from, &to);
        } else if ft.is_file() {
            fs::copy(&from, &to).unwrap_or_else(|e| {
                panic!(
                    "copy_tree: cannot copy {} to {}: {e}",
                    from.display(),
                    to.display()
                )
            });
            let exec = entry.metadata().unwrap().permissions().mode() & 0o111 != 0;
            let mode = if exec { 0o755 } else { 0o644 };
            fs::set_permissions(&to, fs::Permissions::from_mode(mode)).unwrap();
        } else {
            panic!(
                "copy_tree: {} is neither a file, a directory nor a link",
                from.display()
            );
        }
    }
}

/// Runs `cmd args...` under `timeout`, so no test can hang on a tool. Never
/// panics on a non-zero exit: check `status` yourself (or use `run_ok`).
pub fn run<I, S>(cmd: &str, args: I, cwd: Option<&Path>) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new("timeout");
    c.arg("-k")
        .arg("5")
        .arg(COMMAND_TIMEOUT_SECS.to_string())
        .arg(cmd)
        .args(args)
        .stdin(Stdio::null());
    if let Some(dir) = cwd {
        c.current_dir(dir);
    }
    let out = c
        .output()
        .unwrap_or_else(|e| panic!("cannot run `timeout ... {cmd}`: {e}"));
    fail_on_timeout(cmd, &out);
    out
}

/// Runs the test `name` of the running test binary alone in a new process
/// (10 minutes at most), with `env` set and `--ignored` when `ignored`;
/// the child has its own stdout and stderr (pipes). Panics with the
/// child's output unless it ran exactly that test and it passed; returns
/// the child's stderr.
pub fn run_test_in_child(name: &str, ignored: bool, env: &[(&str, &OsStr)]) -> String {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", "600"])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .stdin(Stdio::null());
    if ignored {
        cmd.arg("--ignored");
    }
    for (key, value) in env {
        cmd.env(key, value);
    }
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let report = format!(
        "{name} in a child process: {}\n{}{stderr}",
        out.status,
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(out.status.success(), "{report}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 passed"),
        "{name} did not run in the child: {report}"
    );
    stderr
}

/// Panics when `timeout` ended `cmd` (exit status 124, or 137 after `-k`).
fn fail_on_timeout(cmd: &str, out: &Output) {
    if out.status.code() == Some(124) || out.status.code() == Some(137) {
        panic!(
            "`{cmd}` timed out after {COMMAND_TIMEOUT_SECS} s; stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// `run` with `input` on the command's stdin (written from another thread,
/// so a command that answers before reading all of it cannot block).
pub fn run_with_stdin<I, S>(cmd: &str, args: I, input: &[u8]) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut child = Command::new("timeout")
        .arg("-k")
        .arg("5")
        .arg(COMMAND_TIMEOUT_SECS.to_string())
        .arg(cmd)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run `timeout ... {cmd}`: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = thread::spawn(move || {
        // A command that exits without reading all of it closes the pipe.
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    fail_on_timeout(cmd, &out);
    out
}

/// `run`, then panics (with stderr) unless the command exited 0; returns stdout.
pub fn run_ok<I, S>(cmd: &str, args: I, cwd: Option<&Path>) -> Vec<u8>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<_> = args
        .into_iter()
        .map(|a| a.as_ref().to_os_string())
        .collect();
    let out = run(cmd, &args, cwd);
    assert!(
        out.status.success(),
        "`{cmd} {args:?}` failed ({}); stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// Runs a bash script under `timeout` with `set -o pipefail`; `args` are its
/// positional parameters (`$1`, `$2`, ...), so paths need no quoting.
pub fn sh<I, S>(script: &str, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let full = format!("set -o pipefail\n{script}");
    let mut all: Vec<std::ffi::OsString> = vec!["-c".into(), full.into(), "sh".into()];
    all.extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
    run("bash", &all, None)
}

/// `sh`, then panics unless the script exited 0; returns stdout.
pub fn sh_ok<I, S>(script: &str, args: I) -> Vec<u8>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let out = sh(script, args);
    assert!(
        out.status.success(),
        "script failed ({}):\n{script}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `zstd -dc FILE`: the decompressed content of every frame, decoded by the
/// zstd command-line tool (independent of sessionfs' decoder).
pub fn zstd_dc(file: &Path) -> Vec<u8> {
    run_ok(
        "zstd",
        [OsStr::new("-dcq"), OsStr::new("--"), file.as_os_str()],
        None,
    )
}

/// Decodes the octal escapes (`\040` etc.) that /proc/self/mountinfo uses.
fn unescape_mountinfo(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            let oct = &b[i + 1..i + 4];
            if oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
                let v = (oct[0] - b'0') as u32 * 64
                    + (oct[1] - b'0') as u32 * 8
                    + (oct[2] - b'0') as u32;
                out.push(v as u8);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// One line of /proc/self/mountinfo.
#[derive(Debug, Clone)]
pub struct MountInfo {
    /// Field 3, `major:minor`.
    pub dev: String,
    /// Field 5, unescaped.
    pub mount_point: PathBuf,
    /// The file system type (first field after ` - `).
    pub fs_type: String,
}

/// Parses /proc/self/mountinfo.
pub fn mountinfo() -> Vec<MountInfo> {
    let text = fs::read_to_string("/proc/self/mountinfo").expect("read /proc/self/mountinfo");
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            let sep = fields.iter().position(|f| *f == "-")?;
            Some(MountInfo {
                dev: fields.get(2)?.to_string(),
                mount_point: PathBuf::from(OsStr::from_bytes(&unescape_mountinfo(fields.get(4)?))),
                fs_type: fields.get(sep + 1)?.to_string(),
            })
        })
        .collect()
}

/// The mountinfo entry mounted last at `path`, if any.
pub fn mount_entry(path: &Path) -> Option<MountInfo> {
    mountinfo()
        .into_iter()
        .rev()
        .find(|m| m.mount_point == path)
}

/// True if `path` (canonical) is a mount point.
pub fn is_mounted(path: &Path) -> bool {
    mount_entry(path).is_some()
}

/// Aborts the FUSE connection of the mount at `path` through fusectl, so
/// every request blocked on it fails with ENOTCONN. Returns whether it wrote
/// the abort file. Never blocks on the mount itself.
pub fn abort_fuse_connection(path: &Path) -> bool {
    let Some(entry) = mount_entry(path) else {
        return false;
    };
    if !entry.fs_type.starts_with("fuse") {
        return false;
    }
    let conns = Path::new("/sys/fs/fuse/connections");
    let fusectl_mounted = mountinfo()
        .iter()
        .any(|m| m.mount_point == conns && m.fs_type == "fusectl");
    if !fusectl_mounted {
        let src = CString::new("fusectl").unwrap();
        let target = CString::new(conns.as_os_str().as_bytes()).unwrap();
        // SAFETY: plain mount(2) with valid NUL-terminated strings.
        unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                src.as_ptr(),
                0,
                std::ptr::null(),
            );
        }
    }
    // The connection directory is named after the device number; for the
    // anonymous devices FUSE uses (major 0) that is the minor number.
    let (major, minor) = entry.dev.split_once(':').unwrap_or(("0", "0"));
    let major: u64 = major.parse().unwrap_or(0);
    let minor: u64 = minor.parse().unwrap_or(0);
    let devno = (major << 20) | minor;
    for name in [devno.to_string(), minor.to_string()] {
        let abort = conns.join(name).join("abort");
        if let Ok(mut f) = OpenOptions::new().write(true).open(&abort) {
            if f.write_all(b"1").is_ok() {
                return true;
            }
        }
    }
    false
}

fn umount_detach(path: &Path) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: umount2 with a valid NUL-terminated path.
    let rc = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn signal(child: &Child, sig: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, sig);
    }
}

/// Waits for `child` to exit, up to `timeout`.
fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            return None;
        }
        thread::sleep(Duration::from_millis(10));
    }
}

/// Aborts the FUSE connection of `path` if it is still in use once `limit`
/// has passed without `done` being set, so that blocked calls fail with
/// ENOTCONN instead of hanging the run.
fn spawn_watchdog(path: PathBuf, limit: Duration, done: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if done.load(Ordering::SeqCst) {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
        if !done.load(Ordering::SeqCst) && is_mounted(&path) {
            eprintln!(
                "watchdog: the mount at {} is still in use after {limit:?}; aborting its \
                 FUSE connection so blocked calls fail with ENOTCONN",
                path.display()
            );
            abort_fuse_connection(&path);
        }
    })
}

/// A mount point whose daemon the test did not start itself (the mount(8)
/// helper form detaches one): watched by the same watchdog as [`Mount`],
/// and detached on drop if still mounted.
pub struct WatchedMountPoint {
    path: PathBuf,
    done: Arc<AtomicBool>,
    watchdog: Option<thread::JoinHandle<()>>,
}

impl WatchedMountPoint {
    /// Watches `path` (canonicalized) from now on.
    pub fn new(path: &Path) -> WatchedMountPoint {
        let path = fs::canonicalize(path).unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let watchdog = spawn_watchdog(path.clone(), watchdog_duration(), done.clone());
        WatchedMountPoint {
            path,
            done,
            watchdog: Some(watchdog),
        }
    }
}

impl Drop for WatchedMountPoint {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if is_mounted(&self.path) {
            abort_fuse_connection(&self.path);
            if let Err(e) = umount_detach(&self.path) {
                eprintln!(
                    "WatchedMountPoint::drop: umount2({}, MNT_DETACH): {e}",
                    self.path.display()
                );
            }
        }
        if let Some(w) = self.watchdog.take() {
            let _ = w.join();
        }
    }
}

/// How long a mount may live before its watchdog detaches it.
pub fn watchdog_duration() -> Duration {
    std::env::var("SESSIONFS_TEST_WATCHDOG_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(WATCHDOG_DEFAULT)
}

/// A running `sessionfs mount` in a child process, unmounted on drop.
pub struct Mount {
    child: Option<Child>,
    /// Canonical path of the mount point.
    mnt_path: PathBuf,
    /// The mount point's temporary directory; forgotten (never removed) if it
    /// is still a mount point at drop.
    mnt_dir: Option<TempDir>,
    log_path: PathBuf,
    _log_dir: TempDir,
    /// Set when the mount is stopped or dropped; the watchdog then exits.
    done: Arc<AtomicBool>,
    watchdog: Option<thread::JoinHandle<()>>,
}

impl Mount {
    /// Mounts `root` on a fresh temporary mount point with
    /// `sessionfs mount ROOT MNT EXTRA_ARGS...` and waits until the mount
    /// point shows in /proc/self/mountinfo. Panics (with the daemon's log) if
    /// the daemon exits first or the mount does not appear within 20 s.
    pub fn start(root: &Path, extra_args: &[&str]) -> Mount {
        Mount::start_with_watchdog(root, extra_args, watchdog_duration())
    }

    /// `start`, with the watchdog set to abort the FUSE connection once the
    /// mount has been up for `limit` (for tests that legitimately run long).
    pub fn start_with_watchdog(root: &Path, extra_args: &[&str], limit: Duration) -> Mount {
        Mount::start_inner(
            Path::new(env!("CARGO_BIN_EXE_sessionfs")),
            root,
            None,
            extra_args,
            limit,
            None,
            &[],
            &[],
        )
    }

    /// `start`, with the daemon's address space limited to `bytes`
    /// (`RLIMIT_AS`, set in the child before exec): a daemon that tries to
    /// allocate more gets allocation failures instead of memory.
    pub fn start_with_rlimit_as(root: &Path, extra_args: &[&str], bytes: u64) -> Mount {
        Mount::start_inner(
            Path::new(env!("CARGO_BIN_EXE_sessionfs")),
            root,
            None,
            extra_args,
            watchdog_duration(),
            Some(bytes),
            &[],
            &[],
        )
    }

    /// `start_with_watchdog`, with the daemon started through `wrapper`
    /// (a command that ends by exec'ing its arguments, so the daemon keeps
    /// the pid this harness signals: `unshare --uts ...`, `env ...`) and with
    /// `envs` added to its environment. Used by the shared-root network
    /// tests to give mounts different host identities or clocks.
    pub fn start_wrapped(
        root: &Path,
        extra_args: &[&str],
        limit: Duration,
        wrapper: &[&OsStr],
        envs: &[(&OsStr, &OsStr)],
    ) -> Mount {
        Mount::start_inner(
            Path::new(env!("CARGO_BIN_EXE_sessionfs")),
            root,
            None,
            extra_args,
            limit,
            None,
            wrapper,
            envs,
        )
    }

    /// `start` on the existing directory `mnt` (kept on drop), for tests of
    /// a mount point itself. Over a mount point left behind by a killed
    /// daemon it returns at once (the stale mount is in mountinfo): wait
    /// for the new daemon to serve before using it.
    pub fn start_at(root: &Path, mnt: &Path, extra_args: &[&str]) -> Mount {
        Mount::start_inner(
            Path::new(env!("CARGO_BIN_EXE_sessionfs")),
            root,
            Some(mnt),
            extra_args,
            watchdog_duration(),
            None,
            &[],
            &[],
        )
    }

    /// Kills the daemon with SIGKILL (no clean unmount: the mount point is
    /// left behind, answering ENOTCONN) and reaps it. The watchdog keeps
    /// watching the mount point; drop still detaches it.
    pub fn kill_daemon(&mut self) {
        let mut child = self.child.take().expect("daemon already stopped");
        signal(&child, libc::SIGKILL);
        let _ = child.wait();
    }

    /// `start_with_watchdog` with another `sessionfs` binary (the release
    /// build: [`release_binary`]) and extra environment variables of the
    /// daemon.
    pub fn start_custom(
        bin: &Path,
        root: &Path,
        extra_args: &[&str],
        limit: Duration,
        envs: &[(&str, &str)],
    ) -> Mount {
        let envs: Vec<(&OsStr, &OsStr)> = envs
            .iter()
            .map(|(k, v)| (OsStr::new(*k), OsStr::new(*v)))
            .collect();
        Mount::start_inner(bin, root, None, extra_args, limit, None, &[], &envs)
    }

    /// Starts the daemon `bin`: on `at` (kept on drop) or on a new
    /// temporary mount point, under `RLIMIT_AS` = `rlimit_as`, through
    /// `wrapper`, with `envs` added to its environment.
    #[allow(clippy::too_many_arguments)]
    fn start_inner(
        bin: &Path,
        root: &Path,
        at: Option<&Path>,
        extra_args: &[&str],
        limit: Duration,
        rlimit_as: Option<u64>,
        wrapper: &[&OsStr],
        envs: &[(&OsStr, &OsStr)],
    ) -> Mount {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: these tests need FUSE (load the `fuse` module or run \
             the container with --device /dev/fuse); refusing to skip"
        );
        let shared = fs::canonicalize(shared_dir()).ok();
        let root_abs = fs::canonicalize(root)
            .unwrap_or_else(|e| panic!("mount root {} does not exist: {e}", root.display()));
        if let Some(shared) = shared {
            assert!(
                !root_abs.starts_with(&shared),
                "refusing to mount {} inside ../shared: mount a copy (copy_tree)",
                root_abs.display()
            );
        }

        let (mnt_dir, mnt_path) = match at {
            Some(mnt) => (None, fs::canonicalize(mnt).unwrap()),
            None => {
                let dir = tempfile::Builder::new()
                    .prefix("sessionfs-mnt-")
                    .tempdir()
                    .expect("create mount point");
                let path = fs::canonicalize(dir.path()).unwrap();
                (Some(dir), path)
            }
        };
        let log_dir = tempfile::Builder::new()
            .prefix("sessionfs-log-")
            .tempdir()
            .expect("create log dir");
        let log_path = log_dir.path().join("sessionfs.log");
        let log = File::create(&log_path).expect("create log file");
        let log_out = log.try_clone().unwrap();

        let mut cmd = match wrapper.split_first() {
            None => Command::new(bin),
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin);
                c
            }
        };
        cmd.envs(envs.iter().copied());
        cmd.arg("mount")
            .arg(&root_abs)
            .arg(&mnt_path)
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_out))
            .stderr(Stdio::from(log));
        // Keep whatever the daemon caches (frame indexes) out of $HOME.
        cmd.env("XDG_CACHE_HOME", log_dir.path().join("cache"));
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        // If the test thread dies without running Drop (the test process is
        // killed), the daemon gets SIGTERM and unmounts itself.
        // SAFETY: prctl is async-signal-safe; nothing else runs in pre_exec.
        unsafe {
            cmd.pre_exec(move || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                if let Some(bytes) = rlimit_as {
                    let lim = libc::rlimit {
                        rlim_cur: bytes,
                        rlim_max: bytes,
                    };
                    if libc::setrlimit(libc::RLIMIT_AS, &lim) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));

        let done = Arc::new(AtomicBool::new(false));
        let mut mount = Mount {
            child: Some(child),
            mnt_path,
            mnt_dir,
            log_path,
            _log_dir: log_dir,
            done: done.clone(),
            watchdog: None,
        };

        let deadline = Instant::now() + MOUNT_TIMEOUT;
        loop {
            if is_mounted(&mount.mnt_path) {
                break;
            }
            let exited = mount.child.as_mut().unwrap().try_wait().unwrap();
            if let Some(status) = exited {
                panic!(
                    "sessionfs mount {} {} {:?} exited ({status}) before the mount appeared; \
                     its log:\n{}",
                    root_abs.display(),
                    mount.mnt_path.display(),
                    extra_args,
                    mount.log()
                );
            }
            if Instant::now() >= deadline {
                panic!(
                    "the mount at {} did not appear within {:?}; daemon log:\n{}",
                    mount.mnt_path.display(),
                    MOUNT_TIMEOUT,
                    mount.log()
                );
            }
            thread::sleep(Duration::from_millis(10));
        }

        mount.watchdog = Some(spawn_watchdog(mount.mnt_path.clone(), limit, done));
        mount
    }

    /// The mount point (canonical path).
    pub fn path(&self) -> &Path {
        &self.mnt_path
    }

    /// `path().join(rel)`.
    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.mnt_path.join(rel)
    }

    /// `MOUNTPOINT/.sessionfs-status`, parsed.
    pub fn status(&self) -> serde_json::Value {
        let text = fs::read(self.join(".sessionfs-status")).expect("read .sessionfs-status");
        serde_json::from_slice(&text).expect(".sessionfs-status is JSON")
    }

    /// The daemon's log (stderr and stdout) so far.
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&fs::read(&self.log_path).unwrap_or_default()).into_owned()
    }

    /// Waits up to `timeout` for the log to contain `needle`; returns whether it did.
    pub fn wait_log_contains(&self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.log().contains(needle) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("daemon already stopped").id()
    }

    /// Panics (with the log) if the daemon has exited or the mount is gone.
    pub fn assert_alive(&mut self) {
        let child = self.child.as_mut().expect("daemon already stopped");
        if let Some(status) = child.try_wait().unwrap() {
            panic!(
                "the sessionfs daemon died ({status}); its log:\n{}",
                self.log()
            );
        }
        assert!(
            is_mounted(&self.mnt_path),
            "{} is no longer mounted; daemon log:\n{}",
            self.mnt_path.display(),
            self.log()
        );
    }

    /// Stops the daemon with SIGTERM and returns its log. Panics if it does
    /// not exit within 10 s, exits unsuccessfully, or leaves the mount
    /// behind (the cleanup in `Drop` still runs).
    pub fn stop(mut self) -> String {
        self.done.store(true, Ordering::SeqCst);
        let mut child = self.child.take().expect("daemon already stopped");
        signal(&child, libc::SIGTERM);
        let status = wait_timeout(&mut child, Duration::from_secs(10));
        let still_mounted = is_mounted(&self.mnt_path);
        let log = self.log();
        match status {
            None => {
                // Let Drop clean up with the child in place.
                self.child = Some(child);
                panic!("sessionfs did not exit within 10 s of SIGTERM; log:\n{log}");
            }
            Some(status) => {
                assert!(
                    status.success(),
                    "sessionfs exited with {status} after SIGTERM (expected a clean exit 0); \
                     log:\n{log}"
                );
            }
        }
        assert!(
            !still_mounted,
            "sessionfs exited after SIGTERM but {} is still mounted; log:\n{log}",
            self.mnt_path.display()
        );
        log
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        let panicking = thread::panicking();
        if let Some(mut child) = self.child.take() {
            signal(&child, libc::SIGTERM);
            let exited = wait_timeout(&mut child, STOP_TIMEOUT).is_some();
            if is_mounted(&self.mnt_path) {
                if !exited {
                    // The daemon is not answering: abort the connection so that
                    // nothing blocks on it, then detach.
                    abort_fuse_connection(&self.mnt_path);
                }
                if let Err(e) = umount_detach(&self.mnt_path) {
                    eprintln!(
                        "Mount::drop: umount2({}, MNT_DETACH): {e}",
                        self.mnt_path.display()
                    );
                }
            }
            if !exited && wait_timeout(&mut child, Duration::from_millis(500)).is_none() {
                signal(&child, libc::SIGKILL);
                let _ = child.wait();
            }
        } else if is_mounted(&self.mnt_path) {
            let _ = umount_detach(&self.mnt_path);
        }
        if is_mounted(&self.mnt_path) {
            eprintln!(
                "Mount::drop: {} is still a mount point; leaving the directory in place",
                self.mnt_path.display()
            );
            if let Some(dir) = self.mnt_dir.take() {
                std::mem::forget(dir);
            }
        }
        if panicking {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(200)..];
            eprintln!(
                "---- sessionfs daemon log ({} lines, last {} shown) ----\n{}\n---- end of log ----",
                lines.len(),
                tail.len(),
                tail.join("\n")
            );
        }
        if let Some(w) = self.watchdog.take() {
            let _ = w.join();
        }
    }
}

/// Asserts that `r` failed with the errno `errno`; `what` describes the call.
#[track_caller]
pub fn assert_errno<T: std::fmt::Debug>(r: io::Result<T>, errno: i32, what: &str) {
    match r {
        Ok(v) => panic!("{what}: expected errno {errno}, but it succeeded ({v:?})"),
        Err(e) => assert_eq!(
            e.raw_os_error(),
            Some(errno),
            "{what}: expected errno {errno}, got {e:?}"
        ),
    }
}

/// The names in directory `dir`, sorted.
pub fn list_dir(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read_dir {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name())
        .collect();
    v.sort();
    v
}

/// The sha256 of the decompressed transcript that the reference's `readRaw`
/// returned for session `id` of corpus case `case` (its expected.json).
#[allow(dead_code)]
pub fn expected_readraw_sha(case: &str, id: &str) -> String {
    let text = fs::read_to_string(corpus_dir().join(case).join("expected.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["report"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .and_then(|s| s["readRaw"]["sha256"].as_str())
        .unwrap_or_else(|| panic!("{case}: no readRaw sha256 for {id}"))
        .to_string()
}

/// A reproducible random number generator (proptest's ChaCha) seeded with
/// `seed`, for tests that need varied but repeatable sizes.
pub fn seeded_rng(seed: u64) -> proptest::test_runner::TestRng {
    let mut bytes = [0u8; 32];
    bytes[..8].copy_from_slice(&seed.to_le_bytes());
    proptest::test_runner::TestRng::from_seed(proptest::test_runner::RngAlgorithm::ChaCha, &bytes)
}

/// The release build of `sessionfs` (the shipped profile), built once per
/// test process with `cargo build --release` beside the test's own binary
/// (`target/release/sessionfs`). Panics when the build fails.
pub fn release_binary() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let debug_bin = Path::new(env!("CARGO_BIN_EXE_sessionfs"));
        // target/<profile>/sessionfs -> target/release/sessionfs
        let target = debug_bin
            .parent()
            .and_then(Path::parent)
            .expect("the test binary lies in target/<profile>/");
        let out = Command::new("timeout")
            .args(["-k", "10", "900"])
            .arg(cargo)
            .args([
                "build",
                "--release",
                "--bin",
                "sessionfs",
                "--manifest-path",
            ])
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .arg("--target-dir")
            .arg(target)
            .stdin(Stdio::null())
            .output()
            .expect("run cargo build --release");
        assert!(
            out.status.success(),
            "cargo build --release failed ({}):\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let bin = target.join("release/sessionfs");
        assert!(bin.is_file(), "no release binary at {}", bin.display());
        bin
    })
    .clone()
}

/// The resident set size of process `pid` in KiB (`VmRSS` of
/// /proc/PID/status). Panics when the process is gone.
pub fn vm_rss_kib(pid: u32) -> u64 {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("read /proc/{pid}/status: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in /proc/{pid}/status"))
}

/// Every path under `dir` (directories included), sorted: to prove that
/// a refusal created or removed nothing.
pub fn all_paths(dir: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .map(|e| e.unwrap().into_path())
        .collect()
}

/// Every file that is not a directory (links included, not followed)
/// under `dir`, in path order.
pub fn walk_files(dir: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| !e.file_type().is_dir())
        .map(|e| e.into_path())
        .collect()
}

/// The cwd of the corpus's `--home-alice-work-app--` sessions, as the
/// reference wrote it in their headers (a path of the corpus's example
/// machine, not of this one; spelled in pieces so that no path of the
/// form of a machine path stands in the sources).
pub const CORPUS_APP_CWD: &str = concat!("/home/alice", "/work", "/app");
