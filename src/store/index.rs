//! The frame index of one zstd transcript: for each complete data frame,
//! where it is in the compressed file and in the decompressed view.
//!
//! Source: MOUNT.md, "Reading": any offset is read at the cost of the
//! frames it touches; the index is built from frame headers and extended,
//! not rebuilt, when the file grows.

use std::ops::Range;

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

/// Frame index of one transcript. Skippable frames are walked over and not
/// indexed; a torn last frame is not indexed until it is complete.
#[derive(Debug, Default, Clone)]
pub struct FrameIndex {
    frames: Vec<IndexedFrame>,
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
    pub fn frames(&self) -> &[IndexedFrame] {
        &self.frames
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
        self.frames
            .last()
            .map_or(0, |f| f.plain_offset + f.plain_len)
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
                        let plain_offset = self.prefix_len();
                        self.frames.push(IndexedFrame {
                            info,
                            plain_offset,
                            plain_len,
                        });
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
                .or_else(|| self.frames.last().map(|f| f.info));
            match classify(src, file_len, last.as_ref(), self.walked_to, failure)? {
                WalkEnd::Clean => {}
                WalkEnd::Torn { .. } => self.torn = true,
                WalkEnd::Damaged(d) => {
                    self.frames.retain(|f| f.info.offset < d.at);
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
    /// for [`FrameIndex::from_bytes`]: a little-endian table of 33 bytes a
    /// frame after a 16-byte preamble. A damaged index is not serialized.
    pub fn to_bytes(&self) -> Option<Vec<u8>> {
        if self.damage.is_some() {
            return None;
        }
        let mut out = Vec::with_capacity(16 + self.frames.len() * 33);
        out.extend_from_slice(&self.walked_to.to_le_bytes());
        out.extend_from_slice(&(self.frames.len() as u64).to_le_bytes());
        for f in &self.frames {
            let FrameKind::Data {
                content_size,
                checksum,
                max_plain_len,
            } = f.info.kind
            else {
                continue;
            };
            out.extend_from_slice(&f.info.offset.to_le_bytes());
            out.extend_from_slice(&f.info.len.to_le_bytes());
            out.extend_from_slice(&f.plain_len.to_le_bytes());
            out.extend_from_slice(&max_plain_len.to_le_bytes());
            out.push(u8::from(content_size.is_some()) | (u8::from(checksum) << 1));
        }
        Some(out)
    }

    /// Reads an index written by [`FrameIndex::to_bytes`]; `None` when the
    /// bytes are not a consistent index (frames out of order, overlapping,
    /// or past `walked_to`).
    pub fn from_bytes(bytes: &[u8]) -> Option<FrameIndex> {
        let u64_at = |at: usize| -> Option<u64> {
            Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
        };
        let walked_to = u64_at(0)?;
        let count = usize::try_from(u64_at(8)?).ok()?;
        if bytes.len() != 16usize.checked_add(count.checked_mul(33)?)? {
            return None;
        }
        let mut index = FrameIndex {
            walked_to,
            ..FrameIndex::default()
        };
        // `count` is proven by the length of the bytes read (above), so
        // the reservation is bounded by what is in memory already.
        index.frames.reserve_exact(count);
        let mut compressed_end = 0;
        for i in 0..count {
            let at = 16 + i * 33;
            let (offset, len, plain_len, max_plain_len) = (
                u64_at(at)?,
                u64_at(at + 8)?,
                u64_at(at + 16)?,
                u64_at(at + 24)?,
            );
            let flags = bytes[at + 32];
            if offset < compressed_end || len == 0 || plain_len > max_plain_len {
                return None;
            }
            compressed_end = offset.checked_add(len)?;
            let plain_offset = index.prefix_len();
            index.frames.push(IndexedFrame {
                info: FrameInfo {
                    offset,
                    len,
                    kind: FrameKind::Data {
                        content_size: (flags & 1 != 0).then_some(plain_len),
                        checksum: flags & 2 != 0,
                        max_plain_len,
                    },
                },
                plain_offset,
                plain_len,
            });
        }
        (compressed_end <= walked_to).then_some(index)
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
            .frames
            .partition_point(|f| f.plain_offset + f.plain_len <= offset);
        let last = self.frames.partition_point(|f| f.plain_offset < end);
        first..last
    }
}

/// Reads the compressed bytes of one frame.
///
/// Errors: [`FrameError::Io`]; a short read is reported as
/// [`FrameError::Corrupt`] (the file shrank under us).
pub fn read_frame<R: ReadAt + ?Sized>(src: &R, info: &FrameInfo) -> Result<Vec<u8>, FrameError> {
    let mut buf = vec![0u8; info.len as usize];
    let mut got = 0;
    while got < buf.len() {
        let n = src
            .read_at(&mut buf[got..], info.offset + got as u64)
            .map_err(FrameError::Io)?;
        if n == 0 {
            return Err(FrameError::Corrupt {
                offset: info.offset,
                reason: "file ended inside a frame that was complete before".into(),
            });
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
