//! Inodes: the entries the kernel holds, with lookup counts (MOUNT.md,
//! Attributes). Passed-through entries are numbered by their backing
//! file's inode, so an inode follows its file through renames and hard
//! links share it; every other node by a hash of its parent's number and
//! its name, stable for the life of the mount.
//!
//! An entry holds its parent's number and its own name, as the kernel's
//! dentries do, not its whole path: a path is rebuilt by walking up to the
//! root, a rename moves one entry and everything under it follows, and
//! 140,000 held entries (every node of a 20,000-session root) cost about
//! 100 bytes each (issue 11, must show 3).

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

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
    /// A link of a view to the session of [`ViewFacts::key`] `key`
    /// (`crate::store::views::ViewFacts::key`). Its inode number holds
    /// both ([`view_link_ino`]), so the table keeps no entry for it.
    ViewLink {
        view: crate::store::views::ViewKind,
        key: u64,
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
    /// A sync tool's conflict copy of the transcript, shown read-only and
    /// decompressed as `name` (see `store::conflict`).
    ConflictCopy {
        project: OsString,
        session: OsString,
        name: OsString,
    },
    /// A session-owned entry, passed through (`rel` is relative to the root).
    Passthrough { rel: PathBuf },
}

/// A node as the table stores it: its kind only, two bytes. Nodes whose
/// names are their mount path's components are rebuilt from the path; the
/// rare node not derived from its path is kept whole in a side table.
/// Links of `.by-id` and the views are not stored at all (their numbers
/// hold them, [`view_link_ino`], [`by_id_link_ino`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stored {
    Root,
    ById,
    Project,
    Session,
    Transcript,
    Rendered,
    /// Rebuilt from its path: project, session, shown name.
    ConflictCopy,
    /// A view's directory (`.by-cwd`, `.by-date`, `.by-title`) whose path
    /// inside the view is its mount path without the view's own name (as
    /// every view node looked up is): rebuilt from the path, like the
    /// others, so that the 60,000 view entries of 20,000 sessions cost no
    /// allocation of their own (issue 11).
    ViewDir(crate::store::views::ViewKind),
    /// A node not so derived (a view node elsewhere than its path says, a
    /// link given a number of its own): kept whole in `Tables::odd`.
    View,
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
    /// The name every entry of this kind has, so that it is not stored.
    fn implied_name(&self) -> Option<&'static [u8]> {
        match self {
            Stored::Transcript => Some(crate::store::VIEW_NAME.as_bytes()),
            Stored::Rendered => Some(super::rendered::RENDERED_NAME.as_bytes()),
            _ => None,
        }
    }

    /// The kind of `node` at mount path `path`.
    fn of(node: &Node, path: &Path) -> Stored {
        match node {
            Node::ViewDir { view, rel } if view_rel(path) == Some(rel.as_str()) => {
                Stored::ViewDir(*view)
            }
            Node::Root => Stored::Root,
            Node::ById => Stored::ById,
            Node::Project { .. } => Stored::Project,
            Node::Session { .. } => Stored::Session,
            Node::Transcript { .. } => Stored::Transcript,
            Node::Rendered { .. } => Stored::Rendered,
            Node::ConflictCopy { .. } => Stored::ConflictCopy,
            Node::ViewDir { .. } | Node::ViewLink { .. } | Node::ByIdLink { .. } => Stored::View,
            Node::Passthrough { .. } => Stored::Passthrough,
        }
    }

    /// The node at mount path `path` (`project/session/...`); `odd` is its
    /// side-table node.
    fn node(&self, path: &Path, odd: Option<&Node>) -> Node {
        let mut parts = path.iter();
        let mut next = || parts.next().unwrap_or_default().to_os_string();
        match self {
            Stored::Root => Node::Root,
            Stored::ById => Node::ById,
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
            Stored::ConflictCopy => Node::ConflictCopy {
                project: next(),
                session: next(),
                name: next(),
            },
            Stored::ViewDir(view) => Node::ViewDir {
                view: *view,
                rel: view_rel(path).unwrap_or_default().to_string(),
            },
            Stored::View => odd.cloned().unwrap_or(Node::Root),
            Stored::Passthrough => Node::Passthrough {
                rel: path.to_path_buf(),
            },
        }
    }
}

/// Bit set in inode numbers derived from a parent and a name (entries
/// without a backing identity of their own, or whose backing file is
/// replaced over time: projects, sessions, transcript views, `.by-id`);
/// clear in numbers derived from a passed-through entry's backing inode.
const PATH_DERIVED: u64 = 1 << 63;

/// The inode number of entry `name` of directory `parent` when it has no
/// backing identity: a hash of both with [`PATH_DERIVED`] set (never
/// [`ROOT_INO`]).
pub fn child_ino(parent: u64, name: &OsStr) -> u64 {
    derived_ino(parent, name.as_bytes())
}

/// A hash of `(seed, bytes)` with [`PATH_DERIVED`] set and
/// [`VIEW_LINK`]'s second bit clear (never a view link's number).
fn derived_ino(seed: u64, bytes: &[u8]) -> u64 {
    (crate::store::hash::seeded(seed, bytes) & !(1 << 62)) | PATH_DERIVED
}

/// The two top bits set: a keyed link's number ([`view_link_ino`],
/// [`by_id_link_ino`]); no other number has both ([`derived_ino`] clears
/// the second, a backing number has neither).
const KEYED: u64 = 0b11 << 62;

/// Bits 60-61 of a keyed number that name a `.by-id` link (0-2 name a
/// view, [`crate::store::views::ViewKind::index`]).
const BY_ID_LINK: u64 = 3;

const KEY_BITS: u32 = crate::store::hash::SESSION_KEY_BITS;

/// A keyed number: [`KEYED`], `what` in bits 60-61, the session key
/// ([`crate::store::hash::session_key`], 60 bits) below.
fn keyed_ino(what: u64, key: u64) -> u64 {
    KEYED | (what << KEY_BITS) | (key & ((1 << KEY_BITS) - 1))
}

/// `(what, key)` of a keyed number ([`keyed_ino`]).
fn keyed_of(ino: u64) -> Option<(u64, u64)> {
    (ino & KEYED == KEYED).then_some(((ino >> KEY_BITS) & 0b11, ino & ((1 << KEY_BITS) - 1)))
}

/// The inode number of the link of `view` to the session of key `key`.
/// The same in every snapshot of the views, whatever the link's name or
/// directory, so the 60,000 links of 20,000 sessions are answered without
/// a table entry each (issue 11: the daemon's memory).
pub fn view_link_ino(view: crate::store::views::ViewKind, key: u64) -> u64 {
    keyed_ino(view.index() as u64, key)
}

/// The view link numbered `ino`, if it is one ([`view_link_ino`]).
pub fn view_link_of(ino: u64) -> Option<Node> {
    let (what, key) = keyed_of(ino)?;
    let view = crate::store::views::ViewKind::from_index(what as usize)?;
    Some(Node::ViewLink { view, key })
}

/// The inode number of the `.by-id` link to session directory `session`
/// of project directory `project`, held without a table entry like a view
/// link's; the store finds the session again by its key
/// ([`crate::store::hash::session_key`], `Store::session_dir_of_key`).
pub fn by_id_link_ino(project: &OsStr, session: &OsStr) -> u64 {
    let key = crate::store::hash::session_key(project.as_bytes(), session.as_bytes());
    keyed_ino(BY_ID_LINK, key)
}

/// The session key of the `.by-id` link numbered `ino`, if it is one
/// ([`by_id_link_ino`]).
pub fn by_id_key_of(ino: u64) -> Option<u64> {
    keyed_of(ino).and_then(|(what, key)| (what == BY_ID_LINK).then_some(key))
}

/// The inode number of a passed-through entry whose backing file has
/// inode number `backing_ino` on device `dev`, in a root on device
/// `root_dev`: on the root's device that number itself, so that a rename
/// keeps it and hard links share it (`derived`, the entry's
/// [`child_ino`], when it does not fit); on another device (a file system
/// mounted inside a session directory) a hash of the device and the
/// number with [`PATH_DERIVED`] set, so that files of two file systems
/// never share a number and an entry still follows its file within its
/// own file system.
pub fn backing_ino(derived: u64, dev: u64, backing_ino: u64, root_dev: u64) -> u64 {
    if dev != root_dev {
        return derived_ino(dev, &backing_ino.to_le_bytes());
    }
    if backing_ino & PATH_DERIVED == 0 && backing_ino > ROOT_INO {
        backing_ino
    } else {
        derived
    }
}

/// Deepest chain of parents walked to rebuild a path: more components
/// than any path the kernel can name (`PATH_MAX` is 4096 bytes), so a
/// longer chain can only be a cycle, answered as no entry.
const MAX_DEPTH: usize = 4096;

/// One inode the kernel may hold: its parent's number and its name (the
/// latest looked up, for a file with several hard links).
struct Entry {
    parent: u64,
    /// Empty when the kind implies it ([`Stored::implied_name`]).
    name: Box<[u8]>,
    node: Stored,
    /// Lookups the kernel has not forgotten (MOUNT.md, Attributes).
    lookups: u64,
    /// Entries whose parent this is: an entry stays while any is held, so
    /// that their paths can be rebuilt (the kernel forgets a directory
    /// only after its children, but nothing here relies on that).
    children: u32,
    /// Removed (`unlink`, `rmdir`, replaced by a rename) while the kernel
    /// held it: it answers no name any more, and its path is where it was.
    gone: bool,
    /// Several names answer this number (hard links): `named` may hold
    /// more keys of it than its current name.
    linked: bool,
}

impl Entry {
    /// Its name: implied by its kind, else what `name` holds.
    fn name(&self) -> &[u8] {
        self.node.implied_name().unwrap_or(&self.name)
    }
}

/// What an entry's `name` field holds for name `name` of a node of kind
/// `node`: nothing when the kind implies the name.
fn stored_name(node: Stored, name: &[u8]) -> Box<[u8]> {
    if node.implied_name() == Some(name) {
        return Box::default();
    }
    Box::from(name)
}

#[derive(Default)]
struct Tables {
    /// Every held entry by number. A B-tree: it grows a node at a time,
    /// where a hash table would hold its old and new arrays at once.
    entries: BTreeMap<u64, Entry>,
    /// `(parent, name)` of held entries whose number is not that pair's
    /// [`child_ino`] (passed-through entries numbered by their backing
    /// file, moved ones), and every extra name of a hard-linked one.
    named: HashMap<(u64, Box<[u8]>), u64>,
    /// `O_PATH` descriptors of entries whose last name went while the
    /// kernel held them, so that `fstat` of an open descriptor keeps
    /// working; closed when the inode is forgotten.
    detached: HashMap<u64, Arc<std::fs::File>>,
    /// The descriptor of a passed-through file's latest open through the
    /// mount while any handle holds it, so that `fstat` and `fchmod` of an
    /// open descriptor keep working after the file is removed on the
    /// backing side (the kernel's `fstat` names no handle).
    open: HashMap<u64, Weak<std::fs::File>>,
    /// View nodes kept whole ([`Stored::View`]).
    odd: HashMap<u64, Node>,
}

impl Tables {
    /// The number held at `name` in `parent`, if any.
    fn at(&self, parent: u64, name: &[u8]) -> Option<u64> {
        if let Some(&ino) = self.named.get(&(parent, Box::from(name))) {
            return Some(ino);
        }
        let ino = child_ino(parent, OsStr::from_bytes(name));
        let e = self.entries.get(&ino)?;
        (!e.gone && e.parent == parent && e.name() == name).then_some(ino)
    }

    /// The mount path of `ino`, rebuilt from its parents.
    fn path(&self, ino: u64) -> Option<PathBuf> {
        let mut names: Vec<&[u8]> = Vec::new();
        let mut at = ino;
        while at != ROOT_INO {
            let e = self.entries.get(&at)?;
            names.push(e.name());
            if names.len() > MAX_DEPTH {
                return None;
            }
            at = e.parent;
        }
        let mut path = PathBuf::new();
        for name in names.iter().rev() {
            path.push(OsStr::from_bytes(name));
        }
        Some(path)
    }

    /// Whether `ino` is `dir` or under it.
    fn is_under(&self, mut ino: u64, dir: u64) -> bool {
        for _ in 0..=MAX_DEPTH {
            if ino == dir {
                return true;
            }
            match self.entries.get(&ino) {
                Some(e) if ino != ROOT_INO => ino = e.parent,
                _ => return false,
            }
        }
        true
    }

    /// Gives entry `ino` the name `name` in `parent` (its children
    /// counted there), unless that would make it its own ancestor.
    fn place(&mut self, ino: u64, parent: u64, name: &[u8]) {
        if ino == ROOT_INO || self.is_under(parent, ino) {
            return;
        }
        let Some(e) = self.entries.get_mut(&ino) else {
            return;
        };
        let old_parent = std::mem::replace(&mut e.parent, parent);
        e.name = stored_name(e.node, name);
        if old_parent != parent {
            if let Some(p) = self.entries.get_mut(&parent) {
                p.children += 1;
            }
            self.unchild(old_parent);
        }
    }

    /// One child of `parent` fewer; entries left with no lookup and no
    /// child go, up the chain.
    fn unchild(&mut self, parent: u64) {
        let Some(p) = self.entries.get_mut(&parent) else {
            return;
        };
        p.children = p.children.saturating_sub(1);
        if p.children == 0 && p.lookups == 0 {
            self.remove(parent);
        }
    }

    /// Removes entry `ino` (no lookup, no child left) and whatever it
    /// alone kept.
    fn remove(&mut self, mut ino: u64) {
        loop {
            if ino == ROOT_INO {
                return;
            }
            let Some(e) = self.entries.remove(&ino) else {
                return;
            };
            let key = (e.parent, Box::from(e.name()));
            if self.named.get(&key) == Some(&ino) {
                self.named.remove(&key);
            }
            if e.linked {
                self.named.retain(|_, &mut i| i != ino);
            }
            self.detached.remove(&ino);
            self.open.remove(&ino);
            self.odd.remove(&ino);
            let Some(p) = self.entries.get_mut(&e.parent) else {
                return;
            };
            p.children = p.children.saturating_sub(1);
            if p.children != 0 || p.lookups != 0 {
                return;
            }
            ino = e.parent;
        }
    }

    /// Name `name` of `parent` stops naming `ino` (removed, or replaced by
    /// a rename): an inode with another name (a hard link) answers there;
    /// one with none is gone, its path kept where it was, and keeps
    /// `detached` if given.
    fn drop_name(&mut self, ino: u64, parent: u64, name: &[u8], detached: Option<std::fs::File>) {
        let key = (parent, Box::<[u8]>::from(name));
        if self.named.get(&key) == Some(&ino) {
            self.named.remove(&key);
        }
        let Some(e) = self.entries.get(&ino) else {
            return;
        };
        if e.parent != parent || e.name() != name {
            return; // it answers at its other, current name
        }
        match self.other_names(ino).into_iter().next() {
            Some((p, n)) => self.place(ino, p, &n),
            None => {
                if let Some(e) = self.entries.get_mut(&ino) {
                    e.gone = true;
                }
                if let Some(f) = detached {
                    self.detached.insert(ino, Arc::new(f));
                }
            }
        }
    }

    /// The names `named` holds for `ino` besides its current one (hard
    /// links), as `(parent, name)`.
    fn other_names(&self, ino: u64) -> Vec<(u64, Box<[u8]>)> {
        let Some(e) = self.entries.get(&ino).filter(|e| e.linked) else {
            return Vec::new();
        };
        let current = (e.parent, Box::<[u8]>::from(e.name()));
        self.named
            .iter()
            .filter(|(k, &i)| i == ino && **k != current)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

/// The mount's inode table: the inodes the kernel holds, each with its
/// parent, name, node and lookup count. Numbers are derived, not
/// allocated ([`child_ino`], [`backing_ino`]), so a listing can name an
/// entry's number without holding it; an entry lives from its first
/// lookup until the kernel forgets it (`forget`, `batch_forget`) and
/// nothing under it is held. A rename moves an entry, and everything
/// under it follows; an unlink detaches its name.
pub struct InodeTable {
    inner: RwLock<Tables>,
}

impl Default for InodeTable {
    fn default() -> Self {
        let mut t = Tables::default();
        t.entries.insert(
            ROOT_INO,
            Entry {
                parent: ROOT_INO,
                name: Box::default(),
                node: Stored::Root,
                lookups: 1,
                children: 0,
                gone: false,
                linked: false,
            },
        );
        InodeTable {
            inner: RwLock::new(t),
        }
    }
}

impl InodeTable {
    /// Records one lookup of `node`, entry `path`'s last component of
    /// directory `parent` (a held inode; `path` is its mount path), with
    /// inode number `ino` (from [`child_ino`] or [`backing_ino`]), and
    /// returns the number. A number already held under another name (a
    /// hard link, or a rename made outside the mount) now answers at this
    /// one too.
    pub fn looked_up(&self, parent: u64, path: &Path, node: &Node, ino: u64) -> u64 {
        if keyed_of(ino).is_some() {
            return ino; // its number holds the node: nothing to keep
        }
        let name = path.file_name().unwrap_or_default().as_bytes();
        let stored = Stored::of(node, path);
        let mut t = self.inner.write();
        if stored == Stored::View {
            t.odd.insert(ino, node.clone());
        }
        let key = (parent, Box::<[u8]>::from(name));
        // A name that numbered another file (replaced outside the mount)
        // now numbers this one; the old inode keeps its number.
        if ino == child_ino(parent, OsStr::from_bytes(name)) {
            t.named.remove(&key);
        } else {
            t.named.insert(key.clone(), ino);
        }
        match t.entries.get_mut(&ino) {
            Some(e) => {
                e.lookups = e.lookups.saturating_add(1);
                let renamed = e.parent != parent || e.name() != name;
                let restore = e.node != stored;
                e.node = stored;
                if renamed && !e.gone {
                    e.linked = true;
                }
                e.gone = false;
                if renamed {
                    t.place(ino, parent, name);
                } else if restore {
                    e.name = stored_name(stored, name);
                }
                t.detached.remove(&ino);
            }
            None => {
                let name = stored_name(stored, name);
                t.entries.insert(
                    ino,
                    Entry {
                        parent,
                        name,
                        node: stored,
                        lookups: 1,
                        children: 0,
                        gone: false,
                        linked: false,
                    },
                );
                if let Some(p) = t.entries.get_mut(&parent) {
                    p.children += 1;
                }
            }
        }
        ino
    }

    /// The inode number a listing of directory `parent` shows for entry
    /// `name`: the held one, else its [`child_ino`]. Nothing is recorded.
    pub fn listed(&self, parent: u64, name: &OsStr) -> u64 {
        let t = self.inner.read();
        t.named
            .get(&(parent, Box::from(name.as_bytes())))
            .copied()
            .unwrap_or_else(|| child_ino(parent, name))
    }

    /// The mount path and node of an inode number the kernel holds.
    /// A view link's node comes from its number; its path is its view's
    /// directory (a link has no path of its own here). A `.by-id` link's
    /// number is not answered here: its session is the store's to find
    /// ([`by_id_key_of`]).
    pub fn node(&self, ino: u64) -> Option<(PathBuf, Node)> {
        if let Some(node @ Node::ViewLink { view, .. }) = view_link_of(ino) {
            return Some((PathBuf::from(view.dir_name()), node));
        }
        let t = self.inner.read();
        let path = t.path(ino)?;
        let e = t.entries.get(&ino)?;
        let node = e.node.node(&path, t.odd.get(&ino));
        Some((path, node))
    }

    /// The inode number of `ino`'s parent directory (the root's is the
    /// root), if the kernel holds `ino` in the table.
    pub fn parent_of(&self, ino: u64) -> Option<u64> {
        self.inner.read().entries.get(&ino).map(|e| e.parent)
    }

    /// The number [`child_ino`] gives inode `ino` at its current name.
    pub fn derived(&self, ino: u64) -> Option<u64> {
        let t = self.inner.read();
        let e = t.entries.get(&ino)?;
        Some(child_ino(e.parent, OsStr::from_bytes(e.name())))
    }

    /// The kernel forgot `n` lookups of `ino`: the entry goes when none is
    /// left and nothing under it is held (the root stays).
    pub fn forget(&self, ino: u64, n: u64) {
        if ino == ROOT_INO {
            return;
        }
        let mut t = self.inner.write();
        let Some(e) = t.entries.get_mut(&ino) else {
            return;
        };
        e.lookups = e.lookups.saturating_sub(n);
        if e.lookups == 0 && e.children == 0 {
            t.remove(ino);
        }
    }

    /// Entry `name` of `parent` moved to `new_name` of `new_parent`, as
    /// `rename(2)` moved it (what is under it follows); an entry that was
    /// there is replaced and answers no name any more.
    pub fn rename(&self, parent: u64, name: &OsStr, new_parent: u64, new_name: &OsStr) {
        let mut t = self.inner.write();
        let (name, new_name) = (name.as_bytes(), new_name.as_bytes());
        let Some(ino) = t.at(parent, name) else {
            return;
        };
        let replaced = t.at(new_parent, new_name);
        if replaced == Some(ino) {
            return; // two names of one file: rename(2) does nothing
        }
        if let Some(old) = replaced {
            t.drop_name(old, new_parent, new_name, None);
        }
        t.named.remove(&(parent, Box::from(name)));
        if ino != child_ino(new_parent, OsStr::from_bytes(new_name)) {
            t.named.insert((new_parent, Box::from(new_name)), ino);
        }
        t.place(ino, new_parent, new_name);
    }

    /// The inode held at entry `name` of `parent`, if any.
    pub fn at(&self, parent: u64, name: &OsStr) -> Option<u64> {
        self.inner.read().at(parent, name.as_bytes())
    }

    /// Entry `name` of `parent` was removed (`unlink`, `rmdir`): it answers
    /// no inode any more. An inode with another name (a hard link) answers
    /// there; one with none keeps `detached` (an `O_PATH` descriptor opened
    /// before the removal) until it is forgotten.
    pub fn unlinked(&self, parent: u64, name: &OsStr, detached: Option<std::fs::File>) {
        let mut t = self.inner.write();
        let name = name.as_bytes();
        let Some(ino) = t.at(parent, name) else {
            return;
        };
        t.drop_name(ino, parent, name, detached);
    }

    /// `ino`'s other names (hard links) than its current one, while their
    /// directories are held: `(directory, name, mount path)`.
    pub fn other_names(&self, ino: u64) -> Vec<(u64, OsString, PathBuf)> {
        let t = self.inner.read();
        t.other_names(ino)
            .into_iter()
            .filter_map(|(p, n)| {
                let name = OsStr::from_bytes(&n);
                Some((p, name.to_os_string(), t.path(p)?.join(name)))
            })
            .collect()
    }

    /// Entry `ino` answers at `name` of `parent` from now on (one of its
    /// other names, found to name its file when its current one did not).
    pub fn answer_at(&self, ino: u64, parent: u64, name: &OsStr) {
        self.inner.write().place(ino, parent, name.as_bytes());
    }

    /// Records `file` as the open descriptor of inode `ino` (see
    /// `Tables::open`); nothing when the kernel does not hold `ino`.
    pub fn opened(&self, ino: u64, file: &Arc<std::fs::File>) {
        let mut t = self.inner.write();
        if t.entries.contains_key(&ino) {
            t.open.insert(ino, Arc::downgrade(file));
        }
    }

    /// The open descriptor recorded by [`InodeTable::opened`], while a
    /// handle still holds it.
    pub fn open_file(&self, ino: u64) -> Option<Arc<std::fs::File>> {
        self.inner.read().open.get(&ino)?.upgrade()
    }

    /// The descriptor kept for an inode whose last name is gone.
    pub fn detached(&self, ino: u64) -> Option<Arc<std::fs::File>> {
        self.inner.read().detached.get(&ino).cloned()
    }

    /// How many inodes the table holds (the root included).
    pub fn count(&self) -> usize {
        self.inner.read().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(p: &str) -> Node {
        Node::Passthrough { rel: p.into() }
    }

    /// Looks up the chain `p/s/...` of pass-through directories and
    /// returns the last number (numbers from `base` up).
    fn dirs(t: &InodeTable, path: &str, base: u64) -> u64 {
        let mut parent = ROOT_INO;
        let mut at = PathBuf::new();
        for (i, part) in path.split('/').enumerate() {
            at.push(part);
            parent = t.looked_up(parent, &at, &pass(at.to_str().unwrap()), base + i as u64);
        }
        parent
    }

    #[test]
    fn entries_live_from_lookup_to_forget() {
        let t = InodeTable::default();
        let s = dirs(&t, "p/s", 10);
        let a = t.looked_up(s, Path::new("p/s/a"), &pass("p/s/a"), 100);
        t.looked_up(s, Path::new("p/s/a"), &pass("p/s/a"), 100);
        assert_eq!(t.count(), 4);
        t.forget(a, 1);
        assert!(t.node(a).is_some());
        t.forget(a, 1);
        assert!(t.node(a).is_none());
        assert_eq!(t.count(), 3);
        assert_eq!(t.listed(s, OsStr::new("a")), child_ino(s, OsStr::new("a")));
        assert_eq!(t.at(s, OsStr::new("a")), None);
    }

    #[test]
    fn a_directory_stays_while_an_entry_under_it_is_held() {
        let t = InodeTable::default();
        let s = dirs(&t, "p/s", 10);
        let f = t.looked_up(s, Path::new("p/s/f"), &pass("p/s/f"), 100);
        // The kernel forgets the directories first (nothing relies on
        // the order): the file's path still rebuilds.
        t.forget(s, 1);
        t.forget(10, 1);
        assert_eq!(t.node(f).unwrap().0, Path::new("p/s/f"));
        // Once the file goes, the chain above it goes too.
        t.forget(f, 1);
        assert_eq!(t.count(), 1);
    }

    #[test]
    fn a_rename_moves_the_inode_and_what_is_under_it() {
        let t = InodeTable::default();
        let s = dirs(&t, "p/s", 10);
        let d = t.looked_up(s, Path::new("p/s/d"), &pass("p/s/d"), 200);
        let f = t.looked_up(d, Path::new("p/s/d/f"), &pass("p/s/d/f"), 201);
        let old_e = t.looked_up(s, Path::new("p/s/e"), &pass("p/s/e"), 300);
        t.rename(s, OsStr::new("d"), s, OsStr::new("e"));
        assert_eq!(t.node(d).unwrap().0, Path::new("p/s/e"));
        assert_eq!(t.node(f).unwrap().1, pass("p/s/e/f"));
        assert_eq!(t.listed(s, OsStr::new("e")), d);
        assert_eq!(t.at(s, OsStr::new("e")), Some(d));
        assert_eq!(t.at(s, OsStr::new("d")), None);
        // The replaced entry stays until forgotten, at no name.
        assert!(t.node(old_e).is_some());
        assert_ne!(t.listed(s, OsStr::new("e")), old_e);
        t.unlinked(d, OsStr::new("f"), None);
        assert_eq!(t.at(d, OsStr::new("f")), None);
        assert!(t.node(f).is_some(), "held until forgotten");
    }

    #[test]
    fn a_hard_link_answers_at_its_other_name_after_an_unlink() {
        let t = InodeTable::default();
        let s = dirs(&t, "p/s", 10);
        t.looked_up(s, Path::new("p/s/a"), &pass("p/s/a"), 500);
        t.looked_up(s, Path::new("p/s/b"), &pass("p/s/b"), 500);
        assert_eq!(t.at(s, OsStr::new("a")), Some(500));
        assert_eq!(t.at(s, OsStr::new("b")), Some(500));
        t.unlinked(s, OsStr::new("b"), None);
        assert_eq!(t.node(500).unwrap().0, Path::new("p/s/a"));
        assert_eq!(t.at(s, OsStr::new("b")), None);
        t.forget(500, 2);
        assert_eq!(t.at(s, OsStr::new("a")), None, "no name outlives its inode");
        assert_eq!(t.count(), 3);
    }

    #[test]
    fn no_entry_becomes_its_own_ancestor() {
        let t = InodeTable::default();
        let a = dirs(&t, "a/b", 10);
        // `a` (10) looked up inside `a/b` (11), as stale numbers could
        // ask: the table keeps `a` where it was.
        t.looked_up(a, Path::new("a/b/a"), &pass("a/b/a"), 10);
        assert_eq!(t.node(10).unwrap().0, Path::new("a"));
        assert_eq!(t.node(a).unwrap().0, Path::new("a/b"));
    }

    #[test]
    fn implied_names_are_not_stored_but_rebuilt() {
        let t = InodeTable::default();
        let project = OsString::from("--p--");
        let session = OsString::from("s1");
        let p = t.looked_up(
            ROOT_INO,
            Path::new("--p--"),
            &Node::Project {
                project: project.clone(),
            },
            child_ino(ROOT_INO, &project),
        );
        let s = t.looked_up(
            p,
            Path::new("--p--/s1"),
            &Node::Session {
                project: project.clone(),
                session: session.clone(),
            },
            child_ino(p, &session),
        );
        let node = Node::Transcript { project, session };
        let name = OsStr::new(crate::store::VIEW_NAME);
        let v = t.looked_up(
            s,
            &Path::new("--p--/s1").join(name),
            &node,
            child_ino(s, name),
        );
        assert_eq!(
            t.node(v),
            Some((Path::new("--p--/s1").join(name), node.clone()))
        );
        assert_eq!(t.at(s, name), Some(v));
        assert_eq!(t.listed(s, name), v);
    }

    #[test]
    fn a_by_id_link_given_a_number_of_its_own_is_kept_whole() {
        let t = InodeTable::default();
        let by_id = t.looked_up(ROOT_INO, Path::new(".by-id"), &Node::ById, 40);
        for (name, session) in [("s1", "s1"), ("short", "s~2Dlong")] {
            let node = Node::ByIdLink {
                project: "--home-a--".into(),
                session: session.into(),
            };
            let path = Path::new(".by-id").join(name);
            let ino = t.looked_up(by_id, &path, &node, child_ino(by_id, OsStr::new(name)));
            assert_eq!(t.node(ino), Some((path, node)));
            assert_eq!(t.at(by_id, OsStr::new(name)), Some(ino));
        }
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
            let top = Node::ViewDir {
                view,
                rel: String::new(),
            };
            let mid = Node::ViewDir {
                view,
                rel: "2025".into(),
            };
            let name = format!("v{view:?}");
            let mut parent = ROOT_INO;
            for (i, (rel, node)) in [("", &top), ("/2025", &mid), ("/2025/07", &dir)]
                .into_iter()
                .enumerate()
            {
                let path = PathBuf::from(format!("{name}{rel}"));
                let ino = t.looked_up(parent, &path, node, 500 + i as u64 + 10 * view as u64);
                assert_eq!(t.node(ino), Some((path, node.clone())));
                parent = ino;
            }
        }
        // A node whose path inside the view is not its mount path's tail
        // is kept whole.
        let odd = Node::ViewDir {
            view: ViewKind::Date,
            rel: "elsewhere".into(),
        };
        let v = t.looked_up(ROOT_INO, Path::new("v"), &odd, 899);
        let ino = t.looked_up(v, Path::new("v/x"), &odd, 900);
        assert_eq!(t.node(ino).unwrap().1, odd);
    }

    #[test]
    fn a_view_link_is_answered_from_its_number_and_never_held() {
        use crate::store::views::ViewKind;
        let t = InodeTable::default();
        let before = t.count();
        let mut seen = std::collections::HashSet::new();
        for view in ViewKind::ALL {
            for key in [0, 1, (1 << 60) - 1, 0x0123_4567_89ab_cdef] {
                let ino = view_link_ino(view, key);
                let node = Node::ViewLink {
                    view,
                    key: key & ((1 << 60) - 1),
                };
                assert!(seen.insert(ino), "{view:?} {key:x}: one number each");
                assert_eq!(t.looked_up(ROOT_INO, Path::new("x"), &node, ino), ino);
                assert_eq!(
                    t.node(ino),
                    Some((PathBuf::from(view.dir_name()), node.clone()))
                );
                t.forget(ino, 1);
            }
        }
        assert_eq!(t.count(), before, "no entry was made");
        // No other number reads as a view link.
        for name in ["a", "b", ".by-date", "session.jsonl"] {
            assert_eq!(view_link_of(child_ino(ROOT_INO, OsStr::new(name))), None);
        }
        assert_eq!(view_link_of(backing_ino(3 << 62, 9, 5, 7)), None);
        assert_eq!(view_link_of(ROOT_INO), None);
    }

    #[test]
    fn derived_numbers_never_collide_with_the_root_or_backing_numbers() {
        let p = child_ino(ROOT_INO, OsStr::new("x"));
        assert_ne!(p, ROOT_INO);
        assert_ne!(p & PATH_DERIVED, 0);
        assert_ne!(p, child_ino(p, OsStr::new("x")), "the parent counts");
        assert_eq!(backing_ino(p, 7, 12345, 7), 12345);
        assert_eq!(backing_ino(p, 7, 1, 7), p);
        // Inode 2 of two other file systems: two numbers, neither the
        // root device's own inode 2.
        let (a, b) = (backing_ino(p, 40, 2, 7), backing_ino(p, 41, 2, 7));
        assert_ne!(a, b);
        assert_ne!(a, 2);
        assert_eq!(a, backing_ino(p ^ 1, 40, 2, 7), "follows its file");
    }
}
