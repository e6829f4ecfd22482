//! The session store: layout, naming, header, frames, frame index and
//! discovery. Nothing here knows about FUSE.
//!
//! Source: `../shared/spec/FORMAT.md` (the on-disk format) and
//! `../shared/spec/MOUNT.md` (what the mount shows of it).

pub mod append;
pub mod by_id;
pub mod cache;
pub mod catalog;
pub mod check;
pub mod classify;
pub mod confirm;
pub mod conflict;
pub mod decode;
pub mod discovery;
pub mod doctor;
pub mod error;
pub mod event_legacy;
pub mod event_shape;
pub mod frame;
pub mod fresh;
pub mod fskind;
pub mod growth;
pub mod hash;
pub mod header;
mod hidden_locks;
pub mod holes;
pub mod index;
pub mod index_store;
pub mod json;
pub mod json_view;
pub mod lease;
pub mod limits;
pub mod lines;
pub mod long_lines;
pub mod mountinfo;
pub mod naming;
pub mod publish;
pub mod quarantine;
pub mod render;
pub mod session_writer;
pub mod tail;
pub mod title;
pub mod transcript;
pub mod turn;
pub mod views;
pub mod zone;

use std::ffi::{OsStr, OsString};
use std::fs;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lru::LruCache;
use parking_lot::Mutex;

pub use cache::{FrameCache, DEFAULT_CACHE_BYTES};
pub use discovery::{backing_calls, Discovery};
pub use error::{Result, StoreError};
pub use header::Header;
pub use session_writer::{Commit, SessionWriter};
pub use transcript::{Encoding, Transcript, TranscriptAttr};

/// Name of the decompressed view of a transcript inside a session directory.
pub const VIEW_NAME: &str = "session.jsonl";

/// How many validated transcripts stay open at once (each holds one file
/// descriptor and its frame index); older ones are reopened on demand.
/// 256: a walk over 20,000 sessions peaked 10 MiB lower than with 1,024.
const OPEN_TRANSCRIPTS: usize = 256;

/// Indexed frames that the open transcripts may hold in all (about 56
/// bytes each: some 14 MiB), beyond which the least recently used are
/// closed.
const OPEN_FRAMES_BUDGET: usize = 256 * 1024;

/// Options of [`Store::open`].
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The root's encoding; `None` detects it (zstd unless every transcript
    /// is raw; zstd for an empty root).
    pub compression: Option<Encoding>,
    /// Cap of the decoded-frame cache, in bytes.
    pub cache_bytes: u64,
    /// Where frame indexes of large transcripts are persisted (outside the
    /// store), `None` for nowhere.
    pub index_dir: Option<PathBuf>,
    /// How long the catalog of the root ([`Discovery`]) is trusted before
    /// it is revalidated: the mount's attribute timeout (at least
    /// [`discovery::MIN_TTL`]).
    pub catalog_ttl: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            compression: None,
            cache_bytes: DEFAULT_CACHE_BYTES,
            index_dir: None,
            catalog_ttl: discovery::MIN_TTL,
        }
    }
}

/// What an entry of the store is, as discovery classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A directory (project, session, or a session-owned directory).
    Dir,
    /// A regular file passed through (session-owned artifact).
    File,
    /// A symbolic link passed through.
    Symlink,
    /// The decompressed view `session.jsonl` of a transcript.
    Transcript,
    /// A sync tool's conflict copy of the transcript, listed under the
    /// name the mount shows it by ([`conflict::shown_name`]).
    ConflictCopy,
    /// A flat artifact `<project>/<name>.jsonl[.zstd]` (refused at lookup).
    FlatArtifact,
    /// A FIFO, socket or device node passed through (its exact type is
    /// the backing file's).
    Special,
}

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name shown in the mount.
    pub name: OsString,
    /// Its kind.
    pub kind: EntryKind,
}

/// A session store rooted at one directory.
pub struct Store {
    root: PathBuf,
    encoding: Encoding,
    cache: Arc<FrameCache>,
    index_dir: Option<PathBuf>,
    transcripts: Mutex<LruCache<PathBuf, Arc<Transcript>>>,
    discovery: Discovery,
    /// Session directories (relative to the root) found free of duplicates
    /// at a catalog generation: no other project directory held a
    /// directory of that name then.
    no_duplicate: Mutex<LruCache<PathBuf, u64>>,
    /// Session directories by id body, at a catalog generation
    /// ([`Store::resolve_session_dir`]).
    id_index: Mutex<Option<(u64, by_id::IdIndex)>>,
    /// Session directories seen holding a transcript by the latest walk of
    /// them all ([`Store::session_dirs`]), and when: a lookup by id within
    /// the catalog's freshness interval takes that walk's word instead of
    /// looking again (`.by-id` listed with attributes looked twice per
    /// link).
    transcripts_seen: Mutex<Option<(std::time::Instant, by_id::SeenDirs)>>,
}

/// Whether `name` is a flat artifact's name (FORMAT.md, Layout).
pub fn is_flat_artifact_name(name: &OsStr) -> bool {
    let b = name.as_encoded_bytes();
    b.ends_with(b".jsonl") || b.ends_with(b".jsonl.zstd")
}

/// Whether `name` is a publication temporary (`session.jsonl.zstd.<hex>.tmp`
/// or `session.jsonl.<hex>.tmp`) or a lock file of the commit protocol
/// (`.sessionfs.lock`, its claims and temporaries: `.sessionfs.lock*`):
/// never shown, never created or removed through the mount (MOUNT.md,
/// Details and Shared roots).
pub fn is_publication_temp(name: &OsStr) -> bool {
    if name
        .as_encoded_bytes()
        .starts_with(lease::LOCK_NAME.as_bytes())
    {
        return true;
    }
    let b = name.as_encoded_bytes();
    let Some(rest) = b
        .strip_prefix(b"session.jsonl.zstd.")
        .or_else(|| b.strip_prefix(b"session.jsonl."))
    else {
        return false;
    };
    match rest.strip_suffix(b".tmp") {
        Some(hex) => !hex.is_empty() && hex.iter().all(u8::is_ascii_hexdigit),
        None => false,
    }
}

/// Whether `name` is a transcript under another name than the two this
/// format knows (`session.v3.jsonl.zstd`, say): an unsupported format
/// version (FORMAT.md, Decisions).
pub fn is_foreign_transcript_name(name: &OsStr) -> bool {
    let b = name.as_encoded_bytes();
    b.starts_with(b"session.")
        && (b.ends_with(b".jsonl") || b.ends_with(b".jsonl.zstd"))
        && b != b"session.jsonl"
        && b != b"session.jsonl.zstd"
        && conflict::encoding_of(name).is_none()
}

fn kind_of(file_type: fs::FileType) -> Option<EntryKind> {
    if file_type.is_dir() {
        Some(EntryKind::Dir)
    } else if file_type.is_file() {
        Some(EntryKind::File)
    } else if file_type.is_symlink() {
        Some(EntryKind::Symlink)
    } else {
        Some(EntryKind::Special)
    }
}

/// Lists a directory as (name, kind) pairs; entries that vanish while
/// listing are skipped.
fn read_dir_kinds(dir: &Path) -> Result<Vec<(OsString, EntryKind)>> {
    discovery::count(1);
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| StoreError::io("read directory", dir, e))? {
        let entry = entry.map_err(|e| StoreError::io("read directory", dir, e))?;
        let Ok(file_type) = entry.file_type() else {
            continue;
        };
        if let Some(kind) = kind_of(file_type) {
            out.push((entry.file_name(), kind));
        }
    }
    Ok(out)
}

use discovery::exists;

impl Store {
    /// Opens the store at `root` (already resolved: see the identity root).
    ///
    /// Errors: [`StoreError::NotFound`] or [`StoreError::Io`] when `root` is
    /// not a readable directory; [`StoreError::CompressionContradicts`]
    /// when `options.compression` names an encoding the root holds no
    /// transcript of while it holds transcripts of the other.
    pub fn open(root: &Path, options: StoreOptions) -> Result<Store> {
        let meta = fs::metadata(root).map_err(|e| StoreError::io("open root", root, e))?;
        if !meta.is_dir() {
            return Err(StoreError::io(
                "open root",
                root,
                std::io::Error::from_raw_os_error(libc::ENOTDIR),
            ));
        }
        let discovery = Discovery::new(root, options.catalog_ttl);
        let encoding = root_encoding(root, &discovery, options.compression)?;
        Ok(Store {
            root: root.to_path_buf(),
            encoding,
            cache: Arc::new(FrameCache::new(options.cache_bytes)),
            index_dir: options.index_dir,
            transcripts: Mutex::new(LruCache::new(
                NonZeroUsize::new(OPEN_TRANSCRIPTS).unwrap_or(NonZeroUsize::MIN),
            )),
            discovery,
            no_duplicate: Mutex::new(LruCache::new(
                NonZeroUsize::new(OPEN_TRANSCRIPTS).unwrap_or(NonZeroUsize::MIN),
            )),
            id_index: Mutex::new(None),
            transcripts_seen: Mutex::new(None),
        })
    }

    /// The catalog of the root, shared by every walk of the store.
    pub fn discovery(&self) -> &Discovery {
        &self.discovery
    }

    /// The root directory (real path).
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where frame indexes (and renderings, issue 16, and the views'
    /// catalog, issue 14) are persisted, if anywhere.
    pub fn index_dir(&self) -> Option<&Path> {
        self.index_dir.as_deref()
    }

    /// The root's encoding.
    pub fn encoding(&self) -> Encoding {
        self.encoding
    }

    /// The shared decoded-frame cache.
    pub fn frame_cache(&self) -> &FrameCache {
        &self.cache
    }

    /// The backing path of a path relative to the root.
    pub fn backing_path(&self, rel: &Path) -> PathBuf {
        self.root.join(rel)
    }

    /// The project directories: every directory directly under the root
    /// (files at the root are not part of the store; symbolic links are
    /// not projects), from the catalog (at most one freshness interval
    /// old), sorted.
    ///
    /// Errors: [`StoreError::Io`] when the root cannot be listed.
    pub fn list_projects(&self) -> Result<Vec<OsString>> {
        self.discovery.projects()
    }

    /// Whether the root's catalog holds the directory `name`: a project
    /// directory (`project` = `None`) or a directory of project `project`.
    /// No backing call while the catalog is fresh (it is revalidated by
    /// directory times, [`Discovery`]); `false` when the root cannot be
    /// listed.
    pub fn catalog_holds(&self, project: Option<&OsStr>, name: &OsStr) -> bool {
        match project {
            None => self.discovery.has_project(name).unwrap_or(false),
            Some(project) => self
                .discovery
                .projects_holding(name)
                .is_ok_and(|holders| holders.iter().any(|p| p == project)),
        }
    }

    /// The entries of a project directory: session directories, and flat
    /// artifacts (listed so that people see them; refused at lookup).
    ///
    /// Errors: [`StoreError::NotFound`], [`StoreError::Io`].
    pub fn list_project(&self, project: &OsStr) -> Result<Vec<Entry>> {
        let dir = self.root.join(project);
        let mut out = Vec::new();
        for (name, kind) in read_dir_kinds(&dir)? {
            let kind = match kind {
                EntryKind::Dir => EntryKind::Dir,
                EntryKind::File if is_flat_artifact_name(&name) => EntryKind::FlatArtifact,
                _ => continue,
            };
            out.push(Entry { name, kind });
        }
        Ok(out)
    }

    /// Classifies `name` in a project directory for lookup: a session
    /// directory, with its `lstat` metadata (so that the caller need not
    /// stat it again for its attributes).
    ///
    /// Errors: [`StoreError::FlatArtifact`] for a flat artifact;
    /// [`StoreError::NotFound`] for anything that is not a session directory.
    pub fn lookup_in_project(&self, project: &OsStr, name: &OsStr) -> Result<fs::Metadata> {
        let path = self.root.join(project).join(name);
        // Symbolic links are never followed inside the store: a link to a
        // directory is not a session (it could lead out of the root).
        let meta = discovery::lstat(&path).map_err(|e| StoreError::io("stat", &path, e))?;
        if meta.is_dir() {
            Ok(meta)
        } else if meta.is_file() && is_flat_artifact_name(name) {
            Err(StoreError::FlatArtifact { path })
        } else {
            Err(StoreError::NotFound { path })
        }
    }

    /// The entries of a directory inside a session (`rel` relative to the
    /// root, at least `project/session`). At the session level the
    /// transcript is shown as `session.jsonl` (its view); the compressed
    /// file and publication temporaries are hidden.
    ///
    /// Errors: [`StoreError::NotFound`], [`StoreError::Io`].
    pub fn list_session_dir(&self, rel: &Path, session_level: bool) -> Result<Vec<Entry>> {
        let dir = self.root.join(rel);
        let mut out: Vec<Entry> = Vec::new();
        let mut has_view = false;
        for (name, kind) in read_dir_kinds(&dir)? {
            if session_level {
                if is_publication_temp(&name) {
                    continue;
                }
                if name == "session.jsonl.zstd" || name == "session.jsonl" {
                    if !has_view {
                        has_view = true;
                        out.push(Entry {
                            name: OsString::from(VIEW_NAME),
                            kind: EntryKind::Transcript,
                        });
                    }
                    continue;
                }
                if kind == EntryKind::File && conflict::encoding_of(&name).is_some() {
                    out.push(Entry {
                        name: conflict::shown_name(&dir, &name),
                        kind: EntryKind::ConflictCopy,
                    });
                    continue;
                }
            }
            out.push(Entry { name, kind });
        }
        Ok(out)
    }

    /// The validated transcript of `project/session`, following the checks
    /// of MOUNT.md ("The tree"): encoding, foreign transcript names,
    /// duplicates across project directories, header and structure,
    /// placement. A transcript already open is refreshed (growth followed).
    ///
    /// Errors: [`StoreError::EncodingMismatch`],
    /// [`StoreError::UnsupportedVersion`], [`StoreError::DuplicateId`],
    /// [`StoreError::Misplaced`], and the errors of [`Transcript::open`];
    /// [`StoreError::NotFound`] when the session has no transcript.
    pub fn transcript(&self, project: &OsStr, session: &OsStr) -> Result<Arc<Transcript>> {
        let dir = self.root.join(project).join(session);
        let opposite = dir.join(self.encoding.opposite().file_name());
        if exists(&opposite) {
            return Err(StoreError::EncodingMismatch {
                path: opposite,
                root_is_zstd: self.encoding == Encoding::Zstd,
            });
        }
        let path = dir.join(self.encoding.file_name());
        if !exists(&path) {
            return Err(self.missing_transcript(&dir));
        }
        self.check_duplicates(project, session)?;
        let transcript = self.open_transcript(&path)?;
        self.check_placement(&transcript.header(), project, session, transcript.path())?;
        Ok(transcript)
    }

    /// Why a session directory has no usable transcript: a transcript under
    /// a foreign name is an unsupported version, otherwise not found.
    fn missing_transcript(&self, dir: &Path) -> StoreError {
        discovery::count(1);
        if let Ok(entries) = fs::read_dir(dir) {
            for entry in entries.flatten() {
                let name = entry.file_name();
                if is_foreign_transcript_name(&name) && !is_publication_temp(&name) {
                    return StoreError::UnsupportedVersion {
                        path: entry.path(),
                        detail: "a transcript under a name this format version does not use".into(),
                    };
                }
            }
        }
        StoreError::NotFound {
            path: dir.join(self.encoding.file_name()),
        }
    }

    /// The sync tool's conflict copy the mount shows as `shown` in the
    /// session directory `project/session` (see [`conflict`]), opened in
    /// its own encoding; not checked for duplicates or placement (a copy
    /// stands beside the transcript it copies).
    ///
    /// Errors: [`StoreError::NotFound`] when no conflict copy is shown
    /// under that name; the errors of [`Transcript::open`].
    pub fn conflict_copy(
        &self,
        project: &OsStr,
        session: &OsStr,
        shown: &OsStr,
    ) -> Result<Arc<Transcript>> {
        let dir = self.root.join(project).join(session);
        let name = conflict::backing_name(&dir, shown).ok_or_else(|| StoreError::NotFound {
            path: dir.join(shown),
        })?;
        let encoding = conflict::encoding_of(&name).unwrap_or(self.encoding);
        self.open_transcript_as(&dir.join(name), encoding)
    }

    fn open_transcript(&self, path: &Path) -> Result<Arc<Transcript>> {
        self.open_transcript_as(path, self.encoding)
    }

    fn open_transcript_as(&self, path: &Path, encoding: Encoding) -> Result<Arc<Transcript>> {
        let cached = self.transcripts.lock().get(path).cloned();
        if let Some(t) = cached {
            discovery::count(1); // the refresh's stat
            t.refresh()?;
            return Ok(t);
        }
        discovery::count(1); // the open (its own reads are per transcript)
        let t = Arc::new(Transcript::open_with(
            path,
            encoding,
            Arc::clone(&self.cache),
            self.index_dir.clone(),
        )?);
        let mut open = self.transcripts.lock();
        open.put(path.to_path_buf(), Arc::clone(&t));
        // Frame indexes are the memory an open transcript holds: keep their
        // total under a budget, whatever the number of transcripts.
        let mut frames: usize = open.iter().map(|(_, t)| t.frame_count()).sum();
        while frames > OPEN_FRAMES_BUDGET && open.len() > 1 {
            match open.pop_lru() {
                Some((_, evicted)) => frames = frames.saturating_sub(evicted.frame_count()),
                None => break,
            }
        }
        Ok(t)
    }

    /// The same session directory name with a transcript in another
    /// project directory is a duplicate id (FORMAT.md, Identity rules).
    /// The other project directories holding a directory of that name come
    /// from the catalog; only those are looked at. A session found alone
    /// in the catalog is not looked at again until the catalog changes.
    fn check_duplicates(&self, project: &OsStr, session: &OsStr) -> Result<()> {
        let generation = self.discovery.generation()?;
        let key = Path::new(project).join(session);
        if self.no_duplicate.lock().get(&key) == Some(&generation) {
            return Ok(());
        }
        let holders = self.discovery.projects_holding(session)?;
        if holders.iter().all(|p| p == project) {
            self.no_duplicate.lock().put(key, generation);
            return Ok(());
        }
        let mut paths = Vec::new();
        for other in holders {
            if other == project {
                continue;
            }
            let dir = self.root.join(&other).join(session);
            if exists(&dir.join(Encoding::Zstd.file_name()))
                || exists(&dir.join(Encoding::Raw.file_name()))
            {
                paths.push(dir);
            }
        }
        if paths.is_empty() {
            return Ok(());
        }
        paths.insert(0, self.root.join(project).join(session));
        Err(StoreError::DuplicateId {
            id_dir: session.to_string_lossy().into_owned(),
            paths,
        })
    }

    /// The one placement check of the store (FORMAT.md, Identity rules):
    /// `header`'s id must encode to `session` and its cwd derive `project`
    /// (`_no-cwd` when absent). `path` names the transcript concerned, for
    /// the error. Used when a transcript is read ([`Store::transcript`]) and
    /// when a header is written ([`session_writer::SessionWriter`], which
    /// reports the same failure as an invalid line 1).
    ///
    /// Errors: [`StoreError::HeaderLess`] when the id or cwd cannot name a
    /// storage path (the empty id); [`StoreError::Misplaced`] (its
    /// `expected` is the transcript path the header derives) otherwise.
    pub fn check_placement(
        &self,
        header: &Header,
        project: &OsStr,
        session: &OsStr,
        path: &Path,
    ) -> Result<()> {
        let (Ok(project_name), Ok(session_name)) =
            (header.project_dir_name(), header.session_dir_name())
        else {
            return Err(StoreError::header_less(
                path,
                "header id or cwd cannot name a storage path",
            ));
        };
        if project_name.as_str() != project || session_name.as_str() != session {
            return Err(StoreError::Misplaced {
                path: path.to_path_buf(),
                expected: self
                    .root
                    .join(project_name)
                    .join(session_name)
                    .join(self.encoding.file_name()),
            });
        }
        Ok(())
    }
}

/// A transcript of each encoding found in the root, if any: the session
/// directories holding them. The walk stops once `enough` says so (given
/// what was found so far), or at the end of the root.
fn survey_encodings(
    root: &Path,
    discovery: &Discovery,
    enough: impl Fn(bool, bool) -> bool,
) -> Result<(Option<PathBuf>, Option<PathBuf>)> {
    let (mut zstd, mut raw) = (None::<PathBuf>, None::<PathBuf>);
    discovery.for_each_session_dir(|project, session| {
        let dir = root.join(project).join(session);
        if zstd.is_none() && exists(&dir.join(Encoding::Zstd.file_name())) {
            zstd = Some(dir.clone());
        }
        if raw.is_none() && exists(&dir.join(Encoding::Raw.file_name())) {
            raw = Some(dir.clone());
        }
        !enough(zstd.is_some(), raw.is_some())
    })?;
    Ok((zstd, raw))
}

/// The root's encoding: `asked` (`--compression`) when given, else the
/// root's own: zstd when it holds a zstd transcript or none at all, raw
/// when it holds raw transcripts only. The root is walked only until
/// that is known (for a zstd root, to its first zstd transcript); a root
/// holding both is reported by [`Store::report_mixed_encodings`].
///
/// Errors: [`StoreError::CompressionContradicts`] when `asked` is an
/// encoding the root holds no transcript of while it holds some of the
/// other; [`StoreError::Io`] when the root cannot be listed.
fn root_encoding(root: &Path, discovery: &Discovery, asked: Option<Encoding>) -> Result<Encoding> {
    let Some(asked) = asked else {
        let (zstd, raw) = survey_encodings(root, discovery, |zstd, _| zstd)?;
        return Ok(if raw.is_some() && zstd.is_none() {
            Encoding::Raw
        } else {
            Encoding::Zstd
        });
    };
    let (zstd, raw) = survey_encodings(root, discovery, |zstd, raw| match asked {
        Encoding::Zstd => zstd,
        Encoding::Raw => raw,
    })?;
    let (held, other) = match asked {
        Encoding::Zstd => (&zstd, &raw),
        Encoding::Raw => (&raw, &zstd),
    };
    if let (None, Some(dir)) = (held, other) {
        return Err(StoreError::CompressionContradicts {
            root: root.to_path_buf(),
            asked_zstd: asked == Encoding::Zstd,
            example: dir.join(asked.opposite().file_name()),
        });
    }
    Ok(asked)
}

impl Store {
    /// Walks the whole root and logs a warning when it holds transcripts
    /// of both encodings (MOUNT.md, Mount options: reported at start-up;
    /// the mount calls it on a thread of its own as it starts, so that
    /// [`Store::open`] walks a zstd root only to its first transcript).
    /// Transcripts of the other encoding than the store's fail with EIO.
    pub fn report_mixed_encodings(&self) {
        let Ok((Some(z), Some(r))) = survey_encodings(&self.root, &self.discovery, |z, r| z && r)
        else {
            return;
        };
        log::warn!(
            "root {} holds both zstd ({}) and raw ({}) transcripts; serving it as {}, \
             transcripts of the other encoding fail with EIO; use --compression to choose, \
             or convert them with `sessionfs doctor --repair {}`",
            self.root.display(),
            z.display(),
            r.display(),
            doctor::layout::name_of(self.encoding),
            self.root.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_compression_the_root_holds_nothing_of_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let open = |asked| {
            Store::open(
                root.path(),
                StoreOptions {
                    compression: asked,
                    ..StoreOptions::default()
                },
            )
        };
        let put = |session: &str, encoding: Encoding| {
            let dir = root.path().join("--w--").join(session);
            fs::create_dir_all(&dir).unwrap();
            fs::write(dir.join(encoding.file_name()), b"x").unwrap();
        };
        // Empty root: either encoding may be chosen.
        assert_eq!(open(Some(Encoding::Raw)).unwrap().encoding(), Encoding::Raw);
        put("a", Encoding::Zstd);
        match open(Some(Encoding::Raw)) {
            Err(e @ StoreError::CompressionContradicts { .. }) => {
                assert_eq!(e.errno(), libc::EINVAL);
                let text = e.to_string();
                assert!(text.contains("--compression none"), "{text}");
                assert!(text.contains("a/session.jsonl.zstd"), "{text}");
                assert!(text.contains("drop --compression"), "{text}");
            }
            other => panic!("zstd root opened as raw: {:?}", other.map(|s| s.encoding())),
        }
        assert_eq!(
            open(Some(Encoding::Zstd)).unwrap().encoding(),
            Encoding::Zstd
        );
        // A root holding both: the option chooses (FORMAT.md, Layout).
        put("b", Encoding::Raw);
        assert_eq!(open(Some(Encoding::Raw)).unwrap().encoding(), Encoding::Raw);
        assert_eq!(open(None).unwrap().encoding(), Encoding::Zstd);
        // A raw root refuses zstd.
        fs::remove_dir_all(root.path().join("--w--").join("a")).unwrap();
        assert!(matches!(
            open(Some(Encoding::Zstd)),
            Err(StoreError::CompressionContradicts {
                asked_zstd: true,
                ..
            })
        ));
        assert_eq!(open(None).unwrap().encoding(), Encoding::Raw);
    }

    #[test]
    fn lock_files_are_never_listed() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("--w--").join("s");
        fs::create_dir_all(&dir).unwrap();
        for name in [
            "session.jsonl.zstd",
            "notes.txt",
            ".sessionfs.lock",
            ".sessionfs.lock.wait",
            ".sessionfs.lock.break.00000000deadbeef.0",
            ".sessionfs.lock.0123456789abcdef.tmp",
        ] {
            fs::write(dir.join(name), b"").unwrap();
        }
        let store = Store::open(root.path(), StoreOptions::default()).unwrap();
        let mut names: Vec<OsString> = store
            .list_session_dir(Path::new("--w--/s"), true)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![OsString::from("notes.txt"), OsString::from(VIEW_NAME)]
        );
        assert!(is_publication_temp(OsStr::new(".sessionfs.lock")));
        assert!(!is_publication_temp(OsStr::new(".sessionfs")));
    }
}
