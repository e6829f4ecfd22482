//! `sessionfs list --by cwd|date`, `--since DATE`, `--grep-title WORDS`:
//! the mount's `.by-cwd` and `.by-date` views as trees on stdout, and the
//! filters of issue 14. The facts come from the views' catalog
//! ([`crate::store::views`]), persisted under the index cache like the
//! mount's.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::Duration;

use clap::ValueEnum;
use jiff::tz::TimeZone;

use crate::store::error::Shown;
use crate::store::views::{ViewCatalog, ViewFacts, ViewKind, ViewSnapshot};
use crate::store::Store;

/// The trees `list --by` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum ByView {
    /// The header cwds as a directory tree (`.by-cwd`).
    Cwd,
    /// Year, month and day of creation, local time (`.by-date`).
    Date,
}

/// The filters of `list`.
#[derive(Debug, Default)]
pub(super) struct Filters {
    /// Milliseconds since the epoch: sessions created before are left out.
    pub(super) since_ms: Option<i64>,
    /// Lower-case words that must all occur in the title.
    pub(super) title_words: Vec<String>,
}

impl Filters {
    /// Whether any filter is set.
    pub(super) fn any(&self) -> bool {
        self.since_ms.is_some() || !self.title_words.is_empty()
    }

    fn keeps(&self, f: &ViewFacts) -> bool {
        if let Some(since) = self.since_ms {
            if i64::try_from(f.created_at_ms).unwrap_or(i64::MAX) < since {
                return false;
            }
        }
        let title = f.title.to_lowercase();
        self.title_words.iter().all(|w| title.contains(w.as_str()))
    }
}

/// Parses `--since`: `YYYY-MM-DD` (the start of that day in the local time
/// zone, `TZ` respected) or an RFC 3339 time (`2026-01-05T09:00:00Z`).
///
/// Errors: a message naming the value and the accepted forms.
pub(super) fn parse_since(text: &str) -> Result<i64, String> {
    if let Ok(date) = text.parse::<jiff::civil::Date>() {
        if let Ok(z) = date.to_zoned_datetime(TimeZone::system()) {
            return Ok(z.timestamp().as_millisecond());
        }
    }
    text.parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond())
        .map_err(|_| {
            format!(
                "--since {text:?}: expected a date YYYY-MM-DD (local time) or a time like \
                 2026-01-05T09:00:00Z"
            )
        })
}

/// Lower-case words of `--grep-title`.
pub(super) fn title_words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_lowercase).collect()
}

/// The sessions that pass `filters`, as (project, session) directory
/// names, and the snapshot of the views of those sessions.
///
/// Errors: the store's, when the root cannot be listed.
pub(super) fn filtered(
    store: &Store,
    filters: &Filters,
) -> Result<(HashSet<(OsString, OsString)>, ViewSnapshot), crate::store::StoreError> {
    let catalog = ViewCatalog::new(store, Duration::ZERO);
    let snap = catalog.snapshot(store)?;
    let kept: Vec<Arc<ViewFacts>> = snap
        .sessions
        .iter()
        .filter(|f| filters.keeps(f))
        .cloned()
        .collect();
    let set = kept
        .iter()
        .map(|f| (f.project.to_os_string(), f.session.to_os_string()))
        .collect();
    Ok((set, ViewSnapshot::build(kept, &TimeZone::system())))
}

/// Prints the tree of `view` in `snap`: directories end in `/`, links
/// show `name -> project/session`, two spaces of indent per level.
pub(super) fn write_tree(out: &mut impl Write, snap: &ViewSnapshot, by: ByView) -> io::Result<()> {
    let view = match by {
        ByView::Cwd => ViewKind::Cwd,
        ByView::Date => ViewKind::Date,
    };
    writeln!(out, "{}/", view.dir_name())?;
    // An explicit stack: the depth is the input's, never recursion.
    let mut stack: Vec<(String, usize)> = vec![(String::new(), 1)];
    while let Some((rel, depth)) = stack.pop() {
        write_dir(out, view, snap, &rel, depth, &mut stack)?;
    }
    Ok(())
}

fn write_dir(
    out: &mut impl Write,
    view: ViewKind,
    snap: &ViewSnapshot,
    rel: &str,
    depth: usize,
    stack: &mut Vec<(String, usize)>,
) -> io::Result<()> {
    let Some(dir) = snap.tree(view).dir(rel) else {
        return Ok(());
    };
    let indent = "  ".repeat(depth);
    if !rel.is_empty() {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        writeln!(out, "{}{}/", "  ".repeat(depth - 1), name)?;
    }
    for (name, &i) in snap.links(view, dir) {
        let s = &snap.sessions[i];
        writeln!(
            out,
            "{indent}{name} -> {}",
            Shown(&std::path::Path::new(&s.project).join(&*s.session))
        )?;
    }
    // Children in name order: pushed in reverse.
    for sub in dir.subdirs.iter().rev() {
        let child = if rel.is_empty() {
            sub.clone()
        } else {
            format!("{rel}/{sub}")
        };
        stack.push((child, depth + 1));
    }
    Ok(())
}
