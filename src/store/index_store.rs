//! Frame indexes persisted outside the store, so that a fresh mount need
//! not walk a large transcript again (MOUNT.md, Reading).
//!
//! One file per transcript, `<dir>/<device>-<inode>.idx`, written
//! atomically (temporary + rename). An index is used only when its device
//! and inode match the file, the file is at least as long as the walked
//! prefix, and its first and last frames still walk to the same lengths;
//! otherwise it is ignored and rebuilt. Reads never write into the store.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::frame::{walk_frame, Step};
use super::index::FrameIndex;
use super::transcript::FileIdent;

/// File magic and format version of a persisted index.
const MAGIC: &[u8; 8] = b"SFSIDX1\n";

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
    let bytes = fs::read(index_path(dir, ident)).ok()?;
    let body = bytes.strip_prefix(MAGIC.as_slice())?;
    let stored_ident = FileIdent {
        dev: u64::from_le_bytes(body.get(0..8)?.try_into().ok()?),
        ino: u64::from_le_bytes(body.get(8..16)?.try_into().ok()?),
    };
    if stored_ident != ident {
        return None;
    }
    let index = FrameIndex::from_bytes(&body[16..])?;
    if index.walked_to() > file_len {
        return None;
    }
    let frames = index.frames();
    for f in [frames.first()?, frames.last()?] {
        match walk_frame(file, f.info.offset, file_len) {
            Ok(Step::Frame(info)) if info == f.info => {}
            _ => return None,
        }
    }
    Some(index)
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
        let tmp = target.with_extension(format!("tmp{}", std::process::id()));
        let mut f = File::create(&tmp)?;
        f.write_all(MAGIC)?;
        f.write_all(&ident.dev.to_le_bytes())?;
        f.write_all(&ident.ino.to_le_bytes())?;
        f.write_all(&table)?;
        drop(f);
        fs::rename(&tmp, &target)
    })();
    if let Err(e) = result {
        log::debug!(
            "could not persist a frame index under {}: {e}",
            dir.display()
        );
    }
}
