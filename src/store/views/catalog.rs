//! The views' catalog: every session's [`ViewFacts`], kept current by
//! cheap revalidation and persisted outside the store beside the frame
//! indexes, so that a later mount builds the views without reading the
//! sessions again (issue 14).
//!
//! Revalidation: the root is listed, and each project directory is
//! `lstat`ed. A project whose mtime, ctime and inode are those of the last
//! scan (and were not within [`RACY`] of that scan's clock, when a change
//! could share the timestamp) keeps its list of sessions; only its
//! sessions without a transcript yet, without a title yet, refused, or
//! damaged are looked at again (one `lstat` each, read again only when the
//! transcript's identity or size changed). A transcript removed,
//! replaced, or truncated in place inside its session directory changes
//! no project's stamp: a sweep in the background ([`ViewCatalog::sweep`])
//! `lstat`s the others and marks those for the next snapshot. Another project is listed again
//! and its sessions are matched by transcript identity (device, inode).
//! A session is read only when it is new or changed: its transcript is
//! validated (the checks of [`Store::transcript`]; a duplicate id, the same
//! session directory name in two projects, is found from the catalog) and
//! read up to its first user message.
//!
//! The listing primitives are the store's own ([`Store::list_projects`],
//! [`Store::list_project`]); the one discovery catalog of the root (issue
//! 11), once it serves them, gives this catalog its project listings and
//! stamps, and the per-session facts stay here.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use jiff::tz::TimeZone;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::facts::{scan_title, Interner, ViewFacts};
use super::names::fnv1a;
use super::sweeper::Sweeper;
use super::tree::ViewSnapshot;
use crate::store::growth::{mtime_of, since, Mtime, Since};
use crate::store::{Encoding, EntryKind, FrameCache, Store, StoreError, Transcript};

/// A directory timestamp this close to the scan's clock is not trusted:
/// a change in the same clock tick would leave it unchanged.
const RACY: Duration = Duration::from_secs(2);

/// Format of the persisted file (3: titles without bidirectional format
/// characters, so that catalogs persisted before are read again).
const PERSIST_VERSION: u64 = 3;

/// Sessions read (validated and scanned for a title) by every catalog of
/// this process: a counter for tests and `.sessionfs-status`.
static SESSIONS_READ: AtomicU64 = AtomicU64::new(0);

/// How many sessions the catalogs of this process have read.
pub fn sessions_read() -> u64 {
    SESSIONS_READ.load(Ordering::Relaxed)
}

/// A directory's identity and change times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Stamp {
    fn of(meta: &fs::Metadata) -> Stamp {
        Stamp {
            ino: meta.ino(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Whether a change after now could leave this stamp unchanged.
    fn racy(&self) -> bool {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        now - self.mtime.0.max(self.ctime.0) <= RACY.as_secs() as i64
    }
}

/// What a session directory held at the last look.
#[derive(Debug, Clone)]
enum Slot {
    /// No transcript (yet).
    Empty,
    /// A transcript of identity `(dev, ino)`, `len` bytes and modification
    /// time `mtime` (seconds, nanoseconds) on disk.
    Seen {
        dev: u64,
        ino: u64,
        len: u64,
        mtime: Mtime,
        /// Its facts, `None` when the session is refused.
        facts: Option<Arc<ViewFacts>>,
        /// Settled: nothing is looked at again while the identity holds.
        settled: bool,
    },
}

#[derive(Debug, Clone, Default)]
struct Project {
    /// `None`: list again at the next scan.
    stamp: Option<Stamp>,
    sessions: BTreeMap<OsString, Slot>,
}

struct State {
    projects: BTreeMap<OsString, Project>,
    snapshot: Option<(Instant, Arc<ViewSnapshot>)>,
    /// A sweep marked sessions to look at again: the next snapshot
    /// revalidates, whatever its age.
    stale: bool,
    /// A sweep recorded transcripts' growth that is not persisted yet
    /// (saved by a snapshot at most every [`GROWTH_SAVE_EVERY`]).
    unsaved_growth: bool,
    /// When the catalog was last persisted by this process.
    saved_at: Option<Instant>,
}

/// How often growth alone (lengths and mtimes the sweep recorded, no view
/// changed) is persisted: a later mount then takes a transcript rewritten
/// in place to its grown length for rewritten, not grown.
const GROWTH_SAVE_EVERY: Duration = Duration::from_secs(30);

/// The catalog of one root's views.
pub struct ViewCatalog {
    state: Mutex<State>,
    persist: Option<PathBuf>,
    max_age: Duration,
    zone: TimeZone,
    /// Decoded frames of title scans: the catalog's own, so reading
    /// titles never evicts the mount's.
    cache: Arc<FrameCache>,
    /// A snapshot was asked for since the last [`ViewCatalog::take_used`].
    used: std::sync::atomic::AtomicBool,
    /// When sweeps happen ([`ViewCatalog::sweep_loop`]).
    sweeper: Sweeper,
}

impl ViewCatalog {
    /// A catalog of `store`'s sessions whose snapshot is rebuilt at most
    /// every `max_age`; persisted under `store`'s index directory when it
    /// has one (`views-<hash of the root>.json`), and loaded from there.
    /// Dates are in the process's time zone (`TZ`, else the system's).
    pub fn new(store: &Store, max_age: Duration) -> ViewCatalog {
        let persist = store.index_dir().map(|dir| {
            let root = store.root().as_os_str().as_encoded_bytes();
            dir.join(format!("views-{:016x}.json", fnv1a(root)))
        });
        let projects = persist.as_deref().map(load).unwrap_or_default();
        ViewCatalog {
            state: Mutex::new(State {
                projects,
                snapshot: None,
                stale: false,
                unsaved_growth: false,
                saved_at: None,
            }),
            persist,
            max_age,
            zone: crate::store::zone::local_zone().clone(),
            cache: Arc::new(FrameCache::new(TITLE_CACHE)),
            used: std::sync::atomic::AtomicBool::new(false),
            sweeper: Sweeper::default(),
        }
    }

    /// Whether sessions were loaded from the persisted catalog (so that a
    /// snapshot costs a revalidation by directory stamps, not a first scan
    /// of every session).
    pub fn loaded_from_disk(&self) -> bool {
        !self.state.lock().projects.is_empty()
    }

    /// Whether a snapshot has been built (by a view's request, or ahead of
    /// them: `SessionFs::warm_views`).
    pub fn has_snapshot(&self) -> bool {
        self.state.lock().snapshot.is_some()
    }

    /// The views as of at most `max_age` ago: revalidates the catalog
    /// (see the module) when the last snapshot is older. One bad session
    /// never fails the views: it is left out.
    ///
    /// Errors: [`StoreError::Io`] when the root cannot be listed.
    pub fn snapshot(&self, store: &Store) -> Result<Arc<ViewSnapshot>, StoreError> {
        self.used.store(true, Ordering::Relaxed);
        // After an idle spell, what changed inside session directories
        // meanwhile first (bounded: see `sweeper`).
        self.sweeper.fresh_enough();
        let mut st = self.state.lock();
        if let Some((at, snap)) = &st.snapshot {
            if at.elapsed() < self.max_age && !st.stale {
                return Ok(Arc::clone(snap));
            }
        }
        st.stale = false;
        let found = rescan(store, &self.cache, &mut st.projects)?;
        let growth_due = st.unsaved_growth
            && st
                .saved_at
                .is_none_or(|at| at.elapsed() >= GROWTH_SAVE_EVERY);
        if found.persist || growth_due {
            if let Some(path) = &self.persist {
                save(path, &st.projects);
                st.saved_at = Some(Instant::now());
                st.unsaved_growth = false;
            }
        }
        if found.views || st.snapshot.is_none() {
            let snap = Arc::new(ViewSnapshot::build(visible_facts(&st.projects), &self.zone));
            st.snapshot = Some((Instant::now(), snap));
        } else if let Some((at, _)) = &mut st.snapshot {
            *at = Instant::now();
        }
        Ok(Arc::clone(&st.snapshot.as_ref().expect("set above").1))
    }

    /// Whether a snapshot was asked for since the last call (the views in
    /// use: worth a [`ViewCatalog::sweep`]).
    pub fn take_used(&self) -> bool {
        self.used.swap(false, Ordering::Relaxed)
    }

    /// Sweeps the catalog ([`ViewCatalog::sweep`]) every [`SWEEP_EVERY`]
    /// while the views are in use, and at once when a use after an idle
    /// spell asks for it ([`Sweeper::fresh_enough`]); never returns (a
    /// mount's `sessionfs-views` thread).
    pub fn sweep_loop(&self, store: &Store) -> ! {
        self.sweeper.starting();
        loop {
            let asked = self.sweeper.wait_for_work();
            if asked || self.take_used() {
                self.sweep_now(store);
            }
        }
    }

    /// How long ago the latest sweep ended (`None`: none yet), and how
    /// many ended since the catalog was made.
    pub fn latest_sweep(&self) -> (Option<Duration>, u64) {
        self.sweeper.latest()
    }

    /// [`ViewCatalog::sweep`] now, on this thread, recorded as the latest
    /// sweep.
    fn sweep_now(&self, store: &Store) {
        self.take_used(); // this sweep covers the uses so far
        let marked = self.sweep(store);
        if marked > 0 {
            log::debug!("views: {marked} transcripts changed in place; read again");
        }
        self.sweeper.ended();
    }

    /// `lstat`s the transcript of every settled session (one removed,
    /// replaced by another file, or made shorter in place inside its
    /// session directory changes no project's stamp) without holding the
    /// catalog meanwhile, and marks each changed one to be looked at again
    /// by the next snapshot, which then revalidates at once; one that grew
    /// keeps its facts and its new length. Returns how many were marked.
    pub fn sweep(&self, store: &Store) -> usize {
        let file = store.encoding().file_name();
        let projects: Vec<OsString> = self.state.lock().projects.keys().cloned().collect();
        let mut marked = 0;
        // One project at a time: memory for one project's sessions, and
        // the catalog held only to copy and to mark.
        for p in projects {
            let seen: Vec<(OsString, u64, u64, u64, Mtime)> = {
                let st = self.state.lock();
                let Some(project) = st.projects.get(&p) else {
                    continue;
                };
                project
                    .sessions
                    .iter()
                    .filter_map(|(s, slot)| match slot {
                        Slot::Seen {
                            dev,
                            ino,
                            len,
                            mtime,
                            settled: true,
                            ..
                        } => Some((s.clone(), *dev, *ino, *len, *mtime)),
                        _ => None,
                    })
                    .collect()
            };
            let dir = store.root().join(&p);
            // Changed: gone, another file, shorter than when last seen, or
            // of the same length with another mtime (truncated or
            // rewritten in place: transcripts only grow); `Some(..)`: grown
            // to that length and mtime, the same session.
            let changed: Vec<(OsString, u64, u64, Option<Grown>)> = seen
                .into_iter()
                .filter_map(|(s, dev, ino, len, mtime)| {
                    let now = fs::symlink_metadata(dir.join(&s).join(file))
                        .ok()
                        .filter(|m| (m.dev(), m.ino()) == (dev, ino));
                    match now.as_ref().map(|m| (since(len, mtime, m), m)) {
                        Some((Since::Unchanged, _)) => None,
                        Some((Since::Grown, m)) => {
                            Some((s, dev, ino, Some((m.len(), mtime_of(m)))))
                        }
                        _ => Some((s, dev, ino, None)),
                    }
                })
                .collect();
            if changed.is_empty() {
                continue;
            }
            let mut st = self.state.lock();
            let mut grew = false;
            for (s, dev0, ino0, grown) in &changed {
                let slot = st
                    .projects
                    .get_mut(&p)
                    .and_then(|pr| pr.sessions.get_mut(s));
                if let Some(Slot::Seen {
                    dev,
                    ino,
                    len,
                    mtime,
                    settled,
                    ..
                }) = slot
                {
                    if (*dev, *ino) != (*dev0, *ino0) {
                        continue;
                    }
                    match grown {
                        Some((to, to_mtime)) => {
                            if *to > *len {
                                *len = *to;
                                *mtime = *to_mtime;
                                grew = true;
                            }
                        }
                        None => {
                            *settled = false;
                            marked += 1;
                        }
                    }
                }
            }
            st.stale |= marked > 0;
            st.unsaved_growth |= grew;
        }
        marked
    }
}

pub use super::sweeper::SWEEP_EVERY;

/// The facts of every valid session; an id directory present in several
/// projects (a duplicate id) is left out.
fn visible_facts(projects: &BTreeMap<OsString, Project>) -> Vec<Arc<ViewFacts>> {
    let mut count: BTreeMap<&OsStr, usize> = BTreeMap::new();
    for p in projects.values() {
        for (name, slot) in &p.sessions {
            if matches!(slot, Slot::Seen { .. }) {
                *count.entry(name.as_os_str()).or_default() += 1;
            }
        }
    }
    projects
        .values()
        .flat_map(|p| p.sessions.iter())
        .filter(|(name, _)| count.get(name.as_os_str()) == Some(&1))
        .filter_map(|(_, slot)| match slot {
            Slot::Seen { facts, .. } => facts.clone(),
            Slot::Empty => None,
        })
        .collect()
}

/// What a rescan found.
#[derive(Debug, Default, Clone, Copy)]
struct Rescan {
    /// The sessions or their facts changed: the views must be rebuilt.
    views: bool,
    /// Anything persisted changed (the views, or a directory's stamp).
    persist: bool,
}

/// Brings `projects` up to date with the root.
fn rescan(
    store: &Store,
    cache: &Arc<FrameCache>,
    projects: &mut BTreeMap<OsString, Project>,
) -> Result<Rescan, StoreError> {
    let names = store.list_projects()?;
    let mut stamps_changed = false;
    let mut changed = false;
    let before = projects.len();
    let present: std::collections::HashSet<&OsString> = names.iter().collect();
    projects.retain(|name, _| present.contains(name));
    changed |= projects.len() != before;
    for name in names {
        let path = store.root().join(&name);
        let Ok(meta) = fs::symlink_metadata(&path) else {
            changed |= projects.remove(&name).is_some();
            continue;
        };
        let stamp = Stamp::of(&meta);
        let project = projects.entry(name.clone()).or_default();
        let names = &mut Interner::default();
        if project.stamp == Some(stamp) {
            for (session, slot) in project.sessions.iter_mut() {
                let settled = matches!(slot, Slot::Seen { settled: true, .. });
                if !settled {
                    changed |= revisit(store, cache, names, &name, session, slot);
                }
            }
            continue;
        }
        let listed = match store.list_project(&name) {
            Ok(entries) => entries,
            Err(e) => {
                log::debug!("views: {e}");
                stamps_changed |= project.stamp.is_some();
                project.stamp = None;
                changed |= !project.sessions.is_empty();
                project.sessions.clear();
                continue;
            }
        };
        let mut sessions = BTreeMap::new();
        for entry in listed {
            if entry.kind != EntryKind::Dir {
                continue;
            }
            let (mut slot, known) = match project.sessions.remove(&entry.name) {
                Some(slot) => (slot, true),
                None => (Slot::Empty, false),
            };
            // A session directory new to the catalog changes the views
            // only once it holds a transcript (revisit says so).
            changed |= revisit(store, cache, names, &name, &entry.name, &mut slot)
                || (!known && !matches!(slot, Slot::Empty));
            sessions.insert(entry.name, slot);
        }
        // Sessions gone from the directory.
        changed |= project
            .sessions
            .values()
            .any(|slot| !matches!(slot, Slot::Empty));
        project.sessions = sessions;
        let trusted = (!stamp.racy()).then_some(stamp);
        stamps_changed |= project.stamp != trusted;
        project.stamp = trusted;
    }
    Ok(Rescan {
        views: changed,
        persist: changed || stamps_changed,
    })
}

/// Looks at one session directory again; reads it only when its
/// transcript is new or changed. True when the slot changed.
fn revisit(
    store: &Store,
    cache: &Arc<FrameCache>,
    names: &mut Interner,
    project: &OsStr,
    session: &OsStr,
    slot: &mut Slot,
) -> bool {
    let path = store
        .root()
        .join(project)
        .join(session)
        .join(store.encoding().file_name());
    let Ok(meta) = fs::symlink_metadata(&path) else {
        let was_empty = matches!(slot, Slot::Empty);
        *slot = Slot::Empty;
        return !was_empty;
    };
    if let Slot::Seen {
        dev,
        ino,
        len,
        mtime,
        settled,
        ..
    } = slot
    {
        // Unchanged: the same file, length and mtime. A settled transcript
        // that grew is the same session; one that shrank, or kept its
        // length under another mtime, was truncated or rewritten in place
        // (transcripts are append-only) and is read again.
        if (*dev, *ino) == (meta.dev(), meta.ino()) {
            match since(*len, *mtime, &meta) {
                Since::Unchanged => return false,
                Since::Grown if *settled => {
                    *len = meta.len();
                    *mtime = mtime_of(&meta);
                    return false;
                }
                _ => {}
            }
        }
    }
    *slot = read_session(store, cache, names, project, session, &meta);
    true
}

/// Opens the transcript of one session and checks it as
/// [`Store::transcript`] does, except for duplicate ids (the catalog finds
/// those itself, from memory: [`visible_facts`]): encoding, header and
/// structure, placement.
fn open_checked(
    store: &Store,
    cache: &Arc<FrameCache>,
    project: &OsStr,
    session: &OsStr,
) -> Result<Transcript, StoreError> {
    let dir = store.root().join(project).join(session);
    let opposite = dir.join(store.encoding().opposite().file_name());
    if fs::symlink_metadata(&opposite).is_ok() {
        return Err(StoreError::EncodingMismatch {
            path: opposite,
            root_is_zstd: store.encoding() == Encoding::Zstd,
        });
    }
    let path = dir.join(store.encoding().file_name());
    let t = Transcript::open(&path, store.encoding(), Arc::clone(cache))?;
    store.check_placement(&t.header(), project, session, t.path())?;
    Ok(t)
}

/// Decoded bytes the title scans may keep cached.
const TITLE_CACHE: u64 = 1024 * 1024;

/// Validates and reads one session.
fn read_session(
    store: &Store,
    cache: &Arc<FrameCache>,
    names: &mut Interner,
    project: &OsStr,
    session: &OsStr,
    meta: &fs::Metadata,
) -> Slot {
    SESSIONS_READ.fetch_add(1, Ordering::Relaxed);
    let (facts, settled) = match open_checked(store, cache, project, session) {
        Ok(t) => {
            let header = t.header();
            let (title, settled) = scan_title(&t);
            let facts = ViewFacts {
                project: names.project(project),
                session: session.into(),
                id: header.id.into(),
                cwd: names.cwd(header.cwd.as_deref()),
                created_at_ms: header.created_at_ms,
                title: title.into(),
            };
            (Some(Arc::new(facts)), settled)
        }
        Err(e) => {
            log::debug!("views leave out a session: {e}");
            // Read again when the file changes (a transcript still being
            // written).
            return Slot::Seen {
                dev: meta.dev(),
                ino: meta.ino(),
                len: meta.len(),
                mtime: mtime_of(meta),
                facts: None,
                settled: false,
            };
        }
    };
    Slot::Seen {
        dev: meta.dev(),
        ino: meta.ino(),
        len: meta.len(),
        mtime: mtime_of(meta),
        facts,
        settled,
    }
}

/// What a transcript that grew in place has come to: length (bytes), mtime.
type Grown = (u64, Mtime);

fn name_str(name: &OsStr) -> Option<&str> {
    name.to_str()
}

/// The persisted catalog, as written and read: typed, so that writing
/// streams it and reading holds the file and the catalog, never a
/// `serde_json::Value` tree of it (about ten times the file's size for
/// 20,000 sessions, issue 11).
#[derive(Serialize, Deserialize)]
struct PersistedDoc<'a> {
    version: u64,
    #[serde(borrow)]
    projects: Vec<PersistedProject<'a>>,
}

#[derive(Serialize, Deserialize)]
struct PersistedProject<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    /// `[ino, mtime s, mtime ns, ctime s, ctime ns]`.
    stamp: Option<(u64, i64, i64, i64, i64)>,
    #[serde(borrow)]
    sessions: Vec<PersistedSession<'a>>,
}

#[derive(Serialize, Deserialize)]
struct PersistedSession<'a> {
    #[serde(borrow)]
    name: Cow<'a, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    dev: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ino: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    len: Option<u64>,
    /// The transcript's mtime (seconds, nanoseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    mtime: Option<(i64, i64)>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    settled: Option<bool>,
    /// Absent for an empty slot; `null` for a refused session.
    #[serde(
        default,
        borrow,
        skip_serializing_if = "Option::is_none",
        with = "nullable"
    )]
    facts: Option<Option<PersistedFacts<'a>>>,
}

#[derive(Serialize, Deserialize)]
struct PersistedFacts<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
    #[serde(borrow)]
    cwd: Option<Cow<'a, str>>,
    #[serde(rename = "createdAt")]
    created_at: u64,
    #[serde(borrow)]
    title: Cow<'a, str>,
}

/// `Option<Option<T>>` as a field that is absent (`None`), `null`
/// (`Some(None)`) or a value.
mod nullable {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(
        v: &Option<Option<T>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match v {
            Some(inner) => inner.serialize(s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<T>>, D::Error> {
        Option::<T>::deserialize(d).map(Some)
    }
}

/// Writes the catalog (temporary file + rename), streamed. Projects and
/// sessions whose names are not UTF-8 are not persisted (they are read
/// again). Failures are logged at debug level: this is only a cache.
fn save(path: &Path, projects: &BTreeMap<OsString, Project>) {
    let doc = PersistedDoc {
        version: PERSIST_VERSION,
        projects: projects
            .iter()
            .filter_map(|(name, p)| {
                Some(PersistedProject {
                    name: Cow::Borrowed(name_str(name)?),
                    stamp: p
                        .stamp
                        .map(|s| (s.ino, s.mtime.0, s.mtime.1, s.ctime.0, s.ctime.1)),
                    sessions: p
                        .sessions
                        .iter()
                        .filter_map(|(session, slot)| {
                            let name = Cow::Borrowed(name_str(session)?);
                            Some(match slot {
                                Slot::Empty => PersistedSession {
                                    name,
                                    dev: None,
                                    ino: None,
                                    len: None,
                                    mtime: None,
                                    settled: None,
                                    facts: None,
                                },
                                Slot::Seen {
                                    dev,
                                    ino,
                                    len,
                                    mtime,
                                    facts,
                                    settled,
                                } => PersistedSession {
                                    name,
                                    mtime: Some(*mtime),
                                    dev: Some(*dev),
                                    ino: Some(*ino),
                                    len: Some(*len),
                                    settled: Some(*settled),
                                    facts: Some(facts.as_ref().map(|f| PersistedFacts {
                                        id: Cow::Borrowed(&f.id),
                                        cwd: f.cwd.as_deref().map(Cow::Borrowed),
                                        created_at: f.created_at_ms,
                                        title: Cow::Borrowed(&f.title),
                                    })),
                                },
                            })
                        })
                        .collect(),
                })
            })
            .collect(),
    };
    let result = (|| -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let tmp = path.with_extension(format!("tmp{}", std::process::id()));
        let mut out = std::io::BufWriter::new(fs::File::create(&tmp)?);
        serde_json::to_writer(&mut out, &doc)?;
        out.into_inner().map_err(|e| e.into_error())?;
        fs::rename(&tmp, path)
    })();
    if let Err(e) = result {
        log::debug!(
            "could not persist the views' catalog {}: {e}",
            path.display()
        );
    }
}

/// Loads a persisted catalog; anything unreadable gives an empty one
/// (every session is read again).
fn load(path: &Path) -> BTreeMap<OsString, Project> {
    let Ok(bytes) = fs::read(path) else {
        return BTreeMap::new();
    };
    let doc: PersistedDoc = match serde_json::from_slice(&bytes) {
        Ok(doc) => doc,
        Err(_) => return BTreeMap::new(),
    };
    if doc.version != PERSIST_VERSION {
        return BTreeMap::new();
    }
    let mut projects = BTreeMap::new();
    for p in doc.projects {
        let name: &str = &p.name;
        let stamp = p.stamp.map(|(ino, ms, mns, cs, cns)| Stamp {
            ino,
            mtime: (ms, mns),
            ctime: (cs, cns),
        });
        let mut sessions = BTreeMap::new();
        let names = &mut Interner::default();
        for s in p.sessions {
            let session: &str = &s.name;
            let slot = match (s.dev, s.ino, s.len, s.mtime) {
                (Some(dev), Some(ino), Some(len), Some(mtime)) => Slot::Seen {
                    dev,
                    ino,
                    len,
                    mtime,
                    settled: s.settled.unwrap_or(false),
                    facts: s.facts.flatten().map(|f| {
                        Arc::new(ViewFacts {
                            project: names.project(OsStr::new(name)),
                            session: OsStr::new(session).into(),
                            id: f.id.into(),
                            cwd: names.cwd(f.cwd.as_deref()),
                            created_at_ms: f.created_at,
                            title: f.title.into(),
                        })
                    }),
                },
                _ => Slot::Empty,
            };
            sessions.insert(OsString::from(session), slot);
        }
        projects.insert(OsString::from(name), Project { stamp, sessions });
    }
    projects
}
