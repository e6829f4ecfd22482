//! What the views need of one session: its header facts and its title,
//! read once (issue 14).

use std::ffi::OsString;

use super::super::title::{self, TitleScan};
use super::super::transcript::Transcript;

/// The facts of one valid session that the `.by-*` views show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewFacts {
    /// The project directory name.
    pub project: OsString,
    /// The session directory name (the encoded id).
    pub session: OsString,
    /// The header's id.
    pub id: String,
    /// The header's `cwd`, as stored.
    pub cwd: Option<String>,
    /// The header's `createdAt`, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// The title ([`crate::store::title`]); empty when there is none.
    pub title: String,
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
