//! One finding of `sessionfs doctor`: what is wrong, where, what the
//! reference harness does with it and what fixes it.
//!
//! The `kind` names are part of the `--json` report's schema
//! (`docs/doctor-report.schema.json`) and never change meaning.

use std::path::PathBuf;

use serde::Serialize;

/// What kind of problem a finding is. Serialized as its snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A legacy `<project>/<id>.jsonl[.zstd]` file (retired layout).
    FlatArtifact,
    /// A transcript of the other encoding than the root's.
    EncodingMismatch,
    /// A session id found in more than one project directory.
    DuplicateId,
    /// A session directory that is not where its header's id and cwd put it.
    Misplaced,
    /// A transcript under another name (`session.v3.jsonl.zstd`), or a
    /// header of another format version.
    UnsupportedVersion,
    /// A publication temporary left by a crashed publication.
    StaleTemporary,
    /// A `.sessionfs.lock` whose lease expired (mtime older than it).
    StaleLock,
    /// A `.fuse_hidden*` copy of a lock file or of a writer's wait
    /// announcement that a network client (sshfs) kept after its unlink,
    /// older than a lease could run.
    HiddenLockCopy,
    /// A sync tool's conflict copy beside a transcript.
    ConflictCopy,
    /// A symbolic link to a directory where a session directory goes:
    /// the mount, `list` and the reference skip it.
    LinkedSessionDir,
    /// A zero-byte transcript.
    Empty,
    /// The last frame (or line) ends early: a torn tail.
    TornTail,
    /// Bytes after the last verifiable frame that are no frame, with no
    /// verifiable frame anywhere after them (garbage appended).
    TrailingGarbage,
    /// The file ends inside its header frame (or line): nothing committed.
    TornHeader,
    /// The first frame (or line) is not a session header.
    HeaderLess,
    /// The first frame holds the header and more lines.
    HeaderFrameHoldsEvents,
    /// The header line is not a valid session header.
    BadHeader,
    /// A complete frame that fails to decode or its checksum.
    CorruptFrame,
    /// A frame that needs a larger decoding window than sessionfs allows
    /// (16 MiB, to bound its memory); the reference's zstd reads windows
    /// up to 128 MiB.
    WindowTooLarge,
    /// Bytes that cannot be walked as frames, not a torn tail.
    Damaged,
    /// A skippable frame (the reference refuses it).
    SkippableFrame,
    /// A frame that ends inside a line.
    SplitLine,
    /// A line that is not one JSON record with a valid `seq`.
    InvalidLine,
    /// `seq` jumps forward.
    SeqGap,
    /// `seq` goes back once: a second writer continued from an old tail.
    SeqDuplicate,
    /// `seq` goes back and forth: two writers interleaved.
    InterleavedWriters,
    /// An event type the reference does not know, not marked ignorable.
    UnknownEventType,
    /// A header cwd the reference rejects (not an absolute path).
    CwdRejected,
    /// An event the reference refuses to load (its checks of one event:
    /// `store::event_shape`).
    EventRefused,
    /// The file could not be read.
    Unreadable,
    /// The last line is longer than sessionfs holds to continue a
    /// session (16 MiB, its newline included): the mount and `sessionfs
    /// append` refuse to append to it.
    LastLineTooLong,
}

impl Kind {
    /// The stable name (as in the JSON report).
    pub fn name(self) -> &'static str {
        match self {
            Kind::FlatArtifact => "flat_artifact",
            Kind::EncodingMismatch => "encoding_mismatch",
            Kind::DuplicateId => "duplicate_id",
            Kind::Misplaced => "misplaced",
            Kind::UnsupportedVersion => "unsupported_version",
            Kind::StaleTemporary => "stale_temporary",
            Kind::StaleLock => "stale_lock",
            Kind::HiddenLockCopy => "hidden_lock_copy",
            Kind::ConflictCopy => "conflict_copy",
            Kind::LinkedSessionDir => "linked_session_dir",
            Kind::Empty => "empty",
            Kind::TornTail => "torn_tail",
            Kind::TrailingGarbage => "trailing_garbage",
            Kind::TornHeader => "torn_header",
            Kind::HeaderLess => "header_less",
            Kind::HeaderFrameHoldsEvents => "header_frame_holds_events",
            Kind::BadHeader => "bad_header",
            Kind::CorruptFrame => "corrupt_frame",
            Kind::WindowTooLarge => "window_too_large",
            Kind::Damaged => "damaged",
            Kind::SkippableFrame => "skippable_frame",
            Kind::SplitLine => "split_line",
            Kind::InvalidLine => "invalid_line",
            Kind::SeqGap => "seq_gap",
            Kind::SeqDuplicate => "seq_duplicate",
            Kind::InterleavedWriters => "interleaved_writers",
            Kind::UnknownEventType => "unknown_event_type",
            Kind::CwdRejected => "cwd_rejected",
            Kind::EventRefused => "event_refused",
            Kind::Unreadable => "unreadable",
            Kind::LastLineTooLong => "last_line_too_long",
        }
    }

    /// Whether the reference refuses the session only for its content
    /// (not damage): the doctor reports it and never changes it.
    pub fn content_only(self) -> bool {
        matches!(
            self,
            Kind::UnknownEventType | Kind::CwdRejected | Kind::EventRefused
        )
    }
}

/// What `--repair` does (or did) about a finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Remedy {
    /// A lossless repair in place (original bytes copied to quarantine).
    Repair,
    /// Moved to the quarantine folder (cannot be repaired).
    SetAside,
    /// The other history becomes a fork session; the copy or cut part is
    /// set aside.
    Fork,
    /// Nothing: reported only (content refusals, stale locks, or what needs
    /// a person).
    Report,
}

/// One problem, found once.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// The file or directory it is about (as found).
    #[serde(serialize_with = "super::report::lossy")]
    pub path: PathBuf,
    /// What it is.
    pub kind: Kind,
    /// Byte offset in the file (compressed bytes for zstd), where there is one.
    pub offset: Option<u64>,
    /// What is wrong, in a sentence.
    pub detail: String,
    /// What the reference harness does with it.
    pub reference: String,
    /// The command that fixes it (or what to do).
    pub fix: String,
    /// What `--repair` does about it.
    pub remedy: Remedy,
    /// What `--repair` did, once done (`None` when not run or not done).
    pub done: Option<String>,
}

impl Finding {
    /// A finding with no offset and nothing done yet.
    pub fn new(path: impl Into<PathBuf>, kind: Kind, detail: impl Into<String>) -> Finding {
        let path = path.into();
        let (reference, remedy) = reference_and_remedy(kind);
        Finding {
            fix: default_fix(kind, remedy, &path),
            path,
            kind,
            offset: None,
            detail: detail.into(),
            reference: reference.into(),
            remedy,
            done: None,
        }
    }

    /// The same finding at byte `offset`.
    pub fn at(mut self, offset: u64) -> Finding {
        self.offset = Some(offset);
        self
    }

    /// The same finding with another remedy (and its default fix).
    pub fn with_remedy(mut self, remedy: Remedy) -> Finding {
        self.remedy = remedy;
        self.fix = default_fix(self.kind, remedy, &self.path);
        self
    }

    /// The same finding with another text for what the reference does
    /// (a kind whose cases the reference treats differently).
    pub fn with_reference(mut self, reference: impl Into<String>) -> Finding {
        self.reference = reference.into();
        self
    }

    /// The same finding with another fix text.
    pub fn with_fix(mut self, fix: impl Into<String>) -> Finding {
        self.fix = fix.into();
        self
    }
}

impl Kind {
    /// Whether setting a file of this finding aside takes its session out
    /// of the store (the session's own transcript, not a stray file or
    /// one of several copies).
    fn sets_the_session_aside(self) -> bool {
        matches!(
            self,
            Kind::HeaderLess
                | Kind::BadHeader
                | Kind::Empty
                | Kind::TornHeader
                | Kind::CorruptFrame
                | Kind::Damaged
                | Kind::InvalidLine
        )
    }
}

fn default_fix(kind: Kind, remedy: Remedy, path: &std::path::Path) -> String {
    let shown = super::super::error::ShellArg(path).to_string();
    if let (Kind::ConflictCopy, Remedy::Fork, Some(root)) = (kind, remedy, path.ancestors().nth(3))
    {
        // ROOT/project/session/copy: only a run over the root compares the
        // copy with the transcript beside it.
        return format!(
            "sessionfs doctor --repair {} (a run over the root, which reads the copy with its \
             transcript)",
            super::super::error::ShellArg(root)
        );
    }
    match remedy {
        Remedy::SetAside if kind.sets_the_session_aside() => format!(
            "sessionfs doctor --repair {shown} (moves the transcript to the quarantine \
             folder: the session leaves the store until `sessionfs doctor --restore` puts it \
             back)"
        ),
        Remedy::Repair | Remedy::SetAside | Remedy::Fork => {
            format!("sessionfs doctor --repair {shown}")
        }
        Remedy::Report => match kind {
            Kind::UnknownEventType => {
                "none needed here: load it with a harness that knows the event type".into()
            }
            Kind::CwdRejected => {
                "none needed here: load it on a system where its cwd is absolute".into()
            }
            Kind::WindowTooLarge => format!(
                "none needed for the harness, which reads it; {}",
                super::super::decode::WINDOW_ADVICE
            ),
            Kind::LastLineTooLong => "none needed to read it, or to continue it with the \
                 harness; to go on through sessionfs (the mount, `sessionfs append`), start a \
                 new session: committed lines are never rewritten"
                .into(),
            Kind::EventRefused => "no harness loads it as it is: committed events are never \
                 rewritten; fix the writer that wrote the event, and copy the session's other \
                 events into a new session if you need them loaded"
                .into(),
            Kind::StaleLock => format!(
                "let the next writer take it over (shared-root protocol), or remove {shown} \
                 once no writer runs"
            ),
            Kind::LinkedSessionDir => format!(
                "to make it a session of this project, replace the link {shown} with the \
                 directory it points to (mv)"
            ),
            _ => format!("restore {shown} from a backup"),
        },
    }
}

/// What the reference does with a seq gap in a raw transcript: its
/// scanner stops the committed prefix at the gap, and its load truncates
/// the file there (the lines from the gap on are lost). Source: the
/// reference's `SessionLogScanner` and `commitRepair`, run by the oracle
/// with `--compression none`.
pub const SEQ_GAP_RAW_REFERENCE: &str =
    "load() truncates the file at the gap: the lines from it on are lost (it loads the \
     events before it)";

/// What the reference does with each kind, and the doctor's remedy.
fn reference_and_remedy(kind: Kind) -> (&'static str, Remedy) {
    use Kind as K;
    use Remedy as R;
    match kind {
        K::FlatArtifact => (
            "every call on the root fails (flat-layout error)",
            R::SetAside,
        ),
        K::EncodingMismatch => (
            "every call on the root fails (encoding mismatch)",
            R::Repair,
        ),
        K::DuplicateId => (
            "lookups of the id fail (duplicate JSONL session id)",
            R::SetAside,
        ),
        K::Misplaced => (
            "list() and load fail (header id and cwd identify another path)",
            R::Repair,
        ),
        K::UnsupportedVersion => (
            "refuses the session (unsupported format version)",
            R::Report,
        ),
        K::StaleTemporary => ("ignores it", R::Repair),
        K::HiddenLockCopy => (
            "ignores it; the mount lists it in the session directory",
            R::Repair,
        ),
        K::StaleLock => (
            "ignores it; sessionfs writers wait for its lease",
            R::Report,
        ),
        K::ConflictCopy => ("ignores the copy: its history is not loadable", R::Fork),
        K::Empty => (
            "skips it in list(); reading fails (empty or header-less)",
            R::SetAside,
        ),
        K::TornTail => (
            "reads the committed prefix; load() truncates the torn frame and re-appends",
            R::Repair,
        ),
        K::TrailingGarbage => ("reading fails (invalid frame magic)", R::Repair),
        K::TornHeader => ("leaves it out of list(); it cannot be read", R::SetAside),
        K::HeaderLess => (
            "list() fails for the whole root (first frame is not exactly one header line)",
            R::SetAside,
        ),
        K::HeaderFrameHoldsEvents => (
            "list() fails for the whole root (first frame is not exactly one header line)",
            R::Repair,
        ),
        K::BadHeader => ("refuses the session (invalid header)", R::SetAside),
        // Set aside whole, never cut to the verified prefix: FORMAT.md
        // ("Reading and recovery") truncates only a torn tail, the
        // reference's load fails without truncating, and the verified
        // frames after the damage hold whole records (README, doctor).
        K::CorruptFrame => ("reading fails (frame failed validation)", R::SetAside),
        K::WindowTooLarge => (
            "reads it (windows up to 128 MiB); sessionfs refuses frames of more than 16 MiB",
            R::Report,
        ),
        K::Damaged => ("reading fails (invalid frame magic)", R::SetAside),
        K::SkippableFrame => ("reading fails (skippable frame)", R::Repair),
        K::SplitLine => (
            "reads it, joining the frames' contents, and loads it; sessionfs fails reads of \
             the frame (FORMAT.md: a frame never ends inside a line)",
            R::Repair,
        ),
        K::InvalidLine => ("load fails (invalid record)", R::SetAside),
        // The reference's scanner stops its committed prefix at the gap
        // and the load of a zstd transcript then fails with this message
        // (a raw one's load truncates there: [`SEQ_GAP_RAW_REFERENCE`]).
        K::SeqGap => (
            "load fails (complete frame contains a torn JSONL record): its scan stops \
             committing at the gap",
            R::Report,
        ),
        K::SeqDuplicate | K::InterleavedWriters => ("load fails (seq not contiguous)", R::Fork),
        K::UnknownEventType => (
            "load refuses the session (event type unknown to this harness, not ignorable)",
            R::Report,
        ),
        K::CwdRejected => (
            "load refuses the session (session header cwd must be an absolute path)",
            R::Report,
        ),
        K::EventRefused => (
            "load refuses the session (an event fails its checks)",
            R::Report,
        ),
        K::Unreadable => ("cannot read it either", R::Report),
        K::LastLineTooLong => (
            "reads it, loads it and continues it (no line limit)",
            R::Report,
        ),
        K::LinkedSessionDir => (
            "list() leaves it out (a read by its id follows the link)",
            R::Report,
        ),
    }
}
