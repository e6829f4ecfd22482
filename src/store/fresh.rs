//! Attributes as the server holds them, past the client's caches.
//!
//! A network client caches attributes: sshfs with its default options
//! answers `stat` by path from a cache for up to 20 s, even with
//! `AT_STATX_FORCE_SYNC`, and the kernel keeps a FUSE client's attributes
//! for its attribute timeout. What reaches the server on every client
//! tried (sshfs with and without `dir_cache`, NFS, CIFS) is an `open` of
//! the file followed by `statx(AT_STATX_FORCE_SYNC)` on that descriptor;
//! measured on sshfs over loopback: fresh at once, 0.4 ms a call, where a
//! plain `stat` stayed stale for 20 s. Local file systems need none of
//! it: there a plain `stat` is the truth.
//!
//! Source: MOUNT.md ("Shared roots": learn the real length from the
//! server, not from the client's cached size).

use std::fs::{File, Metadata, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::fskind::CommitProtocol;

/// (device, inode, size in bytes) by `statx`, forcing the client to ask
/// its server on [`CommitProtocol::Remote`]. `path` is relative to `fd`
/// (empty: the descriptor itself; `fd` may be `AT_FDCWD`).
///
/// Errors: the `statx(2)` error; EINVAL for a path holding a NUL byte.
pub(crate) fn statx_at(
    fd: i32,
    path: &Path,
    protocol: CommitProtocol,
) -> io::Result<(u64, u64, u64)> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut flags = libc::AT_STATX_SYNC_AS_STAT;
    if path.as_os_str().is_empty() {
        flags |= libc::AT_EMPTY_PATH;
    }
    if protocol == CommitProtocol::Remote {
        flags |= libc::AT_STATX_FORCE_SYNC;
    }
    // SAFETY: a zeroed statx is a valid value; `c` is a valid C string and
    // `fd` an open descriptor (or AT_FDCWD).
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statx(fd, c.as_ptr(), flags, libc::STATX_BASIC_STATS, &mut st) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    let dev = libc::makedev(st.stx_dev_major, st.stx_dev_minor);
    Ok((dev, st.stx_ino, st.stx_size))
}

/// The metadata of the file at `path` as the server holds it: on
/// [`CommitProtocol::Local`] a plain `stat`; on [`CommitProtocol::Remote`]
/// an `open(O_RDONLY)` and `statx(AT_STATX_FORCE_SYNC)` of that
/// descriptor, whose answer also refreshes the attributes every other
/// descriptor of the file sees through the kernel.
///
/// Errors: the `stat(2)`, `open(2)` or `statx(2)` error (NotFound when the
/// file is gone; EACCES when it is not readable).
pub fn server_metadata(path: &Path, protocol: CommitProtocol) -> io::Result<Metadata> {
    if protocol == CommitProtocol::Local {
        return std::fs::metadata(path);
    }
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)?;
    statx_at(file.as_raw_fd(), Path::new(""), protocol)?;
    file.metadata()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn both_protocols_see_the_file_as_it_is_now() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        let mut f = File::create(&path).unwrap();
        f.write_all(b"0123456789").unwrap();
        for protocol in [CommitProtocol::Local, CommitProtocol::Remote] {
            let m = server_metadata(&path, protocol).unwrap();
            let plain = std::fs::metadata(&path).unwrap();
            assert_eq!((m.len(), m.ino(), m.dev()), (10, plain.ino(), plain.dev()));
            let (dev, ino, size) = statx_at(libc::AT_FDCWD, &path, protocol).unwrap();
            assert_eq!((dev, ino, size), (plain.dev(), plain.ino(), 10));
        }
        f.write_all(b"abc").unwrap();
        assert_eq!(
            server_metadata(&path, CommitProtocol::Remote)
                .unwrap()
                .len(),
            13
        );
        let gone = dir.path().join("gone");
        for protocol in [CommitProtocol::Local, CommitProtocol::Remote] {
            let e = server_metadata(&gone, protocol).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::NotFound);
        }
    }
}
