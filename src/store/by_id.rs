//! Finding a session directory by id from anywhere: the mount's `.by-id/`
//! (MOUNT.md, The tree; IDENTITY.md §2).

use std::ffi::{OsStr, OsString};
use std::fs;

use super::error::{Result, StoreError};
use super::naming::decode_id;
use super::{Encoding, Store};
use crate::identity::{resolve_id, IdLookupError};

impl Store {
    /// Every session directory that holds a transcript, as
    /// `(name, project, session)`; `name` is the encoded id. A duplicate id
    /// is listed once (its lookup fails with the duplicate error).
    ///
    /// Errors: [`StoreError::Io`] when the root cannot be listed; project
    /// directories that cannot be read are skipped.
    pub fn by_id_entries(&self) -> Result<Vec<(OsString, OsString, OsString)>> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for (project, session) in self.session_dirs()? {
            if seen.insert(session.clone()) {
                out.push((session.clone(), project, session));
            }
        }
        Ok(out)
    }

    /// Every `(project, session)` directory pair whose directory holds a
    /// transcript of either encoding.
    pub fn session_dirs(&self) -> Result<Vec<(OsString, OsString)>> {
        let mut out = Vec::new();
        for project in self.list_projects()? {
            let Ok(entries) = fs::read_dir(self.root().join(&project)) else {
                continue;
            };
            for entry in entries.flatten() {
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let dir = entry.path();
                let has_transcript = [Encoding::Zstd, Encoding::Raw]
                    .iter()
                    .any(|e| fs::symlink_metadata(dir.join(e.file_name())).is_ok());
                if has_transcript {
                    out.push((project.clone(), entry.file_name()));
                }
            }
        }
        Ok(out)
    }

    /// The session directory named by `name` (an encoded id, or any
    /// string): the exact id first, then the body rule of IDENTITY.md §2
    /// (`cse_X` finds `session_X`).
    ///
    /// Errors: [`StoreError::NotFound`]; [`StoreError::AmbiguousId`] when
    /// several sessions match by body or one id is in several projects.
    pub fn find_session_dir_by_id(&self, name: &OsStr) -> Result<(OsString, OsString)> {
        let text = name.to_string_lossy();
        let wanted = decode_id(&text).unwrap_or_else(|_| text.to_string());
        let candidates = self.session_dirs()?.into_iter().map(|(project, session)| {
            let lossy = session.to_string_lossy();
            let id = decode_id(&lossy).unwrap_or_else(|_| lossy.to_string());
            (id, (project, session))
        });
        resolve_id(&wanted, candidates).map_err(|e| match e {
            IdLookupError::NotFound { .. } => StoreError::NotFound {
                path: self.root().join(".by-id").join(name),
            },
            other => StoreError::AmbiguousId {
                wanted,
                reason: other.to_string(),
            },
        })
    }
}
