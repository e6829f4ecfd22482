//! The permission bits of an entry made through the mount (MOUNT.md, The
//! tree: pass-through entries behave as on the backing file system). The
//! kernel has already applied the caller's umask to the mode it sends
//! (the mount does not ask for `FUSE_DONT_MASK`); the backing `mkdir(2)`,
//! `mknod(2)` or `open(2)` then applies the daemon's own umask on top, so a
//! caller whose umask is 0 would get `0755` for a `0777` directory. The
//! bits that second mask took are given back here, and only those: a bit
//! the backing file system adds itself (the set-group-ID bit a directory
//! inherits) stays.

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::OnceLock;

/// The daemon's umask, read once from `/proc/self/status`; `0o7777` when
/// it cannot be read (every entry is then checked).
fn daemon_umask() -> u32 {
    static UMASK: OnceLock<u32> = OnceLock::new();
    *UMASK.get_or_init(|| {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                let line = s.lines().find(|l| l.starts_with("Umask:"))?;
                u32::from_str_radix(line["Umask:".len()..].trim(), 8).ok()
            })
            .unwrap_or(0o7777)
    })
}

/// The bits of `asked` (permission bits, `0o7777`) that the daemon's
/// umask takes away.
fn taken(asked: u32) -> u32 {
    asked & 0o7777 & daemon_umask()
}

/// Gives the entry just made at `path` the permission bits of `asked` the
/// daemon's umask took: one `lstat` and one `chmod` that does not follow a
/// symbolic link (so a link put there meanwhile is never followed), and
/// nothing at all when the umask took none.
///
/// Errors: the `lstat` or `chmod` error.
pub(super) fn give_back(path: &Path, asked: u32) -> std::io::Result<()> {
    use nix::sys::stat::{fchmodat, FchmodatFlags, Mode};
    let missing = taken(asked);
    if missing == 0 {
        return Ok(());
    }
    let mode = (std::fs::symlink_metadata(path)?.permissions().mode() & 0o7777) | missing;
    let mode = Mode::from_bits_truncate(mode as nix::libc::mode_t);
    fchmodat(
        nix::fcntl::AT_FDCWD,
        path,
        mode,
        FchmodatFlags::NoFollowSymlink,
    )
    .map_err(std::io::Error::from)
}

/// [`give_back`] for a file just created and open as `file` (`fchmod`).
///
/// Errors: the `fstat` or `fchmod` error.
pub(super) fn give_back_open(file: &File, asked: u32) -> std::io::Result<()> {
    let missing = taken(asked);
    if missing == 0 {
        return Ok(());
    }
    let mode = (file.metadata()?.permissions().mode() & 0o7777) | missing;
    file.set_permissions(std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bits_the_daemon_umask_took_come_back_and_no_others() {
        let dir = tempfile::tempdir().unwrap();
        let umask = daemon_umask();
        assert!(umask <= 0o7777);
        let d = dir.path().join("d");
        std::fs::create_dir(&d).unwrap();
        give_back(&d, 0o777).unwrap();
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o777, "umask {umask:o}");
        let f = File::create(dir.path().join("f")).unwrap();
        give_back_open(&f, 0o640).unwrap();
        let mode = f.metadata().unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode & 0o640, 0o640);
        assert_eq!(mode & !0o666, 0, "nothing beyond what create gave");
        // A symbolic link is never followed.
        std::os::unix::fs::symlink(&d, dir.path().join("l")).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        let _ = give_back(&dir.path().join("l"), 0o777);
        let mode = std::fs::metadata(&d).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode, 0o700);
    }
}
