//! The `.by-cwd/`, `.by-date/` and `.by-title/` views in the mount (issue
//! 14; MOUNT.md, The tree): lookup, listing, attributes and link targets
//! of their nodes, answered from the store's view snapshot
//! ([`crate::store::views`]). Read-only: every change fails (see
//! `fs_write.rs`, whose match arms refuse view nodes).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::fs::{Attr, FsError, FsResult, Kind, SessionFs};
use super::inode::{view_link_ino, Node};
use crate::store::views::{ViewFacts, ViewKind};
use crate::store::StoreError;

/// Which sessions a caller may see in the views (the per-user filter).
pub(super) type Visible<'a> = &'a dyn Fn(&ViewFacts) -> bool;

/// `rel/name` inside a view.
fn join(rel: &str, name: &str) -> String {
    if rel.is_empty() {
        name.to_string()
    } else {
        format!("{rel}/{name}")
    }
}

impl SessionFs {
    /// The view directory named `name` at the mount root, if it is one.
    pub(super) fn view_root_node(name: &OsStr) -> Option<Node> {
        ViewKind::from_dir_name(name.as_bytes()).map(|view| Node::ViewDir {
            view,
            rel: String::new(),
        })
    }

    /// Looks `name` up in the view directory `rel` of `view`, as a caller
    /// who sees the sessions `visible` accepts (a directory holding none
    /// of them is not there).
    ///
    /// Errors: ENOENT when the directory holds no such entry (any more).
    pub(super) fn view_lookup(
        &self,
        view: ViewKind,
        rel: &str,
        name: &OsStr,
        visible: Visible,
    ) -> FsResult<Node> {
        let name = name.to_str().ok_or(FsError::NoEntry)?;
        let snap = self.views.snapshot(&self.store)?;
        let tree = snap.tree(view);
        let dir = tree.dir(rel).ok_or(FsError::NoEntry)?;
        let rel = join(rel, name);
        if dir.subdirs.contains(name) && tree.shows_any(&rel, &snap.sessions, visible) {
            Ok(Node::ViewDir { view, rel })
        } else if let Some(i) = snap.links(view, dir).get(name) {
            let s = &snap.sessions[i];
            if !visible(s) {
                return Err(FsError::NoEntry);
            }
            Ok(Node::ViewLink { view, key: s.key() })
        } else {
            Err(FsError::NoEntry)
        }
    }

    /// The entries of the view directory `rel` of `view` as (name, kind,
    /// inode number of a link: [`view_link_ino`]; `None` for a directory),
    /// as a caller who sees the sessions `visible` accepts.
    ///
    /// Errors: ENOENT when the directory is gone.
    pub(super) fn view_list(
        &self,
        view: ViewKind,
        rel: &str,
        visible: Visible,
    ) -> FsResult<Vec<(String, Kind, Option<u64>)>> {
        let snap = self.views.snapshot(&self.store)?;
        let tree = snap.tree(view);
        let dir = tree.dir(rel).ok_or(FsError::NoEntry)?;
        let mut out = Vec::with_capacity(dir.subdirs.len() + dir.members.len());
        for name in &dir.subdirs {
            if tree.shows_any(&join(rel, name), &snap.sessions, visible) {
                out.push((name.clone(), Kind::Dir, None));
            }
        }
        for (name, i) in snap.links(view, dir).iter() {
            let s = &snap.sessions[i];
            if visible(s) {
                let ino = view_link_ino(view, s.key());
                out.push((name.to_string(), Kind::Symlink, Some(ino)));
            }
        }
        Ok(out)
    }

    /// The target of the link of `view` to the session of key `key`: as
    /// many `../` as the link is deep, then `<project>/<session>`.
    ///
    /// Errors: ENOENT when the session is no longer shown.
    pub(super) fn view_target(&self, view: ViewKind, key: u64) -> FsResult<Vec<u8>> {
        let snap = self.views.snapshot(&self.store)?;
        let i = snap.session_by_key(key).ok_or(FsError::NoEntry)?;
        let s = &snap.sessions[i];
        let depth = snap.link_depth(view, i);
        let mut target = b"../".repeat(depth);
        target.extend_from_slice(s.project.as_bytes());
        target.push(b'/');
        target.extend_from_slice(s.session.as_bytes());
        Ok(target)
    }

    /// Attributes of a view node: a directory is read-only with the
    /// root's times; a link has its session directory's times.
    ///
    /// Errors: ENOENT when the node is gone; the store's stat errors.
    pub(super) fn view_attr(&self, ino: u64, node: &Node) -> FsResult<Attr> {
        match node {
            Node::ViewDir { view, rel } => {
                let mut a = self.root_attr(ino)?;
                a.perm = 0o555;
                a.nlink = 2;
                // The mount's own: no disk use.
                (a.size, a.blocks) = (0, 0);
                // A view's top always exists: `ls -l MNT` never builds the
                // views (so its link count does not count subdirectories).
                if !rel.is_empty() {
                    let snap = self.views.snapshot(&self.store)?;
                    let Some(dir) = snap.tree(*view).dir(rel) else {
                        return Err(FsError::NoEntry);
                    };
                    a.nlink = 2u32.saturating_add(dir.subdirs.len().try_into().unwrap_or(u32::MAX));
                    a.mtime = snap.built;
                    a.ctime = snap.built;
                }
                Ok(a)
            }
            Node::ViewLink { view, key } => {
                let target = self.view_target(*view, *key)?;
                let session_dir = Path::new(OsStr::from_bytes(&target))
                    .components()
                    .filter(|c| matches!(c, std::path::Component::Normal(_)))
                    .collect::<std::path::PathBuf>();
                // A link whose session went since the snapshot (at most
                // its age, 0.5 s) is a dangling link, as `ls -l` shows one,
                // with the root's times.
                let mut a = match self.backing_attr(ino, &session_dir) {
                    Ok(a) => a,
                    Err(FsError::Store(StoreError::NotFound { .. })) => self.root_attr(ino)?,
                    Err(e) => return Err(e),
                };
                a.kind = Kind::Symlink;
                a.perm = 0o777;
                a.nlink = 1;
                a.blocks = 0;
                a.size = target.len() as u64;
                Ok(a)
            }
            _ => Err(FsError::Invalid),
        }
    }
}
