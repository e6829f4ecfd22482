//! `sessionfs doctor`: the store-wide scan, its repairs and the restore of
//! a quarantine run (store logic in [`crate::store::doctor`]).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use super::{emit, EXIT_ERROR, EXIT_OK, EXIT_USAGE};
use crate::store::doctor::{self, repair, restore, Finding, Report, ScanOptions, Status};
use crate::store::error::Shown;

#[derive(Debug, Args)]
pub(super) struct DoctorArgs {
    /// A root (every session under it) or one transcript file.
    #[arg(required_unless_present = "restore")]
    pub(super) path: Option<PathBuf>,
    /// Repair what is lossless, set aside what cannot be read, turn second
    /// histories into fork sessions; each change is said.
    #[arg(long)]
    pub(super) repair: bool,
    /// Write one JSON report (docs/doctor-report.schema.json) to stdout.
    #[arg(long)]
    pub(super) json: bool,
    /// List clean sessions too.
    #[arg(long, short)]
    pub(super) verbose: bool,
    /// The quarantine base folder (default
    /// $XDG_STATE_HOME/sessionfs/quarantine); never inside the root.
    #[arg(long, value_name = "DIR")]
    pub(super) quarantine: Option<PathBuf>,
    /// Put the files of a quarantine run (a folder the doctor printed) back
    /// where they were, when those places are free.
    #[arg(long, value_name = "QUARANTINE_RUN", conflicts_with_all = ["repair", "path"])]
    pub(super) restore: Option<PathBuf>,
}

/// How long a scan runs before the progress bar shows (a terminal only);
/// `SESSIONFS_PROGRESS_AFTER_MS` overrides it (tests).
fn progress_after() -> Duration {
    std::env::var("SESSIONFS_PROGRESS_AFTER_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .map_or(Duration::from_millis(500), Duration::from_millis)
}

/// A progress bar on stderr, shown only on a terminal and only once the
/// scan took longer than [`progress_after`].
struct Progress {
    start: Instant,
    after: Duration,
    bar: Option<ProgressBar>,
    tty: bool,
}

impl Progress {
    fn new(enabled: bool) -> Progress {
        Progress {
            start: Instant::now(),
            after: progress_after(),
            bar: None,
            tty: enabled && std::io::stderr().is_terminal(),
        }
    }

    fn tick(&mut self, done: u64, total: u64) {
        if !self.tty {
            return;
        }
        if self.bar.is_none() && self.start.elapsed() >= self.after && done < total {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template("scanning {bar:40} {pos}/{len} sessions, {eta} left")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            self.bar = Some(bar);
        }
        if let Some(bar) = &self.bar {
            bar.set_position(done);
        }
    }

    fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

pub(super) fn run(args: DoctorArgs) -> u8 {
    if let Some(run) = &args.restore {
        return restore_run(run, args.json);
    }
    let Some(path) = args.path.as_deref() else {
        eprintln!("sessionfs: doctor needs a ROOT or a TRANSCRIPT");
        return EXIT_USAGE;
    };
    if std::fs::symlink_metadata(path.join(crate::fuse::status::STATUS_NAME)).is_ok() {
        eprintln!(
            "sessionfs: {}: a sessionfs mount, whose files are views of a store: give the store \
             itself, the ROOT it was mounted from (`cat {}` names it)",
            Shown(path),
            Shown(&path.join(crate::fuse::status::STATUS_NAME))
        );
        return EXIT_USAGE;
    }
    {
        use crate::store::check::{classify, CheckTarget};
        let wrong = match classify(path) {
            CheckTarget::File | CheckTarget::Root => None,
            CheckTarget::SessionDir => Some(
                "a session directory, not a session store root: give its transcript \
                 (session.jsonl.zstd or session.jsonl) or the root"
                    .to_string(),
            ),
            CheckTarget::ProjectDir => {
                Some("a project directory, not a session store root: give the root".to_string())
            }
            CheckTarget::Other(what) => Some(what),
        };
        if let Some(what) = wrong {
            eprintln!("sessionfs: {}: {what}", Shown(path));
            return EXIT_ERROR;
        }
    }
    if let Some(q) = &args.quarantine {
        let (root, q) = (
            std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()),
            std::fs::canonicalize(q).unwrap_or_else(|_| q.clone()),
        );
        if q.starts_with(&root) {
            eprintln!(
                "sessionfs: the quarantine folder {} is inside the root: give one outside it",
                Shown(&q)
            );
            return EXIT_USAGE;
        }
    }
    let progress = std::cell::RefCell::new(Progress::new(true));
    let mut scan = doctor::scan(path, &ScanOptions::default(), &|d, t| {
        progress.borrow_mut().tick(d, t)
    });
    progress.borrow_mut().finish();
    let folder = if args.repair {
        repair::repair(&mut scan, args.quarantine.clone())
    } else {
        None
    };
    let report = Report::build(path, &scan, args.repair, folder);
    let written = if args.json {
        let mut text = serde_json::to_string_pretty(&report).unwrap_or_default();
        text.push('\n');
        emit(&text)
    } else {
        emit(&text_report(&report, args.verbose))
    };
    if let Err(code) = written {
        return code;
    }
    exit_code(&report)
}

/// 0: nothing left but the reference's content refusals; 1: problems left.
pub(super) fn exit_code(report: &Report) -> u8 {
    let left = report
        .findings
        .iter()
        .any(|f| f.done.is_none() && !f.kind.content_only());
    if left {
        EXIT_ERROR
    } else {
        EXIT_OK
    }
}

fn finding_text(f: &Finding) -> String {
    let status = match (&f.done, f.kind.content_only()) {
        (Some(_), _) => "fixed",
        (None, true) => "refused",
        (None, false) => "PROBLEM",
    };
    let at = f
        .offset
        .map(|o| format!(" at byte {o}"))
        .unwrap_or_default();
    let mut t = format!(
        "{status}\t{}\t{}{at}\n\t{}\n\treference: {}\n",
        f.kind.name(),
        Shown(&f.path),
        f.detail,
        f.reference
    );
    match &f.done {
        Some(done) => t.push_str(&format!("\tdone: {done}\n")),
        None => t.push_str(&format!("\tfix: {}\n", f.fix)),
    }
    t
}

/// The text report: problems (and with `verbose`, clean sessions), the
/// quarantine folder, the summary.
pub(super) fn text_report(r: &Report, verbose: bool) -> String {
    let mut out = String::new();
    if verbose {
        for s in r.sessions.iter().filter(|s| s.status == Status::Clean) {
            out.push_str(&format!(
                "ok\t{}\t{} frames, {} lines, {} bytes\n",
                Shown(&s.path),
                s.frames,
                s.lines,
                s.bytes
            ));
        }
    }
    for f in &r.findings {
        out.push_str(&finding_text(f));
    }
    if let Some(q) = &r.quarantine {
        out.push_str(&format!("quarantine: {}\n", Shown(q)));
    }
    let s = &r.summary;
    out.push_str(&format!(
        "{} scanned: {} clean, {} repaired, {} set aside, {} refused by the reference \
         for content only, {} left; {} bytes\n",
        super::counted(s.sessions_scanned, "session", "sessions"),
        s.clean,
        s.repaired,
        s.set_aside,
        s.refused,
        super::counted(s.problems_left, "problem", "problems"),
        s.bytes
    ));
    out
}

fn restore_run(run: &Path, json: bool) -> u8 {
    let done = match restore::restore(run) {
        Ok(v) => v,
        Err(e) => {
            eprintln!(
                "sessionfs: {}: cannot read the run's manifest ({}): {e}; give a folder the \
                 doctor printed as its quarantine",
                Shown(run),
                restore::MANIFEST
            );
            return EXIT_ERROR;
        }
    };
    let mut code = EXIT_OK;
    let mut out = String::new();
    let mut rows = Vec::new();
    for r in &done {
        match &r.outcome {
            Ok(t) => out.push_str(&format!("restored\t{}\t{t}\n", Shown(&r.path))),
            Err(e) => {
                code = EXIT_ERROR;
                out.push_str(&format!("PROBLEM\t{}\tnot restored: {e}\n", Shown(&r.path)));
            }
        }
        rows.push(serde_json::json!({
            "path": r.path.to_string_lossy(),
            "restored": r.outcome.is_ok(),
            "detail": match &r.outcome { Ok(t) | Err(t) => t.clone() },
        }));
    }
    let text = if json {
        format!(
            "{}\n",
            serde_json::to_string_pretty(&rows).unwrap_or_default()
        )
    } else {
        out
    };
    match emit(&text) {
        Ok(()) => code,
        Err(c) => c,
    }
}
