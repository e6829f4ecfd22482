//! The frame index and the reads built on it, through the library only (no
//! mount).
//!
//! * random `pread`s (1 byte to 1 MiB, across frame boundaries and past the
//!   end) equal the decompressed bytes;
//! * frames with and without a content-size field (1-, 2-, 4- and 8-byte
//!   fields, 256- and 65,791-byte frames, streaming frames with none), with
//!   and without a checksum, give exact sizes and bytes, as `zstd -dc` does;
//! * reading the last kilobyte of a transcript of 2,000 frames decodes at
//!   most two frames (counted by the store's `frames_decoded`);
//! * a torn last frame stays invisible at every cut until it is completed;
//! * skippable frames are skipped wherever they stand;
//! * a persisted index round-trips and is refused when the file was
//!   replaced or its last frame no longer walks the same.
//!
//! Sources: ../shared/spec/FORMAT.md ("Transcript encoding", "Reading and
//! recovery"), ../shared/spec/MOUNT.md ("Reading"), RFC 8878 §3.1.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sessionfs::store::frame::{encode_frame, FrameKind, ZSTD_MAGIC};
use sessionfs::store::index::FrameIndex;
use sessionfs::store::index_store;
use sessionfs::store::transcript::{Encoding, FileIdent, Transcript};
use sessionfs::store::FrameCache;

use common::zstd_dc;

// ---------------------------------------------------------------------------
// Helpers: a deterministic PRNG, JSON lines of exact sizes, frame builders.
// ---------------------------------------------------------------------------

/// SplitMix64: deterministic, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// Log-uniform in `1..=max`: as many tiny lengths as large ones.
    fn log_len(&mut self, max: u64) -> u64 {
        let bits = 64 - max.leading_zeros() as u64;
        let b = self.range(0, bits);
        let hi = ((1u64 << b) - 1).clamp(1, max);
        self.range(1, hi)
    }
}

const HEADER: &[u8] = b"{\"type\":\"session\",\"version\":0,\"id\":\"frame-index-test\",\
\"createdAt\":1767614400000,\"cwd\":\"/tmp/frame-index\",\"delegationDepth\":0}\n";

/// One JSON line of exactly `len` bytes (`\n` included), `seq` set.
fn line(rng: &mut Rng, seq: u64, len: usize) -> Vec<u8> {
    let prefix = format!("{{\"type\":\"test/pad\",\"seq\":{seq},\"p\":\"");
    let suffix = "\"}\n";
    let overhead = prefix.len() + suffix.len();
    assert!(
        len >= overhead,
        "a line of {len} bytes cannot hold seq {seq}"
    );
    const ALPHABET: &[u8] = b"abcdefghijklmnop qrstuvwxyz012345";
    let mut out = prefix.into_bytes();
    // Runs of one letter: compressible, but not trivially.
    while out.len() < len - suffix.len() {
        let c = ALPHABET[rng.range(0, ALPHABET.len() as u64 - 1) as usize];
        let run = rng.range(1, 6) as usize;
        for _ in 0..run.min(len - suffix.len() - out.len()) {
            out.push(c);
        }
    }
    out.extend_from_slice(suffix.as_bytes());
    assert_eq!(out.len(), len);
    out
}

/// Complete JSON lines totalling exactly `size` bytes (none for 0); `seq`
/// continues from `*seq`.
fn lines_exact(rng: &mut Rng, seq: &mut u64, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size);
    while out.len() < size {
        let remaining = size - out.len();
        let len = if remaining <= 4000 {
            remaining
        } else {
            rng.range(200, 2000) as usize
        };
        out.extend(line(rng, *seq, len));
        *seq += 1;
    }
    assert_eq!(out.len(), size);
    out
}

/// A frame from zstd's one-shot compressor, with a content-size field.
fn bulk_frame(plain: &[u8], checksum: bool) -> Vec<u8> {
    use zstd::zstd_safe::CParameter;
    let mut c = zstd::bulk::Compressor::new(3).unwrap();
    c.set_parameter(CParameter::ChecksumFlag(checksum)).unwrap();
    c.set_parameter(CParameter::ContentSizeFlag(true)).unwrap();
    c.compress(plain).unwrap()
}

/// A frame from zstd's streaming encoder, fed in small pieces: the size is
/// not known when the header is written, so the frame has no content size.
fn streaming_frame(plain: &[u8], checksum: bool) -> Vec<u8> {
    let mut e = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
    e.include_checksum(checksum).unwrap();
    for piece in plain.chunks(7919) {
        e.write_all(piece).unwrap();
    }
    e.finish().unwrap()
}

/// How a hand-made frame states its content size.
#[derive(Clone, Copy, Debug)]
enum Fcs {
    /// No field (not single segment; a window descriptor instead).
    Absent,
    /// Single segment, FCS flag 0: a 1-byte field.
    One,
    /// FCS flag 1: a 2-byte field holding size - 256.
    Two,
    /// FCS flag 2: a 4-byte field.
    Four,
    /// FCS flag 3: an 8-byte field.
    Eight,
}

/// A frame header (magic, descriptor, window or size field) for a hand-made
/// frame of `size` plaintext bytes, without checksum or dictionary.
fn handmade_header(fcs: Fcs, size: u64) -> Vec<u8> {
    let mut out = ZSTD_MAGIC.to_le_bytes().to_vec();
    match fcs {
        Fcs::Absent => {
            out.push(0x00);
            // Window descriptor: exponent 11, mantissa 0: 2 MiB window.
            out.push(11 << 3);
        }
        Fcs::One => {
            assert!(size <= 255);
            out.push(0x20);
            out.push(size as u8);
        }
        Fcs::Two => {
            assert!((256..=65791).contains(&size));
            out.push(0x60);
            out.extend_from_slice(&((size - 256) as u16).to_le_bytes());
        }
        Fcs::Four => {
            out.push(0xA0);
            out.extend_from_slice(&(size as u32).to_le_bytes());
        }
        Fcs::Eight => {
            out.push(0xE0);
            out.extend_from_slice(&size.to_le_bytes());
        }
    }
    out
}

fn block_header(last: bool, block_type: u32, size: usize) -> [u8; 3] {
    let v = u32::from(last) | (block_type << 1) | ((size as u32) << 3);
    let b = v.to_le_bytes();
    [b[0], b[1], b[2]]
}

/// A hand-made frame of raw blocks (at most 128 KiB each): raw blocks are
/// valid zstd, so the size field can be chosen exactly.
fn raw_frame(fcs: Fcs, plain: &[u8]) -> Vec<u8> {
    let mut out = handmade_header(fcs, plain.len() as u64);
    if plain.is_empty() {
        out.extend_from_slice(&block_header(true, 0, 0));
        return out;
    }
    let chunks: Vec<&[u8]> = plain.chunks(128 * 1024).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        out.extend_from_slice(&block_header(i + 1 == chunks.len(), 0, chunk.len()));
        out.extend_from_slice(chunk);
    }
    out
}

/// A hand-made frame of a raw block, an RLE block and a raw block (2-byte
/// size field): one JSON line `{"p":"aaaa…"}`. Returns (frame, plain).
fn raw_rle_raw_frame(run: usize) -> (Vec<u8>, Vec<u8>) {
    let head = b"{\"type\":\"test/rle\",\"seq\":0,\"p\":\"";
    let tail = b"\"}\n";
    let mut plain = head.to_vec();
    plain.extend(std::iter::repeat_n(b'a', run));
    plain.extend_from_slice(tail);
    let mut out = handmade_header(Fcs::Two, plain.len() as u64);
    out.extend_from_slice(&block_header(false, 0, head.len()));
    out.extend_from_slice(head);
    out.extend_from_slice(&block_header(false, 1, run));
    out.push(b'a');
    out.extend_from_slice(&block_header(true, 0, tail.len()));
    out.extend_from_slice(tail);
    (out, plain)
}

/// The content-size field of a data frame as its descriptor declares it:
/// (field width in bytes, raw stored value).
fn fcs_field(frame: &[u8]) -> (usize, Option<u64>) {
    assert_eq!(&frame[..4], &ZSTD_MAGIC.to_le_bytes(), "not a data frame");
    let d = frame[4];
    let single = d & 0x20 != 0;
    let width = match (d >> 6, single) {
        (0, false) => 0,
        (0, true) => 1,
        (1, _) => 2,
        (2, _) => 4,
        _ => 8,
    };
    let dict = match d & 3 {
        3 => 4,
        n => n as usize,
    };
    let at = 5 + usize::from(!single) + dict;
    let raw = (width > 0).then(|| {
        frame[at..at + width]
            .iter()
            .rev()
            .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
    });
    (width, raw)
}

fn has_checksum(frame: &[u8]) -> bool {
    frame[4] & 0x04 != 0
}

/// A skippable frame with magic nibble `nibble` and `payload`.
fn skippable(nibble: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = (0x184D_2A50u32 | u32::from(nibble & 0xF))
        .to_le_bytes()
        .to_vec();
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// A transcript file being assembled: compressed bytes, the plaintext it
/// stands for, and where each data frame starts in both.
#[derive(Default)]
struct Built {
    file: Vec<u8>,
    plain: Vec<u8>,
    /// (compressed offset, plain offset, plain length) of each data frame.
    frames: Vec<(u64, u64, u64)>,
}

impl Built {
    fn with_header() -> Built {
        let mut b = Built::default();
        b.push(&encode_frame(HEADER).unwrap(), HEADER);
        b
    }

    fn push(&mut self, frame: &[u8], plain: &[u8]) {
        self.frames.push((
            self.file.len() as u64,
            self.plain.len() as u64,
            plain.len() as u64,
        ));
        self.file.extend_from_slice(frame);
        self.plain.extend_from_slice(plain);
    }

    fn push_skippable(&mut self, frame: &[u8]) {
        self.file.extend_from_slice(frame);
    }

    /// Frame numbers whose plaintext intersects `[offset, offset + len)`
    /// (clipped to the view); empty frames inside the range included.
    fn touched(&self, offset: u64, len: u64) -> Vec<usize> {
        let end = (offset + len).min(self.plain.len() as u64);
        self.frames
            .iter()
            .enumerate()
            .filter(|(_, &(_, po, pl))| po < end && po + pl > offset)
            .map(|(i, _)| i)
            .collect()
    }
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, bytes).unwrap();
    path
}

fn open(path: &Path, cache: &Arc<FrameCache>) -> Transcript {
    Transcript::open(path, Encoding::Zstd, Arc::clone(cache))
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()))
}

/// `t.read` of `[offset, offset + size)`, compared with the expected slice
/// (clipped at the end).
#[track_caller]
fn check_read(t: &Transcript, expected: &[u8], offset: u64, size: u32) {
    let got = t
        .read(offset, size)
        .unwrap_or_else(|e| panic!("read({offset}, {size}): {e}"));
    let len = expected.len() as u64;
    let from = offset.min(len) as usize;
    let to = offset.saturating_add(u64::from(size)).min(len) as usize;
    if got.as_slice() != &expected[from..to] {
        let first_diff = got
            .iter()
            .zip(&expected[from..to])
            .position(|(a, b)| a != b);
        panic!(
            "read({offset}, {size}) returned {} bytes, expected {}; first difference at {:?}",
            got.len(),
            to - from,
            first_diff
        );
    }
}

/// Reads everything from `offset` to the end in one call (sized to what is
/// left, plus some: the caller passes what the kernel would, never 4 GiB).
#[track_caller]
fn check_rest(t: &Transcript, expected: &[u8], offset: u64) {
    let size = (expected.len() as u64).saturating_sub(offset) + 4096;
    check_read(t, expected, offset, size as u32);
}

// ---------------------------------------------------------------------------
// 1. Random preads.
// ---------------------------------------------------------------------------

/// Header + 200 frames: tiny single lines, small and medium batches, frames
/// over 128 KiB (several blocks), a few empty frames.
fn varied_transcript(rng: &mut Rng) -> Built {
    let mut b = Built::with_header();
    let mut seq = 0;
    for i in 0..200 {
        let size = match (i, rng.range(0, 9)) {
            (50 | 51 | 120, _) => 0,
            (_, 0..=4) => rng.range(48, 2000),
            (_, 5) => rng.range(48, 120),
            (_, 6 | 7) => rng.range(2000, 100_000),
            _ => rng.range(131_073, 600_000),
        } as usize;
        let plain = lines_exact(rng, &mut seq, size);
        b.push(&encode_frame(&plain).unwrap(), &plain);
    }
    b
}

#[test]
fn random_preads_equal_the_decompressed_bytes() {
    let mut rng = Rng(0x5E55_10F5);
    let built = varied_transcript(&mut rng);
    let tmp = tempfile::tempdir().unwrap();
    let path = write_file(tmp.path(), "session.jsonl.zstd", &built.file);
    assert_eq!(zstd_dc(&path), built.plain, "the test's own file is wrong");
    let expected = &built.plain;
    let len = expected.len() as u64;
    assert!(
        built.frames.iter().filter(|f| f.2 > 128 * 1024).count() >= 5,
        "want several multi-block frames"
    );

    // A small cache, so that frames are evicted and decoded again.
    let cache = Arc::new(FrameCache::new(2 << 20));
    let t = open(&path, &cache);
    assert_eq!(t.refresh().unwrap().plain_len, len);
    assert_eq!(t.frame_count(), built.frames.len());

    // Edges first.
    for (offset, size) in [
        (0, 1),
        (0, 1 << 20),
        (len - 1, 1),
        (len - 1, 1 << 20),
        (len, 1),
        (len + 12345, 1 << 20),
        (u64::MAX - 10, 100),
        (0, len as u32 + 1),
    ] {
        check_read(&t, expected, offset, size);
    }
    // Every frame boundary, from just before to just after.
    for &(_, po, _) in &built.frames {
        for delta in [0u64, 1, 2] {
            check_read(&t, expected, po.saturating_sub(delta), 3);
            check_read(&t, expected, po.saturating_sub(delta), 200_000);
        }
    }

    // 2,000 random reads.
    let boundaries: Vec<u64> = built.frames.iter().map(|f| f.1).collect();
    for _ in 0..2000 {
        let offset = match rng.range(0, 5) {
            0 | 1 => {
                let b = boundaries[rng.range(0, boundaries.len() as u64 - 1) as usize];
                (b + rng.range(0, 128)).saturating_sub(64)
            }
            2 | 3 => rng.range(0, len - 1),
            4 => len.saturating_sub(rng.range(1, 2 << 20)),
            _ => len + rng.range(0, 4096),
        };
        let size = match rng.range(0, 3) {
            0 | 1 => rng.log_len(1 << 20),
            2 => rng.range(1, 64),
            _ => [1 << 20, 128 * 1024, 4096][rng.range(0, 2) as usize],
        } as u32;
        check_read(&t, expected, offset, size);
    }

    // A sequential reader (read-ahead on), 128 KiB at a time, like `cat`.
    let mut offset = 0;
    let mut whole = Vec::with_capacity(expected.len());
    loop {
        let chunk = t.read(offset, 128 * 1024).unwrap();
        if chunk.is_empty() {
            break;
        }
        offset += chunk.len() as u64;
        whole.extend_from_slice(&chunk);
    }
    assert!(whole == *expected, "sequential read differs");

    // Concurrent readers of the same transcript.
    let t = Arc::new(t);
    let expected = Arc::new(built.plain.clone());
    let threads: Vec<_> = (0..4u64)
        .map(|k| {
            let t = Arc::clone(&t);
            let expected = Arc::clone(&expected);
            std::thread::spawn(move || {
                let mut rng = Rng(1000 + k);
                let len = expected.len() as u64;
                for _ in 0..250 {
                    let offset = rng.range(0, len + 100);
                    let size = rng.log_len(1 << 20) as u32;
                    check_read(&t, &expected, offset, size);
                }
            })
        })
        .collect();
    for th in threads {
        th.join().expect("a concurrent reader failed");
    }
}

// ---------------------------------------------------------------------------
// 2. Frames with and without content size, with and without checksum.
// ---------------------------------------------------------------------------

/// What a frame of the size test is and what its header must declare.
struct SizedCase {
    what: String,
    frame: Vec<u8>,
    plain: Vec<u8>,
    /// Expected width of the content-size field (0: none).
    width: usize,
    checksum: bool,
}

fn sized_cases(rng: &mut Rng) -> Vec<SizedCase> {
    let mut seq = 0;
    let mut cases = Vec::new();
    let expect_width = |n: usize| match n {
        0..=255 => 1,
        256..=65791 => 2,
        _ => 4,
    };
    let sizes = [100usize, 255, 256, 257, 65_791, 65_792, 300_000];
    for checksum in [true, false] {
        for &n in &sizes {
            let plain = lines_exact(rng, &mut seq, n);
            cases.push(SizedCase {
                what: format!("bulk {n} bytes, checksum {checksum}"),
                frame: bulk_frame(&plain, checksum),
                plain,
                width: expect_width(n),
                checksum,
            });
        }
        for &n in &[100usize, 256, 65_791, 65_792, 300_000] {
            let plain = lines_exact(rng, &mut seq, n);
            cases.push(SizedCase {
                what: format!("streaming {n} bytes, checksum {checksum}"),
                frame: streaming_frame(&plain, checksum),
                plain,
                width: 0,
                checksum,
            });
        }
    }
    for (fcs, n, width) in [
        (Fcs::One, 100usize, 1usize),
        (Fcs::One, 255, 1),
        (Fcs::One, 0, 1),
        (Fcs::Two, 256, 2),
        (Fcs::Two, 65_791, 2),
        (Fcs::Four, 65_792, 4),
        (Fcs::Four, 200_000, 4),
        (Fcs::Eight, 1000, 8),
        (Fcs::Absent, 5000, 0),
        (Fcs::Absent, 200_000, 0),
    ] {
        let plain = lines_exact(rng, &mut seq, n);
        cases.push(SizedCase {
            what: format!("hand-made raw blocks {fcs:?} {n} bytes"),
            frame: raw_frame(fcs, &plain),
            plain,
            width,
            checksum: false,
        });
    }
    let (frame, plain) = raw_rle_raw_frame(5000);
    cases.push(SizedCase {
        what: "hand-made raw + RLE + raw blocks".into(),
        frame,
        plain,
        width: 2,
        checksum: false,
    });
    cases
}

#[test]
fn frames_with_and_without_content_size_give_exact_sizes() {
    let mut rng = Rng(0xF0C5);
    let cases = sized_cases(&mut rng);

    // The frames are what the test claims they are.
    for c in &cases {
        let (width, raw) = fcs_field(&c.frame);
        assert_eq!(width, c.width, "{}: content-size field width", c.what);
        assert_eq!(has_checksum(&c.frame), c.checksum, "{}: checksum", c.what);
        if let Some(raw) = raw {
            let size = if width == 2 { raw + 256 } else { raw };
            assert_eq!(size, c.plain.len() as u64, "{}: stored size", c.what);
        }
        assert_eq!(
            zstd::stream::decode_all(c.frame.as_slice()).unwrap(),
            c.plain,
            "{}: the zstd library decodes it differently",
            c.what
        );
    }
    // The bias of the 2-byte field is exercised at both ends.
    let raw_of = |what: &str| {
        fcs_field(&cases.iter().find(|c| c.what == what).unwrap().frame)
            .1
            .unwrap()
    };
    assert_eq!(raw_of("bulk 256 bytes, checksum true"), 0);
    assert_eq!(raw_of("bulk 65791 bytes, checksum true"), 0xFFFF);
    assert_eq!(raw_of("hand-made raw blocks Two 256 bytes"), 0);
    assert_eq!(raw_of("hand-made raw blocks Two 65791 bytes"), 0xFFFF);

    let mut built = Built::with_header();
    for c in &cases {
        built.push(&c.frame, &c.plain);
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = write_file(tmp.path(), "session.jsonl.zstd", &built.file);
    assert_eq!(
        zstd_dc(&path),
        built.plain,
        "zstd -dc disagrees with the test's plaintext"
    );

    // The index alone: exact sizes; frames without a size decoded once.
    let mut index = FrameIndex::new();
    let mut decoded = 0;
    index
        .extend(built.file.as_slice(), built.file.len() as u64, &mut decoded)
        .unwrap();
    assert!(!index.is_torn() && !index.is_damaged());
    assert_eq!(index.frames().len(), cases.len() + 1);
    assert_eq!(index.plain_len(), built.plain.len() as u64);
    let without_size = cases.iter().filter(|c| c.width == 0).count() as u64;
    assert_eq!(
        decoded, without_size,
        "each frame without a content size is decoded once to learn it, the others never"
    );
    for (i, c) in cases.iter().enumerate() {
        let f = &index.frames().get(i + 1).unwrap();
        let (co, po, pl) = built.frames[i + 1];
        assert_eq!(
            (f.info.offset, f.info.len, f.plain_offset, f.plain_len),
            (co, c.frame.len() as u64, po, pl),
            "{}: indexed frame",
            c.what
        );
        let FrameKind::Data {
            content_size,
            checksum,
            ..
        } = f.info.kind
        else {
            panic!("{}: indexed as skippable", c.what);
        };
        assert_eq!(
            content_size,
            (c.width > 0).then_some(c.plain.len() as u64),
            "{}",
            c.what
        );
        assert_eq!(checksum, c.checksum, "{}", c.what);
    }

    // Through a transcript: exact size, exact bytes of each frame.
    let cache = Arc::new(FrameCache::default());
    let t = open(&path, &cache);
    assert_eq!(t.refresh().unwrap().plain_len, built.plain.len() as u64);
    assert_eq!(t.frame_count(), cases.len() + 1);
    for (i, c) in cases.iter().enumerate() {
        let (_, po, pl) = built.frames[i + 1];
        let got = t.read(po, pl as u32 + 1000).unwrap();
        let want_end = (po + pl + 1000).min(built.plain.len() as u64) as usize;
        assert!(
            got == built.plain[po as usize..want_end],
            "{}: bytes read differ",
            c.what
        );
    }
    check_rest(&t, &built.plain, 0);

    // A checksum that does not match fails the reads that touch the frame,
    // and only those.
    let victim = cases
        .iter()
        .position(|c| c.what == "bulk 65791 bytes, checksum true")
        .unwrap()
        + 1;
    let (co, po, pl) = built.frames[victim];
    let mut bad = built.file.clone();
    let last = (co + cases[victim - 1].frame.len() as u64 - 1) as usize;
    bad[last] ^= 0x55;
    let bad_path = write_file(tmp.path(), "bad.jsonl.zstd", &bad);
    let t = open(&bad_path, &Arc::new(FrameCache::default()));
    assert!(
        t.read(po + 10, 10).is_err(),
        "a frame failing its checksum was served"
    );
    check_read(&t, &built.plain, 0, po as u32);
    check_read(&t, &built.plain, po + pl, 1 << 20);
}

// ---------------------------------------------------------------------------
// 3. Reading the last kilobyte decodes at most two frames.
// ---------------------------------------------------------------------------

#[test]
fn reading_the_last_kilobyte_of_2000_frames_decodes_at_most_two() {
    let mut rng = Rng(0x1A57);
    let mut built = Built::with_header();
    let mut seq = 0;
    // Every frame 520..2000 bytes: any two neighbours hold more than 1 KiB.
    for _ in 0..2000 {
        let n = rng.range(520, 2000) as usize;
        let plain = lines_exact(&mut rng, &mut seq, n);
        built.push(&encode_frame(&plain).unwrap(), &plain);
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = write_file(tmp.path(), "session.jsonl.zstd", &built.file);
    let len = built.plain.len() as u64;

    let cache = Arc::new(FrameCache::default());
    let t = open(&path, &cache);
    assert_eq!(t.frame_count(), 2001);
    assert_eq!(t.refresh().unwrap().plain_len, len);
    let before = t.frames_decoded();
    let got = t.read(len - 1024, 1024).unwrap();
    let delta = t.frames_decoded() - before;
    assert!(
        got == built.plain[(len - 1024) as usize..],
        "last KiB differs"
    );
    let touched = built.touched(len - 1024, 1024).len() as u64;
    assert!(
        delta <= 2,
        "reading the last KiB decoded {delta} frames (it touches {touched})"
    );
    assert_eq!(delta, touched, "decoded frames other than those touched");
    eprintln!("reading the last KiB of 2,001 frames decoded {delta} frame(s)");

    // Again: served from the cache, nothing decoded.
    let before = t.frames_decoded();
    t.read(len - 1024, 1024).unwrap();
    assert_eq!(
        t.frames_decoded(),
        before,
        "a cached frame was decoded again"
    );

    // With no cache at all, every random read decodes exactly the frames it
    // touches: no whole-file work anywhere.
    let t = open(&path, &Arc::new(FrameCache::new(0)));
    let mut last_end = u64::MAX;
    for _ in 0..300 {
        let mut offset = rng.range(0, len - 1);
        if offset == last_end {
            offset += 1; // not sequential: no read-ahead
        }
        let size = rng.range(1, 5000) as u32;
        let before = t.frames_decoded();
        check_read(&t, &built.plain, offset, size);
        let delta = t.frames_decoded() - before;
        let touched = built
            .touched(offset, u64::from(size))
            .into_iter()
            .filter(|&i| built.frames[i].2 > 0)
            .count() as u64;
        assert_eq!(delta, touched, "read({offset}, {size})");
        last_end = offset + u64::from(size);
    }
}

// ---------------------------------------------------------------------------
// 4. A torn last frame.
// ---------------------------------------------------------------------------

#[test]
fn a_torn_last_frame_is_invisible_until_complete() {
    let mut rng = Rng(0x7043);
    let mut seq = 0;
    let mut committed = Built::with_header();
    for n in [700usize, 5000, 200_000, 90] {
        let plain = lines_exact(&mut rng, &mut seq, n);
        committed.push(&encode_frame(&plain).unwrap(), &plain);
    }
    let tail_plain = lines_exact(&mut rng, &mut seq, 20_000);
    let tail_frame = encode_frame(&tail_plain).unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("session.jsonl.zstd");
    let mut file_bytes = committed.file.clone();
    file_bytes.extend_from_slice(&tail_frame[..tail_frame.len() - 10]);
    fs::write(&path, &file_bytes).unwrap();

    let cache = Arc::new(FrameCache::default());
    let t = open(&path, &cache);
    let clen = committed.plain.len() as u64;
    assert_eq!(t.refresh().unwrap().plain_len, clen);
    assert_eq!(t.frame_count(), committed.frames.len());
    let mut rng2 = Rng(7);
    for _ in 0..200 {
        let offset = rng2.range(0, clen + 30_000);
        let size = rng2.log_len(1 << 20) as u32;
        check_read(&t, &committed.plain, offset, size);
    }
    assert!(t.read(clen, 1 << 20).unwrap().is_empty());

    // Completed: the new frame shows.
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&tail_frame[tail_frame.len() - 10..])
        .unwrap();
    let mut full = committed.plain.clone();
    full.extend_from_slice(&tail_plain);
    assert_eq!(t.refresh().unwrap().plain_len, full.len() as u64);
    assert_eq!(t.frame_count(), committed.frames.len() + 1);
    check_rest(&t, &full, 0);
    check_read(&t, &full, clen - 5, 100);
    assert_eq!(zstd_dc(&path), full);
}

/// Grows the file one byte at a time through the last frame; after every
/// byte the view (of a transcript followed with `refresh`, and of one opened
/// fresh) is the committed prefix, until the last byte completes it.
fn every_cut_leaves_the_committed_prefix(last_frame: &[u8], last_plain: &[u8], label: &str) {
    let mut rng = Rng(0xC07);
    let mut seq = 1_000_000;
    let mut committed = Built::with_header();
    for n in [300usize, 4000] {
        let plain = lines_exact(&mut rng, &mut seq, n);
        committed.push(&encode_frame(&plain).unwrap(), &plain);
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = write_file(tmp.path(), "session.jsonl.zstd", &committed.file);
    let cache = Arc::new(FrameCache::default());
    let followed = open(&path, &cache);
    eprintln!(
        "{label}: trying all {} cuts of the last frame",
        last_frame.len() - 1
    );
    let clen = committed.plain.len() as u64;
    let tail = &committed.plain[(clen - 7) as usize..];
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    for cut in 1..last_frame.len() {
        f.write_all(&last_frame[cut - 1..cut]).unwrap();
        let attr = followed.refresh().unwrap();
        assert_eq!(attr.plain_len, clen, "{label}: cut {cut}: followed view");
        assert_eq!(
            followed.read(clen - 7, 4096).unwrap(),
            tail,
            "{label}: cut {cut}"
        );
        let fresh = open(&path, &cache);
        assert_eq!(
            fresh.refresh().unwrap().plain_len,
            clen,
            "{label}: cut {cut}: fresh view"
        );
        assert_eq!(fresh.frame_count(), committed.frames.len());
        assert_eq!(
            fresh.read(clen - 7, 4096).unwrap(),
            tail,
            "{label}: cut {cut}"
        );
    }
    f.write_all(&last_frame[last_frame.len() - 1..]).unwrap();
    let mut full = committed.plain.clone();
    full.extend_from_slice(last_plain);
    assert_eq!(followed.refresh().unwrap().plain_len, full.len() as u64);
    check_rest(&followed, &full, 0);
    let fresh = open(&path, &cache);
    check_rest(&fresh, &full, clen - 7);
}

#[test]
fn every_cut_inside_the_last_frame_leaves_the_committed_prefix() {
    // A checksummed frame with a content size, of two blocks (compressible
    // lines, so the frame stays a few KiB and every cut is tried).
    let mut plain = Vec::new();
    for seq in 0..2500u64 {
        plain.extend_from_slice(
            format!(
                "{{\"type\":\"test/cut\",\"seq\":{seq},\"data\":{{\"text\":\"same again\"}}}}\n"
            )
            .as_bytes(),
        );
    }
    assert!(plain.len() > 128 * 1024);
    let frame = encode_frame(&plain).unwrap();
    every_cut_leaves_the_committed_prefix(&frame, &plain, "checksummed, sized");

    // A streaming frame, without a checksum or a content size.
    let frame = streaming_frame(&plain, false);
    assert_eq!(fcs_field(&frame).0, 0);
    assert!(!has_checksum(&frame));
    every_cut_leaves_the_committed_prefix(&frame, &plain, "streaming, no checksum");

    // A hand-made frame of raw blocks: cuts inside its payload too.
    let cut = plain[..3000].iter().rposition(|&b| b == b'\n').unwrap() + 1;
    let small = &plain[..cut];
    every_cut_leaves_the_committed_prefix(&raw_frame(Fcs::Absent, small), small, "raw blocks");
}

// ---------------------------------------------------------------------------
// 5. Skippable frames.
// ---------------------------------------------------------------------------

#[test]
fn skippable_frames_are_skipped_wherever_they_stand() {
    let mut rng = Rng(0x5C1B);
    let mut seq = 0;
    let mut built = Built::default();
    // Before the header frame: does not count as the first frame.
    built.push_skippable(&skippable(0x0, b"hello"));
    built.push_skippable(&skippable(0x7, b""));
    built.push(&encode_frame(HEADER).unwrap(), HEADER);
    let a = lines_exact(&mut rng, &mut seq, 3000);
    built.push(&encode_frame(&a).unwrap(), &a);
    // Between data frames, holding the data-frame magic (never split on it).
    let mut payload = Vec::new();
    for _ in 0..50 {
        payload.extend_from_slice(&ZSTD_MAGIC.to_le_bytes());
        payload.extend_from_slice(&encode_frame(b"{\"type\":\"decoy\"}\n").unwrap());
    }
    built.push_skippable(&skippable(0xF, &payload));
    let b = lines_exact(&mut rng, &mut seq, 200_000);
    built.push(&streaming_frame(&b, true), &b);
    built.push_skippable(&skippable(0xA, &[0u8; 70_000]));
    built.push_skippable(&skippable(0x3, b"x"));
    let c = lines_exact(&mut rng, &mut seq, 100);
    built.push(&bulk_frame(&c, false), &c);
    // At the end.
    built.push_skippable(&skippable(0x5, b"trailing"));

    let tmp = tempfile::tempdir().unwrap();
    let path = write_file(tmp.path(), "session.jsonl.zstd", &built.file);
    assert_eq!(zstd_dc(&path), built.plain, "zstd -dc disagrees");

    let mut index = FrameIndex::new();
    let mut decoded = 0;
    index
        .extend(built.file.as_slice(), built.file.len() as u64, &mut decoded)
        .unwrap();
    assert!(!index.is_torn());
    assert_eq!(index.walked_to(), built.file.len() as u64);
    assert_eq!(index.frames().len(), 4, "skippable frames are not indexed");
    for (f, &(co, po, pl)) in index.frames().iter().zip(&built.frames) {
        assert_eq!((f.info.offset, f.plain_offset, f.plain_len), (co, po, pl));
    }

    let cache = Arc::new(FrameCache::default());
    let t = open(&path, &cache);
    assert_eq!(t.header().id, "frame-index-test");
    assert_eq!(t.frame_count(), 4);
    assert_eq!(t.refresh().unwrap().plain_len, built.plain.len() as u64);
    check_rest(&t, &built.plain, 0);
    for &(_, po, _) in &built.frames {
        check_read(&t, &built.plain, po.saturating_sub(3), 10);
    }

    // A torn skippable frame at the end is a torn tail, invisible too.
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(&skippable(0x1, &[1u8; 100])[..50]).unwrap();
    assert_eq!(t.refresh().unwrap().plain_len, built.plain.len() as u64);
    let fresh = open(&path, &cache);
    assert_eq!(fresh.refresh().unwrap().plain_len, built.plain.len() as u64);
}

// ---------------------------------------------------------------------------
// 6. The persisted index.
// ---------------------------------------------------------------------------

fn ident_of(path: &Path) -> FileIdent {
    let m = fs::metadata(path).unwrap();
    FileIdent {
        dev: m.dev(),
        ino: m.ino(),
    }
}

fn index_of(path: &Path) -> FrameIndex {
    let file = File::open(path).unwrap();
    let len = file.metadata().unwrap().len();
    let mut index = FrameIndex::new();
    let mut decoded = 0;
    index.extend(&file, len, &mut decoded).unwrap();
    index
}

fn load(dir: &Path, path: &Path) -> Option<FrameIndex> {
    let file = File::open(path).unwrap();
    let len = file.metadata().unwrap().len();
    index_store::load(dir, ident_of(path), &file, len)
}

fn open_persisting(path: &Path, dir: &Path) -> Transcript {
    Transcript::open_with(
        path,
        Encoding::Zstd,
        Arc::new(FrameCache::default()),
        Some(dir.to_path_buf()),
    )
    .unwrap()
}

#[test]
fn a_persisted_index_round_trips_and_is_refused_when_stale() {
    let mut rng = Rng(0x1DE7);
    let mut seq = 0;
    let mut built = Built::with_header();
    // 300 frames (enough to be persisted), every tenth without a content
    // size: walking decodes those, so `frames_decoded` after open tells
    // whether the index was walked or loaded.
    let mut no_size_frames = 0;
    for i in 0..300 {
        let n = rng.range(60, 3000) as usize;
        let plain = lines_exact(&mut rng, &mut seq, n);
        if i % 10 == 0 {
            built.push(&streaming_frame(&plain, true), &plain);
            no_size_frames += 1;
        } else {
            built.push(&encode_frame(&plain).unwrap(), &plain);
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let path = write_file(tmp.path(), "session.jsonl.zstd", &built.file);
    let walked = index_of(&path);

    // to_bytes / from_bytes.
    let bytes = walked.to_bytes().unwrap();
    let back = FrameIndex::from_bytes(&bytes).unwrap();
    assert_eq!(back.frames(), walked.frames());
    assert_eq!(back.walked_to(), walked.walked_to());
    assert_eq!(back.plain_len(), built.plain.len() as u64);
    assert!(FrameIndex::from_bytes(&bytes[..bytes.len() - 1]).is_none());

    // save / load.
    assert!(load(&dir, &path).is_none(), "nothing saved yet");
    index_store::save(&dir, ident_of(&path), &walked);
    let loaded = load(&dir, &path).expect("a saved index loads");
    assert_eq!(loaded.frames(), walked.frames());
    assert_eq!(loaded.walked_to(), walked.walked_to());
    let other = FileIdent {
        dev: ident_of(&path).dev,
        ino: ident_of(&path).ino ^ 1,
    };
    let file = File::open(&path).unwrap();
    assert!(
        index_store::load(&dir, other, &file, built.file.len() as u64).is_none(),
        "an index of another inode was used"
    );
    // Shorter than the walked prefix: refused.
    let short = write_file(tmp.path(), "short", &built.file[..built.file.len() - 1]);
    let f = File::open(&short).unwrap();
    assert!(index_store::load(&dir, ident_of(&path), &f, built.file.len() as u64 - 1).is_none());
    fs::remove_dir_all(&dir).unwrap();

    // Through transcripts: the first open walks and saves, the next loads.
    let t1 = open_persisting(&path, &dir);
    assert_eq!(t1.frames_decoded(), no_size_frames, "the first open walks");
    assert!(
        fs::read_dir(&dir).unwrap().count() >= 1,
        "no index persisted"
    );
    let t2 = open_persisting(&path, &dir);
    assert_eq!(t2.frames_decoded(), 0, "the persisted index was not used");
    check_rest(&t2, &built.plain, 0);

    // Growth: the persisted index is extended, not rebuilt.
    let extra = lines_exact(&mut rng, &mut seq, 900);
    let extra_frame = streaming_frame(&extra, true);
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(&extra_frame)
        .unwrap();
    built.push(&extra_frame, &extra);
    let t3 = open_persisting(&path, &dir);
    assert_eq!(t3.frames_decoded(), 1, "only the new frame is walked");
    check_rest(&t3, &built.plain, 0);
    assert_eq!(
        t2.refresh().unwrap().plain_len,
        built.plain.len() as u64,
        "an open transcript follows the growth"
    );
    check_rest(&t2, &built.plain, 0);

    // Replaced (same bytes, another inode): the index is not used.
    let old_ident = ident_of(&path);
    let tmp_path = write_file(tmp.path(), "replacement", &built.file);
    fs::rename(&tmp_path, &path).unwrap();
    assert_ne!(ident_of(&path), old_ident);
    assert!(load(&dir, &path).is_none(), "index of the old inode used");
    let t4 = open_persisting(&path, &dir);
    assert_eq!(
        t4.frames_decoded(),
        no_size_frames + 1,
        "a replaced file is walked"
    );
    check_rest(&t4, &built.plain, 0);
    // The open transcripts rebuild their view of the new file too.
    assert_eq!(t2.refresh().unwrap().plain_len, built.plain.len() as u64);
    check_rest(&t2, &built.plain, 0);
    // t4 persisted the new inode's index.
    assert!(load(&dir, &path).is_some());

    // Same inode, rewritten in place: the last frame no longer walks the
    // same (another length), though the file is longer than the walked
    // prefix: the index is refused and the file walked again.
    let &(last_offset, last_plain_offset, _) = built.frames.last().unwrap();
    let new_last = lines_exact(&mut rng, &mut seq, 8000);
    let new_frame = encode_frame(&new_last).unwrap();
    assert_ne!(new_frame.len(), extra_frame.len());
    let ident = ident_of(&path);
    {
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(last_offset).unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&new_frame).unwrap();
    }
    assert_eq!(ident_of(&path), ident);
    assert!(fs::metadata(&path).unwrap().len() > built.file.len() as u64);
    assert!(
        load(&dir, &path).is_none(),
        "an index whose last frame changed was used"
    );
    built.file.truncate(last_offset as usize);
    built.plain.truncate(last_plain_offset as usize);
    built.frames.pop();
    built.push(&new_frame, &new_last);
    let t5 = open_persisting(&path, &dir);
    assert_eq!(
        t5.frames_decoded(),
        no_size_frames,
        "a changed file is walked again"
    );
    assert_eq!(t5.refresh().unwrap().plain_len, built.plain.len() as u64);
    check_rest(&t5, &built.plain, 0);
    assert_eq!(zstd_dc(&path), built.plain);
}

/// A transcript rewritten in place (same inode, same length, the same last
/// frame at the same offset) with other frame boundaries before it passes
/// the persisted index's load check: reads through the stale index fail
/// where its frames are no longer in the file, and then the file is walked
/// again (not loaded again from the stale index), so every read returns
/// the file's bytes, as `zstd -dc` gives them, on this open and the next.
#[test]
fn a_stale_persisted_index_that_passes_its_load_check_is_replaced() {
    // Frames of raw blocks, so their lengths are exact: frames 1 and 2
    // hold 60 + 60 bytes of lines in the first version, 40 + 80 in the
    // second; the 300 frames after them are the same bytes.
    let mut rng = Rng(0x57A1E);
    let build = |rng: &mut Rng, first: usize, second: usize| {
        let mut seq = 0;
        let mut b = Built::with_header();
        for n in [first, second] {
            let plain = lines_exact(rng, &mut seq, n);
            b.push(&raw_frame(Fcs::One, &plain), &plain);
        }
        let mut tail_rng = Rng(0x7A11);
        for _ in 0..300 {
            let plain = lines_exact(&mut tail_rng, &mut seq, 120);
            b.push(&raw_frame(Fcs::One, &plain), &plain);
        }
        b
    };
    let v1 = build(&mut rng, 60, 60);
    let v2 = build(&mut rng, 40, 80);
    assert_eq!(v1.file.len(), v2.file.len());
    assert_eq!(v1.frames.last().unwrap().0, v2.frames.last().unwrap().0);
    assert_ne!(v1.frames[2], v2.frames[2], "the boundaries must differ");

    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("index");
    let path = write_file(tmp.path(), "session.jsonl.zstd", &v1.file);
    let t1 = open_persisting(&path, &dir);
    check_rest(&t1, &v1.plain, 0);
    drop(t1);
    assert!(
        load(&dir, &path).is_some(),
        "the first open persisted no index"
    );

    // Rewritten in place: the same inode.
    let ident = ident_of(&path);
    OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .write_all_at(&v2.file, 0)
        .unwrap();
    assert_eq!(ident_of(&path), ident);
    assert_eq!(zstd_dc(&path), v2.plain);
    assert!(
        load(&dir, &path).is_some(),
        "the stale index must pass its load check for this test to mean anything"
    );

    let t2 = open_persisting(&path, &dir);
    check_rest(&t2, &v2.plain, 0);
    check_read(&t2, &v2.plain, 0, 4096);
    let replaced = load(&dir, &path).expect("the walk's index persisted");
    assert_eq!(replaced.frames(), index_of(&path).frames());
    drop(t2);
    let t3 = open_persisting(&path, &dir);
    assert_eq!(t3.frames_decoded(), 0, "the replaced index was not used");
    check_rest(&t3, &v2.plain, 0);
}
