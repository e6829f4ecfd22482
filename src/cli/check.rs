//! `sessionfs check`: verifies transcripts and repairs torn tails.

use std::path::{Path, PathBuf};

use clap::Args;

use super::{emit, EXIT_ERROR, EXIT_OK};
use crate::store::error::Shown;
use crate::store::{Store, StoreOptions};

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
        CheckTarget::File => check_files(std::slice::from_ref(path), args.repair).0,
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

/// Checks each transcript of `paths` and reports it; returns the exit
/// status, and whether the output was cut short (stdout closed).
fn check_files(paths: &[PathBuf], repair: bool) -> (u8, bool) {
    use crate::store::check::check_transcript;
    let mut code = EXIT_OK;
    for path in paths {
        let text = match check_transcript(path, repair) {
            Ok(r) => {
                if r.has_problem() {
                    code = EXIT_ERROR;
                }
                check_report_text(&r)
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
    for at in &r.skippable {
        notes.push(format!(
            "skippable frame at byte {at}: the reference refuses it (sessionfs skips it); \
             check does not remove it (committed data is never rewritten)"
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

/// Where a store error is about, for its `PROBLEM` line.
fn store_error_path(e: &crate::store::StoreError) -> Option<&Path> {
    use crate::store::StoreError as E;
    match e {
        E::Io { path, .. }
        | E::FlatArtifact { path }
        | E::EncodingMismatch { path, .. }
        | E::Misplaced { path, .. }
        | E::HeaderLess { path, .. }
        | E::Corrupt { path, .. }
        | E::UnsupportedVersion { path, .. }
        | E::NotFound { path }
        | E::InvalidLine { path, .. }
        | E::SeqConflict { path, .. }
        | E::TornTail { path, .. }
        | E::AlreadyExists { path } => Some(path),
        E::DuplicateId { paths, .. } => paths.first().map(PathBuf::as_path),
        _ => None,
    }
}

/// Checks every transcript under `root`, then what the mount and `list`
/// refuse in it (flat artifacts, encoding mismatches, duplicates, misplaced
/// sessions, entries under a transcript's name that are no files, …).
fn check_root(root: &Path, repair: bool) -> u8 {
    use crate::store::check::transcripts_under;
    let paths = transcripts_under(root);
    let (mut code, cut) = check_files(&paths, repair);
    if cut {
        return code;
    }
    let listing = Store::open(root, StoreOptions::default()).and_then(|store| store.sessions());
    let listing = match listing {
        Ok(listing) => listing,
        Err(e) => return problem_only(root, &format!("cannot list the store: {e}")),
    };
    for e in &listing.errors {
        code = EXIT_ERROR;
        let path = store_error_path(e).unwrap_or(root);
        let text = problem_line(path, &format!("the mount and list refuse it: {e}"));
        if let Err(written) = emit(&text) {
            return if code == EXIT_OK { written } else { code };
        }
    }
    if paths.is_empty() && listing.errors.is_empty() && listing.sessions.is_empty() {
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
