//! The store's one write policy: lines checked against a transcript's tail,
//! a header's id and placement, the choice between publishing a new session
//! and appending to a committed one, and the commit of a batch.
//!
//! Source: FORMAT.md ("Writing": Lazy creation, Append, Continuity;
//! "Identity rules") and MOUNT.md ("Appending", "Creating a session").
//!
//! A [`SessionWriter`] holds the complete lines accepted and not yet
//! committed (the batch) and the `seq` cursor after them. Every front end
//! goes through it: the mount's per-handle writer, `sessionfs append`, and
//! programs using [`crate::api`]. The commit itself is
//! [`super::append::append_with`] (an existing transcript) or
//! [`super::publish::publish_session`] (a new one): the seam where the
//! commit protocol lives.
//!
//! Drop policy: a batch that no longer continues the transcript when it is
//! committed (another writer got there first: [`StoreError::SeqConflict`],
//! [`StoreError::InvalidLine`] under the lock, or
//! [`StoreError::AlreadyExists`] for a same-id publication) is dropped
//! whole, and the cursor moves to the real tail. Any other failure (I/O,
//! ENOSPC, a torn tail) keeps the batch, so that a retry commits it.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::append::{append_with_options, AppendOutcome, CommitOptions, TailHint};
use super::error::{Result, StoreError};
use super::fskind;
use super::lease::HolderId;
use super::lines::SeqCursor;
use super::publish::publish_session;
use super::transcript::Transcript;
use super::turn;
use super::{Header, Store};

/// Where the writer's session lives.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A known session directory `project/session` (relative to the root).
    Dir {
        project: OsString,
        session: OsString,
    },
    /// A new session named by its exact id; the project directory comes
    /// from the header's cwd.
    Id { id: String },
}

/// What [`SessionWriter::commit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Commit {
    /// Nothing was pending.
    Nothing,
    /// A new session was published: the transcript's path.
    Published(PathBuf),
    /// A batch was appended to the committed transcript.
    Appended(AppendOutcome),
}

/// Whether a commit error drops the batch (it no longer continues the
/// transcript, or the id was taken), as opposed to keeping it for a retry.
pub fn drops_batch(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::SeqConflict { .. }
            | StoreError::InvalidLine { .. }
            | StoreError::AlreadyExists { .. }
    )
}

/// Writes complete JSONL lines to one session under the store's rules.
///
/// Lines are [`accept`](SessionWriter::accept)ed (checked, all or nothing,
/// against the committed tail plus the lines pending before them) and
/// [`commit`](SessionWriter::commit)ted as one frame per batch. Not
/// thread-safe by itself: callers serialize access (the mount holds it
/// under its handle's lock).
#[derive(Debug)]
pub struct SessionWriter {
    target: Target,
    /// Complete lines accepted and not yet committed.
    batch: Vec<u8>,
    /// `seq` continuity after the committed tail and `batch`.
    cursor: SeqCursor,
    /// Whether the transcript exists on disk (else the first commit
    /// publishes a new session whose first line is its header).
    published: bool,
    /// Where the last append ended, so the next one walks only new frames.
    hint: Option<TailHint>,
    /// How appends run the commit protocol ([`CommitOptions::default`]
    /// unless [`SessionWriter::with_commit_options`] set them).
    commit: CommitOptions,
}

impl SessionWriter {
    /// A writer for the session directory `project/session` (names as in
    /// the root): the committed transcript's tail is read now; with no
    /// transcript, the first line accepted must be the header of a session
    /// that belongs in exactly this directory.
    ///
    /// Errors: the errors of [`Store::transcript`] other than
    /// [`StoreError::NotFound`] (a damaged transcript cannot be continued:
    /// EIO), and [`crate::store::Transcript::next_seq`]'s.
    pub fn open(store: &Store, project: &OsStr, session: &OsStr) -> Result<SessionWriter> {
        let (cursor, published) = match store.transcript(project, session) {
            Ok(t) => (SeqCursor::after(t.next_seq()?), true),
            Err(StoreError::NotFound { .. }) => (SeqCursor::new_session(), false),
            Err(e) => return Err(e),
        };
        Ok(SessionWriter {
            target: Target::Dir {
                project: project.to_os_string(),
                session: session.to_os_string(),
            },
            batch: Vec::new(),
            cursor,
            published,
            hint: None,
            commit: CommitOptions::default(),
        })
    }

    /// A writer that creates the session `id` (exact, not a body match):
    /// the first line accepted must be a header whose `id` is `id`; its
    /// `cwd` chooses the project directory. Whether the id is free is
    /// decided at the commit (publication never replaces a session).
    ///
    /// Errors: [`StoreError::InvalidName`] for the empty id,
    /// [`StoreError::NameTooLong`] when its encoded name exceeds 244 bytes.
    pub fn create(id: &str) -> Result<SessionWriter> {
        super::naming::check_creatable_id(id)?;
        Ok(SessionWriter {
            target: Target::Id { id: id.to_string() },
            batch: Vec::new(),
            cursor: SeqCursor::new_session(),
            published: false,
            hint: None,
            commit: CommitOptions::default(),
        })
    }

    /// This writer with `opts` for its appends' commit protocol (lease,
    /// protocol, holder, quarantine, test hooks; MOUNT.md, Shared roots).
    pub fn with_commit_options(mut self, opts: CommitOptions) -> SessionWriter {
        self.commit = opts;
        self
    }

    /// Whether the session's transcript exists on disk (committed by this
    /// writer or found at open).
    pub fn is_published(&self) -> bool {
        self.published
    }

    /// The complete lines accepted and not yet committed.
    pub fn pending(&self) -> &[u8] {
        &self.batch
    }

    /// The `seq` the next accepted event line must start with.
    pub fn next_seq(&self) -> u64 {
        self.cursor.next_seq()
    }

    /// The session directory relative to the root, once known (always for
    /// [`SessionWriter::open`]; after the header for
    /// [`SessionWriter::create`]).
    pub fn session_dir(&self) -> Option<PathBuf> {
        match &self.target {
            Target::Dir { project, session } => Some(Path::new(project).join(session)),
            Target::Id { .. } => None,
        }
    }

    /// The transcript path for messages: the backing file when known,
    /// else the root.
    pub fn path_for_errors(&self, store: &Store) -> PathBuf {
        match self.session_dir() {
            Some(dir) => store.backing_path(&dir).join(store.encoding().file_name()),
            None => store.root().to_path_buf(),
        }
    }

    /// Checks `complete` (complete lines, each ending in `\n`; bytes after
    /// the last `\n` are not taken) and adds them to the batch. With
    /// nothing pending, an existing transcript's tail is read again first,
    /// so that a writer kept open for hours continues whatever other
    /// writers committed meanwhile. Returns the number of lines taken.
    ///
    /// All or nothing: on error nothing is taken and the cursor does not
    /// move.
    ///
    /// Errors: [`StoreError::InvalidLine`] (EINVAL) for a line that is not
    /// one valid event, packed row or (first line of a new session) header,
    /// or a header whose id or cwd does not name this session's place;
    /// [`StoreError::SeqConflict`] (EINVAL) for a line not continuing
    /// `seq`; the errors of [`Store::transcript`] when the tail is re-read.
    pub fn accept(&mut self, store: &Store, complete: &[u8]) -> Result<usize> {
        self.accept_after(store, complete, None)
    }

    /// [`SessionWriter::accept`], with `tail` the transcript this writer
    /// appends to as the caller looked it up and refreshed in this request
    /// ([`Store::transcript`]): its tail is read from that view instead of
    /// being looked up and refreshed again (each costs server round trips
    /// on a network root). `None`: looked up here.
    ///
    /// Errors: as [`SessionWriter::accept`].
    pub fn accept_after(
        &mut self,
        store: &Store,
        complete: &[u8],
        tail: Option<&Transcript>,
    ) -> Result<usize> {
        let end = complete
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let complete = &complete[..end];
        if complete.is_empty() {
            return Ok(0);
        }
        // The `seq` the batch must start at when nothing is pending (`None`:
        // this writer's own cursor).
        let mut tail_next = None;
        if self.batch.is_empty() && self.published {
            if let Target::Dir { project, session } = &self.target {
                let next = match tail {
                    // Behind this writer's own cursor: the view predates a
                    // commit of this writer's (the transcript only grows,
                    // and the cursor never passes its tail), so it is
                    // refreshed.
                    Some(t) => match t.next_seq_as_refreshed()? {
                        n if n < self.cursor.next_seq() => t.next_seq()?,
                        n => n,
                    },
                    None => store.transcript(project, session)?.next_seq()?,
                };
                self.cursor = SeqCursor::after(next);
                tail_next = Some(next);
            }
        }
        let mut cursor = self.cursor;
        let mut checked = cursor.check_batch(complete);
        if let (Err(_), Some(t), Some(next)) = (&checked, tail, tail_next) {
            // The caller's view of the tail may predate a commit made
            // since by another handle of this mount (its batch window
            // expired while the request waited): refreshed once before
            // the lines are refused.
            let fresh = t.next_seq()?;
            if fresh != next {
                self.cursor = SeqCursor::after(fresh);
                cursor = self.cursor;
                checked = cursor.check_batch(complete);
            }
        }
        let checked = match checked {
            Ok(checked) => checked,
            Err(e) => {
                let e = e.into_store(&self.path_for_errors(store));
                self.announce_if_overtaken(store, &e);
                return Err(e);
            }
        };
        if let Some(header) = &checked.header {
            self.check_header(store, header)?;
        }
        for (line, tag) in &checked.unknown_types {
            log::warn!(
                "{}: line {line} of the write has event type {tag:?}, which this harness does \
                 not know, without \"ignorable\": true; it is taken, but this harness refuses \
                 to load the session until a version that knows the type reads it (`sessionfs \
                 doctor` reports it): mark such events \"ignorable\": true",
                self.path_for_errors(store).display()
            );
        }
        self.batch.extend_from_slice(complete);
        self.cursor = cursor;
        Ok(checked.lines)
    }

    /// A new session's header must name this writer's place: for a
    /// directory, [`Store::check_placement`]; for an id, equality of ids.
    /// The place is then fixed by the header.
    fn check_header(&mut self, store: &Store, header: &Header) -> Result<()> {
        let path = self.path_for_errors(store);
        let refused = |reason: String| StoreError::InvalidLine {
            path: path.clone(),
            line: 1,
            reason,
        };
        match &self.target {
            Target::Dir { project, session } => store
                .check_placement(header, project, session, &path)
                .map_err(|e| {
                    refused(format!(
                        "the header does not belong in this session directory: {e}; write the \
                         header of this session (id = the directory's decoded name, cwd = the \
                         project's path)"
                    ))
                }),
            Target::Id { id } if &header.id != id => Err(refused(format!(
                "the header's id {:?} is not the session being created ({id:?})",
                header.id
            ))),
            Target::Id { .. } => {
                let project = header.project_dir_name()?;
                let session = header.session_dir_name()?;
                self.target = Target::Dir {
                    project: project.into(),
                    session: session.into(),
                };
                Ok(())
            }
        }
    }

    /// Commits the pending batch: publishes the new session (header frame,
    /// then the rest as one frame) or appends the batch as one frame under
    /// the append lock, re-checked there against the real tail.
    ///
    /// Errors: when [`drops_batch`] is true ([`StoreError::SeqConflict`],
    /// [`StoreError::InvalidLine`]: EINVAL; [`StoreError::AlreadyExists`]:
    /// EEXIST) the batch is dropped whole and the cursor moves to the
    /// committed tail; other errors ([`StoreError::TornTail`], EIO;
    /// [`StoreError::Io`], e.g. ENOSPC) keep the batch for a retry. See
    /// [`append_with`] and [`publish_session`].
    pub fn commit(&mut self, store: &Store) -> Result<Commit> {
        if self.batch.is_empty() {
            return Ok(Commit::Nothing);
        }
        let batch = std::mem::take(&mut self.batch);
        let result = if self.published {
            self.append(store, &batch).map(Commit::Appended)
        } else {
            self.publish(store, &batch).map(Commit::Published)
        };
        match result {
            Ok(c) => Ok(c),
            Err(e) if drops_batch(&e) => {
                self.resync(store);
                self.announce_if_overtaken(store, &e);
                Err(e)
            }
            Err(e) => {
                self.batch = batch;
                Err(e)
            }
        }
    }

    /// [`SessionWriter::commit`], waiting at most `wait` for the session's
    /// lock (the commit protocol's own wait when that is shorter). A
    /// dead holder's lock is still taken over once its lease ended: how
    /// long a lock stayed unchanged is remembered across attempts.
    ///
    /// Errors: as [`SessionWriter::commit`]; [`StoreError::LockBusy`]
    /// (EAGAIN, the batch kept) when the lock stayed held for `wait`.
    pub fn commit_waiting_at_most(&mut self, store: &Store, wait: Duration) -> Result<Commit> {
        let saved = self.commit.lease;
        let mut lease = saved.unwrap_or_default();
        lease.wait = lease.wait.min(wait);
        self.commit.lease = Some(lease);
        let r = self.commit(store);
        self.commit.lease = saved;
        r
    }

    /// How long a commit waits for the session's lock in all
    /// ([`super::lease::LeaseConfig::wait`] of the commit options; 45 s by
    /// default).
    pub fn lock_wait(&self) -> Duration {
        self.commit.lease.unwrap_or_default().wait
    }

    /// Drops the pending batch (a caller giving up) and moves the cursor
    /// to the committed tail; returns the dropped batch's buffer, for the
    /// caller to free when it chooses (its memory leaves this writer now).
    pub fn discard(&mut self, store: &Store) -> Vec<u8> {
        let batch = std::mem::take(&mut self.batch);
        self.resync(store);
        batch
    }

    /// After a dropped batch: continue from the committed tail when there
    /// is one (another writer may have published this session).
    /// When `e` refused this writer's lines because another writer
    /// committed their `seq` first (the line's `seq` is already in the
    /// transcript), announces this writer as waiting in the session
    /// directory, so that a writer committing in a tight loop stands back
    /// once for it ([`turn::announce`]; MOUNT.md, Shared roots).
    fn announce_if_overtaken(&self, store: &Store, e: &StoreError) {
        let (
            StoreError::SeqConflict {
                expected, found, ..
            },
            Some(rel),
        ) = (e, self.session_dir())
        else {
            return;
        };
        if found >= expected || !self.published {
            return;
        }
        let dir = store.backing_path(&rel);
        let protocol = self
            .commit
            .protocol
            .unwrap_or_else(|| fskind::protocol_for(&dir));
        let me = self.commit.holder.clone().unwrap_or_else(HolderId::current);
        turn::announce(&dir, protocol, &me);
    }

    fn resync(&mut self, store: &Store) {
        self.hint = None;
        let Target::Dir { project, session } = &self.target else {
            self.cursor = SeqCursor::new_session();
            return;
        };
        match store.transcript(project, session) {
            Ok(t) => {
                if let Ok(next) = t.next_seq() {
                    self.cursor = SeqCursor::after(next);
                    self.published = true;
                }
            }
            Err(_) if !self.published => self.cursor = SeqCursor::new_session(),
            Err(_) => {}
        }
    }

    fn append(&mut self, store: &Store, batch: &[u8]) -> Result<AppendOutcome> {
        let path = self.path_for_errors(store);
        let outcome = append_with_options(
            &path,
            store.encoding(),
            self.hint.as_ref(),
            &self.commit,
            |tail| {
                // Re-checked under the lock against the real tail.
                SeqCursor::after(tail.next_seq)
                    .check_batch(batch)
                    .map_err(|e| e.into_store(&path))?;
                Ok(batch.to_vec())
            },
        )?;
        self.hint = Some(outcome.hint);
        Ok(outcome)
    }

    fn publish(&mut self, store: &Store, batch: &[u8]) -> Result<PathBuf> {
        let (header, rest) = match batch.iter().position(|&b| b == b'\n') {
            Some(i) => batch.split_at(i + 1),
            None => (batch, &[][..]),
        };
        let path = publish_session(store.root(), store.encoding(), header, rest);
        // Published or refused, the root changed or holds what refused it:
        // the catalog looks again at its next use.
        store.discovery().invalidate();
        let path = path?;
        self.published = true;
        self.hint = None;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreOptions;

    const HEADER: &str = "{\"type\":\"session\",\"version\":0,\"id\":\"a/b\",\"createdAt\":1,\"delegationDepth\":0,\"cwd\":\"/home/x\"}\n";

    fn event(seq: u64) -> String {
        format!(
            "{{\"type\":\"x-note\",\"seq\":{seq},\"time\":1,\"data\":{{}},\"ignorable\":true}}\n"
        )
    }

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
        (dir, store)
    }

    #[test]
    fn header_placement_is_checked_once_for_a_directory() {
        let (_dir, store) = store();
        let mut w = SessionWriter::open(&store, "--home-x--".as_ref(), "a~002Fb".as_ref()).unwrap();
        w.accept(&store, HEADER.as_bytes()).unwrap();
        for (project, session) in [("--home-y--", "a~002Fb"), ("--home-x--", "ab")] {
            let mut w = SessionWriter::open(&store, project.as_ref(), session.as_ref()).unwrap();
            let e = w.accept(&store, HEADER.as_bytes()).unwrap_err();
            assert_eq!(e.errno(), libc::EINVAL, "{e}");
            assert!(e.to_string().contains("--home-x--"), "{e}");
            assert!(w.pending().is_empty());
        }
    }

    #[test]
    fn create_publishes_then_appends_and_a_stale_batch_is_dropped() {
        let (_dir, store) = store();
        let mut w = SessionWriter::create("a/b").unwrap();
        assert!(w.session_dir().is_none());
        let first = format!("{HEADER}{}", event(0));
        assert_eq!(w.accept(&store, first.as_bytes()).unwrap(), 2);
        assert!(matches!(w.commit(&store).unwrap(), Commit::Published(_)));
        assert_eq!(w.session_dir().unwrap(), Path::new("--home-x--/a~002Fb"));

        // Two writers at seq 1: the first to commit wins, the other's batch
        // is dropped whole and its cursor moves to the real tail.
        let mut other =
            SessionWriter::open(&store, "--home-x--".as_ref(), "a~002Fb".as_ref()).unwrap();
        w.accept(&store, event(1).as_bytes()).unwrap();
        other.accept(&store, event(1).as_bytes()).unwrap();
        assert!(matches!(w.commit(&store).unwrap(), Commit::Appended(_)));
        let e = other.commit(&store).unwrap_err();
        assert!(drops_batch(&e), "{e}");
        assert!(other.pending().is_empty());
        assert_eq!(other.next_seq(), 2);

        let t = store
            .transcript("--home-x--".as_ref(), "a~002Fb".as_ref())
            .unwrap();
        assert_eq!(t.next_seq().unwrap(), 2);
    }

    /// A tail the caller looked up before a commit of its own (the batch
    /// window expired on another thread while a write waited for its
    /// handle): the next line is checked against the refreshed tail, not
    /// refused as leaving a gap (a tester's single writer had a third of
    /// its 4.5 MB writes refused so at `--batch-ms 1`); a line that does
    /// not continue the real tail is still refused.
    #[test]
    fn a_tail_looked_up_before_a_commit_is_refreshed_before_a_refusal() {
        let (dir, store) = store();
        let mut w = SessionWriter::create("a/b").unwrap();
        w.accept(&store, format!("{HEADER}{}", event(0)).as_bytes())
            .unwrap();
        w.commit(&store).unwrap();
        let path = dir.path().join("--home-x--/a~002Fb/session.jsonl.zstd");
        let view = || {
            Transcript::open(
                &path,
                store.encoding(),
                std::sync::Arc::new(crate::store::cache::FrameCache::new(1 << 20)),
            )
            .unwrap()
        };
        let (stale, stale_too) = (view(), view());
        assert_eq!(stale.next_seq_as_refreshed().unwrap(), 1);
        // Writers of the session's directory, as a mount's handles are.
        let open =
            || SessionWriter::open(&store, "--home-x--".as_ref(), "a~002Fb".as_ref()).unwrap();
        let (mut w, mut other) = (open(), open());
        w.accept(&store, event(1).as_bytes()).unwrap();
        w.commit(&store).unwrap();
        assert_eq!(stale.next_seq_as_refreshed().unwrap(), 1, "still stale");
        // A view behind the writer's own commit.
        let e = w
            .accept_after(&store, event(1).as_bytes(), Some(&stale))
            .unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL, "seq 1 is taken: {e}");
        // Another handle's commit made the view stale: refreshed at the
        // refusal.
        assert_eq!(stale_too.next_seq_as_refreshed().unwrap(), 1, "still stale");
        assert_eq!(
            other
                .accept_after(&store, event(2).as_bytes(), Some(&stale_too))
                .unwrap(),
            1
        );
        other.discard(&store);
        assert_eq!(
            w.accept_after(&store, event(2).as_bytes(), Some(&stale))
                .unwrap(),
            1
        );
        w.commit(&store).unwrap();
        assert_eq!(stale.next_seq().unwrap(), 3);
    }

    #[test]
    fn create_refuses_another_id_and_a_taken_id() {
        let (_dir, store) = store();
        let mut w = SessionWriter::create("other").unwrap();
        let e = w.accept(&store, HEADER.as_bytes()).unwrap_err();
        assert_eq!(e.errno(), libc::EINVAL);

        let mut first = SessionWriter::create("a/b").unwrap();
        first.accept(&store, HEADER.as_bytes()).unwrap();
        first.commit(&store).unwrap();
        let mut second = SessionWriter::create("a/b").unwrap();
        second.accept(&store, HEADER.as_bytes()).unwrap();
        let e = second.commit(&store).unwrap_err();
        assert_eq!(e.errno(), libc::EEXIST, "{e}");
        // The writer now continues the session that won.
        assert!(second.is_published());
        second.accept(&store, event(0).as_bytes()).unwrap();
        second.commit(&store).unwrap();
    }

    #[test]
    fn bad_lines_are_refused_whole() {
        let (_dir, store) = store();
        let mut w = SessionWriter::create("a/b").unwrap();
        let bad = format!("{HEADER}{}", event(3));
        let e = w.accept(&store, bad.as_bytes()).unwrap_err();
        assert!(matches!(e, StoreError::SeqConflict { line: 2, .. }), "{e}");
        assert!(w.pending().is_empty());
        assert_eq!(w.accept(&store, b"partial").unwrap(), 0);
    }
}
