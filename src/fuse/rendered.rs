//! `session.md`: the read-only rendered transcript beside every
//! `session.jsonl` (issue 16). The rendering itself is the store's
//! ([`crate::store::render`]); this module keeps the open renderings of the
//! mount and answers lookup, getattr, open, read and readdir for them.
//!
//! * Listed beside every listed `session.jsonl` (a listing does not open
//!   transcripts, so it costs what it did); found only for a session whose
//!   transcript validates: for a session refused at lookup (damaged
//!   header, duplicate, misplaced, …) lookup of `session.md` fails with
//!   ENOENT.
//! * `getattr` refreshes the transcript and renders what was added, so
//!   `st_size` is exact and growth shows within the attribute timeout; a
//!   read past the rendered end does the same.
//! * A session removed on disk while its `session.md` is open: that
//!   descriptor keeps reading its rendering and `fstat` keeps working (the
//!   open handle's transcript serves the bytes it holds open); a new lookup
//!   fails with ENOENT.
//! * Renderings are persisted with the frame indexes (`--index-cache`):
//!   another mount's `stat` decodes nothing when the transcript did not
//!   grow. Memory holds only each rendering's small state (at most
//!   [`RENDERINGS_KEPT`] open); the Markdown is read from its file.

use std::ffi::OsStr;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;

use lru::LruCache;
use parking_lot::Mutex;

use super::fs::{Attr, FsError, FsResult, Handle, Kind, SessionFs};
use crate::store::render::cache::Rendering;
use crate::store::{Store, StoreError, Transcript};

/// Name of the rendered transcript in a session directory.
pub const RENDERED_NAME: &str = "session.md";

/// Renderings kept open at once (one file descriptor each); older ones are
/// reopened from their persisted state.
pub const RENDERINGS_KEPT: usize = 256;

/// The mount's open renderings, by transcript path.
pub struct Renderings {
    open: Mutex<LruCache<PathBuf, Arc<Rendering>>>,
}

impl Default for Renderings {
    fn default() -> Self {
        Renderings {
            open: Mutex::new(LruCache::new(
                NonZeroUsize::new(RENDERINGS_KEPT).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }
}

impl Renderings {
    /// The rendering of `t`, caught up with its view as last refreshed, and
    /// its length in bytes.
    ///
    /// Errors: the store's errors reading the transcript or the rendering.
    fn caught_up(
        &self,
        store: &Store,
        t: &Transcript,
    ) -> Result<(Arc<Rendering>, u64), StoreError> {
        let rendering = {
            let mut open = self.open.lock();
            match open.get(t.path()) {
                Some(r) => Arc::clone(r),
                None => {
                    let r = Arc::new(Rendering::open(t, store.index_dir())?);
                    open.put(t.path().to_path_buf(), Arc::clone(&r));
                    r
                }
            }
        };
        let len = rendering.catch_up(t)?;
        Ok((rendering, len))
    }
}

impl SessionFs {
    /// Attributes of `session.md`: the transcript's times and owner,
    /// read-only, the rendering's exact length. A session removed on disk
    /// while a `session.md` of it is open keeps the attributes of that
    /// open rendering (`fstat` comes here without its handle), as after an
    /// unlink on a local file system.
    ///
    /// Errors: ENOENT when the session's transcript is refused, or missing
    /// with no `session.md` of it open; the store's errors rendering it.
    pub(super) fn rendered_attr(
        &self,
        ino: u64,
        project: &OsStr,
        session: &OsStr,
    ) -> FsResult<Attr> {
        let (view, len) = match self.store.transcript(project, session) {
            Ok(t) => {
                let view = t.refresh()?;
                (view, self.renderings.caught_up(&self.store, &t)?.1)
            }
            Err(e @ StoreError::NotFound { .. }) => {
                let dir = self
                    .store
                    .backing_path(&std::path::Path::new(project).join(session));
                let Some((t, rendering)) = self.handles.rendering_held_in(&dir) else {
                    return Err(refused(e));
                };
                let view = t.refresh()?;
                (view, rendering.catch_up(&t)?)
            }
            Err(e) => return Err(refused(e)),
        };
        let mut a = super::fs::attr_of(ino, &view.meta);
        a.kind = Kind::File;
        a.size = len;
        a.blocks = len.div_ceil(512);
        a.perm &= 0o444;
        a.nlink = 1;
        Ok(a)
    }

    /// Opens `session.md` for reading.
    ///
    /// Errors: EACCES for a write access mode; ENOENT as
    /// [`SessionFs::rendered_attr`].
    pub(super) fn rendered_open(
        &self,
        project: &OsStr,
        session: &OsStr,
        flags: i32,
    ) -> FsResult<Handle> {
        if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            return Err(FsError::ReadOnlyView);
        }
        let t = self.store.transcript(project, session).map_err(refused)?;
        let (rendering, _) = self.renderings.caught_up(&self.store, &t)?;
        Ok(Handle::Rendered(t, rendering))
    }

    /// Reads `session.md`; a read past the rendered end renders what the
    /// transcript gained first.
    ///
    /// Errors: the store's errors reading the transcript or the rendering.
    pub(super) fn rendered_read(
        &self,
        t: &Arc<Transcript>,
        rendering: &Rendering,
        offset: u64,
        size: u32,
    ) -> FsResult<Vec<u8>> {
        if offset.saturating_add(u64::from(size)) > rendering.len() {
            t.refresh()?;
            rendering.catch_up(t)?;
        }
        Ok(rendering.read(t, offset, size)?)
    }
}

/// A transcript that is refused or missing has no `session.md`.
fn refused(e: StoreError) -> FsError {
    log::debug!("no session.md: {e}");
    FsError::NoEntry
}
