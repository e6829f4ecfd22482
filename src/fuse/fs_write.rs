//! The mount's write side: creating, writing, committing, and the
//! namespace operations (mkdir, unlink, rmdir, rename, setattr), with the
//! refusals MOUNT.md asks for ("Appending", "Creating a session").

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use super::fs::{split_session_dir, Attr, FsError, FsResult, Handle, SessionFs};
use super::inode::Node;
use super::writer::{Committed, Writer};
use crate::store::naming::{check_creatable_id, decode_id, is_project_dir_name, non_canonical_key};
use crate::store::{
    is_flat_artifact_name, is_foreign_transcript_name, is_publication_temp, StoreError, Transcript,
    VIEW_NAME,
};

/// Who asks for a new file or directory: passed-through entries belong to
/// them, as on a local file system (the daemon itself may run as root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

impl Owner {
    /// Gives `path` to this owner, when it is not the daemon's own user.
    fn apply(self, path: &Path) -> FsResult<()> {
        // SAFETY: geteuid/getegid cannot fail.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        if (self.uid, self.gid) == (euid, egid) {
            return Ok(());
        }
        std::os::unix::fs::lchown(path, Some(self.uid), Some(self.gid))
            .map_err(|e| io_errno(path, "chown", e))
    }
}

fn eperm(what: String) -> FsError {
    log::warn!("{what}");
    FsError::Refused
}

fn io_errno(path: &Path, op: &'static str, e: std::io::Error) -> FsError {
    StoreError::io(op, path, e).into()
}

/// Whether `name` in a session directory belongs to the store's own
/// protocol (the transcript, its temporaries, other-version transcripts,
/// sync tools' conflict copies, which `sessionfs doctor` resolves):
/// such names cannot be created, removed or renamed through the mount.
fn is_store_owned_name(name: &OsStr) -> bool {
    name == VIEW_NAME
        || name == super::rendered::RENDERED_NAME
        || name == "session.jsonl.zstd"
        || is_publication_temp(name)
        || is_foreign_transcript_name(name)
        || crate::store::conflict::encoding_of(name).is_some()
}

impl SessionFs {
    /// Creates (or opens, when it exists) `name` in directory `parent` for
    /// writing, with the `open(2)` flags and permission bits given.
    /// Returns the attributes, the file handle and whether it is a writer.
    ///
    /// Errors: EPERM for anything but `session.jsonl` or a session-owned
    /// file in a session directory (flat artifacts included); EEXIST for
    /// O_EXCL on an existing file.
    pub fn create(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        flags: i32,
        owner: Owner,
    ) -> FsResult<(Attr, u64, bool)> {
        let (parent_path, parent_node) = self.node(parent)?;
        let child_path = parent_path.join(name);
        match parent_node {
            Node::Session { project, session } if name == VIEW_NAME => {
                let ino = self.inodes.looked_up(
                    parent,
                    &child_path,
                    &Node::Transcript {
                        project: project.clone(),
                        session: session.clone(),
                    },
                    super::inode::child_ino(parent, name),
                );
                // The kernel holds the entry only if the create succeeds.
                let forget = |e: FsError| {
                    self.inodes.forget(ino, 1);
                    e
                };
                let exists = !matches!(
                    self.store.transcript(&project, &session),
                    Err(StoreError::NotFound { .. })
                );
                if exists && flags & libc::O_EXCL != 0 {
                    return Err(forget(FsError::Exists));
                }
                if exists
                    && flags & libc::O_TRUNC != 0
                    && self.getattr(ino).map_err(forget)?.size > 0
                {
                    return Err(forget(eperm(format!(
                        "create of {} with O_TRUNC refused: transcripts are append-only; \
                         use >> (O_APPEND) to add lines",
                        parent_path.join(name).display()
                    ))));
                }
                let append = flags & libc::O_APPEND != 0;
                let writer = Arc::new(
                    Writer::open(
                        &self.store,
                        ino,
                        project,
                        session,
                        append,
                        Arc::clone(&self.budget),
                    )
                    .map_err(&forget)?,
                );
                let fh = self.add_handle(Handle::Writer(writer));
                let attr = self.getattr(ino).map_err(forget)?;
                Ok((attr, fh, true))
            }
            Node::Session { .. } | Node::Passthrough { .. } => {
                if matches!(parent_node, Node::Session { .. }) && is_store_owned_name(name) {
                    return Err(eperm(format!(
                        "create of {} refused: this name belongs to the session store",
                        child_path.display()
                    )));
                }
                self.materialize_dirs(&parent_path)?;
                let path = self.store.backing_path(&child_path);
                let mut options = std::fs::OpenOptions::new();
                options
                    .read(flags & libc::O_ACCMODE != libc::O_WRONLY)
                    .write(true)
                    .custom_flags(flags & (libc::O_APPEND | libc::O_TRUNC | libc::O_EXCL))
                    .mode(mode & 0o7777);
                // Made here, or there already (made outside the mount
                // since the kernel looked): only a file made here takes
                // the mode asked for.
                let (file, made) = match options.clone().create_new(true).open(&path) {
                    Ok(file) => (file, true),
                    Err(e)
                        if e.kind() == std::io::ErrorKind::AlreadyExists
                            && flags & libc::O_EXCL == 0 =>
                    {
                        let file = options.create(true).open(&path);
                        (file.map_err(|e| io_errno(&path, "create", e))?, false)
                    }
                    Err(e) => return Err(io_errno(&path, "create", e)),
                };
                if made {
                    owner.apply(&path)?;
                    super::made_mode::give_back_open(&file, mode)
                        .map_err(|e| io_errno(&path, "chmod", e))?;
                }
                let node = Node::Passthrough {
                    rel: child_path.clone(),
                };
                let ino = self.ino_of(parent, &child_path, &node)?;
                let attr = self.getattr_of(ino, &node)?;
                self.inodes.looked_up(parent, &child_path, &node, ino);
                let fh = self.add_handle(Handle::File(Arc::new(file)));
                Ok((attr, fh, false))
            }
            Node::Project { .. } if is_flat_artifact_name(name) => Err(eperm(format!(
                "create of {} refused: that is the retired flat layout; create \
                 <project>/<session-id>/session.jsonl instead",
                child_path.display()
            ))),
            _ => Err(eperm(format!(
                "create of {} refused: only session directories hold files",
                child_path.display()
            ))),
        }
    }

    /// Writes `data` at `offset` through handle `fh`; `append` tells that
    /// the request carries O_APPEND.
    ///
    /// Errors: EBADF; the writer's errors (EPERM, EINVAL; see
    /// `Writer::write`); the I/O error of a passed-through file.
    pub fn write(&self, fh: u64, offset: u64, data: &[u8], append: bool) -> FsResult<u32> {
        match self.handles.get(fh) {
            Some(Handle::Writer(w)) => {
                // The size this write must continue includes the lines
                // pending in the transcript's other handles: they are
                // committed first, so that this handle's lines are checked
                // against them and land after them.
                self.commit_others_of(&w);
                // Looked up (and refreshed from the server) once for the
                // whole request: its length and its tail's `seq`.
                let tail = self.committed_tail(&w)?;
                let n = w.write(
                    &self.store,
                    offset,
                    data,
                    append,
                    tail.as_deref(),
                    self.batch_window,
                )?;
                if self.batch_window.is_zero() {
                    self.invalidate_attrs(w.ino);
                }
                Ok(n)
            }
            Some(Handle::File(f)) => {
                let r = if append {
                    (&*f).write_all_append(data)
                } else {
                    f.write_all_at(data, offset)
                };
                r.map_err(FsError::Io)?;
                Ok(data.len() as u32)
            }
            Some(Handle::Transcript(..) | Handle::Rendered(..)) | None => Err(FsError::BadHandle),
        }
    }

    /// Commits the pending complete lines of the other handles open on
    /// `w`'s transcript; their errors stay recorded on them.
    fn commit_others_of(&self, w: &Arc<Writer>) {
        for other in self.writers() {
            if other.ino == w.ino && !Arc::ptr_eq(&other, w) && other.pending_complete_len() > 0 {
                let committed = other.commit_now(&self.store);
                if let Committed::Batch = committed {
                    self.committed_in(&other.session_dir());
                }
                self.after_commit_of(other.ino, &committed);
            }
        }
    }

    /// The committed transcript `w` appends to, refreshed from the server
    /// ([`crate::store::Store::transcript`]); `None` while it does not exist
    /// (a new session before its first commit).
    fn committed_tail(&self, w: &Writer) -> FsResult<Option<Arc<Transcript>>> {
        let dir = w.session_dir();
        let (project, session) = split_session_dir(&dir);
        match self.store.transcript(project, session) {
            Ok(t) => Ok(Some(t)),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Commits a writer's pending lines at `flush` (every close of a
    /// descriptor): errors the writer must see are returned here, because
    /// `release` reaches no one.
    ///
    /// Errors: see `Writer::flush`.
    pub fn flush(&self, fh: u64) -> FsResult<()> {
        if let Some(Handle::Writer(w)) = self.handles.get(fh) {
            let committed = w.flush(&self.store);
            self.after_commit(&w, &committed);
            committed?;
        }
        Ok(())
    }

    /// Commits a writer's pending lines (fsync); syncs a passed-through file.
    ///
    /// Errors: see `Writer::fsync`; the I/O error of `fsync(2)`.
    pub fn fsync(&self, fh: u64) -> FsResult<()> {
        match self.handles.get(fh) {
            Some(Handle::Writer(w)) => {
                let committed = w.fsync(&self.store);
                self.after_commit(&w, &committed);
                committed?;
                Ok(())
            }
            Some(Handle::File(f)) => f.sync_all().map_err(FsError::Io),
            _ => Ok(()),
        }
    }

    fn after_commit(&self, w: &Writer, result: &FsResult<Committed>) {
        if let Ok(Committed::Batch) = result {
            self.committed_in(&w.session_dir());
            self.invalidate_attrs(w.ino);
        }
    }

    /// Commits the writers whose batch window has expired (called by the
    /// mount's committer thread). Each commit runs on a thread of its own:
    /// a commit may wait up to 10 s for its transcript's append lock, and
    /// must not hold up the batch windows of other writers. A writer busy
    /// in a commit is not due (see [`Writer::is_due`]), so one writer never
    /// has more than one such thread at work.
    pub fn commit_due(self: &Arc<Self>) {
        for w in self.writers() {
            if !w.is_due(self.batch_window) {
                continue;
            }
            let core = Arc::clone(self);
            let job = move || core.commit_if_due(&w);
            let spawned = std::thread::Builder::new()
                .name("sessionfs-batch".into())
                .spawn(job);
            if let Err(e) = spawned {
                log::warn!("cannot start a batch commit thread ({e}); the batch waits");
            }
        }
    }

    fn commit_if_due(&self, w: &Writer) {
        let committed = w.commit_if_due(&self.store, self.batch_window);
        if let Committed::Batch = committed {
            self.committed_in(&w.session_dir());
        }
        self.after_commit_of(w.ino, &committed);
    }

    /// Commits every writer's pending lines now (before unmounting: a
    /// signal must not lose lines that wait in the batch window). Returns
    /// how many writers committed a batch.
    pub fn commit_all(&self) -> usize {
        let mut committed = 0;
        for w in self.writers() {
            if let Committed::Batch = w.commit_now(&self.store) {
                self.committed_in(&w.session_dir());
                committed += 1;
            }
        }
        committed
    }

    /// A commit made `session_dir` (and its project) real on disk.
    fn committed_in(&self, session_dir: &Path) {
        let mut dirs = self.virtual_dirs.lock();
        dirs.remove(session_dir);
        if let Some(project) = session_dir.parent() {
            dirs.remove(project);
        }
    }

    /// Creates on disk the virtual directories on the way to `dir` (mode
    /// 0700), when another entry is created in a virtual session directory.
    fn materialize_dirs(&self, dir: &Path) -> FsResult<()> {
        let mut prefix = PathBuf::new();
        for part in dir.iter() {
            prefix.push(part);
            if self.is_virtual(&prefix) {
                let path = self.store.backing_path(&prefix);
                match std::fs::DirBuilder::new().mode(0o700).create(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(io_errno(&path, "mkdir", e)),
                }
                self.virtual_dirs.lock().remove(&prefix);
            }
        }
        Ok(())
    }

    /// `mkdir`: a project or session directory is virtual (MOUNT.md,
    /// Creating a session); inside a session it is passed through.
    ///
    /// Errors: EEXIST; EINVAL for a name that is not canonical;
    /// ENAMETOOLONG for an id whose encoded name exceeds 244 bytes.
    pub fn mkdir(&self, parent: u64, name: &OsStr, mode: u32, owner: Owner) -> FsResult<Attr> {
        let (parent_path, parent_node) = self.node(parent)?;
        let child_path = parent_path.join(name);
        if self.lookup(parent, name).is_ok() || self.is_virtual(&child_path) {
            return Err(FsError::Exists);
        }
        let text = name.to_string_lossy();
        let node = match parent_node {
            Node::Root => {
                if !is_project_dir_name(&text) || text.as_bytes() != name.as_bytes() {
                    log::warn!("mkdir {text:?} refused: a project directory is named --<project key>-- or _no-cwd");
                    return Err(FsError::Invalid);
                }
                if let Some(why) = non_canonical_key(&text) {
                    log::warn!(
                        "mkdir {text:?} refused: no cwd has this project key ({why}); \
                         `sessionfs key CWD` prints the directory name of a cwd"
                    );
                    return Err(FsError::Invalid);
                }
                Node::Project {
                    project: name.to_os_string(),
                }
            }
            Node::Project { project } => {
                let id = decode_id(&text).map_err(|e| {
                    log::warn!("mkdir {text:?} refused: {e}");
                    FsError::Invalid
                })?;
                check_creatable_id(&id).map_err(|e| {
                    log::warn!("mkdir {text:?} refused: {e}");
                    FsError::from(e)
                })?;
                Node::Session {
                    project,
                    session: name.to_os_string(),
                }
            }
            Node::Session { .. } | Node::Passthrough { .. } => {
                self.materialize_dirs(&parent_path)?;
                let path = self.store.backing_path(&child_path);
                std::fs::DirBuilder::new()
                    .mode(mode & 0o7777)
                    .create(&path)
                    .map_err(|e| io_errno(&path, "mkdir", e))?;
                owner.apply(&path)?;
                super::made_mode::give_back(&path, mode)
                    .map_err(|e| io_errno(&path, "chmod", e))?;
                return self.lookup(parent, name);
            }
            _ => {
                return Err(eperm(format!(
                    "mkdir {text:?} refused: only the root, project and session directories \
                     take new directories"
                )))
            }
        };
        self.virtual_dirs
            .lock()
            .insert(child_path.clone(), std::time::SystemTime::now());
        let ino = super::inode::child_ino(parent, name);
        self.inodes.looked_up(parent, &child_path, &node, ino);
        self.getattr(ino)
            .inspect_err(|_| self.inodes.forget(ino, 1))
    }

    /// `unlink`: transcripts and flat artifacts are never removed (EPERM);
    /// session-owned files are passed through.
    ///
    /// Errors: EPERM; the backing `unlink(2)` error.
    pub fn unlink(&self, parent: u64, name: &OsStr) -> FsResult<()> {
        let (parent_path, parent_node) = self.node(parent)?;
        let child_path = parent_path.join(name);
        match parent_node {
            Node::Session { .. } if is_store_owned_name(name) => Err(eperm(format!(
                "unlink of {} refused: transcripts are append-only and never removed through the mount",
                child_path.display()
            ))),
            Node::Session { .. } | Node::Passthrough { .. } => {
                let path = self.store.backing_path(&child_path);
                // A file the kernel holds keeps an O_PATH descriptor, so
                // that fstat of a descriptor open on it still answers.
                let keep = self.inodes.at(parent, name).and_then(|_| {
                    std::fs::OpenOptions::new()
                        .read(true)
                        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
                        .open(&path)
                        .ok()
                });
                std::fs::remove_file(&path).map_err(|e| io_errno(&path, "unlink", e))?;
                self.inodes.unlinked(parent, name, keep);
                Ok(())
            }
            _ => Err(eperm(format!("unlink of {} refused: not a session-owned file", child_path.display()))),
        }
    }

    /// `rmdir`: a virtual directory is forgotten; a real one is removed
    /// when empty (one holding a transcript never is).
    ///
    /// Errors: ENOTEMPTY, and the backing `rmdir(2)` error.
    pub fn rmdir(&self, parent: u64, name: &OsStr) -> FsResult<()> {
        let (parent_path, parent_node) = self.node(parent)?;
        let child_path = parent_path.join(name);
        if self.is_virtual(&child_path) {
            let has_children = self
                .virtual_dirs
                .lock()
                .keys()
                .any(|p| p.parent() == Some(&child_path));
            if has_children {
                return Err(FsError::NotEmpty);
            }
            self.virtual_dirs.lock().remove(&child_path);
            return Ok(());
        }
        if matches!(parent_node, Node::ById | Node::ViewDir { .. }) {
            return Err(eperm(format!(
                "rmdir of {} refused: the .by-* views are the mount's own",
                child_path.display()
            )));
        }
        let path = self.store.backing_path(&child_path);
        std::fs::remove_dir(&path).map_err(|e| io_errno(&path, "rmdir", e))?;
        self.inodes.unlinked(parent, name, None);
        Ok(())
    }

    /// `rename`: only session-owned entries move; the transcript, project
    /// and session directories never do (EPERM), so no session becomes
    /// misplaced and nothing committed is replaced.
    ///
    /// `flags` are `renameat2(2)`'s: RENAME_NOREPLACE is passed through
    /// (the backing file system decides EEXIST atomically);
    /// RENAME_EXCHANGE is not.
    ///
    /// Errors: EINVAL for any other flag; EPERM; the backing `rename(2)`
    /// or `renameat2(2)` error (EEXIST with RENAME_NOREPLACE).
    pub fn rename(
        &self,
        parent: u64,
        name: &OsStr,
        new_parent: u64,
        new_name: &OsStr,
        flags: u32,
    ) -> FsResult<()> {
        let (from_dir, from_node) = self.node(parent)?;
        let (to_dir, to_node) = self.node(new_parent)?;
        if flags & !libc::RENAME_NOREPLACE != 0 {
            // RENAME_EXCHANGE, RENAME_WHITEOUT: callers fall back to a
            // plain rename (mv -n does), so this is not worth a warning.
            log::debug!(
                "rename of {} with flags {flags:#x} refused: only RENAME_NOREPLACE is \
                 passed through",
                from_dir.join(name).display()
            );
            return Err(FsError::Invalid);
        }
        let in_session = |n: &Node| matches!(n, Node::Session { .. } | Node::Passthrough { .. });
        let owned =
            |n: &Node, name: &OsStr| matches!(n, Node::Session { .. }) && is_store_owned_name(name);
        if !in_session(&from_node)
            || !in_session(&to_node)
            || owned(&from_node, name)
            || owned(&to_node, new_name)
        {
            return Err(eperm(format!(
                "rename of {} to {} refused: transcripts, sessions and projects cannot be \
                 renamed through the mount",
                from_dir.join(name).display(),
                to_dir.join(new_name).display()
            )));
        }
        self.materialize_dirs(&to_dir)?;
        let from = self.store.backing_path(&from_dir.join(name));
        let to = self.store.backing_path(&to_dir.join(new_name));
        rename_with(&from, &to, flags).map_err(|e| io_errno(&from, "rename", e))?;
        // The inode moves with the file: the new name answers at once, and
        // an open descriptor keeps naming the renamed file.
        self.inodes.rename(parent, name, new_parent, new_name);
        Ok(())
    }

    /// The session-owned directory `parent` for a new entry `name`: its
    /// mount path, or EPERM outside session directories and for names the
    /// store owns.
    fn owned_child(&self, parent: u64, name: &OsStr, op: &str) -> FsResult<PathBuf> {
        let (parent_path, parent_node) = self.node(parent)?;
        let child_path = parent_path.join(name);
        let in_session = matches!(parent_node, Node::Session { .. } | Node::Passthrough { .. });
        if !in_session || (matches!(parent_node, Node::Session { .. }) && is_store_owned_name(name))
        {
            return Err(eperm(format!(
                "{op} of {} refused: only session directories hold other entries, and this \
                 name belongs to the session store there",
                child_path.display()
            )));
        }
        self.materialize_dirs(&parent_path)?;
        Ok(child_path)
    }

    /// `symlink`: a symbolic link `name` -> `target` in a session
    /// directory (or below), created on the backing file system.
    ///
    /// Errors: EPERM outside session directories or for a store-owned
    /// name; the backing `symlink(2)` error (EEXIST, …).
    pub fn symlink(
        &self,
        parent: u64,
        name: &OsStr,
        target: &Path,
        owner: Owner,
    ) -> FsResult<Attr> {
        let child_path = self.owned_child(parent, name, "symlink")?;
        let path = self.store.backing_path(&child_path);
        std::os::unix::fs::symlink(target, &path).map_err(|e| io_errno(&path, "symlink", e))?;
        owner.apply(&path)?; // lchown: the link itself
        self.lookup(parent, name)
    }

    /// `link`: a hard link `new_name` in a session directory (or below)
    /// to the passed-through file `ino`; both names then share one inode.
    ///
    /// Errors: EPERM for anything but a passed-through entry, or outside
    /// session directories; the backing `link(2)` error.
    pub fn link(&self, ino: u64, new_parent: u64, new_name: &OsStr) -> FsResult<Attr> {
        let (_, node) = self.node(ino)?;
        let Node::Passthrough { rel } = node else {
            return Err(eperm(format!(
                "link to inode {ino} refused: only session-owned files can be linked"
            )));
        };
        let child_path = self.owned_child(new_parent, new_name, "link")?;
        let from = self.store.backing_path(&rel);
        let to = self.store.backing_path(&child_path);
        std::fs::hard_link(&from, &to).map_err(|e| io_errno(&to, "link", e))?;
        self.lookup(new_parent, new_name)
    }

    /// `mknod`: a FIFO, socket or regular file `name` in a session
    /// directory (or below), made on the backing file system with `mode`
    /// (type and permission bits). Device nodes are refused.
    ///
    /// Errors: EPERM for device nodes, outside session directories or for
    /// a store-owned name; the backing `mknod(2)` error.
    pub fn mknod(
        &self,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        owner: Owner,
    ) -> FsResult<Attr> {
        let kind = mode & libc::S_IFMT;
        if kind != libc::S_IFIFO && kind != libc::S_IFSOCK && kind != libc::S_IFREG && kind != 0 {
            return Err(eperm(format!(
                "mknod of {:?} refused: device nodes are not made in a session store",
                name
            )));
        }
        let child_path = self.owned_child(parent, name, "mknod")?;
        let path = self.store.backing_path(&child_path);
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| FsError::Invalid)?;
        let kind = if kind == 0 { libc::S_IFREG } else { kind };
        let perm = mode & 0o7777 & !umask;
        // SAFETY: a valid NUL-terminated path; no device number.
        if unsafe { libc::mknod(c.as_ptr(), kind | perm, 0) } != 0 {
            return Err(io_errno(&path, "mknod", std::io::Error::last_os_error()));
        }
        owner.apply(&path)?;
        super::made_mode::give_back(&path, perm).map_err(|e| io_errno(&path, "chmod", e))?;
        self.lookup(parent, name)
    }

    /// `setattr`: a transcript's size cannot change (EPERM unless it is
    /// the current size: `>` on an empty new file is allowed); its mode and
    /// times apply to the backing file. Passed-through entries take every
    /// change.
    ///
    /// Ownership (`owner`, a new uid and gid) stays with the backing files:
    /// any change is refused.
    ///
    /// A passed-through file changed through an open descriptor (`fh`:
    /// `ftruncate`, `fchmod`, `futimens`), or unlinked through the mount
    /// while held, is changed through that descriptor, as on the backing
    /// file system; else by its path.
    ///
    /// Errors: EPERM; the backing call's error.
    #[allow(clippy::too_many_arguments)]
    pub fn setattr(
        &self,
        ino: u64,
        fh: Option<u64>,
        mode: Option<u32>,
        owner: (Option<u32>, Option<u32>),
        size: Option<u64>,
        mtime: Option<SystemTime>,
        atime: Option<SystemTime>,
    ) -> FsResult<Attr> {
        let (path, node) = self.node_or_held(ino, fh)?;
        if owner.0.is_some() || owner.1.is_some() {
            // A chown that changes nothing succeeds, as on a local file
            // system (`tar x`, `cp -a` and `rsync -a` set the owner they
            // read); a passed-through entry's owner changes as its backing
            // file's does; the store's own entries keep theirs.
            let now = self.getattr(ino)?;
            let unchanged =
                owner.0.is_none_or(|u| u == now.uid) && owner.1.is_none_or(|g| g == now.gid);
            if !unchanged {
                let Node::Passthrough { rel } = &node else {
                    return Err(eperm(format!(
                        "chown of {} refused: ownership stays with the backing files; change \
                         it in the store itself",
                        path.display()
                    )));
                };
                let p = self.store.backing_path(rel);
                std::os::unix::fs::lchown(&p, owner.0, owner.1)
                    .map_err(|e| io_errno(&p, "chown", e))?;
            }
        }
        if let (Node::Passthrough { rel }, Some(f)) = (&node, self.passthrough_file(ino, fh)) {
            let p = self.store.backing_path(rel);
            if let Some(size) = size {
                f.set_len(size).map_err(|e| io_errno(&p, "ftruncate", e))?;
            }
            if let Some(mode) = mode {
                f.set_permissions(std::fs::Permissions::from_mode(mode & 0o7777))
                    .map_err(|e| io_errno(&p, "fchmod", e))?;
            }
            set_times(&f, &p, mtime, atime)?;
            return self.getattr(ino);
        }
        let changes = mode.is_some() || size.is_some() || mtime.is_some() || atime.is_some();
        let backing = match &node {
            Node::Rendered { .. } | Node::ConflictCopy { .. } => {
                return Err(eperm(format!("{} is read-only", path.display())))
            }
            Node::ById | Node::ByIdLink { .. } | Node::ViewDir { .. } | Node::ViewLink { .. }
                if changes =>
            {
                return Err(eperm(format!(
                    "{} is read-only: .by-id and the .by-* views are made by the mount; \
                     change the session directories they link to instead",
                    path.display()
                )))
            }
            Node::Transcript { project, session } => {
                // The size is the committed length plus the complete lines
                // pending in this mount's handles (MOUNT.md, Attributes):
                // truncating to it is a no-op, anything else is refused and
                // changes nothing, pending lines included.
                if let Some(size) = size {
                    let current = self.getattr(ino)?.size;
                    if size != current {
                        let pending = self.pending_len_of(ino);
                        return Err(eperm(format!(
                            "truncate of {} to {size} bytes refused: transcripts are \
                             append-only; it is {current} bytes long ({pending} of them in \
                             lines not yet committed) and only a truncate to that length is \
                             accepted (it changes nothing)",
                            path.display()
                        )));
                    }
                }
                match self.store.transcript(project, session) {
                    Ok(t) => Some(t.path().to_path_buf()),
                    Err(StoreError::NotFound { .. }) => None,
                    Err(e) => return Err(e.into()),
                }
            }
            Node::Passthrough { rel } => {
                let p = self.store.backing_path(rel);
                if let Some(size) = size {
                    let f = std::fs::OpenOptions::new()
                        .write(true)
                        .open(&p)
                        .map_err(|e| io_errno(&p, "open", e))?;
                    f.set_len(size).map_err(|e| io_errno(&p, "truncate", e))?;
                }
                Some(p)
            }
            Node::Project { .. } | Node::Session { .. } if !self.is_virtual(&path) => {
                Some(self.store.backing_path(&path))
            }
            // The root's attributes are the backing root's.
            Node::Root => Some(self.store.root().to_path_buf()),
            _ => None,
        };
        if let Some(p) = backing {
            if let Some(mode) = mode {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode & 0o7777))
                    .map_err(|e| io_errno(&p, "chmod", e))?;
            }
            // By path, never by opening it (a FIFO's open waits for a
            // writer; a socket's fails): a passed-through entry is the
            // entry itself, a symbolic link included, as `touch -h` asks.
            let follow = !matches!(node, Node::Passthrough { .. });
            set_path_times(&p, mtime, atime, follow)?;
        }
        self.getattr(ino)
    }

    /// `fallocate(2)` with `mode` over `[offset, offset + length)`. On a
    /// transcript only what changes neither its size nor its bytes
    /// succeeds, as a no-op: plain allocation within the size (committed
    /// plus pending complete lines, MOUNT.md, Attributes) or with
    /// `FALLOC_FL_KEEP_SIZE`. A passed-through file is allocated for real.
    ///
    /// Errors: EPERM for a transcript range past its size or any mode that
    /// rewrites bytes (punch hole, zero, collapse, insert range); EBADF;
    /// the backing call's error.
    pub fn fallocate(
        &self,
        ino: u64,
        fh: u64,
        offset: u64,
        length: u64,
        mode: i32,
    ) -> FsResult<()> {
        let (path, node) = self.node_or_held(ino, Some(fh))?;
        if let Node::Transcript { .. } = node {
            let size = self.getattr(ino)?.size;
            let end = offset.saturating_add(length);
            let keeps = mode == libc::FALLOC_FL_KEEP_SIZE || (mode == 0 && end <= size);
            if !keeps {
                return Err(eperm(format!(
                    "fallocate of {} (mode {mode:#x}, bytes {offset}..{end}) refused: \
                     transcripts are append-only and {size} bytes long; append lines instead",
                    path.display()
                )));
            }
            return Ok(());
        }
        let Some(Handle::File(f)) = self.handles.get(fh) else {
            return Err(FsError::BadHandle);
        };
        let (Ok(offset), Ok(length)) = (i64::try_from(offset), i64::try_from(length)) else {
            return Err(FsError::Invalid);
        };
        // SAFETY: the descriptor belongs to `f`, open for the call's duration.
        let r =
            unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&*f), mode, offset, length) };
        if r != 0 {
            return Err(FsError::Io(std::io::Error::last_os_error()));
        }
        Ok(())
    }
}

/// Appending writes for a shared file handle.
trait WriteAllAppend {
    fn write_all_append(self, data: &[u8]) -> std::io::Result<()>;
}

impl WriteAllAppend for &std::fs::File {
    fn write_all_append(mut self, data: &[u8]) -> std::io::Result<()> {
        std::io::Write::write_all(&mut self, data)
    }
}

/// Sets the modification and access times given (neither: nothing) of
/// `f`, the backing file at `p` (for the error).
fn set_times(
    f: &std::fs::File,
    p: &std::path::Path,
    mtime: Option<SystemTime>,
    atime: Option<SystemTime>,
) -> FsResult<()> {
    if mtime.is_none() && atime.is_none() {
        return Ok(());
    }
    let mut times = std::fs::FileTimes::new();
    if let Some(t) = mtime {
        times = times.set_modified(t);
    }
    if let Some(t) = atime {
        times = times.set_accessed(t);
    }
    f.set_times(times).map_err(|e| io_errno(p, "utimes", e))
}

/// Sets the modification and access times given (neither: nothing) of
/// the backing entry at `p` with `utimensat(2)`, following a symbolic
/// link at `p` only when `follow`.
///
/// Errors: the call's errno, with `p` in the log.
fn set_path_times(
    p: &std::path::Path,
    mtime: Option<SystemTime>,
    atime: Option<SystemTime>,
    follow: bool,
) -> FsResult<()> {
    if mtime.is_none() && atime.is_none() {
        return Ok(());
    }
    let spec = |t: Option<SystemTime>| match t {
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        Some(t) => timespec_of(t),
    };
    let times = [spec(atime), spec(mtime)];
    let c =
        std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).map_err(|_| FsError::Invalid)?;
    let flags = if follow { 0 } else { libc::AT_SYMLINK_NOFOLLOW };
    // SAFETY: `c` is a NUL-terminated path and `times` two timespecs, both
    // alive for the call.
    let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), flags) };
    if r != 0 {
        return Err(io_errno(p, "utimensat", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// `t` as a `timespec` (seconds and nanoseconds since the epoch; a time
/// before it has negative seconds and non-negative nanoseconds).
fn timespec_of(t: SystemTime) -> libc::timespec {
    let (secs, nanos) = match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => (d.as_secs() as i64, i64::from(d.subsec_nanos())),
        Err(e) => {
            let d = e.duration();
            let (s, n) = (d.as_secs() as i64, i64::from(d.subsec_nanos()));
            if n == 0 {
                (-s, 0)
            } else {
                (-s - 1, 1_000_000_000 - n)
            }
        }
    };
    libc::timespec {
        tv_sec: secs as libc::time_t,
        tv_nsec: nanos as libc::c_long,
    }
}

/// `rename(2)`, or `renameat2(2)` with `flags` (RENAME_NOREPLACE: EEXIST
/// when `to` exists, decided atomically by the backing file system).
fn rename_with(from: &Path, to: &Path, flags: u32) -> std::io::Result<()> {
    if flags == 0 {
        return std::fs::rename(from, to);
    }
    crate::store::publish::renameat2(from, to, flags)
}
