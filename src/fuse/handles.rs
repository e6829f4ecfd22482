//! The mount's table of open file handles.
//!
//! A writer's own lock is held through publication fsyncs and append-lock
//! waits of up to 10 s. The table's lock is therefore never held while
//! anything else is taken or called: every method copies out what it
//! needs (reference-counted handles) and returns before the caller looks
//! inside a handle, so a stalled writer never stalls the requests of other
//! handles (issue 9).

use std::collections::HashMap;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::writer::Writer;
use crate::store::render::cache::Rendering;
use crate::store::Transcript;

/// An open file of the mount.
#[derive(Clone)]
pub(super) enum Handle {
    /// A `session.jsonl` opened for reading (or a conflict copy), and
    /// whether the kernel caches its pages (then a short read would be
    /// taken for the end of the file: see `Transcript::read_no_short`).
    Transcript(Arc<Transcript>, bool),
    /// `session.md`: its transcript and rendering (`rendered.rs`).
    Rendered(Arc<Transcript>, Arc<Rendering>),
    /// A writable `session.jsonl` (appends buffered per handle).
    Writer(Arc<Writer>),
    /// A passed-through file, opened with the caller's access mode.
    File(Arc<File>),
}

/// File handle number → open file.
pub(super) struct HandleTable {
    table: Mutex<HashMap<u64, Handle>>,
    next: AtomicU64,
}

impl Default for HandleTable {
    fn default() -> Self {
        HandleTable {
            table: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }
}

impl HandleTable {
    /// Adds `handle` and returns its new number (never 0, never reused).
    pub(super) fn insert(&self, handle: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed);
        self.table.lock().insert(fh, handle);
        fh
    }

    /// A second reference to handle `fh`.
    pub(super) fn get(&self, fh: u64) -> Option<Handle> {
        self.table.lock().get(&fh).cloned()
    }

    /// Takes handle `fh` out of the table.
    pub(super) fn remove(&self, fh: u64) -> Option<Handle> {
        self.table.lock().remove(&fh)
    }

    /// The transcript of a reader of `session.jsonl` or `session.md` open
    /// in the session directory `dir` (its backing path), if any: what an
    /// open descriptor still reads once the directory is removed on disk.
    pub(super) fn transcript_held_in(&self, dir: &Path) -> Option<Arc<Transcript>> {
        self.table.lock().values().find_map(|h| match h {
            Handle::Transcript(t, _) | Handle::Rendered(t, _) if t.path().parent() == Some(dir) => {
                Some(Arc::clone(t))
            }
            _ => None,
        })
    }

    /// The transcript and rendering of a `session.md` open in the session
    /// directory `dir` (its backing path), if any.
    pub(super) fn rendering_held_in(
        &self,
        dir: &Path,
    ) -> Option<(Arc<Transcript>, Arc<Rendering>)> {
        self.table.lock().values().find_map(|h| match h {
            Handle::Rendered(t, r) if t.path().parent() == Some(dir) => {
                Some((Arc::clone(t), Arc::clone(r)))
            }
            _ => None,
        })
    }

    /// Every open writer.
    pub(super) fn writers(&self) -> Vec<Arc<Writer>> {
        self.table
            .lock()
            .values()
            .filter_map(|h| match h {
                Handle::Writer(w) => Some(Arc::clone(w)),
                _ => None,
            })
            .collect()
    }

    /// The writers open on transcript inode `ino`.
    pub(super) fn writers_of(&self, ino: u64) -> Vec<Arc<Writer>> {
        let mut writers = self.writers();
        writers.retain(|w| w.ino == ino);
        writers
    }
}
