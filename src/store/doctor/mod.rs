//! `sessionfs doctor`: one scan that finds every problem of a store (layout,
//! header, every frame, lines, `seq` continuity, the reference's own content
//! refusals), one [`Finding`] per problem; repairs of what is lossless;
//! the quarantine of what cannot be read; forks for second histories.
//!
//! Built on the damage classifier ([`super::classify`]), the bounded
//! streaming decoder ([`super::decode`]) and the quarantine folder
//! ([`super::quarantine`]). Source: MOUNT.md ("Shared roots": quarantine;
//! conflict copies; damage after the header frame), FORMAT.md.

pub mod content;
pub mod finding;
pub mod fork;
pub mod fragment;
pub mod history;
pub mod layout;
pub mod long_line;
pub mod repair;
pub mod report;
pub mod restore;
pub mod scan_file;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

pub use finding::{Finding, Kind, Remedy};
pub use report::{Report, SessionResult, Status, Summary};

use super::transcript::Encoding;
use layout::{walk_root, ConflictCopy};
use scan_file::{scan_file, FileScan};

/// What a scan covers and reports.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// The time stale temporaries and locks are judged against.
    pub now: SystemTime,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            now: SystemTime::now(),
        }
    }
}

/// Everything a scan learned, for reporting and repairs.
#[derive(Debug, Default)]
pub struct Scan {
    /// The root (or, for one transcript, its folder).
    pub root: PathBuf,
    /// The root's encoding.
    pub encoding: Option<Encoding>,
    /// Each transcript's scan, in path order.
    pub files: Vec<FileScan>,
    /// Conflict copies found, with their scans.
    pub conflicts: Vec<(ConflictCopy, FileScan)>,
    /// Problems not about one transcript's bytes (layout, identity), and
    /// conflict copies.
    pub layout: Vec<Finding>,
}

impl Scan {
    /// Every finding, layout first, then transcripts in path order.
    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.layout
            .iter()
            .chain(self.files.iter().flat_map(|f| f.findings.iter()))
    }
}

/// Scans one transcript file (`target` is a file) or a whole root.
/// `progress(done, total)` is called after each transcript.
pub fn scan(target: &Path, options: &ScanOptions, progress: &dyn Fn(u64, u64)) -> Scan {
    if target.is_file() {
        let raw = super::check::is_raw_name(target);
        let file = scan_file(target, raw);
        progress(1, 1);
        let mut scan = Scan {
            root: target.parent().map(Path::to_path_buf).unwrap_or_default(),
            encoding: Some(if raw { Encoding::Raw } else { Encoding::Zstd }),
            files: vec![file],
            ..Scan::default()
        };
        repair::mark_links(&mut scan);
        return scan;
    }
    let layout = walk_root(target, options.now);
    let total = layout.transcripts.len() as u64;
    let mut files = Vec::with_capacity(layout.transcripts.len());
    for (i, t) in layout.transcripts.iter().enumerate() {
        files.push(scan_file(&t.path, t.encoding == Encoding::Raw));
        progress(i as u64 + 1, total);
    }
    let mut scan = Scan {
        root: target.to_path_buf(),
        encoding: layout.encoding,
        files,
        conflicts: Vec::new(),
        layout: layout.findings,
    };
    identity_findings(&mut scan);
    for c in layout.conflicts {
        scan.layout.push(history::conflict_finding(&c));
        let copy = scan_file(&c.path, c.encoding == Encoding::Raw);
        scan.conflicts.push((c, copy));
    }
    repair::mark_links(&mut scan);
    scan
}

/// Duplicate ids and misplaced session directories, from the headers read.
fn identity_findings(scan: &mut Scan) {
    let root = scan.root.clone();
    // Session directory name → transcripts with that name, for duplicates.
    let mut by_dir: BTreeMap<std::ffi::OsString, Vec<usize>> = BTreeMap::new();
    for (i, f) in scan.files.iter().enumerate() {
        let Some(dir) = f.path.parent() else { continue };
        if let Some(name) = dir.file_name() {
            by_dir.entry(name.to_owned()).or_default().push(i);
        }
    }
    let mut new = Vec::new();
    // Transcripts of one directory (a raw and a zstd one: an encoding
    // mismatch) are not duplicates of each other.
    let apart = |v: &&Vec<usize>| {
        let first = scan.files[v[0]].path.parent();
        v.iter().any(|&i| scan.files[i].path.parent() != first)
    };
    // Where a transcript's header puts it (`None`: no usable header).
    let expected_dir = |f: &FileScan| {
        let h = f.header.as_ref()?;
        Some(
            root.join(h.project_dir_name().ok()?)
                .join(h.session_dir_name().ok()?),
        )
    };
    for idx in by_dir.values().filter(|v| v.len() > 1).filter(apart) {
        // The copy its header puts where it is stays (a copy under another
        // directory, `notes/<id>/`, is the stray one), else the most
        // recently written; the others are set aside.
        let newest = *idx
            .iter()
            .max_by_key(|&&i| {
                let f = &scan.files[i];
                let placed = expected_dir(f).is_some_and(|d| f.path.parent() == Some(d.as_path()));
                let m = std::fs::metadata(&f.path).and_then(|m| m.modified());
                (placed, m.ok(), std::cmp::Reverse(f.path.clone()))
            })
            .expect("non-empty");
        for &i in idx.iter().filter(|&&i| i != newest) {
            new.push(Finding::new(
                &scan.files[i].path,
                Kind::DuplicateId,
                format!(
                    "the same session directory name is in {} project directories; {} stays \
                     (the copy in the place its header names, else the most recently written)",
                    idx.len(),
                    super::error::Shown(&scan.files[newest].path)
                ),
            ));
        }
    }
    let duplicates: std::collections::HashSet<PathBuf> =
        new.iter().map(|d| d.path.clone()).collect();
    for f in &scan.files {
        if duplicates.contains(&f.path) {
            continue;
        }
        let Some(expected) = expected_dir(f) else {
            continue;
        };
        if f.path.parent() != Some(expected.as_path()) {
            new.push(Finding::new(
                &f.path,
                Kind::Misplaced,
                format!(
                    "its header's id and cwd put it in {}",
                    super::error::Shown(&expected)
                ),
            ));
        }
    }
    scan.layout.extend(new);
}
