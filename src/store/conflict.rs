//! Sync tools' conflict copies of a transcript (MOUNT.md, The tree): the
//! files Syncthing (`session.sync-conflict-<date>-<time>-<device>.jsonl`
//! and `.jsonl.zstd`), Dropbox and Nextcloud (`session.jsonl (… conflicted
//! copy …)`, with `.zstd` when compressed) leave beside a transcript when
//! two machines changed it at once. The mount shows each read-only and
//! decompressed under its own name without `.zstd`; `sessionfs doctor`
//! reports them and can turn a copy's divergent part into a fork.

use std::ffi::{OsStr, OsString};
use std::path::Path;

use super::transcript::Encoding;

/// Whether `name` is a sync tool's conflict copy of a transcript; its
/// encoding (`.zstd` names are zstd, others raw) if so.
pub fn encoding_of(name: &OsStr) -> Option<Encoding> {
    let n = name.to_str()?;
    let encoding = if n.ends_with(".zstd") {
        Encoding::Zstd
    } else {
        Encoding::Raw
    };
    let syncthing = n.starts_with("session.sync-conflict-")
        && (n.ends_with(".jsonl") || n.ends_with(".jsonl.zstd"));
    let dropbox = n.starts_with("session.jsonl") && n.contains("conflicted copy");
    (syncthing || dropbox).then_some(encoding)
}

/// `name` without its `.zstd` suffix, when it has one.
fn stripped(name: &OsStr) -> Option<&OsStr> {
    name.as_encoded_bytes()
        .strip_suffix(b".zstd")
        // SAFETY: the bytes were an OsStr's, cut before an ASCII suffix.
        .map(|b| unsafe { OsStr::from_encoded_bytes_unchecked(b) })
}

fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

fn is_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.is_file())
}

/// The name the mount shows the conflict copy `name` of directory `dir`
/// under: without `.zstd`, unless a file of that name is there too (then
/// its own name, so that neither hides the other).
pub fn shown_name(dir: &Path, name: &OsStr) -> OsString {
    match stripped(name) {
        Some(short) if !exists(&dir.join(short)) => short.to_os_string(),
        _ => name.to_os_string(),
    }
}

/// The backing name of the conflict copy the mount shows as `shown` in
/// directory `dir` (the inverse of [`shown_name`]), or `None` when no
/// conflict copy is shown under that name: a `.zstd` copy's own name is
/// not, when it is shown without the suffix. Only regular files are
/// conflict copies.
pub fn backing_name(dir: &Path, shown: &OsStr) -> Option<OsString> {
    encoding_of(shown)?;
    if is_file(&dir.join(shown)) {
        if let Some(short) = stripped(shown) {
            if !exists(&dir.join(short)) {
                return None; // shown as `short`
            }
        }
        return Some(shown.to_os_string());
    }
    let mut zstd = shown.to_os_string();
    zstd.push(".zstd");
    (!exists(&dir.join(shown)) && encoding_of(&zstd).is_some() && is_file(&dir.join(&zstd)))
        .then_some(zstd)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYNCTHING: &str = "session.sync-conflict-20260101-120000-ABCDEFG.jsonl";
    const DROPBOX: &str = "session.jsonl (alice's conflicted copy 2026-01-01)";

    #[test]
    fn the_tools_names_are_recognised_with_their_encoding() {
        let zstd = |n: &str| format!("{n}.zstd");
        assert_eq!(encoding_of(OsStr::new(SYNCTHING)), Some(Encoding::Raw));
        assert_eq!(
            encoding_of(OsStr::new(&zstd(SYNCTHING))),
            Some(Encoding::Zstd)
        );
        assert_eq!(encoding_of(OsStr::new(DROPBOX)), Some(Encoding::Raw));
        assert_eq!(
            encoding_of(OsStr::new(&zstd(DROPBOX))),
            Some(Encoding::Zstd)
        );
        for other in [
            "session.jsonl",
            "session.jsonl.zstd",
            "session.v3.jsonl",
            "notes.txt",
        ] {
            assert_eq!(encoding_of(OsStr::new(other)), None, "{other}");
        }
    }

    #[test]
    fn a_copy_is_shown_without_zstd_unless_that_name_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let z = format!("{SYNCTHING}.zstd");
        std::fs::write(d.join(&z), b"").unwrap();
        assert_eq!(shown_name(d, OsStr::new(&z)), SYNCTHING);
        assert_eq!(backing_name(d, OsStr::new(SYNCTHING)).unwrap(), z.as_str());
        assert_eq!(backing_name(d, OsStr::new(&z)), None);
        // A raw copy of the short name as well: each under its own name.
        std::fs::write(d.join(SYNCTHING), b"").unwrap();
        assert_eq!(shown_name(d, OsStr::new(&z)), z.as_str());
        assert_eq!(backing_name(d, OsStr::new(&z)).unwrap(), z.as_str());
        assert_eq!(backing_name(d, OsStr::new(SYNCTHING)).unwrap(), SYNCTHING);
        assert_eq!(backing_name(d, OsStr::new(DROPBOX)), None);
    }
}
