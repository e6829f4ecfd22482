//! `MOUNTPOINT/.sessionfs-status`: a read-only JSON file for operators
//! (root, options in effect, pending bytes, cache use, request counters).
//! It is hidden like the other dot-entries (not listed by readdir, found
//! by lookup) and rendered afresh at each open.
//!
//! To show more, add a field to [`Status`], fill it in
//! [`StatusFile::snapshot`] and write it in [`Status::to_json`].

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use super::fs::{Attr, FsError, FsResult, Kind, SessionFs};
use super::inode::ROOT_INO;

/// Name of the status file at the mount root.
pub const STATUS_NAME: &str = ".sessionfs-status";

/// Inode number of the status file: far above the numbers the inode table
/// hands out (it counts up from 2), so never shared with a store entry.
pub const STATUS_INO: u64 = u64::MAX - 1;

/// File handles of the status file carry this bit; the core's handles
/// count up from 1 and never reach it.
const STATUS_FH_BIT: u64 = 1 << 63;

/// Request counters of this process's mount (one mount per daemon).
static REQUESTS: RequestCounters = RequestCounters::new();

/// How many requests the mount answered, and how many with an error.
struct RequestCounters {
    total: AtomicU64,
    errors: AtomicU64,
    by_op: Mutex<BTreeMap<&'static str, u64>>,
}

impl RequestCounters {
    const fn new() -> Self {
        RequestCounters {
            total: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            by_op: parking_lot::const_mutex(BTreeMap::new()),
        }
    }
}

/// Counts one answered request of operation `op` (`lookup`, `read`, …);
/// `failed` when it was answered with an errno.
pub fn count_request(op: &'static str, failed: bool) {
    REQUESTS.total.fetch_add(1, Ordering::Relaxed);
    if failed {
        REQUESTS.errors.fetch_add(1, Ordering::Relaxed);
    }
    *REQUESTS.by_op.lock().entry(op).or_insert(0) += 1;
}

/// Requests answered since the daemon started.
pub fn requests_answered() -> u64 {
    REQUESTS.total.load(Ordering::Relaxed)
}

/// Decoded-frame cache use, in bytes.
#[derive(Debug, Clone, Default)]
pub struct CacheUse {
    /// Bytes of decoded frames held.
    pub bytes: u64,
    /// The cap (`cache_size`).
    pub cap_bytes: u64,
}

/// Requests answered since the mount started.
#[derive(Debug, Clone, Default)]
pub struct RequestCounts {
    /// Every request answered.
    pub total: u64,
    /// Those answered with an errno.
    pub errors: u64,
    /// Per operation name.
    pub by_op: BTreeMap<String, u64>,
}

/// What the status file shows at one moment.
#[derive(Debug, Clone)]
pub struct Status {
    /// The daemon's process id.
    pub pid: u32,
    /// The store root (its resolved path).
    pub root: PathBuf,
    /// The mount point.
    pub mountpoint: PathBuf,
    /// When the mount started serving.
    pub started: SystemTime,
    /// Every option in effect, by its `-o` name (`attr_timeout`,
    /// `batch_ms`, `ro`, …), with its value.
    pub options: Map<String, Value>,
    /// Bytes written through the mount and not yet committed.
    pub pending_bytes: u64,
    /// Open writers.
    pub writers: usize,
    /// Decoded-frame cache use.
    pub cache: CacheUse,
    /// Request counters.
    pub requests: RequestCounts,
    /// Frames decoded by the mount's transcripts since it started.
    pub frames_decoded: u64,
    /// Sessions the views' catalog read (validated and scanned for a
    /// title) since the mount started.
    pub view_sessions_read: u64,
    /// Views built again by a whole walk after a rewrite was found.
    pub transcripts_rewalked: u64,
    /// Rewrite verdicts of a network client's attributes that the bytes
    /// showed stale (the view kept).
    pub stale_lengths_kept: u64,
    /// Whether the views' snapshot is built.
    pub views_ready: bool,
    /// Milliseconds since the views' catalog was last swept (`None`: not
    /// yet), and the sweeps so far.
    pub views_swept: (Option<u128>, u64),
    /// Inodes the mount holds for the kernel (the root included): they
    /// are released when the kernel forgets them.
    pub inodes: usize,
    /// Rough bytes of the root's catalog (project and session names).
    pub catalog_bytes: usize,
    /// What the root lives on, as logged at start-up (kind, mount type,
    /// `f_type`, mount point; `src/store/fskind.rs`).
    pub root_fs: String,
    /// The commit protocol chosen for it: `local` or `remote` (MOUNT.md,
    /// Shared roots).
    pub commit_protocol: String,
    /// Lock files (`.sessionfs.lock`) this daemon holds now: one per
    /// append being committed.
    pub locks_held: usize,
}

impl Status {
    /// The JSON object written to the file (keys in this order).
    pub fn to_json(&self) -> Value {
        let started = self
            .started
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        json!({
            "pid": self.pid,
            "root": self.root.to_string_lossy(),
            "mountpoint": self.mountpoint.to_string_lossy(),
            "started_unix": started,
            "options": self.options,
            "pending_bytes": self.pending_bytes,
            "writers": self.writers,
            "cache": {
                "bytes": self.cache.bytes,
                "cap_bytes": self.cache.cap_bytes,
            },
            "requests": {
                "total": self.requests.total,
                "errors": self.requests.errors,
                "by_op": self.requests.by_op,
            },
            "frames_decoded": self.frames_decoded,
            "transcripts_rewalked": self.transcripts_rewalked,
            "stale_lengths_kept": self.stale_lengths_kept,
            "views": {
                "sessions_read": self.view_sessions_read,
                "ready": self.views_ready,
                "swept_ms_ago": self.views_swept.0,
                "sweeps": self.views_swept.1,
            },
            "inodes": self.inodes,
            "catalog_bytes": self.catalog_bytes,
            "root_fs": self.root_fs,
            "commit_protocol": self.commit_protocol,
            "locks_held": self.locks_held,
        })
    }
}

/// The fixed part of the status: what the mount was started with.
#[derive(Debug, Clone)]
pub struct StatusInfo {
    /// The store root.
    pub root: PathBuf,
    /// The mount point.
    pub mountpoint: PathBuf,
    /// Options in effect (see [`Status::options`]).
    pub options: Map<String, Value>,
    /// Cap of the decoded-frame cache, in bytes.
    pub cache_cap_bytes: u64,
    /// See [`Status::root_fs`].
    pub root_fs: String,
    /// See [`Status::commit_protocol`].
    pub commit_protocol: String,
}

/// The status file of one mount: renders [`Status`] and serves its
/// lookup, getattr, open, read and release.
pub struct StatusFile {
    info: StatusInfo,
    core: Arc<SessionFs>,
    started: SystemTime,
    next_fh: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Vec<u8>>>>,
}

impl StatusFile {
    /// The status file of the mount served by `core`.
    pub fn new(info: StatusInfo, core: Arc<SessionFs>) -> Self {
        StatusFile {
            info,
            core,
            started: SystemTime::now(),
            next_fh: AtomicU64::new(0),
            open: Mutex::new(HashMap::new()),
        }
    }

    /// The status now.
    pub fn snapshot(&self) -> Status {
        let writers = self.core.writers();
        let by_op = REQUESTS
            .by_op
            .lock()
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        Status {
            pid: std::process::id(),
            root: self.info.root.clone(),
            mountpoint: self.info.mountpoint.clone(),
            started: self.started,
            options: self.info.options.clone(),
            pending_bytes: writers.iter().map(|w| w.pending_bytes().len() as u64).sum(),
            writers: writers.len(),
            cache: CacheUse {
                bytes: self.core.store().frame_cache().bytes(),
                cap_bytes: self.info.cache_cap_bytes,
            },
            requests: RequestCounts {
                total: REQUESTS.total.load(Ordering::Relaxed),
                errors: REQUESTS.errors.load(Ordering::Relaxed),
                by_op,
            },
            frames_decoded: crate::store::transcript::frames_decoded_total(),
            view_sessions_read: crate::store::views::catalog::sessions_read(),
            transcripts_rewalked: crate::store::transcript::views_rewalked_total(),
            stale_lengths_kept: crate::store::confirm::stale_verdicts_total(),
            views_ready: self.core.views_ready(),
            views_swept: {
                let (ago, sweeps) = self.core.views_swept();
                (ago.map(|d| d.as_millis()), sweeps)
            },
            inodes: self.core.inode_count(),
            catalog_bytes: self.core.store().discovery().approx_bytes(),
            root_fs: self.info.root_fs.clone(),
            commit_protocol: self.info.commit_protocol.clone(),
            locks_held: crate::store::lease::locks_held(),
        }
    }

    fn render(&self) -> Vec<u8> {
        let mut text = serde_json::to_vec_pretty(&self.snapshot().to_json()).unwrap_or_default();
        text.push(b'\n');
        text
    }

    /// The status file's attributes: owner and device of the mount root,
    /// else (the store fails: a network client under it lost its server)
    /// the daemon's own user, so that the status file still answers and
    /// says what fails.
    fn attr(&self, size: u64) -> FsResult<Attr> {
        let root = self
            .core
            .getattr(ROOT_INO)
            .unwrap_or_else(|_| super::fs::daemon_dir_attr(ROOT_INO, self.started));
        Ok(Attr {
            ino: STATUS_INO,
            kind: Kind::File,
            size,
            blocks: 0,
            atime: SystemTime::now(),
            mtime: SystemTime::now(),
            ctime: self.started,
            perm: 0o444,
            nlink: 1,
            ..root
        })
    }

    /// Lookup of `name` in `parent`: `Some` for the status file.
    pub fn lookup(&self, parent: u64, name: &OsStr) -> Option<FsResult<Attr>> {
        (parent == ROOT_INO && name == STATUS_NAME).then(|| self.getattr_now())
    }

    fn getattr_now(&self) -> FsResult<Attr> {
        self.attr(self.render().len() as u64)
    }

    /// Getattr of `ino`: `Some` for the status file (its size is that of
    /// a fresh rendering).
    pub fn getattr(&self, ino: u64) -> Option<FsResult<Attr>> {
        (ino == STATUS_INO).then(|| self.getattr_now())
    }

    /// Open of `ino` with `open(2)` flags: `Some` for the status file, with
    /// a handle on a snapshot taken now. Writing fails with EROFS.
    pub fn open(&self, ino: u64, flags: i32) -> Option<FsResult<u64>> {
        if ino != STATUS_INO {
            return None;
        }
        if flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0 {
            return Some(Err(FsError::ReadOnlyStatus));
        }
        let fh = STATUS_FH_BIT | self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.open.lock().insert(fh, Arc::new(self.render()));
        Some(Ok(fh))
    }

    /// Read through handle `fh`: `Some` for a status file handle.
    pub fn read(&self, fh: u64, offset: u64, size: u32) -> Option<FsResult<Vec<u8>>> {
        if fh & STATUS_FH_BIT == 0 {
            return None;
        }
        let text = self.open.lock().get(&fh).cloned();
        Some(match text {
            None => Err(FsError::BadHandle),
            Some(text) => {
                let from = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(text.len());
                let to = from.saturating_add(size as usize).min(text.len());
                Ok(text[from..to].to_vec())
            }
        })
    }

    /// Release of `fh`: true when it was a status file handle.
    pub fn release(&self, fh: u64) -> bool {
        fh & STATUS_FH_BIT != 0 && self.open.lock().remove(&fh).is_some()
    }
}
