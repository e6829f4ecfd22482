//! The mount(8) helper form `sessionfs ROOT MOUNTPOINT -o OPTIONS`: it is
//! recognised here, and it detaches the daemon the way libfuse's
//! daemonize does. The caller starts `sessionfs mount …` in a new session
//! with the write end of a pipe (its number in `SESSIONFS_READY_FD`) and
//! waits. The daemon runs every check, mounts, and once the mount answers
//! requests writes `R` to the pipe; if it fails first it writes `E` and
//! its message, and exits. The caller prints the message and exits with
//! the daemon's own status, or 0 once the mount is ready.

use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::CommandFactory;

use super::{Cli, EXIT_ERROR, EXIT_OK};

/// Environment variable naming the daemon's end of the readiness pipe.
const READY_FD_ENV: &str = "SESSIONFS_READY_FD";

/// How long the mount(8) helper form waits for its daemon's mount.
const DETACH_TIMEOUT: Duration = Duration::from_secs(30);

/// The daemon's end of the readiness pipe, while the caller waits.
static READY_PIPE: Mutex<Option<File>> = Mutex::new(None);

/// Inserts `mount` when invoked in the mount(8) helper form.
pub(super) fn with_implicit_mount(mut args: Vec<OsString>) -> Vec<OsString> {
    if is_helper_form(&args) {
        args.insert(1, OsString::from("mount"));
    }
    args
}

/// Whether `args` is the mount(8) helper form `sessionfs ROOT MOUNTPOINT …`:
/// three or more arguments, the first neither a subcommand nor a flag.
pub(super) fn is_helper_form(args: &[OsString]) -> bool {
    args.get(1).is_some_and(|first| {
        let b = first.as_bytes();
        let cli = Cli::command();
        let is_subcommand =
            b == b"help" || cli.get_subcommands().any(|s| s.get_name().as_bytes() == b);
        !is_subcommand && !b.starts_with(b"-") && args.len() >= 3
    })
}

/// In the daemon started by [`run_detached`]: takes the readiness pipe
/// named in the environment (and removes the variable, so that nothing
/// the daemon starts inherits it).
pub(super) fn take_ready_pipe() {
    let Some(fd) = std::env::var_os(READY_FD_ENV) else {
        return;
    };
    std::env::remove_var(READY_FD_ENV);
    let Some(fd) = fd.to_str().and_then(|s| s.parse::<i32>().ok()) else {
        return;
    };
    // Only a pipe is taken: a number that names no pipe is ignored.
    // SAFETY: the descriptor is only borrowed for this fstat; an unopened
    // number makes fstat fail with EBADF, nothing else.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let is_pipe =
        nix::sys::stat::fstat(borrowed).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFIFO);
    if !is_pipe {
        return;
    }
    // SAFETY: the caller passed this descriptor for the daemon alone, it
    // is open (fstat succeeded) and nothing else in this process owns it.
    let file = unsafe { File::from_raw_fd(fd) };
    let _ = nix::fcntl::fcntl(
        file.as_fd(),
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
    );
    *READY_PIPE.lock().unwrap_or_else(|e| e.into_inner()) = Some(file);
}

/// Tells the waiting caller that the mount is ready, and closes the pipe.
pub(super) fn report_ready() {
    if let Some(mut pipe) = READY_PIPE.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = pipe.write_all(b"R");
    }
}

/// Sends the daemon's failure message to the waiting caller, and closes
/// the pipe.
pub(super) fn report_failure(message: &str) {
    if let Some(mut pipe) = READY_PIPE.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = pipe.write_all(format!("E{message}").as_bytes());
    }
}

/// The mount(8) helper form: starts `sessionfs mount …` (the same
/// arguments) in a new session with the readiness pipe, waits for its
/// report, and returns 0 once the mount is ready, or the daemon's own exit
/// status (its message printed on stderr) when it failed.
pub(super) fn run_detached(args: &[OsString], mountpoint: &Path) -> u8 {
    let fail = |m: String| {
        eprintln!("sessionfs: {m}");
        EXIT_ERROR
    };
    let Ok(exe) = std::env::current_exe() else {
        return fail("cannot find the sessionfs executable to start the daemon".into());
    };
    let (read_end, write_end) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return fail(format!("cannot create the readiness pipe: {e}")),
    };
    // The daemon must not hold the caller's output open (a pipe reader
    // would wait for the unmount): its log goes to $SESSIONFS_LOG_FILE, or
    // nowhere; its failure message comes back through the pipe.
    let log = std::env::var_os("SESSIONFS_LOG_FILE").and_then(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .ok()
    });
    let stderr = match log {
        Some(f) => std::process::Stdio::from(f),
        None => std::process::Stdio::null(),
    };
    let mut cmd = std::process::Command::new(exe);
    cmd.args(&args[1..])
        .env(READY_FD_ENV, write_end.as_raw_fd().to_string())
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr);
    let child_fd = write_end.as_raw_fd();
    // SAFETY: setsid and fcntl are async-signal-safe; setsid detaches the
    // daemon from the caller's session so that mount(8) can return, and
    // clearing FD_CLOEXEC keeps the pipe's write end open across exec.
    unsafe {
        cmd.pre_exec(move || {
            libc::setsid();
            if libc::fcntl(child_fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail(format!("cannot start the sessionfs daemon: {e}")),
    };
    drop(write_end);
    match wait_report(read_end, DETACH_TIMEOUT) {
        Report::Ready => EXIT_OK,
        Report::Failed(message) => {
            eprintln!("{message}");
            match wait_child(&mut child, Duration::from_secs(5)) {
                Some(code) if code != 0 => code,
                _ => EXIT_ERROR,
            }
        }
        Report::Closed => match wait_child(&mut child, Duration::from_secs(5)) {
            Some(code) => {
                eprintln!(
                    "sessionfs: the daemon exited before mounting {} (exit status {code}) \
                     without a message",
                    mountpoint.display()
                );
                code.max(EXIT_ERROR)
            }
            None => {
                let status = child.try_wait().ok().flatten();
                let signal = status.and_then(|s| s.signal());
                fail(match signal {
                    Some(sig) => format!(
                        "the daemon was killed by signal {sig} before mounting {}",
                        mountpoint.display()
                    ),
                    None => format!(
                        "the daemon (pid {}) closed its readiness pipe without mounting {}",
                        child.id(),
                        mountpoint.display()
                    ),
                })
            }
        },
        Report::TimedOut => fail(format!(
            "{} was not ready within {DETACH_TIMEOUT:?}; the daemon (pid {}) is still \
             starting (stop it with `kill {}`)",
            mountpoint.display(),
            child.id(),
            child.id()
        )),
    }
}

/// What the daemon reported through the pipe.
enum Report {
    Ready,
    Failed(String),
    /// The pipe closed without a report (the daemon died).
    Closed,
    TimedOut,
}

/// Reads the daemon's report: `R`, or `E` and a message, then end of file.
fn wait_report(read_end: OwnedFd, timeout: Duration) -> Report {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let deadline = Instant::now() + timeout;
    let mut pipe = File::from(read_end);
    let mut got = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Report::TimedOut;
        }
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(pipe.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(_) => return Report::Closed,
        }
        let mut buf = [0u8; 4096];
        match pipe.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                got.extend_from_slice(&buf[..n]);
                if got.first() == Some(&b'R') {
                    return Report::Ready;
                }
                // A message is bounded: the rest is not waited for.
                if got.len() > 64 * 1024 {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    match got.split_first() {
        Some((b'R', _)) => Report::Ready,
        Some((b'E', message)) => Report::Failed(String::from_utf8_lossy(message).into_owned()),
        _ => Report::Closed,
    }
}

/// The exit code of `child` once it exits within `timeout`.
fn wait_child(child: &mut std::process::Child, timeout: Duration) -> Option<u8> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return status.code().map(|c| u8::try_from(c).unwrap_or(EXIT_ERROR));
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_helper_form_is_mount() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            with_implicit_mount(args(&["sessionfs", "/r", "/m", "-o", "rw"])),
            args(&["sessionfs", "mount", "/r", "/m", "-o", "rw"])
        );
        for unchanged in [
            &["sessionfs", "list", "/r"][..],
            &["sessionfs", "--help"],
            &["sessionfs", "key", "/x"],
            &["sessionfs", "/r"],
            &["sessionfs"],
        ] {
            assert_eq!(with_implicit_mount(args(unchanged)), args(unchanged));
        }
    }
}
