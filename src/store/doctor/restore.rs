//! The quarantine run's manifest (`doctor-manifest.jsonl`, one JSON object
//! per change) and `sessionfs doctor --restore RUN`, which puts a run's
//! files back where they were when those places are free (or, for a
//! rewritten transcript, replaces the rewrite with the original).
//!
//! Nothing is lost by a restore: a file it replaces whose bytes differ
//! from the original (lines appended after the repair) and a fork
//! directory it removes are first copied into the run folder, under
//! [`SET_ASIDE`], and the report names the copy.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The manifest's file name in a quarantine run folder.
pub const MANIFEST: &str = "doctor-manifest.jsonl";

/// The folder of a run where `--restore` keeps what it replaces or
/// removes.
pub const SET_ASIDE: &str = "replaced-by-restore";

/// One change of a repair run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    /// "moved" (set aside), "rewritten" (repaired in place), "relocated"
    /// (its directory moved to `created`), "converted" (re-encoded to
    /// `created`).
    pub action: String,
    /// The original path.
    pub original: String,
    /// The copy of its bytes in the quarantine folder.
    pub copy: String,
    /// What the repair created, if anything.
    pub created: Option<String>,
}

/// An open manifest, appended to (and fsynced) per change.
pub struct Manifest {
    file: File,
}

impl Manifest {
    /// Creates the manifest in `dir`.
    ///
    /// Errors: creating it.
    pub fn create(dir: &Path) -> std::io::Result<Manifest> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(MANIFEST))?;
        Ok(Manifest { file })
    }

    /// Appends `entry` and fsyncs; called after the copy is safe and
    /// before the original changes.
    ///
    /// Errors: writing.
    pub fn record(&mut self, entry: &Entry) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(entry).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.sync_all()
    }
}

/// What one restore did with an entry.
#[derive(Debug, Clone)]
pub struct Restored {
    /// The original path.
    pub path: PathBuf,
    /// `Ok(what was done)` or `Err(why not)`.
    pub outcome: Result<String, String>,
}

/// Puts the files of the quarantine run `run` back, newest change first.
///
/// Errors: the manifest cannot be read.
pub fn restore(run: &Path) -> std::io::Result<Vec<Restored>> {
    let f = File::open(run.join(MANIFEST))?;
    let mut entries: Vec<Entry> = Vec::new();
    for line in BufReader::new(f).lines() {
        let line = line?;
        if let Ok(e) = serde_json::from_str(&line) {
            entries.push(e);
        }
    }
    let mut out = Vec::new();
    for e in entries.iter().rev() {
        let path = PathBuf::from(&e.original);
        let outcome = restore_one(run, e);
        out.push(Restored { path, outcome });
    }
    Ok(out)
}

fn put(copy: &Path, dest: &Path, replace: bool) -> std::io::Result<()> {
    if let Some(p) = dest.parent() {
        fs::create_dir_all(p)?;
    }
    let tmp = dest.with_file_name(format!(
        "{}.{:012x}.tmp",
        dest.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        0x7e57
    ));
    super::super::quarantine::copy_file_sparse(copy, &tmp)?;
    if replace {
        fs::rename(&tmp, dest)?;
    } else {
        let r = fs::hard_link(&tmp, dest);
        fs::remove_file(&tmp)?;
        r?;
    }
    Ok(())
}

/// Copies `what` (a file, or a directory with what it holds) into the
/// run's [`SET_ASIDE`] folder under a new name; returns the copy's path.
/// The walk uses an explicit stack (no recursion) and does not follow
/// symbolic links.
fn set_aside(run: &Path, what: &Path) -> std::io::Result<PathBuf> {
    let dir = run.join(SET_ASIDE);
    fs::create_dir_all(&dir)?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let name = what
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let top = dir.join(format!("{stamp}-{name}"));
    let mut stack = vec![(what.to_path_buf(), top.clone())];
    while let Some((from, to)) = stack.pop() {
        let meta = fs::symlink_metadata(&from)?;
        if meta.is_dir() {
            fs::create_dir_all(&to)?;
            for entry in fs::read_dir(&from)? {
                let entry = entry?;
                stack.push((entry.path(), to.join(entry.file_name())));
            }
        } else if meta.is_file() {
            super::super::quarantine::copy_file_sparse(&from, &to)?;
        }
    }
    super::super::publish::sync_dir(&dir).map_err(|e| std::io::Error::other(e.to_string()))?;
    Ok(top)
}

/// Removes a fork directory the repair made, after setting it aside (a
/// fork may have been appended to since); returns where it was put.
fn remove_fork(run: &Path, created: &str) -> std::io::Result<PathBuf> {
    let c = Path::new(created);
    let dir = c.parent().unwrap_or(c);
    // Its writers' locks, while it is copied and removed.
    let file = fs::OpenOptions::new().read(true).write(true).open(c)?;
    let _locked = super::super::append::lock_for_repair(c, &file)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let kept = set_aside(run, dir)?;
    fs::remove_dir_all(dir)?;
    Ok(kept)
}

/// Whether the file at `a` exists and holds the bytes of the file at `b`.
/// Whether the files `a` and `b` hold the same bytes (false when either
/// cannot be read): lengths first, then 64 KiB at a time, so that memory
/// stays bounded whatever the files' sizes (a set-aside sparse transcript
/// of 20 GiB was read whole into memory here).
fn same_bytes(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::FileExt;
    let (Ok(fa), Ok(fb)) = (fs::File::open(a), fs::File::open(b)) else {
        return false;
    };
    let len = match (fa.metadata(), fb.metadata()) {
        (Ok(ma), Ok(mb)) if ma.len() == mb.len() => ma.len(),
        _ => return false,
    };
    const BLOCK: usize = 64 * 1024;
    let (mut x, mut y) = (vec![0u8; BLOCK], vec![0u8; BLOCK]);
    let mut at = 0u64;
    while at < len {
        let n = ((len - at) as usize).min(BLOCK);
        if fa.read_exact_at(&mut x[..n], at).is_err()
            || fb.read_exact_at(&mut y[..n], at).is_err()
            || x[..n] != y[..n]
        {
            return false;
        }
        at += n as u64;
    }
    true
}

fn restore_one(run: &Path, e: &Entry) -> Result<String, String> {
    let copy = Path::new(&e.copy);
    let original = Path::new(&e.original);
    let err = |x: std::io::Error| x.to_string();
    let fork_note = |created: &Option<String>| -> Result<String, String> {
        match created {
            Some(c) if Path::new(c).exists() => remove_fork(run, c)
                .map(|kept| {
                    format!(
                        "; the fork it made was removed (kept in {})",
                        kept.display()
                    )
                })
                .map_err(err),
            _ => Ok(String::new()),
        }
    };
    match e.action.as_str() {
        "moved" => {
            if same_bytes(original, copy) {
                return Ok("already put back".into());
            }
            if original.exists() {
                return Err("the place is taken".into());
            }
            put(copy, original, false).map_err(err)?;
            // A fork made from this file (a conflict copy): it goes.
            Ok(format!("put back{}", fork_note(&e.created)?))
        }
        "rewritten" => {
            // The writers' locks are held from the comparison to the
            // rename: a line committed meanwhile would otherwise land in
            // the file being replaced after its bytes were set aside.
            let _locked = match fs::OpenOptions::new().read(true).write(true).open(original) {
                Ok(f) => Some((
                    super::super::append::lock_for_repair(original, &f)
                        .map_err(|e| e.to_string())?,
                    f,
                )),
                Err(_) => None,
            };
            fs::metadata(copy).map_err(err)?;
            if same_bytes(original, copy) {
                return Ok(format!(
                    "already the original bytes{}",
                    fork_note(&e.created)?
                ));
            }
            // The file may have grown since the repair: its bytes are kept.
            let kept = if original.exists() {
                Some(set_aside(run, original).map_err(err)?)
            } else {
                None
            };
            put(copy, original, true).map_err(err)?;
            Ok(format!(
                "the original bytes replace the repaired file{}{}",
                kept.map(|k| format!(" (the bytes it held are kept in {})", k.display()))
                    .unwrap_or_default(),
                // A fork made by this repair: its directory goes too.
                fork_note(&e.created)?
            ))
        }
        "relocated" => {
            let created = Path::new(e.created.as_deref().unwrap_or(""));
            let (Some(from), Some(to)) = (Some(created), original.parent()) else {
                return Err("no directory".into());
            };
            if to.exists() {
                return Err("the place is taken".into());
            }
            fs::rename(from, to).map_err(err)?;
            Ok("moved back".into())
        }
        "converted" => {
            if same_bytes(original, copy) {
                return Ok("already put back in its encoding".into());
            }
            if original.exists() {
                return Err("the place is taken".into());
            }
            put(copy, original, false).map_err(err)?;
            let mut note = String::new();
            if let Some(c) = &e.created {
                if Path::new(c).exists() {
                    let kept = set_aside(run, Path::new(c)).map_err(err)?;
                    fs::remove_file(c).map_err(err)?;
                    note = format!(" (the re-encoded copy is kept in {})", kept.display());
                }
            }
            Ok(format!("put back in its encoding{note}"))
        }
        other => Err(format!("unknown action {other:?}")),
    }
}
