//! The quarantine run's manifest (`doctor-manifest.jsonl`, one JSON object
//! per change) and `sessionfs doctor --restore RUN`, which puts a run's
//! files back where they were when those places are free (or, for a
//! rewritten transcript, replaces the rewrite with the original).

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The manifest's file name in a quarantine run folder.
pub const MANIFEST: &str = "doctor-manifest.jsonl";

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
        let outcome = restore_one(e);
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
    fs::copy(copy, &tmp)?;
    File::open(&tmp)?.sync_all()?;
    if replace {
        fs::rename(&tmp, dest)?;
    } else {
        let r = fs::hard_link(&tmp, dest);
        fs::remove_file(&tmp)?;
        r?;
    }
    Ok(())
}

fn restore_one(e: &Entry) -> Result<String, String> {
    let copy = Path::new(&e.copy);
    let original = Path::new(&e.original);
    let err = |x: std::io::Error| x.to_string();
    match e.action.as_str() {
        "moved" => {
            if original.exists() {
                return Err("the place is taken".into());
            }
            put(copy, original, false).map_err(err)?;
            if let Some(c) = &e.created {
                // A fork made from this file (a conflict copy): it goes.
                let _ = fs::remove_dir_all(Path::new(c).parent().unwrap_or(Path::new(c)));
            }
            Ok("put back".into())
        }
        "rewritten" => {
            put(copy, original, true).map_err(err)?;
            if let Some(c) = &e.created {
                // A fork made by this repair: its directory goes too.
                let _ = fs::remove_dir_all(Path::new(c).parent().unwrap_or(Path::new(c)));
            }
            Ok("the original bytes replace the repaired file".into())
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
            if original.exists() {
                return Err("the place is taken".into());
            }
            put(copy, original, false).map_err(err)?;
            if let Some(c) = &e.created {
                let _ = fs::remove_file(c);
            }
            Ok("put back in its encoding".into())
        }
        other => Err(format!("unknown action {other:?}")),
    }
}
