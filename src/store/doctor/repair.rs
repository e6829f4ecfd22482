//! `sessionfs doctor --repair`: the lossless repairs, the moves to the
//! quarantine folder and the forks, each said in its finding's `done`.
//!
//! Every change copies the original bytes into the run's quarantine folder
//! first (recorded in its manifest, [`super::restore`]), takes the
//! transcript's lock, writes beside the original and publishes atomically
//! (rename), so that a crash at any moment leaves each session as before or
//! as after its repair, and running the repair again finishes it.
//! Content-only refusals are never changed.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::super::append::lock_for_repair;
use super::super::error::Shown;
use super::super::frame::encode_frame;
use super::super::quarantine::Quarantine;
use super::super::transcript::Encoding;
use super::content::{assign, Fit, Side};
use super::finding::{Kind, Remedy};
use super::fork::{fork_id, fork_lines};
use super::history::{
    copy_history, lines, readable_frames, readable_prefix, readable_text, readable_text_before,
};
use super::restore::{Entry, Manifest};
use super::Scan;

/// A repair run: the quarantine folder (made on first use) and its manifest.
pub struct Run {
    root: PathBuf,
    base: Option<PathBuf>,
    quarantine: Option<(Quarantine, Manifest)>,
}

impl Run {
    /// A run over `root`, its quarantine under `base` (default: MOUNT.md's).
    pub fn new(root: &Path, base: Option<PathBuf>) -> Run {
        Run {
            root: fs::canonicalize(root).unwrap_or_else(|_| root.to_path_buf()),
            base,
            quarantine: None,
        }
    }

    /// The quarantine folder, if this run used one.
    pub fn folder(&self) -> Option<PathBuf> {
        self.quarantine.as_ref().map(|(q, _)| q.dir().to_path_buf())
    }

    fn q(&mut self) -> std::io::Result<&mut (Quarantine, Manifest)> {
        if self.quarantine.is_none() {
            let q = match &self.base {
                Some(b) => Quarantine::create_in(b, &self.root)?,
                None => Quarantine::create(&self.root)?,
            };
            let m = Manifest::create(q.dir())?;
            self.quarantine = Some((q, m));
        }
        Ok(self.quarantine.as_mut().expect("set"))
    }

    /// `path` relative to the root: its directory resolved, its own name
    /// kept (a symbolic link is named where it stands, not where it
    /// points).
    fn rel(&self, path: &Path) -> PathBuf {
        let name = path.file_name().map(PathBuf::from).unwrap_or_default();
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let abs = fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        abs.strip_prefix(&self.root)
            .map(|d| d.join(&name))
            .unwrap_or(name)
    }

    /// Copies the whole of `path` into the quarantine and records it.
    fn keep(
        &mut self,
        path: &Path,
        action: &str,
        created: Option<PathBuf>,
    ) -> std::io::Result<PathBuf> {
        let rel = self.rel(path);
        let abs = self.root.join(&rel);
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        let (q, m) = self.q()?;
        let copy = q.copy_range(&file, 0, len, &rel)?;
        m.record(&Entry {
            action: action.into(),
            original: abs.to_string_lossy().into_owned(),
            copy: copy.to_string_lossy().into_owned(),
            created: created.map(|c| c.to_string_lossy().into_owned()),
        })?;
        Ok(copy)
    }

    /// Moves `path` into the quarantine: copy, record, then unlink; a
    /// session directory the unlinked transcript leaves empty is removed.
    fn set_aside(&mut self, path: &Path) -> std::io::Result<PathBuf> {
        let copy = self.keep(path, "moved", None)?;
        fs::remove_file(path)?;
        let parent = path.parent();
        let is_transcript = [Encoding::Zstd, Encoding::Raw]
            .iter()
            .any(|e| path.file_name() == Some(e.file_name().as_ref()));
        if let (true, Some(dir)) = (is_transcript, parent) {
            // A session directory left empty goes too (`remove_dir` keeps
            // one that holds anything); `--restore` makes it again.
            if fs::remove_dir(dir).is_ok() {
                sync_dir(dir.parent());
                return Ok(copy);
            }
        }
        sync_dir(parent);
        Ok(copy)
    }
}

/// Syncs `dir` when there is one (best effort: the rename is done).
fn sync_dir(dir: Option<&Path>) {
    if let Some(d) = dir {
        let _ = super::super::publish::sync_dir(d);
    }
}

/// The hex part of the doctor's own temporaries (publication temporaries
/// by name, so never shown; one left by a killed run is stale at once).
pub const DOCTOR_TEMP_HEX: &str = "d0c7d0c7d0c7";

/// Writes `bytes` beside `path` and renames it over `path` (atomic).
fn publish_over(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!("{name}.{DOCTOR_TEMP_HEX}.tmp"));
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, path)?;
    sync_dir(path.parent());
    Ok(())
}

/// The encoded bytes of `lines_text` (complete lines) for `encoding`:
/// the header line as its own frame, the rest as one frame.
fn encode(encoding: Encoding, header: &[u8], rest: &[u8]) -> std::io::Result<Vec<u8>> {
    Ok(match encoding {
        Encoding::Raw => [header, rest].concat(),
        Encoding::Zstd => {
            let mut out = encode_frame(header)?;
            if !rest.is_empty() {
                out.extend(encode_frame(rest)?);
            }
            out
        }
    })
}

/// Runs every repair the findings of `scan` allow; marks each finding's
/// `done`. Returns the quarantine folder used, if any.
pub fn repair(scan: &mut Scan, quarantine_base: Option<PathBuf>) -> Option<PathBuf> {
    let mut run = Run::new(&scan.root, quarantine_base);
    let encoding = scan.encoding.unwrap_or(Encoding::Zstd);
    // Layout findings first: temporaries, flat files, duplicates, moves.
    for i in 0..scan.layout.len() {
        let f = scan.layout[i].clone();
        if is_link(&f.path) {
            continue; // its fix says why (mark_links)
        }
        let done = match f.kind {
            Kind::StaleTemporary
            | Kind::HiddenLockCopy
            | Kind::FlatArtifact
            | Kind::DuplicateId => run
                .set_aside(&f.path)
                .map(|c| format!("moved to the quarantine folder as {}", Shown(&c))),
            Kind::Misplaced => move_home(&mut run, scan, &f.path),
            Kind::EncodingMismatch => convert(&mut run, &f.path, encoding),
            Kind::ConflictCopy if f.remedy == Remedy::Fork => fork_conflict(&mut run, scan, i),
            _ => continue,
        };
        scan.layout[i].done = Some(match done {
            Ok(text) => text,
            Err(e) => {
                scan.layout[i].fix = format!("{} (the repair failed: {e})", scan.layout[i].fix);
                continue;
            }
        });
    }
    // Transcripts set aside with their duplicate-id finding (a set, not a
    // scan per transcript: a store may hold thousands of findings).
    let set_aside_duplicates: std::collections::HashSet<PathBuf> = scan
        .layout
        .iter()
        .filter(|f| f.done.is_some() && f.kind == Kind::DuplicateId)
        .map(|f| f.path.clone())
        .collect();
    for fi in 0..scan.files.len() {
        let path = scan.files[fi].path.clone();
        if set_aside_duplicates.contains(&path) {
            // Set aside with its duplicate finding: nothing left to repair.
            for f in &mut scan.files[fi].findings {
                f.done = Some("set aside with the file".into());
            }
            continue;
        }
        if is_link(&path) {
            continue; // its findings' fix says why (mark_links)
        }
        let findings = scan.files[fi].findings.clone();
        if findings.iter().any(|f| f.remedy == Remedy::SetAside) {
            let r = run.set_aside(&path);
            for f in &mut scan.files[fi].findings {
                match &r {
                    Ok(c) if f.remedy == Remedy::SetAside => {
                        f.done = Some(format!(
                            "the transcript was moved to the quarantine folder as {}",
                            Shown(c)
                        ))
                    }
                    Ok(_) => f.done = Some("set aside with the file".into()),
                    Err(e) => f.fix = format!("{} (moving it failed: {e})", f.fix),
                }
            }
            continue;
        }
        // One join repairs every split frame of the file: its outcome is
        // each SplitLine finding's.
        let mut joined: Option<Result<String, String>> = None;
        let mut order: Vec<usize> = (0..findings.len()).collect();
        order.sort_by_key(|&k| repair_rank(findings[k].kind));
        for k in order {
            let f = &findings[k];
            let done = match f.kind {
                Kind::SplitLine => joined
                    .get_or_insert_with(|| {
                        join_split_lines(&mut run, &path).map_err(|e| e.to_string())
                    })
                    .clone()
                    .map_err(std::io::Error::other),
                Kind::TornTail => {
                    torn_tail(&mut run, &path, f.offset.unwrap_or(0), scan.files[fi].raw)
                }
                // A raw header line, whole but without its newline.
                Kind::TornHeader if f.remedy == Remedy::Repair && scan.files[fi].raw => {
                    torn_tail(&mut run, &path, 0, true)
                }
                Kind::TrailingGarbage => cut_garbage(&mut run, &path, f.offset.unwrap_or(0)),
                Kind::HeaderFrameHoldsEvents => reframe(&mut run, &path),
                Kind::SkippableFrame => drop_skippable(&mut run, &path),
                Kind::SeqDuplicate | Kind::InterleavedWriters if f.remedy == Remedy::Fork => {
                    split_seq(&mut run, scan, fi, encoding)
                }
                _ => continue,
            };
            let split = matches!(f.kind, Kind::SeqDuplicate | Kind::InterleavedWriters);
            match done {
                Ok(t) => scan.files[fi].findings[k].done = Some(t),
                // A split that failed on what the file holds (not on a
                // change since the scan) fails again the same way: the fix
                // says what to do instead. It published nothing (the fork
                // is published after every other input is read).
                Err(e) if split && !e.to_string().starts_with(CHANGED) => {
                    let shown = super::super::error::ShellArg(&path).to_string();
                    scan.files[fi].findings[k].fix = format!(
                        "split it by hand: `sessionfs doctor --repair` cannot ({e}) and left \
                         {shown} and the store as they were (`zstd -dc {shown}` shows the \
                         lines in the order they were written; each writer's batches are \
                         whole frames)"
                    );
                }
                Err(e) => {
                    let fix = &mut scan.files[fi].findings[k].fix;
                    *fix = format!("{fix} (the repair failed: {e})");
                }
            }
        }
    }
    run.folder()
}

/// How every error of a repair that met a file changed since its scan
/// starts (running the doctor again finds it as it is now).
const CHANGED: &str = "the file changed since the scan";

/// The order in which the repairs of one transcript run: the end of the
/// file first (a torn tail or garbage cut, so that the file is complete
/// frames), then the frames that hold no transcript bytes, then the
/// joins of split lines, the header's own frame and last the split of
/// two histories. Every repair keeps the decoded bytes before the point
/// it cuts, so each finds what the scan found where it acts.
fn repair_rank(kind: Kind) -> u8 {
    match kind {
        Kind::TornTail | Kind::TrailingGarbage => 0,
        Kind::SkippableFrame => 1,
        Kind::SplitLine => 2,
        Kind::HeaderFrameHoldsEvents => 3,
        Kind::SeqDuplicate | Kind::InterleavedWriters => 4,
        _ => 5,
    }
}

/// The frames of `bytes`, which must be complete frames only (a zstd
/// transcript after its torn tail or garbage was cut). Errors with the
/// offset where something else starts.
fn complete_frames(bytes: &[u8]) -> std::io::Result<Vec<super::super::frame::FrameInfo>> {
    use super::super::frame::{walk_frame, Step};
    let len = bytes.len() as u64;
    let mut frames = Vec::new();
    let mut at = 0u64;
    loop {
        match walk_frame(bytes, at, len) {
            Ok(Step::End) => return Ok(frames),
            Ok(Step::Frame(f)) => {
                at = f.offset + f.len;
                frames.push(f);
            }
            Ok(Step::Torn) | Err(_) => {
                return Err(std::io::Error::other(format!(
                    "the file holds more than complete frames at byte {at}: run the doctor \
                     again"
                )))
            }
        }
    }
}

/// The decoded bytes of the data frame `f` of `bytes`, or an error that
/// names the frame.
fn decoded(bytes: &[u8], f: &super::super::frame::FrameInfo) -> std::io::Result<Vec<u8>> {
    let raw = &bytes[f.offset as usize..(f.offset + f.len) as usize];
    super::super::frame::decode_frame(raw, f).map_err(|e| match e {
        super::super::frame::FrameError::Io(e) => e,
        super::super::frame::FrameError::Corrupt { offset, reason } => std::io::Error::other(
            format!("the frame at byte {offset} does not decode ({reason})"),
        ),
    })
}

/// The decoded length (bytes) of the data frame `f` of `bytes`, streamed
/// through [`super::super::decode`] (a frame too large to decode whole is
/// counted, never held), or an error that names the frame.
fn decoded_len(bytes: &[u8], f: &super::super::frame::FrameInfo) -> std::io::Result<u64> {
    let failed = |offset: u64, reason: String| {
        std::io::Error::other(format!(
            "the frame at byte {offset} does not decode ({reason})"
        ))
    };
    let mut reader = super::super::decode::open(bytes, f).map_err(|e| match e {
        super::super::frame::FrameError::Io(e) => e,
        super::super::frame::FrameError::Corrupt { offset, reason } => failed(offset, reason),
    })?;
    std::io::copy(&mut reader, &mut std::io::sink()).map_err(|e| failed(f.offset, e.to_string()))
}

/// Sets the fix of every finding about a symbolic link to say that the
/// doctor leaves it alone (see [`not_repaired_through`]), so that no
/// report suggests `--repair` for it.
pub(super) fn mark_links(scan: &mut Scan) {
    for f in &mut scan.layout {
        if f.kind == Kind::LinkedSessionDir {
            continue; // about the link itself, with its own fix
        }
        if let Some(why) = not_repaired_through(&f.path) {
            f.fix = why;
        }
    }
    // Only files with findings have a fix to say it in.
    for file in scan.files.iter_mut().filter(|f| !f.findings.is_empty()) {
        if let Some(why) = not_repaired_through(&file.path) {
            for f in &mut file.findings {
                f.fix = why.clone();
            }
        }
    }
}

/// Why `path` is left alone by the repairs: it is a symbolic link. A
/// repair rewrites or moves the file at its path; through a link it would
/// replace the link with a copy of its target (or move the target's bytes
/// into the quarantine and drop the link), and a restore would put back a
/// regular file, not the link. `None` for anything else.
fn not_repaired_through(path: &Path) -> Option<String> {
    if !is_link(path) {
        return None;
    }
    let target = fs::read_link(path)
        .map(|t| format!(" to {}", Shown(&t)))
        .unwrap_or_default();
    Some(format!(
        "none by the doctor: {} is a symbolic link{target}; the doctor repairs no file \
         through a link: repair the file it points to, or replace the link with that file \
         and run the doctor again",
        Shown(path)
    ))
}

/// Whether `path` is a symbolic link (checked again by the repairs right
/// before they act: the scan's report may be older).
fn is_link(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink())
}

/// Most decoded bytes read from a torn frame when salvaging its lines.
const SALVAGE_LIMIT: u64 = 64 << 20;

/// The complete lines a torn frame `fragment` decodes to before it ends,
/// kept while each is a valid record continuing `seq` from `next` (the
/// reference's load recovers the same records), then the decoded bytes
/// after the last of them when they hold no newline and are a whole
/// record continuing `seq` ([`super::fragment::is_unended_last_record`]),
/// with its newline added: the reference's load drops that record as a
/// torn line, but a JSON object that is complete cannot be the start of
/// another record (its newline was in the bytes lost). Returns decoded
/// bytes, whole lines only, and whether the last was so ended.
fn salvage(fragment: &[u8], mut next: u64) -> (Vec<u8>, bool) {
    use std::io::Read;
    let mut plain = Vec::new();
    if let Ok(d) = zstd::stream::read::Decoder::new(fragment) {
        let mut d = d.take(SALVAGE_LIMIT);
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match d.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => plain.extend_from_slice(&buf[..n]),
            }
        }
    }
    let mut kept = 0usize;
    let mut unended = false;
    for line in plain.split_inclusive(|&b| b == b'\n') {
        let Some(body) = line.strip_suffix(b"\n") else {
            // The last piece, without a newline (nothing follows it).
            unended = super::fragment::is_unended_last_record(line, Some(next));
            break;
        };
        match super::super::lines::read_record(body) {
            Ok(super::super::lines::Record::Event(span)) if span.first == next => {
                next = span.end();
                kept += line.len();
            }
            _ => break,
        }
    }
    if unended {
        plain.push(b'\n');
    } else {
        plain.truncate(kept);
    }
    (plain, unended)
}

/// The writers' locks of `path` ([`lock_for_repair`]), as an I/O error
/// that names what failed when they cannot be had.
fn repair_lock(
    path: &Path,
    file: &std::fs::File,
) -> std::io::Result<super::super::lease::LockGuard> {
    lock_for_repair(path, file).map_err(|e| std::io::Error::other(e.to_string()))
}

/// A torn tail. When the torn frame's complete lines decode and continue
/// the transcript, the file becomes its complete frames plus one frame of
/// those lines, written beside it and renamed over it; otherwise the torn
/// frame is cut by the damage branch's repair
/// ([`crate::store::check::check_transcript`]). A raw transcript's last
/// line without its newline is cut the same way, unless it is a whole
/// record continuing `seq`: then it is ended with its newline
/// ([`end_raw_last_record`]). The original is copied whole to the
/// quarantine folder first.
fn torn_tail(run: &mut Run, path: &Path, at: u64, raw: bool) -> std::io::Result<String> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    let locked = repair_lock(path, &file)?;
    let bytes = fs::read(path)?;
    let at_us = at as usize;
    if at_us > bytes.len() {
        return Err(std::io::Error::other("the file changed since the scan"));
    }
    let enc = if raw { Encoding::Raw } else { Encoding::Zstd };
    if raw {
        if let Some(done) = end_raw_last_record(run, path, &bytes, at_us)? {
            drop(locked);
            drop(file);
            return Ok(done);
        }
    }
    let (kept, ended) = if raw {
        (Vec::new(), false)
    } else {
        // The file is locked: its first `at` bytes are those of `bytes`.
        let prefix = readable_text_before(path, enc, at)?;
        match super::super::lines::next_seq_of_transcript(&prefix) {
            Ok(next) => salvage(&bytes[at_us..], next),
            Err(_) => (Vec::new(), false),
        }
    };
    run.keep(path, "rewritten", None)?;
    if kept.is_empty() {
        // check_transcript takes the locks itself.
        drop(locked);
        drop(file);
        let r = super::super::check::check_transcript(path, true)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        if !r.repaired {
            return Err(std::io::Error::other("the tail is no longer torn"));
        }
        return Ok(format!(
            "the torn last frame was cut at byte {at}; the original is in the quarantine folder"
        ));
    }
    let lines = kept.iter().filter(|&&b| b == b'\n').count();
    let mut new = bytes[..at_us].to_vec();
    new.extend(encode_frame(&kept)?);
    publish_over(path, &new)?;
    drop(locked);
    drop(file);
    let last = if ended {
        " (the last a whole record whose newline was in the bytes lost: ended with one)"
    } else {
        ""
    };
    Ok(format!(
        "the torn last frame at byte {at} was replaced by a frame of its {lines} complete \
         lines that decode and continue the transcript{last}; the original is in the \
         quarantine folder"
    ))
}

/// A raw transcript's last line from `at` (no newline after it) that is
/// a whole record continuing `seq` ([`super::fragment::is_unended_last_record`],
/// the scan's rule): `bytes` (the whole file, read under the writers'
/// locks) is published again with its newline added, after the original
/// is copied to the quarantine folder. `Ok(None)` when the line is no
/// such record (the caller cuts it as a torn tail).
///
/// Errors: copying to the quarantine folder or publishing the file.
fn end_raw_last_record(
    run: &mut Run,
    path: &Path,
    bytes: &[u8],
    at: usize,
) -> std::io::Result<Option<String>> {
    let last = &bytes[at..];
    if last.is_empty() || last.contains(&b'\n') {
        return Ok(None);
    }
    let what = if at == 0 {
        // The header line alone (`is_unended_header`).
        if !super::fragment::is_unended_header(last) {
            return Ok(None);
        }
        "the header line"
    } else {
        let next = super::super::lines::next_seq_of_transcript(&bytes[..at]).ok();
        if !super::fragment::is_unended_last_record(last, next) {
            return Ok(None);
        }
        "the last record"
    };
    run.keep(path, "rewritten", None)?;
    publish_over(path, &[bytes, b"\n"].concat())?;
    Ok(Some(format!(
        "{what} ({} bytes, at byte {at}), whole but without its newline, was ended with one; \
         the original is in the quarantine folder",
        last.len()
    )))
}

/// Skippable frames: they hold no transcript bytes (the mount skips
/// them; the reference fails to read the file). Under the writers' locks
/// the file is walked again; only when it is all complete data frames and
/// skippable frames is it rewritten as its data frames alone, byte for
/// byte, after the whole original is copied to the quarantine folder.
fn drop_skippable(run: &mut Run, path: &Path) -> std::io::Result<String> {
    use super::super::frame::FrameKind;
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    let locked = repair_lock(path, &file)?;
    let bytes = fs::read(path)?;
    let (mut kept, mut dropped) = (Vec::with_capacity(bytes.len()), 0u64);
    for f in complete_frames(&bytes)? {
        match f.kind {
            FrameKind::Skippable => dropped += f.len,
            FrameKind::Data { .. } => {
                kept.extend_from_slice(&bytes[f.offset as usize..(f.offset + f.len) as usize])
            }
        }
    }
    if dropped == 0 {
        return Err(std::io::Error::other(
            "the file holds no skippable frame now",
        ));
    }
    run.keep(path, "rewritten", None)?;
    publish_over(path, &kept)?;
    drop(locked);
    drop(file);
    Ok(format!(
        "the skippable frames ({dropped} bytes, no transcript bytes) were removed; the \
         original is in the quarantine folder"
    ))
}

/// Garbage after the last verifiable frame with no verifiable frame after
/// it: under the writers' locks the walk is made again, and only when it
/// still fails at `at` with nothing verifiable following is the file cut
/// there, after the whole original is copied to the quarantine folder.
fn cut_garbage(run: &mut Run, path: &Path, at: u64) -> std::io::Result<String> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    let _locked = repair_lock(path, &file)?;
    let len = file.metadata()?.len();
    let end = super::super::classify::walk(&file, 0, len, None, |_| true).map_err(|e| match e {
        super::super::frame::FrameError::Io(e) => e,
        super::super::frame::FrameError::Corrupt { offset, reason } => {
            std::io::Error::other(format!("byte {offset}: {reason}"))
        }
    })?;
    match end {
        super::super::classify::WalkEnd::Damaged(d)
            if d.at == at
                && d.nothing_verifiable_follows
                && super::scan_file::holds_no_frame_start(&file, at, len)? => {}
        _ => return Err(std::io::Error::other("the file changed since the scan")),
    }
    run.keep(path, "rewritten", None)?;
    file.set_len(at)?;
    file.sync_all()?;
    Ok(format!(
        "the {} bytes after the last verifiable frame were cut at byte {at}; the original is \
         in the quarantine folder",
        len - at
    ))
}

/// Frames that end inside a line (FORMAT.md: corruption; the reference
/// reads a split event line, joining the frames' contents, and refuses a
/// split header frame): each run of them and the frame that completes its
/// line become one frame of the same decoded bytes, or, for a run that
/// starts with the header frame, the header line in a frame of its own
/// and the rest in one after it; every other frame is kept byte for
/// byte; an incomplete last line no frame completes is cut (as a torn
/// tail's), unless it is a whole record continuing `seq`
/// ([`super::fragment::is_unended_last_record`]): then it is ended with
/// its newline. Under the writers' locks the file is walked and decoded
/// again; only when it is all complete frames that decode is it
/// rewritten, after the whole original is copied to the quarantine
/// folder. Returns what was done.
fn join_split_lines(run: &mut Run, path: &Path) -> std::io::Result<String> {
    use super::super::frame::FrameKind;
    use super::fragment::stray_fragments;
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    let locked = repair_lock(path, &file)?;
    let bytes = fs::read(path)?;
    let mut out = Vec::with_capacity(bytes.len());
    // The decoded bytes of the frames joined so far, not yet ending a line,
    // and whether they begin with the header frame's.
    let mut open_line: Vec<u8> = Vec::new();
    // Where in `open_line` each frame after the run's first begins.
    let mut piece_starts: Vec<usize> = Vec::new();
    let (mut header_run, mut header_joined, mut header_reframed) = (false, false, false);
    let (mut data_frames, mut joined, mut run_frames) = (0usize, 0usize, 0usize);
    // Frames of stray fragments, their torn bytes cut, the records ended.
    let (mut stray_frames, mut torn_bytes, mut unended) = (0usize, 0usize, 0usize);
    for f in complete_frames(&bytes)? {
        let raw = &bytes[f.offset as usize..(f.offset + f.len) as usize];
        if !matches!(f.kind, FrameKind::Data { .. }) {
            if !open_line.is_empty() {
                return Err(std::io::Error::other(format!(
                    "a skippable frame at byte {} inside a split line: run the doctor again",
                    f.offset
                )));
            }
            out.extend_from_slice(raw);
            continue;
        }
        data_frames += 1;
        let plain = decoded(&bytes, &f)?;
        // Pieces of a line this frame does not continue (it begins a
        // record of its own): they end the run, each cut or ended with a
        // newline, as the scan said (`stray_fragments`).
        let start = open_line
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let mut bounds = vec![start];
        bounds.extend(piece_starts.iter().copied().filter(|&b| b > start));
        bounds.push(open_line.len());
        let pieces: Vec<&[u8]> = bounds.windows(2).map(|w| &open_line[w[0]..w[1]]).collect();
        let stray = memchr::memchr(b'\n', &plain)
            .filter(|_| !open_line.is_empty())
            .and_then(|i| stray_fragments(&pieces, &plain[..i]));
        if let Some(strays) = stray {
            let mut emit = open_line[..start].to_vec();
            let (torn, records) = super::fragment::end_whole_records(&strays, &pieces, &mut emit);
            torn_bytes += torn;
            unended += records;
            if !emit.is_empty() {
                out.extend(joined_frames(&emit, header_run)?);
            }
            let kept_from = bounds[strays.len()];
            open_line.drain(..kept_from);
            // The kept pieces after the first of them start where they did.
            piece_starts = bounds
                .get(strays.len() + 1..bounds.len() - 1)
                .unwrap_or_default()
                .iter()
                .map(|b| b - kept_from)
                .collect();
            // Torn starts cut before the header line (nothing written
            // yet): the line kept, or this frame's first, is the header's.
            header_run &= emit.is_empty();
            stray_frames += strays.len();
            run_frames = bounds.len() - 1 - strays.len();
        }
        if open_line.is_empty() && (plain.is_empty() || plain.ends_with(b"\n")) {
            if header_run && !plain.is_empty() {
                // The header frame after the cut: the header line must
                // be the first frame alone (FORMAT.md).
                if memchr::memchr(b'\n', &plain) == Some(plain.len() - 1) {
                    out.extend_from_slice(raw);
                } else {
                    out.extend(joined_frames(&plain, true)?);
                    header_reframed = true;
                }
                header_run = false;
                continue;
            }
            out.extend_from_slice(raw);
            continue;
        }
        header_run |= data_frames == 1;
        header_joined |= header_run;
        if !open_line.is_empty() {
            piece_starts.push(open_line.len());
        }
        open_line.extend_from_slice(&plain);
        run_frames += 1;
        if open_line.ends_with(b"\n") {
            out.extend(joined_frames(&open_line, header_run)?);
            open_line.clear();
            piece_starts.clear();
            header_run = false;
            joined += run_frames;
            run_frames = 0;
        }
    }
    // The last frames end inside a line no frame completes (the
    // reference's load fails on it, as on a torn record): their complete
    // lines stay; the incomplete line is cut, as a torn tail's is (or
    // ended, below), and kept in the quarantine folder with the original.
    let complete = open_line
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    // The header line itself is the unfinished one.
    let header_open = header_run && complete == 0;
    let mut cut = open_line.len() - complete;
    if complete > 0 {
        // (One frame, or a run holding only the unfinished line, joined
        // nothing.)
        if run_frames > 1 {
            joined += run_frames;
        }
        out.extend(joined_frames(&open_line[..complete], header_run)?);
    }
    // A whole record continuing `seq` is ended with its newline instead,
    // as the scan said (`is_unended_last_record`); so is one that follows
    // stray fragments in the last frames (`last_line_strays`): each torn
    // start before it cut, each whole record ended.
    let last = &open_line[complete..];
    let next = if header_open {
        None
    } else {
        next_seq_of_frames(&out)
    };
    let mut ended = None;
    if cut > 0 && super::fragment::is_unended_last_record(last, next) {
        ended = Some(last.len());
        out.extend(encode_frame(&[last, b"\n"].concat())?);
        cut = 0;
    } else if cut > 0 {
        let mut bounds = vec![complete];
        bounds.extend(piece_starts.iter().copied().filter(|&b| b > complete));
        bounds.push(open_line.len());
        let pieces: Vec<&[u8]> = bounds.windows(2).map(|w| &open_line[w[0]..w[1]]).collect();
        if let Some(strays) = super::fragment::last_line_strays(&pieces, next) {
            let mut emit = Vec::new();
            let (torn, records) = super::fragment::end_whole_records(&strays, &pieces, &mut emit);
            torn_bytes += torn;
            unended += records;
            stray_frames += strays.len();
            let rest = &open_line[bounds[strays.len()]..];
            ended = Some(rest.len());
            // The record is a line of its own after the ended pieces.
            if !emit.is_empty() {
                out.extend(joined_frames(&emit, header_open)?);
            }
            out.extend(encode_frame(&[rest, b"\n"].concat())?);
            cut = 0;
        }
    }
    // The header line alone, whole (`is_unended_header`): ended too.
    let mut header_ended = None;
    if header_open && ended.is_none() && super::fragment::is_unended_header(last) {
        out.extend(encode_frame(&[last, b"\n"].concat())?);
        header_ended = Some(last.len());
        cut = 0;
    }
    if header_open && ended.is_none() && header_ended.is_none() {
        return Err(std::io::Error::other(
            "no frame completes the header line: the file holds no session header; set it \
             aside (move the session directory out of the root)",
        ));
    }
    if joined == 0 && stray_frames == 0 && cut == 0 && ended.is_none() && header_ended.is_none() {
        return Err(std::io::Error::other(
            "no frame ends inside a line now: run the doctor again",
        ));
    }
    run.keep(path, "rewritten", None)?;
    publish_over(path, &out)?;
    drop(locked);
    drop(file);
    let frames = |n: usize| if n == 1 { "frame was" } else { "frames were" };
    let mut parts = Vec::new();
    if joined > 0 {
        parts.push(format!(
            "{joined} {} joined where lines were split across frames (the same decoded bytes, \
             each frame now ending a line{})",
            frames(joined),
            if header_joined {
                ", the header line in a frame of its own"
            } else {
                ""
            }
        ));
    }
    if torn_bytes > 0 {
        parts.push(format!(
            "the start of a record whose rest never came ({torn_bytes} bytes), which the next \
             frame does not continue, was cut"
        ));
    }
    if unended > 0 {
        parts.push(format!(
            "{unended} {} without its newline, which the next frame does not continue, {} \
             ended with one",
            if unended == 1 { "record" } else { "records" },
            if unended == 1 { "was" } else { "were" }
        ));
    }
    if header_reframed {
        parts.push(
            "the header frame after them, which held more lines, was re-framed: the header \
             line in a frame of its own, then the rest"
                .into(),
        );
    }
    if cut > 0 {
        parts.push(format!(
            "the incomplete last line ({cut} bytes), which no frame completes, was cut"
        ));
    }
    if let Some(len) = header_ended {
        parts.push(format!(
            "the header line ({len} bytes), whole but without its newline, was ended with one"
        ));
    }
    if let Some(len) = ended {
        parts.push(format!(
            "the last record ({len} bytes), whole and continuing seq but without its newline, \
             was ended with one"
        ));
    }
    let mut done = parts.join("; ");
    done.push_str("; the original is in the quarantine folder");
    Ok(done)
}

/// The `seq` after the last complete line of `out` (complete frames, each
/// ending a line): read from the last data frame that decodes to any
/// bytes. `None` when there is none or that line is no valid record.
fn next_seq_of_frames(out: &[u8]) -> Option<u64> {
    use super::super::frame::FrameKind;
    let frames = complete_frames(out).ok()?;
    for f in frames
        .iter()
        .rev()
        .filter(|f| matches!(f.kind, FrameKind::Data { .. }))
    {
        let text = decoded(out, f).ok()?;
        if !text.is_empty() {
            return super::super::lines::next_seq_of_transcript(&text).ok();
        }
    }
    None
}

/// The frames that replace a joined run of decoded `lines` (whole lines):
/// one frame, or, when the run began with the header frame, the header
/// line alone and then the rest (FORMAT.md: the first frame is exactly
/// the header line).
fn joined_frames(lines: &[u8], header_run: bool) -> std::io::Result<Vec<u8>> {
    if !header_run {
        return encode_frame(lines);
    }
    let nl = lines
        .iter()
        .position(|&b| b == b'\n')
        .unwrap_or(lines.len() - 1);
    encode(Encoding::Zstd, &lines[..=nl], &lines[nl + 1..])
}

/// A first frame holding the header and more lines: re-framed as the
/// header alone, then the rest of that frame's lines; every later frame
/// kept byte for byte.
fn reframe(run: &mut Run, path: &Path) -> std::io::Result<String> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    let locked = repair_lock(path, &file)?;
    let bytes = fs::read(path)?;
    let frames = complete_frames(&bytes)?;
    let Some(first) = frames
        .iter()
        .find(|f| matches!(f.kind, super::super::frame::FrameKind::Data { .. }))
    else {
        return Err(std::io::Error::other("the file holds no data frame now"));
    };
    let text = decoded(&bytes, first)?;
    let Some(nl) = text.iter().position(|&b| b == b'\n') else {
        return Err(std::io::Error::other("no header line"));
    };
    if nl + 1 == text.len() {
        return Err(std::io::Error::other(
            "the first frame holds the header alone now: run the doctor again",
        ));
    }
    let mut out = bytes[..first.offset as usize].to_vec();
    out.extend(encode(Encoding::Zstd, &text[..=nl], &text[nl + 1..])?);
    out.extend_from_slice(&bytes[(first.offset + first.len) as usize..]);
    run.keep(path, "rewritten", None)?;
    publish_over(path, &out)?;
    drop(locked);
    drop(file);
    Ok(
        "re-framed: the header in a frame of its own, the same decoded bytes, the later \
         frames as they were"
            .into(),
    )
}

/// A session directory not where its header says: moved there when free.
fn move_home(run: &mut Run, scan: &Scan, transcript: &Path) -> std::io::Result<String> {
    let Some(file) = scan.files.iter().find(|f| f.path == transcript) else {
        return Err(std::io::Error::other("not scanned"));
    };
    let h = file
        .header
        .as_ref()
        .ok_or_else(|| std::io::Error::other("no header"))?;
    let project = h
        .project_dir_name()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let session = h
        .session_dir_name()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let dest = scan.root.join(&project).join(&session);
    let src = transcript
        .parent()
        .ok_or_else(|| std::io::Error::other("no directory"))?;
    if dest.exists() {
        return Err(std::io::Error::other(format!("{} is taken", Shown(&dest))));
    }
    run.keep(transcript, "relocated", Some(dest.clone()))?;
    fs::create_dir_all(scan.root.join(&project))?;
    // rename(2) of a directory onto a missing name is atomic.
    fs::rename(src, &dest)?;
    sync_dir(src.parent());
    sync_dir(dest.parent());
    Ok(format!("moved to {}", Shown(&dest)))
}

/// A transcript of the other encoding, converted when no transcript of the
/// root's encoding stands beside it.
fn convert(run: &mut Run, path: &Path, root_enc: Encoding) -> std::io::Result<String> {
    let dest = path.with_file_name(root_enc.file_name());
    let text = readable_text(path, root_enc.opposite())?;
    let nl = text
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| std::io::Error::other("no header"))?;
    let bytes = encode(root_enc, &text[..=nl], &text[nl + 1..])?;
    if dest.exists() {
        // A run interrupted between publishing the conversion and
        // removing the original: the same bytes stand there; finish it.
        if fs::read(&dest).ok().as_deref() != Some(bytes.as_slice()) {
            return Err(std::io::Error::other(format!(
                "{} exists beside it",
                Shown(&dest)
            )));
        }
        run.keep(path, "converted", Some(dest.clone()))?;
        fs::remove_file(path)?;
        sync_dir(path.parent());
        return Ok(format!(
            "converted to {} (finishing an interrupted run)",
            Shown(&dest)
        ));
    }
    run.keep(path, "converted", Some(dest.clone()))?;
    let tmp = dest.with_file_name(format!("{}.{DOCTOR_TEMP_HEX}.tmp", root_enc.file_name()));
    let _ = fs::remove_file(&tmp);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    fs::hard_link(&tmp, &dest)?;
    fs::remove_file(&tmp)?;
    fs::remove_file(path)?;
    sync_dir(path.parent());
    Ok(format!("converted to {}", Shown(&dest)))
}

/// Publishes the other history as a fork session; returns its path.
fn publish_fork(
    root: &Path,
    encoding: Encoding,
    parent: &super::super::header::Header,
    id_source: &[u8],
    seed: &[&[u8]],
    divergent: &[&[u8]],
) -> std::io::Result<PathBuf> {
    let id = fork_id(&parent.id, id_source);
    let (header, events) =
        fork_lines(parent, &id, seed, divergent).map_err(std::io::Error::other)?;
    match super::super::publish::publish_session(root, encoding, &header, &events) {
        Ok(p) => Ok(p),
        // A run interrupted after publishing the fork: the same fork is
        // there (same bytes), so the repair goes on.
        Err(super::super::error::StoreError::AlreadyExists { path }) => {
            let want = encode(encoding, &header, &events)?;
            if fs::read(&path).ok().as_deref() == Some(want.as_slice()) {
                Ok(path)
            } else {
                Err(std::io::Error::other(format!(
                    "{} exists and is another session",
                    Shown(&path)
                )))
            }
        }
        Err(e) => Err(std::io::Error::other(e.to_string())),
    }
}

/// The seed of a fork: the lines (after the header) whose events come
/// before `seq`.
fn seed_before<'a>(all: &[&'a [u8]], seq: u64) -> Vec<&'a [u8]> {
    all.iter()
        .skip(1)
        // Read as the store reads lines (json.rs: no recursion, any depth).
        .take_while(|l| super::fork::line_span(l).is_some_and(|(s, _)| s < seq))
        .copied()
        .collect()
}

/// A conflict copy: its divergent part becomes a fork, then the copy is
/// set aside.
fn fork_conflict(run: &mut Run, scan: &Scan, layout_index: usize) -> std::io::Result<String> {
    let path = scan.layout[layout_index].path.clone();
    let (c, _) = scan
        .conflicts
        .iter()
        .find(|(c, _)| c.path == path)
        .ok_or_else(|| std::io::Error::other("not scanned"))?;
    let (copy_text, failed_at) = readable_prefix(&c.path, c.encoding)?;
    if let Some(at) = failed_at {
        // Checked again: never set aside what a frame it cannot read may
        // hold.
        return Err(std::io::Error::other(format!(
            "{}; {}",
            super::history::damaged_copy(at),
            super::history::DAMAGED_COPY_FIX
        )));
    }
    let main_text = readable_text(&c.transcript, c.encoding)?;
    let (a, b) = (lines(&copy_text), lines(&main_text));
    // Not a copy of this session: left where it is (the finding stays, its
    // fix says what to do), never set aside as holding nothing new.
    let same =
        copy_history(&a, &b).ok_or_else(|| std::io::Error::other(super::history::STRANGER_FIX))?;
    let parent = scan
        .files
        .iter()
        .find(|f| f.path == c.transcript)
        .and_then(|f| f.header.clone())
        .ok_or_else(|| std::io::Error::other("the transcript beside it has no valid header"))?;
    let mut text = "the copy holds nothing the transcript lacks".to_string();
    let mut made = None;
    if same < a.len() {
        let first_seq = super::fork::line_span(a[same])
            .map(|(s, _)| s)
            .ok_or_else(|| std::io::Error::other("the copy's first divergent line has no seq"))?;
        let seed = seed_before(&b, first_seq);
        let fork = publish_fork(
            &scan.root,
            scan.encoding.unwrap_or(Encoding::Zstd),
            &parent,
            &copy_text,
            &seed,
            &a[same..],
        )?;
        text = format!(
            "its {} divergent lines became the fork {}",
            a.len() - same,
            Shown(&fork)
        );
        made = Some(fork);
    }
    // The fork is recorded with the copy, so that --restore removes it.
    let copy = run.keep(&c.path, "moved", made)?;
    fs::remove_file(&c.path)?;
    sync_dir(c.path.parent());
    Ok(format!(
        "{text}; the copy was moved to the quarantine folder as {}",
        Shown(&copy)
    ))
}

/// A transcript whose `seq` went back: cut at the first repeated `seq`
/// (the committed prefix kept byte for byte), its first history's later
/// lines kept after it, and the other history published as a fork.
fn split_seq(run: &mut Run, scan: &Scan, fi: usize, enc: Encoding) -> std::io::Result<String> {
    let file = &scan.files[fi];
    let (split, _) = file
        .split
        .ok_or_else(|| std::io::Error::other("no split"))?;
    let parent = file
        .header
        .clone()
        .ok_or_else(|| std::io::Error::other("no header"))?;
    let fh = OpenOptions::new().read(true).write(true).open(&file.path)?;
    let _locked = repair_lock(&file.path, &fh)?;
    let (text, starts) = readable_frames(&file.path, enc)?;
    let cut = split.plain_offset as usize;
    if cut > text.len() {
        return Err(std::io::Error::other("the file changed since the scan"));
    }
    // Partition the lines after the cut into the two histories, as the
    // scan did (`assign`: lines of one frame are one writer's).
    let all = lines(&text);
    let frame_of = |at: usize| starts.partition_point(|&s| s <= at as u64);
    let mut next_main: u64 = 0;
    let mut offset = 0usize;
    let mut main_keep: Vec<&[u8]> = Vec::new();
    let mut other: Vec<&[u8]> = Vec::new();
    let mut other_next = split.seq;
    let (mut side, mut previous_start) = (Side::Main, 0usize);
    // The frame found holding lines of both histories, if any (see
    // `assign`).
    let mut mixed_frame: Option<usize> = None;
    for (i, l) in all.iter().enumerate() {
        let start = offset;
        offset += l.len() + 1;
        if i == 0 {
            continue;
        }
        let (s, n) =
            super::fork::line_span(l).ok_or_else(|| std::io::Error::other("a line without seq"))?;
        if start < cut {
            next_main = s + n;
        } else {
            let frame = frame_of(start + l.len());
            let same_frame = frame_of(previous_start) == frame;
            let with_previous = same_frame && mixed_frame != Some(frame);
            let (to, fit) = assign(s, next_main, other_next, side, with_previous);
            if same_frame && to != side {
                mixed_frame = Some(frame);
            }
            if fit != Fit::Continues {
                // The scan reports such a split without a fork; one
                // written since is not split.
                return Err(std::io::Error::other(format!(
                    "the file changed since the scan: seq {s} continues both histories or \
                     neither"
                )));
            }
            match to {
                Side::Main => {
                    main_keep.push(l);
                    next_main = s + n;
                }
                Side::Other => {
                    other.push(l);
                    other_next = s + n;
                }
            }
            side = to;
        }
        previous_start = start;
    }
    // Under the lock: the split must still be there (another doctor may
    // have made it since this scan).
    if other.is_empty() {
        return Err(std::io::Error::other(
            "the file changed since the scan: no second history after the cut (already split?)",
        ));
    }
    let seed = seed_before(&all, split.seq);
    // The new file, made before anything is published (a step that fails
    // leaves the store as it was): the original bytes up to the frame
    // holding the cut (found in the file as it is now: an earlier repair
    // of this run may have re-framed it, keeping its decoded bytes), then
    // the rest of the first history re-encoded.
    let mut bytes = std::fs::read(&file.path)?;
    let (frame_at, prefix_plain) = frame_holding(&bytes, enc, cut)?;
    bytes.truncate(frame_at);
    let mut tail = text[prefix_plain..cut].to_vec();
    for l in &main_keep {
        tail.extend_from_slice(l);
        tail.push(b'\n');
    }
    if !tail.is_empty() {
        match enc {
            Encoding::Zstd => bytes.extend(encode_frame(&tail)?),
            Encoding::Raw => bytes.extend_from_slice(&tail),
        }
    }
    let fork = publish_fork(&scan.root, enc, &parent, &text[cut..], &seed, &other)?;
    run.keep(&file.path, "rewritten", Some(fork.clone()))?;
    publish_over(&file.path, &bytes)?;
    drop(fh);
    Ok(format!(
        "split at seq {}: the transcript keeps the first history ({} later lines), the other \
         history ({} lines) became the fork {}",
        split.seq,
        main_keep.len(),
        other.len(),
        Shown(&fork)
    ))
}

/// Where the frame holding decoded byte `plain_at` starts in `bytes`,
/// and the decoded length of the frames before it: `(plain_at, plain_at)`
/// for a raw transcript. Errors when `bytes` is not complete frames or
/// holds fewer decoded bytes.
fn frame_holding(bytes: &[u8], enc: Encoding, plain_at: usize) -> std::io::Result<(usize, usize)> {
    if enc == Encoding::Raw {
        return Ok((plain_at, plain_at));
    }
    let mut plain = 0usize;
    for f in complete_frames(bytes)? {
        if !matches!(f.kind, super::super::frame::FrameKind::Data { .. }) {
            continue;
        }
        let n = decoded_len(bytes, &f)? as usize;
        if plain + n > plain_at {
            return Ok((f.offset as usize, plain));
        }
        plain += n;
    }
    Err(std::io::Error::other(
        "the file changed since the scan: it ends before the cut",
    ))
}
