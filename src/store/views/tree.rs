//! The three view trees built from the sessions' facts (issue 14):
//! `.by-cwd`, `.by-date`, `.by-title`. A tree maps a directory (its path
//! inside the view, components joined by `/`, `""` for the view's top) to
//! its subdirectories and links; a link names a session by its index in
//! [`ViewSnapshot::sessions`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use jiff::tz::TimeZone;

use super::facts::ViewFacts;
use super::names::{cwd_components, fnv1a, link_name, short_id};

/// The last level of a link name's tail (see [`ViewSnapshot::links`]).
const MAX_NAME_LEVEL: u8 = 2;

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

    /// Its place in [`ViewKind::ALL`] (0, 1 or 2).
    pub fn index(self) -> usize {
        match self {
            ViewKind::Cwd => 0,
            ViewKind::Date => 1,
            ViewKind::Title => 2,
        }
    }

    /// The view at place `index` of [`ViewKind::ALL`].
    pub fn from_index(index: usize) -> Option<ViewKind> {
        ViewKind::ALL.get(index).copied()
    }
}

/// One directory of a view.
#[derive(Debug, Default)]
pub struct ViewDir {
    /// Names of the subdirectories.
    pub subdirs: BTreeSet<String>,
    /// The sessions linked in this directory (indexes into
    /// [`ViewSnapshot::sessions`]).
    pub members: Vec<usize>,
    /// The sessions linked in this directory or below it, so that a
    /// per-user view can hide a directory holding nothing the caller may
    /// see.
    pub below: Vec<usize>,
    /// Link name → session index, made at the first use of the directory
    /// (see [`ViewSnapshot::links`]).
    links: OnceLock<Links>,
}

/// The links of one view directory: names sorted, held one after another
/// in one string, with each name's end and session index (about 12 bytes
/// a link besides its name: a 20,000-session `.by-title` is one
/// directory).
#[derive(Debug, Default)]
pub struct Links {
    /// Every name, sorted, back to back.
    text: String,
    /// Where each name of `text` ends (bytes).
    ends: Box<[usize]>,
    /// Each name's session index.
    sessions: Box<[u32]>,
}

impl Links {
    /// Links of `(name, session index)` pairs, sorted by name.
    fn from_sorted(names: Vec<(Box<str>, usize)>) -> Links {
        let mut text = String::with_capacity(names.iter().map(|(n, _)| n.len()).sum());
        let mut ends = Vec::with_capacity(names.len());
        let mut sessions = Vec::with_capacity(names.len());
        for (name, i) in names {
            text.push_str(&name);
            ends.push(text.len());
            sessions.push(u32::try_from(i).unwrap_or(u32::MAX));
        }
        Links {
            text,
            ends: ends.into_boxed_slice(),
            sessions: sessions.into_boxed_slice(),
        }
    }

    /// The `k`th name.
    fn name(&self, k: usize) -> &str {
        let start = if k == 0 { 0 } else { self.ends[k - 1] };
        &self.text[start..self.ends[k]]
    }

    /// The session index of link `name`.
    pub fn get(&self, name: &str) -> Option<usize> {
        let k = self.partition_point(name);
        (k < self.len() && self.name(k) == name).then(|| self.sessions[k] as usize)
    }

    /// How many names sort before `name`.
    fn partition_point(&self, name: &str) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.name(mid) < name {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// Whether there is a link `name`.
    pub fn contains_key(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// How many links.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The names, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        (0..self.len()).map(|k| self.name(k))
    }

    /// `(name, session index)` of every link, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, usize)> {
        (0..self.len()).map(|k| (self.name(k), self.sessions[k] as usize))
    }
}

/// One view: directory path → directory.
#[derive(Debug, Default)]
pub struct ViewTree {
    /// `""` is the view's top directory.
    pub dirs: HashMap<String, ViewDir>,
}

impl ViewTree {
    /// The directory at `rel` (components joined by `/`).
    pub fn dir(&self, rel: &str) -> Option<&ViewDir> {
        self.dirs.get(rel)
    }

    /// Makes the directory `parts` and its ancestors, and records the
    /// sessions `members` in it and as below each of them.
    fn add(&mut self, parts: &[String], members: &[usize]) {
        let mut path = String::new();
        for part in parts {
            let parent = self.dirs.entry(path.clone()).or_default();
            parent.below.extend_from_slice(members);
            if !parent.subdirs.contains(part) {
                parent.subdirs.insert(part.clone());
            }
            if !path.is_empty() {
                path.push('/');
            }
            path.push_str(part);
        }
        let dir = self.dirs.entry(path).or_default();
        dir.below.extend_from_slice(members);
        dir.members.extend_from_slice(members);
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

/// All three views at one moment, and the sessions they link to. Each
/// view's tree is made at its first use, and each directory's link names
/// at the first use of that directory, so listing one day or one cwd
/// formats only that directory's names.
#[derive(Debug)]
pub struct ViewSnapshot {
    /// When this snapshot was built: the views' directories show it as
    /// their mtime, so a kernel that caches listings until the mtime
    /// changes lists them again after a change.
    pub built: SystemTime,
    /// A number no other snapshot of this process has: what a listing
    /// made from it remembers.
    pub number: u64,
    /// The sessions shown, sorted by (createdAt, id).
    pub sessions: Vec<Arc<ViewFacts>>,
    zone: TimeZone,
    trees: [OnceLock<ViewTree>; 3],
    /// `(ViewFacts::key, index)` of every session, sorted (made with the
    /// snapshot, off the path of the first link's `stat` when the mount
    /// builds its views ahead).
    keys: Box<[(u64, u32)]>,
}

/// A creation time (milliseconds since the epoch) in `zone`, every
/// non-negative safe integer included ([`crate::store::zone::civil`]).
fn zoned(ms: u64, zone: &TimeZone) -> crate::store::zone::Civil {
    crate::store::zone::civil(i64::try_from(ms).unwrap_or(i64::MAX), zone)
}

/// A year as the views name it: four digits up to 9999, more after.
fn year_name(year: i64) -> String {
    format!("{year:04}")
}

/// A session's creation time as local date parts in `zone`:
/// (`YYYY`, `MM`, `DD`, `HH-MM-SS`).
pub fn local_parts(ms: u64, zone: &TimeZone) -> (String, String, String, String) {
    let z = zoned(ms, zone);
    (
        year_name(z.year),
        format!("{:02}", z.month),
        format!("{:02}", z.day),
        format!("{:02}-{:02}-{:02}", z.hour, z.minute, z.second),
    )
}

impl ViewSnapshot {
    /// The views of `sessions`, dates in `zone` (the trees are made when
    /// first used).
    pub fn build(mut sessions: Vec<Arc<ViewFacts>>, zone: &TimeZone) -> ViewSnapshot {
        sessions.sort_by(|a, b| {
            (a.created_at_ms, &a.id, &a.project).cmp(&(b.created_at_ms, &b.id, &b.project))
        });
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let mut keys: Vec<(u64, u32)> = (sessions.iter().enumerate())
            .map(|(i, s)| (s.key(), u32::try_from(i).unwrap_or(u32::MAX)))
            .collect();
        keys.sort_unstable();
        ViewSnapshot {
            built: SystemTime::now(),
            number: MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            sessions,
            zone: zone.clone(),
            trees: Default::default(),
            keys: keys.into_boxed_slice(),
        }
    }

    /// The tree of `view`.
    pub fn tree(&self, view: ViewKind) -> &ViewTree {
        self.trees[view.index()].get_or_init(|| {
            // Sessions grouped by their directory first: the names of a
            // directory are made once, whatever the number of sessions.
            let mut groups: BTreeMap<Vec<String>, Vec<usize>> = BTreeMap::new();
            match view {
                ViewKind::Cwd => {
                    let mut by_cwd: HashMap<Option<&str>, Vec<usize>> = HashMap::new();
                    for (i, s) in self.sessions.iter().enumerate() {
                        by_cwd.entry(s.cwd.as_deref()).or_default().push(i);
                    }
                    for (cwd, members) in by_cwd {
                        // NFC and NFD spellings meet here.
                        groups
                            .entry(cwd_components(cwd))
                            .or_default()
                            .extend(members);
                    }
                }
                ViewKind::Date => {
                    let mut by_day: BTreeMap<(i64, i8, i8), Vec<usize>> = BTreeMap::new();
                    for (i, s) in self.sessions.iter().enumerate() {
                        let z = zoned(s.created_at_ms, &self.zone);
                        by_day.entry((z.year, z.month, z.day)).or_default().push(i);
                    }
                    for ((y, m, d), members) in by_day {
                        let parts = vec![year_name(y), format!("{m:02}"), format!("{d:02}")];
                        groups.insert(parts, members);
                    }
                }
                ViewKind::Title => {
                    groups.insert(Vec::new(), (0..self.sessions.len()).collect());
                }
            }
            let mut tree = ViewTree::default();
            tree.dirs.insert(String::new(), ViewDir::default());
            for (parts, members) in groups {
                tree.add(&parts, &members);
            }
            tree
        })
    }

    /// The links of directory `dir` of `view`: names unique within the
    /// directory (see the levels below). Every name shared by several sessions, or equal to a
    /// subdirectory beside it, gets the full id (the encoded one) instead
    /// of the short id, so names never depend on listing order.
    pub fn links<'a>(&'a self, view: ViewKind, dir: &'a ViewDir) -> &'a Links {
        dir.links.get_or_init(|| {
            // As `local_parts` writes them, in one allocation.
            let prefix = |i: usize| -> String {
                if view == ViewKind::Title {
                    return String::new();
                }
                let z = zoned(self.sessions[i].created_at_ms, &self.zone);
                let (h, mi, sec) = (z.hour, z.minute, z.second);
                match view {
                    ViewKind::Cwd => format!(
                        "{:04}-{:02}-{:02} {h:02}-{mi:02}-{sec:02}",
                        z.year, z.month, z.day
                    ),
                    _ => format!("{h:02}-{mi:02}-{sec:02}"),
                }
            };
            // Names with the short id; every name shared by several
            // sessions or equal to a subdirectory is made again one level
            // up for each of them, until none is: the full (encoded) id,
            // then the full id and a hash of the session's project and
            // directory (a full id can equal a short one, or another
            // session's name), then a number in the order of those.
            let name_at = |i: usize, level: u8| -> Box<str> {
                let s = &self.sessions[i];
                let tail = match level {
                    0 => short_id(&s.id),
                    1 => s.session.to_string_lossy().into_owned(),
                    _ => {
                        let key = [s.project.as_encoded_bytes(), s.session.as_encoded_bytes()];
                        format!(
                            "{} ~{:016x}",
                            s.session.to_string_lossy(),
                            fnv1a(&key.join(&b'/'))
                        )
                    }
                };
                link_name(&prefix(i), &s.title, &tail).into()
            };
            let mut names: Vec<(Box<str>, usize, u8)> =
                dir.members.iter().map(|&i| (name_at(i, 0), i, 0)).collect();
            for round in 0..=MAX_NAME_LEVEL {
                names.sort_unstable();
                let clashes = |k: usize| {
                    let name = &names[k].0;
                    (k > 0 && names[k - 1].0 == *name)
                        || names.get(k + 1).is_some_and(|n| n.0 == *name)
                        || dir.subdirs.contains(&**name)
                };
                let clashing: Vec<usize> = (0..names.len()).filter(|&k| clashes(k)).collect();
                if clashing.is_empty() {
                    break;
                }
                for (n, k) in clashing.into_iter().enumerate() {
                    let (_, i, level) = names[k];
                    names[k] = if round < MAX_NAME_LEVEL {
                        (name_at(i, level + 1), i, level + 1)
                    } else {
                        // Not reached but by names made to collide.
                        let name = format!("{} ~{n}", names[k].0);
                        (name.into(), i, level)
                    };
                }
            }
            names.sort_unstable();
            Links::from_sorted(names.into_iter().map(|(n, i, _)| (n, i)).collect())
        })
    }

    /// The index of the session whose [`ViewFacts::key`] is `key`, if it
    /// is shown (binary search of a table of 12 bytes a session). Two sessions of one key (a 60-bit hash: about one root
    /// of 20,000 sessions in 10^9) answer the first in the table.
    pub fn session_by_key(&self, key: u64) -> Option<usize> {
        let at = self.keys.partition_point(|&(k, _)| k < key);
        self.keys
            .get(at)
            .filter(|&&(k, _)| k == key)
            .map(|&(_, i)| i as usize)
    }

    /// How deep the link of session `i` sits in `view`: 1 for a link at
    /// the view's top, one more per directory above it (the `../` its
    /// target starts with).
    pub fn link_depth(&self, view: ViewKind, i: usize) -> usize {
        match view {
            ViewKind::Cwd => 1 + cwd_components(self.sessions[i].cwd.as_deref()).len(),
            ViewKind::Date => 4,
            ViewKind::Title => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(id: &str, cwd: Option<&str>, ms: u64, title: &str) -> Arc<ViewFacts> {
        Arc::new(ViewFacts {
            project: std::ffi::OsStr::new("p").into(),
            session: std::ffi::OsStr::new(id).into(),
            id: id.into(),
            cwd: cwd.map(Arc::from),
            created_at_ms: ms,
            title: title.into(),
        })
    }

    #[test]
    fn a_link_named_like_a_directory_beside_it_gets_the_full_id() {
        let ms = 1_767_603_600_000; // 2026-01-05 09:00:00 UTC
        let snap = ViewSnapshot::build(
            vec![
                facts("a_12345678", Some("/"), ms, "t"),
                facts(
                    "b_87654321",
                    Some("/2026-01-05 09-00-00 t 12345678"),
                    ms,
                    "u",
                ),
            ],
            &TimeZone::UTC,
        );
        let top = snap.tree(ViewKind::Cwd).dir("").unwrap();
        assert!(top.subdirs.contains("2026-01-05 09-00-00 t 12345678"));
        let names: Vec<&str> = snap.links(ViewKind::Cwd, top).keys().collect();
        assert_eq!(names, ["2026-01-05 09-00-00 t a_12345678"]);
    }

    /// The fresh tester's two cases: a full id no longer than a short one
    /// (still the subdirectory's name), and a full id equal to another
    /// session's name: every name stays unique and each session keeps one.
    #[test]
    fn names_stay_unique_when_a_full_id_clashes_again() {
        let ms = 1_767_603_600_000; // 2026-01-05 09:00:00 UTC
        let utc = TimeZone::UTC;
        let snap = ViewSnapshot::build(
            vec![
                facts("short1", Some("/"), ms, "T"),
                facts("other2", Some("/2026-01-05 09-00-00 T short1"), ms, "U"),
            ],
            &utc,
        );
        let top = snap.tree(ViewKind::Cwd).dir("").unwrap();
        let names: Vec<&str> = snap.links(ViewKind::Cwd, top).keys().collect();
        assert_eq!(names.len(), 1);
        assert!(!top.subdirs.contains(names[0]), "{names:?}");
        assert!(
            names[0].starts_with("2026-01-05 09-00-00 T short1 ~"),
            "{names:?}"
        );

        let snap = ViewSnapshot::build(
            vec![
                facts("abcdefgh1", Some("/c"), ms, "T"),
                facts("abcdefgh1-z", Some("/c"), ms, "T"),
                facts("w_", Some("/c"), ms, "T abcdefgh1"),
            ],
            &utc,
        );
        for view in ViewKind::ALL {
            let dir = match view {
                ViewKind::Cwd => "c",
                ViewKind::Date => "2026/01/05",
                ViewKind::Title => "",
            };
            let dir = snap.tree(view).dir(dir).unwrap();
            let links = snap.links(view, dir);
            let names: Vec<&str> = links.keys().collect();
            let unique: BTreeSet<&str> = names.iter().copied().collect();
            assert_eq!(unique.len(), 3, "{view:?}: {names:?}");
            let mut sessions: Vec<usize> = names.iter().map(|n| links.get(n).unwrap()).collect();
            sessions.sort_unstable();
            assert_eq!(sessions, [0, 1, 2], "{view:?}: {names:?}");
        }
    }

    /// Every safe createdAt has its own day, as the CLI's dates show it
    /// (JavaScript: 8.64e15 ms is +275760-09-13T00:00:00.000Z); the views
    /// clamped them to 9999-12-30 before.
    #[test]
    fn far_future_days_are_their_own() {
        let snap = ViewSnapshot::build(
            vec![
                facts("a_11111111", Some("/"), 8_640_000_000_000_000, "t"),
                facts("b_22222222", Some("/"), 9_007_199_254_740_991, "u"),
            ],
            &TimeZone::UTC,
        );
        let tree = snap.tree(ViewKind::Date);
        assert!(tree.dir("275760/09/13").is_some());
        let day = tree.dir("287396/10/12").unwrap();
        let names: Vec<&str> = snap.links(ViewKind::Date, day).keys().collect();
        assert_eq!(names, ["08-59-00 u 22222222"]);
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
        let day = snap.tree(ViewKind::Date).dir("2026/01/05").unwrap();
        let names: Vec<&str> = snap.links(ViewKind::Date, day).keys().collect();
        assert_eq!(
            names,
            [
                "09-00-00 same a_12345678",
                "09-00-00 same b_12345678",
                "09-00-01 other 87654321"
            ]
        );
        let w = snap.tree(ViewKind::Cwd).dir("w").unwrap();
        let links = snap.links(ViewKind::Cwd, w);
        assert_eq!(links.len(), 3);
        assert!(links.contains_key("2026-01-05 09-00-01 other 87654321"));
        assert_eq!(snap.tree(ViewKind::Cwd).dir("").unwrap().subdirs.len(), 1);
        let top = snap.tree(ViewKind::Title).dir("").unwrap();
        assert_eq!(snap.links(ViewKind::Title, top).len(), 3);
        assert_eq!(
            snap.links(
                ViewKind::Date,
                snap.tree(ViewKind::Date).dir("2026/01/05").unwrap()
            )
            .get("09-00-01 other 87654321"),
            Some(2)
        );
        // A per-user filter hides a directory with nothing visible below.
        let only_c = |f: &ViewFacts| &*f.id == "c_87654321";
        let none = |_: &ViewFacts| false;
        assert!(snap
            .tree(ViewKind::Cwd)
            .shows_any("", &snap.sessions, &only_c));
        assert!(snap
            .tree(ViewKind::Cwd)
            .shows_any("w", &snap.sessions, &only_c));
        assert!(!snap
            .tree(ViewKind::Cwd)
            .shows_any("w", &snap.sessions, &none));
        assert!(!snap
            .tree(ViewKind::Date)
            .shows_any("2026", &snap.sessions, &none));
        assert!(!snap
            .tree(ViewKind::Cwd)
            .shows_any("nowhere", &snap.sessions, &only_c));
    }
}
