//! The mount's core: plain methods (lookup, getattr, open, read, readdir,
//! readlink, statfs) over the store, returning `Result`s. No fuser type
//! appears here, so it is tested without a mount; `adapter.rs` maps these
//! methods to kernel requests.
//!
//! Source: MOUNT.md, "The tree", "Attributes", "Reading", "Details".

use std::collections::{HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::hash::{Hash, Hasher};
use std::num::NonZeroUsize;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use super::inode::{InodeTable, Node, BY_ID_DIR};
use super::writer::Writer;
use crate::store::{EntryKind, Store, StoreError, Transcript, VIEW_NAME};

/// Names file managers probe for at the root and project levels; when they
/// do not exist they get a fast ENOENT (one `lstat`, no store lookup, no
/// log line; MOUNT.md, Details).
const PROBE_NAMES: [&str; 9] = [
    ".Trash",
    ".hidden",
    ".directory",
    ".xdg-volume-info",
    "desktop.ini",
    "autorun.inf",
    ".DS_Store",
    "Thumbs.db",
    ".git",
];

fn is_probe_name(name: &OsStr) -> bool {
    let b = name.as_bytes();
    PROBE_NAMES.iter().any(|p| p.as_bytes() == b) || b.starts_with(b".Trash-")
}

/// A directory listing in cookie order: `(cookie, entry)` pairs.
pub type Listing = Arc<Vec<(u64, DirEntry)>>;

/// Directory listings kept for readdir continuations.
const LISTINGS_KEPT: usize = 64;

/// An error of a mount operation: a store error (logged with its path and
/// fix) or a plain errno.
#[derive(Debug)]
pub enum FsError {
    /// The store refused or failed.
    Store(StoreError),
    /// A plain errno (ENOENT for an unknown inode, EBADF, ...).
    Errno(i32),
}

impl FsError {
    /// The errno to reply with.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::Store(e) => e.errno(),
            FsError::Errno(n) => *n,
        }
    }
}

impl From<StoreError> for FsError {
    fn from(e: StoreError) -> Self {
        FsError::Store(e)
    }
}

/// Result of a mount operation.
pub type FsResult<T> = Result<T, FsError>;

/// File type of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
}

/// Attributes of a node, as `stat` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    pub ino: u64,
    pub kind: Kind,
    /// Bytes; for a transcript, the decompressed committed length.
    pub size: u64,
    /// 512-byte blocks of the backing file (the compressed one for a
    /// transcript, so `du` shows disk use).
    pub blocks: u64,
    pub atime: SystemTime,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
    /// Permission bits (`st_mode & 0o7777`).
    pub perm: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub rdev: u32,
    pub blksize: u32,
}

/// One directory entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub ino: u64,
    pub kind: Kind,
    pub name: OsString,
}

/// Statistics of the backing file system (`statvfs` of the root).
#[derive(Debug, Clone, Copy)]
pub struct FsStats {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

pub(super) enum Handle {
    Transcript(Arc<Transcript>),
    /// A writable `session.jsonl` (appends buffered per handle).
    Writer(Arc<Writer>),
    /// A passed-through file, opened with the caller's access mode.
    File(Arc<File>),
}

/// The mount's core.
pub struct SessionFs {
    pub(super) store: Arc<Store>,
    pub(super) inodes: InodeTable,
    pub(super) handles: Mutex<HashMap<u64, Handle>>,
    next_fh: AtomicU64,
    /// Project and session directories made by `mkdir` that exist only in
    /// this mount until something is committed in them (mount paths).
    pub(super) virtual_dirs: Mutex<HashSet<PathBuf>>,
    /// Batch window of appends.
    pub(super) batch_window: Duration,
    /// Inodes whose attributes the kernel must drop (sent by a thread
    /// outside the request handlers: MOUNT.md, Details).
    pub(super) invalidate: Mutex<Option<Sender<u64>>>,
    /// The latest listing of each recently read directory, reused by the
    /// continuation calls of one readdir pass.
    listings: Mutex<lru::LruCache<u64, Listing>>,
}

fn time(secs: i64, nsecs: i64) -> SystemTime {
    let nanos = Duration::from_nanos(nsecs.clamp(0, 999_999_999) as u64);
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + nanos
    }
}

fn kind_of_meta(meta: &Metadata) -> Kind {
    let t = meta.file_type();
    if t.is_dir() {
        Kind::Dir
    } else if t.is_symlink() {
        Kind::Symlink
    } else {
        Kind::File
    }
}

fn attr_of(ino: u64, meta: &Metadata) -> Attr {
    Attr {
        ino,
        kind: kind_of_meta(meta),
        size: meta.size(),
        blocks: meta.blocks(),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        perm: (meta.mode() & 0o7777) as u16,
        nlink: meta.nlink() as u32,
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: meta.rdev() as u32,
        blksize: meta.blksize() as u32,
    }
}

fn kind_of_entry(kind: EntryKind) -> Kind {
    match kind {
        EntryKind::Dir => Kind::Dir,
        EntryKind::Symlink => Kind::Symlink,
        EntryKind::File | EntryKind::Transcript | EntryKind::FlatArtifact => Kind::File,
    }
}

fn lstat(path: &Path) -> FsResult<Metadata> {
    std::fs::symlink_metadata(path).map_err(|e| FsError::Store(StoreError::io("stat", path, e)))
}

impl SessionFs {
    /// A mount core over `store`.
    pub fn new(store: Arc<Store>, batch_window: Duration) -> Self {
        SessionFs {
            store,
            inodes: InodeTable::default(),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            virtual_dirs: Mutex::new(HashSet::new()),
            batch_window,
            invalidate: Mutex::new(None),
            listings: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(LISTINGS_KEPT).unwrap_or(NonZeroUsize::MIN),
            )),
        }
    }

    /// Sends attribute invalidations of committed transcripts to `tx` (a
    /// thread that owns the kernel notifier).
    pub fn set_invalidation_channel(&self, tx: Sender<u64>) {
        *self.invalidate.lock() = Some(tx);
    }

    pub(super) fn invalidate_attrs(&self, ino: u64) {
        if let Some(tx) = self.invalidate.lock().as_ref() {
            let _ = tx.send(ino);
        }
    }

    pub(super) fn is_virtual(&self, path: &Path) -> bool {
        self.virtual_dirs.lock().contains(path)
    }

    /// The store served.
    pub fn store(&self) -> &Store {
        &self.store
    }

    pub(super) fn node(&self, ino: u64) -> FsResult<(PathBuf, Node)> {
        self.inodes.node(ino).ok_or(FsError::Errno(libc::ENOENT))
    }

    pub(super) fn add_handle(&self, handle: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.lock().insert(fh, handle);
        fh
    }

    /// Looks `name` up in directory `parent` and returns its attributes
    /// (MOUNT.md, The tree). Damaged transcripts and flat artifacts fail
    /// with the store's error (EIO); probe names get ENOENT at once.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> FsResult<Attr> {
        let (parent_path, parent_node) = self.node(parent)?;
        let child_path = parent_path.join(name);
        let child = match parent_node {
            Node::Root => {
                if name == BY_ID_DIR {
                    Node::ById
                } else if self.is_absent_probe(&child_path) {
                    return Err(FsError::Errno(libc::ENOENT));
                } else {
                    let backing = self.store.backing_path(Path::new(name));
                    match std::fs::symlink_metadata(&backing) {
                        Ok(meta) if meta.is_dir() => {}
                        Ok(_) => return Err(FsError::Errno(libc::ENOENT)),
                        Err(_) if self.is_virtual(&child_path) => {}
                        Err(e) => return Err(StoreError::io("stat", &backing, e).into()),
                    }
                    Node::Project {
                        project: name.to_os_string(),
                    }
                }
            }
            Node::ById => {
                let (project, session) = self.store.find_session_dir_by_id(name)?;
                Node::ByIdLink { project, session }
            }
            Node::Project { project } => {
                if self.is_absent_probe(&child_path) {
                    return Err(FsError::Errno(libc::ENOENT));
                }
                match self.store.lookup_in_project(&project, name) {
                    Ok(_) => {}
                    Err(StoreError::NotFound { .. }) if self.is_virtual(&child_path) => {}
                    Err(e) => return Err(e.into()),
                }
                Node::Session {
                    project,
                    session: name.to_os_string(),
                }
            }
            Node::Session { project, session } => {
                if name == VIEW_NAME {
                    Node::Transcript { project, session }
                } else if crate::store::is_publication_temp(name)
                    || name == crate::store::Encoding::Zstd.file_name()
                {
                    return Err(FsError::Errno(libc::ENOENT));
                } else if crate::store::is_foreign_transcript_name(name) {
                    return Err(StoreError::UnsupportedVersion {
                        path: self.store.backing_path(&child_path),
                        detail: "a transcript under a name this format version does not use".into(),
                    }
                    .into());
                } else {
                    Node::Passthrough {
                        rel: child_path.clone(),
                    }
                }
            }
            Node::Passthrough { .. } => Node::Passthrough {
                rel: child_path.clone(),
            },
            Node::Transcript { .. } | Node::ByIdLink { .. } => {
                return Err(FsError::Errno(libc::ENOTDIR))
            }
        };
        let attr_node = child.clone();
        let ino = self.inodes.ino_for(child_path, child);
        self.attr(ino, &attr_node)
    }

    /// Whether `path` (relative to the root, at the root or project level)
    /// is a name file managers probe for that does not exist: such names
    /// get ENOENT without the store's lookup and without a log line. One
    /// that exists (a `.git` directory) is looked up like any other name,
    /// so that it shows with its real type, as readdir lists it.
    fn is_absent_probe(&self, path: &Path) -> bool {
        path.file_name().is_some_and(is_probe_name)
            && !self.is_virtual(path)
            && std::fs::symlink_metadata(self.store.backing_path(path)).is_err()
    }

    /// Attributes of an inode. A transcript's size (bytes) is its committed
    /// length, re-read from its backing file so that growth shows within
    /// the attribute timeout, plus the complete lines pending in this
    /// mount's handles on it (MOUNT.md, Attributes); getattr by path and
    /// fstat both come here.
    pub fn getattr(&self, ino: u64) -> FsResult<Attr> {
        let (_, node) = self.node(ino)?;
        self.attr(ino, &node)
    }

    fn attr(&self, ino: u64, node: &Node) -> FsResult<Attr> {
        match node {
            Node::Root => Ok(attr_of(ino, &lstat(self.store.root())?)),
            Node::ById => {
                let mut a = attr_of(ino, &lstat(self.store.root())?);
                a.perm = 0o555;
                Ok(a)
            }
            Node::ByIdLink { project, session } => {
                let mut a = attr_of(
                    ino,
                    &lstat(&self.store.backing_path(&Path::new(project).join(session)))?,
                );
                a.kind = Kind::Symlink;
                a.perm = 0o777;
                a.nlink = 1;
                a.blocks = 0; // a link of the mount's own, no disk use
                a.size = by_id_target(project, session).len() as u64;
                Ok(a)
            }
            Node::Project { .. } | Node::Session { .. } if self.is_virtual(&self.node(ino)?.0) => {
                let path = self.node(ino)?.0;
                match std::fs::symlink_metadata(self.store.backing_path(&path)) {
                    Ok(meta) => {
                        // Committed in the meantime: no longer virtual.
                        self.virtual_dirs.lock().remove(&path);
                        Ok(attr_of(ino, &meta))
                    }
                    Err(_) => Ok(virtual_dir_attr(ino)),
                }
            }
            Node::Project { project } => Ok(attr_of(
                ino,
                &std::fs::symlink_metadata(self.store.backing_path(Path::new(project))).map_err(
                    |e| StoreError::io("stat", &self.store.backing_path(Path::new(project)), e),
                )?,
            )),
            Node::Session { project, session } => {
                let path = self.store.backing_path(&Path::new(project).join(session));
                Ok(attr_of(
                    ino,
                    &std::fs::symlink_metadata(&path)
                        .map_err(|e| StoreError::io("stat", &path, e))?,
                ))
            }
            Node::Transcript { project, session } => {
                let t = match self.store.transcript(project, session) {
                    Err(StoreError::NotFound { .. }) if self.has_unpublished_writer(ino) => {
                        let mut a = new_transcript_attr(ino);
                        a.size = self.pending_len_of(ino);
                        return Ok(a);
                    }
                    other => other?,
                };
                let view = t.refresh()?;
                let mut a = attr_of(ino, &view.meta);
                a.size = view.plain_len + self.pending_len_of(ino);
                Ok(a)
            }
            Node::Passthrough { rel } => Ok(attr_of(ino, &lstat(&self.store.backing_path(rel))?)),
        }
    }

    /// Opens a file with the `open(2)` flags `flags`; returns the file
    /// handle and whether it is served without the page cache: a writer (so
    /// that uncommitted bytes never sit in it) or a transcript with known
    /// damage (so that reads at the damage fail instead of ending early).
    ///
    /// Errors: EISDIR for directories; EPERM for O_TRUNC of a non-empty
    /// transcript; the store's error for a damaged transcript.
    pub fn open(&self, ino: u64, flags: i32) -> FsResult<(u64, bool)> {
        let (_, node) = self.node(ino)?;
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let mut bypass = false;
        let handle = match node {
            Node::Transcript { project, session } if writing => {
                if flags & libc::O_TRUNC != 0 && self.getattr(ino)?.size > 0 {
                    log::warn!(
                        "open of {}/{}/session.jsonl with O_TRUNC refused: transcripts are                          append-only; use >> (O_APPEND) to add lines",
                        project.to_string_lossy(),
                        session.to_string_lossy()
                    );
                    return Err(FsError::Errno(libc::EPERM));
                }
                let append = flags & libc::O_APPEND != 0;
                Handle::Writer(Arc::new(Writer::open(
                    &self.store,
                    ino,
                    project,
                    session,
                    append,
                )?))
            }
            Node::Transcript { project, session } => {
                let t = self.store.transcript(&project, &session)?;
                // Known damage: served without the page cache, so that the
                // short read before the damage is not taken for the end of
                // the file by the kernel, and a read at the damage fails.
                bypass = t.known_damage();
                Handle::Transcript(t)
            }
            Node::Passthrough { rel } => {
                let path = self.store.backing_path(&rel);
                let file = std::fs::OpenOptions::new()
                    .read(flags & libc::O_ACCMODE != libc::O_WRONLY)
                    .write(writing)
                    // O_NONBLOCK: opening a FIFO must not block a request thread.
                    .custom_flags(flags & (libc::O_APPEND | libc::O_TRUNC) | libc::O_NONBLOCK)
                    .open(&path)
                    .map_err(|e| StoreError::io("open", &path, e))?;
                Handle::File(Arc::new(file))
            }
            _ => return Err(FsError::Errno(libc::EISDIR)),
        };
        let writer = matches!(handle, Handle::Writer(_)) || bypass;
        Ok((self.add_handle(handle), writer))
    }

    /// Reads up to `size` bytes at `offset` through an open file handle.
    ///
    /// Errors: EBADF for an unknown handle; EIO for a corrupt frame.
    pub fn read(&self, ino: u64, fh: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        let handle = self.handles.lock().get(&fh).map(Handle::share);
        match handle {
            Some(Handle::Transcript(t)) => self.read_transcript(ino, &t, offset, size),
            Some(Handle::Writer(w)) => {
                let dir = w.session_dir();
                let (project, session) = split_session_dir(&dir);
                match self.store.transcript(project, session) {
                    Ok(t) => self.read_transcript(ino, &t, offset, size),
                    Err(StoreError::NotFound { .. }) => Ok(self.pending_view(ino, 0, offset, size)),
                    Err(e) => Err(e.into()),
                }
            }
            Some(Handle::File(f)) => {
                let mut buf = vec![0u8; size as usize];
                let mut got = 0;
                while got < buf.len() {
                    match f.read_at(&mut buf[got..], offset + got as u64) {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => {
                            return Err(FsError::Errno(e.raw_os_error().unwrap_or(libc::EIO)))
                        }
                    }
                }
                buf.truncate(got);
                Ok(buf)
            }
            _ => Err(FsError::Errno(libc::EBADF)),
        }
    }

    /// Reads a transcript's view for inode `ino`. The kernel sizes reads by
    /// what it believes the file holds, which includes bytes written through
    /// this mount and not yet committed: a short reply there would be
    /// zero-filled by the kernel. So a read past the committed end first
    /// commits this mount's pending lines of that transcript, and a still
    /// incomplete last line of its writer is served as written
    /// (read-your-writes, as on a local file system).
    fn read_transcript(
        &self,
        ino: u64,
        t: &Transcript,
        offset: u64,
        size: u32,
    ) -> FsResult<Vec<u8>> {
        let end = offset.saturating_add(u64::from(size));
        if end > t.cached_attr().plain_len {
            self.commit_pending_of(ino);
        }
        let mut data = t.read(offset, size)?;
        let got_to = offset + data.len() as u64;
        if got_to < end {
            let committed = t.cached_attr().plain_len;
            let rest = (end - got_to) as u32;
            data.extend(self.pending_view(ino, committed, got_to, rest));
        }
        Ok(data)
    }

    /// Every open writer.
    pub(super) fn writers(&self) -> Vec<Arc<Writer>> {
        self.handles
            .lock()
            .values()
            .filter_map(|h| match h {
                Handle::Writer(w) => Some(Arc::clone(w)),
                _ => None,
            })
            .collect()
    }

    /// Writers open on transcript `ino`.
    fn writers_of(&self, ino: u64) -> Vec<Arc<Writer>> {
        let mut writers = self.writers();
        writers.retain(|w| w.ino == ino);
        writers
    }

    /// Bytes of complete lines pending in this mount's handles on the
    /// transcript `ino`: added to its committed length wherever the mount
    /// reports a size (getattr, fstat, truncate and fallocate checks;
    /// MOUNT.md, Attributes). Incomplete lines are not counted.
    pub(super) fn pending_len_of(&self, ino: u64) -> u64 {
        self.writers_of(ino)
            .iter()
            .map(|w| w.pending_complete_len())
            .sum()
    }

    /// Commits the pending complete lines of every writer of `ino`; an
    /// error stays recorded for the writer (its next write, fsync or close
    /// reports it).
    fn commit_pending_of(&self, ino: u64) {
        for w in self.writers_of(ino) {
            if let super::writer::Committed::Batch = w.commit_for_reader(&self.store) {
                self.invalidate_attrs(ino);
            }
        }
    }

    /// Bytes `[offset, offset + size)` of the uncommitted tail of `ino`,
    /// which starts at view offset `committed`: the pending bytes of its
    /// one writer that has some (none when several have).
    fn pending_view(&self, ino: u64, committed: u64, offset: u64, size: u32) -> Vec<u8> {
        let pending: Vec<Vec<u8>> = self
            .writers_of(ino)
            .iter()
            .map(|w| w.pending_bytes())
            .filter(|p| !p.is_empty())
            .collect();
        let [only] = pending.as_slice() else {
            return Vec::new();
        };
        let from = offset.saturating_sub(committed) as usize;
        if offset < committed || from >= only.len() {
            return Vec::new();
        }
        let to = (from + size as usize).min(only.len());
        only[from..to].to_vec()
    }

    /// Forgets a file or directory handle; a writer commits what is pending
    /// first (errors are logged: release reaches no caller).
    pub fn release(&self, fh: u64) {
        let handle = self.handles.lock().remove(&fh);
        if let Some(Handle::Writer(w)) = handle {
            if let super::writer::Committed::Batch = w.release(&self.store) {
                self.invalidate_attrs(w.ino);
            }
        }
    }

    /// Whether a writer that has not published its new session is open on
    /// the transcript `ino`.
    pub(super) fn has_unpublished_writer(&self, ino: u64) -> bool {
        self.handles
            .lock()
            .values()
            .any(|h| matches!(h, Handle::Writer(w) if w.ino == ino && w.is_unpublished()))
    }

    /// Names of virtual directories directly under the mount path `parent`
    /// that are not in `listed`.
    fn virtual_children(&self, parent: &Path, listed: &[OsString]) -> Vec<OsString> {
        self.virtual_dirs
            .lock()
            .iter()
            .filter(|p| p.parent() == Some(parent))
            .filter_map(|p| p.file_name().map(OsStr::to_os_string))
            .filter(|n| !listed.contains(n))
            .collect()
    }

    /// The entries of a directory after position `offset`, each with its
    /// cookie (the position to resume after it).
    ///
    /// Readdir keeps no open-directory state, so the kernel can skip
    /// opendir and releasedir. Entries are ordered by a hash of their name
    /// and a cookie is that hash: a position names an entry, not an index,
    /// so an entry present for the whole listing is returned exactly once
    /// even while the directory changes (MOUNT.md, Details). The listing
    /// taken at offset 0 is reused for the continuation calls of the same
    /// pass, so a directory is read from the disk once per listing.
    ///
    /// Errors: ENOTDIR, and the store's listing errors.
    pub fn readdir(&self, ino: u64, offset: u64) -> FsResult<Listing> {
        if offset != 0 {
            if let Some(listing) = self.listings.lock().get(&ino) {
                return Ok(Arc::clone(listing));
            }
        }
        let mut entries: Vec<(u64, DirEntry)> = self
            .list(ino)?
            .into_iter()
            .map(|e| (cookie_of(&e.name), e))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
        let listing = Arc::new(entries);
        self.listings.lock().put(ino, Arc::clone(&listing));
        Ok(listing)
    }

    /// Every entry of a directory, `.` and `..` included, in no order.
    ///
    /// Errors: ENOTDIR, and the store's listing errors.
    fn list(&self, ino: u64) -> FsResult<Vec<DirEntry>> {
        let (path, node) = self.node(ino)?;
        let mut entries = vec![
            DirEntry {
                ino,
                kind: Kind::Dir,
                name: ".".into(),
            },
            DirEntry {
                ino,
                kind: Kind::Dir,
                name: "..".into(),
            },
        ];
        let mut add = |name: OsString, kind: Kind, node: Node| {
            let ino = self.inodes.ino_for(path.join(&name), node);
            entries.push(DirEntry { ino, kind, name });
        };
        match node {
            Node::Root => {
                add(BY_ID_DIR.into(), Kind::Dir, Node::ById);
                let mut names = self.store.list_projects()?;
                names.extend(self.virtual_children(&path, &names));
                for project in names {
                    add(project.clone(), Kind::Dir, Node::Project { project });
                }
            }
            Node::ById => {
                for (name, project, session) in self.store.by_id_entries()? {
                    add(name, Kind::Symlink, Node::ByIdLink { project, session });
                }
            }
            Node::Project { project } => {
                let mut listed = match self.store.list_project(&project) {
                    Err(StoreError::NotFound { .. }) if self.is_virtual(&path) => Vec::new(),
                    other => other?,
                };
                let names: Vec<OsString> = listed.iter().map(|e| e.name.clone()).collect();
                listed.extend(
                    self.virtual_children(&path, &names)
                        .into_iter()
                        .map(|name| crate::store::Entry {
                            name,
                            kind: EntryKind::Dir,
                        }),
                );
                for e in listed {
                    let node = match e.kind {
                        EntryKind::Dir => Node::Session {
                            project: project.clone(),
                            session: e.name.clone(),
                        },
                        _ => Node::Passthrough {
                            rel: path.join(&e.name),
                        },
                    };
                    add(e.name, kind_of_entry(e.kind), node);
                }
            }
            Node::Session { project, session } => {
                let listed = match self.store.list_session_dir(&path, true) {
                    Err(StoreError::NotFound { .. }) if self.is_virtual(&path) => Vec::new(),
                    other => other?,
                };
                for e in listed {
                    let node = match e.kind {
                        EntryKind::Transcript => Node::Transcript {
                            project: project.clone(),
                            session: session.clone(),
                        },
                        _ => Node::Passthrough {
                            rel: path.join(&e.name),
                        },
                    };
                    add(e.name, kind_of_entry(e.kind), node);
                }
            }
            Node::Passthrough { .. } => {
                for e in self.store.list_session_dir(&path, false)? {
                    let rel = path.join(&e.name);
                    add(e.name, kind_of_entry(e.kind), Node::Passthrough { rel });
                }
            }
            Node::Transcript { .. } | Node::ByIdLink { .. } => {
                return Err(FsError::Errno(libc::ENOTDIR))
            }
        }
        Ok(entries)
    }

    /// The target of a symbolic link.
    ///
    /// Errors: EINVAL when the node is not a link.
    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        match self.node(ino)?.1 {
            Node::ByIdLink { project, session } => Ok(by_id_target(&project, &session).into_vec()),
            Node::Passthrough { rel } => {
                let path = self.store.backing_path(&rel);
                let target =
                    std::fs::read_link(&path).map_err(|e| StoreError::io("readlink", &path, e))?;
                Ok(target.into_os_string().into_vec())
            }
            _ => Err(FsError::Errno(libc::EINVAL)),
        }
    }

    /// Statistics of the backing file system.
    ///
    /// Errors: the errno of `statvfs` on the root.
    pub fn statfs(&self) -> FsResult<FsStats> {
        let path = std::ffi::CString::new(self.store.root().as_os_str().as_bytes())
            .map_err(|_| FsError::Errno(libc::EINVAL))?;
        // SAFETY: statvfs writes into a zeroed struct we own; the path is a
        // valid NUL-terminated string.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
            return Err(FsError::Errno(
                std::io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EIO),
            ));
        }
        Ok(FsStats {
            blocks: st.f_blocks,
            bfree: st.f_bfree,
            bavail: st.f_bavail,
            files: st.f_files,
            ffree: st.f_ffree,
            bsize: st.f_bsize as u32,
            namelen: st.f_namemax as u32,
            frsize: st.f_frsize as u32,
        })
    }
}

/// Attributes of a directory made by `mkdir` that exists only in the mount.
fn virtual_dir_attr(ino: u64) -> Attr {
    let now = SystemTime::now();
    Attr {
        ino,
        kind: Kind::Dir,
        size: 0,
        blocks: 0,
        atime: now,
        mtime: now,
        ctime: now,
        perm: 0o700,
        nlink: 2,
        // SAFETY: geteuid/getegid cannot fail.
        uid: unsafe { libc::geteuid() },
        gid: unsafe { libc::getegid() },
        rdev: 0,
        blksize: 4096,
    }
}

/// Attributes of a `session.jsonl` created but not yet published: empty.
fn new_transcript_attr(ino: u64) -> Attr {
    Attr {
        kind: Kind::File,
        perm: 0o600,
        nlink: 1,
        ..virtual_dir_attr(ino)
    }
}

/// The project and session names of a session directory path.
pub(super) fn split_session_dir(dir: &Path) -> (&OsStr, &OsStr) {
    let mut parts = dir.iter();
    let project = parts.next().unwrap_or_default();
    let session = parts.next().unwrap_or_default();
    (project, session)
}

impl Handle {
    /// A second reference to the same handle (handles are shared by value
    /// with the request that uses them, so the table lock is not held).
    pub(super) fn share(&self) -> Handle {
        match self {
            Handle::Transcript(t) => Handle::Transcript(Arc::clone(t)),
            Handle::Writer(w) => Handle::Writer(Arc::clone(w)),
            Handle::File(f) => Handle::File(Arc::clone(f)),
        }
    }
}

/// The readdir cookie of a name: `.` is 1, `..` is 2, any other name a
/// hash above them (the kernel resumes a listing after the last cookie it
/// got; 0 means the start).
fn cookie_of(name: &OsStr) -> u64 {
    match name.as_bytes() {
        b"." => 1,
        b".." => 2,
        bytes => {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            bytes.hash(&mut hasher);
            hasher.finish().max(3)
        }
    }
}

/// Target of `.by-id/<name>`: `../<project>/<session>`.
fn by_id_target(project: &OsStr, session: &OsStr) -> OsString {
    let mut t = OsString::from("../");
    t.push(project);
    t.push("/");
    t.push(session);
    t
}

use std::os::unix::ffi::OsStringExt;
