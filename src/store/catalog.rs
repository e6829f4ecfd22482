//! Session discovery for the command line: every session of a root, the
//! sessions of one project path, and one session found by id from anywhere.
//!
//! Source: IDENTITY.md (§2 ids compared by body, §3 NFC and NFD spellings
//! of a path), FORMAT.md (Layout, Identity rules) and MOUNT.md ("one bad
//! session never takes down a listing"). Every session is validated through
//! [`Store::transcript`], so placement, duplicate and encoding rules are the
//! mount's own.

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use super::by_id::holds_transcript;
use super::discovery::ProjectListing;
use super::error::{Result, StoreError};
use super::naming;
use super::transcript::Transcript;
use super::Store;
use crate::identity::{nfc, nfd, IdLookupError};

/// What the command line shows of one valid session.
#[derive(Debug, Clone)]
pub struct SessionSummary {
    /// The session id: the decoded session directory name (equal to the
    /// header's id, which validation checks).
    pub id: String,
    /// The project directory name (`--<key>--` or `_no-cwd`).
    pub project_dir: OsString,
    /// The session directory name (the encoded id).
    pub session_dir: OsString,
    /// The header's `cwd`, as stored (not normalized).
    pub cwd: Option<String>,
    /// The header's `createdAt`, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// Byte length of the decompressed committed transcript.
    pub plain_len: u64,
    /// Last modification time of the backing transcript file.
    pub modified: SystemTime,
    /// The backing transcript file (under the root's I/O path).
    pub transcript_path: PathBuf,
}

/// A listing: the valid sessions, and one error per session (or project
/// directory, or flat artifact) that could not be listed. One bad session
/// never fails the others.
#[derive(Debug, Default)]
pub struct SessionListing {
    /// Valid sessions, sorted by project directory then session directory.
    pub sessions: Vec<SessionSummary>,
    /// What was skipped and why; each error names its path.
    pub errors: Vec<StoreError>,
}

/// Why [`Store::find_by_id`] found no session.
#[derive(Debug)]
pub enum FindError {
    /// No session, or no single session, is named by the id.
    Id(IdLookupError),
    /// The session named by the id is damaged or refused, or the root
    /// cannot be listed.
    Store(StoreError),
}

impl fmt::Display for FindError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FindError::Id(e) => e.fmt(f),
            FindError::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for FindError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            FindError::Id(e) => Some(e),
            FindError::Store(e) => Some(e),
        }
    }
}

impl From<StoreError> for FindError {
    fn from(e: StoreError) -> Self {
        FindError::Store(e)
    }
}

impl From<IdLookupError> for FindError {
    fn from(e: IdLookupError) -> Self {
        FindError::Id(e)
    }
}

impl Store {
    /// The summary of the session in `project/session`, validated through
    /// [`Store::transcript`].
    ///
    /// Errors: those of [`Store::transcript`] and of
    /// [`Transcript::refresh`].
    pub fn session_summary(&self, project: &OsStr, session: &OsStr) -> Result<SessionSummary> {
        let transcript = self.transcript(project, session)?;
        summarize(&transcript, project, session)
    }

    /// Every session of the root. Session directories without a
    /// transcript are not sessions and are left out; a project directory
    /// that cannot be read, a flat artifact, or a session that fails
    /// validation is recorded in [`SessionListing::errors`].
    ///
    /// Errors: [`StoreError::Io`] or [`StoreError::NotFound`] only when the
    /// root itself cannot be listed.
    pub fn sessions(&self) -> Result<SessionListing> {
        let mut listing = SessionListing::default();
        for project in self.discovery().listing()? {
            self.collect_project(project, &mut listing, |_| true);
        }
        Ok(listing)
    }

    /// The sessions whose header `cwd` is `path`, spelled as given, in NFC
    /// or in NFD (IDENTITY.md §3): the project directories of each
    /// spelling's key are searched, and a session of another cwd that
    /// shares the same lossy key (`/a/b-c` and `/a-b/c`) is never returned.
    /// Damaged sessions in those project directories are reported in
    /// [`SessionListing::errors`] (their cwd cannot be trusted).
    ///
    /// Errors: [`StoreError::InvalidName`] for an empty path.
    pub fn sessions_for_project(&self, path: &str) -> Result<SessionListing> {
        let mut spellings = vec![path.to_string(), nfc(path), nfd(path)];
        spellings.sort();
        spellings.dedup();
        let mut keys = Vec::new();
        for spelling in &spellings {
            keys.push(naming::project_key(spelling)?);
        }
        keys.sort();
        keys.dedup();
        let mut listing = SessionListing::default();
        for project in self.discovery().listing()? {
            if !keys.iter().any(|k| OsStr::new(k) == project.project) {
                continue;
            }
            self.collect_project(project, &mut listing, |s| {
                s.cwd.as_ref().is_some_and(|cwd| spellings.contains(cwd))
            });
        }
        Ok(listing)
    }

    /// The one session that `id` names, from anywhere in the root: the
    /// session whose id equals `id`, else the only one whose id shares its
    /// body (IDENTITY.md §2). Ids are the decoded session directory names
    /// (a name that does not decode falls back to its header's id).
    ///
    /// Errors: [`FindError::Id`] when no session or several match;
    /// [`FindError::Store`] when the matching session fails validation
    /// (a duplicate id, a misplaced or corrupt transcript, …) or the root
    /// cannot be listed.
    pub fn find_by_id(&self, id: &str) -> std::result::Result<SessionSummary, FindError> {
        let (project, session) = self.resolve_session_dir(id)?;
        Ok(self.session_summary(&project, &session)?)
    }

    /// Like [`Store::find_by_id`], also returning the open transcript (for
    /// reading it).
    ///
    /// Errors: as [`Store::find_by_id`].
    pub fn find_transcript_by_id(
        &self,
        id: &str,
    ) -> std::result::Result<(SessionSummary, Arc<Transcript>), FindError> {
        let (project, session) = self.resolve_session_dir(id)?;
        let transcript = self.transcript(&project, &session)?;
        let summary = summarize(&transcript, &project, &session)?;
        Ok((summary, transcript))
    }

    /// Adds the sessions of one project directory (as the catalog lists
    /// it) that `keep` accepts to `listing`, and the errors of those that
    /// fail validation.
    fn collect_project(
        &self,
        project: ProjectListing,
        listing: &mut SessionListing,
        keep: impl Fn(&SessionSummary) -> bool,
    ) {
        if let Some(e) = project.error {
            listing.errors.push(e);
            return;
        }
        let dir = self.root().join(&project.project);
        let mut names: Vec<(&OsString, bool)> = project
            .flat
            .iter()
            .map(|n| (n, true))
            .chain(project.sessions.iter().map(|n| (n, false)))
            .collect();
        names.sort();
        for (name, flat) in names {
            if flat {
                listing.errors.push(StoreError::FlatArtifact {
                    path: dir.join(name),
                });
                continue;
            }
            match self.session_summary(&project.project, name) {
                Ok(summary) => {
                    if keep(&summary) {
                        listing.sessions.push(summary);
                    }
                }
                // A directory without a transcript is not a session.
                Err(StoreError::NotFound { .. }) if !holds_transcript(&dir.join(name)) => {}
                Err(e) => listing.errors.push(e),
            }
        }
    }
}

fn summarize(transcript: &Transcript, project: &OsStr, session: &OsStr) -> Result<SessionSummary> {
    let attr = transcript.refresh()?;
    let header = transcript.header();
    let modified = attr.meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    Ok(SessionSummary {
        id: header.id,
        project_dir: project.to_os_string(),
        session_dir: session.to_os_string(),
        cwd: header.cwd,
        created_at_ms: header.created_at_ms,
        plain_len: attr.plain_len,
        modified,
        transcript_path: transcript.path().to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frame::encode_frame;
    use crate::store::StoreOptions;
    use std::fs;
    use std::path::Path;

    /// Writes a valid zstd session `id` with `cwd` into `root`, at the path
    /// its header derives (or at `at` = (project, session) when given).
    fn write_session(
        root: &Path,
        id: &str,
        cwd: Option<&str>,
        at: Option<(&str, &str)>,
    ) -> PathBuf {
        let mut header = serde_json::Map::new();
        header.insert("type".into(), "session".into());
        header.insert("version".into(), 0.into());
        header.insert("id".into(), id.into());
        header.insert("createdAt".into(), 1_767_600_000_000u64.into());
        if let Some(cwd) = cwd {
            header.insert("cwd".into(), cwd.into());
        }
        header.insert("delegationDepth".into(), 0.into());
        let header_line = format!("{}\n", serde_json::Value::Object(header));
        let event = "{\"type\":\"turn/start\",\"seq\":0,\"time\":1,\"data\":{\"turn\":1}}\n";
        let (project, session) = match at {
            Some((p, s)) => (p.to_string(), s.to_string()),
            None => (
                naming::project_dir_name(cwd).unwrap(),
                naming::encode_id(id).unwrap(),
            ),
        };
        let dir = root.join(project).join(session);
        fs::create_dir_all(&dir).unwrap();
        let mut bytes = encode_frame(header_line.as_bytes()).unwrap();
        bytes.extend(encode_frame(event.as_bytes()).unwrap());
        let path = dir.join("session.jsonl.zstd");
        fs::write(&path, bytes).unwrap();
        path
    }

    fn open(root: &Path) -> Store {
        Store::open(root, StoreOptions::default()).unwrap()
    }

    #[test]
    fn listing_isolates_bad_sessions_and_skips_empty_dirs() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write_session(root, "good-1", Some("/w/app"), None);
        write_session(root, "good-2", None, None);
        let bad = root.join("--w-app--/bad/session.jsonl.zstd");
        fs::create_dir_all(bad.parent().unwrap()).unwrap();
        fs::write(&bad, b"not zstd at all").unwrap();
        fs::create_dir_all(root.join("--w-app--/no-transcript/attachments")).unwrap();
        fs::write(root.join("--w-app--/legacy.jsonl.zstd"), b"x").unwrap();
        fs::write(root.join("stray-file-at-root"), b"x").unwrap();

        let listing = open(root).sessions().unwrap();
        let ids: Vec<&str> = listing.sessions.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["good-1", "good-2"]);
        assert_eq!(listing.errors.len(), 2, "{:?}", listing.errors);
        let text: Vec<String> = listing.errors.iter().map(|e| e.to_string()).collect();
        assert!(
            text.iter().any(|t| t.contains("legacy.jsonl.zstd")),
            "{text:?}"
        );
        assert!(text.iter().any(|t| t.contains("/bad/")), "{text:?}");
        let s = &listing.sessions[0];
        assert_eq!(s.cwd.as_deref(), Some("/w/app"));
        assert_eq!(s.project_dir, "--w-app--");
        assert_eq!(s.session_dir, "good-1");
        assert!(s.plain_len > 0);
        assert_eq!(s.created_at_ms, 1_767_600_000_000);
        assert!(s
            .transcript_path
            .ends_with("--w-app--/good-1/session.jsonl.zstd"));
    }

    #[test]
    fn project_lookup_matches_the_cwd_not_the_lossy_key() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write_session(root, "in-a-bc", Some("/a/b-c"), None);
        write_session(root, "in-ab-c", Some("/a-b/c"), None);
        let store = open(root);
        let ids = |path: &str| -> Vec<String> {
            store
                .sessions_for_project(path)
                .unwrap()
                .sessions
                .into_iter()
                .map(|s| s.id)
                .collect()
        };
        assert_eq!(ids("/a/b-c"), ["in-a-bc"]);
        assert_eq!(ids("/a-b/c"), ["in-ab-c"]);
        assert!(ids("/a/b/c").is_empty());
        assert!(store.sessions_for_project("").is_err());
    }

    #[test]
    fn project_lookup_tries_nfc_and_nfd_spellings() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write_session(root, "nfc", Some("/p/caf\u{e9}"), None);
        write_session(root, "nfd", Some("/p/cafe\u{301}"), None);
        let store = open(root);
        for asked in ["/p/caf\u{e9}", "/p/cafe\u{301}"] {
            let mut ids: Vec<String> = store
                .sessions_for_project(asked)
                .unwrap()
                .sessions
                .into_iter()
                .map(|s| s.id)
                .collect();
            ids.sort();
            assert_eq!(ids, ["nfc", "nfd"], "asked {asked:?}");
        }
    }

    #[test]
    fn find_by_id_uses_the_body_rule_and_validates() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write_session(root, "session_01AbCdEfGh", Some("/w"), None);
        write_session(root, "one_77777777", Some("/w"), None);
        write_session(root, "two_77777777", Some("/x"), None);
        // Misplaced: header says /w, stored under /y's key.
        write_session(root, "moved-1", Some("/w"), Some(("--y--", "moved-1")));
        let store = open(root);

        assert_eq!(
            store.find_by_id("cse_01AbCdEfGh").unwrap().id,
            "session_01AbCdEfGh"
        );
        assert_eq!(
            store.find_by_id("session_01AbCdEfGh").unwrap().id,
            "session_01AbCdEfGh"
        );
        assert_eq!(
            store.find_by_id("01AbCdEfGh").unwrap().id,
            "session_01AbCdEfGh"
        );
        assert!(matches!(
            store.find_by_id("cse_01abcdefgh"),
            Err(FindError::Id(IdLookupError::NotFound { .. }))
        ));
        match store.find_by_id("three_77777777") {
            Err(FindError::Id(IdLookupError::Ambiguous { candidates, .. })) => {
                assert_eq!(candidates, ["one_77777777", "two_77777777"]);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(store.find_by_id("one_77777777").unwrap().id, "one_77777777");
        assert!(matches!(
            store.find_by_id("moved-1"),
            Err(FindError::Store(StoreError::Misplaced { .. }))
        ));
        // A directory name that does not decode is found by its header id,
        // and then refused as misplaced (its canonical name is elsewhere).
        write_session(root, "oddA", Some("/w"), Some(("--w--", "odd~0041")));
        // Written after the catalog was built: seen once it revalidates.
        store.discovery().invalidate();
        assert!(matches!(
            store.find_by_id("oddA"),
            Err(FindError::Store(StoreError::Misplaced { .. }))
        ));
        let (summary, transcript) = store.find_transcript_by_id("cse_01AbCdEfGh").unwrap();
        let bytes = transcript.read(0, u32::MAX).unwrap();
        assert_eq!(bytes.len() as u64, summary.plain_len);
    }

    #[test]
    fn duplicate_ids_are_reported_not_merged() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        write_session(root, "dup-id", Some("/w"), None);
        write_session(root, "dup-id", Some("/w"), Some(("--v--", "dup-id")));
        let store = open(root);
        assert!(matches!(
            store.find_by_id("dup-id"),
            Err(FindError::Store(StoreError::DuplicateId { .. }))
        ));
        let listing = store.sessions().unwrap();
        assert!(listing.sessions.is_empty());
        assert!(listing
            .errors
            .iter()
            .all(|e| matches!(e, StoreError::DuplicateId { .. })));
    }
}
