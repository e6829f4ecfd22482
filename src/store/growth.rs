//! How a transcript seen before stands now, from its metadata alone:
//! transcripts only grow (FORMAT.md), so one that is shorter, or of the
//! same length under another mtime, was rewritten in place. Used by the
//! view catalog and the persisted renderings.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;

/// A modification time: (seconds, nanoseconds).
pub type Mtime = (i64, i64);

/// A file's modification time.
pub fn mtime_of(meta: &Metadata) -> Mtime {
    (meta.mtime(), meta.mtime_nsec())
}

/// What became of a file seen at `len` bytes and `mtime` (the same file:
/// the caller compares device and inode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// The same length and mtime.
    Unchanged,
    /// Longer: appended to.
    Grown,
    /// Shorter, or the same length under another mtime.
    Rewritten,
}

/// How the file seen at `len` bytes and `mtime` stands as `now`.
pub fn since(len: u64, mtime: Mtime, now: &Metadata) -> Since {
    match now.len() {
        n if n > len => Since::Grown,
        n if n == len && mtime_of(now) == mtime => Since::Unchanged,
        _ => Since::Rewritten,
    }
}
