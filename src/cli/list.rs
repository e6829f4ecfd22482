//! `sessionfs list`: the sessions of a root, as a table or JSON.

use std::io::{self, Write};
use std::path::PathBuf;

use clap::Args;

use super::dates::{format_utc_ms, system_time_ms};
use super::list_views::{self, ByView, Filters};
use super::{fail, open_store, output_result, EXIT_ERROR, EXIT_OK, EXIT_USAGE};
use crate::store::catalog::{SessionListing, SessionSummary};
use crate::store::{Store, StoreOptions};
use unicode_width::UnicodeWidthStr;

/// Widest ID column of the `list` table; longer ids overflow their row.
const MAX_ID_COLUMN: usize = 40;

#[derive(Debug, Args)]
pub(super) struct ListArgs {
    /// The session store's root directory.
    pub(super) root: PathBuf,
    /// Only the sessions whose header cwd is PATH (NFC or NFD spelling).
    #[arg(long, value_name = "PATH")]
    pub(super) project: Option<String>,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub(super) json: bool,
    /// Print the sessions as the mount's `.by-cwd`, `.by-date` or `.by-title` tree.
    #[arg(long, value_enum, value_name = "cwd|date|title", conflicts_with_all = ["json", "project"])]
    pub(super) by: Option<ByView>,
    /// Only sessions created at or after DATE: YYYY-MM-DD (local time,
    /// TZ respected) or an RFC 3339 time.
    #[arg(long, value_name = "DATE")]
    pub(super) since: Option<String>,
    /// Only sessions whose title holds every one of WORDS (case-insensitive).
    #[arg(long, value_name = "WORDS")]
    pub(super) grep_title: Option<String>,
}

pub(super) fn run(args: ListArgs) -> u8 {
    let mut filters = Filters::default();
    if let Some(text) = &args.since {
        match list_views::parse_since(text) {
            Ok(ms) => filters.since_ms = Some(ms),
            Err(e) => {
                eprintln!("sessionfs: {e}");
                return EXIT_USAGE;
            }
        }
    }
    if let Some(words) = &args.grep_title {
        filters.title_words = list_views::title_words(words);
    }
    let (_identity, store) = match open_store(&args.root) {
        Ok(v) => v,
        Err(code) => return code,
    };
    if args.by.is_some() || filters.any() {
        // The views' catalog is kept with the mount's index cache.
        let options = StoreOptions {
            compression: Some(store.encoding()),
            index_dir: crate::store::index_store::default_index_dir(),
            ..StoreOptions::default()
        };
        let store = match Store::open(store.root(), options) {
            Ok(s) => s,
            Err(e) => return fail(e),
        };
        return run_filtered(&args, &store, &filters);
    }
    let listing = match &args.project {
        Some(path) => store.sessions_for_project(path),
        None => store.sessions(),
    };
    let SessionListing {
        mut sessions,
        errors,
    } = match listing {
        Ok(listing) => listing,
        Err(e) => return fail(e),
    };
    sessions.sort_by(|a, b| {
        (a.created_at_ms, &a.id, &a.project_dir).cmp(&(b.created_at_ms, &b.id, &b.project_dir))
    });
    for e in &errors {
        eprintln!("sessionfs: skipped: {e}");
    }
    let mut out = io::BufWriter::new(io::stdout().lock());
    let written = if args.json {
        write_json(&mut out, &sessions)
    } else {
        write_table(&mut out, &sessions)
    }
    .and_then(|()| out.flush());
    match output_result(written) {
        EXIT_OK if !errors.is_empty() => EXIT_ERROR,
        code => code,
    }
}

/// `list` with `--by`, `--since` or `--grep-title`: the tree, or the
/// table/JSON of the sessions that pass the filters.
fn run_filtered(args: &ListArgs, store: &Store, filters: &Filters) -> u8 {
    let (kept, snap) = match list_views::filtered(store, filters) {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let mut out = io::BufWriter::new(io::stdout().lock());
    let listing = match &args.project {
        Some(path) => store.sessions_for_project(path),
        None => store.sessions(),
    };
    let SessionListing {
        mut sessions,
        errors,
    } = match listing {
        Ok(listing) => listing,
        Err(e) => return fail(e),
    };
    if let Some(by) = args.by {
        // The trees leave out the sessions that cannot be read; they are
        // reported as the table reports them.
        let written = list_views::write_tree(&mut out, &snap, by).and_then(|()| out.flush());
        for e in &errors {
            eprintln!("sessionfs: skipped: {e}");
        }
        return match output_result(written) {
            EXIT_OK if !errors.is_empty() => EXIT_ERROR,
            code => code,
        };
    }
    sessions.retain(|s| kept.contains(&(s.project_dir.clone(), s.session_dir.clone())));
    sessions.sort_by(|a, b| {
        (a.created_at_ms, &a.id, &a.project_dir).cmp(&(b.created_at_ms, &b.id, &b.project_dir))
    });
    for e in &errors {
        eprintln!("sessionfs: skipped: {e}");
    }
    let written = if args.json {
        write_json(&mut out, &sessions)
    } else {
        write_table(&mut out, &sessions)
    }
    .and_then(|()| out.flush());
    match output_result(written) {
        EXIT_OK if !errors.is_empty() => EXIT_ERROR,
        code => code,
    }
}

fn write_json(out: &mut impl Write, sessions: &[SessionSummary]) -> io::Result<()> {
    let array: Vec<serde_json::Value> = sessions
        .iter()
        .map(|s| {
            serde_json::json!({
                "id": s.id,
                "cwd": s.cwd,
                "createdAt": format_utc_ms(i64::try_from(s.created_at_ms).unwrap_or(i64::MAX)),
                "createdAtMs": s.created_at_ms,
                "size": s.plain_len,
                "modified": format_utc_ms(system_time_ms(s.modified)),
                "project": s.project_dir.to_string_lossy(),
                "path": s.transcript_path.to_string_lossy(),
            })
        })
        .collect();
    // A failed write keeps its kind (a closed pipe stays `BrokenPipe`).
    serde_json::to_writer_pretty(&mut *out, &array).map_err(io::Error::from)?;
    writeln!(out)
}

fn write_table(out: &mut impl Write, sessions: &[SessionSummary]) -> io::Result<()> {
    let header = ["ID", "CREATED", "SIZE", "MODIFIED", "CWD"];
    let rows: Vec<[String; 5]> = sessions
        .iter()
        .map(|s| {
            [
                printable(&s.id),
                format_utc_ms(i64::try_from(s.created_at_ms).unwrap_or(i64::MAX)),
                s.plain_len.to_string(),
                format_utc_ms(system_time_ms(s.modified)),
                s.cwd.as_deref().map_or_else(|| "-".to_string(), printable),
            ]
        })
        .collect();
    // Widths in terminal columns (a wide character such as `🚀` takes two).
    let mut widths = header.map(UnicodeWidthStr::width);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.width());
        }
    }
    // A very long id overflows its own row instead of widening every row.
    widths[0] = widths[0].min(MAX_ID_COLUMN);
    let line = |out: &mut dyn Write, cells: [&str; 5]| -> io::Result<()> {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                let pad = widths[i].saturating_sub(cell.width());
                // SIZE is right-aligned, the rest left-aligned.
                if i == 2 {
                    text.push_str(&" ".repeat(pad));
                    text.push_str(cell);
                } else {
                    text.push_str(cell);
                    text.push_str(&" ".repeat(pad));
                }
                text.push_str("  ");
            }
        }
        writeln!(out, "{}", text.trim_end())
    };
    line(out, header)?;
    for row in &rows {
        line(out, [&row[0], &row[1], &row[2], &row[3], &row[4]])?;
    }
    Ok(())
}

/// `s` with control characters escaped, so that one session stays one line
/// of the table.
fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_escapes_control_characters() {
        assert_eq!(printable("a b/é🚀"), "a b/é🚀");
        assert_eq!(printable("a\tb\nc"), "a\\tb\\nc");
    }
}
