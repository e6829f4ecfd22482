//! The doctor's report: every finding, each session's status and the
//! summary; serialized as the `--json` report, whose schema is
//! `docs/doctor-report.schema.json` (key names stable, `schema` names the
//! version).

use std::path::{Path, PathBuf};

use serde::{Serialize, Serializer};

use super::finding::{Finding, Kind, Remedy};
use super::Scan;

/// The `schema` value of this report's version.
pub const SCHEMA: &str = "sessionfs-doctor-report/1";

/// Serializes a path as a string (bytes that are not UTF-8 as U+FFFD).
pub fn lossy<S: Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}

fn lossy_opt<S: Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => lossy(p, s),
        None => s.serialize_none(),
    }
}

/// A session's state after the scan (and repairs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Nothing wrong.
    Clean,
    /// Only content refusals of the reference (not damage): left alone.
    Refused,
    /// Problems left.
    Problems,
    /// Every problem repaired.
    Repaired,
    /// Moved to the quarantine folder.
    SetAside,
}

/// One transcript's result.
#[derive(Debug, Clone, Serialize)]
pub struct SessionResult {
    /// The transcript.
    #[serde(serialize_with = "lossy")]
    pub path: PathBuf,
    /// The header's id, when the header is valid.
    pub id: Option<String>,
    /// Its state.
    pub status: Status,
    /// Bytes on disk.
    pub bytes: u64,
    /// Complete data frames on disk (zstd; 0 for raw).
    pub frames: u64,
    /// Frames that decode with a valid checksum.
    pub frames_ok: u64,
    /// Complete lines read before any damage.
    pub lines: u64,
    /// How many findings are about it.
    pub findings: u64,
}

/// The totals.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    /// Transcripts scanned.
    pub sessions_scanned: u64,
    /// With nothing wrong.
    pub clean: u64,
    /// Repaired by this run.
    pub repaired: u64,
    /// Moved to the quarantine folder by this run.
    pub set_aside: u64,
    /// Transcripts with nothing wrong but the reference's content refusals
    /// (they read, and the reference refuses them for what they say).
    pub refused: u64,
    /// Findings not resolved, content refusals not included (they are not
    /// problems of the store: [`Kind::content_only`]).
    pub problems_left: u64,
    /// Bytes of the transcripts scanned.
    pub bytes: u64,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// [`SCHEMA`].
    pub schema: &'static str,
    /// The root (or the transcript) scanned.
    #[serde(serialize_with = "lossy")]
    pub target: PathBuf,
    /// The root's encoding: "zstd" or "raw".
    pub encoding: &'static str,
    /// Whether `--repair` ran.
    pub repair: bool,
    /// The quarantine folder this run used, if it put anything there.
    #[serde(serialize_with = "lossy_opt")]
    pub quarantine: Option<PathBuf>,
    /// Every finding, once.
    pub findings: Vec<Finding>,
    /// Every transcript.
    pub sessions: Vec<SessionResult>,
    /// The totals.
    pub summary: Summary,
}

impl Report {
    /// The report of `scan` (after repairs, if `repair`).
    pub fn build(target: &Path, scan: &Scan, repair: bool, quarantine: Option<PathBuf>) -> Report {
        let findings: Vec<Finding> = scan.findings().cloned().collect();
        // Each transcript's findings, gathered once (a store where every
        // transcript has one took seconds per thousand matched pairwise).
        // A finding of another file in a transcript's session directory (a
        // conflict copy) is the transcript's: repairing it repairs the
        // session.
        let transcripts: std::collections::HashSet<&Path> =
            scan.files.iter().map(|f| f.path.as_path()).collect();
        let in_dir: std::collections::HashMap<&Path, &Path> = scan
            .files
            .iter()
            .filter_map(|f| Some((f.path.parent()?, f.path.as_path())))
            .collect();
        let mut by_path: std::collections::HashMap<&Path, Vec<&Finding>> =
            std::collections::HashMap::new();
        for x in &findings {
            let own = x.path.as_path();
            let key = if transcripts.contains(own) {
                own
            } else {
                own.parent()
                    .and_then(|d| in_dir.get(d).copied())
                    .unwrap_or(own)
            };
            by_path.entry(key).or_default().push(x);
        }
        let mut sessions = Vec::with_capacity(scan.files.len());
        let mut summary = Summary::default();
        for f in &scan.files {
            let mine: Vec<&Finding> = by_path.get(f.path.as_path()).cloned().unwrap_or_default();
            let left = mine.iter().filter(|x| x.done.is_none()).count();
            let set_aside = mine
                .iter()
                .any(|x| x.done.is_some() && x.remedy == Remedy::SetAside);
            let status = if mine.is_empty() {
                Status::Clean
            } else if set_aside {
                Status::SetAside
            } else if left == 0 {
                Status::Repaired
            } else if mine.iter().all(|x| x.kind.content_only()) {
                Status::Refused
            } else {
                Status::Problems
            };
            summary.sessions_scanned += 1;
            summary.bytes += f.bytes;
            match status {
                Status::Clean => summary.clean += 1,
                Status::Repaired => summary.repaired += 1,
                Status::SetAside => summary.set_aside += 1,
                Status::Refused => summary.refused += 1,
                _ => {}
            }
            sessions.push(SessionResult {
                path: f.path.clone(),
                id: f.header.as_ref().map(|h| h.id.clone()),
                status,
                bytes: f.bytes,
                frames: f.frames,
                frames_ok: f.frames_ok,
                lines: f.lines,
                findings: mine.len() as u64,
            });
        }
        summary.problems_left = findings
            .iter()
            .filter(|x| x.done.is_none() && !x.kind.content_only())
            .count() as u64;
        Report {
            schema: SCHEMA,
            target: target.to_path_buf(),
            encoding: scan.encoding.map_or("zstd", super::layout::name_of),
            repair,
            quarantine,
            findings,
            sessions,
            summary,
        }
    }

    /// Whether any finding is left unresolved.
    pub fn has_problems(&self) -> bool {
        self.summary.problems_left > 0
    }

    /// The kinds found, for tests and summaries.
    pub fn kinds(&self) -> Vec<Kind> {
        self.findings.iter().map(|f| f.kind).collect()
    }
}
