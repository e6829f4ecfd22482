//! The one classifier of what ends a frame walk: the end of the file, a
//! torn tail, or damage. The mount's view of a transcript, `sessionfs
//! check`, `--repair` and the append path all ask it, so that they never
//! disagree about what may be cut.
//!
//! Source: MOUNT.md ("The tree": damage after the header frame; a torn
//! tail is only a last frame that ends early with nothing verifiable after
//! it), FORMAT.md ("Reading and recovery").
//!
//! A walk fails at a frame start `at` when the file ends inside that frame
//! (torn) or its header or blocks are invalid (corrupt). The tail is torn
//! only when the failure is the file ending *and* nothing verifiable
//! follows: no later zstd frame magic starts a complete, checksummed frame
//! that decodes with a valid checksum. Otherwise the transcript is
//! damaged: verifiable data may resume later (`resumes_at`), and nothing is
//! ever cut.

use super::decode;
use super::frame::{walk_frame, FrameError, FrameInfo, FrameKind, ReadAt, Step, ZSTD_MAGIC};
use super::limits::{SCAN_BYTES, SCAN_CANDIDATES, SCAN_DECODE_BUDGET};

/// How a frame walk ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WalkEnd {
    /// The walk reached the end of the file.
    Clean,
    /// The file ends inside the frame that starts at byte `at`, and
    /// nothing verifiable follows: a torn tail, which a repair may cut
    /// (after copying it to the quarantine).
    Torn { at: u64 },
    /// The walk cannot go past byte `at` (a frame start): `reason` says
    /// why. Never cut.
    Damaged(Damage),
}

/// Damage that is not a torn tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset (compressed file) of the first frame that cannot be
    /// walked or verified; the verified prefix ends here.
    pub at: u64,
    /// What is wrong there.
    pub reason: String,
    /// Where the first verifiable frame after the damage starts, if one
    /// was found: the bytes from there on hold committed data.
    pub resumes_at: Option<u64>,
    /// Every byte from `at` to the end was examined and no verifiable
    /// frame starts there (not so when the search gave up, or when the
    /// damage is a complete frame that fails its checksum): cutting at `at`
    /// removes no verifiable frame.
    pub nothing_verifiable_follows: bool,
}

/// Why the walk stopped at a frame start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The file ends inside the frame.
    Torn,
    /// The frame is invalid; `reason` says how (with its own offset).
    Corrupt(String),
}

/// Classifies a walk of `src` (of `file_len` bytes) that stopped at the
/// frame start `at` with `failure`; `last` is the last frame the walk
/// delimited before `at` (`None` when `at` is the first frame).
///
/// When the last frame does not verify (or is a skippable frame, whose
/// size may be wrong), the search for verifiable data starts inside it, and
/// if verifiable data starts before `at`, the damage is put at that frame.
/// The search costs reads of 64 KiB and the decoding of candidate frames,
/// bounded by [`SCAN_BYTES`], [`SCAN_CANDIDATES`] and [`SCAN_DECODE_BUDGET`]; when the
/// budget runs out the failure is called damage (never a torn tail).
/// Holes of a sparse file ([`ReadAt::next_data`]) are skipped, not read,
/// and count toward [`SCAN_BYTES`] as the zeros they read as.
///
/// Errors: [`FrameError::Io`] when reading fails (never classified).
pub fn classify<R: ReadAt + ?Sized>(
    src: &R,
    file_len: u64,
    last: Option<&FrameInfo>,
    at: u64,
    failure: Failure,
) -> Result<WalkEnd, FrameError> {
    let suspect = match last {
        Some(info) => match info.kind {
            FrameKind::Skippable => Some(info),
            FrameKind::Data { .. } => match decode::verify(src, info) {
                Ok(_) => None,
                Err(FrameError::Io(e)) => return Err(FrameError::Io(e)),
                Err(FrameError::Corrupt { .. }) => Some(info),
            },
        },
        None => None,
    };
    let from = suspect.map_or(at + 1, |info| info.offset + 1);
    let found = find_verifiable(src, from, file_len)?;
    let reason = match &failure {
        Failure::Torn => format!(
            "the file ends inside the frame that starts at byte {at}, \
             and verifiable frames follow"
        ),
        Failure::Corrupt(why) => why.clone(),
    };
    Ok(match found {
        Found::At(resume) => match suspect {
            Some(info) if resume < at => WalkEnd::Damaged(Damage {
                at: info.offset,
                reason: format!(
                    "the frame at byte {} overlaps a verifiable frame at byte {resume}",
                    info.offset
                ),
                resumes_at: Some(resume),
                nothing_verifiable_follows: false,
            }),
            _ => WalkEnd::Damaged(Damage {
                at,
                reason,
                resumes_at: Some(resume),
                nothing_verifiable_follows: false,
            }),
        },
        Found::Nothing => match failure {
            Failure::Torn => WalkEnd::Torn { at },
            Failure::Corrupt(why) => WalkEnd::Damaged(Damage {
                at,
                reason: format!("{why}; nothing verifiable follows"),
                resumes_at: None,
                nothing_verifiable_follows: true,
            }),
        },
        Found::GaveUp => WalkEnd::Damaged(Damage {
            at,
            reason: format!(
                "{}; the bytes after it could not all be examined, so they are kept",
                match failure {
                    Failure::Torn => "the file ends inside this frame".to_string(),
                    Failure::Corrupt(why) => why,
                }
            ),
            resumes_at: None,
            nothing_verifiable_follows: false,
        }),
    })
}

/// Walks `src` from byte `from` to `file_len` and classifies how the walk
/// ends; the frames walked are passed to `on_frame` in file order (it may
/// stop the walk by returning `false`, which ends it as
/// [`WalkEnd::Clean`] at that point).
///
/// Errors: [`FrameError::Io`].
pub fn walk<R: ReadAt + ?Sized>(
    src: &R,
    from: u64,
    file_len: u64,
    last_before: Option<FrameInfo>,
    mut on_frame: impl FnMut(&FrameInfo) -> bool,
) -> Result<WalkEnd, FrameError> {
    let mut pos = from;
    let mut last = last_before;
    loop {
        let failure = match walk_frame(src, pos, file_len) {
            Ok(Step::End) => return Ok(WalkEnd::Clean),
            Ok(Step::Frame(info)) => {
                pos = info.offset + info.len;
                last = Some(info);
                if !on_frame(&info) {
                    return Ok(WalkEnd::Clean);
                }
                continue;
            }
            Ok(Step::Torn) => Failure::Torn,
            Err(FrameError::Io(e)) => return Err(FrameError::Io(e)),
            Err(FrameError::Corrupt { offset, reason }) => Failure::Corrupt(if offset == pos {
                reason
            } else {
                format!("{reason} at byte {offset}")
            }),
        };
        return classify(src, file_len, last.as_ref(), pos, failure);
    }
}

enum Found {
    At(u64),
    Nothing,
    GaveUp,
}

/// The first offset in `[from, file_len)` where a complete data frame with
/// a checksum starts and decodes with a valid checksum.
fn find_verifiable<R: ReadAt + ?Sized>(
    src: &R,
    from: u64,
    file_len: u64,
) -> Result<Found, FrameError> {
    const CHUNK: usize = 64 * 1024;
    let magic = ZSTD_MAGIC.to_le_bytes();
    let mut buf = vec![0u8; CHUNK + 3];
    let mut candidates = 0usize;
    let mut decoded = 0u64;
    let mut pos = from;
    let finder = memchr::memmem::Finder::new(&magic);
    while pos + 4 <= file_len {
        // A hole reads as zeros, and the magic number holds no zero byte:
        // the hole is examined without being read (a sparse file of 20 GiB
        // cost seconds of reading zeros). It counts toward the budget as
        // the zeros read would have, so the verdict is the one a read of
        // them gives (to within one chunk at the bound).
        let data = src.next_data(pos).min(file_len);
        if data > pos {
            pos = data;
            if pos + 4 > file_len {
                if file_len - from > SCAN_BYTES + 4 {
                    return Ok(Found::GaveUp);
                }
                break;
            }
        }
        if pos - from > SCAN_BYTES {
            return Ok(Found::GaveUp);
        }
        let want = ((file_len - pos) as usize).min(buf.len());
        let mut got = 0;
        while got < want {
            let n = src
                .read_at(&mut buf[got..want], pos + got as u64)
                .map_err(FrameError::Io)?;
            if n == 0 {
                break;
            }
            got += n;
        }
        if got < 4 {
            break;
        }
        for i in finder.find_iter(&buf[..got]) {
            let at = pos + i as u64;
            candidates += 1;
            if candidates > SCAN_CANDIDATES || decoded > SCAN_DECODE_BUDGET {
                return Ok(Found::GaveUp);
            }
            let info = match walk_frame(src, at, file_len) {
                Ok(Step::Frame(info)) => info,
                Ok(_) | Err(FrameError::Corrupt { .. }) => continue,
                Err(FrameError::Io(e)) => return Err(FrameError::Io(e)),
            };
            let FrameKind::Data {
                checksum: true,
                max_plain_len,
                ..
            } = info.kind
            else {
                continue;
            };
            decoded = decoded.saturating_add(max_plain_len);
            match decode::verify(src, &info) {
                Ok(_) => return Ok(Found::At(at)),
                Err(FrameError::Io(e)) => return Err(FrameError::Io(e)),
                Err(FrameError::Corrupt { .. }) => {}
            }
        }
        // The last 3 bytes are looked at again with the next chunk.
        pos += (got - 3) as u64;
    }
    Ok(Found::Nothing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::frame::encode_frame;

    fn frames(parts: &[&[u8]]) -> (Vec<u8>, Vec<u64>) {
        let mut file = Vec::new();
        let mut starts = Vec::new();
        for p in parts {
            starts.push(file.len() as u64);
            file.extend(encode_frame(p).unwrap());
        }
        (file, starts)
    }

    fn walk_all(file: &[u8]) -> WalkEnd {
        walk(file, 0, file.len() as u64, None, |_| true).unwrap()
    }

    /// A file of `head` followed by zeros up to `len` bytes (a sparse file
    /// of that size, without the disk).
    struct Zeros {
        head: Vec<u8>,
        len: u64,
        read: std::cell::Cell<u64>,
    }

    impl ReadAt for Zeros {
        fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<usize> {
            let n = buf.len().min(self.len.saturating_sub(offset) as usize);
            buf[..n].fill(0);
            if let Some(head) = self.head.get(offset as usize..) {
                let k = head.len().min(n);
                buf[..k].copy_from_slice(&head[..k]);
            }
            self.read.set(self.read.get() + n as u64);
            Ok(n)
        }
    }

    #[test]
    fn gigabytes_of_zeros_after_a_frame_are_given_up_after_the_scan_budget() {
        let (head, _) = frames(&[b"h\n"]);
        let at = head.len() as u64;
        let src = Zeros {
            head,
            len: 30 << 30,
            read: std::cell::Cell::new(0),
        };
        let end = walk(&src, 0, src.len, None, |_| true).unwrap();
        match end {
            WalkEnd::Damaged(d) => {
                assert_eq!(d.at, at);
                assert!(!d.nothing_verifiable_follows, "{d:?}");
                assert!(
                    d.reason.contains("could not all be examined"),
                    "{}",
                    d.reason
                );
            }
            other => panic!("{other:?}"),
        }
        let read = src.read.get();
        assert!(
            read <= SCAN_BYTES + (1 << 20),
            "{read} bytes read of a 30 GiB file; the budget is {SCAN_BYTES}"
        );
    }

    #[test]
    fn a_cut_last_frame_is_torn() {
        let (file, starts) = frames(&[b"h\n", b"a\n", b"bb\n"]);
        for cut in starts[2] as usize + 1..file.len() {
            assert_eq!(
                walk_all(&file[..cut]),
                WalkEnd::Torn { at: starts[2] },
                "cut {cut}"
            );
        }
        assert_eq!(walk_all(&file), WalkEnd::Clean);
    }

    #[test]
    fn a_huge_skippable_frame_before_intact_frames_is_damage() {
        let (head, _) = frames(&[b"h\n", b"{\"seq\":0}\n"]);
        let (tail, _) = frames(&[b"{\"seq\":1}\n", b"{\"seq\":2}\n"]);
        let mut file = head.clone();
        file.extend_from_slice(&0x184D_2A50u32.to_le_bytes());
        file.extend_from_slice(&u32::MAX.to_le_bytes());
        let resume = file.len() as u64;
        file.extend_from_slice(&tail);
        match walk_all(&file) {
            WalkEnd::Damaged(d) => {
                assert_eq!(d.at, head.len() as u64);
                assert_eq!(d.resumes_at, Some(resume));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn garbage_after_the_last_frame_is_damage_with_nothing_after() {
        let (mut file, _) = frames(&[b"h\n"]);
        let at = file.len() as u64;
        file.extend_from_slice(b"garbage!");
        match walk_all(&file) {
            WalkEnd::Damaged(d) => {
                assert_eq!((d.at, d.resumes_at), (at, None));
                assert!(d.reason.contains("invalid frame magic"), "{}", d.reason);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_last_frame_that_overlaps_a_verifiable_frame_is_the_damage() {
        let (mut file, starts) = frames(&[b"h\n", b"{\"seq\":0}\n", b"{\"seq\":1}\n"]);
        let (f1, f2) = (starts[1] as usize, starts[2] as usize);
        // Frame 1's first block claims more bytes than it has: the walker
        // takes a frame that runs into frame 2 and fails after it.
        let block_at = f1 + 6;
        let header =
            u32::from_le_bytes([file[block_at], file[block_at + 1], file[block_at + 2], 0]);
        let grown = header + ((((f2 - f1) as u32) / 2 + 8) << 3);
        file[block_at..block_at + 3].copy_from_slice(&grown.to_le_bytes()[..3]);
        match walk_all(&file) {
            WalkEnd::Damaged(d) => {
                assert_eq!((d.at, d.resumes_at), (f1 as u64, Some(f2 as u64)), "{d:?}")
            }
            other => panic!("{other:?}"),
        }
    }
}
