//! Frame indexes persisted outside the store, so that a fresh mount need
//! not walk a large transcript again (MOUNT.md, Reading).
//!
//! One file per transcript, `<dir>/<device>-<inode>.idx`, written
//! atomically (temporary + rename). An index is used only when its device
//! and inode match the file, the file is at least as long as the walked
//! prefix, and its last frame still walks to the same length (the only
//! read of the transcript a load makes);
//! otherwise it is ignored and rebuilt. An index that passes this check
//! yet lists a frame the file no longer holds (the file rewritten in
//! place) is removed by the first read that meets that frame
//! ([`remove`]), and the file walked again. Reads never write into the
//! store.
//!
//! Format 2 (`SFSIDX2\n`): the magic (8 bytes), then little-endian
//! `u64`s: device, inode, `walked_to`, the frame count, the count of wide
//! records; then the index's compact table exactly as it is held in memory
//! (see [`super::index`]): 12 bytes a frame, plus 32 bytes for each frame
//! that does not fit them or does not follow the previous one directly.
//! 20,001 frames are 240 KiB, read with two `pread`s (the preamble, then
//! the table straight into the index's own buffers; a third for wide
//! records when there are any) and checked in one
//! pass that also computes the marks; no parse into structs. A file of
//! format 1 (`SFSIDX1\n`, 33 bytes a frame parsed into a vector of 64-byte
//! structs: 1–1.7 ms for 20,001 frames in a fresh process) or of any other
//! magic is ignored, and the next save replaces it.
//!
//! Nothing on disk is trusted: the counts must be exactly what the file's
//! length holds (so buffers are sized by the file's own length), with no
//! more frames than the transcript's length could hold; frames must be in
//! order, not overlapping, within `walked_to`, each plain length within
//! its blocks' bound, no sum overflowing; and the last frame's header is
//! walked again in the transcript. There is no checksum: an entry altered
//! in the middle to other plausible values goes unseen until its frame is
//! read, and then fails to decode where the index says (every frame read
//! is decoded and checked against its length, its checksum when it has
//! one, and its last byte), a read error rather than wrong bytes.

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::frame::{walk_frame, Step};
use super::index::{table_lens, FrameIndex};
use super::transcript::FileIdent;

/// File magic and format version of a persisted index.
const MAGIC: &[u8; 8] = b"SFSIDX2\n";

/// Bytes before the table: magic, device, inode, `walked_to`, counts.
const PREAMBLE: usize = 8 + 5 * 8;

/// The smallest data frame the walker delimits (magic, descriptor, one
/// byte of window or size, one block header): no transcript holds more
/// frames than its length over this.
const MIN_FRAME_BYTES: u64 = 9;

/// Transcripts with fewer frames are cheap to walk and not persisted.
pub const MIN_PERSISTED_FRAMES: usize = 256;

/// The default location: `$XDG_CACHE_HOME/sessionfs/index`, else
/// `$HOME/.cache/sessionfs/index`; `None` when neither is set.
pub fn default_index_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("sessionfs").join("index"))
}

fn index_path(dir: &Path, ident: FileIdent) -> PathBuf {
    dir.join(format!("{:x}-{:x}.idx", ident.dev, ident.ino))
}

/// Loads the persisted index of the file `ident` (open as `file`, of
/// `file_len` bytes), if there is a valid one.
pub fn load(dir: &Path, ident: FileIdent, file: &File, file_len: u64) -> Option<FrameIndex> {
    let stored = File::open(index_path(dir, ident)).ok()?;
    let stored_len = stored.metadata().ok()?.len();
    let mut preamble = [0u8; PREAMBLE];
    stored.read_exact_at(&mut preamble, 0).ok()?;
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&preamble[at..at + 8]);
        u64::from_le_bytes(b)
    };
    if &preamble[..8] != MAGIC.as_slice() {
        return None;
    }
    let stored_ident = FileIdent {
        dev: u64_at(8),
        ino: u64_at(16),
    };
    let (walked_to, count, wides) = (u64_at(24), u64_at(32), u64_at(40));
    if stored_ident != ident || walked_to > file_len || count > file_len / MIN_FRAME_BYTES + 1 {
        return None;
    }
    // The counts must be what the file's length holds (and no more frames
    // than the transcript could): the buffers are sized by the file's own
    // length, never by a count alone.
    let (entries_len, wides_len) =
        table_lens(count, wides, stored_len.checked_sub(PREAMBLE as u64)?)?;
    let mut entries = vec![0u8; entries_len];
    stored.read_exact_at(&mut entries, PREAMBLE as u64).ok()?;
    let mut wide_records = vec![0u8; wides_len];
    if wides_len > 0 {
        stored
            .read_exact_at(&mut wide_records, (PREAMBLE + entries_len) as u64)
            .ok()?;
    }
    let index = FrameIndex::from_table(walked_to, entries, wide_records)?;
    // Checked by reading its last frame's header (and block headers)
    // only: the file must still hold that frame where the index says.
    let last = index.frames().last()?;
    match walk_frame(file, last.info.offset, file_len) {
        Ok(Step::Frame(info)) if info == last.info => Some(index),
        _ => None,
    }
}

/// Removes the persisted index of the file `ident` (the transcript at
/// `transcript`, named in the log), found not to describe the file: its
/// load check passed, yet a frame it lists is not in the file (rewritten
/// in place, same inode, same last frame). Logged at info level; a missing
/// index or a failed removal is not an error (the next save replaces it).
pub fn remove(dir: &Path, ident: FileIdent, transcript: &Path) {
    let path = index_path(dir, ident);
    match fs::remove_file(&path) {
        Ok(()) => log::info!(
            "{}: the persisted frame index {} no longer matched the file (rewritten in place?); \
             removed, and the file walked again",
            transcript.display(),
            path.display()
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => log::debug!("could not remove the stale index {}: {e}", path.display()),
    }
}

/// Saves `index` for the file `ident`. Failures are logged at debug level
/// and otherwise ignored: the index is only a cache.
pub fn save(dir: &Path, ident: FileIdent, index: &FrameIndex) {
    let Some(table) = index.to_bytes() else {
        return;
    };
    let result = (|| -> std::io::Result<()> {
        fs::create_dir_all(dir)?;
        let target = index_path(dir, ident);
        // A temporary file of its own (two threads or mounts may save
        // the same index at once), renamed over the target.
        let mut f = tempfile::Builder::new()
            .prefix(".idx-")
            .suffix(".tmp")
            .tempfile_in(dir)?;
        f.write_all(MAGIC)?;
        f.write_all(&ident.dev.to_le_bytes())?;
        f.write_all(&ident.ino.to_le_bytes())?;
        f.write_all(&table)?;
        f.persist(&target).map_err(|e| e.error)?;
        Ok(())
    })();
    if let Err(e) = result {
        log::debug!(
            "could not persist a frame index under {}: {e}",
            dir.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frame::encode_frame;
    use std::os::unix::fs::MetadataExt;

    /// A transcript of `n` small frames under `dir`, its index walked.
    fn transcript(dir: &Path, n: usize) -> (PathBuf, FileIdent, FrameIndex) {
        let mut bytes = Vec::new();
        for i in 0..n {
            bytes.extend(encode_frame(format!("{{\"n\":{i}}}\n").as_bytes()).unwrap());
        }
        let path = dir.join("session.jsonl.zstd");
        fs::write(&path, &bytes).unwrap();
        let meta = fs::metadata(&path).unwrap();
        let ident = FileIdent {
            dev: meta.dev(),
            ino: meta.ino(),
        };
        let mut index = FrameIndex::new();
        let mut decoded = 0;
        index
            .extend(bytes.as_slice(), bytes.len() as u64, &mut decoded)
            .unwrap();
        (path, ident, index)
    }

    fn load_of(dir: &Path, path: &Path, ident: FileIdent) -> Option<FrameIndex> {
        let file = File::open(path).unwrap();
        let len = file.metadata().unwrap().len();
        load(dir, ident, &file, len)
    }

    #[test]
    fn a_saved_index_loads_and_a_format_1_file_is_ignored_then_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("index");
        let (path, ident, index) = transcript(tmp.path(), 300);
        save(&dir, ident, &index);
        let loaded = load_of(&dir, &path, ident).expect("a saved index loads");
        assert_eq!(loaded.frames(), index.frames());
        assert_eq!(loaded.walked_to(), index.walked_to());
        assert_eq!(loaded.plain_len(), index.plain_len());
        let saved = fs::read(index_path(&dir, ident)).unwrap();
        assert_eq!(saved.len(), PREAMBLE + 300 * crate::store::index::ENTRY);

        // Format 1: the same preamble and a table of 33 bytes a frame.
        let mut old = b"SFSIDX1\n".to_vec();
        old.extend_from_slice(&ident.dev.to_le_bytes());
        old.extend_from_slice(&ident.ino.to_le_bytes());
        old.extend_from_slice(&index.walked_to().to_le_bytes());
        old.extend_from_slice(&300u64.to_le_bytes());
        for f in index.frames().iter() {
            for w in [f.info.offset, f.info.len, f.plain_len, f.plain_len] {
                old.extend_from_slice(&w.to_le_bytes());
            }
            old.push(3);
        }
        fs::write(index_path(&dir, ident), &old).unwrap();
        assert!(
            load_of(&dir, &path, ident).is_none(),
            "a format-1 file was used"
        );
        save(&dir, ident, &index);
        assert_eq!(fs::read(index_path(&dir, ident)).unwrap(), saved);
        assert!(load_of(&dir, &path, ident).is_some());
    }

    #[test]
    fn a_file_whose_counts_or_length_disagree_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("index");
        let (path, ident, index) = transcript(tmp.path(), 300);
        save(&dir, ident, &index);
        let good = fs::read(index_path(&dir, ident)).unwrap();
        let with = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut b = good.clone();
            edit(&mut b);
            fs::write(index_path(&dir, ident), &b).unwrap();
            load_of(&dir, &path, ident)
        };
        let set =
            |b: &mut Vec<u8>, at: usize, v: u64| b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        assert!(with(&|b| b.truncate(b.len() - 1)).is_none(), "truncated");
        assert!(with(&|b| b.truncate(PREAMBLE)).is_none(), "table cut off");
        assert!(with(&|b| b.truncate(20)).is_none(), "preamble cut off");
        assert!(
            with(&|b| b.extend_from_slice(&[0; 12])).is_none(),
            "an entry too many"
        );
        assert!(
            with(&|b| set(b, 32, 301)).is_none(),
            "count above what the file holds"
        );
        assert!(with(&|b| set(b, 32, u64::MAX)).is_none(), "a huge count");
        assert!(
            with(&|b| set(b, 40, 1)).is_none(),
            "a wide record that is not there"
        );
        assert!(
            with(&|b| set(b, 24, u64::MAX)).is_none(),
            "walked past the file"
        );
        assert!(
            with(&|b| set(b, 16, ident.ino ^ 1)).is_none(),
            "another inode"
        );
        // Many more frames than the transcript could hold, the file's
        // length agreeing.
        let mut many = good[..PREAMBLE].to_vec();
        let count = fs::metadata(&path).unwrap().len() / MIN_FRAME_BYTES + 2;
        many[32..40].copy_from_slice(&count.to_le_bytes());
        many.resize(PREAMBLE + count as usize * crate::store::index::ENTRY, 0);
        fs::write(index_path(&dir, ident), &many).unwrap();
        assert!(
            load_of(&dir, &path, ident).is_none(),
            "more frames than bytes"
        );
        // The good file still loads.
        fs::write(index_path(&dir, ident), &good).unwrap();
        assert!(load_of(&dir, &path, ident).is_some());
    }
}
