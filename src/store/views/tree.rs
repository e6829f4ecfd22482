//! The three view trees built from the sessions' facts (issue 14):
//! `.by-cwd`, `.by-date`, `.by-title`. A tree maps a directory (its path
//! inside the view, components joined by `/`, `""` for the view's top) to
//! its subdirectories and links; a link names a session by its index in
//! [`ViewSnapshot::sessions`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use jiff::tz::TimeZone;
use jiff::Timestamp;

use super::facts::ViewFacts;
use super::names::{cwd_components, link_name, short_id};

/// Which view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ViewKind {
    /// `.by-cwd/`: the header cwds as a tree.
    Cwd,
    /// `.by-date/YYYY/MM/DD/`.
    Date,
    /// `.by-title/`: flat.
    Title,
}

impl ViewKind {
    /// Every view.
    pub const ALL: [ViewKind; 3] = [ViewKind::Cwd, ViewKind::Date, ViewKind::Title];

    /// Its directory name at the mount root.
    pub fn dir_name(self) -> &'static str {
        match self {
            ViewKind::Cwd => ".by-cwd",
            ViewKind::Date => ".by-date",
            ViewKind::Title => ".by-title",
        }
    }

    /// The view named `name` at the mount root.
    pub fn from_dir_name(name: &[u8]) -> Option<ViewKind> {
        ViewKind::ALL
            .into_iter()
            .find(|v| v.dir_name().as_bytes() == name)
    }
}

/// One directory of a view.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ViewDir {
    /// Names of the subdirectories.
    pub subdirs: BTreeSet<String>,
    /// Link name → index of the session in [`ViewSnapshot::sessions`].
    pub links: BTreeMap<String, usize>,
    /// The sessions linked in this directory or below it (indexes), so
    /// that a per-user view can hide a directory holding nothing the
    /// caller may see.
    pub below: Vec<usize>,
}

/// One view: directory path → directory.
#[derive(Debug, Default, Clone)]
pub struct ViewTree {
    /// `""` is the view's top directory.
    pub dirs: HashMap<String, ViewDir>,
}

impl ViewTree {
    /// The directory at `rel` (components joined by `/`).
    pub fn dir(&self, rel: &str) -> Option<&ViewDir> {
        self.dirs.get(rel)
    }

    /// Makes the directory `parts` and its ancestors, and records session
    /// `i` as below each of them.
    fn dir_mut(&mut self, parts: &[String], i: usize) -> &mut ViewDir {
        // Every ancestor exists and lists its child.
        for n in 0..parts.len() {
            let parent = self.dirs.entry(parts[..n].join("/")).or_default();
            parent.subdirs.insert(parts[n].clone());
            parent.below.push(i);
        }
        let dir = self.dirs.entry(parts.join("/")).or_default();
        dir.below.push(i);
        dir
    }

    /// Whether directory `rel` holds a session that `visible` accepts,
    /// here or below (it stops at the first).
    pub fn shows_any(
        &self,
        rel: &str,
        sessions: &[Arc<ViewFacts>],
        visible: &dyn Fn(&ViewFacts) -> bool,
    ) -> bool {
        self.dir(rel)
            .is_some_and(|d| d.below.iter().any(|&i| visible(&sessions[i])))
    }
}

/// All three views at one moment, and the sessions they link to.
#[derive(Debug)]
pub struct ViewSnapshot {
    /// When this snapshot was built: the views' directories show it as
    /// their mtime, so a kernel that caches listings until the mtime
    /// changes lists them again after a change.
    pub built: SystemTime,
    /// The sessions shown, sorted by (createdAt, id).
    pub sessions: Vec<Arc<ViewFacts>>,
    /// `.by-cwd`.
    pub by_cwd: ViewTree,
    /// `.by-date`.
    pub by_date: ViewTree,
    /// `.by-title`.
    pub by_title: ViewTree,
}

/// A session's creation time as local date parts in `zone`:
/// (`YYYY`, `MM`, `DD`, `HH-MM-SS`). Times outside jiff's range are clamped.
pub fn local_parts(ms: u64, zone: &TimeZone) -> (String, String, String, String) {
    let ms = i64::try_from(ms).unwrap_or(i64::MAX);
    let ts = Timestamp::from_millisecond(ms).unwrap_or(if ms < 0 {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    });
    let z = ts.to_zoned_datetime(zone.clone());
    (
        format!("{:04}", z.year()),
        format!("{:02}", z.month()),
        format!("{:02}", z.day()),
        format!("{:02}-{:02}-{:02}", z.hour(), z.minute(), z.second()),
    )
}

impl ViewSnapshot {
    /// The tree of `view`.
    pub fn tree(&self, view: ViewKind) -> &ViewTree {
        match view {
            ViewKind::Cwd => &self.by_cwd,
            ViewKind::Date => &self.by_date,
            ViewKind::Title => &self.by_title,
        }
    }

    /// Builds the views of `sessions` (dates in `zone`). Link names are
    /// unique within a directory: every name shared by several sessions,
    /// or equal to a subdirectory beside it, gets the full id (the encoded
    /// one) instead of the short id.
    pub fn build(mut sessions: Vec<Arc<ViewFacts>>, zone: &TimeZone) -> ViewSnapshot {
        sessions.sort_by(|a, b| {
            (a.created_at_ms, &a.id, &a.project).cmp(&(b.created_at_ms, &b.id, &b.project))
        });
        // (view, dir parts, prefix) per session.
        let mut wanted: Vec<(ViewKind, Vec<String>, String, usize)> = Vec::new();
        for (i, s) in sessions.iter().enumerate() {
            let (y, m, d, hms) = local_parts(s.created_at_ms, zone);
            let day = format!("{y}-{m}-{d} {hms}");
            wanted.push((ViewKind::Cwd, cwd_components(s.cwd.as_deref()), day, i));
            wanted.push((ViewKind::Date, vec![y, m, d], hms, i));
            wanted.push((ViewKind::Title, Vec::new(), String::new(), i));
        }
        let mut snap = ViewSnapshot {
            built: SystemTime::now(),
            sessions,
            by_cwd: ViewTree::default(),
            by_date: ViewTree::default(),
            by_title: ViewTree::default(),
        };
        // Directories first, so links can avoid subdirectory names.
        for (view, parts, _, i) in &wanted {
            snap.tree_mut(*view).dir_mut(parts, *i);
        }
        // Short names, grouped by directory.
        let mut groups: HashMap<(ViewKind, String), BTreeMap<String, Vec<usize>>> = HashMap::new();
        for (view, parts, prefix, i) in &wanted {
            let s = &snap.sessions[*i];
            let name = link_name(prefix, &s.title, &short_id(&s.id));
            groups
                .entry((*view, parts.join("/")))
                .or_default()
                .entry(name)
                .or_default()
                .push(*i);
        }
        for ((view, rel), names) in groups {
            let mut links = BTreeMap::new();
            let subdirs = snap.tree(view).dirs[&rel].subdirs.clone();
            for (name, holders) in names {
                if holders.len() == 1 && !subdirs.contains(&name) {
                    links.insert(name, holders[0]);
                    continue;
                }
                for i in holders {
                    let s = &snap.sessions[i];
                    let prefix = match view {
                        ViewKind::Title => String::new(),
                        _ => name_prefix(&name),
                    };
                    let full = link_name(&prefix, &s.title, &s.session.to_string_lossy());
                    links.insert(full, i);
                }
            }
            snap.tree_mut(view)
                .dirs
                .get_mut(&rel)
                .expect("made above")
                .links = links;
        }
        snap
    }

    fn tree_mut(&mut self, view: ViewKind) -> &mut ViewTree {
        match view {
            ViewKind::Cwd => &mut self.by_cwd,
            ViewKind::Date => &mut self.by_date,
            ViewKind::Title => &mut self.by_title,
        }
    }
}

/// The date prefix of a link name (`HH-MM-SS` or `YYYY-MM-DD HH-MM-SS`).
fn name_prefix(name: &str) -> String {
    let b = name.as_bytes();
    let cwd_form = b.len() >= 19 && b[4] == b'-' && b[10] == b' ';
    let len = if cwd_form { 19 } else { 8 };
    name.get(..len).unwrap_or("").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(id: &str, cwd: Option<&str>, ms: u64, title: &str) -> Arc<ViewFacts> {
        Arc::new(ViewFacts {
            project: "p".into(),
            session: id.into(),
            id: id.into(),
            cwd: cwd.map(String::from),
            created_at_ms: ms,
            title: title.into(),
        })
    }

    #[test]
    fn collisions_get_the_full_id_on_every_side() {
        let utc = TimeZone::UTC;
        // 2026-01-05 09:00:00 UTC.
        let ms = 1_767_603_600_000;
        let snap = ViewSnapshot::build(
            vec![
                facts("a_12345678", Some("/w"), ms, "same"),
                facts("b_12345678", Some("/w"), ms, "same"),
                facts("c_87654321", Some("/w//"), ms + 1000, "other"),
            ],
            &utc,
        );
        let day = snap.by_date.dir("2026/01/05").unwrap();
        let names: Vec<&str> = day.links.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "09-00-00 same a_12345678",
                "09-00-00 same b_12345678",
                "09-00-01 other 87654321"
            ]
        );
        let w = snap.by_cwd.dir("w").unwrap();
        assert_eq!(w.links.len(), 3);
        assert!(w.links.contains_key("2026-01-05 09-00-01 other 87654321"));
        assert_eq!(snap.by_cwd.dir("").unwrap().subdirs.len(), 1);
        assert_eq!(snap.by_title.dir("").unwrap().links.len(), 3);
        // A per-user filter hides a directory with nothing visible below.
        let only_c = |f: &ViewFacts| f.id == "c_87654321";
        let none = |_: &ViewFacts| false;
        assert!(snap.by_cwd.shows_any("", &snap.sessions, &only_c));
        assert!(snap.by_cwd.shows_any("w", &snap.sessions, &only_c));
        assert!(!snap.by_cwd.shows_any("w", &snap.sessions, &none));
        assert!(!snap.by_date.shows_any("2026", &snap.sessions, &none));
        assert!(!snap.by_cwd.shows_any("nowhere", &snap.sessions, &only_c));
    }
}
