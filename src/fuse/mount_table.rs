//! The process's view of the mount table (`/proc/self/mountinfo`, read
//! by `store::mountinfo`): which mount sits at a path, and whether a mount that
//! sessionfs made is still there. A mount is known by its mount id, so a
//! daemon never mistakes a newer mount at the same path for its own
//! (MOUNT.md, Mount options).

use std::path::{Path, PathBuf};

use crate::store::mountinfo::{self, MountLine};

/// File system type of a sessionfs mount as mountinfo shows it.
pub const FS_TYPE: &str = "fuse.sessionfs";

/// Prefix of a sessionfs mount's source (`sessionfs:<ROOT>`).
pub const SOURCE_PREFIX: &str = "sessionfs:";

/// One mount, as much of it as sessionfs needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountEntry {
    /// Mount id (mountinfo field 1): unique among live mounts, so a newer
    /// mount at the same path has another one.
    pub id: i32,
    /// `major:minor` of the mount's device (for FUSE, its connection).
    pub dev: String,
    /// Where it is mounted (unescaped).
    pub mount_point: PathBuf,
    /// File system type (`fuse.sessionfs`, `fuse`, `ext4`, …).
    pub fs_type: String,
    /// The mount's source (`sessionfs:/srv/sessions`).
    pub source: Option<String>,
    /// The mount point is read-only (per-mount flag, `mount -o remount,ro`).
    pub mount_read_only: bool,
    /// The file system itself was mounted read-only (super block flag).
    pub super_read_only: bool,
    /// The mount point's own options (`ro`, `nosuid`, `noexec`, …).
    pub mount_options: Vec<String>,
}

impl MountEntry {
    fn from_line(m: MountLine) -> Self {
        MountEntry {
            id: m.id,
            dev: m.majmin,
            mount_point: m.mount_point,
            fs_type: m.fs_type,
            source: m.source,
            mount_read_only: m.mount_options.iter().any(|o| o == "ro"),
            super_read_only: m.super_options.iter().any(|o| o == "ro"),
            mount_options: m.mount_options,
        }
    }

    /// Whether sessionfs made this mount (by type, or by source for a
    /// mount whose subtype the kernel did not record).
    pub fn is_sessionfs(&self) -> bool {
        self.fs_type == FS_TYPE
            || (self.fs_type.starts_with("fuse")
                && self
                    .source
                    .as_deref()
                    .is_some_and(|s| s.starts_with(SOURCE_PREFIX)))
    }

    /// The store root named in the source (`sessionfs:<ROOT>`), if any.
    pub fn root(&self) -> Option<&str> {
        self.source.as_deref()?.strip_prefix(SOURCE_PREFIX)
    }
}

/// Every mount of this process's mount namespace, in mountinfo order
/// (a mount stacked on another comes after it).
///
/// Errors: a message naming /proc/self/mountinfo when it cannot be read.
pub fn entries() -> Result<Vec<MountEntry>, String> {
    let lines = mountinfo::read().map_err(|e| format!("cannot read /proc/self/mountinfo: {e}"))?;
    Ok(lines.into_iter().map(MountEntry::from_line).collect())
}

/// The mount visible at `path` (the last one mounted there), if any.
/// `path` must be absolute and resolved, as mountinfo spells it.
pub fn top_at(path: &Path) -> Option<MountEntry> {
    entries()
        .ok()?
        .into_iter()
        .rev()
        .find(|m| m.mount_point == path)
}

/// The deepest FUSE mount whose mount point is `path` (absolute, `.` and
/// `..` folded) or a directory above it, from the table alone (nothing is
/// looked up, so nothing waits on a daemon that does not answer). `None`
/// when no FUSE mount is on the way as spelled (a symbolic link may still
/// lead into one).
pub fn fuse_mount_above(path: &Path) -> Option<PathBuf> {
    entries()
        .ok()?
        .into_iter()
        .filter(|m| m.fs_type.starts_with("fuse") && path.starts_with(&m.mount_point))
        .map(|m| m.mount_point)
        .max_by_key(|p| p.components().count())
}

/// The mount with id `id`, while it is mounted.
pub fn by_id(id: i32) -> Option<MountEntry> {
    entries().ok()?.into_iter().find(|m| m.id == id)
}

/// Whether the mount with id `id` is still mounted. An unreadable table
/// counts as still mounted, so that nothing acts on a guess.
pub fn is_mounted(id: i32) -> bool {
    match entries() {
        Ok(all) => all.iter().any(|m| m.id == id),
        Err(_) => true,
    }
}
