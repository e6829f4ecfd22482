//! Finding a session directory by id from anywhere: the mount's `.by-id/`,
//! `sessionfs locate` and the API's lookups by id, all through one rule
//! over the root's catalog (MOUNT.md, The tree; IDENTITY.md §2).
//!
//! A session directory's id is its decoded name; a name that does not
//! decode is its own id (as `.by-id` lists it) and is also found by its
//! header's id. A directory is a session only when it holds something that
//! claims to be a transcript. One name in several project directories is
//! one candidate, at the first project directory in byte order, so that
//! opening it reports the duplicate id with its paths.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

use super::catalog::FindError;
use super::discovery::{self, SessionDir};
use super::error::{Result, StoreError};
use super::naming::decode_id;
use super::transcript::Transcript;
use super::{is_foreign_transcript_name, is_publication_temp, Store};
use crate::identity::{id_body, ids_match, resolve_id, IdLookupError};

/// Hashes of `(project, session)` directory names (see
/// `Store::transcripts_seen`): 8 bytes a session.
pub(crate) type SeenDirs = std::collections::HashSet<u64>;

fn dir_hash(project: &OsStr, session: &OsStr) -> u64 {
    super::hash::pair(project.as_bytes(), session.as_bytes())
}

/// Session directories by the body of their ids, built once per catalog
/// generation: every unique session directory once (project names shared),
/// and a table sorted by a hash of each id's body, so that 20,000 sessions
/// cost about 100 bytes each (issue 11, must show 3). A candidate's id is
/// recomputed from its name when it is looked at.
#[derive(Debug, Default)]
pub(crate) struct IdIndex {
    /// Project directory names, for `dirs`.
    projects: Vec<OsString>,
    /// `(project, session directory name)`, one per name.
    dirs: Vec<(u32, OsString)>,
    /// Header ids of directories whose names do not decode, by `dirs`
    /// index (such a directory is found by either id).
    header_ids: Vec<(u32, String)>,
    /// `(hash of an id's body, dirs index, which id)`: sorted.
    by_body: Vec<(u64, u32, Which)>,
    /// `(session key, dirs index)`: sorted
    /// ([`super::hash::session_key`]).
    by_key: Vec<(u64, u32)>,
}

/// Which id of a directory a row of [`IdIndex::by_body`] stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Which {
    /// The id its name stands for ([`dir_id`]).
    Name,
    /// Its header's id, the `n`th of `header_ids`.
    Header(u32),
}

fn body_hash(id: &str) -> u64 {
    super::hash::of(id_body(id).as_bytes())
}

impl IdIndex {
    /// The `(id, directory)` pairs whose id has the body of `wanted`'s, in
    /// the order of the catalog's session directories.
    fn candidates(&self, wanted: &str) -> Vec<(String, SessionDir)> {
        let h = body_hash(wanted);
        let from = self.by_body.partition_point(|r| r.0 < h);
        self.by_body[from..]
            .iter()
            .take_while(|r| r.0 == h)
            .filter_map(|&(_, i, which)| {
                let (project, session) = self.dirs.get(i as usize)?;
                let id = match which {
                    Which::Name => dir_id(session).0,
                    Which::Header(n) => self.header_ids.get(n as usize)?.1.clone(),
                };
                (id_body(&id) == id_body(wanted)).then(|| {
                    let dir = SessionDir {
                        project: self.projects[*project as usize].clone(),
                        session: session.clone(),
                    };
                    (id, dir)
                })
            })
            .collect()
    }
}

/// Whether a session directory holds something that claims to be a
/// transcript: either encoding's file, or a transcript under a foreign
/// name (an unsupported version, reported rather than skipped). A directory
/// with none of these is not a session (FORMAT.md, Layout). One `lstat`
/// for a zstd transcript, two for a raw one; a directory listing (all
/// counted) only when neither exists.
pub(crate) fn holds_transcript(dir: &Path) -> bool {
    if discovery::exists(&dir.join("session.jsonl.zstd"))
        || discovery::exists(&dir.join("session.jsonl"))
    {
        return true;
    }
    discovery::count(1);
    let Ok(entries) = fs::read_dir(dir) else {
        // Unreadable: let validation say why.
        return true;
    };
    entries.flatten().any(|e| {
        let name = e.file_name();
        name == "session.jsonl.zstd"
            || name == "session.jsonl"
            || (is_foreign_transcript_name(&name) && !is_publication_temp(&name))
    })
}

/// The id a session directory name stands for: its decoded name, or the
/// name itself (lossily as text) when it does not decode.
pub fn dir_id(session: &OsStr) -> (String, bool) {
    match session.to_str().and_then(|n| decode_id(n).ok()) {
        Some(id) => (id, true),
        None => (session.to_string_lossy().into_owned(), false),
    }
}

impl Store {
    /// Every session directory of the catalog that holds a transcript,
    /// one per name (the first project directory in byte order), sorted by
    /// project then session.
    ///
    /// Errors: [`StoreError::Io`] when the root cannot be listed.
    pub fn session_dirs(&self) -> Result<Vec<(OsString, OsString)>> {
        let started = std::time::Instant::now();
        let dirs: Vec<(OsString, OsString)> = self
            .unique_session_dirs()?
            .into_iter()
            .filter(|d| holds_transcript(&self.root().join(&d.project).join(&d.session)))
            .map(|d| (d.project, d.session))
            .collect();
        let seen = dirs.iter().map(|(p, s)| dir_hash(p, s)).collect();
        *self.transcripts_seen.lock() = Some((started, seen));
        Ok(dirs)
    }

    /// Whether session directory `d` holds a transcript: as the latest
    /// walk of them all saw it, if that was within the catalog's freshness
    /// interval, else looked at now.
    fn holds_transcript_now(&self, d: &SessionDir) -> bool {
        if let Some((at, seen)) = self.transcripts_seen.lock().as_ref() {
            if at.elapsed() < self.discovery().ttl()
                && seen.contains(&dir_hash(&d.project, &d.session))
            {
                return true;
            }
        }
        holds_transcript(&self.root().join(&d.project).join(&d.session))
    }

    /// The catalog's session directories, one per name: the first project
    /// (in byte order) holding one, or, when several do, the first whose
    /// directory holds a transcript (a directory without one is not a
    /// session, FORMAT.md, Layout: it must not hide the session of that name
    /// in a later project; `doctor --repair` of a duplicate leaves one).
    /// Only names held by several projects are looked at.
    fn unique_session_dirs(&self) -> Result<Vec<SessionDir>> {
        let mut first: BTreeMap<OsString, OsString> = BTreeMap::new();
        for d in self.discovery().session_dirs()? {
            match first.entry(d.session) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(d.project);
                }
                std::collections::btree_map::Entry::Occupied(mut o) => {
                    let root = self.root();
                    if !holds_transcript(&root.join(o.get()).join(o.key()))
                        && holds_transcript(&root.join(&d.project).join(o.key()))
                    {
                        o.insert(d.project);
                    }
                }
            }
        }
        let mut out: Vec<SessionDir> = first
            .into_iter()
            .map(|(session, project)| SessionDir { project, session })
            .collect();
        out.sort_by(|a, b| (&a.project, &a.session).cmp(&(&b.project, &b.session)));
        Ok(out)
    }

    /// Every session of `.by-id`, as `(name, project, session)`; `name` is
    /// the session directory name. A duplicate id is listed once (opening
    /// it fails with the duplicate error).
    ///
    /// Errors: [`StoreError::Io`] when the root cannot be listed.
    pub fn by_id_entries(&self) -> Result<Vec<(OsString, OsString, OsString)>> {
        Ok(self
            .session_dirs()?
            .into_iter()
            .map(|(project, session)| (session.clone(), project, session))
            .collect())
    }

    /// The session directory of `.by-id` whose
    /// [`super::hash::session_key`] is `key` (the number of a `.by-id` link
    /// the kernel holds), as of the catalog's latest generation; `None`
    /// when no session directory of the catalog has it any more. Two
    /// directories of one key (a 60-bit hash) answer the first.
    ///
    /// Errors: [`StoreError::Io`] when the root cannot be listed.
    pub fn session_dir_of_key(&self, key: u64) -> Result<Option<(OsString, OsString)>> {
        self.with_id_index(|index| {
            let at = index.by_key.partition_point(|&(k, _)| k < key);
            let &(k, i) = index.by_key.get(at)?;
            let (project, session) = index.dirs.get(i as usize).filter(|_| k == key)?;
            Some((index.projects[*project as usize].clone(), session.clone()))
        })
    }

    /// `f` of the id index of the catalog's latest generation (built
    /// again when the generation moved).
    ///
    /// Errors: [`StoreError::Io`] when the root cannot be listed.
    fn with_id_index<R>(&self, f: impl FnOnce(&IdIndex) -> R) -> Result<R> {
        let generation = self.discovery().generation()?;
        let mut cached = self.id_index.lock();
        if cached.as_ref().map(|(g, _)| *g) != Some(generation) {
            *cached = Some((generation, self.build_id_index()?));
        }
        Ok(f(&cached.as_ref().expect("just built").1))
    }

    /// The session directory that the id `wanted` names (the one rule of
    /// `.by-id`, `locate` and the API): the exact id first, then the only
    /// id sharing its body (IDENTITY.md §2). Not validated.
    ///
    /// Errors: [`FindError::Id`] when none or several match;
    /// [`FindError::Store`] when the root cannot be listed.
    pub fn resolve_session_dir(
        &self,
        wanted: &str,
    ) -> std::result::Result<(OsString, OsString), FindError> {
        let mut candidates: Vec<(String, SessionDir)> = self.with_id_index(|index| {
            let mut found = index.candidates(wanted);
            found.retain(|(id, _)| id == wanted || ids_match(id, wanted));
            found
        })?;
        // One candidate per directory (an undecodable name may match by
        // its name and by its header id).
        candidates.dedup_by(|a, b| a.1 == b.1);
        // Only directories holding a transcript are sessions: looked at
        // for the few candidates only.
        candidates.retain(|(_, d)| self.holds_transcript_now(d));
        let found = resolve_id(wanted, candidates)?;
        Ok((found.project, found.session))
    }

    /// The catalog's session directories by the body of their ids
    /// (IDENTITY.md §2: an exact id has the same body), built once per
    /// catalog generation.
    fn build_id_index(&self) -> Result<IdIndex> {
        let mut index = IdIndex::default();
        for d in self.unique_session_dirs()? {
            if index.projects.last() != Some(&d.project) {
                index.projects.push(d.project.clone());
            }
            let project = u32::try_from(index.projects.len() - 1).unwrap_or(u32::MAX);
            let i = u32::try_from(index.dirs.len()).unwrap_or(u32::MAX);
            let (id, decoded) = dir_id(&d.session);
            index.by_body.push((body_hash(&id), i, Which::Name));
            if !decoded {
                let dir = self.root().join(&d.project).join(&d.session);
                if let Some(header_id) = self.header_id(&dir) {
                    let n = u32::try_from(index.header_ids.len()).unwrap_or(u32::MAX);
                    index
                        .by_body
                        .push((body_hash(&header_id), i, Which::Header(n)));
                    index.header_ids.push((i, header_id));
                }
            }
            let key = super::hash::session_key(d.project.as_bytes(), d.session.as_bytes());
            index.by_key.push((key, i));
            index.dirs.push((project, d.session));
        }
        index.by_body.sort_unstable();
        index.by_key.sort_unstable();
        index.dirs.shrink_to_fit();
        Ok(index)
    }

    /// The header id of the transcript in `dir`, read without the
    /// placement checks (for a session directory whose name does not
    /// decode; validation will then report it as misplaced).
    fn header_id(&self, dir: &Path) -> Option<String> {
        let path = dir.join(self.encoding().file_name());
        discovery::count(1);
        let cache = Arc::new(super::FrameCache::new(0));
        Transcript::open(&path, self.encoding(), cache)
            .ok()
            .map(|t| t.header().id)
    }

    /// The session directory named by `.by-id/<name>`: `name` decoded (a
    /// name that does not decode is taken as it is), then
    /// [`Store::resolve_session_dir`].
    ///
    /// Errors: [`StoreError::NotFound`]; [`StoreError::AmbiguousId`] when
    /// several sessions match by body.
    pub fn find_session_dir_by_id(&self, name: &OsStr) -> Result<(OsString, OsString)> {
        let (wanted, _) = dir_id(name);
        self.resolve_session_dir(&wanted).map_err(|e| match e {
            FindError::Store(e) => e,
            FindError::Id(IdLookupError::NotFound { .. }) => StoreError::NotFound {
                path: self.root().join(".by-id").join(name),
            },
            FindError::Id(other) => StoreError::AmbiguousId {
                wanted,
                reason: other.to_string(),
            },
        })
    }
}
