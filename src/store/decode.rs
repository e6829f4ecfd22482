//! Bounded streaming decoding of one zstd frame, read where it lies in a
//! file: the memory a frame can cost is the decoder's window (at most
//! 2^[`MAX_WINDOW_LOG`] bytes) and fixed buffers, whatever its header
//! claims or its blocks hold.
//!
//! Source: FORMAT.md ("Transcript encoding": content size and window size
//! are claims; checksums are verified), RFC 8878 §3.1.1.

use std::io::{self, Read};
use std::sync::Mutex;

use zstd::zstd_safe::{DCtx, DParameter, InBuffer, OutBuffer, ResetDirective};

use super::frame::{FrameError, FrameInfo, FrameKind, ReadAt};
use super::limits::{MAX_LINE_BYTES, MAX_WINDOW_LOG};

/// Chunk size of the loops below (bytes).
const CHUNK: usize = 64 * 1024;

/// An I/O error of the underlying file, kept apart from decoding errors
/// (which zstd also reports as `io::Error`).
#[derive(Debug)]
struct ReadFailed(io::Error);

impl std::fmt::Display for ReadFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for ReadFailed {}

/// The compressed bytes `[at, end)` of a [`ReadAt`], as a `Read`.
struct Span<'a, R: ReadAt + ?Sized> {
    src: &'a R,
    at: u64,
    end: u64,
}

impl<R: ReadAt + ?Sized> Read for Span<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf.len().min((self.end - self.at) as usize);
        if want == 0 {
            return Ok(0);
        }
        let n = self
            .src
            .read_at(&mut buf[..want], self.at)
            .map_err(|e| io::Error::new(e.kind(), ReadFailed(e)))?;
        self.at += n as u64;
        Ok(n)
    }
}

/// The decompressed content of one complete data frame, as a `Read`.
/// The checksum (if the frame has one) is verified when the end is read:
/// only a reader that reached `Ok(0)` has verified bytes. Reading more than
/// the frame's blocks can hold is an error.
///
/// The zstd decompression context comes from a small pool and goes back
/// to it when the reader is dropped: making one costs more than decoding
/// a small frame (measured: 39% of a `doctor` run over 10,000 sessions).
pub struct FrameReader<'a, R: ReadAt + ?Sized> {
    ctx: Option<DCtx<'static>>,
    src: Span<'a, R>,
    /// Compressed bytes read from `src`; `input[in_pos..in_len]` is not
    /// consumed yet.
    input: Box<[u8]>,
    in_pos: usize,
    in_len: usize,
    src_done: bool,
    frame_done: bool,
    produced: u64,
    limit: u64,
    offset: u64,
}

/// Decompression contexts kept for reuse: at most [`POOL_SIZE`], each at
/// most [`POOL_CTX_BYTES`] (a context keeps the window buffer of the
/// largest frame it decoded).
static POOL: Mutex<Vec<DCtx<'static>>> = Mutex::new(Vec::new());
const POOL_SIZE: usize = 8;
const POOL_CTX_BYTES: usize = 4 << 20;

/// A decompression context from the pool, or a new one.
/// Pays a fresh process's one-time costs of reading a transcript before
/// the first request rather than in it (a mount calls it as it starts):
/// the CPU feature detection of the first `memchr` (CPUID instructions,
/// slow under a hypervisor: `perf` found it in the request thread of the
/// first read of a fresh mount) and pooled decompression contexts (each
/// made runs CPUID again), which the first header decode and the first
/// read then take.
pub fn warm_up() {
    let _ = std::hint::black_box(memchr::memchr(b'\n', std::hint::black_box(b"warm\n")));
    // Two: the header decode of a lookup and a read's decode at once.
    let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
    while pool.len() < 2 {
        match DCtx::try_create() {
            Some(ctx) => pool.push(ctx),
            None => break,
        }
    }
}

/// Runs `f` with a decompression context from the pool (made when the
/// pool is empty), then gives the context back: the one-shot decodes of
/// whole frames share the pool with the streaming readers, so a request
/// thread's first decode does not make a context of its own.
///
/// Errors: when no context can be made.
pub fn with_context<T>(f: impl FnOnce(&mut DCtx<'static>) -> T) -> io::Result<T> {
    let mut ctx = take_context()?;
    let out = f(&mut ctx);
    give_back(ctx);
    Ok(out)
}

fn give_back(mut ctx: DCtx<'static>) {
    if ctx.sizeof() <= POOL_CTX_BYTES && ctx.reset(ResetDirective::SessionOnly).is_ok() {
        let mut pool = POOL.lock().unwrap_or_else(|p| p.into_inner());
        if pool.len() < POOL_SIZE {
            pool.push(ctx);
        }
    }
}

fn take_context() -> io::Result<DCtx<'static>> {
    let pooled = POOL.lock().unwrap_or_else(|p| p.into_inner()).pop();
    match pooled {
        Some(ctx) => Ok(ctx),
        None => DCtx::try_create()
            .ok_or_else(|| io::Error::other("cannot allocate a zstd decompression context")),
    }
}

impl<R: ReadAt + ?Sized> Drop for FrameReader<'_, R> {
    fn drop(&mut self) {
        if let Some(ctx) = self.ctx.take() {
            give_back(ctx);
        }
    }
}

/// A bounded streaming decoder of the data frame `info` of `src` (as
/// [`super::frame::walk_frame`] delimited it). A skippable frame reads as
/// empty.
///
/// Errors: [`FrameError::Corrupt`] (offset = `info.offset`) when no
/// decoder can be made.
pub fn open<'a, R: ReadAt + ?Sized>(
    src: &'a R,
    info: &FrameInfo,
) -> Result<FrameReader<'a, R>, FrameError> {
    let (end, limit) = match info.kind {
        FrameKind::Data { max_plain_len, .. } => (info.offset + info.len, max_plain_len),
        FrameKind::Skippable => (info.offset, 0),
    };
    let span = Span {
        src,
        at: info.offset,
        end,
    };
    let corrupt = |e: io::Error| FrameError::Corrupt {
        offset: info.offset,
        reason: e.to_string(),
    };
    let mut ctx = take_context().map_err(corrupt)?;
    ctx.set_parameter(DParameter::WindowLogMax(MAX_WINDOW_LOG))
        .map_err(|code| corrupt(zstd_error(code)))?;
    Ok(FrameReader {
        ctx: Some(ctx),
        src: span,
        // The frame's bytes or a chunk, whichever is smaller (a small
        // frame, the common case, zeroes no more than it reads).
        input: vec![
            0u8;
            CHUNK
                .min(usize::try_from(end - info.offset).unwrap_or(CHUNK))
                .max(1)
        ]
        .into_boxed_slice(),
        in_pos: 0,
        in_len: 0,
        src_done: false,
        // A skippable frame (an empty span) has no content.
        frame_done: end == info.offset,
        produced: 0,
        limit,
        offset: info.offset,
    })
}

/// A zstd error code as an `io::Error` named like the zstd crate's.
fn zstd_error(code: usize) -> io::Error {
    io::Error::other(zstd::zstd_safe::get_error_name(code))
}

/// How the reason of a frame refused for its window starts (see
/// [`frame_error`]).
pub const WINDOW_TOO_LARGE: &str = "frame needs a window larger than";

/// Whether a frame refused for `reason` was refused for its window only:
/// not damage (zstd and the harness read windows up to 128 MiB).
pub fn is_window_too_large(reason: &str) -> bool {
    reason.starts_with(WINDOW_TOO_LARGE)
}

/// What to do about such a frame: the words of `check`, the mount's log
/// and `sessionfs doctor` (its `window_too_large` finding).
pub const WINDOW_ADVICE: &str = "to read it through sessionfs, write its frames again with \
     a window of at most 16 MiB (zstd's own for levels up to 19, without --long)";

/// What `check` and the mount's log say of such a frame after its reason.
pub fn window_note() -> String {
    format!(
        "not damage: zstd and the harness read it, and no repair applies (`sessionfs doctor` \
         reports it as window_too_large); {WINDOW_ADVICE}"
    )
}

/// Turns an error of a [`FrameReader`] into a [`FrameError`]: the file's
/// own read errors stay I/O errors, everything else is corruption of the
/// frame at `offset`.
pub fn frame_error(offset: u64, e: io::Error) -> FrameError {
    if e.get_ref().is_some_and(|inner| inner.is::<ReadFailed>()) {
        let inner = e.into_inner().and_then(|b| b.downcast::<ReadFailed>().ok());
        return match inner {
            Some(r) => FrameError::Io(r.0),
            None => FrameError::Io(io::Error::other("read failed")),
        };
    }
    let reason = if e.to_string().contains("Frame requires too much memory") {
        format!(
            "{WINDOW_TOO_LARGE} {} MiB, more than sessionfs decodes",
            (1u64 << MAX_WINDOW_LOG) >> 20
        )
    } else {
        format!("frame failed validation: {e}")
    };
    FrameError::Corrupt { offset, reason }
}

impl<R: ReadAt + ?Sized> FrameReader<'_, R> {
    /// Decodes into `buf` until it holds something or the frame ended
    /// (`Ok(0)`, checksum verified). The file's read errors come wrapped
    /// in [`ReadFailed`]; a frame cut short is `UnexpectedEof`.
    fn decode_some(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() || self.frame_done {
            return Ok(0);
        }
        let Some(ctx) = self.ctx.as_mut() else {
            return Ok(0);
        };
        loop {
            if self.in_pos == self.in_len && !self.src_done {
                let n = loop {
                    match self.src.read(&mut self.input) {
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                        r => break r?,
                    }
                };
                self.in_pos = 0;
                self.in_len = n;
                self.src_done = n == 0;
            }
            let mut input = InBuffer::around(&self.input[self.in_pos..self.in_len]);
            let mut output = OutBuffer::around(&mut *buf);
            let hint = ctx
                .decompress_stream(&mut output, &mut input)
                .map_err(zstd_error)?;
            self.in_pos += input.pos();
            let n = output.pos();
            // 0: the frame is decoded, its checksum verified, all flushed.
            self.frame_done = hint == 0;
            if n > 0 || self.frame_done {
                return Ok(n);
            }
            if self.src_done && self.in_pos == self.in_len {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "incomplete frame",
                ));
            }
        }
    }

    /// Decompressed bytes read so far.
    pub fn produced(&self) -> u64 {
        self.produced
    }

    /// Reads into `buf` like [`Read::read`], with errors as [`FrameError`].
    pub fn read_frame(&mut self, buf: &mut [u8]) -> Result<usize, FrameError> {
        let n = self
            .decode_some(buf)
            .map_err(|e| frame_error(self.offset, e))?;
        self.produced += n as u64;
        if self.produced > self.limit {
            return Err(FrameError::Corrupt {
                offset: self.offset,
                reason: "frame decodes to more than its blocks can hold".into(),
            });
        }
        Ok(n)
    }
}

impl<R: ReadAt + ?Sized> Read for FrameReader<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.read_frame(buf).map_err(|e| match e {
            FrameError::Io(e) => e,
            FrameError::Corrupt { reason, .. } => {
                io::Error::new(io::ErrorKind::InvalidData, reason)
            }
        })
    }
}

/// Decodes the frame to its end, keeping nothing: its decompressed length,
/// checksum verified.
///
/// Errors: [`FrameError::Corrupt`] when decoding or the checksum fails, or
/// the frame decodes to more than its blocks can hold; [`FrameError::Io`].
pub fn verify<R: ReadAt + ?Sized>(src: &R, info: &FrameInfo) -> Result<u64, FrameError> {
    Ok(scan(src, info, false)?.plain_len)
}

/// What a full, bounded decode of one frame found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FrameSummary {
    /// Decompressed length in bytes.
    pub plain_len: u64,
    /// The last byte of the content, if any.
    pub last_byte: Option<u8>,
    /// The last complete line (with its `\n`), when asked for and no
    /// longer than [`MAX_LINE_BYTES`].
    pub last_line: Option<Vec<u8>>,
    /// Whether the last complete line was longer than [`MAX_LINE_BYTES`]
    /// (and so is not in `last_line`).
    pub last_line_too_long: bool,
}

/// Decodes the frame to its end (checksum verified), keeping only what
/// [`FrameSummary`] holds: with `keep_last_line`, at most two lines of
/// [`MAX_LINE_BYTES`] are held at once.
///
/// Errors: as [`verify`].
pub fn scan<R: ReadAt + ?Sized>(
    src: &R,
    info: &FrameInfo,
    keep_last_line: bool,
) -> Result<FrameSummary, FrameError> {
    let mut summary = FrameSummary::default();
    if info.kind == FrameKind::Skippable {
        return Ok(summary);
    }
    let mut reader = open(src, info)?;
    let mut buf = vec![0u8; CHUNK];
    // The bytes after the last `\n` seen (an unfinished line), and whether
    // that line already grew past the cap.
    let mut current: Vec<u8> = Vec::new();
    let mut current_too_long = false;
    loop {
        let n = reader.read_frame(&mut buf)?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        summary.last_byte = chunk.last().copied();
        if !keep_last_line {
            continue;
        }
        match chunk.iter().rposition(|&b| b == b'\n') {
            Some(last_nl) => {
                let line_start = chunk[..last_nl].iter().rposition(|&b| b == b'\n');
                match line_start {
                    Some(prev) => {
                        let line = &chunk[prev + 1..=last_nl];
                        summary.last_line_too_long = line.len() > MAX_LINE_BYTES;
                        summary.last_line = (!summary.last_line_too_long).then(|| line.to_vec());
                    }
                    None => {
                        let too_long =
                            current_too_long || current.len() + last_nl + 1 > MAX_LINE_BYTES;
                        summary.last_line_too_long = too_long;
                        summary.last_line = if too_long {
                            None
                        } else {
                            current.extend_from_slice(&chunk[..=last_nl]);
                            Some(std::mem::take(&mut current))
                        };
                    }
                }
                current.clear();
                current_too_long = false;
                let rest = &chunk[last_nl + 1..];
                if rest.len() > MAX_LINE_BYTES {
                    current_too_long = true;
                } else {
                    current.extend_from_slice(rest);
                }
            }
            None if current_too_long => {}
            None if current.len() + n > MAX_LINE_BYTES => {
                current = Vec::new();
                current_too_long = true;
            }
            None => current.extend_from_slice(chunk),
        }
    }
    summary.plain_len = reader.produced();
    Ok(summary)
}

/// Why the header frame is not one header line.
#[derive(Debug)]
pub enum HeaderFrameError {
    /// The frame failed to decode (or the file to read).
    Frame(FrameError),
    /// The first line is longer than [`MAX_LINE_BYTES`].
    LineTooLong,
    /// The frame holds no complete line, or more than one line.
    NotOneLine(&'static str),
}

/// Reads the header frame `info` of `src` through the bounded stream: its
/// one line (with the `\n`), checksum verified. At most
/// [`MAX_LINE_BYTES`] + one chunk are held; decoding stops at the first
/// byte after the first line.
///
/// Errors: [`HeaderFrameError::LineTooLong`] when no `\n` comes within
/// [`MAX_LINE_BYTES`]; [`HeaderFrameError::NotOneLine`] when the frame ends
/// before a `\n` or holds more after it; [`HeaderFrameError::Frame`] when
/// decoding or the checksum fails.
pub fn header_line<R: ReadAt + ?Sized>(
    src: &R,
    info: &FrameInfo,
) -> Result<Vec<u8>, HeaderFrameError> {
    let mut reader = open(src, info).map_err(HeaderFrameError::Frame)?;
    let mut line: Vec<u8> = Vec::new();
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = reader
            .read_frame(&mut buf)
            .map_err(HeaderFrameError::Frame)?;
        if n == 0 {
            return Err(HeaderFrameError::NotOneLine(
                "the first frame holds no complete line",
            ));
        }
        let chunk = &buf[..n];
        if let Some(i) = chunk.iter().position(|&b| b == b'\n') {
            if line.len() + i + 1 > MAX_LINE_BYTES {
                return Err(HeaderFrameError::LineTooLong);
            }
            line.extend_from_slice(&chunk[..=i]);
            if i + 1 < n {
                return Err(HeaderFrameError::NotOneLine(
                    "the first frame holds more than one line",
                ));
            }
            break;
        }
        if line.len() + n > MAX_LINE_BYTES {
            return Err(HeaderFrameError::LineTooLong);
        }
        line.extend_from_slice(chunk);
    }
    // The line is complete: the frame must end here (the checksum is
    // verified by reading to the end).
    let mut probe = [0u8; 1];
    match reader
        .read_frame(&mut probe)
        .map_err(HeaderFrameError::Frame)?
    {
        0 => Ok(line),
        _ => Err(HeaderFrameError::NotOneLine(
            "the first frame holds more than one line",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frame::{encode_frame, walk_frame, Step};

    fn info_of(bytes: &[u8]) -> FrameInfo {
        match walk_frame(bytes, 0, bytes.len() as u64).unwrap() {
            Step::Frame(f) => f,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn scan_keeps_the_last_line_across_chunks() {
        let mut plain = Vec::new();
        for i in 0..20_000 {
            plain.extend_from_slice(format!("{{\"seq\":{i}}}\n").as_bytes());
        }
        plain.extend_from_slice(&vec![b'y'; 200_000]);
        plain.push(b'\n');
        let frame = encode_frame(&plain).unwrap();
        let s = scan(&frame[..], &info_of(&frame), true).unwrap();
        assert_eq!(s.plain_len, plain.len() as u64);
        assert_eq!(s.last_line.unwrap().len(), 200_001);
        assert_eq!(s.last_byte, Some(b'\n'));
    }

    #[test]
    fn a_bad_checksum_is_found_at_the_end() {
        let mut frame = encode_frame(b"{\"a\":1}\n").unwrap();
        let n = frame.len();
        frame[n - 1] ^= 1;
        assert!(matches!(
            verify(&frame[..], &info_of(&frame)),
            Err(FrameError::Corrupt { .. })
        ));
    }

    #[test]
    fn header_line_stops_after_the_first_line() {
        let frame = encode_frame(b"{\"h\":1}\n{\"x\":2}\n").unwrap();
        assert!(matches!(
            header_line(&frame[..], &info_of(&frame)),
            Err(HeaderFrameError::NotOneLine(_))
        ));
        let frame = encode_frame(b"{\"h\":1}\n").unwrap();
        assert_eq!(
            header_line(&frame[..], &info_of(&frame)).unwrap(),
            b"{\"h\":1}\n"
        );
    }
}
