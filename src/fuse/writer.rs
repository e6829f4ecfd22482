//! Appends through the mount: per-handle buffering of written bytes into
//! complete lines, checks on arrival and at commit, and commits of one
//! frame per batch (MOUNT.md, Appending and Creating a session).
//!
//! A [`Writer`] belongs to one open file handle of a `session.jsonl`. Bytes
//! are split into lines as they arrive; every complete line is checked
//! against the committed tail plus the lines still pending on the handle,
//! and a write request holding a bad line is refused whole (EINVAL).
//! Pending lines are committed at fsync, at flush (close), when the batch
//! window expires, and at release; a batch that another writer made stale
//! is dropped and the handle's next write, flush or fsync fails (EINVAL).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::store::session_writer::{drops_batch, Commit, SessionWriter};
use crate::store::Store;

use super::fs::{FsError, FsResult};

/// Longest line a writer may send (bytes): a line is held whole until its
/// newline arrives, so its length is what the handle costs in memory.
const MAX_LINE_BYTES: usize = 16 << 20;

/// Pending complete lines are committed at once when they reach this many
/// bytes, whatever the batch window: a frame stays a size that readers can
/// decode whole.
const COMMIT_AT_BYTES: usize = 4 << 20;

/// The pending state of one writing handle.
struct Pending {
    /// The store's write policy for this session: the complete lines
    /// accepted and not committed, and the `seq` cursor after them.
    session: SessionWriter,
    /// An incomplete last line, waiting for the rest of it.
    partial: Vec<u8>,
    /// When the oldest uncommitted line arrived (the batch window's start).
    since: Option<Instant>,
    /// An error the next write, flush or fsync reports (a batch dropped or
    /// a commit failed in the background).
    failed: Option<i32>,
}

/// One open, writable `session.jsonl`.
pub struct Writer {
    /// The mount's inode of the transcript.
    pub ino: u64,
    project: OsString,
    session: OsString,
    /// Opened with O_APPEND: the offset of every write is ignored.
    append_only: bool,
    pending: Mutex<Pending>,
}

/// What a commit changed, for the caller to tell the kernel.
pub enum Committed {
    /// Nothing was pending.
    Nothing,
    /// A batch was written (or a session published).
    Batch,
}

impl Writer {
    /// A writer for `project/session`'s transcript. The committed tail is
    /// read now so that lines can be checked as they arrive.
    ///
    /// Errors: the store's error when the existing transcript cannot be
    /// validated or continued ([`SessionWriter::open`]).
    pub fn open(
        store: &Store,
        ino: u64,
        project: OsString,
        session: OsString,
        append_only: bool,
    ) -> FsResult<Writer> {
        let writer = SessionWriter::open(store, &project, &session)?
            .with_commit_options(super::crash_hook::commit_options());
        Ok(Writer {
            ino,
            project,
            session,
            append_only,
            pending: Mutex::new(Pending {
                session: writer,
                partial: Vec::new(),
                since: None,
                failed: None,
            }),
        })
    }

    /// The session directory, relative to the root.
    pub fn session_dir(&self) -> PathBuf {
        Path::new(&self.project).join(&self.session)
    }

    /// Whether this writer has not yet published its new session.
    pub fn is_unpublished(&self) -> bool {
        !self.pending.lock().session.is_published()
    }

    /// Accepts `data` written at `offset` (ignored for O_APPEND handles or
    /// when `append` is set); `committed_len` is the transcript's committed
    /// length. Returns the bytes taken (all of them).
    ///
    /// Errors: EPERM for a write that is not at the end (inside committed
    /// data or past it); EINVAL when a complete line is not one valid JSON
    /// object continuing `seq` or a header not naming this directory
    /// ([`SessionWriter::accept`]; nothing is taken), or when an earlier
    /// batch of this handle was dropped; EFBIG for a line over 16 MiB; a
    /// commit's error when the batch window is 0.
    pub fn write(
        &self,
        store: &Store,
        offset: u64,
        data: &[u8],
        append: bool,
        committed_len: u64,
        batch_window: Duration,
    ) -> FsResult<u32> {
        let mut p = self.pending.lock();
        if let Some(errno) = p.failed.take() {
            return Err(FsError::Errno(errno));
        }
        let end = committed_len + (p.session.pending().len() + p.partial.len()) as u64;
        if !(self.append_only || append) && offset != end {
            log::warn!(
                "write to {}/session.jsonl at offset {offset} refused: the transcript is \
                 append-only and ends at {end}; open it with O_APPEND (>>) to append",
                self.session_dir().display()
            );
            return Err(FsError::Errno(libc::EPERM));
        }
        let Some(last_newline) = data.iter().rposition(|&b| b == b'\n') else {
            // No line ends here: the bytes wait on the handle, unchecked
            // until their line is complete (linear in the line's length).
            if p.partial.len() + data.len() > MAX_LINE_BYTES {
                log::warn!(
                    "write to {}/session.jsonl refused: a line longer than {MAX_LINE_BYTES} \
                     bytes; split the record",
                    self.session_dir().display()
                );
                return Err(FsError::Errno(libc::EFBIG));
            }
            p.partial.extend_from_slice(data);
            return Ok(data.len() as u32);
        };
        let cut = last_newline + 1;
        if data.len() - cut > MAX_LINE_BYTES {
            return Err(FsError::Errno(libc::EFBIG));
        }
        let mut complete = std::mem::take(&mut p.partial);
        complete.extend_from_slice(&data[..cut]);
        if let Err(e) = p.session.accept(store, &complete) {
            log::warn!(
                "write to {}/session.jsonl refused: {e}",
                self.session_dir().display()
            );
            complete.truncate(complete.len() - cut);
            p.partial = complete;
            return Err(e.into());
        }
        p.partial = data[cut..].to_vec();
        if p.since.is_none() {
            p.since = Some(Instant::now());
        }
        if batch_window.is_zero() || p.session.pending().len() >= COMMIT_AT_BYTES {
            if let Err(e) = self.commit_locked(store, &mut p) {
                p.failed = None; // reported here
                return Err(e);
            }
        }
        Ok(data.len() as u32)
    }

    /// Commits what is pending (fsync).
    ///
    /// Errors: the error reported by an earlier background commit, or this
    /// commit's (EINVAL when the batch no longer continues the transcript
    /// and was dropped; EEXIST when a session with this id appeared; EIO,
    /// ENOSPC: the batch stays pending and a later fsync retries it).
    pub fn fsync(&self, store: &Store) -> FsResult<Committed> {
        let mut p = self.pending.lock();
        if let Some(errno) = p.failed.take() {
            return Err(FsError::Errno(errno));
        }
        let result = self.commit_locked(store, &mut p);
        if result.is_err() {
            p.failed = None; // reported here
        }
        result
    }

    /// Commits at `flush` (close of a descriptor).
    ///
    /// Errors: as [`Writer::fsync`]; EINVAL when an incomplete line is left
    /// pending (it stays pending: a later write may complete it). A dropped
    /// batch's error stays recorded until a write or fsync reports it.
    pub fn flush(&self, store: &Store) -> FsResult<Committed> {
        let mut p = self.pending.lock();
        // A failure stays recorded after a flush reports it: the flush may
        // come from a forked child closing its copy of the descriptor, and
        // the owner's own fsync, write or close must still see it.
        if let Some(errno) = p.failed {
            return Err(FsError::Errno(errno));
        }
        let committed = self.commit_locked(store, &mut p)?;
        if !p.partial.is_empty() {
            log::warn!(
                "close of {}/session.jsonl with an incomplete last line ({} bytes without a \
                 final newline); it is not stored: end every line with \\n",
                self.session_dir().display(),
                p.partial.len()
            );
            return Err(FsError::Errno(libc::EINVAL));
        }
        Ok(committed)
    }

    /// Commits at `release`: the last chance, whose errors reach no one
    /// but the log. An incomplete line is dropped and logged.
    pub fn release(&self, store: &Store) -> Committed {
        let mut p = self.pending.lock();
        let committed = match self.commit_locked(store, &mut p) {
            Ok(c) => c,
            Err(e) => {
                log::error!(
                    "{} uncommitted bytes of {}/session.jsonl lost at release: errno {}",
                    p.session.pending().len(),
                    self.session_dir().display(),
                    e.errno()
                );
                Committed::Nothing
            }
        };
        if !p.partial.is_empty() {
            log::warn!(
                "{} bytes of an incomplete last line of {}/session.jsonl dropped at release \
                 (no final newline); they are not stored",
                p.partial.len(),
                self.session_dir().display()
            );
            p.partial.clear();
        }
        committed
    }

    /// Commits because a reader reached past the committed end; an error
    /// is kept for the handle's next write, flush or fsync.
    pub fn commit_for_reader(&self, store: &Store) -> Committed {
        let mut p = self.pending.lock();
        if p.failed.is_some() {
            return Committed::Nothing;
        }
        self.commit_locked(store, &mut p)
            .unwrap_or(Committed::Nothing)
    }

    /// The bytes accepted on this handle and not committed: pending
    /// complete lines, then the incomplete last line.
    pub fn pending_bytes(&self) -> Vec<u8> {
        let p = self.pending.lock();
        let mut out = p.session.pending().to_vec();
        out.extend_from_slice(&p.partial);
        out
    }

    /// Length in bytes of the complete lines accepted on this handle and
    /// not yet committed (an incomplete last line is not counted): what
    /// this handle adds to the transcript's size (MOUNT.md, Attributes).
    pub fn pending_complete_len(&self) -> u64 {
        self.pending.lock().session.pending().len() as u64
    }

    /// Commits when the batch window has expired; an error is kept for the
    /// handle's next write, flush or fsync.
    pub fn commit_if_due(&self, store: &Store, window: Duration) -> Committed {
        let mut p = self.pending.lock();
        let due = p.failed.is_none() && p.since.is_some_and(|t| t.elapsed() >= window);
        if !due {
            return Committed::Nothing;
        }
        match self.commit_locked(store, &mut p) {
            Ok(c) => c,
            Err(e) => {
                p.failed = Some(e.errno());
                Committed::Nothing
            }
        }
    }

    /// Commits the handle's batch through the store's [`SessionWriter`]
    /// (which applies the drop policy); a dropped batch is recorded for the
    /// handle's next write, flush or fsync, a kept one restarts the window.
    fn commit_locked(&self, store: &Store, p: &mut Pending) -> FsResult<Committed> {
        p.since = None;
        match p.session.commit(store) {
            Ok(Commit::Nothing) => Ok(Committed::Nothing),
            Ok(_) => Ok(Committed::Batch),
            Err(e) if drops_batch(&e) => {
                log::warn!(
                    "batch of {}/session.jsonl dropped: {e}",
                    self.session_dir().display()
                );
                p.failed = Some(e.errno());
                Err(e.into())
            }
            Err(e) => {
                log::warn!(
                    "commit of {}/session.jsonl failed: {e}",
                    self.session_dir().display()
                );
                p.since = Some(Instant::now());
                Err(e.into())
            }
        }
    }
}
