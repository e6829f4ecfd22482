//! Publication of a new session: the header frame and the first batch
//! written into an exclusive temporary file beside the target, fsynced,
//! then published with `link()` (or a no-replace rename where hard links
//! are refused), so that a same-id race loses with an error instead of
//! overwriting.
//!
//! Source: FORMAT.md ("Writing": Lazy creation; "Header line"; "Session
//! directory") and MOUNT.md ("Creating a session"); the reference's
//! `materializePosix`, `writeSyncedTempFile` and `toHeaderLine`.

use std::ffi::{CString, OsStr};
use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

use super::error::{Result, StoreError};
use super::frame::encode_frame;
use super::header::{Header, HEADER_KEY_ORDER};
use super::lines::{split_complete, SeqCursor};
use super::naming::{check_creatable_id, project_dir_name};
use super::transcript::Encoding;

/// `renameat2` flag: fail with EEXIST instead of replacing the target
/// (`linux/fs.h`, as the libc crate exports it).
const RENAME_NOREPLACE: libc::c_uint = libc::RENAME_NOREPLACE;

/// How a new transcript is published without ever replacing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishMethod {
    /// `link(temporary, target)`: the reference's protocol.
    HardLink,
    /// `renameat2(temporary, target, RENAME_NOREPLACE)`: for file systems
    /// that refuse hard links.
    RenameNoReplace,
}

/// Where a new session goes, derived from its header.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionPlan {
    /// The validated header.
    pub header: Header,
    /// Project directory name (`--<key>--` or `_no-cwd`).
    pub project: String,
    /// Session directory name (the encoded id).
    pub session: String,
    /// The session directory (`root/project/session`).
    pub dir: PathBuf,
    /// The transcript to publish (`dir/session.jsonl[.zstd]`).
    pub path: PathBuf,
}

/// Checks the header line of a new session (`line`: exactly one line,
/// ending in `\n`) and derives its place under `root`: a valid version-0
/// header (FORMAT.md, Header line) whose id can be created (non-empty,
/// encoded name of at most 244 bytes).
///
/// Errors: [`StoreError::InvalidLine`] (line 1, EINVAL) for an invalid
/// header; [`StoreError::InvalidName`] (EINVAL) for the empty id;
/// [`StoreError::NameTooLong`] (ENAMETOOLONG) for a too-long encoded id.
pub fn plan_session(root: &Path, encoding: Encoding, line: &[u8]) -> Result<SessionPlan> {
    let invalid = |reason: String| StoreError::InvalidLine {
        path: root.to_path_buf(),
        line: 1,
        reason,
    };
    let (complete, rest) = split_complete(line);
    if !rest.is_empty() || complete.is_empty() {
        return Err(invalid(
            "the session header must be one line ending in a newline".into(),
        ));
    }
    let mut cursor = SeqCursor::new_session();
    let check = cursor
        .check_batch(complete)
        .map_err(|e| e.into_store(root))?;
    if check.lines != 1 {
        return Err(invalid(
            "the session header must be one line, on its own".into(),
        ));
    }
    let Some(header) = check.header else {
        return Err(invalid("the first line is not a session header".into()));
    };
    let session = check_creatable_id(&header.id)?;
    let project = project_dir_name(header.cwd.as_deref())?;
    let dir = root.join(&project).join(&session);
    let path = dir.join(encoding.file_name());
    Ok(SessionPlan {
        header,
        project,
        session,
        dir,
        path,
    })
}

/// Publishes a new session: `header_line` (one line with its `\n`) as the
/// first frame, then `first_batch` (complete event lines from `seq` 0, may
/// be empty) as the second; in raw mode the lines themselves. Returns the
/// transcript's path.
///
/// Steps: check the header ([`plan_session`]) and the batch; refuse when
/// the id already has a transcript (in its own or another project
/// directory); create the missing project and session directories (mode
/// 0700) and fsync their parents; write `<transcript>.<16 hex>.tmp`
/// (`O_CREAT|O_EXCL`, mode 0600) and fsync it; `link()` it to the target —
/// falling back to `renameat2(RENAME_NOREPLACE)` when the file system
/// refuses hard links; fsync the session directory; remove the temporary
/// (on every path).
///
/// Errors: those of [`plan_session`]; [`StoreError::InvalidLine`] /
/// [`StoreError::SeqConflict`] (EINVAL) for the batch (lines numbered from
/// 2, the header being line 1); [`StoreError::AlreadyExists`] (EEXIST) when
/// the id exists or another writer published it first — nothing on disk
/// changes but the directories; [`StoreError::EncodingMismatch`] when the
/// session directory holds a transcript of the other encoding;
/// [`StoreError::PublishUnsupported`] when neither method works;
/// [`StoreError::Io`].
pub fn publish_session(
    root: &Path,
    encoding: Encoding,
    header_line: &[u8],
    first_batch: &[u8],
) -> Result<PathBuf> {
    publish_session_using(root, encoding, header_line, first_batch, None)
}

/// [`publish_session`] with the method forced (`Some`) instead of tried in
/// order (`None`: hard link, then no-replace rename). For tests, and for a
/// mount that probed its root ([`probe_publication_support`]).
///
/// Errors: as [`publish_session`].
pub fn publish_session_using(
    root: &Path,
    encoding: Encoding,
    header_line: &[u8],
    first_batch: &[u8],
    method: Option<PublishMethod>,
) -> Result<PathBuf> {
    let plan = plan_session(root, encoding, header_line)?;
    let path = &plan.path;
    let mut cursor = SeqCursor::after(0);
    let check = cursor
        .check_batch(first_batch)
        .map_err(|e| e.shifted(1).into_store(path))?;
    if first_batch.last().is_some_and(|&b| b != b'\n') {
        return Err(StoreError::InvalidLine {
            path: path.clone(),
            line: check.lines + 2,
            reason: "the line has no newline at its end (a batch holds complete lines only)".into(),
        });
    }
    check_session_absent(root, encoding, &plan)?;

    let project_dir = root.join(&plan.project);
    ensure_dir(&project_dir, root)?;
    ensure_dir(&plan.dir, &project_dir)?;

    let content = match encoding {
        Encoding::Zstd => {
            let mut c =
                encode_frame(header_line).map_err(|e| StoreError::io("compress", path, e))?;
            if !first_batch.is_empty() {
                c.extend(
                    encode_frame(first_batch).map_err(|e| StoreError::io("compress", path, e))?,
                );
            }
            c
        }
        Encoding::Raw => [header_line, first_batch].concat(),
    };
    let temp = TempFile::create(&plan.dir, encoding.file_name(), &content)?;
    publish_file(root, &temp.path, path, method)?;
    sync_dir(&plan.dir)?;
    drop(temp);
    Ok(plan.path)
}

/// Refuses a session whose id already has a transcript: in its own
/// directory, or under the same encoded id in another project directory
/// (ids are unique across the root, FORMAT.md Identity rules).
fn check_session_absent(root: &Path, encoding: Encoding, plan: &SessionPlan) -> Result<()> {
    let opposite = plan.dir.join(encoding.opposite().file_name());
    if exists(&opposite) {
        return Err(StoreError::EncodingMismatch {
            path: opposite,
            root_is_zstd: encoding == Encoding::Zstd,
        });
    }
    if exists(&plan.path) {
        return Err(StoreError::AlreadyExists {
            path: plan.path.clone(),
        });
    }
    let projects = match fs::read_dir(root) {
        Ok(entries) => entries,
        Err(e) => return Err(StoreError::io("read directory", root, e)),
    };
    for entry in projects.flatten() {
        if entry.file_name() == OsStr::new(&plan.project) {
            continue;
        }
        let dir = entry.path().join(&plan.session);
        for name in [Encoding::Zstd.file_name(), Encoding::Raw.file_name()] {
            let other = dir.join(name);
            if exists(&other) {
                return Err(StoreError::AlreadyExists { path: other });
            }
        }
    }
    Ok(())
}

fn exists(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// Creates `dir` (mode 0700) when missing, then fsyncs `parent` so that its
/// entry is durable (also when another writer created it and may not have
/// synced yet).
fn ensure_dir(dir: &Path, parent: &Path) -> Result<()> {
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let meta = fs::metadata(dir).map_err(|e| StoreError::io("stat", dir, e))?;
            if !meta.is_dir() {
                return Err(StoreError::io(
                    "create directory",
                    dir,
                    io::Error::from_raw_os_error(libc::ENOTDIR),
                ));
            }
        }
        Err(e) => return Err(StoreError::io("create directory", dir, e)),
    }
    sync_dir(parent)
}

/// fsyncs a directory, so that entries just created in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io("fsync directory", dir, e))
}

/// An exclusive temporary file, removed when dropped.
struct TempFile {
    path: PathBuf,
}

impl TempFile {
    /// Creates `dir/<base>.<16 hex>.tmp` exclusively (mode 0600), writes
    /// `content` and fsyncs it.
    fn create(dir: &Path, base: &str, content: &[u8]) -> Result<TempFile> {
        let mut attempt = 0;
        let (path, mut file) = loop {
            let path = dir.join(format!("{base}.{}.tmp", random_hex16()));
            let opened = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .custom_flags(libc::O_CLOEXEC)
                .open(&path);
            match opened {
                Ok(file) => break (path, file),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempt < 8 => attempt += 1,
                Err(e) => return Err(StoreError::io("create temporary", &path, e)),
            }
        };
        let temp = TempFile { path };
        file.write_all(content)
            .map_err(|e| StoreError::io("write temporary", &temp.path, e))?;
        file.sync_all()
            .map_err(|e| StoreError::io("fsync temporary", &temp.path, e))?;
        Ok(temp)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Err(e) = fs::remove_file(&self.path) {
            if e.kind() != io::ErrorKind::NotFound {
                log::warn!(
                    "{}: could not remove the publication temporary ({e}); it is never shown \
                     and may be deleted",
                    self.path.display()
                );
            }
        }
    }
}

/// 16 random hex digits (64 bits from the kernel's generator; a time,
/// process and counter mix if that fails — `O_EXCL` keeps names unique
/// either way).
fn random_hex16() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 8];
    let ok = File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok();
    let value = if ok {
        u64::from_le_bytes(bytes)
    } else {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mix = nanos ^ (u64::from(std::process::id()) << 32);
        mix.wrapping_add(COUNTER.fetch_add(1, Ordering::Relaxed))
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
    };
    format!("{value:016x}")
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// `renameat2(from, to, RENAME_NOREPLACE)`.
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    renameat2(from, to, RENAME_NOREPLACE)
}

/// `renameat2(2)` of two paths with `flags` (`RENAME_NOREPLACE`: EEXIST
/// when `to` exists, decided atomically by the file system).
///
/// Errors: the call's own; EINVAL for a path holding a NUL byte.
pub(crate) fn renameat2(from: &Path, to: &Path, flags: libc::c_uint) -> io::Result<()> {
    let (from, to) = (c_path(from)?, c_path(to)?);
    // SAFETY: both strings are valid NUL-terminated paths for the call.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            flags,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether a `link()` error means "this file system makes no hard links".
fn link_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPERM | libc::EOPNOTSUPP | libc::ENOSYS | libc::EMLINK)
    )
}

/// Whether a `renameat2` error means "no such flag here".
fn rename_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
    )
}

/// Whether a failed `link`/`rename` onto `target` lost to another
/// publisher: the target exists now and is not `temp` (network clients
/// report the server's refusal as EPERM or EIO rather than EEXIST; sshfs
/// maps SFTP's generic failure to EPERM).
fn lost_to_another(temp: &Path, target: &Path) -> bool {
    let Ok(t) = fs::symlink_metadata(target) else {
        return false;
    };
    match fs::symlink_metadata(temp) {
        Ok(m) => !(m.dev() == t.dev() && m.ino() == t.ino()),
        Err(_) => true,
    }
}

/// Publishes `temp` as `target`, never replacing an existing target.
fn publish_file(
    root: &Path,
    temp: &Path,
    target: &Path,
    method: Option<PublishMethod>,
) -> Result<()> {
    let exists = |e: &io::Error| e.kind() == io::ErrorKind::AlreadyExists;
    if method != Some(PublishMethod::RenameNoReplace) {
        match fs::hard_link(temp, target) {
            Ok(()) => return Ok(()),
            Err(e) if exists(&e) || lost_to_another(temp, target) => {
                log::debug!(
                    "{}: link() refused ({e}); the target exists",
                    target.display()
                );
                return Err(StoreError::AlreadyExists {
                    path: target.to_path_buf(),
                });
            }
            Err(e) if method.is_none() && link_unsupported(&e) => {
                log::debug!(
                    "{}: link() refused ({e}); publishing with renameat2(RENAME_NOREPLACE)",
                    target.display()
                );
            }
            Err(e) => return Err(StoreError::io("link", target, e)),
        }
    }
    match rename_noreplace(temp, target) {
        Ok(()) => Ok(()),
        Err(e) if exists(&e) || lost_to_another(temp, target) => Err(StoreError::AlreadyExists {
            path: target.to_path_buf(),
        }),
        Err(e) if rename_unsupported(&e) => Err(StoreError::PublishUnsupported {
            root: root.to_path_buf(),
            reason: format!("link() is refused and renameat2(RENAME_NOREPLACE) fails: {e}"),
        }),
        Err(e) => Err(StoreError::io("rename (no replace)", target, e)),
    }
}

/// Checks how new sessions can be published under `root` (the mount does
/// not call it: it writes nothing into ROOT at start-up, and finds the
/// method at its first publication, in [`publish_session`]):
/// tries `link()` between two probe files directly in the root (files
/// there are not part of the store and are never shown), then a
/// `renameat2(RENAME_NOREPLACE)` that must refuse to replace. Removes the
/// probe files.
///
/// Errors: [`StoreError::PublishUnsupported`] (EOPNOTSUPP) when neither
/// works; [`StoreError::Io`] when the root is not writable.
pub fn probe_publication_support(root: &Path) -> Result<PublishMethod> {
    let base = format!(".sessionfs-probe-{}", random_hex16());
    let first = TempFile::create(root, &base, b"")?;
    let target = TempFile {
        path: root.join(format!("{base}.target")),
    };
    match fs::hard_link(&first.path, &target.path) {
        Ok(()) => return Ok(PublishMethod::HardLink),
        Err(e) if link_unsupported(&e) => {}
        Err(e) => return Err(StoreError::io("link (probe)", &target.path, e)),
    }
    let link_error = "link() is refused";
    match rename_noreplace(&first.path, &target.path) {
        Ok(()) => {}
        Err(e) if rename_unsupported(&e) => {
            return Err(StoreError::PublishUnsupported {
                root: root.to_path_buf(),
                reason: format!("{link_error} and renameat2(RENAME_NOREPLACE) fails: {e}"),
            })
        }
        Err(e) => return Err(StoreError::io("rename (probe)", &target.path, e)),
    }
    // The target exists now: a second no-replace rename onto it must fail.
    let second = TempFile::create(root, &base, b"")?;
    match rename_noreplace(&second.path, &target.path) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(PublishMethod::RenameNoReplace),
        Ok(()) => Err(StoreError::PublishUnsupported {
            root: root.to_path_buf(),
            reason: format!(
                "{link_error} and renameat2(RENAME_NOREPLACE) replaced an existing file"
            ),
        }),
        Err(e) => Err(StoreError::PublishUnsupported {
            root: root.to_path_buf(),
            reason: format!("{link_error} and renameat2(RENAME_NOREPLACE) fails: {e}"),
        }),
    }
}

/// The header line of `header` (with its `\n`), as the reference writes it:
/// see [`header_line_from_fields`].
pub fn header_line(header: &Header) -> Vec<u8> {
    header_line_from_fields(&header.fields)
}

/// A header line (with its `\n`) from header fields (a header object, or
/// the reference's create `meta`, which has no `type`), as the reference's
/// `toHeaderLine` writes it: keys in [`HEADER_KEY_ORDER`], `type` always
/// "session", `delegationDepth` 0 when absent, absent optional keys
/// omitted, keys outside that list dropped.
pub fn header_line_from_fields(fields: &Map<String, Value>) -> Vec<u8> {
    let mut out = Map::new();
    for key in HEADER_KEY_ORDER {
        let value = match key {
            "type" => Some(Value::from("session")),
            "delegationDepth" => Some(fields.get(key).cloned().unwrap_or(Value::from(0))),
            _ => fields.get(key).cloned(),
        };
        if let Some(value) = value {
            out.insert(key.to_string(), value);
        }
    }
    let mut line = serde_json::to_vec(&Value::Object(out)).unwrap_or_default();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::header::parse_header;

    fn header(id: &str, cwd: Option<&str>) -> Vec<u8> {
        let mut fields = Map::new();
        fields.insert("version".into(), 0.into());
        fields.insert("id".into(), id.into());
        fields.insert("createdAt".into(), 1_767_603_600_000u64.into());
        if let Some(cwd) = cwd {
            fields.insert("cwd".into(), cwd.into());
        }
        header_line_from_fields(&fields)
    }

    fn ev(seq: u64) -> String {
        format!("{{\"type\":\"x\",\"seq\":{seq},\"time\":1,\"data\":{{}}}}\n")
    }

    #[test]
    fn header_lines_follow_the_reference_key_order() {
        let meta: Map<String, Value> = serde_json::from_str(
            r#"{"agentPreset":"explore","delegationDepth":1,"origin":"subagent","parentSession":"p","cwd":"/w","createdAt":5,"id":"s","version":0,"extra":1}"#,
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(header_line_from_fields(&meta)).unwrap(),
            "{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":5,\"cwd\":\"/w\",\
             \"parentSession\":\"p\",\"origin\":\"subagent\",\"delegationDepth\":1,\
             \"agentPreset\":\"explore\"}\n"
        );
        let line = header("a", None);
        assert_eq!(
            line,
            b"{\"type\":\"session\",\"version\":0,\"id\":\"a\",\"createdAt\":1767603600000,\"delegationDepth\":0}\n"
        );
        let h = parse_header(&line[..line.len() - 1]).unwrap();
        assert_eq!(header_line(&h), line);
    }

    #[test]
    fn publishes_with_either_method() {
        for method in [
            None,
            Some(PublishMethod::HardLink),
            Some(PublishMethod::RenameNoReplace),
        ] {
            let root = tempfile::tempdir().unwrap();
            let h = header("s-1", Some("/home/a/app"));
            let batch = format!("{}{}", ev(0), ev(1));
            let path =
                publish_session_using(root.path(), Encoding::Zstd, &h, batch.as_bytes(), method)
                    .unwrap();
            assert_eq!(
                path,
                root.path().join("--home-a-app--/s-1/session.jsonl.zstd")
            );
            let bytes = fs::read(&path).unwrap();
            let mut expected = encode_frame(&h).unwrap();
            expected.extend(encode_frame(batch.as_bytes()).unwrap());
            assert_eq!(bytes, expected);
            let names: Vec<_> = fs::read_dir(path.parent().unwrap())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, vec![OsStr::new("session.jsonl.zstd")]);
            let e =
                publish_session_using(root.path(), Encoding::Zstd, &h, b"", method).unwrap_err();
            assert!(matches!(e, StoreError::AlreadyExists { .. }), "{e}");
            assert_eq!(e.errno(), libc::EEXIST);
            assert_eq!(fs::read(&path).unwrap(), expected);
        }
    }

    #[test]
    fn raw_publication_and_header_only_sessions() {
        let root = tempfile::tempdir().unwrap();
        let h = header(".", None);
        let path = publish_session(root.path(), Encoding::Raw, &h, b"").unwrap();
        assert_eq!(path, root.path().join("_no-cwd/~002E/session.jsonl"));
        assert_eq!(fs::read(&path).unwrap(), h);
    }

    #[test]
    fn refusals() {
        let root = tempfile::tempdir().unwrap();
        let cases: Vec<(Vec<u8>, Vec<u8>, i32)> = vec![
            (header("", None), Vec::new(), libc::EINVAL),
            (
                header(&"x".repeat(245), None),
                Vec::new(),
                libc::ENAMETOOLONG,
            ),
            (
                header(&"é".repeat(49), Some("/w")),
                Vec::new(),
                libc::ENAMETOOLONG,
            ),
            (
                b"{\"type\":\"x\",\"seq\":0}\n".to_vec(),
                Vec::new(),
                libc::EINVAL,
            ),
            (header("a", None)[..10].to_vec(), Vec::new(), libc::EINVAL),
            (
                [header("a", None), ev(0).into_bytes()].concat(),
                Vec::new(),
                libc::EINVAL,
            ),
            (header("a", None), ev(1).into_bytes(), libc::EINVAL),
            (
                header("a", None),
                b"{\"type\":\"x\",\"seq\":0}".to_vec(),
                libc::EINVAL,
            ),
            (header("a", None), b"nope\n".to_vec(), libc::EINVAL),
        ];
        for (h, batch, errno) in cases {
            let e = publish_session(root.path(), Encoding::Zstd, &h, &batch).unwrap_err();
            assert_eq!(e.errno(), errno, "{e}");
        }
        let e = publish_session(
            root.path(),
            Encoding::Zstd,
            &header(&"x".repeat(245), None),
            b"",
        )
        .unwrap_err();
        assert!(e.to_string().contains("244"), "{e}");
        let e = publish_session(
            root.path(),
            Encoding::Zstd,
            &header("a", None),
            format!("{}{}", ev(0), ev(2)).as_bytes(),
        )
        .unwrap_err();
        assert!(matches!(e, StoreError::SeqConflict { line: 3, .. }), "{e}");
        assert_eq!(
            fs::read_dir(root.path()).unwrap().count(),
            0,
            "nothing created"
        );
    }

    #[test]
    fn an_id_in_another_project_already_exists() {
        let root = tempfile::tempdir().unwrap();
        publish_session(
            root.path(),
            Encoding::Zstd,
            &header("same", Some("/a")),
            b"",
        )
        .unwrap();
        let e = publish_session(
            root.path(),
            Encoding::Zstd,
            &header("same", Some("/b")),
            b"",
        )
        .unwrap_err();
        assert!(matches!(e, StoreError::AlreadyExists { .. }), "{e}");
    }

    #[test]
    fn publishing_never_replaces_a_target() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("session.jsonl.zstd");
        fs::write(&target, b"old").unwrap();
        for method in [PublishMethod::HardLink, PublishMethod::RenameNoReplace] {
            let temp = TempFile::create(dir.path(), "session.jsonl.zstd", b"new").unwrap();
            let e = publish_file(dir.path(), &temp.path, &target, Some(method)).unwrap_err();
            assert!(matches!(e, StoreError::AlreadyExists { .. }), "{e}");
            assert_eq!(fs::read(&target).unwrap(), b"old");
            drop(temp);
        }
        assert_eq!(
            fs::read_dir(dir.path()).unwrap().count(),
            1,
            "temporaries removed"
        );
    }

    #[test]
    fn a_refusal_onto_an_existing_name_is_recognised_as_a_lost_race() {
        let dir = tempfile::tempdir().unwrap();
        let temp = dir.path().join("t.tmp");
        let target = dir.path().join("session.jsonl.zstd");
        fs::write(&temp, b"mine").unwrap();
        assert!(!lost_to_another(&temp, &target), "no target: a real error");
        fs::hard_link(&temp, &target).unwrap();
        assert!(!lost_to_another(&temp, &target), "the target is ours");
        fs::remove_file(&target).unwrap();
        fs::write(&target, b"theirs").unwrap();
        assert!(lost_to_another(&temp, &target), "another publisher's file");
    }

    #[test]
    fn probe_finds_hard_links_here_and_cleans_up() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(
            probe_publication_support(root.path()).unwrap(),
            PublishMethod::HardLink
        );
        assert_eq!(fs::read_dir(root.path()).unwrap().count(), 0);
    }
}
