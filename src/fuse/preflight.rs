//! Checks that run before mounting, each failing with a message that says
//! what to do (MOUNT.md, Mount options): ROOT (a store's root, not a
//! project or session directory of one), the mount point (a directory, not
//! inside ROOT, not containing ROOT, no live sessionfs mount already
//! there, a stale one recovered), the options (`auto_unmount`,
//! `allow_other` for a normal user), access to FUSE (`/dev/fuse`,
//! `fusermount3`), and whether ROOT can take writes. Nothing here writes
//! into ROOT.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::unistd::{access, geteuid, AccessFlags};

use super::mount_table;
use super::run::MountConfig;

/// Runs every check; returns whether the mount is read-only (asked for, or
/// ROOT cannot take writes).
///
/// Errors: a message naming the path or option and the fix.
pub fn check(config: &MountConfig) -> Result<bool, String> {
    refuse_not_a_root(config)?;
    refuse_inside_root(config)?;
    refuse_containing_root(config)?;
    check_mountpoint(&config.mountpoint)?;
    check_fuse_access(config)?;
    Ok(config.read_only || !root_takes_writes(&config.root))
}

/// `path` with symbolic links and `..` resolved, also when its last
/// components do not exist yet (or do not answer, as a stale mount point):
/// the deepest resolvable ancestor is resolved and the rest applied to it.
pub fn resolved(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let parts: Vec<std::path::Component> = abs.components().collect();
    for keep in (1..=parts.len()).rev() {
        let prefix: PathBuf = parts[..keep].iter().collect();
        let Ok(out) = prefix.canonicalize() else {
            continue;
        };
        return push_spelled(out, &parts[keep..]);
    }
    abs
}

/// `parts` applied to `base` by their spelling alone: a name is pushed,
/// `..` pops, anything else is skipped; nothing is looked up.
fn push_spelled(mut base: PathBuf, parts: &[std::path::Component]) -> PathBuf {
    for part in parts {
        match part {
            std::path::Component::ParentDir => {
                base.pop();
            }
            std::path::Component::Normal(name) => base.push(name),
            _ => {}
        }
    }
    base
}

/// `path` made absolute and its `.` and `..` folded by spelling, without a
/// lookup (nothing waits on a mount that does not answer).
fn spelled_absolute(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let parts: Vec<std::path::Component> = abs.components().collect();
    push_spelled(PathBuf::from("/"), &parts)
}

/// ROOT must be a store's root, not one of its project or session
/// directories: mounted, their sessions would show as projects, and a
/// session created through the mount would land where no store layout
/// puts one (the rule of `list`, `check` and `doctor`:
/// [`crate::store::check::not_a_root`]).
fn refuse_not_a_root(config: &MountConfig) -> Result<(), String> {
    match crate::store::check::not_a_root(&config.root) {
        Some(why) => Err(format!("{}: {why}", config.root.display())),
        None => Ok(()),
    }
}

/// The mount point and the index cache must lie outside the store: inside,
/// the mount would show itself (an endless tree), and the cache would
/// write into the store, which reads never do.
fn refuse_inside_root(config: &MountConfig) -> Result<(), String> {
    let root = &config.root;
    let inside = |p: &Path| resolved(p).starts_with(root);
    if inside(&config.mountpoint) {
        return Err(format!(
            "mount point {} is inside the session root {}; mount it elsewhere",
            config.mountpoint.display(),
            root.display()
        ));
    }
    if let Some(dir) = &config.index_dir {
        if inside(dir) {
            return Err(format!(
                "--index-cache {} is inside the session root {}; sessionfs never writes \
                 caches into the store: pick a directory outside it",
                dir.display(),
                root.display()
            ));
        }
    }
    Ok(())
}

/// A mount point that contains ROOT would hide the store behind the mount
/// itself: every request would wait on the mount it serves.
fn refuse_containing_root(config: &MountConfig) -> Result<(), String> {
    let mountpoint = resolved(&config.mountpoint);
    if resolved(&config.root).starts_with(&mountpoint) {
        return Err(format!(
            "mount point {} contains the session root {}: the mount would hide the store it \
             serves; pick a mount point outside the root's parents",
            config.mountpoint.display(),
            config.root.display()
        ));
    }
    Ok(())
}

/// The mount point must be a directory. A live sessionfs mount already
/// there is refused (a second one stacked on it would be removed with it
/// by one `umount`); one left behind by a dead daemon (ENOTCONN) is
/// detached, after checking it is still the mount visible there.
fn check_mountpoint(mountpoint: &Path) -> Result<(), String> {
    let shown = mountpoint.display();
    let top = mount_table::top_at(mountpoint);
    // statfs needs a live daemon (see probe); a stat may come from the
    // kernel's attribute cache of a dead mount. A daemon that is alive but does not
    // answer (stopped, hung) would block the probe for as long as it does:
    // the probe runs in a process of its own and is given up after
    // PROBE_TIMEOUT.
    let Some(probe) = probe_with_timeout(mountpoint, PROBE_TIMEOUT) else {
        return Err(format!(
            "mount point {shown} is a mount whose daemon does not answer (stopped or hung) \
             within {PROBE_TIMEOUT:?}; unmount it with `umount -l {shown}` (or \
             `fusermount3 -u -z {shown}`), or resume that daemon, and retry"
        ));
    };
    match probe {
        Ok(_) if top.as_ref().is_some_and(|m| m.is_sessionfs()) => {
            let top = top.unwrap_or_else(|| unreachable!());
            Err(format!(
                "{shown} is already a sessionfs mount (of {}); unmount it first \
                 (`umount {shown}`) or pick another mount point",
                top.root().unwrap_or("?")
            ))
        }
        Ok(true) => Ok(()),
        Ok(false) => Err(format!("mount point {shown} is not a directory")),
        // ECONNABORTED: the connection was aborted, or its daemon died
        // while a request was under way.
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTCONN | libc::ECONNABORTED)) => {
            log::warn!("mount point {shown} was left behind by a dead daemon ({e}); detaching it");
            let detached = match top {
                Some(top) => {
                    // As a normal user through fusermount3 (umount2 is
                    // root's), as the daemon's own unmount does.
                    mount_table::top_at(mountpoint).is_some_and(|now| now.id == top.id)
                        && super::run::unmount_path(mountpoint, true).is_ok()
                }
                None => false,
            };
            if detached {
                Ok(())
            } else {
                Err(format!(
                    "mount point {shown} is stale and could not be detached; run \
                     `umount -l {shown}` (or `fusermount3 -u -z {shown}`) and retry"
                ))
            }
        }
        // A live sessionfs daemon answered with an error: its store fails
        // (a network client under it lost its server, say).
        Err(e) if top.as_ref().is_some_and(|m| m.is_sessionfs()) => Err(format!(
            "{shown} is already a sessionfs mount (of {}), whose daemon answers but whose \
             store fails ({e}); unmount it first (`umount {shown}`) or pick another mount point",
            top.as_ref().and_then(|m| m.root()).unwrap_or("?")
        )),
        Err(e) => Err(format!(
            "mount point {shown}: {e}; create the directory (mkdir -p) or pick another"
        )),
    }
}

/// How long the mount point probe waits for a daemon already mounted
/// there to answer.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The subcommand that probes a mount point in a child process.
const PROBE_SUBCOMMAND: &str = "__probe-mountpoint";

/// Lists and stats `mountpoint` the way the pre-flight check needs, and
/// asks its file system's statistics: `statfs` always reaches a FUSE
/// daemon, while opening a directory may not (a sessionfs mount only its
/// owner reaches declines opendir) and a stat may come from the kernel's
/// cache.
fn probe(path: &Path) -> std::io::Result<std::fs::Metadata> {
    std::fs::read_dir(path)?;
    nix::sys::statfs::statfs(path).map_err(std::io::Error::from)?;
    std::fs::metadata(path)
}

/// The body of `sessionfs __probe-mountpoint PATH`: probes `path` and
/// prints `dir`, `notdir` or `errno N` on stdout; exit status 0.
pub fn probe_child(path: &Path) -> u8 {
    match probe(path) {
        Ok(m) if m.is_dir() => println!("dir"),
        Ok(_) => println!("notdir"),
        Err(e) => println!("errno {}", e.raw_os_error().unwrap_or(libc::EIO)),
    }
    0
}

/// Runs `sessionfs SUBCOMMAND PATH` and returns what it printed; `None`
/// when it does not end within `timeout` (it is killed and left to end
/// when whatever blocks it does: a request a stopped or hung daemon read
/// and never answers waits uninterruptibly, and this process must still
/// be able to exit), `Some(Err)` when no child can be started.
fn run_child_bounded(
    subcommand: &str,
    path: &Path,
    timeout: std::time::Duration,
) -> Option<std::io::Result<Vec<u8>>> {
    let spawned = std::env::current_exe().and_then(|exe| {
        std::process::Command::new(exe)
            .arg(subcommand)
            .arg(path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
    });
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => return Some(Err(e)),
    };
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            _ => {
                let _ = child.kill();
                return None;
            }
        }
    }
    let mut out = Vec::new();
    if let Some(mut stdout) = child.stdout.take() {
        use std::io::Read;
        let _ = stdout.read_to_end(&mut out);
    }
    Some(Ok(out))
}

/// Probes `mountpoint` in a child process (`sessionfs __probe-mountpoint`);
/// `None` when it does not answer within `timeout` (a mount whose daemon
/// is stopped or hung). The result is a directory's metadata (`Ok(true)`),
/// another file's (`Ok(false)`) or the error. Without a child (none can be
/// started), the probe runs here, unbounded.
fn probe_with_timeout(
    mountpoint: &Path,
    timeout: std::time::Duration,
) -> Option<std::io::Result<bool>> {
    let out = match run_child_bounded(PROBE_SUBCOMMAND, mountpoint, timeout)? {
        Ok(out) => out,
        Err(e) => {
            log::debug!(
                "no probe process ({e}); probing {} here",
                mountpoint.display()
            );
            return Some(probe(mountpoint).map(|m| m.is_dir()));
        }
    };
    Some(match String::from_utf8_lossy(&out).trim() {
        "dir" => Ok(true),
        "notdir" => Ok(false),
        other => {
            let errno = other
                .strip_prefix("errno ")
                .and_then(|n| n.parse::<i32>().ok())
                .unwrap_or(libc::EIO);
            Err(std::io::Error::from_raw_os_error(errno))
        }
    })
}

/// The subcommand that resolves a path in a child process.
const RESOLVE_SUBCOMMAND: &str = "__resolve-path";

/// The body of `sessionfs __resolve-path PATH`: prints [`resolved`] of
/// `path` (its bytes, no newline); exit status 0.
pub fn resolve_child(path: &Path) -> u8 {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    let _ = std::io::stdout().write_all(resolved(path).as_os_str().as_bytes());
    0
}

/// [`resolved`], in a child process bounded by [`PROBE_TIMEOUT`]: a path
/// through a mount whose daemon does not answer (stopped or hung) would
/// block a resolution here for as long, uninterruptibly.
///
/// Errors: a message naming the path and the fix when the child does not
/// answer in time. Without a child, the path is resolved here.
pub fn resolved_bounded(path: &Path) -> Result<PathBuf, String> {
    use std::os::unix::ffi::OsStringExt;
    match run_child_bounded(RESOLVE_SUBCOMMAND, path, PROBE_TIMEOUT) {
        Some(Ok(out)) if !out.is_empty() => Ok(PathBuf::from(std::ffi::OsString::from_vec(out))),
        Some(_) => Ok(resolved(path)),
        None => {
            // Named from the mount table, which nothing of that mount answers.
            let which = match super::mount_table::fuse_mount_above(&spelled_absolute(path)) {
                Some(m) => format!("the mount at {}", m.display()),
                None => "a mount".to_string(),
            };
            Err(format!(
                "{} passes through {which}, whose daemon does not answer (stopped or hung) \
                 within {PROBE_TIMEOUT:?}; unmount it with `umount -l` (or `fusermount3 -u \
                 -z`), or resume that daemon, and retry",
                path.display()
            ))
        }
    }
}

/// `fusermount3` on PATH, if any.
fn fusermount3() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("fusermount3"))
        .find(|p| p.is_file())
}

/// Whether `/etc/fuse.conf` has a `user_allow_other` line.
fn user_allow_other() -> bool {
    std::fs::read_to_string("/etc/fuse.conf")
        .is_ok_and(|t| t.lines().any(|l| l.trim() == "user_allow_other"))
}

/// Access to FUSE: `/dev/fuse` for root; for a normal user, read-write
/// access to `/dev/fuse`, a setuid `fusermount3` and, for `allow_other`,
/// `user_allow_other` in `/etc/fuse.conf`. `auto_unmount` needs
/// `fusermount3` and `allow_root` or `allow_other`.
fn check_fuse_access(config: &MountConfig) -> Result<(), String> {
    let dev = Path::new("/dev/fuse");
    if !dev.exists() {
        return Err(
            "/dev/fuse is missing: load the fuse module (`modprobe fuse`), or give \
                    the container the device (`--device /dev/fuse`)"
                .into(),
        );
    }
    if config.auto_unmount && !(config.allow_other || config.allow_root) {
        return Err(
            "-o auto_unmount needs allow_root or allow_other as well (fusermount3 \
                    requires it); add -o allow_root"
                .into(),
        );
    }
    let helper = fusermount3();
    if config.auto_unmount && helper.is_none() {
        return Err(
            "-o auto_unmount needs the fusermount3 helper, which is not on PATH; \
                    install it (apt-get install fuse3) or drop auto_unmount"
                .into(),
        );
    }
    if geteuid().is_root() {
        return match std::fs::OpenOptions::new().read(true).write(true).open(dev) {
            Ok(_) => Ok(()),
            Err(e) => Err(format!(
                "cannot open /dev/fuse ({e}); mounting needs read-write access to it"
            )),
        };
    }
    let uid = geteuid();
    let Some(helper) = helper else {
        return Err(format!(
            "mounting as a normal user (uid {uid}) needs fusermount3 on PATH (setuid root, \
             from the fuse3 package: apt-get install fuse3), or run as root"
        ));
    };
    if config.allow_other && !user_allow_other() {
        return Err(format!(
            "-o allow_other as a normal user (uid {uid}) needs `user_allow_other` in \
             /etc/fuse.conf; as root: echo user_allow_other >> /etc/fuse.conf (or drop \
             allow_other)"
        ));
    }
    // fusermount3 opens /dev/fuse with the user's own file system uid.
    if access(dev, AccessFlags::R_OK | AccessFlags::W_OK).is_err() {
        return Err(format!(
            "uid {uid} has no read-write access to /dev/fuse, which fusermount3 opens as the \
             user; as root: `chmod 0666 /dev/fuse` (the usual mode, set by udev), or give a \
             group of the user access to it"
        ));
    }
    let setuid = std::fs::metadata(&helper).is_ok_and(|m| m.permissions().mode() & 0o4000 != 0);
    if !setuid {
        return Err(format!(
            "{} is not setuid root, so a normal user cannot mount with it; as root: \
             `chmod u+s {}` (the fuse3 package installs it so)",
            helper.display(),
            helper.display()
        ));
    }
    Ok(())
}

/// Whether ROOT can take writes, judged without writing anything: the
/// file system is not mounted read-only and this process may create
/// entries in the directory. Whether it makes hard links or no-replace
/// renames is found at the first publication.
fn root_takes_writes(root: &Path) -> bool {
    let read_only_fs = nix::sys::statvfs::statvfs(root)
        .is_ok_and(|s| s.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY));
    let writable = access(root, AccessFlags::W_OK | AccessFlags::X_OK).is_ok();
    if read_only_fs || !writable {
        log::warn!(
            "{} cannot take writes ({}); mounting read-only (pass --read-only to silence this)",
            root.display(),
            if read_only_fs {
                "its file system is mounted read-only"
            } else {
                "no write permission"
            }
        );
        return false;
    }
    true
}

/// The message for a failed mount call: what failed and what to do.
pub fn explain_mount_error(config: &MountConfig, e: &io::Error) -> String {
    let hint = if geteuid().is_root() {
        "check `dmesg` for the kernel's reason"
    } else {
        "as a normal user, the mount point must be a directory you own and fusermount3 \
         must be setuid root; check the message above from fusermount3"
    };
    format!(
        "cannot mount {} on {}: {e}; {hint}",
        config.root.display(),
        config.mountpoint.display()
    )
}
