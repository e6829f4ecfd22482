//! Keeping the bytes a takeover cuts off a transcript (a dead lock
//! holder's torn frame) in the quarantine folder, outside the root.
//!
//! Source: MOUNT.md ("Shared roots": quarantine lives outside ROOT, by
//! default `$XDG_STATE_HOME/sessionfs/quarantine/<root>/<time>/`, printed
//! by whatever puts something there). A minimal private helper of the
//! commit protocol; the doctor's quarantine module may replace it.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The default quarantine base: `$XDG_STATE_HOME/sessionfs/quarantine`,
/// `$HOME/.local/state/sessionfs/quarantine` when unset, `None` when
/// neither is set.
pub fn default_base() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))?;
    Some(state.join("sessionfs").join("quarantine"))
}

/// The root's folder name: its path with `/` turned into `-`.
fn root_name(root: &Path) -> String {
    let s = root.to_string_lossy();
    let name: String = s
        .chars()
        .map(|c| if c == '/' || c.is_control() { '-' } else { c })
        .collect();
    if name.is_empty() {
        "-".into()
    } else {
        name
    }
}

/// UTC time as `YYYYMMDDTHHMMSS.mmmZ`, then `-<pid>` for uniqueness.
fn time_name() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = now.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}T{:02}{:02}{:02}.{:03}Z-{}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        now.subsec_millis(),
        std::process::id()
    )
}

/// Copies bytes `from..to` of `source` (the transcript at `transcript`,
/// under `root`) into a new folder `base/<root>/<time>/`, as
/// `<project>~<session>~<file>.cut-<from>`, with a `note.txt` saying where
/// they came from; fsyncs both. Returns the copy's path.
///
/// Errors: the I/O error of creating, reading or writing (the caller must
/// then not cut).
pub fn keep(
    base: &Path,
    root: &Path,
    transcript: &Path,
    source: &File,
    from: u64,
    to: u64,
    why: &str,
) -> io::Result<PathBuf> {
    let folder = base.join(root_name(root)).join(time_name());
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&folder)?;
    let rel = transcript.strip_prefix(root).unwrap_or(transcript);
    let flat: String = rel
        .to_string_lossy()
        .chars()
        .map(|c| if c == '/' { '~' } else { c })
        .collect();
    let copy = folder.join(format!("{flat}.cut-{from}"));
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&copy)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut at = from;
    while at < to {
        let want = ((to - at) as usize).min(buf.len());
        let n = source.read_at(&mut buf[..want], at)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{} ended at byte {at} while keeping {from}..{to}",
                    transcript.display()
                ),
            ));
        }
        out.write_all(&buf[..n])?;
        at += n as u64;
    }
    out.sync_all()?;
    let mut note = File::create(folder.join("note.txt"))?;
    writeln!(
        note,
        "bytes {from}..{to} of {}\ncut by sessionfs pid {}: {why}",
        transcript.display(),
        std::process::id()
    )?;
    note.sync_all()?;
    File::open(&folder).and_then(|d| d.sync_all())?;
    Ok(copy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_a_byte_range_outside_the_root() {
        let root = tempfile::tempdir().unwrap();
        let base = tempfile::tempdir().unwrap();
        let t = root.path().join("p/s/session.jsonl.zstd");
        fs::create_dir_all(t.parent().unwrap()).unwrap();
        fs::write(&t, b"0123456789").unwrap();
        let f = File::open(&t).unwrap();
        let copy = keep(base.path(), root.path(), &t, &f, 4, 10, "test").unwrap();
        assert!(copy.starts_with(base.path()));
        assert_eq!(fs::read(&copy).unwrap(), b"456789");
        assert!(copy
            .to_string_lossy()
            .ends_with("p~s~session.jsonl.zstd.cut-4"));
        let name = copy
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(name.contains('T') && name.contains("Z-"), "{name}");
    }
}
