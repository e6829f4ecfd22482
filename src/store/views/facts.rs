//! What the views need of one session: its header facts and its title,
//! read once (issue 14).

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use super::super::title::{self, TitleScan};
use super::super::transcript::Transcript;

/// The facts of one valid session that the `.by-*` views show. Kept for
/// every session of the root, so held compactly: the project name and the
/// cwd are shared by the sessions of one project directory that have them
/// ([`Interner`]), the rest are boxed strings (about 250 bytes a session).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewFacts {
    /// The project directory name.
    pub project: Arc<OsStr>,
    /// The session directory name (the encoded id).
    pub session: Box<OsStr>,
    /// The header's id.
    pub id: Box<str>,
    /// The header's `cwd`, as stored.
    pub cwd: Option<Arc<str>>,
    /// The header's `createdAt`, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// The title ([`crate::store::title`]); empty when there is none.
    pub title: Box<str>,
}

impl ViewFacts {
    /// The session's [`crate::store::hash::session_key`].
    pub fn key(&self) -> u64 {
        crate::store::hash::session_key(self.project.as_bytes(), self.session.as_bytes())
    }
}

/// Shares project names and cwds between the [`ViewFacts`] of one
/// project directory.
#[derive(Debug, Default)]
pub struct Interner {
    project: Option<Arc<OsStr>>,
    cwds: HashSet<Arc<str>>,
}

impl Interner {
    /// `project`, shared with the earlier calls that gave the same name.
    pub fn project(&mut self, project: &OsStr) -> Arc<OsStr> {
        match &self.project {
            Some(p) if **p == *project => Arc::clone(p),
            _ => {
                let p: Arc<OsStr> = Arc::from(project);
                self.project = Some(Arc::clone(&p));
                p
            }
        }
    }

    /// `cwd`, shared with the earlier calls that gave the same one.
    pub fn cwd(&mut self, cwd: Option<&str>) -> Option<Arc<str>> {
        let cwd = cwd?;
        if let Some(c) = self.cwds.get(cwd) {
            return Some(Arc::clone(c));
        }
        let c: Arc<str> = Arc::from(cwd);
        self.cwds.insert(Arc::clone(&c));
        Some(c)
    }
}

/// The title of a transcript ([`crate::store::title::scan_title`] over
/// its whole view). Returns `(title, final)`: `final` is false when the
/// transcript holds no user message yet (the title may appear when it
/// grows) or a read failed (damage: tried again when the file changes).
pub fn scan_title(t: &Transcript) -> (String, bool) {
    match title::scan_title(t, 0, u64::MAX) {
        Ok(TitleScan::Found(title)) => (title, true),
        Ok(TitleScan::NotYet { .. }) => (String::new(), false),
        Err(e) => {
            log::debug!("title of {}: {e}", t.path().display());
            (String::new(), false)
        }
    }
}
