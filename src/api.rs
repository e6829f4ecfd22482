//! The public API for programs that build tools on a session store: open a
//! root, list and find sessions, read transcripts, create sessions and
//! append events — under the same rules as the mount and the command line.
//!
//! Source: `../shared/spec/FORMAT.md` (layout, header, event lines,
//! writing), `IDENTITY.md` (§2 ids found by body, §3 path spellings) and
//! `MOUNT.md` (Appending, Creating a session).
//!
//! ```no_run
//! use sessionfs::api::Root;
//! use serde_json::json;
//!
//! let root = Root::open("/home/alice/.dsh/sessions")?;
//! let mut w = root.create_session("session_01JH8Z4N7Q2W3E4R5T6Y7U8I9O", Some("/home/alice/app"), 1767603711000)?;
//! let seq = w.next_seq();
//! w.append_event(&json!({"type": "x-note", "seq": seq, "time": 1767603711001u64, "data": {}, "ignorable": true}))?;
//! w.commit()?;
//! let session = root.find("cse_01JH8Z4N7Q2W3E4R5T6Y7U8I9O")?;
//! for line in session.lines() {
//!     println!("{}", String::from_utf8_lossy(&line?));
//! }
//! # Ok::<(), sessionfs::api::Error>(())
//! ```
#![warn(missing_docs)]

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::identity::{IdLookupError, IdentityRoot, RootError};
use crate::store::catalog::{FindError, SessionSummary};
use crate::store::publish::header_line_from_fields;
use crate::store::session_writer::{Commit, SessionWriter};
use crate::store::{Store, StoreOptions, Transcript};

pub use crate::store::catalog::SessionListing;
pub use crate::store::StoreError;

/// How many decompressed bytes one read of [`Session::lines`] asks for.
const READ_CHUNK: u32 = 1 << 20;

/// Everything a call of this API can fail with.
#[derive(Debug)]
pub enum Error {
    /// The root could not be resolved (missing, not a directory, a
    /// permission error on its path).
    Root(RootError),
    /// No session, or no single session, is named by the id (IDENTITY.md
    /// §2).
    Id(IdLookupError),
    /// The store refused or failed: each variant names its path, and
    /// [`StoreError::errno`] gives the errno the mount would return
    /// (EINVAL for a refused line, EEXIST for a taken id, EIO for damage).
    Store(StoreError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Root(e) => e.fmt(f),
            Error::Id(e) => e.fmt(f),
            Error::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Root(e) => Some(e),
            Error::Id(e) => Some(e),
            Error::Store(e) => Some(e),
        }
    }
}

impl From<StoreError> for Error {
    fn from(e: StoreError) -> Self {
        Error::Store(e)
    }
}

impl From<FindError> for Error {
    fn from(e: FindError) -> Self {
        match e {
            FindError::Id(e) => Error::Id(e),
            FindError::Store(e) => Error::Store(e),
        }
    }
}

/// Result of this API.
pub type Result<T> = std::result::Result<T, Error>;

/// An open session store: the directory holding `<project>/<session>/`
/// transcripts (FORMAT.md, Layout).
pub struct Root {
    identity: IdentityRoot,
    store: Store,
}

impl Root {
    /// Opens the store at `path`, resolved once (symbolic links followed)
    /// and never looked up again. The encoding (zstd or raw) is the
    /// root's own; an empty root is zstd.
    ///
    /// Errors: [`Error::Root`] when `path` cannot be resolved;
    /// [`Error::Store`] ([`StoreError::Io`], [`StoreError::NotFound`])
    /// when it is not a readable directory.
    pub fn open(path: impl AsRef<Path>) -> Result<Root> {
        let identity = IdentityRoot::resolve(path.as_ref()).map_err(Error::Root)?;
        let store = Store::open(identity.io_path(), StoreOptions::default())?;
        Ok(Root { identity, store })
    }

    /// The root's real path (the one every I/O uses).
    pub fn path(&self) -> &Path {
        self.identity.io_path()
    }

    /// The store underneath, for the lower-level calls of
    /// [`crate::store`].
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Every valid session of the root, sorted by project then session
    /// directory, and one error per session that could not be listed (one
    /// bad session never hides the others).
    ///
    /// Errors: [`Error::Store`] only when the root itself cannot be listed.
    pub fn sessions(&self) -> Result<SessionListing> {
        Ok(self.store.sessions()?)
    }

    /// The session named by `id`: the one whose id equals it, else the only
    /// one whose part after the last `_` equals `id`'s (at least 8
    /// characters; `cse_X` finds `session_X`; IDENTITY.md §2).
    ///
    /// Errors: [`Error::Id`] when none or several match by body;
    /// [`Error::Store`] when the session is damaged (EIO variants: a
    /// duplicate id, a misplaced, corrupt or header-less transcript).
    pub fn find(&self, id: &str) -> Result<Session> {
        let (summary, transcript) = self.store.find_transcript_by_id(id)?;
        Ok(Session {
            summary,
            transcript,
        })
    }

    /// A writer creating the session `id` with its header (`createdAt` =
    /// `created_at_ms`, milliseconds since the Unix epoch; `cwd` chooses
    /// the project directory, `_no-cwd` when `None`; FORMAT.md, Header
    /// line). Nothing is on disk until [`Appender::commit`], which
    /// publishes the session without ever replacing one.
    ///
    /// Errors: [`StoreError::InvalidName`] for the empty id;
    /// [`StoreError::NameTooLong`] when the encoded id exceeds 244 bytes;
    /// [`StoreError::InvalidLine`] when the header is refused. A taken id
    /// fails at the commit ([`StoreError::AlreadyExists`], EEXIST).
    pub fn create_session(
        &self,
        id: &str,
        cwd: Option<&str>,
        created_at_ms: u64,
    ) -> Result<Appender<'_>> {
        let mut fields = Map::new();
        fields.insert("version".into(), Value::from(0));
        fields.insert("id".into(), Value::from(id));
        fields.insert("createdAt".into(), Value::from(created_at_ms));
        if let Some(cwd) = cwd {
            fields.insert("cwd".into(), Value::from(cwd));
        }
        let mut writer = SessionWriter::create(id)?;
        writer.accept(&self.store, &header_line_from_fields(&fields))?;
        Ok(Appender { root: self, writer })
    }

    /// A writer for `id` under the rules of `sessionfs append`: it
    /// continues the session the id rules find ([`Root::find`]: exact id,
    /// else a unique body match); when none is found it creates the
    /// session `id` exactly, whose first line must then be its header.
    /// A body-only match is continued, never duplicated by a new session.
    ///
    /// Errors: [`Error::Id`] when several sessions match by body;
    /// [`Error::Store`] when the found session is damaged, or for an id
    /// that cannot be created (empty, too long).
    pub fn appender(&self, id: &str) -> Result<Appender<'_>> {
        let writer = match self.store.find_by_id(id) {
            Ok(summary) => {
                SessionWriter::open(&self.store, &summary.project_dir, &summary.session_dir)?
            }
            Err(FindError::Id(IdLookupError::NotFound { .. })) => SessionWriter::create(id)?,
            Err(e) => return Err(e.into()),
        };
        Ok(Appender { root: self, writer })
    }
}

/// One valid session, found by [`Root::find`]: its identity and its
/// decompressed transcript (FORMAT.md, Layout and Event lines).
pub struct Session {
    summary: SessionSummary,
    transcript: Arc<Transcript>,
}

impl Session {
    /// The session id (the header's `id`).
    pub fn id(&self) -> &str {
        &self.summary.id
    }

    /// The header's `cwd` as stored, `None` for a `_no-cwd` session.
    pub fn cwd(&self) -> Option<&str> {
        self.summary.cwd.as_deref()
    }

    /// The header's `createdAt`, milliseconds since the Unix epoch.
    pub fn created_at_ms(&self) -> u64 {
        self.summary.created_at_ms
    }

    /// The backing transcript file (`<root>/<project>/<session>/session.jsonl[.zstd]`).
    pub fn transcript_path(&self) -> &Path {
        &self.summary.transcript_path
    }

    /// The session directory relative to the root (`<project>/<session>`).
    pub fn dir(&self) -> PathBuf {
        Path::new(&self.summary.project_dir).join(&self.summary.session_dir)
    }

    /// Byte length of the decompressed committed transcript, re-read from
    /// disk (growth by other writers included).
    ///
    /// Errors: [`Error::Store`] when the file can no longer be read or was
    /// replaced by a damaged one.
    pub fn len(&self) -> Result<u64> {
        Ok(self.transcript.refresh()?.plain_len)
    }

    /// Whether the transcript is empty: never for a valid session (the
    /// header is its first line); present for symmetry with
    /// [`Session::len`].
    ///
    /// Errors: as [`Session::len`].
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Up to `max_len` decompressed bytes from byte `offset` (fewer at the
    /// end; empty past it). Only the frames the range touches are
    /// decompressed.
    ///
    /// Errors: [`StoreError::Corrupt`] (EIO) when a touched frame fails its
    /// checksum or decoding; [`StoreError::Io`].
    pub fn read_at(&self, offset: u64, max_len: u32) -> Result<Vec<u8>> {
        Ok(self.transcript.read(offset, max_len)?)
    }

    /// The decompressed transcript from byte `offset` to its committed
    /// end (the whole transcript from 0): JSONL, header line first.
    ///
    /// Errors: as [`Session::read_at`].
    pub fn read_from(&self, offset: u64) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut at = offset;
        loop {
            let chunk = self.read_at(at, READ_CHUNK)?;
            if chunk.is_empty() {
                return Ok(out);
            }
            at += chunk.len() as u64;
            out.extend_from_slice(&chunk);
        }
    }

    /// The whole decompressed transcript: `read_from(0)`.
    ///
    /// Errors: as [`Session::read_at`].
    pub fn read_all(&self) -> Result<Vec<u8>> {
        self.read_from(0)
    }

    /// The transcript's lines, each without its `\n`, header first, read
    /// 1 MiB at a time. A read error ends the iteration after yielding it.
    pub fn lines(&self) -> Lines<'_> {
        Lines {
            session: self,
            offset: 0,
            buf: Vec::new(),
            done: false,
        }
    }
}

/// Iterator of [`Session::lines`]: `Result<Vec<u8>>` per line.
pub struct Lines<'a> {
    session: &'a Session,
    offset: u64,
    buf: Vec<u8>,
    done: bool,
}

impl Iterator for Lines<'_> {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let mut line: Vec<u8> = self.buf.drain(..=i).collect();
                line.pop();
                return Some(Ok(line));
            }
            if self.done {
                return None;
            }
            match self.session.read_at(self.offset, READ_CHUNK) {
                Ok(chunk) if chunk.is_empty() => self.done = true,
                Ok(chunk) => {
                    self.offset += chunk.len() as u64;
                    self.buf.extend_from_slice(&chunk);
                }
                Err(e) => {
                    self.done = true;
                    self.buf.clear();
                    return Some(Err(e));
                }
            }
        }
    }
}

/// Appends lines to one session, checked as they are given and committed
/// as one frame per [`Appender::commit`] (MOUNT.md, Appending). Dropping
/// an appender discards what was not committed.
pub struct Appender<'a> {
    root: &'a Root,
    writer: SessionWriter,
}

impl Appender<'_> {
    /// The `seq` the next event must carry (0 right after a new header;
    /// a packed chunk row counts for its members).
    pub fn next_seq(&self) -> u64 {
        self.writer.next_seq()
    }

    /// Bytes given and not yet committed.
    pub fn pending_len(&self) -> usize {
        self.writer.pending().len()
    }

    /// Adds `lines` (complete JSONL lines, each ending in `\n`), checked
    /// all or nothing: each one JSON object continuing `seq` (the first
    /// line of a session being created: its header).
    ///
    /// Errors: [`StoreError::InvalidLine`] (EINVAL) for an incomplete last
    /// line or a line that is not one valid event or header of this
    /// session; [`StoreError::SeqConflict`] (EINVAL) for a line not
    /// continuing `seq`. Nothing is taken.
    pub fn append_lines(&mut self, lines: &[u8]) -> Result<usize> {
        if !lines.is_empty() && !lines.ends_with(b"\n") {
            return Err(Error::Store(StoreError::InvalidLine {
                path: self.writer.path_for_errors(&self.root.store),
                line: lines.iter().filter(|&&b| b == b'\n').count() + 1,
                reason: "the line has no newline at its end; end every line with \\n".into(),
            }));
        }
        Ok(self.writer.accept(&self.root.store, lines)?)
    }

    /// Adds one event (a JSON object with `type`, `seq`, `time`, `data`;
    /// FORMAT.md, Event lines) as one line. Mark event types of your own
    /// `"ignorable": true`, or the harness refuses to load the session.
    ///
    /// Errors: as [`Appender::append_lines`].
    pub fn append_event(&mut self, event: &Value) -> Result<()> {
        let mut line = serde_json::to_vec(event).map_err(|e| {
            Error::Store(StoreError::InvalidLine {
                path: self.root.path().to_path_buf(),
                line: 1,
                reason: format!("the event cannot be serialized: {e}"),
            })
        })?;
        line.push(b'\n');
        self.append_lines(&line).map(|_| ())
    }

    /// Commits what is pending as one frame: publishes a session being
    /// created, else appends under the append lock, where the batch is
    /// checked again against the real tail. Returns the transcript's
    /// backing path (`None` when nothing was pending).
    ///
    /// Errors: [`StoreError::SeqConflict`] / [`StoreError::InvalidLine`]
    /// (EINVAL) when another writer got there first, and
    /// [`StoreError::AlreadyExists`] (EEXIST) when the id was taken: the
    /// batch is dropped whole and [`Appender::next_seq`] continues the real
    /// tail. [`StoreError::TornTail`] (EIO: run `sessionfs check --repair`)
    /// and [`StoreError::Io`] keep the batch for a retry.
    pub fn commit(&mut self) -> Result<Option<PathBuf>> {
        let store = &self.root.store;
        Ok(match self.writer.commit(store)? {
            Commit::Nothing => None,
            Commit::Published(path) => Some(path),
            Commit::Appended(_) => self
                .writer
                .session_dir()
                .map(|dir| store.backing_path(&dir).join(store.encoding().file_name())),
        })
    }
}
