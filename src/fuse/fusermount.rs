//! Mounting as a normal user through `fusermount3` (setuid root), as
//! libfuse does: `fusermount3 -o OPTIONS -- MOUNTPOINT` opens `/dev/fuse`,
//! mounts, and passes the descriptor back over a socket named in
//! `_FUSE_COMMFD`. fuser 0.18 takes this path only after opening
//! `/dev/fuse` itself, which fails where the device is root's alone (mode
//! 0600), so sessionfs does the exchange itself and hands the descriptor
//! to `fuser::Session::from_fd`.

use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};

use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixAddr};

/// Environment variable through which fusermount3 finds its socket.
const COMM_FD_ENV: &str = "_FUSE_COMMFD";

/// Mounts `mountpoint` through `fusermount3 -o options` and returns the
/// FUSE device descriptor of the new mount.
///
/// Errors: a message with fusermount3's own words (mount point not owned,
/// `user_allow_other` missing, …) when it mounts nothing.
pub fn mount(mountpoint: &Path, options: &[String]) -> Result<OwnedFd, String> {
    let (ours, theirs) =
        UnixStream::pair().map_err(|e| format!("cannot create a socket for fusermount3: {e}"))?;
    let their_fd = theirs.as_raw_fd();
    let mut cmd = Command::new("fusermount3");
    cmd.arg("-o")
        .arg(options.join(","))
        .arg("--")
        .arg(mountpoint)
        .env(COMM_FD_ENV, their_fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: fcntl is async-signal-safe; it keeps the socket open across
    // exec for fusermount3.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(their_fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot run fusermount3: {e}"))?;
    drop(theirs);
    let received = receive_fd(&ours);
    drop(ours);
    let output = child
        .wait_with_output()
        .map_err(|e| format!("fusermount3: {e}"))?;
    match received {
        Some(fd) if output.status.success() => Ok(fd),
        _ => Err(format!(
            "fusermount3 failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )),
    }
}

/// The descriptor fusermount3 sends (SCM_RIGHTS), if any.
fn receive_fd(socket: &UnixStream) -> Option<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!(RawFd);
    let msg = loop {
        match recvmsg::<UnixAddr>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => break msg,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return None,
        }
    };
    let mut found = None;
    for cmsg in msg.cmsgs().ok()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            for fd in fds.into_iter().filter(|&fd| fd >= 0) {
                // SAFETY: the kernel just installed `fd` in this process
                // for us (SCM_RIGHTS); nothing else owns it. Extra ones
                // are closed when dropped.
                let owned = unsafe { OwnedFd::from_raw_fd(fd) };
                if found.is_none() {
                    found = Some(owned);
                }
            }
        }
    }
    found
}
