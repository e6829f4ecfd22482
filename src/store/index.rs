//! The frame index of one zstd transcript: for each complete data frame,
//! where it is in the compressed file and in the decompressed view.
//!
//! Source: MOUNT.md, "Reading": any offset is read at the cost of the
//! frames it touches; the index is built from frame headers and extended,
//! not rebuilt, when the file grows.
//!
//! The frames are held compactly, the same bytes in memory and in a
//! persisted index (see [`super::index_store`]), so that loading one is a
//! read and a check, not a parse into a vector of structs:
//! - one [`ENTRY`]-byte entry a frame: three little-endian `u32`s, the
//!   compressed length with the content-size flag (bit 30) and the
//!   checksum flag (bit 31), the decompressed length, and the slack of the
//!   blocks' bound over it (`max_plain_len - plain_len`). The frame starts
//!   where the previous one ended (the first at 0), and starts in the view
//!   where the previous one ended there.
//! - a frame whose values do not fit, or that does not start where the
//!   previous one ended (skippable frames between), has an entry with a
//!   compressed length of 0 and its number among such frames in the second
//!   word, and a [`WIDE`]-byte record of four `u64`s: its offset (bit 63:
//!   content size), length (bit 63: checksum), decompressed length, blocks'
//!   bound.
//! - every [`MARK_EVERY`]-th frame's offsets are kept beside (computed,
//!   never stored), so that a frame is found by summing at most that many
//!   entries. 20,001 frames are 240 KiB, not 1.25 MiB of [`IndexedFrame`]s.

use std::fmt;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::classify::{classify, Damage, Failure, WalkEnd};
use super::decode;
use super::frame::{
    walk_frame, ChunkedReader, FrameError, FrameInfo, FrameKind, ReadAt, Step, WALK_CHUNK,
};

/// One complete data frame in the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexedFrame {
    /// The frame as the walker delimited it (compressed offset and length).
    pub info: FrameInfo,
    /// Offset of the frame's first decompressed byte in the view.
    pub plain_offset: u64,
    /// Decompressed length in bytes.
    pub plain_len: u64,
}

/// Bytes of one frame's entry (see the module docs).
pub const ENTRY: usize = 12;
/// Bytes of one wide frame's record (see the module docs).
pub const WIDE: usize = 32;
/// Frames between two kept marks.
const MARK_EVERY: usize = 32;

const CHECKSUM: u32 = 1 << 31;
const SIZED: u32 = 1 << 30;
const LEN_MASK: u32 = SIZED - 1;
const FLAG: u64 = 1 << 63;

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(b)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(b)
}

/// A frame relative to where the previous one ended: what one entry says.
#[derive(Clone, Copy)]
enum Entry {
    Narrow {
        len: u64,
        plain_len: u64,
        slack: u64,
        sized: bool,
        checksum: bool,
    },
    Wide(usize),
}

fn entry(entries: &[u8], i: usize) -> Entry {
    let at = i * ENTRY;
    let w0 = u32_at(entries, at);
    let w1 = u32_at(entries, at + 4);
    if w0 & LEN_MASK == 0 {
        return Entry::Wide(w1 as usize);
    }
    Entry::Narrow {
        len: u64::from(w0 & LEN_MASK),
        plain_len: u64::from(w1),
        slack: u64::from(u32_at(entries, at + 8)),
        sized: w0 & SIZED != 0,
        checksum: w0 & CHECKSUM != 0,
    }
}

/// The frame of a wide record (offsets unchecked).
fn wide_frame(wides: &[u8], k: usize) -> Option<(u64, u64, u64, u64)> {
    let r = wides.get(k * WIDE..(k + 1) * WIDE)?;
    Some((u64_at(r, 0), u64_at(r, 8), u64_at(r, 16), u64_at(r, 24)))
}

/// Where the frame is, given where the previous one ended (compressed
/// end, plain end). `None` for an inconsistent wide reference or an
/// overflow (only for unchecked bytes: a checked table has neither).
fn resolve(wides: &[u8], e: Entry, end: u64, plain_end: u64) -> Option<IndexedFrame> {
    let (offset, len, plain_len, max_plain_len, sized, checksum) = match e {
        Entry::Narrow {
            len,
            plain_len,
            slack,
            sized,
            checksum,
        } => (end, len, plain_len, plain_len + slack, sized, checksum),
        Entry::Wide(k) => {
            let (offset, len, plain_len, max_plain_len) = wide_frame(wides, k)?;
            (
                offset & !FLAG,
                len & !FLAG,
                plain_len,
                max_plain_len,
                offset & FLAG != 0,
                len & FLAG != 0,
            )
        }
    };
    Some(IndexedFrame {
        info: FrameInfo {
            offset,
            len,
            kind: FrameKind::Data {
                content_size: sized.then_some(plain_len),
                checksum,
                max_plain_len,
            },
        },
        plain_offset: plain_end,
        plain_len,
    })
}

/// The frames of the index in their compact form (see the module docs).
#[derive(Debug, Default, Clone)]
struct Table {
    /// [`ENTRY`] bytes a frame.
    entries: Vec<u8>,
    /// [`WIDE`] bytes a wide frame.
    wides: Vec<u8>,
    /// (compressed offset, plain offset) of frame `k * MARK_EVERY`.
    marks: Vec<(u64, u64)>,
    /// Compressed end and plain end of the last frame (0 when none).
    end: u64,
    plain_end: u64,
}

impl Table {
    fn len(&self) -> usize {
        self.entries.len() / ENTRY
    }

    /// Frame `i` (< `len()`): at most [`MARK_EVERY`] entries summed.
    fn frame(&self, i: usize) -> IndexedFrame {
        let mut it = self.iter_range(i, i + 1);
        it.next().expect("a frame of the table")
    }

    /// Frames `from..to` (`to` <= `len()`), from the mark before `from`.
    fn iter_range(&self, from: usize, to: usize) -> FramesIter<'_> {
        if from >= to {
            return FramesIter {
                table: self,
                next: to,
                stop: to,
                end: 0,
                plain_end: 0,
            };
        }
        let g = from / MARK_EVERY;
        // A mark is its frame's own offset: for a narrow entry that is
        // where the previous frame ended; a wide one carries its own.
        let (end, plain_end) = self.marks[g];
        let mut it = FramesIter {
            table: self,
            next: g * MARK_EVERY,
            stop: to,
            end,
            plain_end,
        };
        for _ in g * MARK_EVERY..from {
            it.next();
        }
        it
    }

    /// How many frames, from the first, `pred` holds for (`pred` true on
    /// a prefix): a binary search over the marks, then at most
    /// [`MARK_EVERY`] entries.
    fn count_while(&self, pred: impl Fn(&IndexedFrame) -> bool) -> usize {
        let marked = |k: usize| {
            let (offset, plain_offset) = self.marks[k];
            let f = resolve(
                &self.wides,
                entry(&self.entries, k * MARK_EVERY),
                offset,
                plain_offset,
            )
            .expect("a checked table");
            pred(&f)
        };
        let g = partition_point(self.marks.len(), marked);
        let Some(start) = g.checked_sub(1).map(|g| g * MARK_EVERY) else {
            return 0;
        };
        start
            + self
                .iter_range(start, self.len())
                .take_while(|f| pred(f))
                .count()
    }

    /// Appends one frame; `None` (nothing appended) for a frame that starts
    /// before the last one ends or reaches 2^63 bytes.
    fn push(&mut self, info: &FrameInfo, plain_len: u64) -> Option<()> {
        let FrameKind::Data {
            content_size,
            checksum,
            max_plain_len,
        } = info.kind
        else {
            return Some(());
        };
        let end = info.offset.checked_add(info.len)?;
        let plain_end = self.plain_end.checked_add(plain_len)?;
        if info.offset < self.end || end >= FLAG || info.len == 0 || plain_len > max_plain_len {
            return None;
        }
        if self.len().is_multiple_of(MARK_EVERY) {
            self.marks.push((info.offset, self.plain_end));
        }
        let slack = max_plain_len - plain_len;
        let narrow = info.offset == self.end
            && info.len <= u64::from(LEN_MASK)
            && u32::try_from(plain_len).is_ok()
            && u32::try_from(slack).is_ok();
        let words: [u32; 3] = if narrow {
            let mut w0 = info.len as u32;
            if content_size.is_some() {
                w0 |= SIZED;
            }
            if checksum {
                w0 |= CHECKSUM;
            }
            [w0, plain_len as u32, slack as u32]
        } else {
            let k = u32::try_from(self.wides.len() / WIDE).ok()?;
            let offset = info.offset | if content_size.is_some() { FLAG } else { 0 };
            let len = info.len | if checksum { FLAG } else { 0 };
            for w in [offset, len, plain_len, max_plain_len] {
                self.wides.extend_from_slice(&w.to_le_bytes());
            }
            [0, k, 0]
        };
        for w in words {
            self.entries.extend_from_slice(&w.to_le_bytes());
        }
        self.end = end;
        self.plain_end = plain_end;
        Some(())
    }

    /// Keeps the first `n` frames.
    fn truncate(&mut self, n: usize) {
        if n >= self.len() {
            return;
        }
        let wides_kept = (0..n)
            .filter(|&i| matches!(entry(&self.entries, i), Entry::Wide(_)))
            .count();
        let (end, plain_end) = match n.checked_sub(1) {
            Some(last) => {
                let f = self.frame(last);
                (f.info.offset + f.info.len, f.plain_offset + f.plain_len)
            }
            None => (0, 0),
        };
        self.entries.truncate(n * ENTRY);
        self.wides.truncate(wides_kept * WIDE);
        self.marks.truncate(n.div_ceil(MARK_EVERY));
        self.end = end;
        self.plain_end = plain_end;
    }

    /// A table of `entries` and `wides` read from outside (a persisted
    /// index), checked: whole entries and records, each wide record used
    /// once and in order, frames in file order and not overlapping, each
    /// ending below 2^63 and at or before `walked_to`, none empty, each
    /// decompressed length within its blocks' bound, no sum overflowing.
    /// The marks are computed on the way. `None` when a check fails.
    fn checked(entries: Vec<u8>, wides: Vec<u8>, walked_to: u64) -> Option<Table> {
        if !entries.len().is_multiple_of(ENTRY) || !wides.len().is_multiple_of(WIDE) {
            return None;
        }
        let n = entries.len() / ENTRY;
        let mut marks = Vec::with_capacity(n.div_ceil(MARK_EVERY));
        let (mut end, mut plain_end, mut next_wide) = (0u64, 0u64, 0usize);
        for i in 0..n {
            let e = entry(&entries, i);
            if let Entry::Narrow { len, plain_len, .. } = e {
                // Consistent by its form: it starts where the previous frame
                // ended, is not empty, and its bound is its length plus a
                // slack. Only the sums can fail.
                if i.is_multiple_of(MARK_EVERY) {
                    marks.push((end, plain_end));
                }
                end = end.checked_add(len).filter(|&e| e < FLAG)?;
                plain_end = plain_end.checked_add(plain_len)?;
                continue;
            }
            if let Entry::Wide(k) = e {
                if k != next_wide {
                    return None;
                }
                next_wide += 1;
            }
            let f = resolve(&wides, e, end, plain_end)?;
            let FrameKind::Data { max_plain_len, .. } = f.info.kind else {
                return None;
            };
            let f_end = f.info.offset.checked_add(f.info.len)?;
            if f.info.offset < end
                || f.info.len == 0
                || f_end >= FLAG
                || f.plain_len > max_plain_len
            {
                return None;
            }
            if i.is_multiple_of(MARK_EVERY) {
                marks.push((f.info.offset, plain_end));
            }
            end = f_end;
            plain_end = plain_end.checked_add(f.plain_len)?;
        }
        if next_wide * WIDE != wides.len() || end > walked_to {
            return None;
        }
        Some(Table {
            entries,
            wides,
            marks,
            end,
            plain_end,
        })
    }
}

/// The frames of an index, in file order: a view of its compact table
/// (frames are made from their entries when asked for, by value).
#[derive(Clone, Copy)]
pub struct Frames<'a> {
    table: &'a Table,
    range: (usize, usize),
}

impl<'a> Frames<'a> {
    /// How many frames.
    pub fn len(&self) -> usize {
        self.range.1 - self.range.0
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th frame of this view.
    pub fn get(&self, i: usize) -> Option<IndexedFrame> {
        (i < self.len()).then(|| self.table.frame(self.range.0 + i))
    }

    /// The first frame.
    pub fn first(&self) -> Option<IndexedFrame> {
        self.get(0)
    }

    /// The last frame.
    pub fn last(&self) -> Option<IndexedFrame> {
        self.len().checked_sub(1).and_then(|i| self.get(i))
    }

    /// The frames from the `from`-th on (none when `from` is past the end).
    pub fn from(&self, from: usize) -> Frames<'a> {
        Frames {
            table: self.table,
            range: (
                (self.range.0.saturating_add(from)).min(self.range.1),
                self.range.1,
            ),
        }
    }

    /// The frames, in order (each step one entry).
    pub fn iter(&self) -> FramesIter<'a> {
        self.table.iter_range(self.range.0, self.range.1)
    }
}

/// Iterator of [`Frames::iter`].
pub struct FramesIter<'a> {
    table: &'a Table,
    next: usize,
    stop: usize,
    end: u64,
    plain_end: u64,
}

impl Iterator for FramesIter<'_> {
    type Item = IndexedFrame;

    fn next(&mut self) -> Option<IndexedFrame> {
        if self.next >= self.stop {
            return None;
        }
        let e = entry(&self.table.entries, self.next);
        let f = resolve(&self.table.wides, e, self.end, self.plain_end).expect("a checked table");
        self.next += 1;
        self.end = f.info.offset + f.info.len;
        self.plain_end = f.plain_offset + f.plain_len;
        Some(f)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.stop - self.next;
        (n, Some(n))
    }
}

impl ExactSizeIterator for FramesIter<'_> {}

impl PartialEq for Frames<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for Frames<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// The first `i` in `0..n` for which `pred` is false (`pred` true on a
/// prefix, as [`slice::partition_point`]).
fn partition_point(n: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Frame index of one transcript. Skippable frames are walked over and not
/// indexed; a torn last frame is not indexed until it is complete.
#[derive(Debug, Default, Clone)]
pub struct FrameIndex {
    /// The complete data frames.
    table: Table,
    /// Compressed offset where the next walk starts (end of the last
    /// complete frame, skippable frames included).
    walked_to: u64,
    /// Whether the last walk stopped at a torn frame.
    torn: bool,
    /// The last frame walked (data or skippable), for the classifier.
    last_walked: Option<FrameInfo>,
    /// Set when the walk met damage that is not a torn tail (see
    /// [`super::classify`]), or a frame without a content-size field failed
    /// to decode (its length, and so every later offset, is unknown). The
    /// index then ends at the damage until the file changes length: the
    /// view is the verified prefix plus one byte that no read returns.
    damage: Option<Damage>,
    /// File length when the damage was found: a file that changed length
    /// since is walked again from the damage (a writer's bytes may have
    /// been seen before they were all there), one that did not is not.
    damage_file_len: u64,
}

impl FrameIndex {
    /// An empty index, to be filled by [`FrameIndex::extend`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The indexed frames, in file order.
    pub fn frames(&self) -> Frames<'_> {
        Frames {
            table: &self.table,
            range: (0, self.table.len()),
        }
    }

    /// Byte length of the decompressed view: the complete frames, plus one
    /// byte when the index ends at damage (so that no reader takes the
    /// prefix for the whole transcript; reads there fail).
    pub fn plain_len(&self) -> u64 {
        self.prefix_len() + u64::from(self.damage.is_some())
    }

    /// Byte length of the decompressed complete frames (the verified prefix
    /// when the index ends at damage).
    pub fn prefix_len(&self) -> u64 {
        self.table.plain_end
    }

    /// Compressed offset up to which the file has been walked.
    pub fn walked_to(&self) -> u64 {
        self.walked_to
    }

    /// Whether the file ended inside a frame at the last walk (a torn
    /// tail: nothing verifiable after it).
    pub fn is_torn(&self) -> bool {
        self.torn
    }

    /// Whether the index ends at damage.
    pub fn is_damaged(&self) -> bool {
        self.damage.is_some()
    }

    /// The damage the index ends at, if any.
    pub fn damage(&self) -> Option<&Damage> {
        self.damage.as_ref()
    }

    /// Walks the frames from where the last walk stopped to `file_len`,
    /// adding each complete data frame. A frame without a content-size
    /// field is decoded once, streaming, to learn its length
    /// (`frames_decoded` is incremented for it). Where the walk fails, the
    /// classifier ([`super::classify`]) decides: a torn tail is left out
    /// until it completes; damage ends the index (see
    /// [`FrameIndex::damage`]), including a frame without a content-size
    /// field that fails to decode, and is walked again from there only
    /// when the file's length changed.
    ///
    /// Errors: [`FrameError::Io`] when reading fails (the frames indexed
    /// before stay).
    pub fn extend<R: ReadAt + ?Sized>(
        &mut self,
        src: &R,
        file_len: u64,
        frames_decoded: &mut u64,
    ) -> Result<(), FrameError> {
        self.extend_with(src, file_len, frames_decoded, None)
    }

    /// [`FrameIndex::extend`], with a speculative walk of the second half
    /// of a long unwalked span on another thread (spans of at least
    /// `min_span` bytes): see [`Ahead`]. The frames found are exactly those
    /// of [`FrameIndex::extend`]: the speculation only saves this thread
    /// the walk of frames it has proven to be the same.
    ///
    /// Errors: as [`FrameIndex::extend`].
    pub fn extend_parallel<R: ReadAt + Sync + ?Sized>(
        &mut self,
        src: &R,
        file_len: u64,
        frames_decoded: &mut u64,
        min_span: u64,
    ) -> Result<(), FrameError> {
        let span = file_len.saturating_sub(self.walked_to);
        if span < min_span.max(1) || (self.damage.is_some() && file_len == self.damage_file_len) {
            return self.extend(src, file_len, frames_decoded);
        }
        let ahead = Ahead {
            start: AtomicU64::new(u64::MAX),
            found: parking_lot::Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        };
        let from = self.walked_to + span / 2;
        std::thread::scope(|scope| {
            let spawned = std::thread::Builder::new()
                .name("walk-ahead".into())
                .spawn_scoped(scope, || ahead.walk(src, from, file_len));
            // No thread (a limit reached): the walk alone, as extend().
            let ahead = spawned.is_ok().then_some(&ahead);
            let r = self.extend_with(src, file_len, frames_decoded, ahead);
            if let Some(ahead) = ahead {
                ahead.stop.store(true, Ordering::Relaxed);
            }
            r
        })
    }

    /// Takes the speculative frames that start exactly where this walk
    /// stands, if `ahead` has them: returns whether any were taken.
    fn adopt(&mut self, ahead: &Ahead) -> bool {
        if self.walked_to < ahead.start.load(Ordering::Acquire) {
            return false;
        }
        let found = ahead.found.lock();
        let at = found.partition_point(|(f, _)| f.offset < self.walked_to);
        match found.get(at) {
            Some((f, _)) if f.offset == self.walked_to => {}
            _ => return false,
        }
        #[cfg(test)]
        ADOPTED.with(|n| n.set(n.get() + found.len() - at));
        for (info, plain_len) in &found[at..] {
            if let FrameKind::Data { .. } = info.kind {
                if self.table.push(info, *plain_len).is_none() {
                    // Cannot be (the walk from here gives these frames);
                    // walked by this thread instead, which reports it.
                    return false;
                }
            }
            self.walked_to = info.offset + info.len;
            self.last_walked = Some(*info);
        }
        true
    }

    fn extend_with<R: ReadAt + ?Sized>(
        &mut self,
        src: &R,
        file_len: u64,
        frames_decoded: &mut u64,
        ahead: Option<&Ahead>,
    ) -> Result<(), FrameError> {
        // Dense frame headers are read a chunk at a time, sparse ones one
        // by one, with read-ahead hints either way (see ChunkedReader).
        let src = &ChunkedReader::new(src, WALK_CHUNK);
        if self.damage.is_some() {
            if file_len == self.damage_file_len {
                return Ok(());
            }
            self.damage = None;
            self.last_walked = None;
        }
        self.torn = false;
        loop {
            if let Some(ahead) = ahead {
                if self.adopt(ahead) {
                    continue;
                }
            }
            let failure = match walk_frame(src, self.walked_to, file_len) {
                Ok(Step::End) => return Ok(()),
                Ok(Step::Frame(info)) => {
                    if let FrameKind::Data { content_size, .. } = info.kind {
                        let plain_len = match content_size {
                            Some(size) => size,
                            None => {
                                *frames_decoded += 1;
                                match decode::verify(src, &info) {
                                    Ok(len) => len,
                                    Err(FrameError::Corrupt { reason, .. }) => {
                                        let next = info.offset + info.len;
                                        self.damage = Some(Damage {
                                            at: info.offset,
                                            reason,
                                            resumes_at: (next < file_len).then_some(next),
                                            nothing_verifiable_follows: false,
                                        });
                                        self.damage_file_len = file_len;
                                        return Ok(());
                                    }
                                    Err(e) => return Err(e),
                                }
                            }
                        };
                        if self.table.push(&info, plain_len).is_none() {
                            return Err(FrameError::Corrupt {
                                offset: info.offset,
                                reason: "frame overlaps the one before or ends past 2^63 bytes"
                                    .into(),
                            });
                        }
                    }
                    self.walked_to = info.offset + info.len;
                    self.last_walked = Some(info);
                    continue;
                }
                Ok(Step::Torn) => Failure::Torn,
                Err(FrameError::Io(e)) => return Err(FrameError::Io(e)),
                Err(FrameError::Corrupt { offset, reason }) => {
                    Failure::Corrupt(if offset == self.walked_to {
                        reason
                    } else {
                        format!("{reason} at byte {offset}")
                    })
                }
            };
            let last = self
                .last_walked
                .or_else(|| self.frames().last().map(|f| f.info));
            match classify(src, file_len, last.as_ref(), self.walked_to, failure)? {
                WalkEnd::Clean => {}
                WalkEnd::Torn { .. } => self.torn = true,
                WalkEnd::Damaged(d) => {
                    // Offsets increase: the frames before the damage are a
                    // prefix of the table.
                    let keep = self.table.count_while(|f| f.info.offset < d.at);
                    self.table.truncate(keep);
                    self.walked_to = d.at;
                    self.last_walked = None;
                    self.damage = Some(d);
                    self.damage_file_len = file_len;
                }
            }
            return Ok(());
        }
    }

    /// Serializes the index (complete frames and where the walk stopped)
    /// for [`FrameIndex::from_bytes`]: `walked_to`, the frame count and the
    /// wide-record count as little-endian `u64`s, then the entries and the
    /// wide records (see the module docs). A damaged index is not
    /// serialized.
    pub fn to_bytes(&self) -> Option<Vec<u8>> {
        if self.damage.is_some() {
            return None;
        }
        let t = &self.table;
        let mut out = Vec::with_capacity(24 + t.entries.len() + t.wides.len());
        out.extend_from_slice(&self.walked_to.to_le_bytes());
        out.extend_from_slice(&(t.len() as u64).to_le_bytes());
        out.extend_from_slice(&((t.wides.len() / WIDE) as u64).to_le_bytes());
        out.extend_from_slice(&t.entries);
        out.extend_from_slice(&t.wides);
        Some(out)
    }

    /// Reads an index written by [`FrameIndex::to_bytes`]; `None` when the
    /// bytes are not a consistent index (counts the bytes do not hold,
    /// frames out of order, overlapping, or past `walked_to`).
    pub fn from_bytes(bytes: &[u8]) -> Option<FrameIndex> {
        let head = bytes.get(..24)?;
        let (walked_to, count, wides) = (u64_at(head, 0), u64_at(head, 8), u64_at(head, 16));
        let (entries_len, wides_len) = table_lens(count, wides, bytes.len() as u64 - 24)?;
        let entries = bytes[24..24 + entries_len].to_vec();
        let wides = bytes[24 + entries_len..24 + entries_len + wides_len].to_vec();
        FrameIndex::from_table(walked_to, entries, wides)
    }

    /// An index of the frames in `entries` and `wides` (as the module docs
    /// describe, read from a persisted index), walked to `walked_to`;
    /// `None` when they are not consistent (see
    /// [`FrameIndex::from_bytes`]). Checked in place, not copied.
    pub fn from_table(walked_to: u64, entries: Vec<u8>, wides: Vec<u8>) -> Option<FrameIndex> {
        Some(FrameIndex {
            table: Table::checked(entries, wides, walked_to)?,
            walked_to,
            ..FrameIndex::default()
        })
    }

    /// Indices of the frames that hold bytes `[offset, offset + len)` of the
    /// view (clipped to the view), found by binary search. Empty frames
    /// inside the range are included; they cost nothing to read.
    pub fn frames_for(&self, offset: u64, len: u64) -> Range<usize> {
        let end = offset.saturating_add(len).min(self.prefix_len());
        if offset >= end {
            return 0..0;
        }
        let first = self
            .table
            .count_while(|f| f.plain_offset + f.plain_len <= offset);
        let last = self.table.count_while(|f| f.plain_offset < end);
        first..last
    }
}

/// A speculative walk of the frames after a candidate frame start found
/// by searching for the frame magic (which compressed data can hold too),
/// shared with the authoritative walk from the start of the span. Its
/// frames are used only from a frame offset the authoritative walk itself
/// reached: the walk from a given offset of the same bytes and length is
/// the same whoever makes it, so from there on they are the frames that
/// walk would find. A frame the speculation cannot take as it is (one
/// without a content size, to be decoded; a torn or damaged one) ends it,
/// and the authoritative walk goes on by itself from there.
struct Ahead {
    /// Offset of the first frame found (`u64::MAX` until one is).
    start: AtomicU64,
    /// Frames (data or skippable) in file order, each with its
    /// decompressed length, following one another from `start`.
    found: parking_lot::Mutex<Vec<(FrameInfo, u64)>>,
    /// Set when the authoritative walk no longer needs them.
    stop: AtomicBool,
}

#[cfg(test)]
thread_local! {
    /// Frames this thread's walks took from a speculative walk.
    static ADOPTED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Frames a speculative walk publishes at once.
const AHEAD_BATCH: usize = 256;
/// Candidate starts a speculative walk tries before giving up, and frames
/// one must walk cleanly to be kept.
const AHEAD_TRIES: usize = 64;
const AHEAD_PROOF: usize = 8;
/// Most frames a speculative walk holds for adoption (about 14 MiB of
/// them; the 1 GiB transcript of the benchmark has 10,000 in its second
/// half).
const AHEAD_MAX_FRAMES: usize = 256 * 1024;

impl Ahead {
    fn walk<R: ReadAt + ?Sized>(&self, src: &R, from: u64, file_len: u64) {
        let src = &ChunkedReader::new(src, WALK_CHUNK);
        let mut candidate = from;
        let mut found_so_far = 0usize;
        for _ in 0..AHEAD_TRIES {
            let Some(at) = next_magic(src, candidate, file_len, &self.stop) else {
                return;
            };
            let mut batch = Vec::with_capacity(AHEAD_BATCH);
            let mut pos = at;
            let mut published = false;
            loop {
                if self.stop.load(Ordering::Relaxed) {
                    return;
                }
                let frame = match walk_frame(src, pos, file_len) {
                    Ok(Step::Frame(info)) => match info.kind {
                        FrameKind::Data {
                            content_size: Some(size),
                            ..
                        } => Some((info, size)),
                        FrameKind::Skippable => Some((info, 0)),
                        FrameKind::Data { .. } => None,
                    },
                    _ => None,
                };
                let Some((info, plain_len)) = frame else {
                    break;
                };
                if found_so_far == AHEAD_MAX_FRAMES {
                    // Held for the authoritative walk to adopt: bounded
                    // (a hostile transcript of millions of tiny frames
                    // held 56 bytes of each here); that walk goes on
                    // alone past them.
                    break;
                }
                found_so_far += 1;
                batch.push((info, plain_len));
                pos = info.offset + info.len;
                let proven = published || batch.len() >= AHEAD_PROOF;
                if proven && batch.len() >= AHEAD_BATCH {
                    self.found.lock().append(&mut batch);
                    if !published {
                        self.start.store(at, Ordering::Release);
                        published = true;
                    }
                }
            }
            if published || batch.len() >= AHEAD_PROOF {
                self.found.lock().append(&mut batch);
                self.start.store(at, Ordering::Release);
                return;
            }
            candidate = at + 1;
        }
    }
}

/// The first offset at or after `from` whose four bytes are the zstd
/// frame magic: a candidate only, never a frame boundary by itself. Holes
/// ([`ReadAt::next_data`]) are skipped; `None` when `stop` is set.
fn next_magic<R: ReadAt + ?Sized>(
    src: &R,
    from: u64,
    file_len: u64,
    stop: &AtomicBool,
) -> Option<u64> {
    let magic = super::frame::ZSTD_MAGIC.to_le_bytes();
    let finder = memchr::memmem::Finder::new(&magic);
    let mut buf = vec![0u8; WALK_CHUNK];
    let mut at = from;
    while at.checked_add(4)? <= file_len && !stop.load(Ordering::Relaxed) {
        // Holes (zeros) hold no magic: skipped, not read.
        at = at.max(src.next_data(at));
        if at.checked_add(4)? > file_len {
            return None;
        }
        let want = (file_len - at).min(WALK_CHUNK as u64) as usize;
        let n = src.read_at(&mut buf[..want], at).ok()?;
        if n < 4 {
            return None;
        }
        if let Some(i) = finder.find(&buf[..n]) {
            return Some(at + i as u64);
        }
        at += (n - 3) as u64;
    }
    None
}

/// The byte lengths of `count` entries and `wides` wide records, when they
/// are exactly `available` bytes (what a file's length proves); `None`
/// otherwise, or when there are more wide records than frames.
pub fn table_lens(count: u64, wides: u64, available: u64) -> Option<(usize, usize)> {
    let entries_len = count.checked_mul(ENTRY as u64)?;
    let wides_len = wides.checked_mul(WIDE as u64)?;
    if wides > count || entries_len.checked_add(wides_len)? != available {
        return None;
    }
    Some((
        usize::try_from(entries_len).ok()?,
        usize::try_from(wides_len).ok()?,
    ))
}

/// Reads the compressed bytes of one frame.
///
/// Errors: [`FrameError::Io`], also for a short read (`UnexpectedEof`):
/// the file reads shorter than the frame the index proved complete. That
/// is not damage of the frame: a network client's descriptor can read up
/// to a length it learned earlier than the index did (seen over sshfs with
/// writers on two machines), and a file cut meanwhile is found rewritten
/// by the next refresh. The read fails; nothing is recorded against the
/// frame.
pub fn read_frame<R: ReadAt + ?Sized>(src: &R, info: &FrameInfo) -> Result<Vec<u8>, FrameError> {
    let mut buf = vec![0u8; info.len as usize];
    let mut got = 0;
    while got < buf.len() {
        let n = src
            .read_at(&mut buf[got..], info.offset + got as u64)
            .map_err(FrameError::Io)?;
        if n == 0 {
            return Err(FrameError::Io(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "the file read shorter than the frame at byte {} it held before (read again; \
                     on a network client its length may lag behind the server's)",
                    info.offset
                ),
            )));
        }
        got += n;
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frame::encode_frame;

    fn file_of(batches: &[&[u8]]) -> Vec<u8> {
        batches
            .iter()
            .flat_map(|b| encode_frame(b).unwrap())
            .collect()
    }

    /// A data frame as the walker would give it.
    fn data(offset: u64, len: u64, plain_len: u64, slack: u64, sized: bool) -> FrameInfo {
        FrameInfo {
            offset,
            len,
            kind: FrameKind::Data {
                content_size: sized.then_some(plain_len),
                checksum: offset.is_multiple_of(3),
                max_plain_len: plain_len + slack,
            },
        }
    }

    /// A frame the file no longer holds whole (it reads short: a network
    /// client's stale length) fails the read as I/O, not as a corrupt
    /// frame: nothing is then recorded against the frame (tester 32: an
    /// intact transcript on an sshfs root failed every open with EIO,
    /// "corrupt … file ended inside a frame that was complete before").
    #[test]
    fn a_frame_that_reads_short_is_an_io_error_not_damage() {
        let file = file_of(&[b"{\"a\":1}\n"]);
        let info = data(0, file.len() as u64 + 10, 8, 0, true);
        match read_frame(file.as_slice(), &info) {
            Err(FrameError::Io(e)) => assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof),
            other => panic!("{other:?}"),
        }
        let whole = data(0, file.len() as u64, 8, 0, true);
        assert_eq!(read_frame(file.as_slice(), &whole).unwrap(), file);
    }

    /// Frames of every shape the compact table has: narrow ones, and wide
    /// ones (after a gap, or a length, plain length or slack too large
    /// for an entry), more than a few marks' worth.
    fn synthetic() -> Vec<IndexedFrame> {
        let mut out = Vec::new();
        let (mut at, mut plain) = (0u64, 0u64);
        for i in 0..200u64 {
            let gap = if i % 17 == 5 { 8 + i } else { 0 };
            let (len, plain_len, slack) = match i % 23 {
                3 => (1 << 30, 10, 0),
                7 => (100, 1 << 32, 5),
                11 => (100, 7, 1 << 32),
                13 => (50, 0, 0),
                _ => (9 + i * 13, i * 101, i % 5),
            };
            let info = data(at + gap, len, plain_len, slack, !i.is_multiple_of(4));
            out.push(IndexedFrame {
                info,
                plain_offset: plain,
                plain_len,
            });
            at += gap + len;
            plain += plain_len;
        }
        out
    }

    fn table_of(frames: &[IndexedFrame]) -> FrameIndex {
        let mut idx = FrameIndex::new();
        for f in frames {
            idx.table.push(&f.info, f.plain_len).unwrap();
        }
        idx.walked_to = idx.table.end + 3;
        idx
    }

    /// `frames_for` as a scan of the frames (the binary search's oracle).
    fn frames_for_by_scan(frames: &[IndexedFrame], offset: u64, len: u64) -> Range<usize> {
        let total = frames.last().map_or(0, |f| f.plain_offset + f.plain_len);
        let end = offset.saturating_add(len).min(total);
        if offset >= end {
            return 0..0;
        }
        let first = frames
            .iter()
            .take_while(|f| f.plain_offset + f.plain_len <= offset)
            .count();
        let last = frames.iter().take_while(|f| f.plain_offset < end).count();
        first..last
    }

    #[test]
    fn the_compact_table_gives_back_every_frame_and_round_trips() {
        let frames = synthetic();
        let idx = table_of(&frames);
        assert!(idx.table.wides.len() / WIDE > 10, "wide records exercised");
        assert!(idx.table.entries.len() / ENTRY == frames.len());
        let got: Vec<IndexedFrame> = idx.frames().iter().collect();
        assert_eq!(got, frames);
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(idx.frames().get(i), Some(*f), "frame {i}");
            assert_eq!(idx.frames().from(i).iter().next(), Some(*f), "from {i}");
        }
        assert_eq!(idx.frames().get(frames.len()), None);
        let total = frames.last().map(|f| f.plain_offset + f.plain_len).unwrap();
        assert_eq!(idx.plain_len(), total);
        // frames_for against a scan, at every frame boundary and between.
        let mut probes = vec![0, 1, total - 1, total, total + 1];
        for f in &frames {
            probes.extend([f.plain_offset, f.plain_offset + f.plain_len / 2]);
            probes.push((f.plain_offset + f.plain_len).saturating_sub(1));
        }
        for &at in &probes {
            for len in [0, 1, 100, 1 << 31, u64::MAX] {
                assert_eq!(
                    idx.frames_for(at, len),
                    frames_for_by_scan(&frames, at, len),
                    "frames_for({at}, {len})"
                );
            }
        }
        // Through bytes and back: the same frames, walked_to and length.
        let bytes = idx.to_bytes().unwrap();
        let back = FrameIndex::from_bytes(&bytes).unwrap();
        assert_eq!(back.frames(), idx.frames());
        assert_eq!(back.walked_to(), idx.walked_to());
        assert_eq!(back.plain_len(), total);
        assert_eq!(back.table.marks, idx.table.marks);
        // Truncation (as at damage) keeps a consistent prefix.
        for keep in [0, 1, 31, 32, 33, 150, 199] {
            let mut t = table_of(&frames);
            t.table.truncate(keep);
            let got: Vec<IndexedFrame> = t.frames().iter().collect();
            assert_eq!(got, frames[..keep], "truncated to {keep}");
            let f = frames[keep];
            t.table.push(&f.info, f.plain_len).unwrap();
            assert_eq!(
                t.frames().last(),
                Some(f),
                "pushed after truncating to {keep}"
            );
        }
    }

    #[test]
    fn a_table_that_does_not_hold_together_is_refused() {
        let frames = synthetic();
        let idx = table_of(&frames);
        let bytes = idx.to_bytes().unwrap();
        let set_u64 = |b: &mut Vec<u8>, at: usize, v: u64| {
            b[at..at + 8].copy_from_slice(&v.to_le_bytes());
        };
        // Truncated anywhere, or a byte too many.
        for cut in (0..bytes.len()).step_by(7).chain([bytes.len() - 1]) {
            assert!(FrameIndex::from_bytes(&bytes[..cut]).is_none(), "cut {cut}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(FrameIndex::from_bytes(&longer).is_none());
        // Counts claiming more than the bytes hold (no allocation by them).
        for (at, v) in [
            (8, frames.len() as u64 + 1),
            (8, u64::MAX),
            (16, u64::MAX),
            (16, 0),
        ] {
            let mut b = bytes.clone();
            set_u64(&mut b, at, v);
            assert!(FrameIndex::from_bytes(&b).is_none(), "count at {at} = {v}");
        }
        // Walked to less than the frames reach.
        let mut b = bytes.clone();
        set_u64(&mut b, 0, idx.table.end - 1);
        assert!(FrameIndex::from_bytes(&b).is_none());
        let entries_at = 24;
        let wides_at = 24 + idx.table.entries.len();
        let first_wide = |b: &[u8]| -> usize {
            (0..frames.len())
                .find(|&i| u32_at(b, entries_at + i * ENTRY) & LEN_MASK == 0)
                .unwrap()
        };
        // A wide frame moved before the end of the one before it: out of
        // order, overlapping.
        let mut b = bytes.clone();
        let i = first_wide(&b);
        let prev_end = frames[i - 1].info.offset + frames[i - 1].info.len;
        let flags = u64_at(&b, wides_at) & FLAG;
        set_u64(&mut b, wides_at, (prev_end - 1) | flags);
        assert!(FrameIndex::from_bytes(&b).is_none(), "overlapping frames");
        // A wide record used out of turn, or one left unused.
        let mut b = bytes.clone();
        b[entries_at + i * ENTRY + 4..entries_at + i * ENTRY + 8]
            .copy_from_slice(&1u32.to_le_bytes());
        assert!(
            FrameIndex::from_bytes(&b).is_none(),
            "wide record out of turn"
        );
        // An empty frame, and a plain length past the blocks' bound.
        let mut b = bytes.clone();
        b[entries_at..entries_at + 4].copy_from_slice(&SIZED.to_le_bytes());
        assert!(FrameIndex::from_bytes(&b).is_none(), "empty frame");
        let mut b = bytes.clone();
        set_u64(&mut b, wides_at + 24, 0);
        set_u64(&mut b, wides_at + 16, 1);
        assert!(
            FrameIndex::from_bytes(&b).is_none(),
            "plain length past the bound"
        );
        // A frame reaching 2^63.
        let mut b = bytes.clone();
        set_u64(
            &mut b,
            wides_at + 8,
            (FLAG - 1) | (u64_at(&bytes, wides_at + 8) & FLAG),
        );
        set_u64(&mut b, 0, u64::MAX);
        assert!(FrameIndex::from_bytes(&b).is_none(), "frame past 2^63");
        // The untouched bytes still load.
        assert!(FrameIndex::from_bytes(&bytes).is_some());
    }

    /// Files of small, large, skippable (one holding a chain of valid
    /// frames: a decoy for the magic search), unsized, torn and damaged
    /// frames.
    fn walk_cases() -> Vec<(&'static str, Vec<u8>)> {
        let small = |i: usize| encode_frame(format!("{{\"n\":{i}}}\n").as_bytes()).unwrap();
        let mut clean = Vec::new();
        for i in 0..400 {
            clean.extend(small(i));
            if i == 150 {
                let big: Vec<u8> = (0..300_000u32).map(|x| (x * 7 % 251) as u8).collect();
                let mut big = big;
                big.push(b'\n');
                clean.extend(encode_frame(&big).unwrap());
            }
            if i % 97 == 0 && i < 200 {
                // Unsized: decoded once, by the authoritative walk (the
                // speculation stops at one).
                clean.extend(zstd::stream::encode_all(&b"{\"u\":1}\n"[..], 3).unwrap());
            }
            if i == 250 || i == 260 {
                // A skippable frame holding valid frames.
                let inner: Vec<u8> = (0..40).flat_map(small).collect();
                clean.extend([0x50, 0x2A, 0x4D, 0x18]);
                clean.extend((inner.len() as u32).to_le_bytes());
                clean.extend(inner);
            }
        }
        let mut torn = clean.clone();
        torn.extend(&small(9999)[..10]);
        let mut damaged = clean[..clean.len() * 3 / 4].to_vec();
        let cut = damaged.len();
        damaged.truncate(cut - cut % 7);
        let mut damaged_mid = clean.clone();
        let at = damaged_mid.len() * 3 / 4;
        damaged_mid[at..at + 16].fill(0xEE);
        vec![
            ("clean", clean),
            ("torn tail", torn),
            ("cut anywhere", damaged),
            ("damage in the second half", damaged_mid),
        ]
    }

    /// A source that is slow for one thread (the authoritative walk's), so
    /// that the speculation is well ahead of it. With `until`, that
    /// thread's reads also wait (up to 10 s) until another thread has read
    /// the byte at `until`: the speculation has walked that far whatever
    /// the load on the machine.
    struct SlowFor<'a> {
        data: &'a [u8],
        slow: std::thread::ThreadId,
        until: Option<u64>,
        others_read_to: AtomicU64,
    }

    impl<'a> SlowFor<'a> {
        fn new(data: &'a [u8], until: Option<u64>) -> Self {
            SlowFor {
                data,
                slow: std::thread::current().id(),
                until,
                others_read_to: AtomicU64::new(0),
            }
        }
    }

    impl ReadAt for SlowFor<'_> {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            if std::thread::current().id() == self.slow {
                if let Some(until) = self.until {
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                    while self.others_read_to.load(Ordering::Acquire) <= until
                        && std::time::Instant::now() < deadline
                    {
                        std::thread::sleep(std::time::Duration::from_micros(200));
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            } else {
                let end = offset + buf.len() as u64;
                self.others_read_to.fetch_max(end, Ordering::AcqRel);
            }
            self.data.read_at(buf, offset)
        }
    }

    fn adopted() -> usize {
        ADOPTED.with(|n| n.get())
    }

    #[test]
    fn the_speculative_walk_finds_exactly_the_frames_of_the_plain_walk() {
        for (what, file) in walk_cases() {
            let len = file.len() as u64;
            let (mut plain, mut d1) = (FrameIndex::new(), 0);
            plain.extend(file.as_slice(), len, &mut d1).unwrap();
            for from_start in [true, false] {
                let (mut par, mut d2) = (FrameIndex::new(), 0);
                if !from_start {
                    // Extended from a prefix, as a grown file is.
                    par.extend(&file[..len as usize / 5], len / 5, &mut d2)
                        .unwrap();
                }
                let before = adopted();
                // The clean walk waits for the speculation to read the last
                // frame, so that it has frames to adopt.
                let last = plain.frames().last().map(|f| f.info.offset);
                let src = SlowFor::new(&file, last.filter(|_| what == "clean"));
                par.extend_parallel(&src, len, &mut d2, 0).unwrap();
                if what == "clean" {
                    assert!(adopted() > before + 50, "{what}: too little adopted");
                }
                assert_eq!(par.frames(), plain.frames(), "{what}");
                assert_eq!(par.walked_to(), plain.walked_to(), "{what}");
                assert_eq!(par.is_torn(), plain.is_torn(), "{what}");
                assert_eq!(par.damage(), plain.damage(), "{what}");
                if from_start {
                    assert_eq!(d2, d1, "{what}: frames decoded");
                }
            }
            // The clean walk is also the one-read-per-header walk.
            if what == "clean" {
                let mut at = 0;
                let mut expected = Vec::new();
                while let Ok(Step::Frame(info)) = walk_frame(&file[..], at, len) {
                    if matches!(info.kind, FrameKind::Data { .. }) {
                        expected.push(info);
                    }
                    at += info.len;
                }
                let found: Vec<FrameInfo> = plain.frames().iter().map(|f| f.info).collect();
                assert_eq!(found, expected);
            }
        }
    }

    #[test]
    fn a_decoy_chain_at_the_middle_is_never_adopted() {
        // The middle of the file is inside a skippable frame that holds a
        // long chain of valid frames: the speculation walks them, the
        // authoritative walk never lands on them. (Had the chain ended
        // where the skippable frame does, the frames after it would be
        // adopted: rightly, the walk from there being the same.)
        let small = |i: usize| encode_frame(format!("{{\"n\":{i}}}\n").as_bytes()).unwrap();
        let mut file: Vec<u8> = (0..10).flat_map(small).collect();
        let mut inner: Vec<u8> = (0..2000).flat_map(small).collect();
        inner.extend(b"xyz"); // the decoy chain ends in no frame
        file.extend([0x5F, 0x2A, 0x4D, 0x18]);
        file.extend((inner.len() as u32).to_le_bytes());
        file.extend(inner);
        file.extend((0..10).flat_map(small));
        let len = file.len() as u64;
        let (plain, par) = plain_and_parallel(&file);
        assert_eq!(adopted(), 0, "a decoy frame was adopted");
        assert_eq!(par.frames().len(), 20);
        assert_eq!(par.frames(), plain.frames());
        assert_eq!(par.walked_to(), len);
    }

    /// `file` indexed by the plain walk and by the parallel one (this
    /// thread's reads slowed, so that the speculation runs ahead).
    fn plain_and_parallel(file: &[u8]) -> (FrameIndex, FrameIndex) {
        let len = file.len() as u64;
        let (mut plain, mut d) = (FrameIndex::new(), 0);
        plain.extend(file, len, &mut d).unwrap();
        let mut par = FrameIndex::new();
        let src = SlowFor::new(file, None);
        par.extend_parallel(&src, len, &mut d, 0).unwrap();
        (plain, par)
    }

    /// A speculative walk holds at most AHEAD_MAX_FRAMES frames for
    /// adoption (a fresh tester's 8,000,000 frames of one byte held 56
    /// bytes of each): past them the authoritative walk goes on alone,
    /// and the frames found are those of the plain walk.
    #[test]
    fn a_speculative_walk_holds_a_bounded_number_of_frames() {
        let tiny = encode_frame(b"\n").unwrap();
        let n = 2 * AHEAD_MAX_FRAMES + 3 * AHEAD_BATCH;
        let file: Vec<u8> = std::iter::repeat_n(tiny.as_slice(), n)
            .flatten()
            .copied()
            .collect();
        let len = file.len() as u64;
        let (plain, par) = plain_and_parallel(&file);
        assert!(adopted() <= AHEAD_MAX_FRAMES, "{} adopted", adopted());
        assert_eq!(par.frames().len(), n);
        assert_eq!(par.frames(), plain.frames());
        assert_eq!(par.walked_to(), len);
    }

    #[test]
    fn index_extends_as_the_file_grows() {
        let full = file_of(&[b"h\n", b"a\nb\n", b"", b"ccc\n"]);
        let first_two =
            encode_frame(b"h\n").unwrap().len() + encode_frame(b"a\nb\n").unwrap().len();
        let mut idx = FrameIndex::new();
        let mut decoded = 0;
        idx.extend(&full[..first_two + 5], (first_two + 5) as u64, &mut decoded)
            .unwrap();
        assert_eq!(idx.frames().len(), 2);
        assert!(idx.is_torn());
        assert_eq!(idx.plain_len(), 6);
        idx.extend(&full[..], full.len() as u64, &mut decoded)
            .unwrap();
        assert_eq!(idx.frames().len(), 4);
        assert!(!idx.is_torn());
        assert_eq!(idx.plain_len(), 10);
        assert_eq!(decoded, 0);
        assert_eq!(idx.frames_for(0, 1), 0..1);
        assert_eq!(idx.frames_for(2, 4), 1..2);
        assert_eq!(idx.frames_for(5, 2), 1..4);
        assert_eq!(idx.frames_for(10, 5), 0..0);
    }

    #[test]
    fn damage_is_walked_again_once_the_file_changes_length() {
        let head = encode_frame(b"h\n").unwrap();
        let mut seen = head.clone();
        seen.extend_from_slice(&[0u8; 8]); // a writer's bytes not all there yet
        let mut idx = FrameIndex::new();
        let mut decoded = 0;
        idx.extend(&seen[..], seen.len() as u64, &mut decoded)
            .unwrap();
        let d = idx.damage().expect("zeros are not a frame").clone();
        assert_eq!((d.at, d.resumes_at), (head.len() as u64, None));
        assert_eq!(idx.plain_len(), 3);
        // The same length: nothing is walked again.
        idx.extend(&seen[..], seen.len() as u64, &mut decoded)
            .unwrap();
        assert!(idx.is_damaged());
        let full = file_of(&[b"h\n", b"a\nb\n"]);
        idx.extend(&full[..], full.len() as u64, &mut decoded)
            .unwrap();
        assert!(!idx.is_damaged());
        assert_eq!(idx.plain_len(), 6);
        assert_eq!(idx.frames().len(), 2);
    }

    #[test]
    fn a_walk_of_small_frames_reads_in_chunks_and_finds_the_same_frames() {
        use std::cell::Cell;
        struct Counted<'a>(&'a [u8], Cell<u64>);
        impl ReadAt for Counted<'_> {
            fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
                self.1.set(self.1.get() + 1);
                self.0.read_at(buf, offset)
            }
        }
        let mut file = Vec::new();
        for i in 0..5000 {
            file.extend(encode_frame(format!("{{\"n\":{i}}}\n").as_bytes()).unwrap());
        }
        let src = Counted(&file, Cell::new(0));
        let mut idx = FrameIndex::new();
        let mut decoded = 0;
        idx.extend(&src, file.len() as u64, &mut decoded).unwrap();
        // The frames an independent walk finds, one read per header.
        let mut at = 0;
        let mut expected = Vec::new();
        while let Ok(Step::Frame(info)) = walk_frame(&file[..], at, file.len() as u64) {
            expected.push(info);
            at += info.len;
        }
        let found: Vec<FrameInfo> = idx.frames().iter().map(|f| f.info).collect();
        assert_eq!(found, expected);
        assert_eq!(found.len(), 5000);
        // A chunk per WALK_CHUNK bytes (plus the first reads before the
        // frames are known to be dense), not a read per frame.
        let bound = file.len() as u64 / WALK_CHUNK as u64 + 4;
        assert!(src.1.get() <= bound, "{} reads, bound {bound}", src.1.get());
    }
}
