//! The doctor's walk of a root's layout: project and session directories,
//! transcripts and what lies beside them (flat artifacts, transcripts of the
//! other encoding, unsupported transcript names, stale publication
//! temporaries, stale `.sessionfs.lock` files, `.fuse_hidden*` copies a
//! network client kept of lock files and wait announcements, sync conflict
//! copies).
//!
//! Source: FORMAT.md ("Layout"), MOUNT.md ("The tree", "Shared roots").

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::super::lease::{LeaseConfig, LockBody, BODY_LEN, LOCK_NAME};
use super::super::transcript::Encoding;
use super::super::{is_flat_artifact_name, is_foreign_transcript_name, is_publication_temp};
use super::finding::{Finding, Kind};

/// A publication temporary older than this is left by a crash (a live
/// publication takes milliseconds).
pub const TEMP_STALE_AFTER: Duration = Duration::from_secs(60);

/// One transcript found in a session directory.
#[derive(Debug, Clone)]
pub struct Found {
    /// Its path.
    pub path: PathBuf,
    /// Its encoding, by name.
    pub encoding: Encoding,
}

/// A sync tool's conflict copy and the transcript it is a copy of.
#[derive(Debug, Clone)]
pub struct ConflictCopy {
    /// The copy.
    pub path: PathBuf,
    /// The transcript beside it (which may not exist).
    pub transcript: PathBuf,
    /// The copy's encoding.
    pub encoding: Encoding,
}

/// What the walk found.
#[derive(Debug, Default)]
pub struct Layout {
    /// Transcripts, in path order.
    pub transcripts: Vec<Found>,
    /// Conflict copies, in path order.
    pub conflicts: Vec<ConflictCopy>,
    /// Layout problems that are not about a transcript's content.
    pub findings: Vec<Finding>,
    /// The root's encoding: zstd unless every transcript is raw.
    pub encoding: Option<Encoding>,
}

fn sorted_entries(dir: &Path) -> std::io::Result<Vec<fs::DirEntry>> {
    let mut v: Vec<fs::DirEntry> = fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    v.sort_by_key(|e| e.file_name());
    Ok(v)
}

fn age(meta: &fs::Metadata, now: SystemTime) -> Duration {
    meta.modified()
        .ok()
        .and_then(|m| now.duration_since(m).ok())
        .unwrap_or_default()
}

/// How long a lock file may go unchanged before the commit protocol's
/// waiters take it over ([`LeaseConfig`]: the longer of the default lease
/// and the one its body names, plus the waiter margin); its body is read
/// from at most [`BODY_LEN`] bytes.
fn takeover_after(path: &Path) -> Duration {
    use std::io::Read;
    let cfg = LeaseConfig::default();
    let mut body = Vec::new();
    let named = fs::File::open(path)
        .and_then(|f| f.take(BODY_LEN as u64).read_to_end(&mut body))
        .ok()
        .and_then(|_| LockBody::parse(&body))
        .map_or(Duration::ZERO, |b| Duration::from_millis(b.lease_ms));
    cfg.lease.max(named) + cfg.waiter_margin
}

/// Walks `root`. Directories that cannot be read are findings.
pub fn walk_root(root: &Path, now: SystemTime) -> Layout {
    let mut out = Layout::default();
    let projects = match sorted_entries(root) {
        Ok(v) => v,
        Err(e) => {
            out.findings.push(Finding::new(
                root,
                Kind::Unreadable,
                format!("cannot list the root: {e}"),
            ));
            return out;
        }
    };
    // Every directory of the root is a project directory (FORMAT.md,
    // Layout), whatever its name: the reference lists them all, so a
    // session under `notes/` makes its list() fail (misplaced), and the
    // same id under a `--key--` directory is a duplicate.
    for p in projects {
        if !p.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        walk_project(&p.path(), now, &mut out);
    }
    let any = |e: Encoding| out.transcripts.iter().any(|t| t.encoding == e);
    let encoding = if any(Encoding::Zstd) || !any(Encoding::Raw) {
        Encoding::Zstd
    } else {
        Encoding::Raw
    };
    out.encoding = Some(encoding);
    for t in &out.transcripts {
        if t.encoding != encoding {
            out.findings.push(Finding::new(
                &t.path,
                Kind::EncodingMismatch,
                format!(
                    "a {} transcript in a {} root",
                    name_of(t.encoding),
                    name_of(encoding)
                ),
            ));
        }
    }
    out
}

/// "zstd" or "raw".
pub fn name_of(e: Encoding) -> &'static str {
    match e {
        Encoding::Zstd => "zstd",
        Encoding::Raw => "raw",
    }
}

fn walk_project(project: &Path, now: SystemTime, out: &mut Layout) {
    let entries = match sorted_entries(project) {
        Ok(v) => v,
        Err(e) => {
            out.findings.push(Finding::new(
                project,
                Kind::Unreadable,
                format!("cannot list the project directory: {e}"),
            ));
            return;
        }
    };
    for e in entries {
        let name = e.file_name();
        let Ok(t) = e.file_type() else { continue };
        if t.is_file() && is_flat_artifact_name(&name) {
            out.findings.push(Finding::new(
                e.path(),
                Kind::FlatArtifact,
                "a transcript in the retired flat-file layout (<project>/<id>.jsonl[.zstd])",
            ));
        } else if t.is_dir() {
            walk_session(&e.path(), now, out);
        } else if t.is_symlink() && fs::metadata(e.path()).is_ok_and(|m| m.is_dir()) {
            let target = fs::read_link(e.path())
                .map(|t| format!(" to {}", super::super::error::Shown(&t)))
                .unwrap_or_default();
            out.findings.push(Finding::new(
                e.path(),
                Kind::LinkedSessionDir,
                format!(
                    "a symbolic link{target} where a session directory goes: the mount and \
                     list do not show it"
                ),
            ));
        }
    }
}

fn walk_session(dir: &Path, now: SystemTime, out: &mut Layout) {
    let entries = match sorted_entries(dir) {
        Ok(v) => v,
        Err(e) => {
            out.findings.push(Finding::new(
                dir,
                Kind::Unreadable,
                format!("cannot list the session directory: {e}"),
            ));
            return;
        }
    };
    for e in entries {
        let name = e.file_name();
        let path = e.path();
        // The entry's type as listed (not following a link); its times
        // are read only for the files whose age matters.
        let Ok(kind) = e.file_type() else {
            continue;
        };
        let b = name.as_encoded_bytes();
        if b == b"session.jsonl.zstd" || b == b"session.jsonl" {
            out.transcripts.push(Found {
                path,
                encoding: if b == b"session.jsonl" {
                    Encoding::Raw
                } else {
                    Encoding::Zstd
                },
            });
        } else if b == LOCK_NAME.as_bytes() {
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            let lease = takeover_after(&path);
            let old = age(&meta, now);
            if old > lease {
                out.findings.push(Finding::new(
                    path,
                    Kind::StaleLock,
                    format!(
                        "a lock file not renewed for {} s, longer than its lease and the waiters' margin ({} s)",
                        old.as_secs(),
                        lease.as_secs()
                    ),
                ));
            }
        } else if super::super::hidden_locks::is_hidden_name(&name) {
            // What sshfs kept of a lock file or wait announcement unlinked
            // while open: the cleaner's rules (`hidden_locks`), never
            // anything else of that name.
            let Some(what) = super::super::hidden_locks::stale_copy(&path, takeover_after(&path))
            else {
                continue;
            };
            let old = fs::symlink_metadata(&path).map_or(Duration::ZERO, |m| age(&m, now));
            out.findings.push(Finding::new(
                path,
                Kind::HiddenLockCopy,
                format!(
                    "{} that a network client (sshfs) kept under a hidden name after its \
                     unlink, {} s old: no writer uses it, and the session directory lists it",
                    what.describe(),
                    old.as_secs()
                ),
            ));
        } else if b.starts_with(LOCK_NAME.as_bytes()) {
            // The commit protocol's own files (a waiter's marker, takeover
            // claims and temporaries, lease.rs): left to the protocol.
        } else if is_publication_temp(&name) {
            let Ok(meta) = fs::symlink_metadata(&path) else {
                continue;
            };
            let old = age(&meta, now);
            let doctors = name
                .to_str()
                .is_some_and(|n| n.contains(super::repair::DOCTOR_TEMP_HEX));
            if old >= TEMP_STALE_AFTER || doctors {
                out.findings.push(Finding::new(
                    path,
                    Kind::StaleTemporary,
                    format!(
                        "a publication temporary left by an interrupted publication ({} s old)",
                        old.as_secs()
                    ),
                ));
            }
        } else if let Some(encoding) =
            super::super::conflict::encoding_of(&name).filter(|_| kind.is_file())
        {
            // A regular file only (a FIFO of that name would block the scan
            // at its open; the mount too passes such entries through).
            out.conflicts.push(ConflictCopy {
                transcript: dir.join(encoding.file_name()),
                path,
                encoding,
            });
        } else if kind.is_file() && is_foreign_transcript_name(&name) {
            out.findings.push(Finding::new(
                path,
                Kind::UnsupportedVersion,
                "a transcript under a name of another format version",
            ));
        }
    }
}
