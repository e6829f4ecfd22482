//! Inode numbers: one per mount path, stable for the life of the mount
//! (MOUNT.md, Attributes). Numbers are never reused, so a kernel that still
//! holds an old number never reaches another entry.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;

use parking_lot::RwLock;

/// Inode number of the mount's root directory (FUSE_ROOT_ID).
pub const ROOT_INO: u64 = 1;

/// Name of the by-id directory at the mount root (MOUNT.md, The tree).
pub const BY_ID_DIR: &str = ".by-id";

/// What a mount path is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    /// The mount root.
    Root,
    /// `.by-id/`.
    ById,
    /// `.by-id/<name>`: a symbolic link to a session directory.
    ByIdLink {
        project: OsString,
        session: OsString,
    },
    /// A directory of a `.by-cwd`, `.by-date` or `.by-title` view (`rel`:
    /// its path inside the view, `""` for the view's top).
    ViewDir {
        view: crate::store::views::ViewKind,
        rel: String,
    },
    /// A link of a view (`rel`: its path inside the view).
    ViewLink {
        view: crate::store::views::ViewKind,
        rel: String,
    },
    /// A project directory.
    Project { project: OsString },
    /// A session directory.
    Session {
        project: OsString,
        session: OsString,
    },
    /// `session.jsonl`: the decompressed view of a transcript.
    Transcript {
        project: OsString,
        session: OsString,
    },
    /// `session.md`: the rendered transcript (issue 16, `rendered.rs`).
    Rendered {
        project: OsString,
        session: OsString,
    },
    /// A session-owned entry, passed through (`rel` is relative to the root).
    Passthrough { rel: PathBuf },
}

struct Tables {
    by_path: HashMap<PathBuf, u64>,
    by_ino: HashMap<u64, (PathBuf, Node)>,
    next: u64,
}

/// The mount's inode table: mount path ↔ inode number ↔ node.
pub struct InodeTable {
    inner: RwLock<Tables>,
}

impl Default for InodeTable {
    fn default() -> Self {
        let mut by_path = HashMap::new();
        let mut by_ino = HashMap::new();
        by_path.insert(PathBuf::new(), ROOT_INO);
        by_ino.insert(ROOT_INO, (PathBuf::new(), Node::Root));
        InodeTable {
            inner: RwLock::new(Tables {
                by_path,
                by_ino,
                next: ROOT_INO + 1,
            }),
        }
    }
}

impl InodeTable {
    /// The inode number of the node at `path` (its mount path), allocated
    /// on first use.
    pub fn ino_for(&self, path: PathBuf, node: Node) -> u64 {
        if let Some(&ino) = self.inner.read().by_path.get(&path) {
            return ino;
        }
        let mut t = self.inner.write();
        if let Some(&ino) = t.by_path.get(&path) {
            return ino;
        }
        let ino = t.next;
        t.next += 1;
        t.by_path.insert(path.clone(), ino);
        t.by_ino.insert(ino, (path, node));
        ino
    }

    /// The mount path and node of an inode number, if the mount gave it out.
    pub fn node(&self, ino: u64) -> Option<(PathBuf, Node)> {
        self.inner.read().by_ino.get(&ino).cloned()
    }
}
