//! The mount(8) helper form `sessionfs ROOT MOUNTPOINT -o OPTIONS`: it is
//! recognised here, and detaches the daemon once the mount is ready.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::{fail, EXIT_OK};

/// Names that are subcommands or top-level flags: anything else in first
/// position is the mount(8) helper form `sessionfs ROOT MOUNTPOINT -o …`.
pub(super) const SUBCOMMANDS: [&str; 7] =
    ["mount", "list", "locate", "cat", "key", "check", "help"];

/// Inserts `mount` when invoked in the mount(8) helper form.
pub(super) fn with_implicit_mount(mut args: Vec<OsString>) -> Vec<OsString> {
    if is_helper_form(&args) {
        args.insert(1, OsString::from("mount"));
    }
    args
}

/// Whether `args` is the mount(8) helper form `sessionfs ROOT MOUNTPOINT …`.
pub(super) fn is_helper_form(args: &[OsString]) -> bool {
    args.get(1).is_some_and(|first| {
        let b = first.as_bytes();
        let is_subcommand = SUBCOMMANDS.iter().any(|s| s.as_bytes() == b);
        !is_subcommand && !b.starts_with(b"-") && args.len() >= 3
    })
}

/// How long the mount(8) helper form waits for its daemon's mount.
pub(super) const DETACH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The mount(8) helper form detaches once the mount is ready, as other
/// FUSE file systems do (MOUNT.md, Mount options): it starts `sessionfs
/// mount …` in a new session, waits until MOUNTPOINT is mounted, and exits
/// 0, or 1 with the daemon's exit status when it failed first.
pub(super) fn run_detached(args: Vec<OsString>, mountpoint: &Path) -> u8 {
    use std::os::unix::process::CommandExt;
    let Ok(exe) = std::env::current_exe() else {
        return fail("cannot find the sessionfs executable to start the daemon");
    };
    let Ok(mountpoint) = std::path::absolute(mountpoint) else {
        return fail(format_args!(
            "mount point {}: cannot make it absolute",
            mountpoint.display()
        ));
    };
    // The daemon must not hold the caller's output open (a pipe reader
    // would wait for the unmount): its log goes to $SESSIONFS_LOG_FILE, or
    // nowhere.
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
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr);
    // SAFETY: setsid is async-signal-safe; it detaches the daemon from the
    // caller's session so that mount(8) can return.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail(format_args!("cannot start the sessionfs daemon: {e}")),
    };
    let deadline = std::time::Instant::now() + DETACH_TIMEOUT;
    loop {
        if is_mount_point(&mountpoint) {
            return EXIT_OK;
        }
        if let Ok(Some(status)) = child.try_wait() {
            return fail(format_args!(
                "the sessionfs daemon exited before mounting ({status})"
            ));
        }
        if std::time::Instant::now() > deadline {
            return fail(format_args!(
                "{} was not mounted within {DETACH_TIMEOUT:?}; the daemon (pid {}) is still starting",
                mountpoint.display(),
                child.id()
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether `path` is a mount point in /proc/self/mountinfo.
pub(super) fn is_mount_point(path: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = path.as_os_str().as_bytes();
    table.lines().any(|line| {
        line.split(' ')
            .nth(4)
            .is_some_and(|field| unescape_mountinfo(field).as_slice() == wanted)
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
pub(super) fn unescape_mountinfo(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
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
