//! `sessionfs check`: verifies transcripts and repairs torn tails.

use std::path::{Path, PathBuf};

use clap::Args;

use super::{emit, EXIT_ERROR, EXIT_OK};
use std::collections::HashMap;

use crate::store::doctor::{self, Finding, Kind, ScanOptions};
use crate::store::error::Shown;

#[derive(Debug, Args)]
pub(super) struct CheckArgs {
    /// A transcript file, or a root whose transcripts are all checked.
    pub(super) path: PathBuf,
    /// Truncate a torn last frame (incomplete write) so that appends work
    /// again. Nothing else is changed.
    #[arg(long)]
    pub(super) repair: bool,
}

pub(super) fn run(args: CheckArgs) -> u8 {
    use crate::store::check::{classify, CheckTarget};
    let path = &args.path;
    let shown = Shown(path);
    match classify(path) {
        CheckTarget::File => {
            // The doctor's line findings about the file (seq, refusals).
            let scan = doctor::scan(path, &ScanOptions::default(), &|_, _| {});
            let raw = crate::store::check::is_raw_name(path);
            let mut extra = Extra::new();
            for f in scan.findings().filter(|f| adds_to_check(f.kind, raw)) {
                extra.entry(f.path.clone()).or_default().push(f.clone());
            }
            check_files(std::slice::from_ref(path), args.repair, &extra).0
        }
        CheckTarget::Root => check_root(path, args.repair),
        CheckTarget::SessionDir => problem_only(
            path,
            "a session directory, not a session store root: check its transcript \
             (session.jsonl.zstd or session.jsonl) or give the root",
        ),
        CheckTarget::ProjectDir => problem_only(
            path,
            &format!(
                "a project directory, not a session store root: give the root \
                 (the directory that holds {shown})"
            ),
        ),
        CheckTarget::Other(what) => problem_only(path, &what),
    }
}

/// One `PROBLEM` line about `path`; exit status 1.
fn problem_only(path: &Path, what: &str) -> u8 {
    let _ = emit(&problem_line(path, what));
    EXIT_ERROR
}

fn problem_line(path: &Path, what: &str) -> String {
    format!("PROBLEM\t{}\t{what}\n", Shown(path))
}

/// The doctor's findings about each transcript that the frame check does
/// not make itself (layout, identity, `seq`, the reference's refusals).
type Extra = HashMap<PathBuf, Vec<Finding>>;

/// Whether a doctor finding adds to what `check_transcript` reports for a
/// file read as `raw` (frames, headers and, for raw files, lines are its own).
fn adds_to_check(kind: Kind, raw: bool) -> bool {
    use Kind as K;
    match kind {
        K::EncodingMismatch
        | K::DuplicateId
        | K::Misplaced
        | K::SeqGap
        | K::SeqDuplicate
        | K::InterleavedWriters
        | K::UnknownEventType
        | K::CwdRejected
        | K::EventRefused => true,
        K::InvalidLine => !raw,
        _ => false,
    }
}

/// Checks each transcript of `paths` and reports it, with the doctor's
/// `extra` findings as notes; returns the exit status, and whether the
/// output was cut short (stdout closed).
fn check_files(paths: &[PathBuf], repair: bool, extra: &Extra) -> (u8, bool) {
    use crate::store::check::check_transcript;
    let mut code = EXIT_OK;
    for path in paths {
        let text = match check_transcript(path, repair) {
            Ok(mut r) => {
                let mut refusals = Vec::new();
                for f in extra.get(path).into_iter().flatten() {
                    let at = f
                        .offset
                        .map(|o| format!(" at byte {o}"))
                        .unwrap_or_default();
                    let note = format!("{}{at}: {}; fix: {}", f.kind.name(), f.detail, f.fix);
                    if f.kind.content_only() {
                        refusals.push(format!("{note} (the reference refuses to load it)"));
                    } else {
                        r.problems.push(note);
                    }
                }
                if r.has_problem() {
                    code = EXIT_ERROR;
                }
                let mut text = check_report_text(&r);
                for n in refusals {
                    text.push_str(&format!("\t{n}\n"));
                }
                text
            }
            Err(e) => {
                code = EXIT_ERROR;
                problem_line(path, &format!("cannot check it: {e}"))
            }
        };
        if let Err(written) = emit(&text) {
            return (if code == EXIT_OK { written } else { code }, true);
        }
    }
    (code, false)
}

/// The report of one transcript: a status line (`ok`, `repaired` or
/// `PROBLEM`), then one indented line per note.
fn check_report_text(r: &crate::store::check::CheckReport) -> String {
    let mut notes: Vec<String> = r.problems.clone();
    let (unit, torn_unit) = if r.raw {
        ("header line", "torn last line")
    } else {
        ("header frame", "torn last frame")
    };
    if let Some(at) = r.torn_at {
        notes.push(if r.torn_in_header {
            format!(
                "{torn_unit} at byte {at}: the file is torn inside its {unit}: nothing \
                 committed; restore it from a backup or remove the session directory"
            )
        } else if r.repaired {
            match &r.quarantined {
                Some(copy) => format!(
                    "{torn_unit} at byte {at}: truncated (repaired); the cut bytes are kept \
                     in {}",
                    Shown(copy)
                ),
                None => format!("{torn_unit} at byte {at}: truncated (repaired)"),
            }
        } else {
            format!("{torn_unit} at byte {at}: run with --repair to truncate it")
        });
    }
    // One note for all of them, however many there are.
    if !r.skippable.is_empty() {
        let it = if r.skippable.count == 1 { "it" } else { "them" };
        notes.push(format!(
            "{}: the reference refuses {it} (sessionfs skips {it}); check does not remove \
             {it} (committed data is never rewritten); `sessionfs doctor` says what to do",
            r.skippable.describe()
        ));
    }
    let status = if r.has_problem() {
        "PROBLEM"
    } else if r.repaired {
        "repaired"
    } else {
        "ok"
    };
    let summary = if r.raw {
        format!("{} lines, {} bytes", r.lines, r.plain_len)
    } else {
        format!("{} frames, {} bytes decompressed", r.frames, r.plain_len)
    };
    let mut text = format!("{status}\t{}\t{summary}\n", Shown(&r.path));
    for n in notes {
        text.push_str(&format!("\t{n}\n"));
    }
    text
}

/// Checks every transcript under `root` with the doctor's scan
/// ([`crate::store::doctor`]): each transcript once (its frames by
/// `check_transcript`, which also does the torn-tail repair; its layout,
/// identity and line findings as notes), then the doctor's findings about
/// other files (flat artifacts, temporaries, locks, conflict copies,
/// unsupported names); a summary on stderr.
fn check_root(root: &Path, repair: bool) -> u8 {
    use crate::store::check::transcripts_under;
    let scan = doctor::scan(root, &ScanOptions::default(), &|_, _| {});
    let paths = transcripts_under(root);
    let mut extra = Extra::new();
    let mut others = Vec::new();
    let raw_of = |p: &Path| crate::store::check::is_raw_name(p);
    for f in scan.findings() {
        if paths.contains(&f.path) {
            if adds_to_check(f.kind, raw_of(&f.path)) {
                extra.entry(f.path.clone()).or_default().push(f.clone());
            }
        } else {
            others.push(f.clone());
        }
    }
    let (mut code, cut) = check_files(&paths, repair, &extra);
    if cut {
        return code;
    }
    for f in &others {
        code = EXIT_ERROR;
        let at = f
            .offset
            .map(|o| format!(" at byte {o}"))
            .unwrap_or_default();
        let text = problem_line(
            &f.path,
            &format!("{}{at}: {}; fix: {}", f.kind.name(), f.detail, f.fix),
        );
        if let Err(written) = emit(&text) {
            return if code == EXIT_OK { written } else { code };
        }
    }
    let problems = scan.findings().filter(|f| !f.kind.content_only()).count();
    eprintln!(
        "{} checked, {} found{}",
        super::counted(paths.len() as u64, "transcript", "transcripts"),
        super::counted(problems as u64, "problem", "problems"),
        if repair {
            " (torn tails repaired where found)"
        } else {
            ""
        }
    );
    let listing_empty = scan.files.is_empty();
    if paths.is_empty() && others.is_empty() && listing_empty {
        let empty = std::fs::read_dir(root).is_ok_and(|mut it| it.next().is_none());
        return if empty {
            match emit(&format!(
                "ok\t{}\tan empty store (no sessions)\n",
                Shown(root)
            )) {
                Ok(()) => EXIT_OK,
                Err(written) => written,
            }
        } else {
            problem_only(
                root,
                "not a session store root: no transcript at \
                 <project>/<session>/session.jsonl[.zstd] under it",
            )
        };
    }
    code
}
