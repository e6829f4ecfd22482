//! Rewrite verdicts on network roots, confirmed from the file's bytes.
//!
//! A transcript only grows (FORMAT.md, "Transcript encoding"), so a file
//! seen shorter than before, or of the same length under another mtime,
//! was rewritten in place ([`super::growth::since`]). That holds for the
//! attributes a local file system gives. A network client's are not
//! monotonic: over sshfs, with writers on two machines, the length a
//! forced `statx` of a fresh descriptor reports was now and then one frame
//! shorter than the length seen a moment before (the file on the server
//! only grew; the client answered from an attribute cache that a
//! concurrent write had made stale), and the mtime has whole seconds only
//! (SFTP carries no nanoseconds and no ctime). Taken for rewrites, those
//! looks threw the view away and walked the whole transcript again, 20 to
//! 30 times in 12 s.
//!
//! So on [`CommitProtocol::Remote`] such a verdict is put to the bytes the
//! view relies on before the view is dropped: through a fresh descriptor
//! (`O_DIRECT` where the client accepts it, so neither the page cache nor
//! a descriptor's cached state answers), the 8 bytes before the length
//! seen must be what they were, and the last indexed frame's header must
//! still walk to the same frame at its offset. If both hold the file still
//! holds everything the view serves, and the verdict was a stale length
//! ([`Confirmed::Stale`]); if either is gone or differs, it is a rewrite
//! ([`Confirmed::Rewritten`]). A file cut shorter on the server cannot pass
//! (its bytes before the seen length are gone), nor can one whose frames
//! moved.
//!
//! What it cannot see: a rewrite of the same length that keeps the last
//! frame and the last 8 bytes and changes bytes before them only. On a
//! network root those are read as they are when a frame is next decoded
//! from the file (the frame's checksum, length and last byte are checked
//! at every decode).
//!
//! Source: FORMAT.md ("Transcript encoding": transcripts only grow),
//! MOUNT.md ("Shared roots": attributes are cached per client).

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::frame::{walk_frame, FrameInfo, Step};
use super::fskind::CommitProtocol;
use super::lease::open_fresh_read;

/// What the bytes say about a file that its attributes call rewritten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confirmed {
    /// The bytes the view relies on are there as they were: the length or
    /// mtime reported was stale, and the view stays.
    Stale,
    /// They changed, are gone, or the path names another file now: the
    /// view is built again.
    Rewritten,
}

/// What a view relies on in its file: which file (device and inode), the
/// length it was seen at (bytes) and the 8 bytes before that length
/// (zero-padded in front for a shorter file), and the last frame it
/// indexed, if any (a raw view has none).
#[derive(Debug, Clone, Copy)]
pub struct Relied {
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
    pub tail: [u8; 8],
    pub last_frame: Option<FrameInfo>,
}

/// Stale verdicts found by [`confirm`] in this process: a counter for
/// tests and `.sessionfs-status`.
static STALE_VERDICTS: AtomicU64 = AtomicU64::new(0);

/// How many rewrite verdicts [`confirm`] found stale in this process.
pub fn stale_verdicts_total() -> u64 {
    STALE_VERDICTS.load(Ordering::Relaxed)
}

/// Puts a rewrite verdict about the file at `path` to its bytes (see the
/// module docs). Opens the file afresh (`O_DIRECT` first on
/// [`CommitProtocol::Remote`]) and reads at most 8 bytes and one frame
/// header (with its block headers).
///
/// Errors: the `open(2)` or `fstat(2)` error of the fresh descriptor, and
/// read errors other than the end of the file (which is an answer: the
/// bytes are gone). A caller that gets one keeps today's judgement, a
/// rewrite.
pub fn confirm(path: &Path, relied: &Relied, protocol: CommitProtocol) -> io::Result<Confirmed> {
    let fresh = open_fresh_read(path, protocol)?;
    let meta = fresh.metadata()?;
    if (meta.dev(), meta.ino()) != (relied.dev, relied.ino) {
        return Ok(Confirmed::Rewritten);
    }
    let verdict = match tail_now(path, &fresh, relied.len)? {
        Some(tail) if tail == relied.tail => match relied.last_frame {
            Some(info) if !frame_walks_the_same(path, &fresh, &info)? => Confirmed::Rewritten,
            _ => Confirmed::Stale,
        },
        // Other bytes there, or the file ends before them.
        _ => Confirmed::Rewritten,
    };
    if verdict == Confirmed::Stale {
        STALE_VERDICTS.fetch_add(1, Ordering::Relaxed);
    }
    Ok(verdict)
}

/// The up to 8 bytes of `file` before byte `len` (zero-padded in front
/// when `len` is shorter); `None` when the file ends before `len`. An
/// `O_DIRECT` read the client refuses (EINVAL) is made again through a
/// plain fresh descriptor of `path`.
fn tail_now(path: &Path, file: &File, len: u64) -> io::Result<Option<[u8; 8]>> {
    let n = len.min(8) as usize;
    let mut out = [0u8; 8];
    match read_at(path, file, &mut out[8 - n..], len - n as u64)? {
        true => Ok(Some(out)),
        false => Ok(None),
    }
}

/// Whether `file` still holds the frame `info` at its offset (its header
/// and block headers walk to the same frame). A walk that does not (an
/// `O_DIRECT` read the client refused fails it too) is made once more
/// through a plain fresh descriptor of `path`: only a frame that walks
/// otherwise through both is taken as moved.
///
/// Errors: the `open(2)` error of that second descriptor.
fn frame_walks_the_same(path: &Path, file: &File, info: &FrameInfo) -> io::Result<bool> {
    let same = |f: &File| matches!(walk_frame(f, info.offset, u64::MAX), Ok(Step::Frame(found)) if found == *info);
    Ok(same(file) || same(&open_fresh_read(path, CommitProtocol::Local)?))
}

/// Fills `buf` from `offset` of `file`: true when it could, false when the
/// file ends first. EINVAL (an `O_DIRECT` read refused) retries through a
/// plain fresh descriptor of `path`.
///
/// Errors: any other read error.
fn read_at(path: &Path, file: &File, buf: &mut [u8], offset: u64) -> io::Result<bool> {
    let r = match file.read_exact_at(buf, offset) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            open_fresh_read(path, CommitProtocol::Local)?.read_exact_at(buf, offset)
        }
        r => r,
    };
    match r {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frame::encode_frame;
    use std::io::Write;

    /// A file of three small frames under `dir`, and what a view of it
    /// relies on.
    fn framed(dir: &Path) -> (std::path::PathBuf, Relied) {
        let path = dir.join("session.jsonl.zstd");
        let frames: Vec<Vec<u8>> = (0..3)
            .map(|i| encode_frame(format!("{{\"n\":{i}}}\n").as_bytes()).unwrap())
            .collect();
        let bytes = frames.concat();
        std::fs::write(&path, &bytes).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let last_len = frames[2].len() as u64;
        let len = bytes.len() as u64;
        let last_frame = match walk_frame(&bytes[..], len - last_len, len).unwrap() {
            Step::Frame(info) => info,
            other => panic!("{other:?}"),
        };
        let mut tail = [0u8; 8];
        tail.copy_from_slice(&bytes[bytes.len() - 8..]);
        let relied = Relied {
            dev: meta.dev(),
            ino: meta.ino(),
            len,
            tail,
            last_frame: Some(last_frame),
        };
        (path, relied)
    }

    fn verdict(path: &Path, relied: &Relied) -> Confirmed {
        confirm(path, relied, CommitProtocol::Remote).unwrap()
    }

    /// A file that only grew holds what the view relies on: whatever its
    /// attributes said, the verdict was stale.
    #[test]
    fn a_file_that_only_grew_is_a_stale_verdict() {
        let dir = tempfile::tempdir().unwrap();
        let (path, relied) = framed(dir.path());
        assert_eq!(verdict(&path, &relied), Confirmed::Stale);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(&encode_frame(b"{\"n\":3}\n").unwrap()).unwrap();
        assert_eq!(verdict(&path, &relied), Confirmed::Stale);
    }

    /// Cut shorter, other bytes before the seen length, the last frame
    /// moved, or another file at the path: a rewrite.
    #[test]
    fn a_cut_a_changed_tail_a_moved_frame_or_another_file_is_a_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let (path, relied) = framed(dir.path());
        let bytes = std::fs::read(&path).unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        // Cut by one byte.
        f.set_len(relied.len - 1).unwrap();
        assert_eq!(verdict(&path, &relied), Confirmed::Rewritten);
        // The same length, the last byte changed.
        f.set_len(0).unwrap();
        let mut other = bytes.clone();
        *other.last_mut().unwrap() ^= 0xff;
        f.write_all_at(&other, 0).unwrap();
        assert_eq!(verdict(&path, &relied), Confirmed::Rewritten);
        // The tail as it was, the last frame's header changed (its
        // descriptor's single-segment flag and content size no longer
        // walk to the same frame).
        let mut moved = bytes.clone();
        let at = relied.last_frame.unwrap().offset as usize;
        moved[at..at + 4].copy_from_slice(&[0; 4]);
        f.write_all_at(&moved, 0).unwrap();
        assert_eq!(verdict(&path, &relied), Confirmed::Rewritten);
        // The same bytes under another inode.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(verdict(&path, &relied), Confirmed::Rewritten);
    }

    /// A raw view (no frame) relies on its tail bytes alone, also when the
    /// file is shorter than 8 bytes.
    #[test]
    fn a_raw_view_relies_on_its_tail_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        std::fs::write(&path, b"{}\n").unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        let relied = Relied {
            dev: meta.dev(),
            ino: meta.ino(),
            len: 3,
            tail: [0, 0, 0, 0, 0, b'{', b'}', b'\n'],
            last_frame: None,
        };
        assert_eq!(verdict(&path, &relied), Confirmed::Stale);
        std::fs::write(&path, b"{}\n{}\n").unwrap();
        assert_eq!(verdict(&path, &relied), Confirmed::Stale);
        std::fs::write(&path, b"[]\n").unwrap();
        assert_eq!(verdict(&path, &relied), Confirmed::Rewritten);
    }
}
