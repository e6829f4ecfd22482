//! Inodes: the entries the kernel holds, with lookup counts (MOUNT.md,
//! Attributes). Passed-through entries are numbered by their backing
//! file's inode, so an inode follows its file through renames and hard
//! links share it; every other node by a hash of its mount path, stable
//! for the life of the mount.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// A node as the table stores it: nodes whose names are their mount path's
/// components keep only their kind (the names are rebuilt from the path),
/// so an entry holds one allocation, its path.
#[derive(Debug, Clone)]
enum Stored {
    Root,
    ById,
    /// Boxed: the other kinds keep the entry small.
    ByIdLink(Box<(OsString, OsString)>),
    Project,
    Session,
    Transcript,
    Rendered,
    /// A view's directory (`.by-cwd`, `.by-date`, `.by-title`) whose path
    /// inside the view is its mount path without the view's own name (as
    /// every view node looked up is): rebuilt from the path, like the
    /// others, so that the 60,000 view entries of 20,000 sessions cost no
    /// allocation of their own (issue 11).
    ViewDir(crate::store::views::ViewKind),
    /// A view's link, rebuilt from its path as [`Stored::ViewDir`].
    ViewLink(crate::store::views::ViewKind),
    /// A view node whose path inside the view is not so derived: boxed
    /// whole.
    View(Box<Node>),
    Passthrough,
}

/// The path inside its view of a view node at mount path `path`
/// (`.by-date/2025/x` gives `2025/x`), when UTF-8.
fn view_rel(path: &Path) -> Option<&str> {
    let mut parts = path.iter();
    parts.next()?;
    parts.as_path().to_str()
}

impl Stored {
    fn of(node: &Node, path: &Path) -> Stored {
        match node {
            Node::ViewDir { view, rel } if view_rel(path) == Some(rel.as_str()) => {
                Stored::ViewDir(*view)
            }
            Node::ViewLink { view, rel } if view_rel(path) == Some(rel.as_str()) => {
                Stored::ViewLink(*view)
            }
            Node::Root => Stored::Root,
            Node::ById => Stored::ById,
            Node::ByIdLink { project, session } => {
                Stored::ByIdLink(Box::new((project.clone(), session.clone())))
            }
            Node::Project { .. } => Stored::Project,
            Node::Session { .. } => Stored::Session,
            Node::Transcript { .. } => Stored::Transcript,
            Node::Rendered { .. } => Stored::Rendered,
            Node::ViewDir { .. } | Node::ViewLink { .. } => Stored::View(Box::new(node.clone())),
            Node::Passthrough { .. } => Stored::Passthrough,
        }
    }

    /// The node at mount path `path` (`project/session/...`).
    fn node(&self, path: &Path) -> Node {
        let mut parts = path.iter();
        let mut next = || parts.next().unwrap_or_default().to_os_string();
        match self {
            Stored::Root => Node::Root,
            Stored::ById => Node::ById,
            Stored::ByIdLink(link) => Node::ByIdLink {
                project: link.0.clone(),
                session: link.1.clone(),
            },
            Stored::Project => Node::Project { project: next() },
            Stored::Session => Node::Session {
                project: next(),
                session: next(),
            },
            Stored::Transcript => Node::Transcript {
                project: next(),
                session: next(),
            },
            Stored::Rendered => Node::Rendered {
                project: next(),
                session: next(),
            },
            Stored::ViewDir(view) => Node::ViewDir {
                view: *view,
                rel: view_rel(path).unwrap_or_default().to_string(),
            },
            Stored::ViewLink(view) => Node::ViewLink {
                view: *view,
                rel: view_rel(path).unwrap_or_default().to_string(),
            },
            Stored::View(node) => (**node).clone(),
            Stored::Passthrough => Node::Passthrough {
                rel: path.to_path_buf(),
            },
        }
    }
}

/// One inode the kernel may hold.
struct Entry {
    /// The mount path it answers at (the latest one looked up, for a file
    /// with several hard links); shared with the path index.
    path: Arc<Path>,
    node: Stored,
    /// Lookups the kernel has not forgotten (MOUNT.md, Attributes).
    lookups: u64,
    /// An `O_PATH` descriptor of the file once its last name is gone
    /// (unlinked while the kernel still held it), so that `fstat` of an
    /// open descriptor keeps working; closed when the inode is forgotten.
    detached: Option<std::sync::Arc<std::fs::File>>,
    /// The descriptor of a passed-through file's latest open through the
    /// mount while any handle holds it, so that `fstat` and `fchmod` of an
    /// open descriptor keep working after the file is removed on the
    /// backing side (the kernel's `fstat` names no handle).
    open: Option<std::sync::Weak<std::fs::File>>,
}

struct Tables {
    by_path: HashMap<Arc<Path>, u64>,
    by_ino: HashMap<u64, Entry>,
}

/// Bit set in inode numbers derived from a mount path (entries without a
/// backing identity of their own, or whose backing file is replaced over
/// time: projects, sessions, transcript views, `.by-id`); clear in numbers
/// derived from a passed-through entry's backing inode.
const PATH_DERIVED: u64 = 1 << 63;

/// The inode number of a mount path without a backing identity: a hash of
/// the path with [`PATH_DERIVED`] set (never [`ROOT_INO`]).
pub fn path_ino(path: &Path) -> u64 {
    derived_ino(path)
}

/// A hash of `key` with [`PATH_DERIVED`] set.
fn derived_ino(key: impl std::hash::Hash) -> u64 {
    use std::hash::Hasher;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish() | PATH_DERIVED
}

/// The inode number of a passed-through entry whose backing file has
/// inode number `backing_ino` on device `dev`, in a root on device
/// `root_dev`: on the root's device that number itself, so that a rename
/// keeps it and hard links share it (path-derived when it does not fit);
/// on another device (a file system mounted inside a session directory) a
/// hash of the device and the number with [`PATH_DERIVED`] set, so that
/// files of two file systems never share a number and an entry still
/// follows its file within its own file system.
pub fn backing_ino(path: &Path, dev: u64, backing_ino: u64, root_dev: u64) -> u64 {
    if dev != root_dev {
        return derived_ino((dev, backing_ino));
    }
    if backing_ino & PATH_DERIVED == 0 && backing_ino > ROOT_INO {
        backing_ino
    } else {
        path_ino(path)
    }
}

/// The mount's inode table: the inodes the kernel holds, each with its
/// mount path, node and lookup count. Numbers are derived, not allocated
/// ([`path_ino`], [`backing_ino`]), so a listing can name an entry's
/// number without holding it; an entry lives from its first lookup until
/// the kernel forgets it (`forget`, `batch_forget`). Renames move an entry
/// (and everything under it) to its new path; unlinks detach the path.
pub struct InodeTable {
    inner: RwLock<Tables>,
}

impl Default for InodeTable {
    fn default() -> Self {
        let mut by_path = HashMap::new();
        let mut by_ino = HashMap::new();
        let root: Arc<Path> = Arc::from(Path::new(""));
        by_path.insert(Arc::clone(&root), ROOT_INO);
        by_ino.insert(
            ROOT_INO,
            Entry {
                path: root,
                node: Stored::Root,
                lookups: 1,
                detached: None,
                open: None,
            },
        );
        InodeTable {
            inner: RwLock::new(Tables { by_path, by_ino }),
        }
    }
}

impl InodeTable {
    /// Records one lookup of the node at mount path `path` with inode
    /// number `ino` (from [`path_ino`] or [`backing_ino`]) and returns the
    /// number. A number already held for another path (a hard link, or a
    /// rename made outside the mount) now answers at `path`.
    pub fn looked_up(&self, path: PathBuf, node: Node, ino: u64) -> u64 {
        let mut t = self.inner.write();
        // One allocation of the path, shared by the index and the entry.
        let path: Arc<Path> = match t.by_path.get_key_value(path.as_path()) {
            Some((key, _)) => Arc::clone(key),
            None => Arc::from(path),
        };
        // A path that named another file (replaced outside the mount) now
        // names this one; the old inode keeps its number.
        t.by_path.insert(Arc::clone(&path), ino);
        let e = t.by_ino.entry(ino).or_insert(Entry {
            path: Arc::clone(&path),
            node: Stored::Root,
            lookups: 0,
            detached: None,
            open: None,
        });
        e.path = path;
        e.node = Stored::of(&node, &e.path);
        e.detached = None;
        e.lookups = e.lookups.saturating_add(1);
        ino
    }

    /// The inode number a listing shows for `path`: the held one, else
    /// `derived`. Nothing is recorded.
    pub fn listed(&self, path: &Path, derived: u64) -> u64 {
        self.inner
            .read()
            .by_path
            .get(path)
            .copied()
            .unwrap_or(derived)
    }

    /// The mount path and node of an inode number the kernel holds.
    pub fn node(&self, ino: u64) -> Option<(PathBuf, Node)> {
        self.inner
            .read()
            .by_ino
            .get(&ino)
            .map(|e| (e.path.to_path_buf(), e.node.node(&e.path)))
    }

    /// The kernel forgot `n` lookups of `ino`: the entry goes when none is
    /// left (the root stays).
    pub fn forget(&self, ino: u64, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let mut t = self.inner.write();
        let Some(e) = t.by_ino.get_mut(&ino) else {
            return;
        };
        e.lookups = e.lookups.saturating_sub(n);
        if e.lookups == 0 {
            let path = Arc::clone(&e.path);
            t.by_ino.remove(&ino);
            if t.by_path.get(&path) == Some(&ino) {
                t.by_path.remove(&path);
            }
        }
    }

    /// The entry at `path` (and, for a directory, every entry under it)
    /// moved to `to`, as `rename(2)` moved it; an entry that was at `to`
    /// is replaced and answers no path any more.
    pub fn rename(&self, from: &Path, to: &Path) {
        let mut t = self.inner.write();
        let moved: Vec<(Arc<Path>, u64)> = t
            .by_path
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, &i)| (Arc::clone(p), i))
            .collect();
        let replaced: Vec<Arc<Path>> = t
            .by_path
            .keys()
            .filter(|p| p.starts_with(to))
            .cloned()
            .collect();
        for p in replaced {
            t.by_path.remove(&p);
        }
        for (old, ino) in moved {
            t.by_path.remove(&old);
            let Ok(rest) = old.strip_prefix(from) else {
                continue;
            };
            let new: Arc<Path> = if rest.as_os_str().is_empty() {
                Arc::from(to)
            } else {
                Arc::from(to.join(rest))
            };
            if let Some(e) = t.by_ino.get_mut(&ino) {
                e.path = Arc::clone(&new);
            }
            t.by_path.insert(new, ino);
        }
    }

    /// The inode held at mount path `path`, if any.
    pub fn at(&self, path: &Path) -> Option<u64> {
        self.inner.read().by_path.get(path).copied()
    }

    /// `path` was removed (`unlink`, `rmdir`): it answers no inode any
    /// more. An inode with another name (a hard link) answers there; one
    /// with none keeps `detached` (an `O_PATH` descriptor opened before the
    /// removal) until it is forgotten.
    pub fn unlinked(&self, path: &Path, detached: Option<std::fs::File>) {
        let mut t = self.inner.write();
        let Some(ino) = t.by_path.remove(path) else {
            return;
        };
        let other = t
            .by_path
            .iter()
            .find(|(_, &i)| i == ino)
            .map(|(p, _)| Arc::clone(p));
        if let Some(e) = t.by_ino.get_mut(&ino) {
            if *e.path == *path {
                match other {
                    Some(p) => {
                        e.path = p;
                    }
                    None => e.detached = detached.map(std::sync::Arc::new),
                }
            }
        }
    }

    /// Records `file` as the open descriptor of inode `ino` (see
    /// `Entry::open`); nothing when the kernel does not hold `ino`.
    pub fn opened(&self, ino: u64, file: &std::sync::Arc<std::fs::File>) {
        if let Some(e) = self.inner.write().by_ino.get_mut(&ino) {
            e.open = Some(std::sync::Arc::downgrade(file));
        }
    }

    /// The open descriptor recorded by [`InodeTable::opened`], while a
    /// handle still holds it.
    pub fn open_file(&self, ino: u64) -> Option<std::sync::Arc<std::fs::File>> {
        self.inner
            .read()
            .by_ino
            .get(&ino)
            .and_then(|e| e.open.as_ref()?.upgrade())
    }

    /// The descriptor kept for an inode whose last name is gone.
    pub fn detached(&self, ino: u64) -> Option<std::sync::Arc<std::fs::File>> {
        self.inner
            .read()
            .by_ino
            .get(&ino)
            .and_then(|e| e.detached.clone())
    }

    /// How many inodes the table holds (the root included).
    pub fn count(&self) -> usize {
        self.inner.read().by_ino.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(p: &str) -> Node {
        Node::Passthrough { rel: p.into() }
    }

    #[test]
    fn entries_live_from_lookup_to_forget() {
        let t = InodeTable::default();
        let a = t.looked_up("p/s/a".into(), pass("p/s/a"), 100);
        t.looked_up("p/s/a".into(), pass("p/s/a"), 100);
        assert_eq!(t.count(), 2);
        t.forget(a, 1);
        assert!(t.node(a).is_some());
        t.forget(a, 1);
        assert!(t.node(a).is_none());
        assert_eq!(t.count(), 1);
        assert_eq!(t.listed(Path::new("p/s/a"), 7), 7);
    }

    #[test]
    fn a_rename_moves_the_inode_and_what_is_under_it() {
        let t = InodeTable::default();
        let d = t.looked_up("p/s/d".into(), pass("p/s/d"), 200);
        let f = t.looked_up("p/s/d/f".into(), pass("p/s/d/f"), 201);
        let old_e = t.looked_up("p/s/e".into(), pass("p/s/e"), 300);
        t.rename(Path::new("p/s/d"), Path::new("p/s/e"));
        assert_eq!(t.node(d).unwrap().0, Path::new("p/s/e"));
        assert_eq!(t.node(f).unwrap().1, pass("p/s/e/f"));
        assert_eq!(t.listed(Path::new("p/s/e"), 0), d);
        assert_eq!(t.listed(Path::new("p/s/d"), 0), 0);
        // The replaced entry stays until forgotten, at no path.
        assert!(t.node(old_e).is_some());
        t.unlinked(Path::new("p/s/e/f"), None);
        assert_eq!(t.listed(Path::new("p/s/e/f"), 0), 0);
    }

    #[test]
    fn view_nodes_are_rebuilt_from_their_path() {
        use crate::store::views::ViewKind;
        let t = InodeTable::default();
        let views = [ViewKind::Date, ViewKind::Cwd];
        for view in views {
            let dir = Node::ViewDir {
                view,
                rel: "2025/07".into(),
            };
            let link = Node::ViewLink {
                view,
                rel: "2025/07/a b".into(),
            };
            let top = Node::ViewDir {
                view,
                rel: String::new(),
            };
            let name = format!("v{view:?}");
            for (i, (rel, node)) in [("", &top), ("/2025/07", &dir), ("/2025/07/a b", &link)]
                .into_iter()
                .enumerate()
            {
                let path = PathBuf::from(format!("{name}{rel}"));
                let ino = t.looked_up(
                    path.clone(),
                    node.clone(),
                    500 + i as u64 + 10 * view as u64,
                );
                assert_eq!(t.node(ino), Some((path, node.clone())));
            }
        }
        // A node whose path inside the view is not its mount path's tail
        // is kept whole.
        let odd = Node::ViewLink {
            view: ViewKind::Date,
            rel: "elsewhere".into(),
        };
        let ino = t.looked_up("v/x".into(), odd.clone(), 900);
        assert_eq!(t.node(ino).unwrap().1, odd);
    }

    #[test]
    fn derived_numbers_never_collide_with_the_root_or_backing_numbers() {
        let p = path_ino(Path::new("x"));
        assert_ne!(p, ROOT_INO);
        assert_ne!(p & PATH_DERIVED, 0);
        assert_eq!(backing_ino(Path::new("x"), 7, 12345, 7), 12345);
        assert_eq!(backing_ino(Path::new("x"), 7, 1, 7), p);
        // Inode 2 of two other file systems: two numbers, neither the
        // root device's own inode 2.
        let (a, b) = (
            backing_ino(Path::new("a/f"), 40, 2, 7),
            backing_ino(Path::new("b/f"), 41, 2, 7),
        );
        assert_ne!(a, b);
        assert_ne!(a, 2);
        assert_eq!(
            a,
            backing_ino(Path::new("a/g"), 40, 2, 7),
            "follows its file"
        );
    }
}
