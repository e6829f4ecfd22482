//! `fuser::Filesystem` over [`SessionFs`]: each kernel request calls one
//! core method through one wrapper, [`call`], which turns the core's
//! [`FsError`] into its errno (the one map, `FsError::errno`), logs it
//! (damage at warn level, with the backing path and the fix), and turns a
//! panic into EIO. The adapter decides nothing else: refusals (rename
//! flags, ownership) are the core's.

use std::ffi::OsStr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    KernelConfig, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, Request,
};

use super::access::Caller;
use super::fs::{Attr, DirEntry, FsError, FsResult, Kind, SessionFs};
use super::fs_write::Owner;
use super::status::{count_request, StatusFile};

/// The adapter handed to fuser.
pub struct Adapter {
    core: Arc<SessionFs>,
    /// Attribute and entry timeout (MOUNT.md: default 1 s).
    ttl: Duration,
    /// `.sessionfs-status`, when the mount shows one.
    status: Option<Arc<StatusFile>>,
    /// Whether the kernel sends readdirplus (set by init).
    plus: bool,
    /// Whether opendir is declined (set by init), so that the kernel
    /// sends neither opendir nor releasedir and caches every listing.
    no_opendir: bool,
}

/// The environment variable that turns readdirplus off when `0` (for
/// benchmarks: scripts/bench_scale.py compares both).
pub const READDIRPLUS_ENV: &str = "SESSIONFS_READDIRPLUS";

/// The environment variable that keeps opendir answered when `0` (for
/// benchmarks: scripts/bench_scale.py compares both).
pub const NO_OPENDIR_ENV: &str = "SESSIONFS_NO_OPENDIR";

impl Adapter {
    /// An adapter serving `core` with the given attribute timeout.
    pub fn new(core: Arc<SessionFs>, ttl: Duration) -> Self {
        Adapter {
            core,
            ttl,
            status: None,
            plus: false,
            no_opendir: false,
        }
    }

    /// The adapter, also serving `.sessionfs-status` at the mount root.
    pub fn with_status(mut self, status: Arc<StatusFile>) -> Self {
        self.status = Some(status);
        self
    }
}

fn file_type(kind: Kind) -> FileType {
    match kind {
        Kind::Dir => FileType::Directory,
        Kind::File => FileType::RegularFile,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::CharDevice => FileType::CharDevice,
        Kind::BlockDevice => FileType::BlockDevice,
        Kind::Socket => FileType::Socket,
    }
}

fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks,
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.ctime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: a.blksize,
        flags: 0,
    }
}

/// Replies to a request that returns nothing but success or an errno.
/// Attributes of a negative entry (only its node number, 0, matters).
fn negative_attr() -> Attr {
    Attr {
        ino: 0,
        kind: Kind::File,
        size: 0,
        blocks: 0,
        atime: std::time::UNIX_EPOCH,
        mtime: std::time::UNIX_EPOCH,
        ctime: std::time::UNIX_EPOCH,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 4096,
    }
}

fn reply_empty(reply: ReplyEmpty, r: Result<(), Errno>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn owner_of(req: &Request) -> Owner {
    Owner {
        uid: req.uid(),
        gid: req.gid(),
    }
}

/// Reply flags of an open file. Readers use the page cache (mmap works;
/// cached pages survive reopening because committed bytes never change).
/// Writers bypass it, so that bytes not yet committed never sit in it.
fn open_flags(writer: bool) -> FopenFlags {
    if writer {
        FopenFlags::FOPEN_DIRECT_IO
    } else {
        FopenFlags::FOPEN_KEEP_CACHE
    }
}

fn caller_of(req: &Request) -> Caller {
    Caller::new(req.uid(), req.gid(), req.pid())
}

/// Logs an error of operation `op` and returns its errno. Damage (a
/// corrupt, misplaced, flat or duplicate entry) is a warning naming the
/// backing file and the fix; refusals were logged where they were decided,
/// and a missing entry is only debug output.
fn errno_of(op: &str, what: &dyn Fn() -> String, e: FsError) -> Errno {
    if e.is_damage() {
        log::warn!("{op} {}: {e}", what());
    } else {
        log::debug!("{op} {}: {e}", what());
    }
    Errno::from_i32(e.errno())
}

/// The environment variable of the test-only panic trigger: when it names
/// an operation (`lookup`, `read`, `release`, ...), every request of that
/// operation panics inside [`call`]. Inert when unset, so that the tests
/// can show, with the shipped release binary, that a panicking handler
/// answers EIO and the mount lives on (issue 9).
pub const TEST_PANIC_ENV: &str = "SESSIONFS_TEST_PANIC";

fn forced_panic(op: &str) {
    static TRIGGER: OnceLock<Option<String>> = OnceLock::new();
    let trigger = TRIGGER.get_or_init(|| std::env::var(TEST_PANIC_ENV).ok());
    if trigger.as_deref() == Some(op) {
        panic!("{TEST_PANIC_ENV}={op}: panic forced for testing");
    }
}

/// The one wrapper of every operation: runs the core method of operation
/// `op` (on `what`, formatted only when something is logged), turns its
/// error into a logged errno, and a panic into EIO instead of a dead event
/// loop (a panicking handler would otherwise wedge the mount: FUSE-NOTES
/// §3). The release profile unwinds (Cargo.toml) so that this holds in
/// the shipped binary.
fn call<T>(
    op: &'static str,
    what: impl Fn() -> String,
    body: impl FnOnce() -> FsResult<T>,
) -> Result<T, Errno> {
    let run = || {
        forced_panic(op);
        body()
    };
    let r = catch_unwind(AssertUnwindSafe(run));
    count_request(op, !matches!(r, Ok(Ok(_))));
    match r {
        Ok(r) => r.map_err(|e| errno_of(op, &what, e)),
        Err(_) => {
            log::error!(
                "{op} {}: internal error (panic); replied EIO, the mount goes on",
                what()
            );
            Err(Errno::from_i32(FsError::Internal.errno()))
        }
    }
}

impl Adapter {
    /// The entry timeout of a looked-up or created entry: zero when the
    /// core says its directory is a per-user view (the kernel's dentry
    /// cache is shared between users), else the attribute timeout.
    fn entry_ttl(&self, per_user: bool) -> Duration {
        if per_user {
            Duration::ZERO
        } else {
            self.ttl
        }
    }
}

impl Adapter {
    /// A listing pass of directory `ino` ended (its reply was empty).
    fn ended(&self, caller: &Caller, ino: u64) {
        self.core
            .listing_ended(caller, ino, self.no_opendir, self.plus);
    }
}

impl Filesystem for Adapter {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Cached pages are dropped when the size or mtime changes; a
        // committed prefix never changes, so pages stay valid otherwise.
        let _ = config.add_capabilities(InitFlags::FUSE_AUTO_INVAL_DATA);
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        // Opendir is declined (FUSE_NO_OPENDIR_SUPPORT) when only the
        // owner can reach the mount: the kernel then sends no opendir and
        // no releasedir (`find` sent both for every session directory) and
        // caches every listing, validated by the directory's mtime; the
        // listings it must not keep (views, and those readdirplus fills
        // with attributes) are dropped from its cache when their pass
        // ends (see `ended`). With other users, opendir is answered: its
        // reply keeps a per-user view's listing out of the cache the users
        // share.
        if self.core.is_single_caller() && std::env::var_os(NO_OPENDIR_ENV).is_none_or(|v| v != "0")
        {
            self.no_opendir = config
                .add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT)
                .is_ok();
        }
        // The kernel keeps link targets in its page cache: a file manager
        // listing `.by-id` reads each link once, not once per stat.
        let _ = config.add_capabilities(InitFlags::FUSE_CACHE_SYMLINKS);
        // Listings are readdirplus (not FUSE_READDIRPLUS_AUTO, which gives
        // attributes only in a listing's first reply): `ls -l` of a project
        // of 10,000 sessions then sends no lookup per entry, and `find`
        // none per session directory it descends into. Measured with
        // scripts/bench.sh (README, Scale); SESSIONFS_READDIRPLUS=0 keeps
        // plain readdir, for that comparison.
        if std::env::var_os(READDIRPLUS_ENV).is_none_or(|v| v != "0") {
            self.plus = config
                .add_capabilities(InitFlags::FUSE_DO_READDIRPLUS)
                .is_ok();
        }
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = call(
            "lookup",
            || format!("{name:?}"),
            || {
                if let Some(status) = self.status.as_ref().and_then(|s| s.lookup(parent.0, name)) {
                    return Ok((status?, false));
                }
                let caller = caller_of(req);
                let attr = self.core.lookup_as(&caller, parent.0, name)?;
                Ok((attr, self.core.is_per_user(parent.0)))
            },
        );
        match r {
            Ok((attr, per_user)) => {
                let ttl = self.entry_ttl(per_user);
                reply.entry(&ttl, &file_attr(&attr), Generation(0))
            }
            // A negative entry (node 0) for the attribute timeout: repeated
            // lookups of a missing name (shells, editors, file managers
            // probing) are answered by the kernel. Names created through
            // the mount replace it at once; on the backing side they show
            // within the timeout, as other changes do. Never in a per-user
            // view: a name hidden from one caller may be another's.
            Err(e)
                if e == Errno::ENOENT
                    && !self.entry_ttl(self.core.is_per_user(parent.0)).is_zero() =>
            {
                let mut none = file_attr(&negative_attr());
                none.ino = INodeNo(0);
                reply.entry(&self.ttl, &none, Generation(0))
            }
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let r = call(
            "getattr",
            || format!("inode {}", ino.0),
            || {
                let status = self.status.as_ref().and_then(|s| s.getattr(ino.0));
                status.unwrap_or_else(|| self.core.getattr(ino.0))
            },
        );
        match r {
            Ok(attr) => reply.attr(&self.ttl, &file_attr(&attr)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let r = call(
            "readlink",
            || format!("inode {}", ino.0),
            || self.core.readlink(ino.0),
        );
        match r {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = call(
            "open",
            || format!("inode {}", ino.0),
            || match self.status.as_ref().and_then(|s| s.open(ino.0, flags.0)) {
                // The status file is rendered at open: no page cache.
                Some(r) => r.map(|fh| (fh, true)),
                None => self.core.open(ino.0, flags.0),
            },
        );
        match r {
            Ok((fh, writer)) => reply.opened(FileHandle(fh), open_flags(writer)),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let r = call(
            "read",
            || format!("inode {} at {offset}", ino.0),
            || {
                let status = self
                    .status
                    .as_ref()
                    .and_then(|s| s.read(fh.0, offset, size));
                status.unwrap_or_else(|| self.core.read(ino.0, fh.0, offset, size))
            },
        );
        match r {
            Ok(data) => reply.data(&data),
            Err(e) => reply.error(e),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let r = call(
            "release",
            || format!("inode {}", ino.0),
            || {
                if self.status.as_ref().is_some_and(|s| s.release(fh.0)) {
                    return Ok(());
                }
                self.core.release(fh.0)
            },
        );
        reply_empty(reply, r);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        if self.no_opendir {
            // With FUSE_NO_OPENDIR_SUPPORT, ENOSYS is success and stops
            // further opendir and releasedir requests (see init).
            reply.error(Errno::ENOSYS);
            return;
        }
        // Readdir keeps no state per open directory: the handle is 0. The
        // kernel may cache a listing (and keep it across opens) unless the
        // core says it changes without the directory's mtime or differs
        // between callers (the views).
        let r = call(
            "opendir",
            || format!("inode {}", ino.0),
            || self.core.opendir_listing(ino.0, self.plus),
        );
        match r {
            Ok(uncached) => {
                let flags = if uncached {
                    FopenFlags::empty()
                } else {
                    FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE
                };
                reply.opened(FileHandle(0), flags)
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let caller = caller_of(req);
        let r = call(
            "readdir",
            || format!("inode {}", ino.0),
            || self.core.readdir_as(&caller, ino.0, offset),
        );
        match r {
            Ok(entries) => {
                let rest = after(&entries, offset);
                for (cookie, e) in rest {
                    if reply.add(INodeNo(e.ino), *cookie, file_type(e.kind), &e.name) {
                        break;
                    }
                }
                reply.ok();
                if rest.is_empty() {
                    self.ended(&caller, ino.0);
                }
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        // Each entry goes with its attributes and one counted lookup, so
        // `ls -l` and `find` need no lookup per entry, except the entries
        // `ListedAttrs` sends without attributes (node 0, with the entry's
        // own number as d_ino: the vendored fuser's patch).
        let caller = caller_of(req);
        let mut ended = false;
        let r = call(
            "readdirplus",
            || format!("inode {}", ino.0),
            || {
                let entries = self.core.readdir_as(&caller, ino.0, offset)?;
                let attrs = self.core.listed_attrs(&caller, ino.0, offset);
                let rest = after(&entries, offset);
                ended = rest.is_empty();
                for (cookie, e) in rest {
                    let listed = attrs.get(&self.core, &e.name, e.kind);
                    let full = match &listed {
                        Some(attr) => reply.add(
                            INodeNo(attr.ino),
                            *cookie,
                            &e.name,
                            &self.ttl,
                            &file_attr(attr),
                            Generation(0),
                        ),
                        None => {
                            let mut none = file_attr(&negative_attr());
                            none.ino = INodeNo(0);
                            none.kind = file_type(e.kind);
                            reply.add(
                                INodeNo(e.ino),
                                *cookie,
                                &e.name,
                                &Duration::ZERO,
                                &none,
                                Generation(0),
                            )
                        }
                    };
                    if full {
                        // Not sent: the kernel holds no lookup of it.
                        if let Some(attr) = listed {
                            self.core.forget(attr.ino, 1);
                        }
                        break;
                    }
                }
                Ok(())
            },
        );
        match r {
            Ok(()) => {
                reply.ok();
                if ended {
                    self.ended(&caller, ino.0);
                }
            }
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        // Directories hold no state per open (see opendir); the listing
        // the pass read is dropped.
        let r = call(
            "releasedir",
            || format!("inode {}", ino.0),
            || {
                self.core.releasedir(ino.0);
                Ok(())
            },
        );
        reply_empty(reply, r);
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        // Every close(2) of a descriptor sends flush, including those of
        // duplicated descriptors and forked children: pending lines are
        // committed here so that a reader opening the file after close()
        // returns sees them, and so that errors reach the writer (release
        // is asynchronous and its errors reach no one).
        let r = call(
            "flush",
            || format!("inode {}", ino.0),
            || self.core.flush(fh.0),
        );
        reply_empty(reply, r);
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = call(
            "fsync",
            || format!("inode {}", ino.0),
            || self.core.fsync(fh.0),
        );
        reply_empty(reply, r);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: fuser::ReplyWrite,
    ) {
        // The kernel passes its cached size as the offset of an O_APPEND
        // write, which can be stale (FUSE-NOTES §4c): append at the real end.
        let append = flags.0 & libc::O_APPEND != 0;
        let r = call(
            "write",
            || format!("inode {}", ino.0),
            || self.core.write(fh.0, offset, data, append),
        );
        match r {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: fuser::ReplyCreate,
    ) {
        let r = call(
            "create",
            || format!("{name:?}"),
            || {
                let created = self
                    .core
                    .create(parent.0, name, mode, flags, owner_of(req))?;
                Ok((created, self.core.is_per_user(parent.0)))
            },
        );
        match r {
            Ok(((attr, fh, writer), per_user)) => reply.created(
                &self.entry_ttl(per_user),
                &file_attr(&attr),
                Generation(0),
                FileHandle(fh),
                open_flags(writer),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let r = call(
            "mkdir",
            || format!("{name:?}"),
            || {
                let attr = self.core.mkdir(parent.0, name, mode, owner_of(req))?;
                Ok((attr, self.core.is_per_user(parent.0)))
            },
        );
        match r {
            Ok((attr, per_user)) => {
                reply.entry(&self.entry_ttl(per_user), &file_attr(&attr), Generation(0))
            }
            Err(e) => reply.error(e),
        }
    }

    /// The kernel dropped `nlookup` lookups of `ino`. fuser's default
    /// `batch_forget` calls this for each of its entries (its entry type is
    /// private in fuser 0.18, so it is not overridden).
    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.core.forget(ino.0, nlookup);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let r = call(
            "symlink",
            || format!("{link_name:?}"),
            || {
                self.core
                    .symlink(parent.0, link_name, target, owner_of(req))
            },
        );
        match r {
            Ok(attr) => reply.entry(&self.ttl, &file_attr(&attr), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = call(
            "link",
            || format!("{newname:?}"),
            || self.core.link(ino.0, newparent.0, newname),
        );
        match r {
            Ok(attr) => reply.entry(&self.ttl, &file_attr(&attr), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = call(
            "mknod",
            || format!("{name:?}"),
            || self.core.mknod(parent.0, name, mode, umask, owner_of(req)),
        );
        match r {
            Ok(attr) => reply.entry(&self.ttl, &file_attr(&attr), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = call(
            "unlink",
            || format!("{name:?}"),
            || self.core.unlink(parent.0, name),
        );
        reply_empty(reply, r);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = call(
            "rmdir",
            || format!("{name:?}"),
            || self.core.rmdir(parent.0, name),
        );
        reply_empty(reply, r);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = call(
            "rename",
            || format!("{name:?}"),
            || {
                self.core
                    .rename(parent.0, name, newparent.0, newname, flags.bits())
            },
        );
        reply_empty(reply, r);
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = call(
            "fallocate",
            || format!("inode {}", ino.0),
            || self.core.fallocate(ino.0, fh.0, offset, length, mode),
        );
        reply_empty(reply, r);
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<fuser::TimeOrNow>,
        mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<std::time::SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<std::time::SystemTime>,
        _chgtime: Option<std::time::SystemTime>,
        _bkuptime: Option<std::time::SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let when = |t: Option<fuser::TimeOrNow>| {
            t.map(|t| match t {
                fuser::TimeOrNow::SpecificTime(t) => t,
                fuser::TimeOrNow::Now => std::time::SystemTime::now(),
            })
        };
        let r = call(
            "setattr",
            || format!("inode {}", ino.0),
            || {
                self.core.setattr(
                    ino.0,
                    fh.map(|fh| fh.0),
                    mode,
                    (uid, gid),
                    size,
                    when(mtime),
                    when(atime),
                )
            },
        );
        match r {
            Ok(attr) => reply.attr(&self.ttl, &file_attr(&attr)),
            Err(e) => reply.error(e),
        }
    }

    fn ioctl(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        // No ioctl is served (Python's open probes TCGETS): "not a tty".
        let r = call(
            "ioctl",
            || format!("inode {}", ino.0),
            || self.core.ioctl(ino.0),
        );
        match r {
            Ok(()) => reply.ioctl(0, &[]),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        let r = call(
            "getxattr",
            || format!("inode {}", ino.0),
            || self.core.xattrs(ino.0),
        );
        match r {
            Ok(()) => reply.size(0),
            Err(e) => reply.error(e),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        let r = call(
            "listxattr",
            || format!("inode {}", ino.0),
            || self.core.xattrs(ino.0),
        );
        match r {
            Ok(()) => reply.size(0),
            Err(e) => reply.error(e),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _name: &OsStr,
        _value: &[u8],
        _flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        // None are kept: ENOSYS (the kernel answers EOPNOTSUPP and asks no
        // more), without fuser's warning per call.
        let r = call(
            "setxattr",
            || format!("inode {}", ino.0),
            || self.core.xattrs(ino.0),
        );
        reply_empty(reply, r);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        let r = call(
            "removexattr",
            || format!("inode {}", ino.0),
            || self.core.xattrs(ino.0),
        );
        reply_empty(reply, r);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match call("statfs", || "the root".to_string(), || self.core.statfs()) {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(e),
        }
    }
}

/// The entries of a listing (sorted by cookie) after position `offset`,
/// found by binary search: a 20,000-entry directory read 30 entries a
/// reply is not scanned from its start at every reply.
fn after(entries: &[(u64, DirEntry)], offset: u64) -> &[(u64, DirEntry)] {
    &entries[entries.partition_point(|(c, _)| *c <= offset)..]
}
