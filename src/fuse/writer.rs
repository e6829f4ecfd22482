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
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, MutexGuard};

use crate::store::session_writer::{drops_batch, Commit, SessionWriter};
use crate::store::{Store, StoreError, Transcript};

use super::budget::PendingBudget;
use super::error::{FsError, FsResult};

// The longest line a writer may send (bytes, its newline included): a
// line is held whole until its newline arrives, so its length is what the
// handle costs in memory, and the store continues a session only from a
// last line this long at most.
use crate::store::limits::MAX_LINE_BYTES;

/// Pending complete lines are committed at once when they reach this many
/// bytes, whatever the batch window: a frame stays a size that readers can
/// decode whole.
const COMMIT_AT_BYTES: usize = 4 << 20;

/// Longest wait for the session's lock in one commit attempt while the
/// handle's state is locked: between attempts the state is unlocked, so
/// that `stat` and reads of this transcript (which count and show the
/// pending lines) never wait longer than this for a commit stuck behind
/// another machine's lock (up to a lease, 20 s, when that holder died).
const LOCK_WAIT_SLICE: Duration = Duration::from_millis(100);

/// A reader's commit (a read past the committed end) waits this long for
/// the session's lock, once; when it is busy the lines stay pending and
/// the reader is shown them as written.
const READER_LOCK_WAIT: Duration = Duration::from_millis(20);

/// The buffers a released writer dropped (see [`Writer::release`]).
pub struct Dropped {
    partial: Vec<u8>,
    batch: Vec<u8>,
}

impl Dropped {
    /// Bytes of memory the buffers hold (their capacity).
    pub fn capacity(&self) -> usize {
        self.partial.capacity() + self.batch.capacity()
    }
}

/// The pending state of one writing handle.
struct Pending {
    /// The store's write policy for this session: the complete lines
    /// accepted and not committed, and the `seq` cursor after them.
    session: SessionWriter,
    /// An incomplete last line, waiting for the rest of it.
    partial: Vec<u8>,
    /// Bytes of a line refused as longer than [`MAX_LINE_BYTES`] whose
    /// newline has not come yet: none of them is held, and every write
    /// until (and with) that newline fails with EFBIG.
    overlong: Option<u64>,
    /// When the oldest uncommitted line arrived (the batch window's start).
    since: Option<Instant>,
    /// An error the next write, flush or fsync reports (a batch dropped or
    /// a commit failed in the background).
    failed: Option<Arc<FsError>>,
    /// A batch dropped since the last fsync that reported an error: the
    /// next fsync, and every flush, report it even after a write did. The
    /// kernel cuts a `write(2)` of more than 1 MiB into pieces and turns a
    /// later piece's error into a short count, which callers need not
    /// check; only fsync and close acknowledge lines (MOUNT.md,
    /// Appending), so neither may return 0 while a batch of lines written
    /// since went unstored.
    unsynced: Option<Arc<FsError>>,
    /// Bytes charged to the mount's pending budget for the pending lines
    /// and `partial`.
    charged: u64,
}

impl Pending {
    /// Bytes this handle holds uncommitted.
    fn held(&self) -> u64 {
        (self.session.pending().len() + self.partial.len()) as u64
    }
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
    /// The mount's budget of pending bytes, shared by every writer.
    budget: Arc<PendingBudget>,
}

/// What a commit changed, for the caller to tell the kernel.
pub enum Committed {
    /// Nothing was pending.
    Nothing,
    /// A batch was written (or a session published).
    Batch,
}

impl Drop for Writer {
    fn drop(&mut self) {
        let p = self.pending.get_mut();
        self.budget.resize(p.charged, 0);
    }
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
        budget: Arc<PendingBudget>,
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
                overlong: None,
                since: None,
                failed: None,
                unsynced: None,
                charged: 0,
            }),
            budget,
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
    /// ([`SessionWriter::accept`]; nothing of `data` is taken, and a
    /// refused line whose start came in earlier writes is dropped with
    /// that start), or when an earlier batch of this handle was dropped;
    /// EFBIG for a line over 16 MiB, its newline included (dropped with
    /// its start, and every write until its newline fails with EFBIG); a
    /// commit's error when the batch window is 0.
    pub fn write(
        &self,
        store: &Store,
        offset: u64,
        data: &[u8],
        append: bool,
        tail: Option<&Transcript>,
        batch_window: Duration,
    ) -> FsResult<u32> {
        let mut p = self.pending.lock();
        if let Some(e) = p.failed.take() {
            return Err(FsError::Earlier(e));
        }
        let committed_len = tail.map_or(0, |t| t.cached_attr().plain_len);
        let end = committed_len + (p.session.pending().len() + p.partial.len()) as u64;
        if !(self.append_only || append) && offset != end {
            log::warn!(
                "write to {}/session.jsonl at offset {offset} refused: the transcript is \
                 append-only and ends at {end}; open it with O_APPEND (>>) to append",
                self.session_dir().display()
            );
            return Err(FsError::Refused);
        }
        // Charged before anything is taken: at most every byte of `data`
        // stays pending, and the budget is settled to what really stays.
        let wanted = p.held() + data.len() as u64;
        if !self.budget.try_resize(p.charged, wanted) {
            log::warn!(
                "write of {} bytes to {}/session.jsonl refused (ENOSPC): the mount's writers \
                 already hold {} of the {} bytes of --pending-budget uncommitted; end lines \
                 with \\n, close or fsync other writers, or mount with a larger --pending-budget",
                data.len(),
                self.session_dir().display(),
                self.budget.used(),
                self.budget.limit()
            );
            return Err(FsError::PendingBudget);
        }
        p.charged = wanted;
        let r = self.take(store, &mut p, data, tail, batch_window);
        self.settle(&mut p);
        r
    }

    /// Charges the budget with what `p` holds now.
    fn settle(&self, p: &mut Pending) {
        let held = p.held();
        self.budget.resize(p.charged, held);
        p.charged = held;
    }

    /// Splits `data` into lines, checks the complete ones and keeps them
    /// pending (the body of [`Writer::write`]).
    fn take(
        &self,
        store: &Store,
        p: &mut MutexGuard<'_, Pending>,
        data: &[u8],
        tail: Option<&Transcript>,
        batch_window: Duration,
    ) -> FsResult<u32> {
        if let Some(dropped) = p.overlong {
            return Err(self.rest_of_overlong(p, dropped, data));
        }
        // The first line's length, its newline included (still to come
        // when `data` holds none).
        let first_newline = memchr::memchr(b'\n', data);
        let first_line = p.partial.len() + first_newline.map_or(data.len() + 1, |i| i + 1);
        if first_line > MAX_LINE_BYTES {
            log::warn!(
                "write to {}/session.jsonl refused: a line of {first_line} bytes or more, \
                 longer than {MAX_LINE_BYTES}; split the record{}; the writes until its newline \
                 fail too",
                self.session_dir().display(),
                dropped_start(p.partial.len())
            );
            // The line can never be taken: none of it is held, and the rest
            // of it is refused as it comes. A write holding its newline is
            // refused too: a writer whose `write(2)` the kernel cut into
            // pieces sends it again (the short count ended before this
            // piece), and that write ends the line.
            let dropped = p.partial.len()
                + if first_newline.is_none() {
                    data.len()
                } else {
                    0
                };
            p.partial = Vec::new();
            p.overlong = Some(dropped as u64);
            return Err(FsError::LineTooLong);
        }
        let Some(last_newline) = data.iter().rposition(|&b| b == b'\n') else {
            // No line ends here: the bytes wait on the handle, unchecked
            // until their line is complete (linear in the line's length).
            p.partial.extend_from_slice(data);
            return Ok(data.len() as u32);
        };
        let cut = last_newline + 1;
        if data.len() - cut >= MAX_LINE_BYTES {
            return Err(FsError::LineTooLong);
        }
        let mut complete = std::mem::take(&mut p.partial);
        complete.extend_from_slice(&data[..cut]);
        if let Err(e) = p.session.accept_after(store, &complete, tail) {
            let held = complete.len() - cut;
            // A refused line whose start came in earlier writes can never
            // be taken (the start claims its `seq`, or is not JSON): it is
            // dropped whole, so that the handle's next write starts a new
            // line. A refusal of a later line leaves the handle as it was.
            let whole_line = held > 0 && e.refused_line() == Some(1);
            log::warn!(
                "write to {}/session.jsonl refused: {e}{}",
                self.session_dir().display(),
                dropped_start(if whole_line { held } else { 0 })
            );
            if !whole_line {
                complete.truncate(held);
                p.partial = complete;
            }
            return Err(e.into());
        }
        p.partial = data[cut..].to_vec();
        if p.since.is_none() {
            p.since = Some(Instant::now());
        }
        if batch_window.is_zero() || p.session.pending().len() >= COMMIT_AT_BYTES {
            if let Err(e) = self.commit_locked(store, p) {
                p.failed = None; // reported here
                return Err(e);
            }
        }
        Ok(data.len() as u32)
    }

    /// A write of `data` after a line was refused as too long (`dropped`
    /// bytes of it so far), until a write holds a newline: nothing is
    /// taken; a newline in `data` ends that line (the bytes after it are
    /// not taken either: the write failed, and the next one starts a new
    /// line). Returns EFBIG.
    fn rest_of_overlong(&self, p: &mut Pending, dropped: u64, data: &[u8]) -> FsError {
        match memchr::memchr(b'\n', data) {
            None => p.overlong = Some(dropped + data.len() as u64),
            Some(i) => {
                p.overlong = None;
                log::warn!(
                    "write to {}/session.jsonl refused: it ends the line longer than \
                     {MAX_LINE_BYTES} bytes refused before ({} bytes in all, none stored); the \
                     next write starts a new line",
                    self.session_dir().display(),
                    dropped + i as u64 + 1
                );
            }
        }
        FsError::LineTooLong
    }

    /// Commits what is pending (fsync).
    ///
    /// Errors: the error reported by an earlier background commit, or this
    /// commit's (EINVAL when the batch no longer continues the transcript
    /// and was dropped; EEXIST when a session with this id appeared; EIO,
    /// ENOSPC: the batch stays pending and a later fsync retries it).
    pub fn fsync(&self, store: &Store) -> FsResult<Committed> {
        let mut p = self.pending.lock();
        if let Some(e) = p.failed.take() {
            p.unsynced = None; // reported here
            return Err(FsError::Earlier(e));
        }
        let result = self.commit_locked(store, &mut p);
        if result.is_err() {
            p.failed = None; // reported here
            p.unsynced = None;
        } else if let Some(e) = p.unsynced.take() {
            // A batch dropped since the last fsync, reported by a write only.
            return Err(FsError::Earlier(e));
        }
        result
    }

    /// Commits at `flush` (close of a descriptor).
    ///
    /// Errors: as [`Writer::fsync`]; EINVAL when an incomplete line is left
    /// pending (it stays pending: a later write may complete it), and
    /// EINVAL while a batch dropped since the last fsync is unreported by
    /// an fsync (a write may have reported it, as a short count). A
    /// dropped batch's error stays recorded until a write or fsync reports
    /// it.
    pub fn flush(&self, store: &Store) -> FsResult<Committed> {
        let mut p = self.pending.lock();
        // A failure stays recorded after a flush reports it: the flush may
        // come from a forked child closing its copy of the descriptor, and
        // the owner's own fsync, write or close must still see it.
        if let Some(e) = &p.failed {
            return Err(FsError::Earlier(Arc::clone(e)));
        }
        let committed = self.commit_locked(store, &mut p)?;
        if !p.partial.is_empty() {
            log::warn!(
                "close of {}/session.jsonl with an incomplete last line ({} bytes without a \
                 final newline); it is not stored: end every line with \\n",
                self.session_dir().display(),
                p.partial.len()
            );
            return Err(FsError::Invalid);
        }
        if let Some(e) = &p.unsynced {
            // Kept: the owner's fsync must see it too (see above).
            log::warn!(
                "close of {}/session.jsonl fails: a batch written on this descriptor since its \
                 last fsync was dropped ({e}); re-read the end of the transcript and write \
                 the lines that are missing again",
                self.session_dir().display()
            );
            return Err(FsError::Earlier(Arc::clone(e)));
        }
        Ok(committed)
    }

    /// Commits at `release`: the last chance, whose errors reach no one
    /// but the log. An incomplete line is dropped and logged. Returns what
    /// was committed and the buffers of what was dropped (the incomplete
    /// line, a batch that could not be committed), moved out of the writer
    /// so that the caller frees them (see [`super::budget::give_back`]).
    pub fn release(&self, store: &Store) -> (Committed, Dropped) {
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
        }
        // The memory leaves the writer now, not when the last reference to
        // it is dropped.
        let partial = std::mem::take(&mut p.partial);
        let batch = if p.session.pending().is_empty() {
            Vec::new()
        } else {
            p.session.discard(store)
        };
        self.settle(&mut p);
        (committed, Dropped { partial, batch })
    }

    /// Commits what is pending for another writer of the same transcript
    /// (a write at the end from another descriptor) or at unmount: waits
    /// for the session's lock like [`Writer::fsync`] (the handle's state
    /// unlocked between attempts); a dropped batch's error is kept for the
    /// handle's next write, flush or fsync.
    pub fn commit_now(&self, store: &Store) -> Committed {
        let mut p = self.pending.lock();
        if p.failed.is_some() {
            return Committed::Nothing;
        }
        // A dropped batch is kept in `failed` (see `outcome`); a kept one
        // is retried by a later fsync, close or tick.
        self.commit_locked(store, &mut p)
            .unwrap_or(Committed::Nothing)
    }

    /// Commits because a reader reached past the committed end; an error
    /// is kept for the handle's next write, flush or fsync.
    pub fn commit_for_reader(&self, store: &Store) -> Committed {
        let mut p = self.pending.lock();
        if p.failed.is_some() || p.session.pending().is_empty() {
            return Committed::Nothing;
        }
        p.since = None;
        let r = match p.session.commit_waiting_at_most(store, READER_LOCK_WAIT) {
            // Busy: another writer commits; the lines stay pending and a
            // later fsync, close or tick commits them.
            Err(StoreError::LockBusy { .. }) => {
                p.since = Some(Instant::now());
                Ok(Committed::Nothing)
            }
            r => self.outcome(&mut p, r),
        };
        self.settle(&mut p);
        r.unwrap_or(Committed::Nothing)
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

    /// Whether the batch window of the pending lines has expired, without
    /// waiting: a writer whose lock is taken (a request or commit at work)
    /// is not due.
    pub fn is_due(&self, window: Duration) -> bool {
        self.pending
            .try_lock()
            .is_some_and(|p| p.failed.is_none() && p.since.is_some_and(|t| t.elapsed() >= window))
    }

    /// Commits when the batch window has expired; an error is kept for the
    /// handle's next write, flush or fsync. A writer busy in a request (a
    /// commit that may wait for the session's lock) is skipped until a
    /// later tick, so that it does not hold up other writers' windows.
    pub fn commit_if_due(&self, store: &Store, window: Duration) -> Committed {
        let Some(mut p) = self.pending.try_lock() else {
            return Committed::Nothing;
        };
        let due = p.failed.is_none() && p.since.is_some_and(|t| t.elapsed() >= window);
        if !due {
            return Committed::Nothing;
        }
        match self.commit_locked(store, &mut p) {
            Ok(c) => c,
            Err(e) => {
                // A dropped batch is recorded already (`outcome`).
                if p.failed.is_none() {
                    p.failed = Some(Arc::new(e));
                }
                Committed::Nothing
            }
        }
    }

    /// Commits the handle's batch through the store's [`SessionWriter`]
    /// (which applies the drop policy); a dropped batch is recorded for the
    /// handle's next write, flush or fsync, a kept one restarts the window.
    fn commit_locked(&self, store: &Store, p: &mut MutexGuard<'_, Pending>) -> FsResult<Committed> {
        let r = self.commit_pending(store, p);
        self.settle(p);
        r
    }

    /// Commits the batch, waiting for the session's lock in slices of
    /// [`LOCK_WAIT_SLICE`] with the handle's state unlocked in between,
    /// up to the whole lock wait of the commit protocol (then EAGAIN, the
    /// batch kept).
    fn commit_pending(
        &self,
        store: &Store,
        p: &mut MutexGuard<'_, Pending>,
    ) -> FsResult<Committed> {
        p.since = None;
        let deadline = Instant::now() + p.session.lock_wait();
        let mut pause = Duration::from_millis(2);
        loop {
            let r = p.session.commit_waiting_at_most(store, LOCK_WAIT_SLICE);
            match r {
                Err(StoreError::LockBusy { .. }) if Instant::now() < deadline => {
                    MutexGuard::unlocked(p, || std::thread::sleep(pause));
                    pause = (pause * 2).min(Duration::from_millis(50));
                    if let Some(e) = &p.failed {
                        // A reader's or a tick's commit in between dropped
                        // the batch: this commit fails with its error (an
                        // fsync must not return 0 for lines not stored).
                        return Err(FsError::Earlier(Arc::clone(e)));
                    }
                }
                r => return self.outcome(p, r),
            }
        }
    }

    /// Records what a commit attempt did: a dropped batch is kept as the
    /// handle's error, a kept one restarts the window.
    fn outcome(&self, p: &mut Pending, r: crate::store::Result<Commit>) -> FsResult<Committed> {
        match r {
            Ok(Commit::Nothing) => Ok(Committed::Nothing),
            Ok(_) => Ok(Committed::Batch),
            Err(e) if drops_batch(&e) => {
                log::warn!(
                    "batch of {}/session.jsonl dropped: {e}",
                    self.session_dir().display()
                );
                let e = Arc::new(FsError::Store(e));
                p.failed = Some(Arc::clone(&e));
                p.unsynced = Some(Arc::clone(&e));
                Err(FsError::Earlier(e))
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

/// The log's note on the start of a refused line that earlier writes
/// handed over (`held` bytes; nothing when 0): it is dropped with it.
fn dropped_start(held: usize) -> String {
    if held == 0 {
        String::new()
    } else {
        format!(
            "; the line's first {held} bytes, taken by earlier writes, are dropped with it: \
             write the whole line again"
        )
    }
}
