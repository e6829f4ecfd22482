//! Zstandard frames: a structural walker and a bounded, checksum-verifying
//! decoder of one frame.
//!
//! Source: FORMAT.md, "Transcript encoding", RFC 8878 §3.1, and the
//! reference's `scanZstdFrames`. Frame boundaries come only from walking
//! the structure (magic, frame header, block headers, checksum): the magic
//! number can occur inside compressed data, so it is never searched for.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;

use super::limits::{MAX_WHOLE_FRAME, MAX_WINDOW_LOG};

/// Magic number of a Zstandard data frame (little-endian on disk).
pub const ZSTD_MAGIC: u32 = 0xFD2F_B528;
/// Largest decompressed size of one block (RFC 8878 §3.1.1.2.4).
pub const BLOCK_MAX_PLAIN: u64 = 128 * 1024;

/// Positioned reads, so that the walker runs over files and byte slices.
pub trait ReadAt {
    /// Reads up to `buf.len()` bytes at `offset`; returns how many were read
    /// (0 at the end).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize>;

    /// Tells the source that `len` bytes at `offset` will be read soon (a
    /// file starts reading them into the page cache); nothing by default.
    fn will_need(&self, _offset: u64, _len: u64) {}

    /// Reads up to `buf.len()` bytes at `offset` only if that needs no
    /// waiting for the device (a file: `preadv2` with `RWF_NOWAIT`, served
    /// from the page cache): `Some(bytes read)`, fewer when only a part is
    /// cached or the source ends; `None` when it would wait, or when the
    /// source cannot tell (the default, and file systems without
    /// `RWF_NOWAIT`).
    fn read_at_cached(&self, _buf: &mut [u8], _offset: u64) -> Option<usize> {
        None
    }

    /// The offset at or after `offset` where bytes that may not be zeros
    /// start: the bytes before it are a hole (they read as zeros). A file
    /// asks `lseek(SEEK_DATA)` ([`super::holes::next_data`]); `u64::MAX`
    /// when only holes follow. By default `offset` (every byte is read).
    fn next_data(&self, offset: u64) -> u64 {
        offset
    }
}

impl ReadAt for File {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        FileExt::read_at(self, buf, offset)
    }

    fn will_need(&self, offset: u64, len: u64) {
        use std::os::unix::io::AsRawFd;
        let (Ok(offset), Ok(len)) = (i64::try_from(offset), i64::try_from(len)) else {
            return;
        };
        // SAFETY: a valid descriptor; advice only, its result is ignored.
        unsafe { libc::posix_fadvise(self.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED) };
    }

    fn read_at_cached(&self, buf: &mut [u8], offset: u64) -> Option<usize> {
        use std::os::unix::io::AsRawFd;
        let offset = i64::try_from(offset).ok()?;
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: one iovec over `buf`, valid for writes of its length.
        let n = unsafe { libc::preadv2(self.as_raw_fd(), &iov, 1, offset, libc::RWF_NOWAIT) };
        usize::try_from(n).ok()
    }

    fn next_data(&self, offset: u64) -> u64 {
        super::holes::next_data(self, offset)
    }
}

impl ReadAt for [u8] {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let start = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(self.len());
        let n = buf.len().min(self.len() - start);
        buf[..n].copy_from_slice(&self[start..start + n]);
        Ok(n)
    }
}

/// Bytes a [`ChunkedReader`] reads at once when frames are dense (64 KiB).
pub const WALK_CHUNK: usize = 64 * 1024;

/// Frames closer together than this are read a chunk at a time: below it,
/// one read call costs more than copying the bytes between two headers.
const DENSE_GAP: u64 = 4 * 1024;

/// How far ahead of a walk the source is asked to read (4 MiB): a cold
/// walk streams the file instead of waiting for each header's page.
const READ_AHEAD: u64 = 4 << 20;

/// A [`ReadAt`] for walking frame headers: when consecutive reads are
/// close together (small frames) it reads chunks of [`WALK_CHUNK`] bytes
/// and serves the headers inside from memory, so that one read call covers
/// many frames; when they are far apart (large frames) each header is read
/// on its own, so that the bytes between headers are not copied. Either
/// way the source is asked to read [`READ_AHEAD`] bytes ahead, unless the
/// first read of each such window finds its bytes cached. The buffer
/// is the constant chunk, never sized by a number read from the file.
pub struct ChunkedReader<'a, R: ReadAt + ?Sized> {
    src: &'a R,
    chunk: usize,
    state: RefCell<Chunk>,
}

#[derive(Default)]
struct Chunk {
    data: Vec<u8>,
    start: u64,
    last_miss: Option<u64>,
    hinted_to: u64,
}

impl<'a, R: ReadAt + ?Sized> ChunkedReader<'a, R> {
    /// A reader over `src` with chunks of `chunk` bytes (at least 64).
    pub fn new(src: &'a R, chunk: usize) -> Self {
        ChunkedReader {
            src,
            chunk: chunk.max(64),
            state: RefCell::new(Chunk::default()),
        }
    }
}

impl<R: ReadAt + ?Sized> ReadAt for ChunkedReader<'_, R> {
    fn read_at(&self, out: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut st = self.state.borrow_mut();
        let end = offset.saturating_add(out.len() as u64);
        if offset >= st.start && end <= st.start + st.data.len() as u64 {
            let at = (offset - st.start) as usize;
            out.copy_from_slice(&st.data[at..at + out.len()]);
            return Ok(out.len());
        }
        if end > st.hinted_to {
            st.hinted_to = offset.saturating_add(READ_AHEAD);
            // A window whose first bytes are cached (a warm walk) is not
            // hinted: a hint walks the page cache over the whole window,
            // about 3 ms of a warm 20 ms walk of 229 MiB.
            match self.src.read_at_cached(out, offset) {
                Some(n) if n == out.len() => {
                    st.last_miss = Some(offset);
                    return Ok(n);
                }
                _ => self.src.will_need(offset, READ_AHEAD),
            }
        }
        let dense = st
            .last_miss
            .is_some_and(|prev| offset > prev && offset - prev < DENSE_GAP);
        st.last_miss = Some(offset);
        if !dense || out.len() >= self.chunk {
            return self.src.read_at(out, offset);
        }
        let mut data = std::mem::take(&mut st.data);
        data.resize(self.chunk, 0);
        let mut got = 0;
        while got < data.len() {
            match self.src.read_at(&mut data[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        data.truncate(got);
        let n = out.len().min(got);
        out[..n].copy_from_slice(&data[..n]);
        st.data = data;
        st.start = offset;
        Ok(n)
    }

    fn next_data(&self, offset: u64) -> u64 {
        self.src.next_data(offset)
    }
}

/// What kind of frame the walker found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// A Zstandard data frame.
    Data {
        /// The decompressed size the frame header claims, if it has the field.
        content_size: Option<u64>,
        /// Whether the frame carries a content checksum.
        checksum: bool,
        /// Upper bound of the decompressed size, from the block headers
        /// (bytes): raw and RLE blocks count their size, compressed blocks
        /// [`BLOCK_MAX_PLAIN`]. Never taken from a claim.
        max_plain_len: u64,
    },
    /// A skippable frame (magic 0x184D2A5?): skipped when reading.
    Skippable,
}

/// One complete frame: where it is in the compressed file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameInfo {
    /// Byte offset of the frame's first byte in the file.
    pub offset: u64,
    /// Compressed length in bytes, header to checksum.
    pub len: u64,
    /// Data or skippable.
    pub kind: FrameKind,
}

/// Result of one walker step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A complete frame starts at the offset.
    Frame(FrameInfo),
    /// The file ends inside the frame that starts at the offset: a torn tail.
    Torn,
    /// The offset is the end of the file.
    End,
}

/// Why a walk or a decode failed.
#[derive(Debug)]
pub enum FrameError {
    /// Reading the file failed.
    Io(io::Error),
    /// Structural corruption at `offset` (bad magic, reserved bit, reserved
    /// block type, impossible content size) or a failed decode.
    Corrupt { offset: u64, reason: String },
}

/// A small read-ahead window over a [`ReadAt`], so that walking a frame of
/// one block costs one read call.
struct Window<'a, R: ReadAt + ?Sized> {
    src: &'a R,
    file_len: u64,
    buf: [u8; 64],
    start: u64,
    len: usize,
}

impl<'a, R: ReadAt + ?Sized> Window<'a, R> {
    fn new(src: &'a R, file_len: u64) -> Self {
        Window {
            src,
            file_len,
            buf: [0; 64],
            start: 0,
            len: 0,
        }
    }

    /// `n` bytes (n <= 64) at `pos`, or `None` when the file ends first.
    fn bytes(&mut self, pos: u64, n: usize) -> Result<Option<&[u8]>, FrameError> {
        if pos.saturating_add(n as u64) > self.file_len {
            return Ok(None);
        }
        let covered = pos >= self.start && pos + n as u64 <= self.start + self.len as u64;
        if !covered {
            let want = (self.file_len - pos).min(self.buf.len() as u64) as usize;
            let mut got = 0;
            while got < want {
                let r = self
                    .src
                    .read_at(&mut self.buf[got..want], pos + got as u64)
                    .map_err(FrameError::Io)?;
                if r == 0 {
                    break;
                }
                got += r;
            }
            self.start = pos;
            self.len = got;
            if got < n {
                return Ok(None);
            }
        }
        let at = (pos - self.start) as usize;
        Ok(Some(&self.buf[at..at + n]))
    }
}

fn le(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .rev()
        .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

/// Walks the frame that starts at `offset` of a file of `file_len` bytes.
///
/// Returns [`Step::End`] at the end of the file, [`Step::Torn`] when the
/// file ends inside the frame (including fewer than 4 bytes of magic, as the
/// reference treats them), or the complete frame.
///
/// Errors: [`FrameError::Corrupt`] for an invalid magic number, a reserved
/// frame-header bit (mask 0x18, as the reference checks), a reserved block
/// type, or a content size larger than the blocks can hold;
/// [`FrameError::Io`] when reading fails.
pub fn walk_frame<R: ReadAt + ?Sized>(
    src: &R,
    offset: u64,
    file_len: u64,
) -> Result<Step, FrameError> {
    if offset >= file_len {
        return Ok(Step::End);
    }
    let corrupt = |at: u64, reason: String| FrameError::Corrupt { offset: at, reason };
    let mut w = Window::new(src, file_len);
    let Some(magic) = w.bytes(offset, 4)? else {
        return Ok(Step::Torn);
    };
    let magic = le(magic) as u32;
    if magic & 0xFFFF_FFF0 == 0x184D_2A50 {
        let Some(size) = w.bytes(offset + 4, 4)? else {
            return Ok(Step::Torn);
        };
        let len = 8 + le(size);
        if offset + len > file_len {
            return Ok(Step::Torn);
        }
        return Ok(Step::Frame(FrameInfo {
            offset,
            len,
            kind: FrameKind::Skippable,
        }));
    }
    if magic != ZSTD_MAGIC {
        return Err(corrupt(offset, "invalid frame magic".into()));
    }
    let mut pos = offset + 4;
    let Some(descriptor) = w.bytes(pos, 1)? else {
        return Ok(Step::Torn);
    };
    let descriptor = descriptor[0];
    if descriptor & 0x18 != 0 {
        return Err(corrupt(pos, "reserved frame-header bit set".into()));
    }
    pos += 1;
    let fcs_flag = descriptor >> 6;
    let single_segment = descriptor & 0x20 != 0;
    let checksum = descriptor & 0x04 != 0;
    let dict_bytes = match descriptor & 3 {
        3 => 4,
        n => u64::from(n),
    };
    let fcs_bytes: usize = match (fcs_flag, single_segment) {
        (0, false) => 0,
        (0, true) => 1,
        (f, _) => 1 << f,
    };
    let window_bytes = if single_segment { 0 } else { 1 };
    pos += window_bytes + dict_bytes;
    let content_size = if fcs_bytes == 0 {
        None
    } else {
        let Some(field) = w.bytes(pos, fcs_bytes)? else {
            return Ok(Step::Torn);
        };
        let raw = le(field);
        // The 2-byte field stores the size minus 256 (RFC 8878 §3.1.1.1.4).
        Some(if fcs_bytes == 2 { raw + 256 } else { raw })
    };
    pos += fcs_bytes as u64;
    let mut max_plain_len: u64 = 0;
    loop {
        let Some(block) = w.bytes(pos, 3)? else {
            return Ok(Step::Torn);
        };
        let header = le(block);
        let last = header & 1 != 0;
        let block_type = (header >> 1) & 3;
        let block_size = header >> 3;
        if block_size > BLOCK_MAX_PLAIN {
            return Err(corrupt(
                pos,
                format!("block of {block_size} bytes, more than a block may hold (128 KiB)"),
            ));
        }
        let payload = match block_type {
            0 => {
                max_plain_len += block_size;
                block_size
            }
            1 => {
                max_plain_len += block_size;
                1
            }
            2 => {
                max_plain_len += BLOCK_MAX_PLAIN;
                block_size
            }
            _ => return Err(corrupt(pos, "reserved block type".into())),
        };
        pos += 3 + payload;
        if pos > file_len {
            return Ok(Step::Torn);
        }
        if last {
            break;
        }
    }
    if checksum {
        pos += 4;
        if pos > file_len {
            return Ok(Step::Torn);
        }
    }
    if let Some(claim) = content_size {
        if claim > max_plain_len {
            return Err(corrupt(
                offset,
                format!(
                    "frame header claims {claim} bytes but its blocks hold at most {max_plain_len}"
                ),
            ));
        }
    }
    Ok(Step::Frame(FrameInfo {
        offset,
        len: pos - offset,
        kind: FrameKind::Data {
            content_size,
            checksum,
            max_plain_len,
        },
    }))
}

/// The window size (bytes) the frame whose first bytes are `bytes` needs:
/// its window descriptor, or its content size for a single-segment frame
/// (RFC 8878 §3.1.1.1.2). `None` when `bytes` is too short to tell.
pub fn window_size(bytes: &[u8]) -> Option<u64> {
    let descriptor = *bytes.get(4)?;
    if descriptor & 0x20 == 0 {
        let w = *bytes.get(5)?;
        let log = 10 + u64::from(w >> 3);
        let base = 1u64 << log;
        return Some(base + (base / 8) * u64::from(w & 7));
    }
    let dict_bytes = match descriptor & 3 {
        3 => 4,
        n => usize::from(n),
    };
    let fcs_bytes = match descriptor >> 6 {
        0 => 1,
        f => 1 << f,
    };
    let at = 5 + dict_bytes;
    let raw = le(bytes.get(at..at + fcs_bytes)?);
    Some(if fcs_bytes == 2 { raw + 256 } else { raw })
}

/// Decodes one complete data frame (`bytes` is exactly the frame, as
/// [`walk_frame`] delimited it), verifying its checksum when it has one.
///
/// Allocation is bounded by [`MAX_WHOLE_FRAME`] and by the frame's own
/// blocks (`max_plain_len`), never by the header's claim; a decoded length
/// that differs from the claimed content size is corruption. Larger frames
/// are read through [`super::decode`] instead.
///
/// Errors: [`FrameError::Corrupt`] (offset = `info.offset`) when decoding
/// fails, the checksum does not match, the length is wrong, the frame
/// needs a window larger than 2^[`MAX_WINDOW_LOG`] bytes, or it holds more
/// than [`MAX_WHOLE_FRAME`] bytes.
pub fn decode_frame(bytes: &[u8], info: &FrameInfo) -> Result<Vec<u8>, FrameError> {
    let FrameKind::Data {
        content_size,
        max_plain_len,
        ..
    } = info.kind
    else {
        return Ok(Vec::new());
    };
    let corrupt = |reason: String| FrameError::Corrupt {
        offset: info.offset,
        reason,
    };
    if window_size(bytes).is_some_and(|w| w > 1 << MAX_WINDOW_LOG) {
        return Err(corrupt(format!(
            "frame needs a window larger than {} MiB, more than sessionfs decodes",
            (1u64 << MAX_WINDOW_LOG) >> 20
        )));
    }
    let bound = max_plain_len.min(MAX_WHOLE_FRAME);
    let plain = match content_size {
        Some(size) if size > MAX_WHOLE_FRAME => {
            return Err(corrupt(format!(
                "frame of {size} bytes is too large to decode whole"
            )))
        }
        Some(size) => decode_sized(bytes, size)
            .map_err(|e| corrupt(format!("frame failed validation: {e}")))?,
        None => {
            let mut out = Vec::new();
            let mut decoder = zstd::stream::read::Decoder::with_buffer(bytes)
                .map_err(|e| corrupt(e.to_string()))?
                .single_frame();
            decoder
                .set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(MAX_WINDOW_LOG))
                .map_err(|e| corrupt(e.to_string()))?;
            decoder
                .take(bound + 1)
                .read_to_end(&mut out)
                .map_err(|e| corrupt(format!("frame failed validation: {e}")))?;
            out
        }
    };
    if plain.len() as u64 > bound {
        return Err(corrupt(if bound < max_plain_len {
            "frame is too large to decode whole".into()
        } else {
            "frame decodes to more than its blocks can hold".into()
        }));
    }
    if let Some(size) = content_size {
        if plain.len() as u64 != size {
            return Err(corrupt(format!(
                "frame decodes to {} bytes, its header claims {size}",
                plain.len()
            )));
        }
    }
    Ok(plain)
}

/// Compressed bytes of one frame, read from the file as a decoder needs
/// them.
struct FrameSource {
    file: std::sync::Arc<File>,
    at: u64,
    end: u64,
}

impl Read for FrameSource {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf.len().min((self.end - self.at) as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = FileExt::read_at(&*self.file, &mut buf[..want], self.at)?;
        self.at += n as u64;
        Ok(n)
    }
}

/// A decoder positioned inside one large frame, so that a sequential
/// reader of the frame decodes it once, in bounded memory (the decoder's
/// window and a buffer), however large the frame is.
pub struct FrameCursor {
    key: (u64, usize),
    offset: u64,
    pos: u64,
    /// The frame's decompressed length as indexed.
    plain_len: u64,
    decoder: zstd::stream::read::Decoder<'static, io::BufReader<FrameSource>>,
}

impl FrameCursor {
    /// A cursor at the start of the frame `info` of `file`, indexed as
    /// `plain_len` decompressed bytes; `key` names the frame for the
    /// caller (transcript generation, frame number).
    ///
    /// Errors: [`FrameError::Corrupt`] when no decoder can be made.
    pub fn open(
        file: std::sync::Arc<File>,
        info: &FrameInfo,
        plain_len: u64,
        key: (u64, usize),
    ) -> Result<FrameCursor, FrameError> {
        let source = FrameSource {
            file,
            at: info.offset,
            end: info.offset + info.len,
        };
        let decoder = zstd::stream::read::Decoder::new(source)
            .map_err(|e| FrameError::Corrupt {
                offset: info.offset,
                reason: e.to_string(),
            })?
            .single_frame();
        let mut decoder = decoder;
        decoder
            .set_parameter(zstd::zstd_safe::DParameter::WindowLogMax(MAX_WINDOW_LOG))
            .map_err(|e| FrameError::Corrupt {
                offset: info.offset,
                reason: e.to_string(),
            })?;
        Ok(FrameCursor {
            key,
            offset: info.offset,
            pos: 0,
            plain_len,
            decoder,
        })
    }

    /// The frame this cursor reads.
    pub fn key(&self) -> (u64, usize) {
        self.key
    }

    /// Decompressed bytes consumed so far.
    pub fn pos(&self) -> u64 {
        self.pos
    }

    /// Bytes `[from, to)` of the frame's content; `from` must not be before
    /// [`FrameCursor::pos`].
    ///
    /// A read that reaches the frame's indexed end also checks the frame
    /// as a whole, as a frame decoded whole is checked: it ends there (its
    /// checksum verified) and ends a line (FORMAT.md: a complete frame
    /// ending inside a line is corruption).
    ///
    /// Errors: [`FrameError::Corrupt`] when decoding fails, the frame ends
    /// early or late or inside a line, or `from` is behind the cursor.
    pub fn read_range(&mut self, from: u64, to: u64) -> Result<Vec<u8>, FrameError> {
        let offset = self.offset;
        let corrupt = |reason: String| FrameError::Corrupt { offset, reason };
        if from < self.pos {
            return Err(corrupt("frame cursor is past the wanted bytes".into()));
        }
        let skipped = std::io::copy(
            &mut (&mut self.decoder).take(from - self.pos),
            &mut std::io::sink(),
        )
        .map_err(|e| corrupt(format!("frame failed validation: {e}")))?;
        self.pos += skipped;
        let mut out = Vec::with_capacity((to - from) as usize);
        (&mut self.decoder)
            .take(to - from)
            .read_to_end(&mut out)
            .map_err(|e| corrupt(format!("frame failed validation: {e}")))?;
        self.pos += out.len() as u64;
        if self.pos < to {
            return Err(corrupt("frame decodes to fewer bytes than indexed".into()));
        }
        if to >= self.plain_len {
            let mut more = [0u8; 1];
            let n = std::io::Read::read(&mut self.decoder, &mut more)
                .map_err(|e| corrupt(format!("frame failed validation: {e}")))?;
            if n > 0 {
                return Err(corrupt("frame decodes to more bytes than indexed".into()));
            }
            if out.last().is_some_and(|&b| b != b'\n') {
                return Err(corrupt("complete frame ends inside a line".into()));
            }
        }
        Ok(out)
    }
}

/// Decodes a frame whose content size is known (and already bounded by
/// its blocks) with a pooled context (see [`super::decode::with_context`]).
fn decode_sized(bytes: &[u8], size: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(size as usize);
    super::decode::with_context(|ctx| {
        ctx.decompress(&mut out, bytes)
            .map(|_| ())
            .map_err(|code| io::Error::other(zstd::zstd_safe::get_error_name(code)))
    })??;
    Ok(out)
}

/// Encodes `plain` as one checksummed frame with its content size, at
/// zstd level 3 (the reference's default), as FORMAT.md's writers do.
///
/// Errors: the compressor's I/O error (out of memory).
pub fn encode_frame(plain: &[u8]) -> io::Result<Vec<u8>> {
    let mut c = zstd::bulk::Compressor::new(3)?;
    c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))?;
    c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(true))?;
    c.compress(plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk_all(bytes: &[u8]) -> (Vec<FrameInfo>, bool) {
        let mut frames = Vec::new();
        let mut off = 0;
        loop {
            match walk_frame(bytes, off, bytes.len() as u64).unwrap() {
                Step::Frame(f) => {
                    off += f.len;
                    frames.push(f);
                }
                Step::Torn => return (frames, true),
                Step::End => return (frames, false),
            }
        }
    }

    /// Bytes that say whether they are cached, and record the hints.
    struct Pages {
        bytes: Vec<u8>,
        cached: bool,
        hints: std::cell::RefCell<Vec<u64>>,
    }

    impl ReadAt for Pages {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            self.bytes.read_at(buf, offset)
        }
        fn will_need(&self, offset: u64, _len: u64) {
            self.hints.borrow_mut().push(offset);
        }
        fn read_at_cached(&self, buf: &mut [u8], offset: u64) -> Option<usize> {
            self.cached
                .then(|| self.bytes.read_at(buf, offset).unwrap())
        }
    }

    #[test]
    fn a_walk_hints_read_ahead_only_where_the_bytes_are_not_cached() {
        let bytes: Vec<u8> = (0..READ_AHEAD as usize * 3)
            .map(|i| (i % 251) as u8)
            .collect();
        for cached in [false, true] {
            let src = Pages {
                bytes: bytes.clone(),
                cached,
                hints: Default::default(),
            };
            let reader = ChunkedReader::new(&src, WALK_CHUNK);
            let mut buf = [0u8; 64];
            for offset in [0, 100, READ_AHEAD + 5, 2 * READ_AHEAD + 7] {
                assert_eq!(reader.read_at(&mut buf, offset).unwrap(), 64, "at {offset}");
                assert_eq!(buf[..], bytes[offset as usize..offset as usize + 64]);
            }
            let hints = src.hints.borrow().clone();
            if cached {
                assert_eq!(hints, Vec::<u64>::new());
            } else {
                assert_eq!(hints, [0, READ_AHEAD + 5, 2 * READ_AHEAD + 7]);
            }
        }
    }

    #[test]
    fn walks_and_decodes_checksummed_frames() {
        let a = encode_frame(b"{\"a\":1}\n").unwrap();
        let b = encode_frame(&vec![b'x'; 300_000]).unwrap();
        let mut file = a.clone();
        file.extend_from_slice(&b);
        let (frames, torn) = walk_all(&file);
        assert!(!torn);
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1].len as usize, b.len());
        let start = frames[1].offset as usize;
        let plain = decode_frame(&file[start..start + b.len()], &frames[1]).unwrap();
        assert_eq!(plain, vec![b'x'; 300_000]);
    }

    #[test]
    fn every_cut_is_torn_never_an_error() {
        let a = encode_frame(b"{\"a\":1}\n").unwrap();
        let b = encode_frame(
            &(0..200_000u32)
                .map(|i| (i * 7 % 251) as u8)
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let mut file = a.clone();
        file.extend_from_slice(&b);
        for cut in a.len() + 1..file.len() {
            let (frames, torn) = walk_all(&file[..cut]);
            assert_eq!(frames.len(), 1, "cut {cut}");
            assert!(torn, "cut {cut}");
        }
    }

    #[test]
    fn skippable_frames_are_delimited() {
        let mut file = vec![0x50, 0x2A, 0x4D, 0x18, 3, 0, 0, 0, 1, 2, 3];
        file.extend(encode_frame(b"x\n").unwrap());
        let (frames, torn) = walk_all(&file);
        assert!(!torn);
        assert_eq!(frames[0].kind, FrameKind::Skippable);
        assert!(matches!(frames[1].kind, FrameKind::Data { .. }));
    }

    #[test]
    fn bad_magic_is_corruption() {
        let mut file = encode_frame(b"x\n").unwrap();
        let at = file.len() as u64;
        file.extend_from_slice(b"garbage!");
        let r = walk_frame(&file[..], at, file.len() as u64);
        assert!(matches!(r, Err(FrameError::Corrupt { offset, .. }) if offset == at));
    }

    #[test]
    fn a_huge_claim_is_refused_without_allocating() {
        // Single segment, 8-byte content size claiming 16 GiB, one raw block of 1 byte.
        let mut file = vec![0x28, 0xB5, 0x2F, 0xFD, 0xE0];
        file.extend_from_slice(&(16u64 << 30).to_le_bytes());
        file.extend_from_slice(&[0x09, 0x00, 0x00, b'x']);
        let r = walk_frame(&file[..], 0, file.len() as u64);
        assert!(matches!(r, Err(FrameError::Corrupt { .. })));
    }
}
