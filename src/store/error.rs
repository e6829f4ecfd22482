//! The store's one error type. Every variant names the path it concerns and
//! says what to do; [`StoreError::errno`] is the single place where a store
//! error becomes an errno for the FUSE adapter.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

/// Errors of the store layer. Each variant carries the path it is about.
#[derive(Debug)]
pub enum StoreError {
    /// An I/O call on `path` failed (`op` names the call, e.g. "open").
    /// errno: the OS error's own code, EIO when it has none.
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    /// A regular file `<project>/<name>.jsonl[.zstd]`: the retired flat
    /// layout (FORMAT.md, Layout). errno: EIO.
    FlatArtifact { path: PathBuf },
    /// A transcript of the other encoding than the root's (FORMAT.md,
    /// Layout). errno: EIO.
    EncodingMismatch { path: PathBuf, root_is_zstd: bool },
    /// `--compression` asked for an encoding the root holds no transcript
    /// of, while it holds transcripts of the other (`example` is one):
    /// every transcript would be a mismatch and new sessions would be
    /// written in the other encoding (FORMAT.md, Layout: a root holds one
    /// encoding). Raised by [`crate::store::Store::open`]. errno: EINVAL.
    CompressionContradicts {
        root: PathBuf,
        asked_zstd: bool,
        example: PathBuf,
    },
    /// The same session directory name in several project directories
    /// (FORMAT.md, Identity rules). errno: EIO.
    DuplicateId { id_dir: String, paths: Vec<PathBuf> },
    /// The header's id and cwd derive another path than the one the
    /// transcript was found at (FORMAT.md, Identity rules). errno: EIO.
    Misplaced { path: PathBuf, expected: PathBuf },
    /// Empty file, or a first frame that is not exactly one valid header
    /// line (FORMAT.md, Reading and recovery). errno: EIO.
    HeaderLess { path: PathBuf, reason: String },
    /// Structural or checksum corruption at byte `offset` of the backing
    /// file (FORMAT.md, Reading and recovery). errno: EIO.
    Corrupt {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
    /// A header `version` other than 0, or a transcript under another name
    /// such as `session.v3.jsonl.zstd` (FORMAT.md, Decisions). errno: EIO.
    UnsupportedVersion { path: PathBuf, detail: String },
    /// A name that is not a canonical project key or encoded session id.
    /// errno: EINVAL.
    InvalidName { name: String, reason: String },
    /// A session id whose encoded name is too long to be read back by the
    /// reference (FORMAT.md, Session directory). errno: ENAMETOOLONG.
    NameTooLong { name: String, reason: String },
    /// An id that names several sessions (IDENTITY.md §2): by body, or as
    /// a duplicate. errno: EIO.
    AmbiguousId { wanted: String, reason: String },
    /// No such entry. errno: ENOENT.
    NotFound { path: PathBuf },
    /// Line `line` (1-based within the written batch) of a write to `path`
    /// is not one valid record: not UTF-8, not exactly one JSON object, no
    /// valid `seq`, a malformed packed chunk row, or an invalid header
    /// (FORMAT.md, Event lines; MOUNT.md, Appending). errno: EINVAL.
    InvalidLine {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    /// Line `line` of a write to `path` does not continue the transcript:
    /// its first `seq` is `found`, the transcript continues at `expected`
    /// (FORMAT.md, Writing: Continuity). errno: EINVAL.
    SeqConflict {
        path: PathBuf,
        line: usize,
        expected: u64,
        found: u64,
    },
    /// The last frame (or raw line) of `path`, starting at byte `offset`,
    /// is incomplete and stayed so: the mount never truncates, so nothing
    /// is appended (MOUNT.md, Appending). errno: EIO.
    TornTail { path: PathBuf, offset: u64 },
    /// The transcript is damaged after its header frame and the damage is
    /// not a torn tail: the walk fails at byte `at` (`reason`), and
    /// verifiable data resumes at `resumes_at` when known (MOUNT.md, The
    /// tree). Reads at or past the damage and appends fail; nothing is
    /// ever cut. errno: EIO.
    Damaged {
        path: PathBuf,
        at: u64,
        resumes_at: Option<u64>,
        reason: String,
        /// Every byte from `at` to the end was examined and no verifiable
        /// frame starts there: trailing garbage, which `sessionfs doctor
        /// --repair` cuts when no complete frame starts in it.
        nothing_verifiable_follows: bool,
    },
    /// The header line is longer than `limit` bytes (the most sessionfs
    /// holds of one line): its own error, not a header-less file. errno:
    /// EIO.
    HeaderLineTooLong { path: PathBuf, limit: u64 },
    /// The transcript's last committed line, in the frame (zstd) or at the
    /// byte (raw) `offset`, is longer than `limit` bytes, more than
    /// sessionfs holds to learn the next `seq`: the transcript is intact
    /// and reads as it is, but cannot be continued through sessionfs.
    /// errno: EFBIG (as a written line over the limit).
    LastLineTooLong {
        path: PathBuf,
        offset: u64,
        limit: u64,
    },
    /// A session with this id already exists at `path`: a publication lost
    /// the same-id race, or the id was created twice (FORMAT.md, Writing).
    /// errno: EEXIST.
    AlreadyExists { path: PathBuf },
    /// The file system of `root` can neither make hard links nor rename
    /// without replacing, so new sessions cannot be published safely
    /// (MOUNT.md, Creating a session). errno: EOPNOTSUPP.
    PublishUnsupported { root: PathBuf, reason: String },
    /// The session's lock file (`.sessionfs.lock`, MOUNT.md "Shared
    /// roots") stayed held by a live holder (`holder` describes it) for the
    /// whole wait. Nothing was written. errno: EAGAIN.
    LockBusy {
        path: PathBuf,
        holder: String,
        waited: std::time::Duration,
    },
    /// The commit protocol met something it cannot prove safe (the lease
    /// expired, the path names another file, the frame read back differs,
    /// ...): the batch is not acknowledged (MOUNT.md "Shared roots").
    /// `found` says what was found. errno: EIO.
    CommitFailed { path: PathBuf, found: String },
}

/// A path as messages show it: control characters (a newline in a name)
/// escaped, so that one message stays one log line.
pub struct Shown<'a>(pub &'a Path);

impl fmt::Display for Shown<'_> {
    /// Control characters escaped (`\n`, `\u{1b}`), and each byte that is
    /// not UTF-8 as `\xNN` (the bytes of the real name, which bash reads
    /// back inside `$'…'`), never as U+FFFD.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use std::os::unix::ffi::OsStrExt;
        for chunk in self.0.as_os_str().as_bytes().utf8_chunks() {
            for c in chunk.valid().chars() {
                if c.is_control() {
                    write!(f, "{}", c.escape_default())?;
                } else {
                    write!(f, "{c}")?;
                }
            }
            for b in chunk.invalid() {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

/// A path as a word of a bash command line, for the commands messages
/// suggest: `'…'` (a `'` written `'\''`) when it is UTF-8 without control
/// characters, else `$'…'` with each such byte or character escaped
/// (`\xNN`, `\n`), which bash reads back as the real name.
pub struct ShellArg<'a>(pub &'a Path);

impl fmt::Display for ShellArg<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use std::os::unix::ffi::OsStrExt;
        let bytes = self.0.as_os_str().as_bytes();
        match std::str::from_utf8(bytes) {
            Ok(s) if !s.chars().any(char::is_control) => {
                write!(f, "'{}'", s.replace('\'', "'\\''"))
            }
            _ => {
                f.write_str("$'")?;
                for chunk in bytes.utf8_chunks() {
                    for c in chunk.valid().chars() {
                        match c {
                            '\'' | '\\' => write!(f, "\\{c}")?,
                            c if c.is_control() && (c as u32) < 0x80 => {
                                write!(f, "\\x{:02x}", c as u32)?
                            }
                            c if c.is_control() => {
                                let mut buf = [0u8; 4];
                                for b in c.encode_utf8(&mut buf).bytes() {
                                    write!(f, "\\x{b:02x}")?;
                                }
                            }
                            c => write!(f, "{c}")?,
                        }
                    }
                    for b in chunk.invalid() {
                        write!(f, "\\x{b:02x}")?;
                    }
                }
                f.write_str("'")
            }
        }
    }
}

/// Result alias of the store layer.
pub type Result<T> = std::result::Result<T, StoreError>;

impl StoreError {
    /// Wraps an I/O error with the call and the path it concerns.
    pub fn io(op: &'static str, path: &Path, source: io::Error) -> Self {
        if source.kind() == io::ErrorKind::NotFound {
            return StoreError::NotFound {
                path: path.to_path_buf(),
            };
        }
        StoreError::Io {
            op,
            path: path.to_path_buf(),
            source,
        }
    }

    /// Structural or checksum corruption of `path` at `offset`.
    pub fn corrupt(path: &Path, offset: u64, reason: impl Into<String>) -> Self {
        StoreError::Corrupt {
            path: path.to_path_buf(),
            offset,
            reason: reason.into(),
        }
    }

    /// A frame walk or decode failure of `path`: corruption, or the read's
    /// I/O error.
    pub fn from_frame(path: &Path, e: super::frame::FrameError) -> Self {
        match e {
            super::frame::FrameError::Io(source) => StoreError::io("read", path, source),
            super::frame::FrameError::Corrupt { offset, reason } => {
                StoreError::corrupt(path, offset, reason)
            }
        }
    }

    /// A header-less or invalid-header transcript.
    pub fn header_less(path: &Path, reason: impl Into<String>) -> Self {
        StoreError::HeaderLess {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// The errno the FUSE adapter replies with for this error.
    pub fn errno(&self) -> i32 {
        match self {
            StoreError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            StoreError::NotFound { .. } => libc::ENOENT,
            StoreError::InvalidName { .. }
            | StoreError::CompressionContradicts { .. }
            | StoreError::InvalidLine { .. }
            | StoreError::SeqConflict { .. } => libc::EINVAL,
            StoreError::TornTail { .. } => libc::EIO,
            StoreError::AlreadyExists { .. } => libc::EEXIST,
            StoreError::PublishUnsupported { .. } => libc::EOPNOTSUPP,
            StoreError::LockBusy { .. } => libc::EAGAIN,
            StoreError::CommitFailed { .. } => libc::EIO,
            StoreError::NameTooLong { .. } => libc::ENAMETOOLONG,
            StoreError::LastLineTooLong { .. } => libc::EFBIG,
            StoreError::FlatArtifact { .. }
            | StoreError::EncodingMismatch { .. }
            | StoreError::DuplicateId { .. }
            | StoreError::Misplaced { .. }
            | StoreError::HeaderLess { .. }
            | StoreError::Damaged { .. }
            | StoreError::HeaderLineTooLong { .. }
            | StoreError::Corrupt { .. }
            | StoreError::UnsupportedVersion { .. }
            | StoreError::AmbiguousId { .. } => libc::EIO,
        }
    }
    /// The line (1-based, within the checked write) a refusal of a line's
    /// content names: [`StoreError::InvalidLine`] and
    /// [`StoreError::SeqConflict`]; `None` for every other error.
    pub fn refused_line(&self) -> Option<usize> {
        match self {
            StoreError::InvalidLine { line, .. } | StoreError::SeqConflict { line, .. } => {
                Some(*line)
            }
            _ => None,
        }
    }

    /// Whether this error means the entry is damaged or refused (worth a
    /// warning in the log), as opposed to simply absent.
    pub fn is_damage(&self) -> bool {
        !matches!(self, StoreError::NotFound { .. })
    }
}

/// A frame refused for its window only (a header frame's `Corrupt`, a later
/// frame's `Damaged`): what `check` and the doctor's `window_too_large`
/// finding say, not damage.
fn window_too_large(f: &mut fmt::Formatter<'_>, path: &Path, at: u64, reason: &str) -> fmt::Result {
    write!(
        f,
        "{}: the frame at byte {at} cannot be read here ({reason}); {}",
        Shown(path),
        super::decode::window_note()
    )
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Io { op, path, source } => {
                write!(f, "{op} {}: {source}", Shown(path))
            }
            StoreError::FlatArtifact { path } => write!(
                f,
                "{} uses the retired flat-file layout; move it into \
                 <project>/<session-id>/session.jsonl[.zstd] (or use a separate root)",
                Shown(path)
            ),
            StoreError::EncodingMismatch { path, root_is_zstd } => {
                let (found, root) = if *root_is_zstd {
                    ("raw .jsonl", "zstd")
                } else {
                    (".jsonl.zstd", "raw")
                };
                write!(
                    f,
                    "{} is a {found} transcript in a {root} root; use a separate root \
                     for it or mount with the matching --compression",
                    Shown(path)
                )
            }
            StoreError::CompressionContradicts {
                root,
                asked_zstd,
                example,
            } => {
                let (asked, held) = if *asked_zstd {
                    ("zstd", "raw .jsonl")
                } else {
                    ("none", ".jsonl.zstd")
                };
                write!(
                    f,
                    "--compression {asked} contradicts root {}: it holds {held} transcripts \
                     only (for example {}), which would all fail with EIO, and new sessions \
                     would be written in the other encoding; drop --compression to use the \
                     root's own encoding",
                    Shown(root),
                    Shown(example)
                )
            }
            StoreError::DuplicateId { id_dir, paths } => {
                let list: Vec<String> = paths.iter().map(|p| Shown(p).to_string()).collect();
                write!(
                    f,
                    "duplicate session id {id_dir:?} in several project directories ({}); \
                     remove or move all but one",
                    list.join(", ")
                )
            }
            StoreError::Misplaced { path, expected } => write!(
                f,
                "{}: header id and cwd identify {}; move the session directory there",
                Shown(path),
                Shown(expected)
            ),
            StoreError::HeaderLess { path, reason } if reason.starts_with("not a regular file") => {
                write!(
                    f,
                    "{}: {reason} where the transcript belongs; move it out of the root (until \
                     a transcript is there, the session's session.jsonl and session.md fail \
                     with EIO)",
                    Shown(path)
                )
            }
            StoreError::HeaderLess { path, reason } => write!(
                f,
                "{}: empty or header-less transcript ({reason}); restore it from a backup \
                 or move it out of the root",
                Shown(path)
            ),
            StoreError::Corrupt {
                path,
                offset,
                reason,
            } => {
                if super::decode::is_window_too_large(reason) {
                    return window_too_large(f, path, *offset, reason);
                }
                write!(
                    f,
                    "{}: corrupt at byte {offset} ({reason}); run `sessionfs check` on it \
                     or restore it from a backup",
                    Shown(path)
                )
            }
            StoreError::UnsupportedVersion { path, detail } => write!(
                f,
                "{}: unsupported session format version ({detail}); read it with the \
                 harness version that wrote it",
                Shown(path)
            ),
            StoreError::InvalidName { name, reason } => write!(f, "{name:?}: {reason}"),
            StoreError::NameTooLong { name, reason } => write!(f, "{name:?}: {reason}"),
            StoreError::AmbiguousId { reason, .. } => write!(f, "{reason}"),
            StoreError::NotFound { path } => write!(f, "{}: not found", Shown(path)),
            StoreError::InvalidLine { path, line, reason } => write!(
                f,
                "{}: line {line} of the write refused ({reason}); write one JSON object \
                 per line, each with the next seq, and end it with a newline",
                Shown(path)
            ),
            StoreError::SeqConflict {
                path,
                line,
                expected,
                found,
            } => {
                // A seq already in the transcript is what a concurrent
                // append produces; a seq past the end is a gap in the batch.
                let why = if found < expected {
                    format!(
                        "seq {found} is already in the transcript (another writer may have \
                         appended it)"
                    )
                } else {
                    format!(
                        "seq {found} would leave a gap (seq {expected} to {} are missing)",
                        found - 1
                    )
                };
                write!(
                    f,
                    "{}: line {line} of the write has seq {found}, expected seq {expected}: \
                     {why}; re-read the end of the transcript and number the batch from seq \
                     {expected}",
                    Shown(path)
                )
            }
            StoreError::TornTail { path, offset } => {
                // A raw transcript (`session.jsonl`) is torn in a line.
                let what = if path.extension().is_some_and(|e| e == "zstd") {
                    "frame"
                } else {
                    "line"
                };
                write!(
                    f,
                    "{}: the last {what}, at byte {offset}, is incomplete (a crashed or still \
                     running writer); nothing was appended, and the mount never truncates: \
                     stop other writers of this session, then run `sessionfs check --repair {}`",
                    Shown(path),
                    ShellArg(path)
                )
            }
            StoreError::Damaged {
                path,
                at,
                resumes_at,
                reason,
                nothing_verifiable_follows,
            } => {
                if super::decode::is_window_too_large(reason) {
                    return window_too_large(f, path, *at, reason);
                }
                write!(f, "{}: damaged at byte {at} ({reason})", Shown(path))?;
                if let Some(r) = resumes_at {
                    write!(f, "; verifiable data resumes at byte {r}")?;
                }
                write!(
                    f,
                    ". This is not a torn tail: the transcript is readable up to the \
                     damage, appends are refused and `sessionfs check --repair` changes \
                     nothing; "
                )?;
                if *nothing_verifiable_follows {
                    // What `check` and the doctor's `trailing_garbage` finding say.
                    write!(
                        f,
                        "`sessionfs doctor --repair {}` cuts the bytes from byte {at} when \
                         no complete frame starts in them (else it sets the transcript aside), \
                         keeping a copy of the file in its quarantine folder",
                        ShellArg(path)
                    )
                } else {
                    write!(f, "restore the file from a backup")
                }
            }
            StoreError::HeaderLineTooLong { path, limit } => write!(
                f,
                "{}: header line longer than {limit} bytes (16 MiB), more than sessionfs \
                 reads; the file is kept as is: read it with other tools or restore it \
                 from a backup",
                Shown(path)
            ),
            StoreError::LastLineTooLong {
                path,
                offset,
                limit,
            } => write!(
                f,
                "{}: the last committed line (in the frame at byte {offset} of the file, or from \
                 that byte of a raw transcript) is longer than {limit} bytes (16 MiB, its newline \
                 included), more than sessionfs holds to continue a session; the transcript is \
                 intact and reads as it is: continue it with the harness, or start a new session",
                Shown(path)
            ),
            StoreError::AlreadyExists { path } => write!(
                f,
                "{}: a session with this id already exists; append to it instead, or \
                 choose another id",
                Shown(path)
            ),
            StoreError::PublishUnsupported { root, reason } => write!(
                f,
                "{}: new sessions cannot be published safely here ({reason}); use a root \
                 on a file system with hard links or renameat2(RENAME_NOREPLACE), or mount \
                 with --read-only",
                Shown(root)
            ),
            StoreError::LockBusy {
                path,
                holder,
                waited,
            } => write!(
                f,
                "{}: the session's lock file ({}) stayed held by {holder} for {waited:?}; \
                 nothing was written; retry, or find that writer (a crashed holder's lock is \
                 taken over once its lease ends)",
                Shown(path),
                super::lease::LOCK_NAME
            ),
            StoreError::CommitFailed { path, found } => write!(
                f,
                "{}: commit not acknowledged: {found}; re-read the end of the transcript \
                 before retrying, and run `sessionfs check` on it if this repeats",
                Shown(path)
            ),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_path_keeps_bytes_that_are_not_utf8_and_escapes_controls() {
        use std::os::unix::ffi::OsStrExt;
        let raw = std::ffi::OsStr::from_bytes(b"/r/--tmp-work--/inv\xffutf/caf\xc3\xa9\nx");
        assert_eq!(
            Shown(Path::new(raw)).to_string(),
            "/r/--tmp-work--/inv\\xffutf/caf\u{e9}\\nx"
        );
        // What bash reads back inside $'...' is the real name.
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!(
                "printf %s $'{}'",
                Shown(Path::new(std::ffi::OsStr::from_bytes(b"inv\xffutf")))
            ))
            .output()
            .unwrap();
        assert_eq!(out.stdout, b"inv\xffutf");
        // The commands suggested quote the path so that bash reads it back.
        for name in [&b"/r/it's here/s"[..], b"/r/inv\xffutf/a\nb", b"/r/plain"] {
            let path = Path::new(std::ffi::OsStr::from_bytes(name));
            let out = std::process::Command::new("bash")
                .arg("-c")
                .arg(format!("printf %s {}", ShellArg(path)))
                .output()
                .unwrap();
            assert_eq!(out.stdout, name, "{}", ShellArg(path));
        }
        let torn = |p: &str| {
            StoreError::TornTail {
                path: PathBuf::from(p),
                offset: 9,
            }
            .to_string()
        };
        assert!(torn("/r/p/s/session.jsonl.zstd").contains("the last frame, at byte 9"));
        assert!(torn("/r/p/s/session.jsonl").contains("the last line, at byte 9"));
    }

    /// The mount's advice for damage agrees with `check` and the doctor:
    /// trailing garbage (nothing verifiable after it) is cut by `doctor
    /// --repair`; other damage is restored from a backup.
    #[test]
    fn damage_advice_agrees_with_check_and_doctor() {
        let damaged = |resumes_at, nothing_verifiable_follows| {
            StoreError::Damaged {
                path: PathBuf::from("/r/--p--/s/session.jsonl.zstd"),
                at: 6527,
                resumes_at,
                reason: "invalid frame magic; nothing verifiable follows".into(),
                nothing_verifiable_follows,
            }
            .to_string()
        };
        let garbage = damaged(None, true);
        assert!(
            garbage.contains(
                "`sessionfs doctor --repair '/r/--p--/s/session.jsonl.zstd'` cuts the bytes from \
                 byte 6527"
            ),
            "{garbage}"
        );
        assert!(!garbage.contains("backup"), "{garbage}");
        let middle = damaged(Some(9000), false);
        assert!(
            middle.ends_with(
                "`sessionfs check --repair` changes nothing; restore the file from a backup"
            ),
            "{middle}"
        );
        assert!(!middle.contains("doctor"), "{middle}");
    }
}
