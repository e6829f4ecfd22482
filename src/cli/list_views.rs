//! `sessionfs list --by cwd|date|title`, `--since DATE`, `--grep-title WORDS`:
//! the mount's `.by-cwd`, `.by-date` and `.by-title` views as trees on stdout, and the
//! filters of issue 14. The facts come from the views' catalog
//! ([`crate::store::views`]), persisted under the index cache like the
//! mount's.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::{self, Write};
use std::sync::Arc;
use std::time::Duration;

use clap::ValueEnum;

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
    /// One flat list by title (`.by-title`).
    Title,
}

/// The filters of `list`.
#[derive(Debug, Default)]
pub(super) struct Filters {
    /// Milliseconds since the epoch: sessions created before are left out.
    pub(super) since_ms: Option<i64>,
    /// Words ([`fold`]ed) that must all occur in the title.
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
        let title = fold(&f.title);
        self.title_words.iter().all(|w| title.contains(w.as_str()))
    }
}

/// A title or a word as `--grep-title` compares them: NFC (a word typed
/// in NFD finds a title stored in NFC, and the other way round), then
/// lower case.
fn fold(text: &str) -> String {
    use unicode_normalization::UnicodeNormalization;
    text.nfc().collect::<String>().to_lowercase()
}

/// Parses `--since`, in milliseconds since the epoch: `YYYY-MM-DD` (the
/// start of that day in the local time zone, `TZ` respected), an RFC 3339
/// time with its offset (`2026-01-05T09:00:00Z`, `…T09:00:00+05:00`), or
/// a date and time without one (`2026-01-05T09:00`, `2026-01-05 09:00`),
/// taken in the local time zone.
///
/// Errors: a message naming the value and the accepted forms.
pub(super) fn parse_since(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let local = |dt: jiff::civil::DateTime| {
        dt.to_zoned_datetime(crate::store::zone::local_zone().clone())
            .ok()
            .map(|z| z.timestamp().as_millisecond())
    };
    // A bare date only: jiff's date parser also takes a whole date-time
    // (and would drop its time and offset).
    let bare_date = text.len() == 10 && text.as_bytes()[4] == b'-' && text.as_bytes()[7] == b'-';
    let parsed = if bare_date {
        text.parse::<jiff::civil::Date>()
            .ok()
            .and_then(|d| local(d.to_datetime(jiff::civil::Time::midnight())))
    } else if let Ok(t) = text.parse::<jiff::Timestamp>() {
        Some(t.as_millisecond())
    } else {
        text.parse::<jiff::civil::DateTime>().ok().and_then(local)
    };
    parsed.or_else(|| past_timestamps(text)).ok_or_else(|| {
        format!(
            "--since {text:?}: expected a date YYYY-MM-DD (local time), a time with its offset \
             like 2026-01-05T09:00:00Z or 2026-01-05T09:00:00+05:00, or a local date and time \
             like 2026-01-05T09:00"
        )
    })
}

/// `--since` for a valid date or time that jiff's timestamps cannot hold
/// (they end on 9999-12-30 at 22:00 UTC, so that every offset stays a
/// valid civil time; `9999-12-31` was refused as a bad format): the
/// milliseconds counted from the civil date and time, less the given
/// offset, or the local zone's offset at the end of jiff's range.
fn past_timestamps(text: &str) -> Option<i64> {
    let pieces = jiff::fmt::temporal::Pieces::parse(text).ok()?;
    if pieces.time_zone_annotation().is_some() {
        return None;
    }
    let offset_s = match pieces.offset() {
        Some(o) => o.to_numeric_offset().seconds(),
        None => crate::store::zone::local_zone()
            .to_offset(jiff::Timestamp::MAX)
            .seconds(),
    };
    let days = pieces
        .date()
        .since((jiff::Unit::Day, jiff::civil::date(1970, 1, 1)))
        .ok()?
        .get_days();
    let t = pieces.time().unwrap_or(jiff::civil::Time::midnight());
    let ms_of_day =
        ((i64::from(t.hour()) * 60 + i64::from(t.minute())) * 60 + i64::from(t.second())) * 1000
            + i64::from(t.millisecond());
    Some(i64::from(days) * 86_400_000 + ms_of_day - i64::from(offset_s) * 1000)
}

/// The words of `--grep-title`, [`fold`]ed.
pub(super) fn title_words(text: &str) -> Vec<String> {
    text.split_whitespace().map(fold).collect()
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
    // A persisted catalog: transcripts removed or replaced since are
    // found by the sweep (one lstat per session), then read again.
    catalog.sweep(store);
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
    Ok((
        set,
        ViewSnapshot::build(kept, crate::store::zone::local_zone()),
    ))
}

/// Prints the tree of `view` in `snap`: directories end in `/`, links
/// show `name -> project/session`, two spaces of indent per level; control
/// characters in names are escaped (`\n`), as in the log.
pub(super) fn write_tree(out: &mut impl Write, snap: &ViewSnapshot, by: ByView) -> io::Result<()> {
    let view = match by {
        ByView::Cwd => ViewKind::Cwd,
        ByView::Date => ViewKind::Date,
        ByView::Title => ViewKind::Title,
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
        // Control characters escaped: one line per entry.
        let name = Shown(std::path::Path::new(name));
        writeln!(out, "{}{name}/", "  ".repeat(depth - 1))?;
    }
    for (name, i) in snap.links(view, dir).iter() {
        let s = &snap.sessions[i];
        writeln!(
            out,
            "{indent}{} -> {}",
            Shown(std::path::Path::new(name)),
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

#[cfg(test)]
mod tests {
    use super::*;

    const T: i64 = 1_767_670_200_000; // 2026-01-06T03:30:00Z

    #[test]
    fn since_takes_the_offset_of_an_rfc3339_time() {
        assert_eq!(parse_since("2026-01-06T03:30:00Z"), Ok(T));
        assert_eq!(parse_since("2026-01-06T03:30:00+00:00"), Ok(T));
        assert_eq!(parse_since("2026-01-06T08:30:00+05:00"), Ok(T));
        assert_eq!(parse_since("2026-01-05T22:30:00-05:00"), Ok(T));
        // Without an offset: local time, with its time of day kept.
        let local = |s: &str| {
            s.parse::<jiff::civil::DateTime>()
                .unwrap()
                .to_zoned_datetime(crate::store::zone::local_zone().clone())
                .unwrap()
                .timestamp()
                .as_millisecond()
        };
        assert_eq!(
            parse_since("2026-01-06 03:30"),
            Ok(local("2026-01-06T03:30"))
        );
        assert_eq!(
            parse_since("2026-01-06T03:30"),
            Ok(local("2026-01-06T03:30"))
        );
        assert_eq!(parse_since("2026-01-06"), Ok(local("2026-01-06T00:00")));
        assert!(parse_since("yesterday").is_err());
        assert!(parse_since("2026-13-01").is_err());
    }

    #[test]
    fn since_takes_the_last_days_of_year_9999() {
        // 9999-12-31T00:00:00Z, counted independently: 2,932,896 days
        // from 1970-01-01 (`date -u -d 9999-12-31 +%s` = 253402214400).
        let last_day_utc = 253_402_214_400_000;
        assert_eq!(parse_since("9999-12-31T00:00:00Z"), Ok(last_day_utc));
        assert_eq!(parse_since("9999-12-31T05:30:00+05:30"), Ok(last_day_utc));
        assert_eq!(
            parse_since("9999-12-31T23:59:59.999Z"),
            Ok(last_day_utc + 86_399_999)
        );
        // Local forms (TZ is UTC or what the test runner has): within a
        // day of the UTC figure, and ordered.
        let day = parse_since("9999-12-31").unwrap();
        assert!((day - last_day_utc).abs() <= 86_400_000, "{day}");
        assert!(parse_since("9999-12-31 12:00").unwrap() > day);
        assert!(parse_since("9999-12-32").is_err());
    }

    #[test]
    fn a_control_character_in_a_name_keeps_the_tree_one_line_per_entry() {
        use crate::store::views::facts::ViewFacts;
        let facts = ViewFacts {
            project: std::ffi::OsStr::new("--a-b--").into(),
            session: std::ffi::OsStr::new("s_12345678").into(),
            id: "s_12345678".into(),
            cwd: Some("/a\nb".into()),
            created_at_ms: T as u64,
            title: "line\u{1b}one".into(),
        };
        let snap = ViewSnapshot::build(vec![std::sync::Arc::new(facts)], &jiff::tz::TimeZone::UTC);
        let mut out = Vec::new();
        write_tree(&mut out, &snap, ByView::Cwd).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text:?}");
        // The component itself is escaped (store/views/names.rs).
        assert_eq!(lines[1], "  a%0Ab%~e5beb1190415e670/");
        assert_eq!(
            lines[2],
            "    2026-01-06 03-30-00 line\\u{1b}one 12345678 -> --a-b--/s_12345678"
        );
    }

    #[test]
    fn title_words_match_whatever_the_unicode_spelling() {
        let nfd = "u\u{308}nu\u{308}";
        let nfc = "\u{fc}n\u{fc}";
        for (word, title) in [(nfd, nfc), (nfc, nfd), ("ÜN", nfc)] {
            let words = title_words(word);
            assert!(
                fold(&format!("Fix {title} tests")).contains(words[0].as_str()),
                "{word:?} in {title:?}"
            );
        }
    }
}
