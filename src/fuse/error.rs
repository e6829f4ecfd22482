//! The mount's one error type and its one errno map: every errno the mount
//! replies with comes from [`FsError::errno`], which hands store errors to
//! [`StoreError::errno`] (the store's own map) and maps the mount's own
//! refusals here. No handler builds an errno by hand.

use std::sync::Arc;

use crate::store::session_writer::drops_batch;
use crate::store::StoreError;

/// An error of a mount operation.
#[derive(Debug)]
pub enum FsError {
    /// The store refused or failed (logged with its path and fix).
    /// errno: [`StoreError::errno`].
    Store(StoreError),
    /// No such entry in the mount: an inode number the mount never gave
    /// out, a name file managers probe for, a store-internal name that is
    /// never shown (MOUNT.md, The tree; Details). errno: ENOENT.
    NoEntry,
    /// A directory operation on something that is not a directory.
    /// errno: ENOTDIR.
    NotDir,
    /// A file operation (open) on a directory. errno: EISDIR.
    IsDir,
    /// A file handle the mount does not know, or of the wrong kind for the
    /// call (a write through a read-only transcript handle). errno: EBADF.
    BadHandle,
    /// `readlink` of something that is not a symbolic link. errno: EINVAL.
    NotLink,
    /// A change the mount never makes: truncating or rewriting a
    /// transcript, removing or renaming store-owned names, sessions or
    /// projects, changing ownership (MOUNT.md, Appending). The refusal is
    /// logged where it is decided. errno: EPERM.
    Refused,
    /// The name exists (mkdir, O_EXCL create). errno: EEXIST.
    Exists,
    /// rmdir of a directory that still holds entries. errno: ENOTEMPTY.
    NotEmpty,
    /// A request refused as malformed: a directory name that is not a
    /// canonical project key or encoded id, a written line that is not
    /// accepted, an incomplete last line at close, a rename flag the mount
    /// does not pass through. errno: EINVAL.
    Invalid,
    /// A line longer than a writer may hold (16 MiB). errno: EFBIG.
    LineTooLong,
    /// The mount's budget of pending (uncommitted) bytes is spent
    /// (`--pending-budget`, MOUNT.md, Appending). errno: ENOSPC.
    PendingBudget,
    /// A system call on a passed-through file failed. errno: the OS
    /// error's own code, EIO when it has none.
    Io(std::io::Error),
    /// A write open of `session.md`, a rendering the mount computes: read
    /// only whatever the mount's mode. errno: EACCES.
    ReadOnlyView,
    /// A write open of `.sessionfs-status`, the mount's own report.
    /// errno: EROFS.
    ReadOnlyStatus,
    /// An ioctl: none is served (Python's `open` probes TCGETS).
    /// errno: ENOTTY.
    NoIoctl,
    /// Extended attributes: none are kept; ENOSYS also tells the kernel
    /// not to ask again. errno: ENOSYS.
    NoXattrs,
    /// A passed-through inode whose recorded name now names another file
    /// or none (renamed or replaced outside this mount): the request is
    /// not carried out on whatever is there now. errno: ESTALE.
    Stale,
    /// A handler panicked (a bug); the adapter's wrapper caught it and the
    /// mount goes on. errno: EIO.
    Internal,
    /// An error recorded on a write handle by a commit nobody waited for
    /// (the batch window, a reader's commit), reported by the handle's next
    /// write, flush or fsync. errno: that error's.
    Earlier(Arc<FsError>),
}

impl FsError {
    /// The errno to reply with: the one map of the mount. A backing file
    /// system's ENOTCONN or ECONNABORTED (a network client whose link or
    /// server is gone) is EIO here: from a FUSE mount those two mean that
    /// its own daemon is dead, to tools and to `sessionfs mount` alike,
    /// which would then take a live mount for a stale one (the log names
    /// the backing path and its error).
    pub fn errno(&self) -> i32 {
        match self.own_errno() {
            libc::ENOTCONN | libc::ECONNABORTED => libc::EIO,
            errno => errno,
        }
    }

    fn own_errno(&self) -> i32 {
        match self {
            FsError::Store(e) => e.errno(),
            FsError::NoEntry => libc::ENOENT,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::BadHandle => libc::EBADF,
            FsError::NotLink | FsError::Invalid => libc::EINVAL,
            FsError::Refused => libc::EPERM,
            FsError::Exists => libc::EEXIST,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::LineTooLong => libc::EFBIG,
            FsError::PendingBudget => libc::ENOSPC,
            FsError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            FsError::ReadOnlyView => libc::EACCES,
            FsError::ReadOnlyStatus => libc::EROFS,
            FsError::NoIoctl => libc::ENOTTY,
            FsError::NoXattrs => libc::ENOSYS,
            FsError::Stale => libc::ESTALE,
            FsError::Internal => libc::EIO,
            FsError::Earlier(e) => e.errno(),
        }
    }

    /// Whether the error means damage or a failure worth a warning in the
    /// log (a store error other than a missing entry), as opposed to a
    /// plain refusal or absence, which the deciding site logged already.
    /// Lines a writer refused or a batch it dropped (the store errors of
    /// [`drops_batch`]) are refusals: the writer logged them when it
    /// refused them (fuse::writer).
    pub fn is_damage(&self) -> bool {
        match self {
            FsError::Store(e) => e.is_damage() && !drops_batch(e),
            FsError::Earlier(e) => e.is_damage(),
            _ => false,
        }
    }
}

impl std::fmt::Display for FsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FsError::Store(e) => write!(f, "{e}"),
            FsError::Io(e) => write!(f, "{e}"),
            FsError::Earlier(e) => write!(f, "an earlier commit of this handle failed: {e}"),
            other => write!(f, "{}", std::io::Error::from_raw_os_error(other.errno())),
        }
    }
}

impl From<StoreError> for FsError {
    fn from(e: StoreError) -> Self {
        FsError::Store(e)
    }
}

/// Result of a mount operation.
pub type FsResult<T> = Result<T, FsError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_variant_maps_to_its_documented_errno() {
        let io = || std::io::Error::from_raw_os_error(libc::ENOSPC);
        let cases = [
            (FsError::NoEntry, libc::ENOENT),
            (FsError::NotDir, libc::ENOTDIR),
            (FsError::IsDir, libc::EISDIR),
            (FsError::BadHandle, libc::EBADF),
            (FsError::NotLink, libc::EINVAL),
            (FsError::Refused, libc::EPERM),
            (FsError::Exists, libc::EEXIST),
            (FsError::NotEmpty, libc::ENOTEMPTY),
            (FsError::Invalid, libc::EINVAL),
            (FsError::LineTooLong, libc::EFBIG),
            (FsError::PendingBudget, libc::ENOSPC),
            (FsError::NoIoctl, libc::ENOTTY),
            (FsError::NoXattrs, libc::ENOSYS),
            (FsError::Stale, libc::ESTALE),
            (FsError::Internal, libc::EIO),
            (FsError::Io(io()), libc::ENOSPC),
            (FsError::Io(std::io::Error::other("no code")), libc::EIO),
            (
                FsError::Store(StoreError::AlreadyExists {
                    path: "/r/p/s".into(),
                }),
                libc::EEXIST,
            ),
            (
                FsError::Earlier(Arc::new(FsError::Store(StoreError::TornTail {
                    path: "/r/p/s".into(),
                    offset: 7,
                }))),
                libc::EIO,
            ),
        ];
        for (e, errno) in cases {
            assert_eq!(e.errno(), errno, "{e:?}");
        }
    }

    #[test]
    fn a_backing_clients_lost_connection_is_eio_never_enotconn() {
        for lost in [libc::ENOTCONN, libc::ECONNABORTED] {
            let backing = std::io::Error::from_raw_os_error(lost);
            let store = FsError::Store(StoreError::io("stat", "/net/root".as_ref(), backing));
            assert_eq!(store.errno(), libc::EIO);
            let io = FsError::Io(std::io::Error::from_raw_os_error(lost));
            assert_eq!(io.errno(), libc::EIO);
        }
    }
}
