//! The one discovery layer of the store: a catalog of the root (project
//! directories → session directories), built lazily at first use and kept
//! current by cheap revalidation, shared by the mount (tree, `.by-id`,
//! duplicate-id checks), `list`, `locate` and `check`.
//!
//! Source: FORMAT.md (Layout, Identity rules: a duplicate id is the same
//! session directory name in two project directories), MOUNT.md (The tree,
//! Attributes: what the kernel caches for the attribute timeout may be that
//! old), IDENTITY.md §2 (ids compared by body).
//!
//! Revalidation, at most once per freshness interval (the attribute
//! timeout, at least [`MIN_TTL`]): one `lstat` of the root and one of each
//! project directory; a directory is listed again only when its change
//! stamp (inode, mtime, ctime) moved, or when its mtime was too recent at
//! the last listing to trust (a change within the file system's time
//! granularity would not move it). So a session directory that appears in
//! another project is known within one interval, and a lookup, `stat` or
//! append of one transcript costs the same whatever the number of project
//! directories: the catalog answers "which projects hold a directory of
//! this name" from memory.
//!
//! Every backing-file-system call made here, and by the store's lookup of a
//! transcript ([`super::Store::transcript`]), is counted per thread
//! ([`backing_calls`]), so tests can show that the cost of one request does
//! not grow with the root.

use std::cell::Cell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use super::error::{Result, StoreError};
use super::is_flat_artifact_name;

/// Shortest freshness interval of the catalog: with `--attr-timeout 0`
/// the catalog is still revalidated at most this often, so that one
/// request never pays for a walk of the whole root.
pub const MIN_TTL: Duration = Duration::from_millis(1000);

/// A directory whose mtime is within this much of the moment it was listed
/// is listed again at the next revalidation (file systems with coarse
/// timestamps would not show a change made in the same tick).
const RACY_WINDOW: Duration = Duration::from_secs(2);

thread_local! {
    static CALLS: Cell<u64> = const { Cell::new(0) };
}

/// Backing-file-system calls (`lstat`, `stat`, `open`, directory listings)
/// made by the store's discovery and transcript lookup on this thread since
/// it started. Tests read it before and after one operation.
pub fn backing_calls() -> u64 {
    CALLS.with(Cell::get)
}

/// Counts `n` backing-file-system calls on this thread.
pub(crate) fn count(n: u64) {
    CALLS.with(|c| c.set(c.get().saturating_add(n)));
}

/// `lstat`, counted.
pub(crate) fn lstat(path: &Path) -> std::io::Result<fs::Metadata> {
    count(1);
    fs::symlink_metadata(path)
}

/// Whether `path` exists (not following a final symbolic link), counted.
pub(crate) fn exists(path: &Path) -> bool {
    lstat(path).is_ok()
}

/// The names of a directory's entries, counted as one call.
pub(crate) fn read_dir_names(dir: &Path) -> std::io::Result<Vec<(OsString, fs::FileType)>> {
    count(1);
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        if let Ok(t) = entry.file_type() {
            out.push((entry.file_name(), t));
        }
    }
    Ok(out)
}

/// What a directory looked like when it was last listed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    dev: u64,
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &fs::Metadata) -> Stamp {
        Stamp {
            dev: meta.dev(),
            ino: meta.ino(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether the directory changed so recently before `listed_at` that a
    /// later change in the same timestamp tick would not move the stamp.
    fn is_racy(&self, listed_at: SystemTime, window: Duration) -> bool {
        let mtime = SystemTime::UNIX_EPOCH
            + Duration::new(
                self.mtime.0.max(0) as u64,
                self.mtime.1.clamp(0, 999_999_999) as u32,
            );
        match listed_at.duration_since(mtime) {
            Ok(age) => age < window,
            Err(_) => true, // in the future: trust nothing
        }
    }
}

/// The project directories holding one session directory name: almost
/// always one, so kept without an allocation then.
#[derive(Debug)]
enum Holders {
    One(u32),
    Many(Vec<u32>),
}

impl Holders {
    fn push(&mut self, i: u32) {
        match self {
            Holders::One(first) => *self = Holders::Many(vec![*first, i]),
            Holders::Many(v) => v.push(i),
        }
    }
}

/// One project directory of the catalog.
#[derive(Debug, Default)]
struct Project {
    stamp: Option<Stamp>,
    racy: bool,
    /// Subdirectories (session directories, with or without a transcript).
    sessions: Vec<OsString>,
    /// Flat artifacts (`<name>.jsonl[.zstd]` files).
    flat: Vec<OsString>,
    /// Why the directory could not be listed (an errno), if it could not.
    error: Option<i32>,
}

#[derive(Debug, Default)]
struct Catalog {
    checked: Option<Instant>,
    root: Option<Stamp>,
    root_racy: bool,
    projects: BTreeMap<OsString, Project>,
    /// Session directory name → the project directories holding one, as
    /// indexes into `project_names`.
    by_session: HashMap<OsString, Holders>,
    /// The project names in order, for [`Holders`].
    project_names: Vec<OsString>,
    generation: u64,
}

/// The catalog of one root (see the module documentation).
pub struct Discovery {
    root: PathBuf,
    ttl: Duration,
    racy_window: Duration,
    inner: Mutex<Catalog>,
}

/// A session directory as the catalog lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionDir {
    /// The project directory name.
    pub project: OsString,
    /// The session directory name (an encoded id when canonical).
    pub session: OsString,
}

/// One project directory as the catalog lists it.
#[derive(Debug)]
pub struct ProjectListing {
    /// The project directory name.
    pub project: OsString,
    /// Its subdirectories, sorted.
    pub sessions: Vec<OsString>,
    /// Its flat artifacts, sorted.
    pub flat: Vec<OsString>,
    /// Why it could not be listed (then `sessions` is empty).
    pub error: Option<StoreError>,
}

/// Lists one project directory: subdirectories and flat artifacts, sorted.
fn list_project(dir: &Path) -> std::io::Result<(Vec<OsString>, Vec<OsString>)> {
    let mut sessions = Vec::new();
    let mut flat = Vec::new();
    for (name, t) in read_dir_names(dir)? {
        if t.is_dir() {
            sessions.push(name);
        } else if t.is_file() && is_flat_artifact_name(&name) {
            flat.push(name);
        }
    }
    sessions.sort();
    flat.sort();
    Ok((sessions, flat))
}

impl Discovery {
    /// A catalog of `root`, revalidated at most every `ttl` (at least
    /// [`MIN_TTL`]). Nothing is read until it is first used.
    pub fn new(root: &Path, ttl: Duration) -> Discovery {
        Discovery {
            root: root.to_path_buf(),
            ttl: ttl.max(MIN_TTL),
            racy_window: RACY_WINDOW,
            inner: Mutex::new(Catalog::default()),
        }
    }

    /// This catalog trusting directory stamps however recent (tests on a
    /// file system with nanosecond timestamps).
    #[cfg(test)]
    pub(crate) fn trusting_recent_stamps(mut self) -> Discovery {
        self.racy_window = Duration::ZERO;
        self
    }

    /// The freshness interval in use.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Makes the next use revalidate (after this mount created or removed
    /// a project or session directory).
    pub fn invalidate(&self) {
        self.inner.lock().checked = None;
    }

    /// Runs `f` on the catalog, revalidated first if it is older than the
    /// freshness interval.
    ///
    /// Errors: [`StoreError::Io`] when the root cannot be listed.
    fn with<T>(&self, f: impl FnOnce(&Catalog) -> T) -> Result<T> {
        let mut c = self.inner.lock();
        let fresh = c.checked.is_some_and(|t| t.elapsed() < self.ttl);
        if !fresh {
            self.revalidate(&mut c)?;
        }
        Ok(f(&c))
    }

    fn revalidate(&self, c: &mut Catalog) -> Result<()> {
        let started = Instant::now();
        let now = SystemTime::now();
        let meta = lstat(&self.root).map_err(|e| StoreError::io("stat", &self.root, e))?;
        let root_stamp = Stamp::of(&meta);
        let mut changed = false;
        if c.root != Some(root_stamp) || c.root_racy {
            let names = read_dir_names(&self.root)
                .map_err(|e| StoreError::io("read directory", &self.root, e))?;
            let now_projects: BTreeSet<OsString> = names
                .into_iter()
                .filter(|(_, t)| t.is_dir())
                .map(|(n, _)| n)
                .collect();
            let before = c.projects.len();
            c.projects.retain(|name, _| now_projects.contains(name));
            changed |= c.projects.len() != before;
            for name in now_projects {
                c.projects.entry(name).or_insert_with(|| {
                    changed = true;
                    Project::default()
                });
            }
            c.root = Some(root_stamp);
            c.root_racy = root_stamp.is_racy(now, self.racy_window);
        }
        for (name, project) in c.projects.iter_mut() {
            let dir = self.root.join(name);
            let stamp = lstat(&dir)
                .ok()
                .filter(|m| m.is_dir())
                .map(|m| Stamp::of(&m));
            if stamp.is_some() && stamp == project.stamp && !project.racy {
                continue;
            }
            let (sessions, flat, error) = match list_project(&dir) {
                Ok((s, f)) => (s, f, None),
                Err(e) => (
                    Vec::new(),
                    Vec::new(),
                    Some(e.raw_os_error().unwrap_or(libc::EIO)),
                ),
            };
            if sessions != project.sessions || flat != project.flat || error != project.error {
                changed = true;
            }
            project.sessions = sessions;
            project.flat = flat;
            project.error = error;
            project.stamp = stamp;
            project.racy = stamp.is_some_and(|s| s.is_racy(now, self.racy_window));
        }
        if changed || c.generation == 0 {
            // Rebuilt whole; the old index is dropped first, so that the
            // two are never held at once.
            c.by_session = HashMap::new();
            let mut by_session: HashMap<OsString, Holders> = HashMap::new();
            let mut names = Vec::with_capacity(c.projects.len());
            for (i, (name, project)) in c.projects.iter().enumerate() {
                names.push(name.clone());
                let i = u32::try_from(i).unwrap_or(u32::MAX);
                for session in &project.sessions {
                    match by_session.get_mut(session.as_os_str()) {
                        Some(h) => h.push(i),
                        None => {
                            by_session.insert(session.clone(), Holders::One(i));
                        }
                    }
                }
            }
            by_session.shrink_to_fit();
            c.by_session = by_session;
            c.project_names = names;
            c.generation += 1;
        }
        c.checked = Some(Instant::now());
        log::debug!(
            "catalog of {} revalidated in {:?}: {} project directories, generation {}",
            self.root.display(),
            started.elapsed(),
            c.projects.len(),
            c.generation
        );
        Ok(())
    }

    /// A number that changes whenever revalidation found the set of
    /// project or session directories changed.
    ///
    /// Errors: as [`Discovery::projects`].
    pub fn generation(&self) -> Result<u64> {
        self.with(|c| c.generation)
    }

    /// The project directories, sorted (directories directly under the
    /// root; symbolic links are not projects).
    ///
    /// Errors: [`StoreError::Io`] when the root cannot be listed.
    pub fn projects(&self) -> Result<Vec<OsString>> {
        self.with(|c| c.projects.keys().cloned().collect())
    }

    /// Whether the root holds the project directory `name`.
    ///
    /// Errors: as [`Discovery::projects`].
    pub fn has_project(&self, name: &OsStr) -> Result<bool> {
        self.with(|c| c.projects.contains_key(name))
    }

    /// The project directories holding a directory named `session`, sorted.
    ///
    /// Errors: as [`Discovery::projects`].
    pub fn projects_holding(&self, session: &OsStr) -> Result<Vec<OsString>> {
        self.with(|c| {
            let mut out: Vec<OsString> = match c.by_session.get(session) {
                Some(Holders::One(i)) => vec![c.project_names[*i as usize].clone()],
                Some(Holders::Many(v)) => v
                    .iter()
                    .map(|i| c.project_names[*i as usize].clone())
                    .collect(),
                None => Vec::new(),
            };
            out.sort();
            out
        })
    }

    /// Every project directory with its session directories and flat
    /// artifacts, sorted by project.
    ///
    /// Errors: as [`Discovery::projects`].
    pub fn listing(&self) -> Result<Vec<ProjectListing>> {
        let root = self.root.clone();
        self.with(|c| {
            c.projects
                .iter()
                .map(|(name, p)| ProjectListing {
                    project: name.clone(),
                    sessions: p.sessions.clone(),
                    flat: p.flat.clone(),
                    error: p.error.map(|errno| {
                        StoreError::io(
                            "read directory",
                            &root.join(name),
                            std::io::Error::from_raw_os_error(errno),
                        )
                    }),
                })
                .collect()
        })
    }

    /// Every `(project, session)` directory pair, sorted by project then
    /// session.
    ///
    /// Errors: as [`Discovery::projects`].
    pub fn session_dirs(&self) -> Result<Vec<SessionDir>> {
        self.with(|c| {
            c.projects
                .iter()
                .flat_map(|(project, p)| {
                    p.sessions.iter().map(move |s| SessionDir {
                        project: project.clone(),
                        session: s.clone(),
                    })
                })
                .collect()
        })
    }

    /// Calls `f` with each `(project, session)` directory pair, sorted,
    /// until it returns `false`; nothing is copied.
    ///
    /// Errors: as [`Discovery::projects`].
    pub fn for_each_session_dir(&self, mut f: impl FnMut(&OsStr, &OsStr) -> bool) -> Result<()> {
        self.with(|c| {
            for (project, p) in &c.projects {
                for session in &p.sessions {
                    if !f(project, session) {
                        return;
                    }
                }
            }
        })
    }

    /// Rough bytes the catalog holds (names and map entries), for the
    /// memory budget.
    pub fn approx_bytes(&self) -> usize {
        let c = self.inner.lock();
        c.projects
            .iter()
            .map(|(n, p)| {
                96 + n.len()
                    + p.sessions.iter().map(|s| 24 + s.len()).sum::<usize>()
                    + p.flat.iter().map(|s| 24 + s.len()).sum::<usize>()
            })
            .sum::<usize>()
            + c.by_session.keys().map(|k| 64 + k.len()).sum::<usize>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_session_directory_is_seen_after_the_interval_and_not_before() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::create_dir_all(root.join("p1/s1")).unwrap();
        fs::create_dir_all(root.join("p2")).unwrap();
        let d = Discovery::new(root, Duration::from_secs(3600));
        assert_eq!(d.projects_holding(OsStr::new("s1")).unwrap(), ["p1"]);
        fs::create_dir_all(root.join("p2/s1")).unwrap();
        // Fresh: no call at all, and the old answer.
        let before = backing_calls();
        assert_eq!(d.projects_holding(OsStr::new("s1")).unwrap(), ["p1"]);
        assert_eq!(backing_calls(), before);
        d.invalidate();
        assert_eq!(d.projects_holding(OsStr::new("s1")).unwrap(), ["p1", "p2"]);
    }

    #[test]
    fn revalidation_lists_only_what_changed() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        for i in 0..20 {
            fs::create_dir_all(root.join(format!("p{i}/s{i}"))).unwrap();
        }
        let d = Discovery::new(root, Duration::from_secs(3600)).trusting_recent_stamps();
        d.projects().unwrap();
        d.invalidate();
        let before = backing_calls();
        d.projects().unwrap();
        // The root and each project: one lstat each, no listing.
        assert_eq!(backing_calls() - before, 21);
        let gen = d.generation().unwrap();
        fs::create_dir_all(root.join("p3/new")).unwrap();
        d.invalidate();
        assert_eq!(d.projects_holding(OsStr::new("new")).unwrap(), ["p3"]);
        assert!(d.generation().unwrap() > gen);
    }
}
