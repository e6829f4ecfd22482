//! How a transcript seen before stands now, from its metadata alone:
//! transcripts only grow (FORMAT.md), so one that is shorter, or of the
//! same length under another mtime, was rewritten in place. Used by the
//! view catalog; an open transcript and its rendering also look at the
//! ctime and at the last bytes they saw ([`Seen`]), which appends never
//! change.

use std::fs::{File, Metadata};
use std::os::unix::fs::{FileExt, MetadataExt};

use serde::{Deserialize, Serialize};

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

/// How many bytes before the seen length [`Seen`] keeps.
const TAIL: usize = 8;

/// What a reader saw of a file: its length (bytes), mtime and ctime
/// (seconds, nanoseconds), and its last bytes before that length (up to
/// 8: the end of the last frame, its content checksum in a zstd
/// transcript). Appends change none of those bytes, so a longer file
/// whose bytes there differ was rewritten in place (a longer copy put over
/// it); a file of the same length, mtime and link count whose ctime
/// changed was written to and its mtime put back (or only had its mode or
/// owner changed: read again all the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub len: u64,
    pub mtime: Mtime,
    pub ctime: Mtime,
    /// The link count: an unlink or a link moves the ctime too, and is no
    /// rewrite.
    nlink: u64,
    tail: [u8; TAIL],
}

impl Seen {
    /// What `file` (whose metadata is `meta`) holds now. Unreadable tail
    /// bytes count as zeros (a later look then reads them, or fails too).
    pub fn of(file: &File, meta: &Metadata) -> Seen {
        Seen {
            len: meta.len(),
            mtime: mtime_of(meta),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            nlink: meta.nlink(),
            tail: tail_before(file, meta.len()).unwrap_or_default(),
        }
    }

    /// The up to 8 bytes before the seen length (zero-padded in front for
    /// a shorter file; zeros when they could not be read).
    pub fn tail(&self) -> [u8; TAIL] {
        self.tail
    }

    /// How `file`, the same file (device and inode) now of metadata `now`,
    /// stands since this look: one read of up to 8 bytes when it grew.
    pub fn since(&self, file: &File, now: &Metadata) -> Since {
        match since(self.len, self.mtime, now) {
            Since::Unchanged
                if (now.ctime(), now.ctime_nsec()) != self.ctime && now.nlink() == self.nlink =>
            {
                Since::Rewritten
            }
            Since::Grown if tail_before(file, self.len) != Some(self.tail) => Since::Rewritten,
            other => other,
        }
    }
}

/// The up to 8 bytes of `file` before byte `len` (zero-padded in front
/// when `len` is shorter); `None` when they cannot be read.
fn tail_before(file: &File, len: u64) -> Option<[u8; TAIL]> {
    let n = (len as usize).min(TAIL);
    let mut out = [0u8; TAIL];
    file.read_exact_at(&mut out[TAIL - n..], len - n as u64)
        .ok()?;
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn a_longer_copy_put_over_a_file_is_no_growth() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, b"0123456789").unwrap();
        let file = File::open(&path).unwrap();
        let seen = Seen::of(&file, &file.metadata().unwrap());
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"more").unwrap();
        assert_eq!(seen.since(&file, &file.metadata().unwrap()), Since::Grown);
        // Same inode, a longer text that differs before the old end.
        std::fs::write(&path, b"0123456780-longer").unwrap();
        assert_eq!(
            seen.since(&file, &file.metadata().unwrap()),
            Since::Rewritten
        );
    }

    #[test]
    fn a_rewrite_whose_mtime_was_put_back_is_seen_by_its_ctime() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, b"abc").unwrap();
        let file = File::open(&path).unwrap();
        let meta = file.metadata().unwrap();
        let seen = Seen::of(&file, &meta);
        assert_eq!(seen.since(&file, &meta), Since::Unchanged);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&path, b"abd").unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        f.set_modified(meta.modified().unwrap()).unwrap();
        let now = file.metadata().unwrap();
        assert_eq!(mtime_of(&now), seen.mtime, "the mtime was put back");
        assert_eq!(seen.since(&file, &now), Since::Rewritten);
    }
}
