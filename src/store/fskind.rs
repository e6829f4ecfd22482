//! What file system a root lives on, what that kind gives the commit
//! protocol, and which protocol follows from it.
//!
//! Source: MOUNT.md ("Shared roots", "Creating a session"). Test
//! override: `SESSIONFS_FS_KIND=<name of a row>` forces the kind. Detection reads
//! only: `statfs(2)` of the root for the file system magic and, for FUSE
//! and the other kinds that share a magic, the type field of the line of
//! `/proc/self/mountinfo` whose mount point is the longest prefix of the
//! root. Nothing is written into the root.
//!
//! API for the mount's start-up: [`detect`] (one [`FsInfo`]), then
//! [`FsInfo::log_once`] and [`FsInfo::writability`] (`Err(reason)`: mount
//! read-only, print the reason). The store's commit path uses
//! [`protocol_for`] (cached per device).
//!
//! [`SUPPORT`] is the one table of what each kind gives; README.md
//! ("Shared roots") holds a copy.

use std::collections::HashMap;
use std::ffi::CString;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use super::publish::PublishMethod;

/// Whether a kind gives a property: yes, no, or not known for every
/// server and mode (the protocol then assumes the worse case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gives {
    /// Always, with the client options README.md gives.
    Yes,
    /// Never.
    No,
    /// Depends on the server, version or mount options.
    Depends,
}

/// The kinds of file system told apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FsKind {
    Ext4,
    Xfs,
    Btrfs,
    Tmpfs,
    Overlay,
    Nfs,
    Cifs,
    NineP,
    Sshfs,
    Rclone,
    Smbnetfs,
    /// FUSE with another (or no) subtype.
    OtherFuse,
    /// Anything else.
    Unknown,
}

/// What one kind gives (one row of the table).
#[derive(Debug, Clone, Copy)]
pub struct Support {
    pub kind: FsKind,
    /// Name shown in logs and in the README table.
    pub name: &'static str,
    /// Locks taken through one client are seen by other clients.
    pub shared_locks: Gives,
    /// `O_APPEND` writes land at the server's end of file.
    pub atomic_append: Gives,
    /// `O_CREAT|O_EXCL` has exactly one winner among clients.
    pub exclusive_create: Gives,
    /// `link(2)` works (and fails on an existing target).
    pub hard_links: Gives,
    /// `renameat2(RENAME_NOREPLACE)` works.
    pub noreplace_rename: Gives,
    /// `fsync(2)` reaches the server's storage.
    pub fsync_reaches_server: Gives,
    /// A frame written at an offset can be read back from the server.
    pub read_back: Gives,
    /// The client caches attributes (size, mtime) for a while.
    pub attribute_caching: Gives,
}

use Gives::{Depends as D, No as N, Yes as Y};

const fn row(kind: FsKind, name: &'static str, g: [Gives; 8]) -> Support {
    Support {
        kind,
        name,
        shared_locks: g[0],
        atomic_append: g[1],
        exclusive_create: g[2],
        hard_links: g[3],
        noreplace_rename: g[4],
        fsync_reaches_server: g[5],
        read_back: g[6],
        attribute_caching: g[7],
    }
}

/// The table. Columns: shared locks, atomic `O_APPEND`, exclusive create,
/// hard links, no-replace rename, fsync reaching the server, read-back,
/// attribute caching. The rclone and smbnetfs rows follow what the network
/// tests found (tests/shared_root_net.rs on the network branch): two
/// clients racing `O_CREAT|O_EXCL` on one new name both "won" in most
/// rounds, so neither gives an exclusive create between clients.
pub const SUPPORT: &[Support] = &[
    row(FsKind::Ext4, "ext4", [Y, Y, Y, Y, Y, Y, Y, N]),
    row(FsKind::Xfs, "xfs", [Y, Y, Y, Y, Y, Y, Y, N]),
    row(FsKind::Btrfs, "btrfs", [Y, Y, Y, Y, Y, Y, Y, N]),
    row(FsKind::Tmpfs, "tmpfs", [Y, Y, Y, Y, Y, Y, Y, N]),
    row(FsKind::Overlay, "overlay", [Y, Y, Y, Y, Y, Y, Y, N]),
    row(FsKind::Nfs, "nfs", [D, N, Y, Y, N, Y, Y, Y]),
    row(FsKind::Cifs, "cifs", [D, N, Y, D, N, Y, Y, Y]),
    row(FsKind::NineP, "9p", [D, N, D, D, N, D, Y, D]),
    row(FsKind::Sshfs, "fuse.sshfs", [N, N, Y, Y, N, Y, Y, Y]),
    row(FsKind::Rclone, "fuse.rclone", [N, N, N, N, N, D, N, Y]),
    row(FsKind::Smbnetfs, "fuse.smbnetfs", [N, N, N, N, N, D, Y, Y]),
    row(FsKind::OtherFuse, "fuse (other)", [D, D, D, D, D, D, D, D]),
    row(FsKind::Unknown, "unknown", [D, D, D, D, D, D, D, D]),
];

impl Gives {
    fn word(self) -> &'static str {
        match self {
            Gives::Yes => "yes",
            Gives::No => "no",
            Gives::Depends => "depends",
        }
    }
}

/// [`SUPPORT`] as the Markdown table README.md shows (a test keeps the
/// two equal).
pub fn support_table_markdown() -> String {
    let mut out = String::from(
        "| kind | locks shared between clients | atomic `O_APPEND` | exclusive create | \
         hard links | no-replace rename | fsync reaches the server | read-back | \
         attribute caching |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for s in SUPPORT {
        let cells = [
            s.shared_locks,
            s.atomic_append,
            s.exclusive_create,
            s.hard_links,
            s.noreplace_rename,
            s.fsync_reaches_server,
            s.read_back,
            s.attribute_caching,
        ];
        out.push_str(&format!("| {} |", s.name));
        for c in cells {
            out.push_str(&format!(" {} |", c.word()));
        }
        out.push('\n');
    }
    out
}

impl FsKind {
    /// This kind's row of [`SUPPORT`].
    pub fn support(self) -> &'static Support {
        SUPPORT
            .iter()
            .find(|s| s.kind == self)
            .unwrap_or(&SUPPORT[SUPPORT.len() - 1])
    }

    /// Whether the root is on this machine's own storage (the kernel here
    /// is the "server").
    pub fn is_local(self) -> bool {
        matches!(
            self,
            FsKind::Ext4 | FsKind::Xfs | FsKind::Btrfs | FsKind::Tmpfs | FsKind::Overlay
        )
    }
}

/// How commits reach the file: the lock file, positioned write, fsync and
/// read-back are the same everywhere; what differs is how much the client's
/// caches are distrusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitProtocol {
    /// Local storage: the page cache is the truth; plain reads.
    Local,
    /// A network (or unknown) client: lengths are learned with
    /// `statx(AT_STATX_FORCE_SYNC)` on a fresh descriptor, and the frame
    /// is read back through a fresh descriptor (`O_DIRECT` where the client
    /// accepts it), so that neither comes from the client's caches.
    Remote,
}

/// What [`detect`] found.
#[derive(Debug, Clone)]
pub struct FsInfo {
    /// The root examined.
    pub root: PathBuf,
    /// The kind.
    pub kind: FsKind,
    /// `statfs` `f_type`.
    pub magic: i64,
    /// The mount's type from mountinfo (`fuse.sshfs`, `nfs4`, ...), when
    /// found.
    pub fstype: Option<String>,
    /// The mount point containing the root, when found.
    pub mount_point: Option<PathBuf>,
}

impl fmt::Display for FsInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}, f_type {:#x}{})",
            self.kind.support().name,
            self.fstype
                .as_deref()
                .unwrap_or("type not found in mountinfo"),
            self.magic,
            self.mount_point
                .as_ref()
                .map(|m| format!(", mounted at {}", m.display()))
                .unwrap_or_default()
        )
    }
}

impl FsInfo {
    /// The commit protocol for this kind: [`CommitProtocol::Local`] for
    /// local kinds, [`CommitProtocol::Remote`] for everything else
    /// (unknown kinds included: the safe protocol).
    pub fn protocol(&self) -> CommitProtocol {
        if self.kind.is_local() {
            CommitProtocol::Local
        } else {
            CommitProtocol::Remote
        }
    }

    /// Whether writes may be allowed on this kind: `Err(reason)` when the
    /// kind cannot give exclusive create or read-back (the mount is then
    /// read-only, with the reason in the log and on the terminal).
    pub fn writability(&self) -> Result<(), String> {
        let s = self.kind.support();
        let mut missing = Vec::new();
        if s.exclusive_create == Gives::No {
            missing.push("an exclusive create with one winner between clients");
        }
        if s.read_back == Gives::No {
            missing.push("reading a written frame back from the server");
        }
        if missing.is_empty() {
            return Ok(());
        }
        Err(format!(
            "{} lives on {}, which cannot give {}: the lock file and the commit protocol \
             of shared roots need it, so the mount is read-only; reach the root through \
             sshfs, NFS or SMB (cifs) instead",
            self.root.display(),
            self,
            missing.join(" or ")
        ))
    }

    /// How new sessions are expected to be published here (MOUNT.md,
    /// "Creating a session"): a hard link where the kind gives them, else a
    /// no-replace rename where it gives that, else `None` (neither
    /// predicted: the first publication finds out, and fails with
    /// EOPNOTSUPP if neither works).
    pub fn predicted_publication(&self) -> Option<PublishMethod> {
        let s = self.kind.support();
        if s.hard_links != Gives::No {
            Some(PublishMethod::HardLink)
        } else if s.noreplace_rename != Gives::No {
            Some(PublishMethod::RenameNoReplace)
        } else {
            None
        }
    }

    /// Logs what the root lives on, at most once per root per process.
    pub fn log_once(&self) {
        static LOGGED: OnceLock<Mutex<Vec<PathBuf>>> = OnceLock::new();
        let logged = LOGGED.get_or_init(|| Mutex::new(Vec::new()));
        let mut logged = logged.lock().unwrap_or_else(|p| p.into_inner());
        if logged.contains(&self.root) {
            return;
        }
        logged.push(self.root.clone());
        let s = self.kind.support();
        log::info!(
            "{} lives on {}; commit protocol {:?}; publication predicted: {}; exclusive \
             create {:?}, hard links {:?}, no-replace rename {:?}, shared locks {:?}, \
             attribute caching {:?}",
            self.root.display(),
            self,
            self.protocol(),
            match self.predicted_publication() {
                Some(m) => format!("{m:?}"),
                None => "neither hard links nor no-replace rename".into(),
            },
            s.exclusive_create,
            s.hard_links,
            s.noreplace_rename,
            s.shared_locks,
            s.attribute_caching
        );
    }
}

// statfs f_type magics (linux/magic.h; fs/*).
const EXT4_MAGIC: i64 = 0xEF53;
const XFS_MAGIC: i64 = 0x5846_5342;
const BTRFS_MAGIC: i64 = 0x9123_683E;
const TMPFS_MAGIC: i64 = 0x0102_1994;
const OVERLAY_MAGIC: i64 = 0x794C_7630;
const NFS_MAGIC: i64 = 0x6969;
const CIFS_MAGIC: i64 = 0xFF53_4D42;
const SMB2_MAGIC: i64 = 0xFE53_4D42;
const V9FS_MAGIC: i64 = 0x0102_1997;
const FUSE_MAGIC: i64 = 0x6573_5546;

/// Identifies what `root` lives on. Never writes; never fails: a root
/// that cannot be examined is [`FsKind::Unknown`] (the safe protocol).
pub fn detect(root: &Path) -> FsInfo {
    let magic = statfs_magic(root).unwrap_or(0);
    let mount = mountinfo_entry(root);
    let fstype = mount.as_ref().map(|(_, t)| t.clone());
    let mut kind = classify(magic, fstype.as_deref());
    if let Some(forced) = forced_kind() {
        log::warn!(
            "{}: file system kind forced to {} by SESSIONFS_FS_KIND (tests only)",
            root.display(),
            forced.support().name
        );
        kind = forced;
    }
    let info = FsInfo {
        root: root.to_path_buf(),
        kind,
        magic,
        fstype,
        mount_point: mount.map(|(m, _)| m),
    };
    if let Ok(meta) = std::fs::metadata(root) {
        protocols()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(meta.dev(), info.protocol());
    }
    info
}

/// The kind named by `SESSIONFS_FS_KIND` (a name of [`SUPPORT`], e.g.
/// `fuse.rclone`), for tests of the read-only refusal.
fn forced_kind() -> Option<FsKind> {
    let name = std::env::var("SESSIONFS_FS_KIND").ok()?;
    SUPPORT.iter().find(|s| s.name == name).map(|s| s.kind)
}

/// The kind from the magic and the mountinfo type.
fn classify(magic: i64, fstype: Option<&str>) -> FsKind {
    match magic {
        EXT4_MAGIC => FsKind::Ext4,
        XFS_MAGIC => FsKind::Xfs,
        BTRFS_MAGIC => FsKind::Btrfs,
        TMPFS_MAGIC => FsKind::Tmpfs,
        OVERLAY_MAGIC => FsKind::Overlay,
        NFS_MAGIC => FsKind::Nfs,
        CIFS_MAGIC | SMB2_MAGIC => FsKind::Cifs,
        V9FS_MAGIC => FsKind::NineP,
        FUSE_MAGIC => {
            match fstype.and_then(|t| t.strip_prefix("fuse.").or(t.strip_prefix("fuseblk."))) {
                Some("sshfs") => FsKind::Sshfs,
                Some("rclone") => FsKind::Rclone,
                Some("smbnetfs") => FsKind::Smbnetfs,
                _ => FsKind::OtherFuse,
            }
        }
        _ => match fstype {
            Some("nfs" | "nfs4") => FsKind::Nfs,
            Some("cifs" | "smb3") => FsKind::Cifs,
            Some("9p") => FsKind::NineP,
            _ => FsKind::Unknown,
        },
    }
}

fn statfs_magic(path: &Path) -> Option<i64> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: a zeroed statfs is a valid value; `c` is a valid C string.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    let r = unsafe { libc::statfs(c.as_ptr(), &mut st) };
    (r == 0).then_some(st.f_type as i64)
}

/// The (mount point, type) of the mountinfo line whose mount point is the
/// longest path prefix of `root` (the last such line: later mounts cover
/// earlier ones).
fn mountinfo_entry(root: &Path) -> Option<(PathBuf, String)> {
    let table = super::mountinfo::read().ok()?;
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf());
    let mut best: Option<(PathBuf, String)> = None;
    for m in table {
        if !root.starts_with(&m.mount_point) {
            continue;
        }
        let better = best
            .as_ref()
            .is_none_or(|(b, _)| m.mount_point.as_os_str().len() >= b.as_os_str().len());
        if better {
            best = Some((m.mount_point, m.fs_type));
        }
    }
    best
}

/// Protocols already detected, by device (`st_dev`).
fn protocols() -> &'static Mutex<HashMap<u64, CommitProtocol>> {
    static CACHE: OnceLock<Mutex<HashMap<u64, CommitProtocol>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The commit protocol for the file system holding `path`, detected once
/// per device (st_dev) and cached for the life of the process (a
/// [`detect`] of a root fills the cache too); logs the kind once. A path
/// that cannot be examined gets [`CommitProtocol::Remote`].
pub fn protocol_for(path: &Path) -> CommitProtocol {
    let Ok(meta) = std::fs::metadata(path) else {
        return CommitProtocol::Remote;
    };
    let cached = protocols()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&meta.dev())
        .copied();
    if let Some(p) = cached {
        return p;
    }
    let info = detect(path);
    let protocol = info.protocol();
    log::debug!(
        "{} lives on {info}: commit protocol {protocol:?}",
        path.display()
    );
    protocol
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_magics_and_fuse_subtypes() {
        assert_eq!(classify(EXT4_MAGIC, Some("ext4")), FsKind::Ext4);
        assert_eq!(classify(FUSE_MAGIC, Some("fuse.sshfs")), FsKind::Sshfs);
        assert_eq!(classify(FUSE_MAGIC, Some("fuse.rclone")), FsKind::Rclone);
        assert_eq!(
            classify(FUSE_MAGIC, Some("fuse.smbnetfs")),
            FsKind::Smbnetfs
        );
        assert_eq!(
            classify(FUSE_MAGIC, Some("fuse.sessionfs")),
            FsKind::OtherFuse
        );
        assert_eq!(classify(NFS_MAGIC, Some("nfs4")), FsKind::Nfs);
        assert_eq!(classify(SMB2_MAGIC, Some("smb3")), FsKind::Cifs);
        assert_eq!(classify(0x1234, Some("nfs4")), FsKind::Nfs);
        assert_eq!(classify(0x1234, None), FsKind::Unknown);
    }

    #[test]
    fn protocol_and_writability_follow_the_table() {
        let info = |kind| FsInfo {
            root: PathBuf::from("/r"),
            kind,
            magic: 0,
            fstype: None,
            mount_point: None,
        };
        assert_eq!(info(FsKind::Ext4).protocol(), CommitProtocol::Local);
        assert_eq!(info(FsKind::Unknown).protocol(), CommitProtocol::Remote);
        assert_eq!(info(FsKind::Sshfs).protocol(), CommitProtocol::Remote);
        assert!(info(FsKind::Sshfs).writability().is_ok());
        assert!(info(FsKind::Unknown).writability().is_ok());
        let reason = info(FsKind::Rclone).writability().unwrap_err();
        assert!(reason.contains("exclusive create"), "{reason}");
        assert!(reason.contains("read-only"), "{reason}");
        assert_eq!(SUPPORT.len(), 13, "one row per kind");
        assert_eq!(
            info(FsKind::Sshfs).predicted_publication(),
            Some(PublishMethod::HardLink)
        );
        assert_eq!(info(FsKind::Smbnetfs).predicted_publication(), None);
        assert_eq!(
            info(FsKind::Unknown).predicted_publication(),
            Some(PublishMethod::HardLink)
        );
    }

    #[test]
    fn the_readme_holds_a_copy_of_the_table() {
        let readme = include_str!("../../README.md");
        let table = support_table_markdown();
        assert!(readme.contains(&table), "README.md must hold:\n{table}");
    }

    #[test]
    fn detects_this_machines_temp_dir_without_writing() {
        let dir = tempfile::tempdir().unwrap();
        let info = detect(dir.path());
        assert_ne!(info.magic, 0);
        assert!(info.mount_point.is_some(), "{info}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
