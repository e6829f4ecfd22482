//! The mount's core: plain methods (lookup, getattr, open, read, readdir,
//! readlink, statfs) over the store, returning `Result`s. No fuser type
//! appears here, so it is tested without a mount; `adapter.rs` maps these
//! methods to kernel requests.
//!
//! Source: MOUNT.md, "The tree", "Attributes", "Reading", "Details".

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::Metadata;
use std::num::NonZeroUsize;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;

use super::access::Caller;
use super::budget::{PendingBudget, DEFAULT_PENDING_BUDGET};
pub use super::error::{FsError, FsResult};
pub(super) use super::handles::Handle;
use super::handles::HandleTable;
use super::inode::{child_ino, InodeTable, Node, BY_ID_DIR};
use super::writer::Writer;
use crate::store::views::{ViewCatalog, ViewFacts, ViewKind};
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

/// What the kernel is told to drop, by the thread that owns its notifier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalidation {
    /// A file's attributes (after a commit changed its size).
    Attrs(u64),
    /// A directory's attributes and cached listing (after a listing pass
    /// the kernel must not keep).
    Listing(u64),
    /// A file's attributes and cached pages (a transcript rewritten in
    /// place under the same size and mtime, which the kernel's own check
    /// of those does not see).
    Pages(u64),
}

/// A released writer whose dropped buffers hold at least this many bytes
/// gives freed heap memory back to the kernel at once.
const RETURN_MEMORY_AT: usize = 1 << 20;

/// Directory listings kept for readdir continuations.
const LISTINGS_KEPT: usize = 64;

/// How long a new pass over a view or `.by-id` reuses the listing made
/// while what it was made from holds (the attribute timeout's default:
/// the views follow the store within it).
const LISTING_REUSED_FOR: Duration = Duration::from_secs(1);

/// A kept listing: what it was made from, when.
struct KeptListing {
    listing: Listing,
    /// The views' snapshot or the catalog's generation it was made from
    /// ([`SessionFs::listing_source`]); `None`: a new pass lists again.
    source: Option<u64>,
    made: std::time::Instant,
}

/// Which entries of one directory a `readdirplus` reply sends with
/// attributes ([`SessionFs::listed_attrs`]). Those sent without them
/// (node 0) the kernel looks up itself if they are used:
///
/// - `.` and `..`;
/// - a session's `session.jsonl` and `session.md`: their size costs a
///   frame walk or a rendering;
/// - a link of a `.by-cwd`, `.by-date` or `.by-title` view listed as part
///   of a walk (its listing began within [`WALK_GAP`] of another
///   directory's): `find` walks the views without stat-ing their links,
///   and the kernel's cost of taking 10,000 links with attributes (an
///   inode each) is three times the walk's (README, Scale). A view
///   directory listed on its own (`ls -l`, a file manager) sends them:
///   its links are then stat-ed without a lookup each;
/// - every entry of a per-user view (see [`SessionFs::is_per_user`]);
/// - an entry whose lookup fails (the caller's own lookup then meets the
///   error).
pub struct ListedAttrs<'a> {
    parent: u64,
    /// The directory's node; `None` sends every entry without attributes.
    node: Option<Node>,
    caller: &'a Caller,
    /// Whether a view's links go with their attributes (not a walk).
    links: bool,
}

/// Listings of two directories that begin this close together are taken
/// as one walk (`find`, `du`, an indexer) by [`ListedAttrs`]; a person's
/// commands and a file manager's clicks are further apart.
pub const WALK_GAP: Duration = Duration::from_millis(50);

/// The environment variable that sets [`WALK_GAP`] in milliseconds (for
/// tests and measurements: `0` never takes listings as a walk).
pub const WALK_GAP_ENV: &str = "SESSIONFS_WALK_GAP_MS";

/// The latest directory listing begun (a `readdirplus` at offset 0).
struct ListingStart {
    ino: u64,
    at: Instant,
    /// What [`ListedAttrs`] decided for a view's links in it.
    links: bool,
}

impl ListedAttrs<'_> {
    /// The attributes of entry `name` (of kind `kind`, as listed), with one
    /// lookup of it counted in `fs` (the kernel then holds the entry as
    /// after [`SessionFs::lookup_as`]), or `None` (see the type).
    pub fn get(&self, fs: &SessionFs, name: &OsStr, kind: Kind) -> Option<Attr> {
        if name == "." || name == ".." {
            return None;
        }
        match self.node.as_ref()? {
            Node::Session { .. } if name == VIEW_NAME || name == super::rendered::RENDERED_NAME => {
                None
            }
            Node::ViewDir { .. } if kind == Kind::Symlink && !self.links => None,
            _ => fs.lookup_as(self.caller, self.parent, name).ok(),
        }
    }
}

/// File type of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    /// A named pipe.
    Fifo,
    /// A character device node.
    CharDevice,
    /// A block device node.
    BlockDevice,
    /// A Unix socket.
    Socket,
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

/// The mount's core.
pub struct SessionFs {
    pub(super) store: Arc<Store>,
    pub(super) inodes: InodeTable,
    pub(super) handles: HandleTable,
    /// The budget of pending bytes of all writers (`--pending-budget`).
    pub(super) budget: Arc<PendingBudget>,
    /// Project and session directories made by `mkdir` that exist only in
    /// this mount until something is committed in them (mount paths),
    /// with the time each was made (its times, as a local directory's).
    pub(super) virtual_dirs: Mutex<HashMap<PathBuf, SystemTime>>,
    /// Batch window of appends.
    pub(super) batch_window: Duration,
    /// Inodes whose attributes the kernel must drop (sent by a thread
    /// outside the request handlers: MOUNT.md, Details).
    pub(super) invalidate: Mutex<Option<Sender<Invalidation>>>,
    /// The latest listing of each recently read directory, reused by the
    /// continuation calls of one readdir pass, and by a new pass of a view
    /// or `.by-id` while what it was made from holds ([`KeptListing`]).
    /// Keyed by inode and, for per-user views, the caller's view key.
    listings: Mutex<lru::LruCache<(u64, u64), KeptListing>>,
    /// The latest listing begun ([`SessionFs::links_with_attrs`]).
    latest_listing: Mutex<Option<ListingStart>>,
    /// [`WALK_GAP`], or what [`WALK_GAP_ENV`] sets.
    walk_gap: Duration,
    /// Open renderings of `session.md` files (`rendered.rs`).
    pub(super) renderings: super::rendered::Renderings,
    /// The root's attributes as last read, answered while the root cannot
    /// be stat'ed (see [`SessionFs::root_attr`]).
    last_root: Mutex<Option<Attr>>,
    /// The `.by-*` views' catalog (see `views.rs`).
    pub(super) views: ViewCatalog,
    /// Only the mount's owner can reach it ([`SessionFs::set_single_caller`]).
    single_caller: bool,
    /// The root's device: pass-through entries on another device are
    /// numbered apart (see [`super::inode::backing_ino`]).
    root_dev: u64,
}

/// How old a views' snapshot may be when a request uses it: half the
/// default attribute timeout, so a view follows the store within it.
const VIEW_MAX_AGE: Duration = Duration::from_millis(500);

fn time(secs: i64, nsecs: i64) -> SystemTime {
    let nanos = Duration::from_nanos(nsecs.clamp(0, 999_999_999) as u64);
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()) + nanos
    }
}

fn kind_of_meta(meta: &Metadata) -> Kind {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_dir() {
        Kind::Dir
    } else if t.is_symlink() {
        Kind::Symlink
    } else if t.is_fifo() {
        Kind::Fifo
    } else if t.is_char_device() {
        Kind::CharDevice
    } else if t.is_block_device() {
        Kind::BlockDevice
    } else if t.is_socket() {
        Kind::Socket
    } else {
        Kind::File
    }
}

pub(super) fn attr_of(ino: u64, meta: &Metadata) -> Attr {
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

/// The type a listing shows for entry `kind` at backing path `path`: a
/// special file's own type is read from the backing file system (regular
/// when it vanished meanwhile).
fn kind_of_entry(kind: EntryKind, path: &Path) -> Kind {
    match kind {
        EntryKind::Dir => Kind::Dir,
        EntryKind::Symlink => Kind::Symlink,
        EntryKind::File
        | EntryKind::Transcript
        | EntryKind::ConflictCopy
        | EntryKind::FlatArtifact => Kind::File,
        EntryKind::Special => std::fs::symlink_metadata(path)
            .map(|m| kind_of_meta(&m))
            .unwrap_or(Kind::File),
    }
}

fn lstat(path: &Path) -> FsResult<Metadata> {
    std::fs::symlink_metadata(path).map_err(|e| FsError::Store(StoreError::io("stat", path, e)))
}

impl SessionFs {
    /// A mount core over `store`.
    pub fn new(store: Arc<Store>, batch_window: Duration) -> Self {
        let views = ViewCatalog::new(&store, VIEW_MAX_AGE);
        // An unreadable root fails every request later, with its path.
        let root_dev = std::fs::metadata(store.root()).map_or(0, |m| m.dev());
        SessionFs {
            root_dev,
            views,
            store,
            inodes: InodeTable::default(),
            handles: HandleTable::default(),
            budget: Arc::new(PendingBudget::new(DEFAULT_PENDING_BUDGET)),
            single_caller: false,
            virtual_dirs: Mutex::new(HashMap::new()),
            batch_window,
            invalidate: Mutex::new(None),
            listings: Mutex::new(lru::LruCache::new(
                NonZeroUsize::new(LISTINGS_KEPT).unwrap_or(NonZeroUsize::MIN),
            )),
            renderings: Default::default(),
            last_root: Mutex::new(None),
            latest_listing: Mutex::new(None),
            walk_gap: std::env::var(WALK_GAP_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
                .map_or(WALK_GAP, Duration::from_millis),
        }
    }

    /// Sets the budget of pending bytes of all writers (bytes; MOUNT.md,
    /// Appending). Call before the mount serves requests.
    pub fn set_pending_budget(&mut self, bytes: u64) {
        self.budget = Arc::new(PendingBudget::new(bytes));
    }

    /// Declares that the kernel lets only the mount's owner reach it
    /// (neither `allow_other` nor `allow_root`): the views' entries, the
    /// same for every caller there can be, may then be cached by the
    /// kernel for the attribute timeout like any other (their listings
    /// still are not: [`SessionFs::opendir`]). Call before the mount
    /// serves requests; without it the views are treated as differing
    /// between callers.
    pub fn set_single_caller(&mut self, yes: bool) {
        self.single_caller = yes;
    }

    /// Sends attribute invalidations of committed transcripts to `tx` (a
    /// thread that owns the kernel notifier). Only commits send one: an
    /// invalidation that reaches the kernel while a getattr of the same
    /// file is answered makes it discard that answer, so a reader on a
    /// mount whose transcript keeps growing elsewhere would be given the
    /// old size again and again.
    pub fn set_invalidation_channel(&self, tx: Sender<Invalidation>) {
        *self.invalidate.lock() = Some(tx);
    }

    pub(super) fn invalidate_attrs(&self, ino: u64) {
        self.send_invalidation(Invalidation::Attrs(ino));
    }

    fn send_invalidation(&self, what: Invalidation) {
        if let Some(tx) = self.invalidate.lock().as_ref() {
            let _ = tx.send(what);
        }
    }

    /// Whether only the mount's owner can reach it (no per-user views).
    pub fn is_single_caller(&self) -> bool {
        self.single_caller
    }

    /// A listing pass of directory `ino` for `caller` reached its end (a
    /// readdir with nothing left after its offset): the listing kept for
    /// its continuation calls goes, and when the kernel caches every
    /// listing (`kernel_caches_all`: opendir declined, see the adapter's
    /// `init`) one it must not keep ([`SessionFs::opendir_listing`] says
    /// which, for `plus`) is dropped from its cache, with the directory's
    /// attributes, so that the next pass asks again. A directory inside a
    /// view is left cached: its mtime is its snapshot's build time, which
    /// moves only when the views change, so the kernel drops the listing
    /// itself once a getattr after the attribute timeout shows a new mtime
    /// (`find .by-cwd` sent one invalidation per directory of the view).
    pub fn listing_ended(&self, caller: &Caller, ino: u64, kernel_caches_all: bool, plus: bool) {
        let key = (ino, self.listing_key(caller, ino));
        self.listings.lock().pop(&key);
        if kernel_caches_all
            && self.opendir_listing(ino, plus).unwrap_or(true)
            && !self.listing_follows_mtime(ino)
        {
            self.send_invalidation(Invalidation::Listing(ino));
        }
    }

    /// Whether directory `ino`'s mtime moves whenever its listing changes:
    /// a directory inside a view (its top shows the root's times instead).
    fn listing_follows_mtime(&self, ino: u64) -> bool {
        matches!(
            self.inodes.node(ino),
            Some((_, Node::ViewDir { rel, .. })) if !rel.is_empty()
        )
    }

    /// Tells the kernel that a commit changed `ino`'s attributes
    /// ([`SessionFs::set_invalidation_channel`]).
    pub(super) fn after_commit_of(&self, ino: u64, committed: &super::writer::Committed) {
        if let super::writer::Committed::Batch = committed {
            self.invalidate_attrs(ino);
        }
    }

    /// When the virtual directory `path` was made; now for any other path
    /// (an unpublished transcript's directory already on disk).
    pub(super) fn virtual_since(&self, path: &Path) -> SystemTime {
        self.virtual_dirs
            .lock()
            .get(path)
            .copied()
            .unwrap_or_else(SystemTime::now)
    }

    pub(super) fn is_virtual(&self, path: &Path) -> bool {
        self.virtual_dirs.lock().contains_key(path)
    }

    /// The store served.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The node the table records for `ino`, and for a `.by-id` link's
    /// number (held without an entry, [`super::inode::by_id_key_of`]) the
    /// session directory of its key as the store's catalog has it now.
    /// Only requests that may name a link ask the store; those that want
    /// a directory's node ask the table itself.
    fn table_node(&self, ino: u64) -> Option<(PathBuf, Node)> {
        let Some(key) = super::inode::by_id_key_of(ino) else {
            return self.inodes.node(ino);
        };
        let (project, session) = match self.store.session_dir_of_key(key) {
            Ok(found) => found?,
            Err(e) => {
                log::warn!("{}: {e}", BY_ID_DIR);
                return None;
            }
        };
        let path = Path::new(BY_ID_DIR).join(&session);
        Some((path, Node::ByIdLink { project, session }))
    }

    pub(super) fn node(&self, ino: u64) -> FsResult<(PathBuf, Node)> {
        let (path, node) = self.table_node(ino).ok_or(FsError::NoEntry)?;
        let Node::Passthrough { rel } = &node else {
            return Ok((path, node));
        };
        if self.names_file_of(rel, ino) {
            return Ok((path, node));
        }
        // Its recorded name now names another file, or none: another
        // name of it (a hard link) that still names it answers instead;
        // else nothing is done by that name (ext4 would act on the file
        // itself; this mount reaches files by name).
        for (parent, name, other) in self.inodes.other_names(ino) {
            if self.names_file_of(&other, ino) {
                self.inodes.answer_at(ino, parent, &name);
                return Ok((other.clone(), Node::Passthrough { rel: other }));
            }
        }
        Err(FsError::Stale)
    }

    /// [`SessionFs::node`], or for a passed-through file whose name no
    /// longer names it, the recorded node while a descriptor of it is held
    /// (handle `fh`'s, the latest open's, or the one kept at its unlink):
    /// `fchmod`, `ftruncate` and `fallocate` of an open file go on.
    pub(super) fn node_or_held(&self, ino: u64, fh: Option<u64>) -> FsResult<(PathBuf, Node)> {
        match self.node(ino) {
            Err(FsError::Stale)
                if self.passthrough_file(ino, fh).is_some()
                    || self.inodes.detached(ino).is_some() =>
            {
                self.recorded_node(ino)
            }
            other => other,
        }
    }

    /// The node of `ino` as the table records it, without checking that a
    /// passed-through entry's name still names its file (getattr, whose
    /// answer may come from a held descriptor).
    pub(super) fn recorded_node(&self, ino: u64) -> FsResult<(PathBuf, Node)> {
        self.table_node(ino).ok_or(FsError::NoEntry)
    }

    /// Whether the passed-through entry `rel` names the file numbered
    /// `ino` (one `lstat`).
    fn names_file_of(&self, rel: &Path, ino: u64) -> bool {
        matches!(self.passthrough_meta(rel, ino), Ok((_, true)))
    }

    /// The backing metadata of the passed-through entry `rel` (one
    /// `lstat`), and whether it is the file numbered `ino`: the one rule
    /// of [`SessionFs::node`]'s check and of its attributes.
    ///
    /// Errors: the `lstat` error.
    fn passthrough_meta(&self, rel: &Path, ino: u64) -> FsResult<(Metadata, bool)> {
        let meta = lstat(&self.store.backing_path(rel))?;
        let derived = self.inodes.derived(ino).unwrap_or(ino);
        let same = super::inode::backing_ino(derived, meta.dev(), meta.ino(), self.root_dev) == ino;
        Ok((meta, same))
    }

    pub(super) fn add_handle(&self, handle: Handle) -> u64 {
        self.handles.insert(handle)
    }

    /// Looks `name` up in directory `parent` and returns its attributes
    /// (MOUNT.md, The tree), as root sees them ([`SessionFs::lookup_as`]).
    pub fn lookup(&self, parent: u64, name: &OsStr) -> FsResult<Attr> {
        self.lookup_as(&Caller::root(), parent, name)
    }

    /// Whether the entries of directory `parent` differ between callers
    /// (a `.by-*` view while other users may reach the mount): the kernel
    /// must not cache them (zero entry timeout), since its caches are
    /// shared between users. A new view lists its directory node here and shows a session
    /// only when [`SessionFs::visible_to`] the caller, in lookup and in
    /// listing.
    pub fn is_per_user(&self, parent: u64) -> bool {
        !self.single_caller && self.is_view_dir(parent)
    }

    /// Whether `ino` is `.by-id` or a directory of a `.by-*` view.
    fn is_view_dir(&self, ino: u64) -> bool {
        matches!(
            self.inodes.node(ino),
            Some((_, Node::ById | Node::ViewDir { .. }))
        )
    }

    /// Opens directory `ino` for listing; returns whether the kernel must
    /// not cache its listing: a view's listing changes when sessions come
    /// and go without its own mtime changing (the kernel keeps a cached
    /// listing until the mtime moves), and may differ between callers.
    ///
    /// Errors: ENOENT for an unknown inode.
    pub fn opendir(&self, ino: u64) -> FsResult<bool> {
        self.opendir_listing(ino, false)
    }

    /// [`SessionFs::opendir`] when listings are readdirplus (`plus`): then
    /// the listings that give most entries attributes ([`ListedAttrs`]:
    /// the root, a project, `.by-id`, the views) are not cached either,
    /// since a cached listing is served without attributes and its entries
    /// are then looked up one by one once their timeout expires. A
    /// session's listing, mostly `session.jsonl` and `session.md` sent
    /// without them, may be.
    ///
    /// Errors: ENOENT for an unknown inode.
    pub fn opendir_listing(&self, ino: u64, plus: bool) -> FsResult<bool> {
        Ok(match self.recorded_node(ino)?.1 {
            Node::ById | Node::ViewDir { .. } => true,
            Node::Root | Node::Project { .. } => plus,
            _ => false,
        })
    }

    /// Builds the views' snapshot ahead of the first request for them,
    /// when the catalog was persisted by an earlier mount (a revalidation
    /// by directory stamps: about 8 ms for 10,000 sessions). A first mount
    /// ever does nothing here: its first scan reads every session, and
    /// waits for a view to be asked for. Failures are logged at debug
    /// level; a view's request meets them again.
    pub fn warm_views(&self) {
        if self.views.loaded_from_disk() {
            if let Err(e) = self.views.snapshot(&self.store) {
                log::debug!("views not prepared ahead: {e}");
            }
        }
    }

    /// Sweeps the views' catalog while the views are in use and when they
    /// are used again after an idle spell
    /// ([`ViewCatalog::sweep_loop`](crate::store::views::ViewCatalog::sweep_loop):
    /// transcripts removed or replaced inside their session directories);
    /// never returns (the mount's `sessionfs-views` thread, which ends
    /// with the process).
    pub fn sweep_views(&self) -> ! {
        self.views.sweep_loop(&self.store)
    }

    /// How long ago the views' catalog was last swept, and how many
    /// sweeps ended (for `.sessionfs-status`).
    pub fn views_swept(&self) -> (Option<Duration>, u64) {
        self.views.latest_sweep()
    }

    /// Whether the views' snapshot is built (for `.sessionfs-status`).
    pub fn views_ready(&self) -> bool {
        self.views.has_snapshot()
    }

    /// Whether the `.by-*` views show `caller` the session
    /// `project/session`: search permission on its project and session
    /// directories and read permission on its transcript (issue 9). Every
    /// view of sessions filters with this.
    pub fn visible_to(&self, caller: &Caller, project: &OsStr, session: &OsStr) -> bool {
        if caller.uid == 0 {
            return true; // root may read everything (Caller::may)
        }
        let project_dir = self.store.backing_path(Path::new(project));
        let session_dir = project_dir.join(session);
        let transcript = session_dir.join(self.store.encoding().file_name());
        caller.may_see_session(&project_dir, &session_dir, &transcript)
    }

    /// Looks `name` up in directory `parent` for `caller` and returns its
    /// attributes (MOUNT.md, The tree). Damaged transcripts and flat
    /// artifacts fail with the store's error (EIO); probe names get ENOENT
    /// at once; a view entry `caller` may not see gets ENOENT.
    pub fn lookup_as(&self, caller: &Caller, parent: u64, name: &OsStr) -> FsResult<Attr> {
        let (parent_path, parent_node) = self.node(parent)?;
        let child_path = parent_path.join(name);
        // A session directory's metadata, read by its lookup: its
        // attributes (one lstat per session of a readdirplus, not two).
        let mut session_meta = None;
        let child = match parent_node {
            Node::Root => {
                if name == BY_ID_DIR {
                    Node::ById
                } else if let Some(view) = Self::view_root_node(name) {
                    view
                } else if self.is_absent_probe(&child_path) {
                    return Err(FsError::NoEntry);
                } else {
                    let backing = self.store.backing_path(Path::new(name));
                    match std::fs::symlink_metadata(&backing) {
                        Ok(meta) if meta.is_dir() => {}
                        Ok(_) => return Err(FsError::NoEntry),
                        Err(_) if self.is_virtual(&child_path) => {}
                        Err(e) => return Err(StoreError::io("stat", &backing, e).into()),
                    }
                    Node::Project {
                        project: name.to_os_string(),
                    }
                }
            }
            Node::ViewDir { view, rel } => {
                let visible = |f: &ViewFacts| self.visible_to(caller, &f.project, &f.session);
                self.view_lookup(view, &rel, name, &visible)?
            }
            Node::ById => {
                let (project, session) = self.store.find_session_dir_by_id(name)?;
                if !self.visible_to(caller, &project, &session) {
                    return Err(FsError::NoEntry);
                }
                Node::ByIdLink { project, session }
            }
            Node::Project { project } => {
                if self.is_absent_probe(&child_path) {
                    return Err(FsError::NoEntry);
                }
                match self.store.lookup_in_project(&project, name) {
                    Ok(meta) if !self.is_virtual(&child_path) => session_meta = Some(meta),
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
                } else if name == super::rendered::RENDERED_NAME {
                    Node::Rendered { project, session }
                } else if crate::store::is_publication_temp(name)
                    || name == crate::store::Encoding::Zstd.file_name()
                {
                    return Err(FsError::NoEntry);
                } else if let Some(conflict) = self.conflict_node(&project, &session, name)? {
                    conflict
                } else if crate::store::is_foreign_transcript_name(name) {
                    // Only an entry that is there is another version's
                    // transcript: a name probed or about to be created is
                    // missing (create then refuses it with EPERM).
                    let path = self.store.backing_path(&child_path);
                    if let Err(e) = std::fs::symlink_metadata(&path) {
                        return Err(if e.kind() == std::io::ErrorKind::NotFound {
                            FsError::NoEntry
                        } else {
                            StoreError::io("stat", &path, e).into()
                        });
                    }
                    return Err(StoreError::UnsupportedVersion {
                        path,
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
            Node::Transcript { .. }
            | Node::Rendered { .. }
            | Node::ConflictCopy { .. }
            | Node::ByIdLink { .. }
            | Node::ViewLink { .. } => return Err(FsError::NotDir),
        };
        let ino = self.ino_of(parent, &child_path, &child)?;
        self.inodes.looked_up(parent, &child_path, &child, ino);
        let attr = match session_meta {
            Some(meta) => Ok(attr_of(ino, &meta)),
            None => self.attr(ino, &child),
        };
        if attr.is_err() {
            // No entry is replied: the kernel holds no lookup of it.
            self.inodes.forget(ino, 1);
        }
        attr
    }

    /// Which entries of directory `parent` a `readdirplus` reply at
    /// cookie `offset` sends with attributes, for `caller` (see
    /// [`ListedAttrs`]).
    pub fn listed_attrs<'a>(
        &self,
        caller: &'a Caller,
        parent: u64,
        offset: u64,
    ) -> ListedAttrs<'a> {
        let node = if self.is_per_user(parent) {
            None
        } else {
            self.inodes.node(parent).map(|(_, node)| node)
        };
        ListedAttrs {
            parent,
            node,
            caller,
            links: self.links_with_attrs(parent, offset),
        }
    }

    /// Whether a listing of `parent` at cookie `offset` sends a view's
    /// links with their attributes: at offset 0 (a listing begins), unless
    /// another directory's listing began within [`WALK_GAP`]; later calls
    /// of the same listing as its first.
    fn links_with_attrs(&self, parent: u64, offset: u64) -> bool {
        let mut latest = self.latest_listing.lock();
        if offset != 0 {
            return latest.as_ref().is_some_and(|l| l.ino == parent && l.links);
        }
        let now = Instant::now();
        let links = !latest
            .as_ref()
            .is_some_and(|l| l.ino != parent && now.duration_since(l.at) < self.walk_gap);
        *latest = Some(ListingStart {
            ino: parent,
            at: now,
            links,
        });
        links
    }

    /// The inode number of `node`, entry `path`'s last component of
    /// directory `parent`: a passed-through entry's backing inode number
    /// (it follows the file), else one derived from the parent and the
    /// name (see `inode.rs`).
    ///
    /// Errors: the backing `lstat` error of a passed-through entry.
    pub(super) fn ino_of(&self, parent: u64, path: &Path, node: &Node) -> FsResult<u64> {
        let derived = child_ino(parent, path.file_name().unwrap_or_default());
        match node {
            Node::Passthrough { rel } => {
                let meta = lstat(&self.store.backing_path(rel))?;
                Ok(super::inode::backing_ino(
                    derived,
                    meta.dev(),
                    meta.ino(),
                    self.root_dev,
                ))
            }
            Node::ViewLink { view, key } => Ok(super::inode::view_link_ino(*view, *key)),
            Node::ByIdLink { project, session } => {
                Ok(super::inode::by_id_link_ino(project, session))
            }
            _ => Ok(derived),
        }
    }

    /// The kernel forgot `n` lookups of `ino` (`forget`, `batch_forget`).
    pub fn forget(&self, ino: u64, n: u64) {
        self.inodes.forget(ino, n);
        if self.inodes.node(ino).is_none() {
            self.drop_listings(ino);
        }
    }

    /// A handle of directory `ino` was released (`releasedir`): its
    /// listings go, so that no 20,000-entry listing stays in memory after
    /// the pass that read it (another pass still under way lists again at
    /// its next call; cookies name entries, so it resumes where it was).
    pub fn releasedir(&self, ino: u64) {
        self.drop_listings(ino);
    }

    /// Drops the listings of directory `ino`, one per caller in a
    /// per-user view (the cache holds at most LISTINGS_KEPT, so the scan
    /// is short).
    fn drop_listings(&self, ino: u64) {
        let mut listings = self.listings.lock();
        let keys: Vec<(u64, u64)> = listings
            .iter()
            .map(|(key, _)| *key)
            .filter(|key| key.0 == ino)
            .collect();
        for key in keys {
            listings.pop(&key);
        }
    }

    /// How many inodes the table holds (for `.sessionfs-status` and tests).
    pub fn inode_count(&self) -> usize {
        self.inodes.count()
    }

    /// Whether `path` (relative to the root, at the root or project level)
    /// is a name file managers probe for that is not there: such names get
    /// ENOENT without a log line and without touching the backing store
    /// (MOUNT.md, Details: a remote root pays a round trip per probe
    /// otherwise), as the root's catalog answers whether a directory of
    /// that name is there. One that is (a `.git` directory) is looked up
    /// like any other name, so that it shows with its real type, as
    /// readdir lists it; so is a directory made by `mkdir` in the mount.
    fn is_absent_probe(&self, path: &Path) -> bool {
        let Some(name) = path.file_name() else {
            return false;
        };
        if !is_probe_name(name) || self.is_virtual(path) {
            return false;
        }
        let project = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .map(Path::as_os_str);
        !self.store.catalog_holds(project, name)
    }

    /// Attributes of an inode. A transcript's size (bytes) is its committed
    /// length, re-read from its backing file so that growth shows within
    /// the attribute timeout, plus the complete lines pending in this
    /// mount's handles on it (MOUNT.md, Attributes); getattr by path and
    /// fstat both come here.
    pub fn getattr(&self, ino: u64) -> FsResult<Attr> {
        let node = match self.node(ino) {
            Ok((_, node)) => node,
            // Answered from a held descriptor, if any (see attr).
            Err(FsError::Stale) => self.recorded_node(ino)?.1,
            Err(e) => return Err(e),
        };
        self.attr(ino, &node)
    }

    /// Attributes of `node`, numbered `ino`, before the table holds it.
    pub(super) fn getattr_of(&self, ino: u64, node: &Node) -> FsResult<Attr> {
        self.attr(ino, node)
    }

    /// The open file behind a passed-through inode: handle `fh`'s
    /// descriptor, else that of the inode's latest open while a handle
    /// holds it.
    pub(super) fn passthrough_file(&self, ino: u64, fh: Option<u64>) -> Option<Arc<std::fs::File>> {
        match fh.and_then(|fh| self.handles.get(fh)) {
            Some(Handle::File(f)) => Some(f),
            _ => self.inodes.open_file(ino),
        }
    }

    fn attr(&self, ino: u64, node: &Node) -> FsResult<Attr> {
        match node {
            Node::Root => {
                // The backing root's, with the mount's own directories
                // (`.by-id` and the three views) counted as its links.
                let mut a = self.root_attr(ino)?;
                a.nlink = a.nlink.saturating_add(1 + ViewKind::ALL.len() as u32);
                Ok(a)
            }
            Node::ViewDir { .. } | Node::ViewLink { .. } => self.view_attr(ino, node),
            Node::ById => {
                let mut a = attr_of(ino, &lstat(self.store.root())?);
                a.perm = 0o555;
                a.nlink = 2; // links only
                (a.size, a.blocks) = (0, 0); // the mount's own: no disk use
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
                    Err(_) => Ok(daemon_dir_attr(ino, self.virtual_since(&path))),
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
                        let dir = Path::new(project).join(session);
                        let mut a = new_transcript_attr(ino, self.virtual_since(&dir));
                        a.size = self.pending_len_of(ino);
                        return Ok(a);
                    }
                    // Removed on disk while a reader holds it open (`fstat`
                    // comes here without its handle): the held file's
                    // attributes, as after an unlink on a local file system.
                    // A new lookup of the path fails.
                    Err(e @ StoreError::NotFound { .. }) => {
                        let dir = self.store.backing_path(&Path::new(project).join(session));
                        self.handles.transcript_held_in(&dir).ok_or(e)?
                    }
                    other => other?,
                };
                let view = t.refresh()?;
                if t.take_new_view() {
                    self.send_invalidation(Invalidation::Pages(ino));
                }
                let mut a = attr_of(ino, &view.meta);
                a.size = view.plain_len + self.pending_len_of(ino);
                Ok(a)
            }
            Node::Rendered { project, session } => self.rendered_attr(ino, project, session),
            Node::ConflictCopy {
                project,
                session,
                name,
            } => {
                let view = self
                    .store
                    .conflict_copy(project, session, name)?
                    .refresh()?;
                let mut a = attr_of(ino, &view.meta);
                a.size = view.plain_len;
                a.perm &= !0o222;
                Ok(a)
            }
            Node::Passthrough { rel } => {
                // Removed or replaced on the backing side while open, or
                // unlinked through the mount while held: the file this
                // inode names is the open descriptor's, else the one kept
                // at the unlink (`fstat` comes here without its handle).
                let held = || {
                    let f = self
                        .inodes
                        .open_file(ino)
                        .or_else(|| self.inodes.detached(ino))?;
                    f.metadata().ok()
                };
                match self.passthrough_meta(rel, ino) {
                    Ok((meta, true)) => Ok(attr_of(ino, &meta)),
                    // Another file at its name: never that file's
                    // attributes.
                    Ok((_, false)) => held().map(|meta| attr_of(ino, &meta)).ok_or(FsError::Stale),
                    Err(e) => held().map(|meta| attr_of(ino, &meta)).ok_or(e),
                }
            }
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
                        "open of {}/{}/session.jsonl with O_TRUNC refused: transcripts are \
                         append-only; use >> (O_APPEND) to add lines",
                        project.to_string_lossy(),
                        session.to_string_lossy()
                    );
                    return Err(FsError::Refused);
                }
                // A transcript a read found corrupt in a complete frame
                // takes no appends (MOUNT.md, The tree: damage refuses
                // appends); a session not published yet has no frames.
                if let Some((t, at)) = self
                    .store
                    .transcript(&project, &session)
                    .ok()
                    .and_then(|t| t.bad_frame().map(|at| (t, at)))
                {
                    return Err(StoreError::corrupt(
                        t.path(),
                        at,
                        "a frame failed to read (its checksum or decoding, or it ends inside a \
                         line), so appends are refused; `sessionfs doctor` says what to do",
                    )
                    .into());
                }
                let append = flags & libc::O_APPEND != 0;
                Handle::Writer(Arc::new(Writer::open(
                    &self.store,
                    ino,
                    project,
                    session,
                    append,
                    Arc::clone(&self.budget),
                )?))
            }
            Node::Transcript { project, session } => {
                let t = self.store.transcript(&project, &session)?;
                let (handle, damaged) = reader_of(t);
                bypass = damaged;
                handle
            }
            Node::Rendered { project, session } => self.rendered_open(&project, &session, flags)?,
            Node::ConflictCopy {
                project,
                session,
                name,
            } => {
                if writing {
                    log::warn!(
                        "open of {}/{}/{} for writing refused: a sync tool's conflict copy \
                         is read-only; `sessionfs doctor --repair` turns its divergent part \
                         into a fork session",
                        project.to_string_lossy(),
                        session.to_string_lossy(),
                        name.to_string_lossy()
                    );
                    return Err(FsError::Refused);
                }
                let t = self.store.conflict_copy(&project, &session, &name)?;
                let (handle, damaged) = reader_of(t);
                bypass = damaged;
                handle
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
                let file = Arc::new(file);
                self.inodes.opened(ino, &file);
                Handle::File(file)
            }
            _ => return Err(FsError::IsDir),
        };
        let writer = matches!(handle, Handle::Writer(_)) || bypass;
        Ok((self.add_handle(handle), writer))
    }

    /// Reads up to `size` bytes at `offset` through an open file handle.
    ///
    /// Errors: EBADF for an unknown handle; EIO for a corrupt frame.
    pub fn read(&self, ino: u64, fh: u64, offset: u64, size: u32) -> FsResult<Vec<u8>> {
        match self.handles.get(fh) {
            Some(Handle::Transcript(t, cached)) => {
                self.read_transcript(ino, &t, offset, size, !cached)
            }
            Some(Handle::Rendered(t, r)) => self.rendered_read(&t, &r, offset, size),
            Some(Handle::Writer(w)) => {
                let dir = w.session_dir();
                let (project, session) = split_session_dir(&dir);
                match self.store.transcript(project, session) {
                    Ok(t) => self.read_transcript(ino, &t, offset, size, true),
                    Err(StoreError::NotFound { .. }) => Ok(pending_slice(
                        self.pending_bytes_of(ino).as_deref(),
                        0,
                        offset,
                        size,
                    )),
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
                        Err(e) => return Err(FsError::Io(e)),
                    }
                }
                buf.truncate(got);
                Ok(buf)
            }
            None => Err(FsError::BadHandle),
        }
    }

    /// Reads a transcript's view for inode `ino`. The kernel sizes reads by
    /// what it believes the file holds, which includes bytes written through
    /// this mount and not yet committed: a short reply there would be
    /// zero-filled by the kernel. So a read past the committed end first
    /// commits this mount's pending lines of that transcript, and a still
    /// incomplete last line of its writer is served as written
    /// (read-your-writes, as on a local file system). `short_ok`: the
    /// handle bypasses the page cache, so a read that runs into damage may
    /// return the bytes before it; else it fails with the damage's error.
    fn read_transcript(
        &self,
        ino: u64,
        t: &Transcript,
        offset: u64,
        size: u32,
        short_ok: bool,
    ) -> FsResult<Vec<u8>> {
        let end = offset.saturating_add(u64::from(size));
        if end > t.cached_attr().plain_len {
            self.commit_pending_of(ino);
        }
        let read = |at: u64, n: u32| {
            if short_ok {
                t.read(at, n)
            } else {
                t.read_no_short(at, n)
            }
        };
        let mut data = read(offset, size)?;
        if offset + data.len() as u64 >= end || self.writers_of(ino).is_empty() {
            // Whole, or nothing of this mount pending: `t.read` saw the
            // transcript as it is (it re-stats reads past its known end).
            return Ok(data);
        }
        // The rest comes from this mount's pending bytes, which start where
        // the committed transcript ends. A commit may land while they are
        // taken (the batch window's thread): the pending bytes are taken
        // twice around a re-stat of the transcript, and only an unchanged
        // pair is used; else the committed bytes are read first. A short
        // reply is the last resort (the kernel zero-fills past it within
        // the size it knows).
        for _ in 0..PENDING_READ_TRIES {
            let got_to = offset + data.len() as u64;
            if got_to >= end {
                break;
            }
            let rest = (end - got_to) as u32;
            let before = self.pending_bytes_of(ino);
            // The reply so far stands when the transcript cannot be read
            // further (damage, a frame failing its checksum: the short read
            // that serves the bytes before it).
            let Ok(attr) = t.refresh() else {
                break;
            };
            let committed = attr.plain_len;
            if committed > got_to {
                match read(got_to, rest) {
                    Ok(more) if !more.is_empty() => data.extend(more),
                    _ => break,
                }
                continue;
            }
            if self.pending_bytes_of(ino) != before {
                continue;
            }
            data.extend(pending_slice(before.as_deref(), committed, got_to, rest));
            break;
        }
        Ok(data)
    }

    /// Every open writer.
    pub(super) fn writers(&self) -> Vec<Arc<Writer>> {
        self.handles.writers()
    }

    /// Writers open on transcript `ino`.
    fn writers_of(&self, ino: u64) -> Vec<Arc<Writer>> {
        self.handles.writers_of(ino)
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
            self.after_commit_of(ino, &w.commit_for_reader(&self.store));
        }
    }

    /// The uncommitted tail of `ino`: the pending bytes of its one writer
    /// that has some; `None` when none or several have.
    fn pending_bytes_of(&self, ino: u64) -> Option<Vec<u8>> {
        let writers = self.writers_of(ino);
        let mut pending = writers
            .iter()
            .map(|w| w.pending_bytes())
            .filter(|p| !p.is_empty());
        let only = pending.next()?;
        pending.next().is_none().then_some(only)
    }

    /// Forgets a file handle; a writer commits what is pending first
    /// (errors are logged: release reaches no caller) and gives its
    /// pending memory back.
    ///
    /// Errors: none today (the result keeps release on the adapter's one
    /// error path).
    pub fn release(&self, fh: u64) -> FsResult<()> {
        if let Some(Handle::Writer(w)) = self.handles.remove(fh) {
            let (committed, dropped) = w.release(&self.store);
            if dropped.capacity() >= RETURN_MEMORY_AT {
                super::budget::give_back(|| drop(dropped));
            }
            self.after_commit_of(w.ino, &committed);
        }
        Ok(())
    }

    /// Whether a writer that has not published its new session is open on
    /// the transcript `ino`.
    pub(super) fn has_unpublished_writer(&self, ino: u64) -> bool {
        self.writers_of(ino).iter().any(|w| w.is_unpublished())
    }

    /// Names of virtual directories directly under the mount path `parent`
    /// that are not in `listed`.
    fn virtual_children(&self, parent: &Path, listed: &[OsString]) -> Vec<OsString> {
        self.virtual_dirs
            .lock()
            .keys()
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
        self.readdir_as(&Caller::root(), ino, offset)
    }

    /// [`SessionFs::readdir`] for `caller`: a view lists only the sessions
    /// [`SessionFs::visible_to`] the caller, and its listings are kept per
    /// caller.
    pub fn readdir_as(&self, caller: &Caller, ino: u64, offset: u64) -> FsResult<Listing> {
        let key = (ino, self.listing_key(caller, ino));
        // A new pass (offset 0) over a view or `.by-id` reuses the listing
        // made from the same snapshot or catalog generation within
        // LISTING_REUSED_FOR: a client that reads the first entries of
        // many handles of one 20,000-entry directory (a file manager's
        // polling, a fresh tester's 300 handles) no longer makes the whole
        // listing again each time.
        let source = if offset == 0 {
            self.listing_source(ino)?
        } else {
            None
        };
        if let Some(kept) = self.listings.lock().get(&key) {
            let same_source = source.is_some()
                && kept.source == source
                && kept.made.elapsed() < LISTING_REUSED_FOR;
            if offset != 0 || same_source {
                return Ok(Arc::clone(&kept.listing));
            }
        }
        let mut entries: Vec<(u64, DirEntry)> = self
            .list(caller, ino)?
            .into_iter()
            .map(|e| (cookie_of(&e.name), e))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.name.cmp(&b.1.name)));
        let listing = Arc::new(entries);
        let kept = KeptListing {
            listing: Arc::clone(&listing),
            source,
            made: std::time::Instant::now(),
        };
        self.listings.lock().put(key, kept);
        Ok(listing)
    }

    /// What a listing of directory `ino` is made from, when it is one a
    /// new pass may reuse: the views' current snapshot (its number) for a
    /// view directory, the catalog's generation for `.by-id`; `None` for
    /// every other directory (their listings follow the backing
    /// directories, and the kernel caches them by mtime).
    ///
    /// Errors: the views' or the catalog's revalidation error.
    fn listing_source(&self, ino: u64) -> FsResult<Option<u64>> {
        Ok(match self.recorded_node(ino).map(|(_, node)| node) {
            Ok(Node::ViewDir { .. }) => Some(self.views.snapshot(&self.store)?.number),
            Ok(Node::ById) => Some(self.store.discovery().generation()?),
            _ => None,
        })
    }

    /// The second half of a listing's key: the caller's view key in a
    /// per-user view, else 0.
    fn listing_key(&self, caller: &Caller, ino: u64) -> u64 {
        if self.is_per_user(ino) {
            caller.view_key()
        } else {
            0
        }
    }

    /// Every entry of a directory, `.` and `..` included, in no order.
    ///
    /// Errors: ENOTDIR, and the store's listing errors.
    fn list(&self, caller: &Caller, ino: u64) -> FsResult<Vec<DirEntry>> {
        let (path, node) = self.node(ino)?;
        let mut entries = vec![
            DirEntry {
                ino,
                kind: Kind::Dir,
                name: ".".into(),
            },
            DirEntry {
                ino: self.inodes.parent_of(ino).unwrap_or(ino),
                kind: Kind::Dir,
                name: "..".into(),
            },
        ];
        // A listing names each entry's number without holding it: the
        // held number, else one derived from its path. The mount's own
        // views are never renamed or linked: their number is always the
        // derived one (`ino_of`), so the table is not asked.
        let derived_only = matches!(node, Node::ViewDir { .. } | Node::ById);
        // `known`: a number the entry carries (a view link's).
        let mut add_numbered = |name: OsString, kind: Kind, known: Option<u64>| {
            let ino = match known {
                Some(known) => known,
                None if derived_only => child_ino(ino, &name),
                None => self.inodes.listed(ino, &name),
            };
            entries.push(DirEntry { ino, kind, name });
        };
        let mut add = |name: OsString, kind: Kind| add_numbered(name, kind, None);
        match node {
            Node::Root => {
                add(BY_ID_DIR.into(), Kind::Dir);
                for view in ViewKind::ALL {
                    add(view.dir_name().into(), Kind::Dir);
                }
                let mut names = self.store.list_projects()?;
                names.extend(self.virtual_children(&path, &names));
                for project in names {
                    add(project, Kind::Dir);
                }
            }
            Node::ViewDir { view, rel } => {
                let visible = |f: &ViewFacts| self.visible_to(caller, &f.project, &f.session);
                for (name, kind, link_ino) in self.view_list(view, &rel, &visible)? {
                    add_numbered(name.into(), kind, link_ino);
                }
            }
            Node::ById => {
                for (name, project, session) in self.store.by_id_entries()? {
                    if !self.visible_to(caller, &project, &session) {
                        continue;
                    }
                    let link = super::inode::by_id_link_ino(&project, &session);
                    add_numbered(name, Kind::Symlink, Some(link));
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
                    let kind = kind_of_entry(e.kind, &self.store.backing_path(&path.join(&e.name)));
                    add(e.name, kind);
                }
            }
            Node::Session { .. } => {
                let listed = match self.store.list_session_dir(&path, true) {
                    Err(StoreError::NotFound { .. }) if self.is_virtual(&path) => Vec::new(),
                    other => other?,
                };
                // Listed beside session.jsonl without validating the
                // transcript (a listing stays as cheap as before); it hides
                // a file of that name on disk, as lookup does.
                let rendered = listed.iter().any(|e| e.kind == EntryKind::Transcript);
                if rendered {
                    add(super::rendered::RENDERED_NAME.into(), Kind::File);
                }
                for e in listed {
                    if rendered && e.name == super::rendered::RENDERED_NAME {
                        continue;
                    }
                    let kind = kind_of_entry(e.kind, &self.store.backing_path(&path.join(&e.name)));
                    add(e.name, kind);
                }
            }
            Node::Passthrough { .. } => {
                for e in self.store.list_session_dir(&path, false)? {
                    let kind = kind_of_entry(e.kind, &self.store.backing_path(&path.join(&e.name)));
                    add(e.name, kind);
                }
            }
            Node::Transcript { .. }
            | Node::Rendered { .. }
            | Node::ConflictCopy { .. }
            | Node::ByIdLink { .. }
            | Node::ViewLink { .. } => return Err(FsError::NotDir),
        }
        Ok(entries)
    }

    /// The target of a symbolic link.
    ///
    /// Errors: EINVAL when the node is not a link.
    pub fn readlink(&self, ino: u64) -> FsResult<Vec<u8>> {
        match self.node(ino)?.1 {
            Node::ByIdLink { project, session } => Ok(by_id_target(&project, &session).into_vec()),
            Node::ViewLink { view, key } => self.view_target(view, key),
            Node::Passthrough { rel } => {
                let path = self.store.backing_path(&rel);
                let target =
                    std::fs::read_link(&path).map_err(|e| StoreError::io("readlink", &path, e))?;
                Ok(target.into_os_string().into_vec())
            }
            _ => Err(FsError::NotLink),
        }
    }

    /// Attributes of the mount root (the store root's).
    ///
    /// While the root cannot be stat'ed (a network client under it lost its
    /// server), its attributes as last read answer, logged: the mount then
    /// stays reachable (its status file answers, and a path walk through
    /// the root, which the kernel checks with a getattr, reaches it), and
    /// what needs the store fails with its own error.
    pub(super) fn root_attr(&self, ino: u64) -> FsResult<Attr> {
        match lstat(self.store.root()) {
            Ok(meta) => {
                let attr = attr_of(ino, &meta);
                *self.last_root.lock() = Some(attr);
                Ok(attr)
            }
            Err(e) => {
                let Some(last) = *self.last_root.lock() else {
                    return Err(e);
                };
                log::warn!("{e}; answering the root's attributes as last read");
                Ok(Attr { ino, ..last })
            }
        }
    }

    /// Attributes of the backing entry at `rel` (relative to the root).
    pub(super) fn backing_attr(&self, ino: u64, rel: &Path) -> FsResult<Attr> {
        Ok(attr_of(ino, &lstat(&self.store.backing_path(rel))?))
    }

    /// An ioctl on inode `ino`: none is served.
    ///
    /// Errors: ENOENT for an unknown inode, else ENOTTY.
    pub fn ioctl(&self, ino: u64) -> FsResult<()> {
        self.recorded_node(ino)?;
        Err(FsError::NoIoctl)
    }

    /// Extended attributes of inode `ino` (get or list): none are kept.
    ///
    /// Errors: ENOSYS (the kernel stops asking).
    pub fn xattrs(&self, _ino: u64) -> FsResult<()> {
        Err(FsError::NoXattrs)
    }

    /// Statistics of the backing file system.
    ///
    /// Errors: [`FsError::Store`] with the error of `statvfs` on the root.
    pub fn statfs(&self) -> FsResult<FsStats> {
        let root = self.store.root();
        let path = std::ffi::CString::new(root.as_os_str().as_bytes()).map_err(|_| {
            StoreError::io(
                "statvfs",
                root,
                std::io::Error::from_raw_os_error(libc::EINVAL),
            )
        })?;
        // SAFETY: statvfs writes into a zeroed struct we own; the path is a
        // valid NUL-terminated string.
        let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
        if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
            return Err(StoreError::io("statvfs", root, std::io::Error::last_os_error()).into());
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

/// Attributes of a directory of the daemon's own user, made at `made`: a
/// directory made by `mkdir` that exists only in the mount, and what the
/// status file takes its owner from while the root cannot be stat'ed.
pub(super) fn daemon_dir_attr(ino: u64, made: SystemTime) -> Attr {
    Attr {
        ino,
        kind: Kind::Dir,
        size: 0,
        blocks: 0,
        atime: made,
        mtime: made,
        ctime: made,
        perm: 0o700,
        nlink: 2,
        // SAFETY: geteuid/getegid cannot fail.
        uid: unsafe { libc::geteuid() },
        gid: unsafe { libc::getegid() },
        rdev: 0,
        blksize: 4096,
    }
}

/// A reading handle of transcript `t`, and whether it bypasses the page
/// cache: with known damage it does, so that the short read before the
/// damage is not taken for the end of the file by the kernel, and a read at
/// the damage fails.
fn reader_of(t: Arc<Transcript>) -> (Handle, bool) {
    let bypass = t.known_damage();
    (Handle::Transcript(t, !bypass), bypass)
}

/// Attributes of a `session.jsonl` created but not yet published: empty.
fn new_transcript_attr(ino: u64, made: SystemTime) -> Attr {
    Attr {
        kind: Kind::File,
        perm: 0o600,
        nlink: 1,
        ..daemon_dir_attr(ino, made)
    }
}

/// The project and session names of a session directory path.
pub(super) fn split_session_dir(dir: &Path) -> (&OsStr, &OsStr) {
    let mut parts = dir.iter();
    let project = parts.next().unwrap_or_default();
    let session = parts.next().unwrap_or_default();
    (project, session)
}

/// The readdir cookie of a name: `.` is 1, `..` is 2, any other name a
/// hash above them (the kernel resumes a listing after the last cookie it
/// got; 0 means the start).
fn cookie_of(name: &OsStr) -> u64 {
    match name.as_bytes() {
        b"." => 1,
        b".." => 2,
        bytes => crate::store::hash::of(bytes).max(3),
    }
}

/// Rounds of [`SessionFs::read_transcript`]'s pending-bytes read before
/// a short reply.
const PENDING_READ_TRIES: usize = 4;

/// Bytes `[offset, offset + size)` of the view out of `pending`, the
/// uncommitted tail that starts at view offset `committed`.
fn pending_slice(pending: Option<&[u8]>, committed: u64, offset: u64, size: u32) -> Vec<u8> {
    let Some(only) = pending else {
        return Vec::new();
    };
    let from = offset.saturating_sub(committed) as usize;
    if offset < committed || from >= only.len() {
        return Vec::new();
    }
    let to = (from + size as usize).min(only.len());
    only[from..to].to_vec()
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
