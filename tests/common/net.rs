//! The test network of the shared-root tests: servers and network file
//! system clients built from the distribution's packages, all on this
//! machine.
//!
//! * `Sshd`: an OpenSSH server on 127.0.0.1, a free port, a throwaway host
//!   key and a throwaway client key, its configuration and state in a
//!   temporary directory.
//! * `NetMount`: one network file system client mounted on a temporary
//!   mount point: sshfs or rclone (sftp backend) against an `Sshd`, or
//!   smbnetfs against a `Samba` server.
//! * `Samba`: smbd on 127.0.0.1, a free port, one guest share, its state in
//!   a temporary directory.
//!
//! Every server and client runs in a process group of its own, is started
//! by the test, and is stopped by process (group) id on every path: `Drop`
//! unmounts and signals, and a watchdog kills a server or aborts a client's
//! FUSE connection once its time limit is over, so a hung client turns into
//! a test failure rather than a hung run. Nothing listens on any address but
//! 127.0.0.1. A missing package fails the test with the command that
//! installs it; nothing is skipped.

#![allow(dead_code)]

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::Read;
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::common::{abort_fuse_connection, is_mounted, mount_entry};

/// How long a server or client may take to come up.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Lifetime of a server or client before its watchdog stops it.
pub const NET_WATCHDOG: Duration = Duration::from_secs(420);

/// The only address any server here listens on or any client reaches.
pub const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// The path of `tool`, found in `$PATH` or the sbin directories (sshd and
/// smbd live in /usr/sbin, which a non-login `$PATH` may lack). Panics with
/// the Debian package that provides it when it is missing.
pub fn require_tool(tool: &str, package: &str) -> PathBuf {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/sbin", "/usr/bin", "/bin"].map(PathBuf::from));
    for d in dirs {
        let p = d.join(tool);
        if fs::metadata(&p)
            .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            .unwrap_or(false)
        {
            return p;
        }
    }
    panic!(
        "`{tool}` is missing: the shared-root network tests need the Debian package `{package}` \
         (as root: scripts/install-net-test-deps.sh, which .ci/run and scripts/test.sh call). \
         These tests never skip."
    );
}

/// A port on 127.0.0.1 that was free a moment ago (the OS picks it).
pub fn free_port() -> u16 {
    let l = TcpListener::bind(SocketAddrV4::new(LOOPBACK, 0)).expect("bind 127.0.0.1:0");
    l.local_addr().unwrap().port()
}

fn tempdir(prefix: &str) -> TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("create temporary directory")
}

fn read_lossy(path: &Path) -> String {
    let mut s = Vec::new();
    if let Ok(mut f) = File::open(path) {
        let _ = f.read_to_end(&mut s);
    }
    String::from_utf8_lossy(&s).into_owned()
}

/// Runs `cmd` to completion (under `timeout`), panicking with its output
/// unless it exits 0.
fn run_checked(cmd: &mut Command, what: &str) {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A child process in a process group of its own, killed (the whole group,
/// by its id) on drop and by a watchdog after `limit`.
struct Guarded {
    child: Option<Child>,
    done: Arc<AtomicBool>,
    watchdog: Option<thread::JoinHandle<()>>,
}

fn kill_group(pgid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a process group this harness created (its leader is
    // our child, so the id cannot have been reused while we hold the Child).
    unsafe {
        libc::kill(-(pgid as libc::pid_t), sig);
    }
}

impl Guarded {
    fn spawn(mut cmd: Command, what: &str, limit: Duration) -> Guarded {
        cmd.process_group(0).stdin(Stdio::null());
        // SAFETY: prctl is async-signal-safe; nothing else runs in pre_exec.
        // If the test process dies without running Drop, the leader gets
        // SIGTERM.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let pgid = child.id();
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let what = what.to_owned();
        let watchdog = thread::spawn(move || {
            let deadline = Instant::now() + limit;
            while Instant::now() < deadline {
                if flag.load(Ordering::SeqCst) {
                    return;
                }
                thread::sleep(Duration::from_millis(50));
            }
            if !flag.load(Ordering::SeqCst) {
                eprintln!(
                    "watchdog: {what} still runs after {limit:?}; killing process group {pgid}"
                );
                kill_group(pgid, libc::SIGKILL);
            }
        });
        Guarded {
            child: Some(child),
            done,
            watchdog: Some(watchdog),
        }
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGTERM to the group, up to 5 s for the leader to exit, then SIGKILL.
    fn stop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if let Some(mut child) = self.child.take() {
            let pgid = child.id();
            kill_group(pgid, libc::SIGTERM);
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                thread::sleep(Duration::from_millis(10));
            }
            // Whatever is left of the group (sshd's per-connection children,
            // ssh under sshfs) goes too.
            kill_group(pgid, libc::SIGKILL);
            let _ = child.wait();
        }
        if let Some(w) = self.watchdog.take() {
            let _ = w.join();
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Waits until something accepts TCP connections on 127.0.0.1:`port`, or
/// `server` exits, or the deadline passes; panics with `log()` then.
fn wait_listening(server: &mut Guarded, port: u16, what: &str, log: impl Fn() -> String) {
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if TcpStream::connect_timeout(
            &SocketAddrV4::new(LOOPBACK, port).into(),
            Duration::from_millis(200),
        )
        .is_ok()
        {
            return;
        }
        if let Some(status) = server.exited() {
            panic!(
                "{what} exited ({status}) before listening on 127.0.0.1:{port}; its log:\n{}",
                log()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{what} does not listen on 127.0.0.1:{port} after {START_TIMEOUT:?}; its log:\n{}",
            log()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------
// OpenSSH server
// ---------------------------------------------------------------------------

/// An sshd on 127.0.0.1 serving SFTP to root with a throwaway key.
pub struct Sshd {
    proc: Guarded,
    pub port: u16,
    dir: TempDir,
}

impl Sshd {
    pub fn start() -> Sshd {
        let sshd = require_tool("sshd", "openssh-server");
        let keygen = require_tool("ssh-keygen", "openssh-client");
        require_tool("ssh", "openssh-client");
        let sftp_server = Path::new("/usr/lib/openssh/sftp-server");
        assert!(
            sftp_server.exists(),
            "{} is missing: install openssh-sftp-server (scripts/install-net-test-deps.sh)",
            sftp_server.display()
        );
        // sshd refuses to start without its privilege separation directory,
        // which the package's service unit would have created.
        fs::create_dir_all("/run/sshd").expect("create /run/sshd");
        let dir = tempdir("sessionfs-sshd-");
        let d = dir.path();
        for (key, what) in [("host_key", "host key"), ("client_key", "client key")] {
            run_checked(
                Command::new(&keygen)
                    .args([
                        "-q",
                        "-t",
                        "ed25519",
                        "-N",
                        "",
                        "-C",
                        "sessionfs-test",
                        "-f",
                    ])
                    .arg(d.join(key)),
                &format!("ssh-keygen of the throwaway {what}"),
            );
        }
        fs::copy(d.join("client_key.pub"), d.join("authorized_keys")).unwrap();
        fs::set_permissions(d.join("authorized_keys"), fs::Permissions::from_mode(0o600)).unwrap();
        let log = d.join("sshd.log");
        // A port may be taken between free_port and sshd's bind: try a few.
        for attempt in 0..5 {
            let port = free_port();
            let config = format!(
                "ListenAddress 127.0.0.1:{port}\n\
                 HostKey {host}\n\
                 PidFile {pid}\n\
                 AuthorizedKeysFile {auth}\n\
                 PermitRootLogin prohibit-password\n\
                 PubkeyAuthentication yes\n\
                 PasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\n\
                 UsePAM no\n\
                 StrictModes no\n\
                 AllowTcpForwarding no\n\
                 X11Forwarding no\n\
                 MaxStartups 100\n\
                 MaxSessions 100\n\
                 Subsystem sftp {sftp}\n",
                host = d.join("host_key").display(),
                pid = d.join("sshd.pid").display(),
                auth = d.join("authorized_keys").display(),
                sftp = sftp_server.display(),
            );
            let conf = d.join("sshd_config");
            fs::write(&conf, config).unwrap();
            let mut cmd = Command::new(&sshd);
            cmd.arg("-D")
                .arg("-e")
                .arg("-f")
                .arg(&conf)
                .stdout(Stdio::from(File::create(&log).unwrap()))
                .stderr(Stdio::from(
                    File::options().append(true).open(&log).unwrap(),
                ));
            let mut proc = Guarded::spawn(cmd, "sshd", NET_WATCHDOG);
            let log_of = || read_lossy(&log);
            // A bind failure shows as an early exit: retry with another port.
            let deadline = Instant::now() + START_TIMEOUT;
            loop {
                if TcpStream::connect(SocketAddrV4::new(LOOPBACK, port)).is_ok() {
                    return Sshd { proc, port, dir };
                }
                if let Some(status) = proc.exited() {
                    let text = log_of();
                    if attempt < 4 && text.contains("Address already in use") {
                        break;
                    }
                    panic!(
                        "sshd exited ({status}) before listening on 127.0.0.1:{port}; log:\n{text}"
                    );
                }
                assert!(
                    Instant::now() < deadline,
                    "sshd does not listen on 127.0.0.1:{port} after {START_TIMEOUT:?}; log:\n{}",
                    log_of()
                );
                thread::sleep(Duration::from_millis(20));
            }
        }
        unreachable!("the loop above returns or panics")
    }

    /// The throwaway client key.
    pub fn client_key(&self) -> PathBuf {
        self.dir.path().join("client_key")
    }

    /// sshd's log so far.
    pub fn log(&self) -> String {
        read_lossy(&self.dir.path().join("sshd.log"))
    }

    /// The ssh options every client here uses: the throwaway key, no known
    /// hosts file, never a prompt.
    pub fn ssh_options(&self) -> Vec<String> {
        vec![
            format!("IdentityFile={}", self.client_key().display()),
            "IdentitiesOnly=yes".into(),
            "StrictHostKeyChecking=no".into(),
            "UserKnownHostsFile=/dev/null".into(),
            "GlobalKnownHostsFile=/dev/null".into(),
            "BatchMode=yes".into(),
            "LogLevel=ERROR".into(),
        ]
    }

    /// Mounts `remote` (an absolute path on this machine, served by this
    /// sshd) with sshfs, with `options` added (`-o` values such as
    /// `cache=no`).
    pub fn sshfs(&self, remote: &Path, options: &[&str]) -> NetMount {
        let sshfs = require_tool("sshfs", "sshfs");
        let remote = fs::canonicalize(remote).unwrap();
        let mnt = NetMountPoint::new("sessionfs-sshfs-");
        let mut opts = self.ssh_options();
        opts.push(format!("Port={}", self.port));
        opts.extend(options.iter().map(|s| s.to_string()));
        let mut cmd = Command::new(sshfs);
        cmd.arg("-f")
            .arg(format!("root@127.0.0.1:{}", remote.display()))
            .arg(&mnt.path)
            .arg("-o")
            .arg(opts.join(","));
        NetMount::start(cmd, mnt, "fuse.sshfs", format!("sshfs {options:?}"))
    }

    /// Mounts `remote` with `rclone mount` of an sftp remote defined through
    /// environment variables (no configuration file), with `args` added
    /// (`--vfs-cache-mode writes`, ...).
    pub fn rclone(&self, remote: &Path, args: &[&str]) -> NetMount {
        let rclone = require_tool("rclone", "rclone");
        let remote = fs::canonicalize(remote).unwrap();
        let mnt = NetMountPoint::new("sessionfs-rclone-");
        let mut cmd = Command::new(rclone);
        cmd.arg("mount")
            .arg(format!("testsftp:{}", remote.display()))
            .arg(&mnt.path)
            .args(args)
            .env("RCLONE_CONFIG", "/dev/null")
            .env("RCLONE_CONFIG_TESTSFTP_TYPE", "sftp")
            .env("RCLONE_CONFIG_TESTSFTP_HOST", "127.0.0.1")
            .env("RCLONE_CONFIG_TESTSFTP_PORT", self.port.to_string())
            .env("RCLONE_CONFIG_TESTSFTP_USER", "root")
            .env("RCLONE_CONFIG_TESTSFTP_KEY_FILE", self.client_key())
            .env("RCLONE_CONFIG_TESTSFTP_KNOWN_HOSTS_FILE", "")
            .env("RCLONE_CONFIG_TESTSFTP_SHELL_TYPE", "unix")
            .env("RCLONE_CONFIG_TESTSFTP_MD5SUM_COMMAND", "none")
            .env("RCLONE_CONFIG_TESTSFTP_SHA1SUM_COMMAND", "none");
        NetMount::start(cmd, mnt, "fuse.rclone", format!("rclone sftp {args:?}"))
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        self.proc.stop();
    }
}

// ---------------------------------------------------------------------------
// Samba server
// ---------------------------------------------------------------------------

/// smbd on 127.0.0.1 exporting one directory as share `sessions` to guests
/// (mapped to root), SMB2 and later.
pub struct Samba {
    proc: Guarded,
    pub port: u16,
    dir: TempDir,
}

impl Samba {
    pub fn start(share: &Path) -> Samba {
        let smbd = require_tool("smbd", "samba");
        let share = fs::canonicalize(share).unwrap();
        let dir = tempdir("sessionfs-samba-");
        let d = dir.path();
        for sub in ["private", "lock", "state", "cache", "pid", "log", "ncalrpc"] {
            fs::create_dir_all(d.join(sub)).unwrap();
        }
        for attempt in 0..5 {
            let port = free_port();
            let conf = format!(
                "[global]\n\
                 interfaces = 127.0.0.1\n\
                 bind interfaces only = yes\n\
                 smb ports = {port}\n\
                 disable netbios = yes\n\
                 server role = standalone server\n\
                 map to guest = Bad User\n\
                 guest account = root\n\
                 private dir = {d}/private\n\
                 lock directory = {d}/lock\n\
                 state directory = {d}/state\n\
                 cache directory = {d}/cache\n\
                 pid directory = {d}/pid\n\
                 ncalrpc dir = {d}/ncalrpc\n\
                 log file = {d}/log/smbd.log\n\
                 passdb backend = tdbsam:{d}/private/passdb.tdb\n\
                 load printers = no\n\
                 printing = bsd\n\
                 printcap name = /dev/null\n\
                 disable spoolss = yes\n\
                 server min protocol = SMB2_02\n\
                 kernel oplocks = no\n\
                 [sessions]\n\
                 path = {share}\n\
                 read only = no\n\
                 guest ok = yes\n\
                 guest only = yes\n\
                 force user = root\n\
                 create mask = 0644\n\
                 directory mask = 0755\n",
                d = d.display(),
                share = share.display()
            );
            let conf_path = d.join("smb.conf");
            fs::write(&conf_path, conf).unwrap();
            let log = d.join("smbd.out");
            let mut cmd = Command::new(&smbd);
            cmd.arg("--foreground")
                .arg("--no-process-group")
                .arg("--debug-stdout")
                .arg("--debuglevel=1")
                .arg(format!("--configfile={}", conf_path.display()))
                .stdout(Stdio::from(File::create(&log).unwrap()))
                .stderr(Stdio::from(
                    File::options().append(true).open(&log).unwrap(),
                ));
            let mut proc = Guarded::spawn(cmd, "smbd", NET_WATCHDOG);
            let deadline = Instant::now() + START_TIMEOUT;
            loop {
                if TcpStream::connect(SocketAddrV4::new(LOOPBACK, port)).is_ok() {
                    return Samba { proc, port, dir };
                }
                if let Some(status) = proc.exited() {
                    let text = read_lossy(&log);
                    if attempt < 4 && text.contains("in use") {
                        break;
                    }
                    panic!(
                        "smbd exited ({status}) before listening on 127.0.0.1:{port}; log:\n{text}"
                    );
                }
                assert!(
                    Instant::now() < deadline,
                    "smbd does not listen on 127.0.0.1:{port} after {START_TIMEOUT:?}; log:\n{}",
                    read_lossy(&log)
                );
                thread::sleep(Duration::from_millis(20));
            }
        }
        unreachable!("the loop above returns or panics")
    }

    /// The share `sessions` as smbnetfs mounted at `m` shows it.
    pub fn share_in(&self, m: &NetMount) -> PathBuf {
        m.join(format!("127.0.0.1:{}", self.port)).join("sessions")
    }

    pub fn log(&self) -> String {
        read_lossy(&self.dir.path().join("smbd.out"))
            + &read_lossy(&self.dir.path().join("log/smbd.log"))
    }

    /// Mounts the whole SMB network view with smbnetfs (libfuse2), its
    /// configuration and the client's `smb.conf` (the port) in a private
    /// `$HOME`; the share is at `Samba::share_in(&mount)` (libsmbclient takes
    /// the port from the path, `127.0.0.1:PORT`, not from `smb ports`).
    pub fn smbnetfs(&self, options: &[&str]) -> NetMount {
        let smbnetfs = require_tool("smbnetfs", "smbnetfs");
        let mnt = NetMountPoint::new("sessionfs-smbnetfs-");
        let home = tempdir("sessionfs-smbnetfs-home-");
        let smb = home.path().join(".smb");
        fs::create_dir_all(&smb).unwrap();
        fs::write(
            smb.join("smb.conf"),
            "[global]\n\
                 client min protocol = SMB2_02\n\
                 disable netbios = yes\n\
                 name resolve order = host\n",
        )
        .unwrap();
        fs::write(
            smb.join("smbnetfs.conf"),
            "show_$_shares \"false\"\n\
             smbnetfs_debug 0\n\
             smb_debug_level 0\n\
             auth \"127.0.0.1\" \"guest\" \"\"\n",
        )
        .unwrap();
        // smbnetfs ignores an `auth` line in a file others may read.
        for f in ["smb.conf", "smbnetfs.conf"] {
            fs::set_permissions(smb.join(f), fs::Permissions::from_mode(0o600)).unwrap();
        }
        let mut cmd = Command::new(smbnetfs);
        cmd.arg(&mnt.path).arg("-f").env("HOME", home.path());
        for o in options {
            cmd.arg("-o").arg(o);
        }
        let mut m = NetMount::start(cmd, mnt, "fuse.smbnetfs", format!("smbnetfs {options:?}"));
        m.extra_dirs.push(home);
        m
    }
}

impl Drop for Samba {
    fn drop(&mut self) {
        self.proc.stop();
    }
}

// ---------------------------------------------------------------------------
// Network file system clients
// ---------------------------------------------------------------------------

/// A temporary mount point, canonical.
struct NetMountPoint {
    dir: Option<TempDir>,
    path: PathBuf,
}

impl NetMountPoint {
    fn new(prefix: &str) -> NetMountPoint {
        let dir = tempdir(prefix);
        let path = fs::canonicalize(dir.path()).unwrap();
        NetMountPoint {
            dir: Some(dir),
            path,
        }
    }
}

/// One network file system client mounted in the foreground in a child
/// process; unmounted and stopped on drop.
pub struct NetMount {
    proc: Guarded,
    mnt: NetMountPoint,
    log: PathBuf,
    _log_dir: TempDir,
    extra_dirs: Vec<TempDir>,
    what: String,
    /// Set on drop; the FUSE-abort watchdog then exits.
    done: Arc<AtomicBool>,
    watchdog: Option<thread::JoinHandle<()>>,
}

impl NetMount {
    fn start(mut cmd: Command, mnt: NetMountPoint, fs_type: &str, what: String) -> NetMount {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: these tests need FUSE; refusing to skip"
        );
        let log_dir = tempdir("sessionfs-netlog-");
        let log = log_dir.path().join("client.log");
        cmd.stdout(Stdio::from(File::create(&log).unwrap()))
            .stderr(Stdio::from(
                File::options().append(true).open(&log).unwrap(),
            ));
        let proc = Guarded::spawn(cmd, &what, NET_WATCHDOG + Duration::from_secs(10));
        let done = Arc::new(AtomicBool::new(false));
        let mut m = NetMount {
            proc,
            mnt,
            log,
            _log_dir: log_dir,
            extra_dirs: Vec::new(),
            what,
            done: Arc::clone(&done),
            watchdog: None,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(e) = mount_entry(&m.mnt.path) {
                assert_eq!(
                    e.fs_type, fs_type,
                    "{}: mounted as {} (expected {fs_type})",
                    m.what, e.fs_type
                );
                break;
            }
            if let Some(status) = m.proc.exited() {
                panic!(
                    "{} exited ({status}) before mounting; its log:\n{}",
                    m.what,
                    m.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{} did not mount within {START_TIMEOUT:?}; its log:\n{}",
                m.what,
                m.log()
            );
            thread::sleep(Duration::from_millis(20));
        }
        // The leader's own watchdog kills it at the limit; this one first
        // aborts the FUSE connection so that no caller stays blocked.
        let path = m.mnt.path.clone();
        let what = m.what.clone();
        m.watchdog = Some(thread::spawn(move || {
            let deadline = Instant::now() + NET_WATCHDOG;
            while Instant::now() < deadline {
                if done.load(Ordering::SeqCst) {
                    return;
                }
                thread::sleep(Duration::from_millis(50));
            }
            if !done.load(Ordering::SeqCst) {
                eprintln!("watchdog: {what} at {} still mounted after {NET_WATCHDOG:?}; aborting its FUSE connection", path.display());
                abort_fuse_connection(&path);
            }
        }));
        m
    }

    /// The mount point (canonical).
    pub fn path(&self) -> &Path {
        &self.mnt.path
    }

    pub fn join(&self, rel: impl AsRef<Path>) -> PathBuf {
        self.mnt.path.join(rel)
    }

    /// The client's pid (the process group leader).
    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// The client's log so far.
    pub fn log(&self) -> String {
        read_lossy(&self.log)
    }

    /// A description of the client and its options.
    pub fn what(&self) -> &str {
        &self.what
    }
}

impl Drop for NetMount {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        if is_mounted(&self.mnt.path) {
            // A clean unmount first; if the client does not answer, abort
            // the connection and detach, so nothing blocks.
            let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(
                self.mnt.path.as_os_str(),
            ))
            .unwrap();
            // SAFETY: umount2 with a valid NUL-terminated path.
            let rc = unsafe { libc::umount2(c.as_ptr(), 0) };
            if rc != 0 {
                abort_fuse_connection(&self.mnt.path);
                // SAFETY: as above.
                unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
            }
        }
        self.proc.stop();
        if is_mounted(&self.mnt.path) {
            eprintln!(
                "NetMount::drop: {} is still a mount point; leaving the directory in place",
                self.mnt.path.display()
            );
            if let Some(d) = self.mnt.dir.take() {
                std::mem::forget(d);
            }
        }
        if let Some(w) = self.watchdog.take() {
            let _ = w.join();
        }
        if thread::panicking() {
            eprintln!("---- {} log ----\n{}\n---- end ----", self.what, self.log());
        }
    }
}

/// Arguments for `Mount::start_wrapped` that run the sessionfs daemon in a
/// UTS namespace of its own with host name `host` (a second "machine"):
/// `unshare --uts` then `hostname HOST`, exec'ing the daemon so it keeps the
/// pid the harness signals.
pub fn other_host_wrapper(host: &str) -> Vec<OsString> {
    require_tool("unshare", "util-linux");
    vec![
        "unshare".into(),
        "--uts".into(),
        "sh".into(),
        "-c".into(),
        format!("hostname {host} && exec \"$0\" \"$@\"").into(),
    ]
}

/// `OsStr` views of `v`, for `Mount::start_wrapped`.
pub fn os_refs(v: &[OsString]) -> Vec<&OsStr> {
    v.iter().map(OsString::as_ref).collect()
}
