//! One transcript file and its decompressed view: header validation at
//! open, growth followed by extending the frame index, and reads that
//! decode only the frames they touch.
//!
//! Source: FORMAT.md ("Transcript encoding", "Reading and recovery") and
//! MOUNT.md ("Attributes", "Reading").

use std::fs::{File, Metadata};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use super::cache::FrameCache;
use super::classify::Damage;
use super::confirm::{self, Confirmed, Relied};
use super::decode::{self, HeaderFrameError};
use super::error::{Result, StoreError};
use super::frame::{decode_frame, FrameCursor};
use super::fresh;
use super::fskind::{self, CommitProtocol};
use super::growth::{Seen, Since};
use super::header::{parse_header, Header, HeaderError};
use super::index::{read_frame, FrameIndex, IndexedFrame};
use super::index_store::{self, MIN_PERSISTED_FRAMES};
use super::limits::{MAX_LINE_BYTES, MAX_WHOLE_FRAME};

/// How a root stores its transcripts (FORMAT.md, Layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// `session.jsonl.zstd`, independent zstd frames.
    Zstd,
    /// `session.jsonl`, plain lines (compression off).
    Raw,
}

impl Encoding {
    /// The transcript's file name in a session directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Encoding::Zstd => "session.jsonl.zstd",
            Encoding::Raw => "session.jsonl",
        }
    }

    /// The other encoding.
    pub fn opposite(self) -> Encoding {
        match self {
            Encoding::Zstd => Encoding::Raw,
            Encoding::Raw => Encoding::Zstd,
        }
    }
}

/// Device and inode of a backing file: when they change, the file was
/// replaced and its view is rebuilt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIdent {
    pub dev: u64,
    pub ino: u64,
}

impl FileIdent {
    fn of(meta: &Metadata) -> Self {
        FileIdent {
            dev: meta.dev(),
            ino: meta.ino(),
        }
    }
}

/// What the mount reports about a transcript.
#[derive(Debug, Clone)]
pub struct TranscriptAttr {
    /// Byte length of the decompressed committed transcript.
    pub plain_len: u64,
    /// The backing file's metadata (times, mode, owner, blocks).
    pub meta: Metadata,
}

/// What one pass of [`Transcript::read`] came to.
enum Read {
    Done(Vec<u8>),
    /// The view was built again (see `rebuilt_after_failure`).
    Rebuilt,
}

/// Source of unique generations, so that decoded frames of a rebuilt
/// transcript never alias the old ones in the shared cache.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// Frames decoded by every transcript of this process (cache hits do not
/// count): a counter for tests and `.sessionfs-status`.
static FRAMES_DECODED: AtomicU64 = AtomicU64::new(0);

/// How many frames the transcripts of this process have decoded.
pub fn frames_decoded_total() -> u64 {
    FRAMES_DECODED.load(Ordering::Relaxed)
}

/// Views built again by walking the whole file after a rewrite was found
/// (the persisted index removed): a counter for tests and
/// `.sessionfs-status`.
static VIEWS_REWALKED: AtomicU64 = AtomicU64::new(0);

/// How many views this process built again by a whole walk after a
/// rewrite was found.
pub fn views_rewalked_total() -> u64 {
    VIEWS_REWALKED.load(Ordering::Relaxed)
}

// One view per open transcript: the size of the zstd variant (the index's
// fields, its table on the heap) costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
enum View {
    Zstd(FrameIndex),
    /// Raw mode: the view ends after the last complete line.
    Raw {
        plain_len: u64,
    },
}

struct State {
    /// Frames of the index last persisted (0: none).
    persisted_frames: usize,
    generation: u64,
    file: Arc<File>,
    ident: FileIdent,
    meta: Metadata,
    /// What the view was built from ([`growth::Seen`]): how the file stands
    /// since is judged from it.
    seen: Seen,
    view: View,
    header: Header,
}

impl State {
    fn plain_len(&self) -> u64 {
        match &self.view {
            View::Zstd(index) => index.plain_len(),
            View::Raw { plain_len } => *plain_len,
        }
    }
}

/// A validated transcript. Cheap to share (`Arc`); every method takes
/// `&self`.
pub struct Transcript {
    path: PathBuf,
    encoding: Encoding,
    cache: Arc<FrameCache>,
    /// Where frame indexes are persisted, if anywhere.
    index_dir: Option<PathBuf>,
    /// How far the client of the file system holding it is trusted:
    /// growth is learned from the server on [`CommitProtocol::Remote`].
    protocol: CommitProtocol,
    state: RwLock<State>,
    frames_decoded: Arc<AtomicU64>,
    /// End of the last read (view offset): a read starting there is
    /// sequential and gets the next frames decoded ahead.
    last_read_end: AtomicU64,
    /// Where a reader of a frame too large to cache stopped.
    large_frame: Mutex<Option<FrameCursor>>,
    /// The compressed offset of the first frame a read found failing to
    /// decode or ending inside a line (`u64::MAX`: none yet): readers
    /// opened after that are told (see [`Transcript::known_damage`]), and
    /// writers refused ([`Transcript::bad_frame`]).
    bad_frame_at: std::sync::atomic::AtomicU64,
    /// The view generation last handed to a caller of
    /// [`Transcript::take_new_view`] (0: none yet).
    told_generation: AtomicU64,
}

impl Transcript {
    /// Opens and validates the transcript at `path`: the whole frame
    /// structure is walked (a torn last frame is left out of the view) and
    /// the header frame decoded and checked.
    ///
    /// Errors: [`StoreError::NotFound`]; [`StoreError::HeaderLess`] for an
    /// empty file, a file torn inside its header frame, or a first frame
    /// that is not exactly one valid header line;
    /// [`StoreError::UnsupportedVersion`] for a header version other than 0;
    /// [`StoreError::Corrupt`] for structural corruption or a header frame
    /// failing its checksum; [`StoreError::Io`].
    pub fn open(path: &Path, encoding: Encoding, cache: Arc<FrameCache>) -> Result<Transcript> {
        Self::open_with(path, encoding, cache, None)
    }

    /// [`Transcript::open`], with frame indexes persisted under `index_dir`
    /// (see [`super::index_store`]): a valid persisted index is extended
    /// instead of walking the file again, and large indexes are saved.
    ///
    /// Errors: as [`Transcript::open`].
    pub fn open_with(
        path: &Path,
        encoding: Encoding,
        cache: Arc<FrameCache>,
        index_dir: Option<PathBuf>,
    ) -> Result<Transcript> {
        let frames_decoded = Arc::new(AtomicU64::new(0));
        let state = build_state(
            path,
            encoding,
            &frames_decoded,
            index_dir.as_deref(),
            Persisted::Load,
        )?;
        let protocol = fskind::protocol_for(path.parent().unwrap_or(Path::new(".")));
        Ok(Transcript {
            path: path.to_path_buf(),
            encoding,
            index_dir,
            protocol,
            cache,
            state: RwLock::new(state),
            frames_decoded,
            last_read_end: AtomicU64::new(u64::MAX),
            large_frame: Mutex::new(None),
            bad_frame_at: std::sync::atomic::AtomicU64::new(u64::MAX),
            told_generation: AtomicU64::new(0),
        })
    }

    /// The backing file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Device and inode of the backing file as last seen (what persisted
    /// caches are keyed by).
    pub fn ident(&self) -> FileIdent {
        self.state.read().ident
    }

    /// The validated header.
    pub fn header(&self) -> Header {
        self.state.read().header.clone()
    }

    /// Whether the view was built (again) since the last call: true on
    /// the first call, and after the file was replaced or rewritten in
    /// place; never for growth alone. The mount drops the kernel's cached
    /// pages of the file then: a rewrite under the same size and mtime
    /// passes the kernel's own check.
    pub fn take_new_view(&self) -> bool {
        let generation = self.state.read().generation;
        self.told_generation.swap(generation, Ordering::Relaxed) != generation
    }

    /// How many frames this transcript has decoded so far (a counter for
    /// tests and benchmarks: cache hits do not count).
    pub fn frames_decoded(&self) -> u64 {
        self.frames_decoded.load(Ordering::Relaxed)
    }

    /// The `seq` the next appended event must have: one past the last
    /// committed line (0 when only the header is committed). Re-stats the
    /// file first, so growth by other writers is seen.
    ///
    /// Errors: [`StoreError::Corrupt`] when the last line is not a valid
    /// record or its frame fails to decode (at the frame's offset, or the
    /// line's in a raw transcript); [`StoreError::LastLineTooLong`];
    /// [`StoreError::Io`].
    pub fn next_seq(&self) -> Result<u64> {
        self.refresh()?;
        self.next_seq_as_refreshed()
    }

    /// [`Transcript::next_seq`] of the view as last refreshed, without
    /// asking the server again: for a caller that refreshed it in the same
    /// request (a FUSE write looks the transcript up once; the commit checks
    /// `seq` again against the server's file under the lock).
    ///
    /// Errors: as [`Transcript::next_seq`], but for the refresh's.
    pub fn next_seq_as_refreshed(&self) -> Result<u64> {
        let st = self.state.read();
        // The last line and where it is (its frame's offset, or its own in
        // a raw transcript), which an error about it names.
        let (line, offset) = match &st.view {
            View::Zstd(index) => {
                if let Some(d) = index.damage() {
                    return Err(damaged(&self.path, d));
                }
                match super::tail::last_complete_line(&self.path, &st.file, index)? {
                    Some((line, offset)) => (Some(line), offset),
                    None => (None, 0),
                }
            }
            View::Raw { plain_len } => {
                let line = super::tail::last_raw_line(&self.path, &st.file, *plain_len)?;
                let offset = plain_len - line.as_ref().map_or(0, |l| l.len() as u64);
                (line, offset)
            }
        };
        super::tail::next_seq_from_last_line(&self.path, line.as_deref(), offset)
    }

    /// Number of complete data frames in the view (raw mode: 0).
    pub fn frame_count(&self) -> usize {
        match &self.state.read().view {
            View::Zstd(index) => index.frames().len(),
            View::Raw { .. } => 0,
        }
    }

    /// The damage the view ends at (MOUNT.md, The tree: damage after the
    /// header frame), if any: the view is then the verified prefix plus one
    /// byte, and reads at or past the damage fail.
    pub fn damage(&self) -> Option<Damage> {
        match &self.state.read().view {
            View::Zstd(index) => index.damage().cloned(),
            View::Raw { .. } => None,
        }
    }

    /// Whether reads of this transcript are known to fail somewhere: the
    /// view ends at damage, or a read met a frame that fails to decode. A
    /// reader opened then should bypass the page cache, so that a short
    /// read before the damage is not taken for the end of the file.
    pub fn known_damage(&self) -> bool {
        self.bad_frame().is_some() || self.damage().is_some()
    }

    /// The compressed offset of the first frame a read of this view found
    /// failing its checksum or decoding, or ending inside a line (FORMAT.md,
    /// Reading and recovery: corruption); `None` while no read met one.
    pub fn bad_frame(&self) -> Option<u64> {
        let at = self.bad_frame_at.load(Ordering::Relaxed);
        (at != u64::MAX).then_some(at)
    }

    /// Re-stats the backing file and follows it: growth extends the view
    /// from where it ended; a replaced file (other device or inode), or
    /// one rewritten in place (shorter; the same length under another
    /// mtime or ctime; longer with other bytes before the old end:
    /// [`Seen::since`]) is opened and validated again, its decoded frames
    /// no longer served. On a network client the
    /// length comes from the server ([`fresh::server_metadata`]), so that
    /// another machine's appends show at once, not after the client's
    /// attribute cache expires (20 s for sshfs's defaults).
    ///
    /// When the path is gone (NotFound: the session removed or moved on
    /// disk), the file this transcript holds open is still its file, as an
    /// open descriptor survives `unlink` on a local file system: its
    /// metadata (`fstat` of the held descriptor) stands for the path's, so
    /// the view keeps what it has and readers opened before the removal go
    /// on. A path that names another file again (other device or inode) is
    /// followed as above.
    ///
    /// Errors: as [`Transcript::open`] when the file must be re-read;
    /// [`StoreError::Io`] when neither the path nor the held descriptor can
    /// be stat'ed.
    pub fn refresh(&self) -> Result<TranscriptAttr> {
        let meta = match fresh::server_metadata(&self.path, self.protocol) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let file = Arc::clone(&self.state.read().file);
                file.metadata()
                    .map_err(|e| StoreError::io("stat the open descriptor of", &self.path, e))?
            }
            Err(e) => return Err(StoreError::io("stat", &self.path, e)),
        };
        let since =
            |st: &State| (FileIdent::of(&meta) == st.ident).then(|| st.seen.since(&st.file, &meta));
        {
            let st = self.state.read();
            if since(&st) == Some(Since::Unchanged) {
                return Ok(TranscriptAttr {
                    plain_len: st.plain_len(),
                    meta,
                });
            }
        }
        let mut st = self.state.write();
        let rebuilt = |persisted| {
            build_state(
                &self.path,
                self.encoding,
                &self.frames_decoded,
                self.index_dir.as_deref(),
                persisted,
            )
        };
        // On a network root a rewrite that the attributes suggest (shorter,
        // another mtime, other tail bytes or a moved last frame through
        // the held descriptor) is put to the bytes first: when the file
        // still holds what the view relies on, the look was stale, and the
        // view is kept (grown, if the file is longer) instead of walked
        // again (confirm.rs). Its descriptor is opened again then: the
        // client may have cut its cached pages to the stale length, and a
        // fresh open drops them (a FUSE client without `kernel_cache`).
        let looked = since(&st);
        let suspect = match looked {
            Some(Since::Rewritten) => true,
            Some(Since::Grown) => !prefix_intact(&st),
            _ => false,
        };
        let stale = suspect && self.stale_look(&st);
        let verdict = match looked {
            _ if stale => match reopen_same(&self.path, st.ident) {
                Ok(Some(file)) => {
                    st.file = Arc::new(file);
                    Some(if meta.len() > st.seen.len {
                        Since::Grown
                    } else {
                        Since::Unchanged
                    })
                }
                // Another file at the path since the confirmation.
                Ok(None) => None,
                Err(e) => return Err(StoreError::io("open", &self.path, e)),
            },
            Some(Since::Grown) if suspect => Some(Since::Rewritten),
            other => other,
        };
        match verdict {
            // Another file at the path.
            None => *st = rebuilt(Persisted::Load)?,
            // Rewritten in place (on a network root: confirmed from the
            // bytes above): shorter, the same length under another
            // mtime or ctime (a byte flipped, a copy of the same size put
            // over it), or longer with other bytes before the old end or
            // the last indexed frame no longer where it was (a longer
            // copy, `cp backup FILE`). Decoded frames of the old view are
            // dropped with its generation, and the file is walked again:
            // the persisted index's check (its last frame) can pass for
            // such a file.
            Some(Since::Rewritten) => *st = rebuilt(Persisted::Replace)?,
            Some(Since::Grown) => {
                let file = Arc::clone(&st.file);
                let new_meta = file
                    .metadata()
                    .map_err(|e| StoreError::io("stat", &self.path, e))?;
                // A network client's descriptor may still report the
                // stale, shorter length: the view keeps what it has and
                // what it was seen at, and grows at a later refresh.
                if self.protocol == CommitProtocol::Remote && new_meta.len() < st.seen.len {
                    return Ok(TranscriptAttr {
                        plain_len: st.plain_len(),
                        meta: st.meta.clone(),
                    });
                }
                extend_view(
                    &self.path,
                    &file,
                    &mut st.view,
                    new_meta.len(),
                    &self.frames_decoded,
                )?;
                st.seen = Seen::of(&file, &new_meta);
                st.meta = new_meta;
                let ident = st.ident;
                if let (Some(dir), View::Zstd(index)) = (&self.index_dir, &st.view) {
                    st.persisted_frames = persist_if_grown(dir, ident, index, st.persisted_frames);
                }
            }
            // Another thread caught up first.
            Some(Since::Unchanged) => {}
        }
        Ok(TranscriptAttr {
            plain_len: st.plain_len(),
            meta: st.meta.clone(),
        })
    }

    /// Whether a rewrite that the attributes of a network root suggest is
    /// a stale look: the file, read through a fresh descriptor, still
    /// holds the 8 bytes before the length the view was built at and its
    /// last indexed frame ([`confirm::confirm`]). Always false on a local
    /// root (its attributes are the truth) and when the fresh look fails
    /// (the rewrite verdict stands).
    fn stale_look(&self, st: &State) -> bool {
        if self.protocol != CommitProtocol::Remote {
            return false;
        }
        let relied = Relied {
            dev: st.ident.dev,
            ino: st.ident.ino,
            len: st.seen.len,
            tail: st.seen.tail(),
            last_frame: match &st.view {
                View::Zstd(index) => index.frames().last().map(|f| f.info),
                View::Raw { .. } => None,
            },
        };
        match confirm::confirm(&self.path, &relied, self.protocol) {
            Ok(Confirmed::Stale) => {
                log::debug!(
                    "{}: a stale length or mtime from the client (its bytes up to {} are \
                     as the view has them): the view is kept",
                    self.path.display(),
                    st.seen.len
                );
                true
            }
            Ok(Confirmed::Rewritten) => false,
            Err(e) => {
                log::debug!(
                    "{}: could not confirm a rewrite from its bytes ({e}): taken as one",
                    self.path.display()
                );
                false
            }
        }
    }

    /// What the view was built from (length, times and last bytes of the
    /// backing file as last refreshed).
    pub fn seen(&self) -> Seen {
        self.state.read().seen
    }

    /// How the backing file, as last refreshed, stands since `seen` (an
    /// earlier [`Transcript::seen`] of this file): one read of up to 8
    /// bytes when it grew ([`Seen::since`]).
    pub fn since(&self, seen: &Seen) -> Since {
        let st = self.state.read();
        seen.since(&st.file, &st.meta)
    }

    /// The attributes as last seen, without touching the disk.
    pub fn cached_attr(&self) -> TranscriptAttr {
        let st = self.state.read();
        TranscriptAttr {
            plain_len: st.plain_len(),
            meta: st.meta.clone(),
        }
    }

    /// Reads up to `size` bytes of the view at `offset`. Reads past the
    /// known end re-stat the file first, so a grown transcript is served
    /// without waiting for the attribute timeout.
    ///
    /// A request that covers bytes before a frame that fails to decode (or
    /// before the damage the view ends at) returns those bytes: a short
    /// read (MOUNT.md, The tree; issue 9 item 4).
    ///
    /// Errors: [`StoreError::Corrupt`] when the request starts inside a
    /// frame that fails its checksum or decoding, or ends inside a line;
    /// [`StoreError::Damaged`] when it starts at or past the damage the
    /// view ends at; [`StoreError::Io`].
    pub fn read(&self, offset: u64, size: u32) -> Result<Vec<u8>> {
        self.read_with(offset, size, true)
    }

    /// [`Transcript::read`] for a reader through the kernel's page cache,
    /// which takes a short read for the end of the file (and the file's
    /// size for the bytes it got): a request that runs into a frame failing
    /// to decode, or into the damage the view ends at, fails whole with that
    /// error instead (MOUNT.md, The tree: "fails that read with `EIO`, so no
    /// tool mistakes the prefix for the whole transcript").
    ///
    /// Errors: as [`Transcript::read`].
    pub fn read_no_short(&self, offset: u64, size: u32) -> Result<Vec<u8>> {
        self.read_with(offset, size, false)
    }

    fn read_with(&self, offset: u64, size: u32, short_ok: bool) -> Result<Vec<u8>> {
        match self.read_once(offset, size, short_ok)? {
            Read::Done(bytes) => Ok(bytes),
            // The file no longer held the frame as indexed (rewritten
            // under this view: a takeover cut a dead holder's
            // unacknowledged frame and wrote its own there): the view was
            // built again; read once more, and whatever fails now fails.
            Read::Rebuilt => match self.read_once(offset, size, short_ok)? {
                Read::Done(bytes) => Ok(bytes),
                Read::Rebuilt => Err(StoreError::Corrupt {
                    path: self.path.clone(),
                    offset,
                    reason: "the file changed under two reads in a row".into(),
                }),
            },
        }
    }

    /// After `frame` failed to decode: whether the file no longer holds it
    /// as indexed (its header walks to other sizes, or not at all), in
    /// which case the view is built again by walking the file, never from
    /// the persisted index: that index may be the stale one (a transcript
    /// rewritten in place with the same inode and the same last frame, so
    /// its load check passed), and the walk's index replaces it.
    fn rebuilt_after_failure(&self, frame: &IndexedFrame) -> Result<bool> {
        let mut st = self.state.write();
        if frame_intact(&st.file, &frame.info) {
            return Ok(false);
        }
        *st = build_state(
            &self.path,
            self.encoding,
            &self.frames_decoded,
            self.index_dir.as_deref(),
            Persisted::Replace,
        )?;
        Ok(true)
    }

    fn read_once(&self, offset: u64, size: u32, short_ok: bool) -> Result<Read> {
        if offset.saturating_add(u64::from(size)) > self.state.read().plain_len() {
            self.refresh()?;
        }
        let st = self.state.read();
        let file = Arc::clone(&st.file);
        let generation = st.generation;
        let index = match &st.view {
            View::Zstd(index) => index,
            View::Raw { plain_len } => {
                let plain_len = *plain_len;
                drop(st);
                return self
                    .read_raw(&file, offset, size, plain_len)
                    .map(Read::Done);
            }
        };
        if let Some(d) = index.damage() {
            let past = if short_ok {
                offset
            } else {
                offset.saturating_add(u64::from(size))
            };
            if past > index.prefix_len() || offset >= index.prefix_len() {
                return Err(damaged(&self.path, d));
            }
        }
        let range = index.frames_for(offset, u64::from(size));
        let frames: Vec<(usize, IndexedFrame)> = range
            .clone()
            .zip(index.frames().from(range.start).iter())
            .collect();
        let ahead: Vec<(usize, IndexedFrame)> = index
            .frames()
            .from(range.end)
            .iter()
            .take(READ_AHEAD_FRAMES)
            .take_while(|f| f.plain_len <= LARGE_FRAME)
            .scan(0u64, |bytes, f| {
                *bytes += f.plain_len;
                (*bytes <= READ_AHEAD_BYTES || *bytes == f.plain_len).then_some(f)
            })
            .enumerate()
            .map(|(i, f)| (range.end + i, f))
            .collect();
        drop(st);

        let end = offset.saturating_add(u64::from(size));
        let sequential = self.last_read_end.swap(end, Ordering::Relaxed) == offset;
        if sequential && !ahead.is_empty() {
            self.read_ahead(&file, generation, ahead);
        }
        // A read over several frames that are not decoded yet hands all but
        // the first to the read-ahead worker, so that both cores decode
        // (this thread takes the first, then each the worker has not
        // started: the cache decodes a frame once, whoever asks first).
        // Only when the cache holds them with room to spare: a frame the
        // worker decoded but the cache could not keep would be decoded
        // again here.
        // Not for a read over many small frames (a hostile transcript of
        // one-byte frames: a 1 MiB read over a million of them would hand
        // the worker a million): each is quick to decode here.
        if frames.len() > 1
            && frames.len() <= MAX_FRAMES_HANDED
            && !self.cache.contains(&(generation, frames[0].0))
        {
            let rest: Vec<(usize, IndexedFrame)> = frames[1..]
                .iter()
                .filter(|(_, f)| f.plain_len <= LARGE_FRAME)
                .copied()
                .collect();
            let rest_bytes: u64 = rest.iter().map(|(_, f)| f.plain_len).sum();
            if !rest.is_empty() && rest_bytes <= self.cache.cap_bytes() / 4 {
                self.read_ahead(&file, generation, rest);
            }
        }
        // Reserve what the touched frames hold, not what the caller asked.
        let available: u64 = frames
            .iter()
            .map(|(_, f)| {
                (end.min(f.plain_offset + f.plain_len)).saturating_sub(offset.max(f.plain_offset))
            })
            .sum();
        let mut out = Vec::with_capacity(available as usize);
        for (number, frame) in frames {
            let from = offset.saturating_sub(frame.plain_offset);
            let to = end.min(frame.plain_offset + frame.plain_len) - frame.plain_offset;
            let part = if frame.plain_len > LARGE_FRAME {
                // Never held whole: decoded through a cursor that a
                // sequential reader keeps using.
                self.read_large(&file, (generation, number), &frame, from, to)
                    .map(|bytes| out.extend_from_slice(&bytes))
            } else {
                decoded_frame(
                    &self.cache,
                    &self.frames_decoded,
                    &self.path,
                    &file,
                    (generation, number),
                    &frame,
                )
                .map(|plain| out.extend_from_slice(&plain[from as usize..to as usize]))
            };
            match part {
                Ok(()) => {}
                Err(e @ StoreError::Io { .. }) => return Err(e),
                Err(_) if self.rebuilt_after_failure(&frame)? => return Ok(Read::Rebuilt),
                Err(e) => {
                    self.bad_frame_at
                        .fetch_min(frame.info.offset, Ordering::Relaxed);
                    if out.is_empty() || !short_ok {
                        return Err(e);
                    }
                    // A short read: the bytes before the bad frame.
                    log::warn!("{e}; served the {} bytes before it", out.len());
                    return Ok(Read::Done(out));
                }
            }
        }
        Ok(Read::Done(out))
    }

    /// Bytes `[from, to)` of a frame too large to decode whole, through the
    /// transcript's large-frame cursor (reused when the read continues
    /// where the last one stopped).
    fn read_large(
        &self,
        file: &Arc<File>,
        key: (u64, usize),
        frame: &IndexedFrame,
        from: u64,
        to: u64,
    ) -> Result<Vec<u8>> {
        let mut slot = self.large_frame.lock();
        let cursor = match slot.take() {
            Some(c) if c.key() == key && c.pos() <= from => slot.insert(c),
            _ => {
                self.frames_decoded.fetch_add(1, Ordering::Relaxed);
                FRAMES_DECODED.fetch_add(1, Ordering::Relaxed);
                let c = FrameCursor::open(Arc::clone(file), &frame.info, frame.plain_len, key)
                    .map_err(|e| StoreError::from_frame(&self.path, e))?;
                slot.insert(c)
            }
        };
        let result = cursor.read_range(from, to);
        if result.is_err() {
            *slot = None;
        }
        result.map_err(|e| StoreError::from_frame(&self.path, e))
    }

    /// Decodes `frames` into the cache on the read-ahead worker, so that a
    /// sequential reader finds them decoded (the other core does the work).
    fn read_ahead(&self, file: &Arc<File>, generation: u64, frames: Vec<(usize, IndexedFrame)>) {
        if frames
            .iter()
            .all(|(n, _)| self.cache.contains(&(generation, *n)))
        {
            return;
        }
        let cache = Arc::clone(&self.cache);
        let counter = Arc::clone(&self.frames_decoded);
        let path = self.path.clone();
        let file = Arc::clone(file);
        self.cache.prefetch(Box::new(move || {
            for (number, frame) in frames {
                // Errors surface when a reader touches the frame.
                if decoded_frame(&cache, &counter, &path, &file, (generation, number), &frame)
                    .is_err()
                {
                    break;
                }
            }
        }));
    }

    fn read_raw(&self, file: &File, offset: u64, size: u32, plain_len: u64) -> Result<Vec<u8>> {
        let end = offset.saturating_add(u64::from(size)).min(plain_len);
        if offset >= end {
            return Ok(Vec::new());
        }
        let mut buf = vec![0u8; (end - offset) as usize];
        file.read_exact_at(&mut buf, offset)
            .map_err(|e| StoreError::io("read", &self.path, e))?;
        Ok(buf)
    }
}

/// Frames larger than this (decompressed bytes) are never decoded whole
/// into memory: a read decodes through the part it wants (memory stays
/// bounded whatever a frame claims or holds).
const LARGE_FRAME: u64 = MAX_WHOLE_FRAME;

/// Most frames of one read handed to the read-ahead worker (a read of
/// 1 MiB over frames of a typical batch, 1 KiB or more, touches at most
/// about 1,000).
const MAX_FRAMES_HANDED: usize = 1024;

/// Unwalked spans of at least this many compressed bytes get a speculative
/// walk of their second half on another thread (the thread costs about
/// what walking 1 MiB of small frames does).
const PARALLEL_WALK_SPAN: u64 = 16 << 20;

/// Frames decoded ahead of a sequential reader, at most.
const READ_AHEAD_FRAMES: usize = 16;
/// Plaintext decoded ahead of a sequential reader, at most (bytes).
const READ_AHEAD_BYTES: u64 = 2 << 20;

/// One decoded frame, from the cache or decoded now (and cached). Checks
/// the decoded length against the index and that the frame ends a line.
fn decoded_frame(
    cache: &FrameCache,
    frames_decoded: &AtomicU64,
    path: &Path,
    file: &File,
    key: (u64, usize),
    frame: &IndexedFrame,
) -> Result<Arc<Vec<u8>>> {
    cache.get_or_decode(key, || {
        frames_decoded.fetch_add(1, Ordering::Relaxed);
        FRAMES_DECODED.fetch_add(1, Ordering::Relaxed);
        let plain = if frame.info.len <= MAX_WHOLE_FRAME {
            let bytes =
                read_frame(file, &frame.info).map_err(|e| StoreError::from_frame(path, e))?;
            decode_frame(&bytes, &frame.info).map_err(|e| StoreError::from_frame(path, e))?
        } else {
            // Large compressed, small plain (the index says at most
            // LARGE_FRAME): streamed, never read whole.
            let mut plain = Vec::new();
            let reader =
                decode::open(file, &frame.info).map_err(|e| StoreError::from_frame(path, e))?;
            std::io::Read::read_to_end(
                &mut std::io::Read::take(reader, frame.plain_len + 1),
                &mut plain,
            )
            .map_err(|e| StoreError::corrupt(path, frame.info.offset, e.to_string()))?;
            plain
        };
        if plain.len() as u64 != frame.plain_len {
            return Err(StoreError::corrupt(
                path,
                frame.info.offset,
                format!(
                    "frame decodes to {} bytes, {} when indexed",
                    plain.len(),
                    frame.plain_len
                ),
            ));
        }
        if plain.last().is_some_and(|&b| b != b'\n') {
            return Err(StoreError::corrupt(
                path,
                frame.info.offset,
                "complete frame ends inside a line",
            ));
        }
        Ok(plain)
    })
}

/// Whether `file` still holds the frame `info` at its offset (its header
/// walks to the same frame). One frame header read.
fn frame_intact(file: &File, info: &super::frame::FrameInfo) -> bool {
    matches!(
        super::frame::walk_frame(file, info.offset, u64::MAX),
        Ok(super::frame::Step::Frame(found)) if found == *info
    )
}

/// The file at `path` opened afresh for reading, when it is still the file
/// `ident` (device and inode); `None` when the path names another file.
///
/// Errors: the `open(2)` or `fstat(2)` error.
fn reopen_same(path: &Path, ident: FileIdent) -> io::Result<Option<File>> {
    let file = File::open(path)?;
    let meta = file.metadata()?;
    Ok((FileIdent::of(&meta) == ident).then_some(file))
}

/// Whether the file still holds what the view indexed: the last indexed
/// frame walks to the same frame (zstd), or the view still ends a line
/// (raw). Cheap: one frame header or one byte.
fn prefix_intact(st: &State) -> bool {
    match &st.view {
        View::Zstd(index) => index
            .frames()
            .last()
            .is_none_or(|last| frame_intact(&st.file, &last.info)),
        View::Raw { plain_len } if *plain_len > 0 => {
            let mut byte = [0u8; 1];
            st.file.read_exact_at(&mut byte, plain_len - 1).is_ok() && byte[0] == b'\n'
        }
        View::Raw { .. } => true,
    }
}

/// Saves a zstd index when it has grown by [`MIN_PERSISTED_FRAMES`] since
/// it was last saved; returns the frame count now persisted.
fn persist_if_grown(dir: &Path, ident: FileIdent, index: &FrameIndex, persisted: usize) -> usize {
    let frames = index.frames().len();
    if frames >= persisted + MIN_PERSISTED_FRAMES {
        index_store::save(dir, ident, index);
        frames
    } else {
        persisted
    }
}

/// What [`build_state`] does with a persisted index under `index_dir`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Persisted {
    /// Load and extend it when it is valid (see [`index_store::load`]).
    Load,
    /// Remove it and walk the file: the view built from it did not hold
    /// the file's frames.
    Replace,
}

fn build_state(
    path: &Path,
    encoding: Encoding,
    frames_decoded: &AtomicU64,
    index_dir: Option<&Path>,
    persisted: Persisted,
) -> Result<State> {
    if persisted == Persisted::Replace {
        VIEWS_REWALKED.fetch_add(1, Ordering::Relaxed);
    }
    // Checked before opening: opening a FIFO would block.
    let not_regular = || {
        let what = super::check::describe_non_regular(path)
            .unwrap_or_else(|| "not a regular file".to_string());
        StoreError::header_less(path, what)
    };
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() => return Err(not_regular()),
        _ => {}
    }
    let file = File::open(path).map_err(|e| match e.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::EISDIR) => not_regular(),
        _ => StoreError::io("open", path, e),
    })?;
    let meta = file
        .metadata()
        .map_err(|e| StoreError::io("stat", path, e))?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    if meta.len() == 0 {
        return Err(StoreError::header_less(path, "the file is empty"));
    }
    let mut persisted_frames = 0;
    let (view, header_line) = match encoding {
        Encoding::Zstd => {
            // The header frame first, through the bounded stream: a file
            // whose first frame is not one header line costs one line.
            let first = first_data_frame(path, &file, meta.len())?;
            let line = match decode::header_line(&file, &first) {
                Ok(line) => line,
                Err(HeaderFrameError::Frame(e)) => return Err(StoreError::from_frame(path, e)),
                Err(HeaderFrameError::LineTooLong) => {
                    return Err(StoreError::HeaderLineTooLong {
                        path: path.to_path_buf(),
                        limit: MAX_LINE_BYTES as u64,
                    })
                }
                Err(HeaderFrameError::NotOneLine(why)) => {
                    return Err(StoreError::header_less(
                        path,
                        format!("first frame is not exactly one header line: {why}"),
                    ))
                }
            };
            let ident = FileIdent::of(&meta);
            let loaded = match (index_dir, persisted) {
                (Some(dir), Persisted::Load) => index_store::load(dir, ident, &file, meta.len()),
                (Some(dir), Persisted::Replace) => {
                    index_store::remove(dir, ident, path);
                    None
                }
                (None, _) => None,
            };
            let loaded_frames = loaded.as_ref().map_or(0, |i| i.frames().len());
            let mut view = View::Zstd(loaded.unwrap_or_default());
            extend_view(path, &file, &mut view, meta.len(), frames_decoded)?;
            if let (Some(dir), View::Zstd(index)) = (index_dir, &view) {
                persisted_frames = persist_if_grown(dir, ident, index, loaded_frames);
            }
            let View::Zstd(index) = &view else {
                unreachable!("built as a zstd view")
            };
            if index.frames().first().map(|f| f.info) != Some(first) {
                // The classifier put the damage at the header frame itself.
                let (at, why) = index.damage().map_or(
                    (first.offset, "the header frame is damaged".to_string()),
                    |d| (d.at, d.reason.clone()),
                );
                return Err(StoreError::corrupt(path, at, why));
            }
            (view, line)
        }
        Encoding::Raw => {
            let line =
                first_line(&file, meta.len()).map_err(|e| StoreError::io("read", path, e))?;
            let Some(line) = line else {
                if meta.len() > MAX_LINE_BYTES as u64 {
                    return Err(StoreError::HeaderLineTooLong {
                        path: path.to_path_buf(),
                        limit: MAX_LINE_BYTES as u64,
                    });
                }
                return Err(StoreError::header_less(
                    path,
                    "the first line is incomplete",
                ));
            };
            let mut view = View::Raw { plain_len: 0 };
            extend_view(path, &file, &mut view, meta.len(), frames_decoded)?;
            (view, line)
        }
    };
    let header = match parse_header(&header_line[..header_line.len() - 1]) {
        Ok(h) => h,
        Err(HeaderError::Invalid(why)) => return Err(StoreError::header_less(path, why)),
        Err(HeaderError::UnsupportedVersion(detail)) => {
            return Err(StoreError::UnsupportedVersion {
                path: path.to_path_buf(),
                detail,
            })
        }
    };
    Ok(State {
        persisted_frames,
        generation: NEXT_GENERATION.fetch_add(1, Ordering::Relaxed),
        seen: Seen::of(&file, &meta),
        file: Arc::new(file),
        ident: FileIdent::of(&meta),
        meta,
        view,
        header,
    })
}

/// The first data frame of a zstd file of `file_len` bytes (skippable
/// frames before it are walked over).
///
/// Errors: [`StoreError::HeaderLess`] when the file ends inside it or holds
/// none; [`StoreError::Corrupt`] for structural corruption before it;
/// [`StoreError::Io`].
fn first_data_frame(path: &Path, file: &File, file_len: u64) -> Result<super::frame::FrameInfo> {
    use super::frame::{walk_frame, FrameKind, Step};
    let mut pos = 0;
    loop {
        match walk_frame(file, pos, file_len).map_err(|e| StoreError::from_frame(path, e))? {
            Step::Frame(info) if info.kind == FrameKind::Skippable => pos = info.offset + info.len,
            Step::Frame(info) => return Ok(info),
            Step::Torn => {
                return Err(StoreError::header_less(
                    path,
                    "the file ends inside its header frame",
                ))
            }
            Step::End => return Err(StoreError::header_less(path, "it holds no data frame")),
        }
    }
}

/// Extends a view to a file of `file_len` bytes.
fn extend_view(
    path: &Path,
    file: &File,
    view: &mut View,
    file_len: u64,
    frames_decoded: &AtomicU64,
) -> Result<()> {
    match view {
        View::Zstd(index) => {
            let mut decoded = 0;
            // Long spans (a first open of a large transcript) are walked
            // from both ends of their halves at once (see extend_parallel).
            let r = index.extend_parallel(file, file_len, &mut decoded, PARALLEL_WALK_SPAN);
            frames_decoded.fetch_add(decoded, Ordering::Relaxed);
            FRAMES_DECODED.fetch_add(decoded, Ordering::Relaxed);
            r.map_err(|e| StoreError::from_frame(path, e))
        }
        View::Raw { plain_len } => {
            *plain_len = last_line_end(file, *plain_len, file_len)
                .map_err(|e| StoreError::io("read", path, e))?;
            Ok(())
        }
    }
}

/// The first line of a raw file, `\n` included; `None` when the file has no
/// complete first line within [`MAX_LINE_BYTES`] bytes.
fn first_line(file: &File, file_len: u64) -> io::Result<Option<Vec<u8>>> {
    let len = file_len.min(MAX_LINE_BYTES as u64) as usize;
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, 0)?;
    Ok(buf.iter().position(|&b| b == b'\n').map(|i| {
        buf.truncate(i + 1);
        buf
    }))
}

/// End of the last complete line in `[from, to)`, searching backwards; `from`
/// when there is none (the view does not grow).
fn last_line_end(file: &File, from: u64, to: u64) -> io::Result<u64> {
    const CHUNK: u64 = 64 * 1024;
    let mut end = to;
    let mut buf = vec![0u8; CHUNK as usize];
    while end > from {
        let start = end.saturating_sub(CHUNK).max(from);
        let chunk = &mut buf[..(end - start) as usize];
        file.read_exact_at(chunk, start)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(from)
}

/// The error of a read or an append at the damage `d` of `path`.
fn damaged(path: &Path, d: &Damage) -> StoreError {
    StoreError::Damaged {
        path: path.to_path_buf(),
        at: d.at,
        resumes_at: d.resumes_at,
        reason: d.reason.clone(),
        nothing_verifiable_follows: d.nothing_verifiable_follows,
    }
}

#[cfg(test)]
mod not_regular_tests {
    use super::*;

    /// Something else where a transcript belongs is named for what it is,
    /// with the advice to move it out of the root (not to restore it).
    #[test]
    fn a_directory_named_like_a_transcript_is_named_for_what_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.zstd");
        std::fs::create_dir(&path).unwrap();
        let cache = Arc::new(FrameCache::new(1 << 20));
        let e = match Transcript::open(&path, Encoding::Zstd, cache) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("a directory opened as a transcript"),
        };
        assert!(e.contains("not a regular file: a directory"), "{e}");
        assert!(e.contains("move it out of the root"), "{e}");
        assert!(!e.contains("restore it from a backup"), "{e}");
    }
}

#[cfg(test)]
mod removed_path_tests {
    use super::*;

    const HEADER: &[u8] =
        b"{\"type\":\"session\",\"version\":0,\"id\":\"s\",\"createdAt\":1,\"cwd\":\"/w\",\"delegationDepth\":0}\n";
    const EVENT: &[u8] = b"{\"type\":\"x/y\",\"seq\":0,\"time\":1,\"data\":{}}\n";

    fn write(path: &Path, lines: &[&[u8]]) {
        let mut bytes = Vec::new();
        for l in lines {
            bytes.extend(super::super::frame::encode_frame(l).unwrap());
        }
        std::fs::write(path, bytes).unwrap();
    }

    /// A frame rewritten under an open view (a takeover cut a dead
    /// holder's unacknowledged frame and wrote its own in its place, the
    /// file no shorter): a read of it is served from the file as it is
    /// now, through the page cache's reads too, instead of failing.
    #[test]
    fn a_frame_rewritten_under_the_view_is_read_as_it_is_now() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.zstd");
        let theirs: &[u8] =
            b"{\"type\":\"x/y\",\"seq\":0,\"time\":1,\"data\":{\"who\":\"dead\"}}\n";
        let ours: &[u8] =
            b"{\"type\":\"x/y\",\"seq\":0,\"time\":2,\"data\":{\"who\":\"taker, longer\"}}\n";
        write(&path, &[HEADER, theirs]);
        let cache = Arc::new(FrameCache::new(1 << 20));
        let t = Transcript::open(&path, Encoding::Zstd, cache).unwrap();
        assert_eq!(
            t.cached_attr().plain_len,
            (HEADER.len() + theirs.len()) as u64
        );
        write(&path, &[HEADER, ours]);
        let at = HEADER.len() as u64;
        // Within the size the view knew: no re-stat before the read.
        let n = theirs.len() as u32;
        assert_eq!(t.read_no_short(at, n).unwrap(), &ours[..n as usize]);
        assert!(!t.known_damage());
    }

    /// A byte flipped in a frame a reader already read (same length, same
    /// inode, another mtime): the decoded frames of the old view are not
    /// served again; the read of that frame fails its checksum, and the
    /// frames before it still read (helper 28: the mount served the
    /// cached bytes indefinitely).
    #[test]
    fn a_frame_damaged_in_place_after_a_read_is_not_served_from_the_cache() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.zstd");
        let second: &[u8] = b"{\"type\":\"x/y\",\"seq\":1,\"time\":1,\"data\":{}}\n";
        write(&path, &[HEADER, EVENT, second]);
        let cache = Arc::new(FrameCache::new(1 << 20));
        let t = Transcript::open(&path, Encoding::Zstd, cache).unwrap();
        let all = [HEADER, EVENT, second].concat();
        assert_eq!(t.read_no_short(0, 1 << 20).unwrap(), all);
        // The last byte of the middle frame: its content checksum.
        let frames: Vec<u64> = [HEADER, EVENT]
            .iter()
            .map(|l| super::super::frame::encode_frame(l).unwrap().len() as u64)
            .collect();
        let at = frames[0] + frames[1] - 1;
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let mut byte = [0u8];
        std::fs::File::open(&path)
            .unwrap()
            .read_exact_at(&mut byte, at)
            .unwrap();
        f.write_all_at(&[byte[0] ^ 0xff], at).unwrap();
        // Another mtime whatever the clock's granularity.
        let before = std::fs::metadata(&path).unwrap().modified().unwrap();
        f.set_modified(before + std::time::Duration::from_secs(1))
            .unwrap();
        drop(f);
        assert_eq!(t.refresh().unwrap().plain_len, all.len() as u64);
        let middle = HEADER.len() as u64;
        let e = t.read_no_short(middle, 1 << 20).unwrap_err();
        assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
        assert_eq!(t.read_no_short(0, HEADER.len() as u32).unwrap(), HEADER);
    }

    /// A transcript rewritten in place by a longer copy whose frames end
    /// where the old ones did (the old last frame's header walks the same,
    /// its bytes differ), and one rewritten to the same length with its
    /// mtime put back: both are read as they are now, not as growth of
    /// the old view or the old view itself (helper 29).
    #[test]
    fn rewrites_that_look_like_growth_or_nothing_are_read_as_they_are_now() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.zstd");
        let other: &[u8] = b"{\"type\":\"x/z\",\"seq\":0,\"time\":2,\"data\":{}}\n";
        let next: &[u8] = b"{\"type\":\"x/z\",\"seq\":1,\"time\":3,\"data\":{}}\n";
        let framed = |l: &[u8]| super::super::frame::encode_frame(l).unwrap();
        assert_eq!(framed(EVENT).len(), framed(other).len());
        write(&path, &[HEADER, EVENT]);
        let cache = Arc::new(FrameCache::new(1 << 20));
        let t = Transcript::open(&path, Encoding::Zstd, cache).unwrap();
        assert_eq!(t.read(0, 1 << 20).unwrap(), [HEADER, EVENT].concat());
        // Longer, the same inode, other bytes before the old end.
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let longer = [framed(HEADER), framed(other), framed(next)].concat();
        f.write_all_at(&longer, 0).unwrap();
        t.refresh().unwrap();
        assert_eq!(t.read(0, 1 << 20).unwrap(), [HEADER, other, next].concat());
        // The same length, the mtime put back (the ctime still moves).
        let before = std::fs::metadata(&path).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let back = [framed(HEADER), framed(EVENT), framed(next)].concat();
        f.write_all_at(&back, 0).unwrap();
        f.set_modified(before.modified().unwrap()).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().modified().unwrap(),
            before.modified().unwrap()
        );
        t.refresh().unwrap();
        assert_eq!(t.read(0, 1 << 20).unwrap(), [HEADER, EVENT, next].concat());
    }

    /// An open transcript whose path is removed keeps its view (the held
    /// descriptor's metadata stands for the path's); a file put at the
    /// path again (another inode) is followed.
    #[test]
    fn a_removed_path_keeps_the_view_and_a_replaced_one_is_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl.zstd");
        write(&path, &[HEADER, EVENT]);
        let cache = Arc::new(FrameCache::new(1 << 20));
        let t = Transcript::open(&path, Encoding::Zstd, cache).unwrap();
        let len = (HEADER.len() + EVENT.len()) as u64;
        std::fs::remove_file(&path).unwrap();
        assert_eq!(t.refresh().unwrap().plain_len, len);
        // A read past the end refreshes too.
        let all = t.read(0, 1 << 20).unwrap();
        assert_eq!(all, [HEADER, EVENT].concat());
        write(&path, &[HEADER]);
        assert_eq!(t.refresh().unwrap().plain_len, HEADER.len() as u64);
        assert_eq!(t.read(0, 1 << 20).unwrap(), HEADER);
    }
}
