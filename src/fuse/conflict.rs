//! Sync tools' conflict copies in a session directory (MOUNT.md, The tree;
//! `store::conflict`): which node a name of a session directory is.

use std::ffi::OsStr;

use super::error::{FsError, FsResult};
use super::fs::SessionFs;
use super::inode::Node;
use crate::store::conflict;

impl SessionFs {
    /// The node of `name` in session directory `project/session` when it
    /// is a conflict copy's: the copy shown under that name, or `NoEntry`
    /// for a copy's own `.zstd` name when it is shown without the suffix
    /// (one name per file, as `session.jsonl.zstd` is hidden behind
    /// `session.jsonl`). `None` for every other name (a conflict-copy name
    /// that is not a regular file is passed through).
    ///
    /// Errors: ENOENT as above.
    pub(super) fn conflict_node(
        &self,
        project: &OsStr,
        session: &OsStr,
        name: &OsStr,
    ) -> FsResult<Option<Node>> {
        if conflict::encoding_of(name).is_none() {
            return Ok(None);
        }
        let dir = self.store().root().join(project).join(session);
        if conflict::backing_name(&dir, name).is_some() {
            return Ok(Some(Node::ConflictCopy {
                project: project.to_os_string(),
                session: session.to_os_string(),
                name: name.to_os_string(),
            }));
        }
        match std::fs::symlink_metadata(dir.join(name)) {
            Ok(meta) if meta.is_file() => Err(FsError::NoEntry),
            _ => Ok(None),
        }
    }
}
