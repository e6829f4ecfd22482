//! Appending one batch of complete lines to a committed transcript: the
//! commit protocol, the same on every root.
//!
//! Source: FORMAT.md ("Writing": Append, Continuity) and MOUNT.md
//! ("Appending", "Shared roots"). Steps of one commit
//! ([`append_with_options`]):
//!
//! 1. open the transcript read-write (never `O_APPEND`, never truncating);
//! 2. take the session's lock file ([`super::lease`]: exclusive create,
//!    lease renewed by a thread; a dead holder's lock is taken over once
//!    its lease ended);
//! 3. check that the path still names the open file (device, inode) and
//!    reopen it when it does not;
//! 4. take an open-file-description lock on it as well where the file
//!    system gives one (it serializes with older sessionfs versions on one
//!    kernel);
//! 5. learn the real length from the server through a fresh descriptor
//!    (`statx(AT_STATX_FORCE_SYNC)` on remote kinds), confirm the tail is
//!    complete and continue `seq` from the real last line; a torn frame
//!    beyond the length recorded by a dead holder whose lock was taken over
//!    is cut, its bytes kept in quarantine; any other torn tail is given
//!    [`TORN_TAIL_WAIT`] to complete, then refused;
//! 6. record that length in the lock body, build and check the batch;
//! 7. `pwrite` the frame at that offset and fsync (a failure is undone by
//!    truncating back, while the lease allows);
//! 8. read the frame back through a fresh descriptor (`O_DIRECT` where the
//!    client accepts it) and compare it byte for byte, and check the file
//!    ends where the frame ends;
//! 9. check the lease once more, then acknowledge (return) and remove the
//!    lock.
//!
//! A holder whose lease expired never writes, truncates or acknowledges:
//! the lease is checked before each of those steps. Anything unexpected
//! fails the commit with [`StoreError::CommitFailed`] (EIO) and a log line
//! saying what was found. Nothing is written when the batch is empty.
//!
//! # API for the other layers
//! * [`append_with`] and [`append_batch`] keep their call shapes; they run
//!   the protocol with [`CommitOptions::default`] (lease from
//!   [`LeaseConfig::default`], protocol detected from the file system of
//!   the session directory, holder [`HolderId::current`], quarantine under
//!   `$XDG_STATE_HOME`).
//! * [`append_with_options`] takes a [`CommitOptions`] (lease, protocol,
//!   holder, quarantine folder, test hooks).
//! * New errors: [`StoreError::LockBusy`] (EAGAIN: the lock stayed held by
//!   a live holder for [`LeaseConfig::wait`], 45 s by default; nothing
//!   written) and [`StoreError::CommitFailed`] (EIO: not acknowledged; when
//!   it comes after the write, the frame may be stored, so re-read the tail
//!   before retrying).
//! * Environment overrides for tests: `SESSIONFS_LEASE_MS`,
//!   `SESSIONFS_HOST_ID`, `SESSIONFS_BOOT_ID`, `SESSIONFS_CLOCK_OFFSET_MS`
//!   ([`super::lease`]) and `SESSIONFS_FS_KIND` ([`super::fskind`]).
//! * The mount's start-up calls [`super::fskind::detect`], logs the kind
//!   once ([`super::fskind::FsInfo::log_once`]) and mounts read-only when
//!   [`super::fskind::FsInfo::writability`] says why it must.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use super::classify::{classify, Failure, WalkEnd};
use super::error::{Result, StoreError};
use super::frame::{encode_frame, walk_frame, FrameError, FrameInfo, FrameKind, Step};
use super::fresh::statx_at;
use super::fskind::{self, CommitProtocol};
use super::lease::{self, HolderId, LeaseConfig, LockGuard};
use super::lines::SeqCursor;
use super::quarantine::{self, Quarantine};
use super::tail::{last_line_of_frames, last_raw_line, next_seq_from_last_line, prev_newline};
use super::transcript::Encoding;

/// How long a torn tail is given to complete (another writer may still be
/// writing it) before each re-check.
pub const TORN_TAIL_WAIT: Duration = Duration::from_millis(50);

/// How many times a torn tail that keeps changing is re-checked before the
/// append gives up (a tail that did not change fails at the first re-check).
const TORN_TAIL_CHECKS: usize = 5;

/// How many times the transcript is reopened when its path keeps naming
/// another file.
const REOPENS: usize = 3;

/// The committed end of a transcript, read under the append lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendTail {
    /// The `seq` the batch's first line must have (0 after the header).
    pub next_seq: u64,
    /// Length of the backing file: the end of its last complete frame
    /// (zstd) or line (raw). The batch is written here.
    pub file_len: u64,
}

/// A known frame boundary of a transcript, from an earlier append, so that
/// the next append walks only the frames added since instead of the whole
/// file. Used only while the file keeps its device and inode and is at
/// least `offset` bytes long; otherwise the file is walked from the start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailHint {
    /// Device of the backing file.
    pub dev: u64,
    /// Inode of the backing file.
    pub ino: u64,
    /// End of a complete frame (zstd) or line (raw) of the file.
    pub offset: u64,
    /// The next expected `seq` at `offset`.
    pub next_seq: u64,
}

/// What an append wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendOutcome {
    /// Where the new frame (raw: the new lines) starts in the backing file.
    pub frame_offset: u64,
    /// Its length in the backing file (0 when the batch was empty and
    /// nothing was written).
    pub frame_len: u64,
    /// Length of the backing file after the append.
    pub new_file_len: u64,
    /// Decompressed bytes appended (the batch's length).
    pub plain_len: u64,
    /// Lines appended.
    pub lines: usize,
    /// The batch's first `seq` (the tail's next seq).
    pub first_seq: u64,
    /// The next expected `seq` after the batch.
    pub next_seq: u64,
    /// The new end, to pass to the next [`append_with`] on this file.
    pub hint: TailHint,
}

/// A hook called with the transcript's path.
pub type PathHook = Box<dyn Fn(&Path) + Send + Sync>;

/// A hook called with the transcript's path and the frame's offset.
pub type OffsetHook = Box<dyn Fn(&Path, u64) + Send + Sync>;

/// Test hooks of the commit protocol, called at fixed points with the
/// transcript's path (and, after the write, the frame's offset).
#[derive(Default)]
pub struct CommitHooks {
    /// After the lock file is held, before the identity check.
    pub after_lock: Option<PathHook>,
    /// After the batch is built, before the lease check and the write.
    pub before_write: Option<PathHook>,
    /// After the write and fsync, before the read-back.
    pub after_write: Option<OffsetHook>,
}

/// How a commit runs; [`Default`] is what every sessionfs writer uses.
#[derive(Clone, Default)]
pub struct CommitOptions {
    /// Lease durations; `None`: [`LeaseConfig::default`] (15 s, or
    /// `SESSIONFS_LEASE_MS`).
    pub lease: Option<LeaseConfig>,
    /// Protocol; `None`: detected from the session directory's file system
    /// ([`fskind::protocol_for`]).
    pub protocol: Option<CommitProtocol>,
    /// Lock holder identity; `None`: [`HolderId::current`].
    pub holder: Option<HolderId>,
    /// Quarantine base for cut bytes; `None`: [`quarantine::base_dir`].
    pub quarantine: Option<PathBuf>,
    /// Test hooks.
    pub hooks: Option<Arc<CommitHooks>>,
}

impl std::fmt::Debug for CommitOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitOptions")
            .field("lease", &self.lease)
            .field("protocol", &self.protocol)
            .field("holder", &self.holder)
            .field("quarantine", &self.quarantine)
            .field("hooks", &self.hooks.is_some())
            .finish()
    }
}

/// Appends `batch` (complete lines) to the transcript at `path`, after
/// `expected` has approved the tail read under the lock (it may, say,
/// refuse a tail that moved since the caller last looked). The batch is
/// always checked too: every line one valid event or packed row, `seq`
/// continuing the tail.
///
/// Errors: as [`append_with`].
pub fn append_batch(
    path: &Path,
    encoding: Encoding,
    batch: &[u8],
    expected: impl FnOnce(&AppendTail) -> Result<()>,
) -> Result<AppendOutcome> {
    append_with(path, encoding, None, |tail| {
        expected(tail)?;
        Ok(batch.to_vec())
    })
}

/// Appends the batch that `build` makes from the tail read under the lock:
/// a caller that numbers its lines from `tail.next_seq` can never conflict
/// with another sessionfs writer. An empty batch writes nothing. Runs the
/// commit protocol of the module docs with [`CommitOptions::default`].
///
/// Errors: [`StoreError::NotFound`] when there is no transcript;
/// [`StoreError::LockBusy`] (EAGAIN) when the session's lock stayed held by
/// a live holder for the whole wait; [`StoreError::TornTail`] (EIO) when
/// the last frame stays incomplete; [`StoreError::CommitFailed`] (EIO) when
/// the lease expired, the path kept naming another file, or the read-back
/// differed (a frame written but not proven is settled first: acknowledged
/// when found in its place, else the error says whether its lines are not
/// stored or may be), or when a failed write or fsync could not be undone
/// (its lines may be stored);
/// [`StoreError::InvalidLine`] / [`StoreError::SeqConflict`] (EINVAL) for a
/// batch that is not valid complete lines continuing the tail (nothing is
/// written); [`StoreError::Corrupt`] / [`StoreError::HeaderLess`] when the
/// committed transcript cannot be continued; [`StoreError::Io`] for the
/// locks, the write (ENOSPC, EIO, EFBIG) or the fsync; any error of
/// `build`.
pub fn append_with(
    path: &Path,
    encoding: Encoding,
    hint: Option<&TailHint>,
    build: impl FnOnce(&AppendTail) -> Result<Vec<u8>>,
) -> Result<AppendOutcome> {
    append_with_options(path, encoding, hint, &CommitOptions::default(), build)
}

/// [`append_with`] with explicit [`CommitOptions`].
///
/// Errors: as [`append_with`].
pub fn append_with_options(
    path: &Path,
    encoding: Encoding,
    hint: Option<&TailHint>,
    opts: &CommitOptions,
    build: impl FnOnce(&AppendTail) -> Result<Vec<u8>>,
) -> Result<AppendOutcome> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let protocol = opts.protocol.unwrap_or_else(|| fskind::protocol_for(dir));
    let cfg = opts.lease.unwrap_or_default();
    let holder = opts.holder.clone().unwrap_or_else(HolderId::current);
    let hooks = opts.hooks.as_deref();

    let mut file = open_rw(path)?;
    let guard = lease::acquire(dir, path, &cfg, protocol, &holder)?;
    if let Some(f) = hooks.and_then(|h| h.after_lock.as_ref()) {
        f(path);
    }
    let (dev, ino) = settle_identity(path, &mut file, protocol)?;
    take_ofd_lock(path, &file)?;
    let hint = hint.filter(|h| h.dev == dev && h.ino == ino);
    let quarantine = opts
        .quarantine
        .clone()
        .or_else(|| quarantine::base_dir().ok());
    let tail = settled_tail(
        path,
        &file,
        protocol,
        encoding,
        hint,
        &guard,
        quarantine.as_deref(),
    )?;
    guard.record_len(tail.file_len)?;

    let batch = build(&tail)?;
    let mut cursor = SeqCursor::after(tail.next_seq);
    let check = cursor.check_batch(&batch).map_err(|e| e.into_store(path))?;
    if batch.last().is_some_and(|&b| b != b'\n') {
        return Err(StoreError::InvalidLine {
            path: path.to_path_buf(),
            line: check.lines + 1,
            reason: "the line has no newline at its end (a batch holds complete lines only)".into(),
        });
    }
    let mut outcome = AppendOutcome {
        frame_offset: tail.file_len,
        frame_len: 0,
        new_file_len: tail.file_len,
        plain_len: batch.len() as u64,
        lines: check.lines,
        first_seq: tail.next_seq,
        next_seq: cursor.next_seq(),
        hint: TailHint {
            dev,
            ino,
            offset: tail.file_len,
            next_seq: tail.next_seq,
        },
    };
    if batch.is_empty() {
        return Ok(outcome);
    }
    let bytes = match encoding {
        Encoding::Zstd => encode_frame(&batch).map_err(|e| StoreError::io("compress", path, e))?,
        Encoding::Raw => batch,
    };
    if let Some(f) = hooks.and_then(|h| h.before_write.as_ref()) {
        f(path);
    }
    guard.check(path, "writing the frame")?;
    write_durably(path, &file, &bytes, tail.file_len, &guard)?;
    if let Some(f) = hooks.and_then(|h| h.after_write.as_ref()) {
        f(path, tail.file_len);
    }
    let end = tail.file_len + bytes.len() as u64;
    let read = guard
        .check(path, "reading the frame back")
        .and_then(|()| read_back(path, protocol, encoding, &bytes, tail.file_len));
    let frame_whole = read.is_ok();
    let checked = read
        .and_then(|len| {
            if len == end {
                return Ok(());
            }
            Err(read_back_failed(
                path,
                tail.file_len,
                format!(
                    "the file is {len} bytes long, not {end}: another writer wrote during the \
                     commit"
                ),
            ))
        })
        .and_then(|()| guard.check(path, "acknowledging the frame"));
    // Written and synced, but not proven. While the lease holds, no other
    // sessionfs writer acted: a frame that does not read back whole in its
    // place is not stored. Else (the lease ended, or the frame is whole but
    // the file went on) the commit is settled once our locks are gone (the
    // settlement takes them again, as any writer would).
    let unproven = match checked {
        Ok(()) => None,
        Err(first) if guard.valid() && !frame_whole => return Err(not_stored(first)),
        Err(first) => Some(first),
    };
    drop(file); // releases the OFD lock
    drop(guard); // removes the lock file
    if let Some(first) = unproven {
        settle_unacknowledged(path, encoding, protocol, opts, &bytes, tail.file_len, first)?;
    }
    outcome.frame_len = bytes.len() as u64;
    outcome.new_file_len = end;
    outcome.hint.offset = outcome.new_file_len;
    outcome.hint.next_seq = outcome.next_seq;
    Ok(outcome)
}

/// `e`, a commit failure under a lease that held, saying that the lines
/// are not stored.
fn not_stored(e: StoreError) -> StoreError {
    match e {
        StoreError::CommitFailed { path, found } => StoreError::CommitFailed {
            path,
            found: format!(
                "{found}; the lease held, so no other writer acted: its lines are not stored"
            ),
        },
        other => other,
    }
}

/// Settles a commit whose frame (`bytes` at `offset`) was written and
/// synced but not acknowledged: its read-back failed, or its lease ended
/// (a stopped or cut-off writer whose lock another writer took over, and
/// that writer kept the frame: the client's retry then stored its lines
/// twice; found by a fresh tester). Takes the locks again as any writer
/// does, so the tail is settled first (a dead holder's torn frame cut,
/// complete frames kept), and looks at the frame's place under them: the
/// frame there byte for byte, walking as one complete frame, stays in the
/// transcript for good (no writer cuts a complete frame that verifiable
/// frames may follow), so the commit is acknowledged; anything else there
/// means it is not stored.
///
/// Errors: [`StoreError::CommitFailed`] (EIO) saying the lines are not
/// stored (writing them again is safe), or, when the check itself fails
/// (the lock stays busy, the file cannot be read), that they may be stored.
fn settle_unacknowledged(
    path: &Path,
    encoding: Encoding,
    protocol: CommitProtocol,
    opts: &CommitOptions,
    bytes: &[u8],
    offset: u64,
    first: StoreError,
) -> Result<()> {
    let first_found = match &first {
        StoreError::CommitFailed { found, .. } => found.clone(),
        other => other.to_string(),
    };
    let again = CommitOptions {
        hooks: None,
        ..opts.clone()
    };
    // Whether the frame is in its place, looked at under the locks (the
    // batch built is empty: nothing is written).
    let mut found: Option<Result<bool>> = None;
    let settled = append_with_options(path, encoding, None, &again, |_| {
        found = Some(match read_back(path, protocol, encoding, bytes, offset) {
            Ok(_) => Ok(true),
            Err(StoreError::CommitFailed { .. }) => Ok(false),
            Err(e) => Err(e),
        });
        Ok(Vec::new())
    });
    let unknown = |why: String| StoreError::CommitFailed {
        path: path.to_path_buf(),
        found: format!(
            "{first_found}; whether its frame at byte {offset} stayed could not be checked \
             ({why}): its lines may be stored, so look for them at the end of the transcript \
             before writing them again"
        ),
    };
    let found = settled.and_then(|_| found.expect("the settlement reads the tail"));
    match found {
        Err(e) => Err(unknown(e.to_string())),
        Ok(true) => {
            log::warn!(
                "{}: {first_found}; checked again under the lock, the frame at byte {offset} \
                 is in the transcript and stays: acknowledged",
                path.display()
            );
            Ok(())
        }
        Ok(false) => Err(StoreError::CommitFailed {
            path: path.to_path_buf(),
            found: format!(
                "{first_found}; checked again under the lock, its frame at byte {offset} is not \
                 in the transcript: its lines are not stored, and writing them again is safe"
            ),
        }),
    }
}

/// Opens the transcript for reading and positioned writes.
fn open_rw(path: &Path) -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| StoreError::io("open for append", path, e))
}

/// Makes sure the path names the open file, reopening it when it does not
/// (the transcript was replaced while this writer waited). Returns its
/// (device, inode).
///
/// Errors: [`StoreError::CommitFailed`] when the path keeps changing.
fn settle_identity(path: &Path, file: &mut File, protocol: CommitProtocol) -> Result<(u64, u64)> {
    for _ in 0..REOPENS {
        let meta = file
            .metadata()
            .map_err(|e| StoreError::io("stat", path, e))?;
        let (dev, ino) = (meta.dev(), meta.ino());
        let (pdev, pino, _) = statx_at(libc::AT_FDCWD, path, protocol)
            .map_err(|e| StoreError::io("stat", path, e))?;
        if (pdev, pino) == (dev, ino) {
            return Ok((dev, ino));
        }
        log::info!(
            "{}: the path now names another file (inode {pino}, was {ino}); reopening it",
            path.display()
        );
        *file = open_rw(path)?;
    }
    let found = "the path kept naming another file while it was reopened".to_string();
    log::error!("{}: {found}", path.display());
    Err(StoreError::CommitFailed {
        path: path.to_path_buf(),
        found,
    })
}

/// Takes the OFD lock where the file system gives one; a file system that
/// refuses locks entirely is passed over (the lock file serializes).
fn take_ofd_lock(path: &Path, file: &File) -> Result<()> {
    match lock_whole_file(file) {
        Ok(()) => Ok(()),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::ENOSYS | libc::EINVAL)
            ) =>
        {
            log::debug!(
                "{}: no OFD lock here ({e}); the lock file serializes",
                path.display()
            );
            Ok(())
        }
        Err(e) => Err(StoreError::io("lock (F_OFD_SETLK)", path, e)),
    }
}

/// Takes what a writer takes before it changes `path` (a transcript, open
/// as `file`): the session directory's lock file with the default lease
/// ([`lease::acquire`], the protocol of the file system holding it), then
/// the OFD lock on `file`. Repairs hold the returned guard while they cut
/// or rewrite, so no writer of this or another machine sharing the root
/// commits meanwhile (MOUNT.md, Shared roots); the lock file goes when the
/// guard is dropped.
///
/// Errors: [`StoreError::LockBusy`] (EAGAIN) when a live writer kept the
/// lock for the whole wait (45 s by default); [`StoreError::Io`] when the
/// lock file cannot be made or the OFD lock taken.
pub fn lock_for_repair(path: &Path, file: &File) -> Result<LockGuard> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let guard = lease::acquire(
        dir,
        path,
        &LeaseConfig::default(),
        fskind::protocol_for(dir),
        &HolderId::current(),
    )?;
    take_ofd_lock(path, file)?;
    Ok(guard)
}

/// Takes the open-file-description write lock on the whole file, waiting
/// for other holders (other descriptions: handles, processes, mounts).
pub(crate) fn lock_whole_file(file: &File) -> io::Result<()> {
    // SAFETY: a zeroed `flock` is a valid value; every field is an integer.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = 0;
    fl.l_len = 0; // to the end of the file, however far it grows
    fl.l_pid = 0; // required for OFD locks

    // Polled with F_OFD_SETLK until a deadline rather than blocking in
    // F_OFD_SETLKW: a blocked F_OFD_SETLKW ends only when the lock is
    // released or a signal arrives, so a writer that holds the lock forever
    // (stopped, or a forked child that inherited the descriptor) would hang
    // the mount's request threads; polling bounds the wait without a timer
    // thread or signals. The pause doubles from 1 ms up to 20 ms.
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        // SAFETY: `fl` is a valid `flock` that outlives the call, and the
        // descriptor is open for the life of `file`.
        let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &fl) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) if std::time::Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(20));
            }
            Some(libc::EAGAIN) | Some(libc::EACCES) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "another writer has held the append lock for {LOCK_WAIT:?}; \
                         retry, or find the stuck writer (fuser -v FILE)"
                    ),
                ))
            }
            _ => return Err(e),
        }
    }
}

/// Longest wait for the append lock of a transcript.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Result of one look at the end of the file.
enum Scan {
    Complete(AppendTail),
    /// The file ends inside the frame (raw: the line) starting at `at`.
    Torn {
        at: u64,
    },
}

/// The tail, read through a fresh descriptor whose length comes from the
/// server. A torn frame beyond the length a dead holder recorded (this
/// commit took its lock over) is cut and kept in quarantine; another torn
/// tail is re-checked after [`TORN_TAIL_WAIT`] and refused when unchanged
/// (or still changing after [`TORN_TAIL_CHECKS`] looks).
#[allow(clippy::too_many_arguments)]
fn settled_tail(
    path: &Path,
    file: &File,
    protocol: CommitProtocol,
    encoding: Encoding,
    hint: Option<&TailHint>,
    guard: &LockGuard,
    quarantine: Option<&Path>,
) -> Result<AppendTail> {
    let mut previous: Option<u64> = None;
    let mut torn_at = 0;
    let mut cut_done = false;
    for _ in 0..TORN_TAIL_CHECKS {
        let fresh = lease::open_fresh_read(path, CommitProtocol::Local)
            .map_err(|e| StoreError::io("open for reading", path, e))?;
        let (_, _, len) = statx_at(fresh.as_raw_fd(), Path::new(""), protocol)
            .map_err(|e| StoreError::io("stat", path, e))?;
        if previous == Some(len) {
            break;
        }
        let scan = match encoding {
            Encoding::Zstd => scan_zstd(path, &fresh, len, hint)?,
            Encoding::Raw => scan_raw(path, &fresh, len, hint)?,
        };
        let at = match scan {
            Scan::Complete(tail) => return Ok(tail),
            Scan::Torn { at } => at,
        };
        let recorded = guard.takeover().and_then(|t| t.recorded_len);
        if let (false, Some(recorded)) = (cut_done, recorded) {
            if at >= recorded {
                cut_torn(path, file, &fresh, at, len, guard, quarantine)?;
                cut_done = true;
                continue;
            }
        }
        log::debug!(
            "{}: torn tail at byte {at}; re-reading in {TORN_TAIL_WAIT:?}",
            path.display()
        );
        torn_at = at;
        previous = Some(len);
        thread::sleep(TORN_TAIL_WAIT);
    }
    Err(StoreError::TornTail {
        path: path.to_path_buf(),
        offset: torn_at,
    })
}

/// Cuts the torn frame `at..len` left by a dead holder: keeps the bytes in
/// quarantine (fsynced) first, then truncates the transcript to `at` and
/// fsyncs it; logs both.
///
/// Errors: [`StoreError::CommitFailed`] when there is no quarantine folder
/// or keeping the bytes fails (nothing is cut); [`StoreError::Io`] for
/// the truncation.
fn cut_torn(
    path: &Path,
    file: &File,
    fresh: &File,
    at: u64,
    len: u64,
    guard: &LockGuard,
    quarantine: Option<&Path>,
) -> Result<()> {
    let fail = |found: String| {
        log::error!("{}: {found}", path.display());
        StoreError::CommitFailed {
            path: path.to_path_buf(),
            found,
        }
    };
    let previous = guard
        .takeover()
        .map(|t| t.previous.clone())
        .unwrap_or_default();
    let Some(base) = quarantine else {
        return Err(fail(format!(
            "a torn frame at byte {at} left by {previous}, but no quarantine folder (set \
             XDG_STATE_HOME or HOME) to keep it in before cutting it"
        )));
    };
    let (root, rel) = quarantine::root_and_rel(path);
    let why = format!("torn frame of {previous}, whose lease ended; lock taken over");
    let kept = Quarantine::create_in(base, &root)
        .and_then(|q| {
            let copy = q.copy_range(fresh, at, len, &rel)?;
            q.note(&format!(
                "bytes {at}..{len} of {} cut by sessionfs pid {}: {why}",
                path.display(),
                std::process::id()
            ))?;
            Ok(copy)
        })
        .map_err(|e| fail(format!("a torn frame at byte {at}, which could not be kept in quarantine ({e}); nothing was cut")))?;
    guard.check(path, "cutting a torn frame")?;
    file.set_len(at)
        .and_then(|()| file.sync_all())
        .map_err(|e| StoreError::io("truncate torn frame", path, e))?;
    log::warn!(
        "{}: cut the torn frame at bytes {at}..{len} left by {previous}; the bytes are kept \
         in {}",
        path.display(),
        kept.display()
    );
    eprintln!(
        "sessionfs: {}: cut a torn frame left by a crashed writer; kept in {}",
        path.display(),
        kept.display()
    );
    Ok(())
}

/// Walks the frames of a zstd transcript of `len` bytes from the hint (or
/// the start) and derives the next `seq` from the last non-empty frame.
fn scan_zstd(path: &Path, file: &File, len: u64, hint: Option<&TailHint>) -> Result<Scan> {
    let hint = hint.filter(|h| h.offset <= len);
    let (mut pos, hinted_next) = hint.map_or((0, None), |h| (h.offset, Some(h.next_seq)));
    let mut frames: Vec<FrameInfo> = Vec::new();
    loop {
        let failure = match walk_frame(file, pos, len) {
            Ok(Step::End) => break,
            Ok(Step::Torn) => Failure::Torn,
            Ok(Step::Frame(info)) => {
                if matches!(info.kind, FrameKind::Data { .. }) {
                    frames.push(info);
                }
                pos = info.offset + info.len;
                continue;
            }
            // The hint is not a frame boundary of this file after all
            // (replaced in place): walk it from the start.
            Err(FrameError::Corrupt { .. }) if hint.is_some() && frames.is_empty() => {
                return scan_zstd(path, file, len, None);
            }
            Err(FrameError::Corrupt { reason, .. }) => Failure::Corrupt(reason),
            Err(e) => return Err(StoreError::from_frame(path, e)),
        };
        // The one classifier decides whether this is a torn tail (wait for
        // it, or refuse with TornTail) or damage (refused, never cut).
        let end = classify(file, len, frames.last(), pos, failure)
            .map_err(|e| StoreError::from_frame(path, e))?;
        return match end {
            WalkEnd::Clean | WalkEnd::Torn { .. } => Ok(Scan::Torn { at: pos }),
            WalkEnd::Damaged(d) => Err(StoreError::Damaged {
                path: path.to_path_buf(),
                at: d.at,
                resumes_at: d.resumes_at,
                reason: d.reason,
                nothing_verifiable_follows: d.nothing_verifiable_follows,
            }),
        };
    }
    let next_seq = match last_line_of_frames(path, file, &frames)? {
        Some((line, offset)) => next_seq_from_last_line(path, Some(&line), offset)?,
        None => match hinted_next {
            Some(next) => next,
            None if frames.is_empty() => {
                return Err(StoreError::header_less(path, "it holds no data frame"))
            }
            None => return Err(StoreError::header_less(path, "its frames hold no line")),
        },
    };
    Ok(Scan::Complete(AppendTail {
        next_seq,
        file_len: len,
    }))
}

/// Finds the end of a raw transcript of `len` bytes: torn when it does not
/// end with `\n`; else the next `seq` from its last line.
fn scan_raw(path: &Path, file: &File, len: u64, hint: Option<&TailHint>) -> Result<Scan> {
    let read_err = |e| StoreError::io("read", path, e);
    if len == 0 {
        return Err(StoreError::header_less(path, "the file is empty"));
    }
    let mut last = [0u8; 1];
    std::os::unix::fs::FileExt::read_exact_at(file, &mut last, len - 1).map_err(read_err)?;
    if last[0] != b'\n' {
        let at = prev_newline(file, len)
            .map_err(read_err)?
            .map_or(0, |i| i + 1);
        return Ok(Scan::Torn { at });
    }
    if let Some(h) = hint.filter(|h| h.offset == len) {
        return Ok(Scan::Complete(AppendTail {
            next_seq: h.next_seq,
            file_len: len,
        }));
    }
    let line = last_raw_line(path, file, len)?;
    let offset = len - line.as_ref().map_or(0, |l| l.len() as u64);
    let next_seq = next_seq_from_last_line(path, line.as_deref(), offset)?;
    Ok(Scan::Complete(AppendTail {
        next_seq,
        file_len: len,
    }))
}

/// Writes `bytes` at `offset` with `pwrite` and fsyncs; on failure
/// truncates back to `offset` (and fsyncs that) if the lease still allows,
/// then returns the error.
///
/// Errors: the write's or fsync's [`StoreError::Io`] (ENOSPC, EIO, ...)
/// when the file was truncated back (nothing stored);
/// [`StoreError::CommitFailed`] (EIO) saying the lines may be stored when
/// it could not be (the lease had ended, or the truncation failed too).
fn write_durably(
    path: &Path,
    file: &File,
    bytes: &[u8],
    offset: u64,
    guard: &LockGuard,
) -> Result<()> {
    let written = file
        .write_all_at(bytes, offset)
        .map_err(|e| ("write", e))
        .and_then(|()| file.sync_all().map_err(|e| ("fsync", e)));
    let Err((op, error)) = written else {
        return Ok(());
    };
    // Not truncated back, the bytes may have reached the file (a client
    // whose link died after sending them): the error says the lines may
    // be stored, so that they are looked for before being written again.
    let maybe_stored = |why: String| StoreError::CommitFailed {
        path: path.to_path_buf(),
        found: format!(
            "{op} failed ({error}) and {why}: its lines may be stored, so look for them at \
             the end of the transcript before writing them again"
        ),
    };
    if !guard.valid() {
        log::error!(
            "{}: {op} failed ({error}) and the lease has ended, so the file is not \
             truncated back to {offset} bytes; the next writer checks the tail",
            path.display()
        );
        return Err(maybe_stored(format!(
            "the lease had ended, so the file was not truncated back to {offset} bytes"
        )));
    } else if let Err(rollback) = file.set_len(offset).and_then(|()| file.sync_all()) {
        log::error!(
            "{}: {op} failed ({error}) and truncating back to {offset} bytes failed too \
             ({rollback}); run `sessionfs check --repair {}`",
            path.display(),
            super::error::ShellArg(path)
        );
        return Err(maybe_stored(format!(
            "truncating back to {offset} bytes failed too ({rollback}); run `sessionfs check \
             {}` once the file can be reached",
            super::error::ShellArg(path)
        )));
    }
    Err(StoreError::io(op, path, error))
}

/// Reads the frame back through a fresh descriptor (`O_DIRECT` on a remote
/// protocol where accepted) and compares it with what was written; checks
/// that a zstd frame walks as one frame of that length. Returns the
/// file's length (bytes) as the server has it then: the caller knows
/// whether the file must end where the frame ends.
///
/// Errors: [`StoreError::CommitFailed`] (EIO) saying what was found;
/// [`StoreError::Io`] when it cannot be read.
fn read_back(
    path: &Path,
    protocol: CommitProtocol,
    encoding: Encoding,
    bytes: &[u8],
    offset: u64,
) -> Result<u64> {
    let fail = |found: String| read_back_failed(path, offset, found);
    let fresh = lease::open_fresh_read(path, protocol)
        .map_err(|e| StoreError::io("open for read-back", path, e))?;
    let mut got = vec![0u8; bytes.len()];
    let read = match fresh.read_exact_at(&mut got, offset) {
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            // O_DIRECT reads refused here: read through the cache instead.
            let plain = lease::open_fresh_read(path, CommitProtocol::Local)
                .map_err(|e| StoreError::io("open for read-back", path, e))?;
            plain.read_exact_at(&mut got, offset)
        }
        r => r,
    };
    match read {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
            return Err(fail("the file ends inside it".into()))
        }
        Err(e) => return Err(StoreError::io("read back", path, e)),
    }
    if got != bytes {
        let first = got.iter().zip(bytes).position(|(a, b)| a != b).unwrap_or(0);
        return Err(fail(format!(
            "{} bytes differ, the first at byte {} of the frame",
            got.iter().zip(bytes).filter(|(a, b)| a != b).count(),
            first
        )));
    }
    let end = offset + bytes.len() as u64;
    let (_, _, len) = statx_at(fresh.as_raw_fd(), Path::new(""), protocol)
        .map_err(|e| StoreError::io("stat", path, e))?;
    if len < end {
        return Err(fail(format!(
            "the file is {len} bytes long, it ends inside it"
        )));
    }
    if encoding == Encoding::Zstd {
        // Walked in memory: `got` is what the server holds there.
        match walk_frame(&got[..], 0, got.len() as u64) {
            Ok(Step::Frame(info)) if info.len == bytes.len() as u64 => {}
            Ok(other) => return Err(fail(format!("it does not walk as one frame ({other:?})"))),
            Err(e) => return Err(fail(format!("{}", StoreError::from_frame(path, e)))),
        }
    }
    Ok(len)
}

/// The error (logged) of a frame at `offset` that read back wrong:
/// [`StoreError::CommitFailed`] with what was `found`.
fn read_back_failed(path: &Path, offset: u64, found: String) -> StoreError {
    log::error!(
        "{}: read-back of the frame at byte {offset}: {found}",
        path.display()
    );
    StoreError::CommitFailed {
        path: path.to_path_buf(),
        found: format!("the frame written at byte {offset} read back wrong: {found}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frame::encode_frame;
    use std::io::Write;

    const HEADER: &[u8] =
        b"{\"type\":\"session\",\"version\":0,\"id\":\"a\",\"createdAt\":1,\"delegationDepth\":0}\n";

    fn ev(seq: u64) -> String {
        format!("{{\"type\":\"x\",\"seq\":{seq},\"time\":1,\"data\":{{}}}}\n")
    }

    fn zstd_file(dir: &Path, parts: &[&[u8]]) -> std::path::PathBuf {
        let path = dir.join("session.jsonl.zstd");
        let mut f = File::create(&path).unwrap();
        for p in parts {
            f.write_all(&encode_frame(p).unwrap()).unwrap();
        }
        path
    }

    #[test]
    fn appends_frames_and_follows_hints() {
        let dir = tempfile::tempdir().unwrap();
        let path = zstd_file(dir.path(), &[HEADER]);
        let out = append_batch(&path, Encoding::Zstd, ev(0).as_bytes(), |t| {
            assert_eq!(t.next_seq, 0);
            Ok(())
        })
        .unwrap();
        assert_eq!(out.next_seq, 1);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), out.new_file_len);
        let out2 = append_with(&path, Encoding::Zstd, Some(&out.hint), |t| {
            assert_eq!(t.next_seq, 1);
            Ok(format!("{}{}", ev(1), ev(2)).into_bytes())
        })
        .unwrap();
        assert_eq!(out2.frame_offset, out.new_file_len);
        assert_eq!((out2.first_seq, out2.next_seq, out2.lines), (1, 3, 2));
        // A stale hint (the file grew since) still finds the real tail.
        let out3 = append_with(&path, Encoding::Zstd, Some(&out.hint), |t| {
            assert_eq!(t.next_seq, 3);
            Ok(Vec::new())
        })
        .unwrap();
        assert_eq!(out3.frame_len, 0);
        // A hint that is not a frame boundary falls back to a full walk.
        let bogus = TailHint {
            offset: 3,
            next_seq: 99,
            ..out.hint
        };
        let out4 = append_with(&path, Encoding::Zstd, Some(&bogus), |t| {
            assert_eq!(t.next_seq, 3);
            Ok(ev(3).into_bytes())
        })
        .unwrap();
        assert_eq!(out4.next_seq, 4);
    }

    #[test]
    fn refusals_write_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = zstd_file(dir.path(), &[HEADER, ev(0).as_bytes()]);
        let before = std::fs::read(&path).unwrap();
        let cases: Vec<(Vec<u8>, i32)> = vec![
            (ev(2).into_bytes(), libc::EINVAL),
            (ev(0).into_bytes(), libc::EINVAL),
            (b"{\"type\":\"x\",\"seq\":1".to_vec(), libc::EINVAL),
            (b"{nope}\n".to_vec(), libc::EINVAL),
            (
                b"{\"type\":\"x\",\"seq\":1,\"t\":\"\xc3\"}\n".to_vec(),
                libc::EINVAL,
            ),
            (HEADER.to_vec(), libc::EINVAL),
        ];
        for (batch, errno) in cases {
            let e = append_batch(&path, Encoding::Zstd, &batch, |_| Ok(())).unwrap_err();
            assert_eq!(e.errno(), errno, "{e}");
            assert_eq!(std::fs::read(&path).unwrap(), before);
        }
        let e = append_batch(&path, Encoding::Zstd, ev(1).as_bytes(), |t| {
            Err(StoreError::SeqConflict {
                path: path.clone(),
                line: 1,
                expected: t.next_seq,
                found: 0,
            })
        })
        .unwrap_err();
        assert!(matches!(e, StoreError::SeqConflict { .. }));
        assert_eq!(std::fs::read(&path).unwrap(), before);
    }

    #[test]
    fn torn_tail_is_refused_unless_it_completes() {
        let dir = tempfile::tempdir().unwrap();
        let path = zstd_file(dir.path(), &[HEADER, ev(0).as_bytes()]);
        let committed = std::fs::metadata(&path).unwrap().len();
        let frame = encode_frame(ev(1).as_bytes()).unwrap();
        let (head, rest) = frame.split_at(frame.len() / 2);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(head).unwrap();
        let torn = std::fs::read(&path).unwrap();
        let e = append_batch(&path, Encoding::Zstd, ev(1).as_bytes(), |_| Ok(())).unwrap_err();
        assert!(
            matches!(e, StoreError::TornTail { offset, .. } if offset == committed),
            "{e}"
        );
        assert_eq!(e.errno(), libc::EIO);
        assert!(e.to_string().contains("sessionfs check --repair"));
        assert_eq!(std::fs::read(&path).unwrap(), torn);

        // Another writer completes the frame while the append waits.
        let rest = rest.to_vec();
        let finisher = thread::spawn(move || {
            thread::sleep(Duration::from_millis(10));
            f.write_all(&rest).unwrap();
        });
        let out = append_batch(&path, Encoding::Zstd, ev(2).as_bytes(), |t| {
            assert_eq!(t.next_seq, 2);
            Ok(())
        })
        .unwrap();
        finisher.join().unwrap();
        assert_eq!(out.next_seq, 3);
    }

    #[test]
    fn raw_appends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        std::fs::write(&path, [HEADER, ev(0).as_bytes()].concat()).unwrap();
        let out = append_batch(&path, Encoding::Raw, ev(1).as_bytes(), |_| Ok(())).unwrap();
        assert_eq!(out.next_seq, 2);
        let out = append_with(&path, Encoding::Raw, Some(&out.hint), |t| {
            Ok(ev(t.next_seq).into_bytes())
        })
        .unwrap();
        assert_eq!(out.next_seq, 3);
        let text = std::fs::read(&path).unwrap();
        assert_eq!(
            text,
            [HEADER, ev(0).as_bytes(), ev(1).as_bytes(), ev(2).as_bytes()].concat()
        );
        // An incomplete last line is a torn tail.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"type\":").unwrap();
        let e = append_batch(&path, Encoding::Raw, ev(3).as_bytes(), |_| Ok(())).unwrap_err();
        assert!(matches!(e, StoreError::TornTail { offset, .. } if offset == text.len() as u64));
    }
}

#[cfg(test)]
mod protocol_tests {
    use super::*;
    use crate::store::frame::encode_frame;
    use crate::store::lease::{LockBody, LOCK_NAME};
    use std::fs;
    use std::io::Write;
    use std::time::Instant;

    const HEADER: &[u8] =
        b"{\"type\":\"session\",\"version\":0,\"id\":\"a\",\"createdAt\":1,\"delegationDepth\":0}\n";

    fn ev(seq: u64) -> String {
        format!("{{\"type\":\"x\",\"seq\":{seq},\"time\":1,\"data\":{{}}}}\n")
    }

    fn fast() -> LeaseConfig {
        LeaseConfig::from_lease(Duration::from_millis(300))
    }

    fn opts(quarantine: &Path) -> CommitOptions {
        CommitOptions {
            lease: Some(fast()),
            protocol: Some(CommitProtocol::Local),
            quarantine: Some(quarantine.to_path_buf()),
            ..CommitOptions::default()
        }
    }

    fn with_hooks(o: CommitOptions, hooks: CommitHooks) -> CommitOptions {
        CommitOptions {
            hooks: Some(Arc::new(hooks)),
            ..o
        }
    }

    /// A lease whose renewals never arrive, and a pause that outlasts it.
    fn lapsing() -> (LeaseConfig, Duration) {
        let cfg = LeaseConfig {
            renew_every: Duration::from_secs(3600),
            ..fast()
        };
        (
            cfg,
            cfg.lease - cfg.holder_margin + Duration::from_millis(20),
        )
    }

    /// The error of a commit of the next `seq` to `path` under lease `cfg`
    /// with `hooks`.
    fn failed_commit(path: &Path, q: &Path, cfg: LeaseConfig, hooks: CommitHooks) -> StoreError {
        let o = CommitOptions {
            lease: Some(cfg),
            ..with_hooks(opts(q), hooks)
        };
        append_with_options(path, Encoding::Zstd, None, &o, |t| {
            Ok(ev(t.next_seq).into_bytes())
        })
        .unwrap_err()
    }

    /// root/p/s/session.jsonl.zstd holding the header and seq 0.
    fn session(root: &Path) -> PathBuf {
        let dir = root.join("p").join("s");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("session.jsonl.zstd");
        let mut f = File::create(&path).unwrap();
        f.write_all(&encode_frame(HEADER).unwrap()).unwrap();
        f.write_all(&encode_frame(ev(0).as_bytes()).unwrap())
            .unwrap();
        path
    }

    fn dead_lock(dir: &Path, len: Option<u64>) {
        let body = LockBody {
            holder: HolderId {
                host: "crashed-host".into(),
                boot: "b".into(),
                pid: 1,
                pidns: String::new(),
            },
            token: "00000000deadbeef".into(),
            len,
            lease_ms: 300,
            renewal: 4,
            wall_ms: 0,
        };
        fs::write(dir.join(LOCK_NAME), body.encode()).unwrap();
    }

    #[test]
    fn the_lock_file_is_taken_and_removed_and_a_live_holder_is_waited_for() {
        let root = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        let path = session(root.path());
        let dir = path.parent().unwrap().to_path_buf();
        let seen = Arc::new(std::sync::Mutex::new(None));
        let s2 = Arc::clone(&seen);
        let hooks = CommitHooks {
            before_write: Some(Box::new(move |p: &Path| {
                let body = fs::read(p.parent().unwrap().join(LOCK_NAME)).unwrap();
                *s2.lock().unwrap() = LockBody::parse(&body);
            })),
            ..CommitHooks::default()
        };
        let before = fs::metadata(&path).unwrap().len();
        append_with_options(
            &path,
            Encoding::Zstd,
            None,
            &with_hooks(opts(q.path()), hooks),
            |t| Ok(ev(t.next_seq).into_bytes()),
        )
        .unwrap();
        let body = seen
            .lock()
            .unwrap()
            .clone()
            .expect("a lock body during the commit");
        assert_eq!(
            body.len,
            Some(before),
            "the length before the commit is recorded"
        );
        assert!(!dir.join(LOCK_NAME).exists(), "removed after the commit");

        // A live holder (renewing) keeps others out for the whole wait.
        let holder = lease::acquire(
            &dir,
            &path,
            &fast(),
            CommitProtocol::Local,
            &HolderId::current(),
        )
        .unwrap();
        let o = CommitOptions {
            lease: Some(LeaseConfig {
                wait: Duration::from_millis(200),
                ..fast()
            }),
            ..opts(q.path())
        };
        let len = fs::metadata(&path).unwrap().len();
        let e = append_with_options(&path, Encoding::Zstd, None, &o, |t| {
            Ok(ev(t.next_seq).into_bytes())
        })
        .unwrap_err();
        assert_eq!(e.errno(), libc::EAGAIN, "{e}");
        assert_eq!(fs::metadata(&path).unwrap().len(), len);
        drop(holder);
    }

    #[test]
    fn a_replaced_transcript_is_reopened_by_path() {
        let root = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        let path = session(root.path());
        let old = path.with_file_name("old-inode");
        fs::hard_link(&path, &old).unwrap();
        let original = fs::read(&path).unwrap();
        let hooks = CommitHooks {
            after_lock: Some(Box::new(|p: &Path| {
                // Another machine replaced the file while we waited.
                let copy = p.with_file_name("copy");
                fs::copy(p, &copy).unwrap();
                fs::rename(&copy, p).unwrap();
            })),
            ..CommitHooks::default()
        };
        let out = append_with_options(
            &path,
            Encoding::Zstd,
            None,
            &with_hooks(opts(q.path()), hooks),
            |t| Ok(ev(t.next_seq).into_bytes()),
        )
        .unwrap();
        assert_eq!(
            fs::read(&old).unwrap(),
            original,
            "the old inode is untouched"
        );
        let now = fs::read(&path).unwrap();
        assert_eq!(now.len() as u64, out.new_file_len);
        assert_eq!(&now[..original.len()], &original[..]);
        assert_eq!(out.hint.ino, fs::metadata(&path).unwrap().ino());
    }

    #[test]
    fn the_frame_goes_at_the_real_length_learned_under_the_lock() {
        let root = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        let path = session(root.path());
        let before = fs::read(&path).unwrap();
        let other = encode_frame(ev(1).as_bytes()).unwrap();
        let other2 = other.clone();
        let hooks = CommitHooks {
            after_lock: Some(Box::new(move |p: &Path| {
                // A frame that landed on the server after this writer
                // opened its descriptor.
                let mut f = OpenOptions::new().append(true).open(p).unwrap();
                f.write_all(&other2).unwrap();
            })),
            ..CommitHooks::default()
        };
        // A descriptor-era hint that is now stale.
        let meta = fs::metadata(&path).unwrap();
        let hint = TailHint {
            dev: meta.dev(),
            ino: meta.ino(),
            offset: before.len() as u64,
            next_seq: 1,
        };
        let out = append_with_options(
            &path,
            Encoding::Zstd,
            Some(&hint),
            &with_hooks(opts(q.path()), hooks),
            |t| {
                assert_eq!(t.next_seq, 2, "seq continues from the real last line");
                Ok(ev(2).into_bytes())
            },
        )
        .unwrap();
        assert_eq!(out.frame_offset, (before.len() + other.len()) as u64);
        let mut expected = before;
        expected.extend(&other);
        expected.extend(encode_frame(ev(2).as_bytes()).unwrap());
        assert_eq!(fs::read(&path).unwrap(), expected);
    }

    #[test]
    fn a_frame_that_reads_back_wrong_fails_with_eio() {
        let root = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        let path = session(root.path());
        let hooks = CommitHooks {
            after_write: Some(Box::new(|p: &Path, at: u64| {
                let f = OpenOptions::new().write(true).open(p).unwrap();
                f.write_all_at(b"\xff", at + 5).unwrap();
            })),
            ..CommitHooks::default()
        };
        let e = append_with_options(
            &path,
            Encoding::Zstd,
            None,
            &with_hooks(opts(q.path()), hooks),
            |t| Ok(ev(t.next_seq).into_bytes()),
        )
        .unwrap_err();
        assert_eq!(e.errno(), libc::EIO, "{e}");
        assert!(matches!(e, StoreError::CommitFailed { .. }), "{e}");
        assert!(e.to_string().contains("read back wrong"), "{e}");
        assert!(e.to_string().contains("its lines are not stored"), "{e}");
    }

    /// A commit whose check fails after its frame was written is settled
    /// under the lock, taken again: the frame kept in its place (another
    /// writer took the lock over and appended after it) is acknowledged,
    /// so a client never writes the lines again (a fresh tester's two
    /// sshfs mounts stored such a line twice); a frame another writer
    /// replaced is reported as not stored.
    #[test]
    fn an_unacknowledged_frame_is_settled_under_the_lock() {
        let root = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        // Kept: another writer appended seq 2 after our seq 1.
        let path = session(&root.path().join("kept"));
        let before = fs::read(&path).unwrap();
        let theirs = encode_frame(ev(2).as_bytes()).unwrap();
        let appended = theirs.clone();
        let hooks = CommitHooks {
            after_write: Some(Box::new(move |p: &Path, _| {
                let mut f = OpenOptions::new().append(true).open(p).unwrap();
                f.write_all(&appended).unwrap();
            })),
            ..CommitHooks::default()
        };
        let out = append_with_options(
            &path,
            Encoding::Zstd,
            None,
            &with_hooks(opts(q.path()), hooks),
            |t| Ok(ev(t.next_seq).into_bytes()),
        )
        .unwrap();
        assert_eq!(out.frame_offset, before.len() as u64);
        let ours = encode_frame(ev(1).as_bytes()).unwrap();
        assert_eq!(
            fs::read(&path).unwrap(),
            [&before[..], &ours, &theirs].concat()
        );

        // Replaced: our lease ended (its renewals never arrive), and
        // another writer cut our frame and wrote its own seq 1.
        let path = session(&root.path().join("replaced"));
        let replacement = encode_frame(b"{\"type\":\"y\",\"seq\":1}\n").unwrap();
        let written = replacement.clone();
        let (cfg, outlast) = lapsing();
        let hooks = CommitHooks {
            after_write: Some(Box::new(move |p: &Path, at: u64| {
                std::thread::sleep(outlast);
                let f = OpenOptions::new().write(true).open(p).unwrap();
                f.set_len(at).unwrap();
                f.write_all_at(&written, at).unwrap();
            })),
            ..CommitHooks::default()
        };
        let e = failed_commit(&path, q.path(), cfg, hooks);
        assert_eq!(e.errno(), libc::EIO, "{e}");
        let text = e.to_string();
        assert!(
            text.contains("lease") && text.contains("checked again under the lock"),
            "{e}"
        );
        assert!(text.contains("its lines are not stored"), "{e}");
        assert!(fs::read(&path).unwrap().ends_with(&replacement));
    }

    #[test]
    fn a_holder_whose_lease_expired_never_writes() {
        let root = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        let path = session(root.path());
        let before = fs::read(&path).unwrap();
        let (cfg, outlast) = lapsing();
        let hooks = CommitHooks {
            before_write: Some(Box::new(move |_: &Path| std::thread::sleep(outlast))),
            ..CommitHooks::default()
        };
        let e = failed_commit(&path, q.path(), cfg, hooks);
        assert!(matches!(e, StoreError::CommitFailed { .. }), "{e}");
        assert!(e.to_string().contains("lease"), "{e}");
        assert_eq!(fs::read(&path).unwrap(), before, "nothing written");
    }

    #[test]
    fn a_slow_commit_keeps_its_lease_by_renewing_and_is_not_taken_over() {
        let root = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        let path = session(root.path());
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let tx = std::sync::Mutex::new(tx);
        let hooks = CommitHooks {
            before_write: Some(Box::new(move |_: &Path| {
                tx.lock().unwrap().send(()).unwrap();
                // Three leases: only renewals keep the lock ours.
                std::thread::sleep(fast().lease * 3);
            })),
            ..CommitHooks::default()
        };
        let slow_opts = with_hooks(opts(q.path()), hooks);
        let slow_path = path.clone();
        let slow = std::thread::spawn(move || {
            append_with_options(&slow_path, Encoding::Zstd, None, &slow_opts, |t| {
                Ok(ev(t.next_seq).into_bytes())
            })
        });
        rx.recv().unwrap();
        // Another writer waits for the whole slow commit and then follows it.
        let patient = CommitOptions {
            lease: Some(LeaseConfig {
                wait: fast().lease * 20,
                ..fast()
            }),
            ..opts(q.path())
        };
        let out = append_with_options(&path, Encoding::Zstd, None, &patient, |t| {
            assert_eq!(t.next_seq, 2, "after the slow commit");
            Ok(ev(2).into_bytes())
        })
        .unwrap();
        let first = slow.join().unwrap().unwrap();
        assert_eq!(first.next_seq, 2);
        assert_eq!(out.frame_offset, first.new_file_len);
        assert!(walk(q.path()).is_empty(), "nothing cut");
    }

    #[test]
    fn a_dead_holders_torn_frame_is_cut_and_kept_after_the_lease() {
        let root = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        let path = session(root.path());
        let committed = fs::read(&path).unwrap();
        dead_lock(path.parent().unwrap(), Some(committed.len() as u64));
        let frame = encode_frame(ev(1).as_bytes()).unwrap();
        let half = &frame[..frame.len() / 2];
        OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(half)
            .unwrap();
        let t0 = Instant::now();
        let out = append_with_options(&path, Encoding::Zstd, None, &opts(q.path()), |t| {
            assert_eq!(t.next_seq, 1);
            Ok(ev(1).into_bytes())
        })
        .unwrap();
        assert!(t0.elapsed() >= fast().takeover_after());
        assert_eq!(out.frame_offset, committed.len() as u64);
        let mut expected = committed.clone();
        expected.extend(&frame);
        assert_eq!(fs::read(&path).unwrap(), expected);
        let kept: Vec<_> = walk(q.path());
        assert_eq!(kept.len(), 1, "{kept:?}");
        assert_eq!(fs::read(&kept[0]).unwrap(), half);
        assert!(!path.parent().unwrap().join(LOCK_NAME).exists());
    }

    #[test]
    fn a_torn_frame_below_the_recorded_length_is_never_cut() {
        let root = tempfile::tempdir().unwrap();
        let q = tempfile::tempdir().unwrap();
        let path = session(root.path());
        let frame = encode_frame(ev(1).as_bytes()).unwrap();
        let committed = fs::metadata(&path).unwrap().len();
        OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&frame[..frame.len() / 2])
            .unwrap();
        let torn = fs::read(&path).unwrap();
        // The dead holder recorded a length past the torn frame's start:
        // the torn bytes are not proven to be its own.
        dead_lock(path.parent().unwrap(), Some(committed + 1));
        let e = append_with_options(&path, Encoding::Zstd, None, &opts(q.path()), |t| {
            Ok(ev(t.next_seq).into_bytes())
        })
        .unwrap_err();
        assert!(matches!(e, StoreError::TornTail { .. }), "{e}");
        assert_eq!(fs::read(&path).unwrap(), torn);
        assert!(walk(q.path()).is_empty());
    }

    /// The files under `dir` but the quarantine's notes.
    fn walk(dir: &Path) -> Vec<PathBuf> {
        walkdir::WalkDir::new(dir)
            .into_iter()
            .map(|e| e.unwrap())
            .filter(|e| !e.file_type().is_dir() && e.file_name() != "note.txt")
            .map(|e| e.into_path())
            .collect()
    }
}
