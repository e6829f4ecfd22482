//! The quarantine folder: where bytes that a repair removes (a torn tail
//! cut by `sessionfs check --repair`, a torn frame cut by a lease
//! takeover) and files the doctor sets aside are copied first, outside the
//! root, so that nothing is ever destroyed.
//!
//! Source: MOUNT.md ("Shared roots": quarantine lives outside ROOT, by
//! default `$XDG_STATE_HOME/sessionfs/quarantine/<root>/<time>/`, printed
//! by every command that puts something there).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use super::naming::project_key;

/// One quarantine folder, `<base>/<root>/<time>/`, created for one
/// operation.
#[derive(Debug, Clone)]
pub struct Quarantine {
    dir: PathBuf,
}

/// The quarantine base: `$XDG_STATE_HOME/sessionfs/quarantine`, else
/// `$HOME/.local/state/sessionfs/quarantine`.
///
/// Errors: `NotFound` when neither variable is set to an absolute path.
pub fn base_dir() -> io::Result<PathBuf> {
    let absolute = |var: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    if let Some(state) = absolute("XDG_STATE_HOME") {
        return Ok(state.join("sessionfs/quarantine"));
    }
    if let Some(home) = absolute("HOME") {
        return Ok(home.join(".local/state/sessionfs/quarantine"));
    }
    Err(io::Error::new(
        io::ErrorKind::NotFound,
        "no quarantine folder: set XDG_STATE_HOME or HOME to an absolute path",
    ))
}

/// The folder name of a root: its path as a project key (`/home/a/s` →
/// `--home-a-s--`).
fn root_name(root: &Path) -> String {
    project_key(&root.to_string_lossy()).unwrap_or_else(|_| "--root--".into())
}

/// `YYYYMMDDTHHMMSSZ` of `t` in UTC.
fn stamp(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()) as i64;
    let (days, in_day) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // H. Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        in_day / 3600,
        in_day / 60 % 60,
        in_day % 60
    )
}

/// `rel` with only its normal components (no root, `.` or `..`), so that
/// a copy never lands outside the quarantine folder.
fn contained(rel: &Path) -> PathBuf {
    rel.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect()
}

impl Quarantine {
    /// Creates a new folder `<base>/<root>/<time>[-N]/` (mode 0700) under
    /// [`base_dir`] for bytes taken out of the store at `root`.
    ///
    /// Errors: the base cannot be found or the folder created.
    pub fn create(root: &Path) -> io::Result<Quarantine> {
        Self::create_in(&base_dir()?, root)
    }

    /// [`Quarantine::create`] under an explicit base folder.
    ///
    /// Errors: the folder cannot be created.
    pub fn create_in(base: &Path, root: &Path) -> io::Result<Quarantine> {
        let parent = base.join(root_name(root));
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&parent)?;
        let stamp = stamp(SystemTime::now());
        for n in 0u32.. {
            let name = if n == 0 {
                stamp.clone()
            } else {
                format!("{stamp}-{n}")
            };
            let dir = parent.join(name);
            match fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(Quarantine { dir }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => continue,
                Err(e) => return Err(e),
            }
        }
        unreachable!("the loop returns")
    }

    /// The folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Copies bytes `[start, end)` of `src` to `<folder>/<rel>.bytes-<start>-<end>`
    /// (parent folders created), fsyncs the copy and its folder, and
    /// returns the copy's path. `rel` is the file's path relative to the
    /// root; only its normal components are used.
    ///
    /// Errors: reading `src` (including a file shorter than `end`), creating
    /// or writing the copy.
    pub fn copy_range(&self, src: &File, start: u64, end: u64, rel: &Path) -> io::Result<PathBuf> {
        let rel = contained(rel);
        let name = rel
            .file_name()
            .map_or_else(|| "bytes".into(), |n| n.to_string_lossy().into_owned());
        let dest_dir = match rel.parent() {
            Some(p) => self.dir.join(p),
            None => self.dir.clone(),
        };
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dest_dir)?;
        let dest = dest_dir.join(format!("{name}.bytes-{start}-{end}"));
        let out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&dest)?;
        let len = src.metadata()?.len();
        if len < end {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the file ends at byte {len}, before byte {end}"),
            ));
        }
        copy_sparse(src, start, end, &out)?;
        out.set_len(end - start)?;
        // The original's mode, so that a restore gives it back (the
        // quarantine folder itself is private, 0700).
        out.set_permissions(src.metadata()?.permissions())?;
        out.sync_all()?;
        File::open(&dest_dir)?.sync_all()?;
        Ok(dest)
    }

    /// Appends `text` (one line) to `<folder>/note.txt`, which says where
    /// the folder's bytes came from and why; fsyncs it.
    ///
    /// Errors: creating or writing the note.
    pub fn note(&self, text: &str) -> io::Result<()> {
        let mut note = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(self.dir.join("note.txt"))?;
        writeln!(note, "{text}")?;
        note.sync_all()
    }

    /// Reads back a copy made by [`Quarantine::copy_range`] (for checks).
    ///
    /// Errors: reading it.
    pub fn read(path: &Path) -> io::Result<Vec<u8>> {
        let mut v = Vec::new();
        File::open(path)?.read_to_end(&mut v)?;
        Ok(v)
    }
}

/// The root and the path relative to it of a transcript at `path`:
/// `<root>/<project>/<session>/<file>` when the grandparent is named like
/// a project directory (`--…--` or `_no-cwd`), else its folder and its
/// file name.
pub fn root_and_rel(path: &Path) -> (PathBuf, PathBuf) {
    let parts: Vec<&std::ffi::OsStr> = path.iter().collect();
    if parts.len() >= 4 && super::naming::is_project_dir_os(parts[parts.len() - 3]) {
        let root: PathBuf = parts[..parts.len() - 3].iter().collect();
        let rel: PathBuf = parts[parts.len() - 3..].iter().collect();
        return (root, rel);
    }
    let root = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let rel = path.file_name().map(PathBuf::from).unwrap_or_default();
    (root, rel)
}

/// Copies the file `from` to `to` (created or truncated) with its holes
/// kept ([`copy_sparse`]) and its mode, and fsyncs the copy: what
/// `std::fs::copy` does, without writing out a sparse file in full.
///
/// Errors: opening, reading or writing either file.
pub fn copy_file_sparse(from: &Path, to: &Path) -> io::Result<()> {
    let src = File::open(from)?;
    let meta = src.metadata()?;
    let out = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(to)?;
    copy_sparse(&src, 0, meta.len(), &out)?;
    out.set_len(meta.len())?;
    out.set_permissions(meta.permissions())?;
    out.sync_all()
}

/// Copies bytes `[start, end)` of `src` to `out` at offset 0, leaving
/// holes where `src` has holes (`SEEK_DATA`/`SEEK_HOLE`) and where a
/// 64 KiB block reads as zeros, so that a sparse file of gigabytes costs
/// what it holds on disk. The caller sets the copy's length.
///
/// Errors: reading `src` (a file that shrinks meanwhile: UnexpectedEof),
/// writing `out`.
pub(crate) fn copy_sparse(src: &File, start: u64, end: u64, out: &File) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    const BLOCK: usize = 64 * 1024;
    let mut buf = vec![0u8; BLOCK];
    let mut at = start;
    while at < end {
        // The next byte that holds data (none before the end of the file:
        // u64::MAX; holes not supported: from here).
        let data = super::holes::next_data(src, at);
        if data >= end {
            break;
        }
        // SAFETY: lseek on an open descriptor; the positional reads below
        // do not depend on its offset.
        let hole = unsafe { libc::lseek(src.as_raw_fd(), data as libc::off_t, libc::SEEK_HOLE) };
        let hole = match hole {
            h if h > data as libc::off_t => (h as u64).min(end),
            _ => end,
        };
        let mut pos = data;
        while pos < hole {
            let want = ((hole - pos) as usize).min(BLOCK);
            let n = src.read_at(&mut buf[..want], pos)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the file ended at byte {pos} while it was copied"),
                ));
            }
            if buf[..n].iter().any(|&b| b != 0) {
                out.write_all_at(&buf[..n], pos - start)?;
            }
            pos += n as u64;
        }
        at = hole;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sparse_file_is_copied_with_its_holes_and_exact_bytes() {
        use std::os::unix::fs::MetadataExt;
        let base = tempfile::tempdir().unwrap();
        let src_dir = tempfile::tempdir().unwrap();
        let src = src_dir.path().join("f");
        let f = File::create(&src).unwrap();
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(b"middle", 512 << 20).unwrap();
        f.write_all_at(&[0u8; 200_000], 600 << 20).unwrap(); // written zeros
        f.set_len(1 << 30).unwrap();
        drop(f);
        let q = Quarantine::create_in(base.path(), Path::new("/srv/root")).unwrap();
        let src_file = File::open(&src).unwrap();
        for (start, end) in [(0u64, 1u64 << 30), (2, (512 << 20) + 3)] {
            let dest = q
                .copy_range(&src_file, start, end, Path::new("p/s/f"))
                .unwrap();
            let copy = File::open(&dest).unwrap();
            let meta = copy.metadata().unwrap();
            assert_eq!(meta.len(), end - start);
            assert!(
                meta.blocks() * 512 < 1 << 20,
                "the copy of a sparse file takes {} bytes on disk",
                meta.blocks() * 512
            );
            // Every byte equals the source's: compare the data and a few
            // holes, then the whole file in 1 MiB pieces.
            let mut a = vec![0u8; 1 << 20];
            let mut b = vec![0u8; 1 << 20];
            let mut at = start;
            while at < end {
                let n = ((end - at) as usize).min(a.len());
                src_file.read_exact_at(&mut a[..n], at).unwrap();
                copy.read_exact_at(&mut b[..n], at - start).unwrap();
                assert!(a[..n] == b[..n], "bytes differ in the MiB at {at}");
                at += n as u64;
            }
        }
    }

    #[test]
    fn copies_a_range_under_root_and_time() {
        let base = tempfile::tempdir().unwrap();
        let src_dir = tempfile::tempdir().unwrap();
        let src = src_dir.path().join("f");
        fs::write(&src, b"0123456789").unwrap();
        let q = Quarantine::create_in(base.path(), Path::new("/srv/root")).unwrap();
        assert!(q.dir().starts_with(base.path().join("--srv-root--")));
        let dest = q
            .copy_range(
                &File::open(&src).unwrap(),
                3,
                8,
                Path::new("--p--/s/../session.jsonl.zstd"),
            )
            .unwrap();
        assert!(dest.starts_with(q.dir()));
        assert_eq!(Quarantine::read(&dest).unwrap(), b"34567");
        let second = Quarantine::create_in(base.path(), Path::new("/srv/root")).unwrap();
        assert_ne!(second.dir(), q.dir());
    }

    #[test]
    fn root_of_a_transcript() {
        let (root, rel) = root_and_rel(Path::new("/r/--a--/id/session.jsonl.zstd"));
        assert_eq!(root, Path::new("/r"));
        assert_eq!(rel, Path::new("--a--/id/session.jsonl.zstd"));
        let (root, rel) = root_and_rel(Path::new("/tmp/x/session.jsonl.zstd"));
        assert_eq!(root, Path::new("/tmp/x"));
        assert_eq!(rel, Path::new("session.jsonl.zstd"));
    }

    #[test]
    fn stamps_are_utc() {
        let t = UNIX_EPOCH + std::time::Duration::from_secs(1_796_083_200 + 3661);
        assert_eq!(stamp(t), "20261201T010101Z");
    }
}
