//! Mutation tests (issue 9, Must show 2): transcripts of the corpus with
//! bit flips, byte insertions and deletions, truncations, duplicated and
//! swapped frames, skippable frames and huge size claims.
//!
//! For every case the bytes served equal the verified prefix computed
//! independently — libzstd's own frame delimiter and streaming decoder
//! (`zstd::zstd_safe`), frame by frame, up to the first frame that fails,
//! with the format's rules on top (the first frame is the header line, a
//! frame ends with a line, the reserved frame-header bits are 0) — never
//! more; and `check --repair` never removes a byte without a copy in the
//! quarantine folder, nor a frame that decodes with a valid checksum.
//!
//! Most cases run at the store level (`SESSIONFS_MUTATION_CASES`, default
//! 400); a sample goes through a real mount whose daemon runs under
//! RLIMIT_AS 256 MiB, each read under a 10 s deadline
//! (`SESSIONFS_MUTATION_MOUNT_ROUNDS` rounds of 23 sessions, default 2).
//! `scripts/torture.sh` raises both.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use proptest::prelude::*;
use sessionfs::store::check::check_transcript;
use sessionfs::store::frame::{walk_frame, Step};
use sessionfs::store::{Encoding, FrameCache, Transcript};
use zstd::zstd_safe::{self, DParameter, InBuffer, OutBuffer};

const AS_LIMIT: u64 = 256 << 20;

fn env_count(name: &str, default: u32) -> u32 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Every zstd transcript of the corpus' clean stores: path relative to its
/// root, bytes.
fn corpus_transcripts(case: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = common::corpus_dir().join(case).join("root");
    let mut out = Vec::new();
    for project in fs::read_dir(&root).unwrap().flatten() {
        if !project.path().is_dir() {
            continue;
        }
        for session in fs::read_dir(project.path()).unwrap().flatten() {
            let t = session.path().join("session.jsonl.zstd");
            if let Ok(bytes) = fs::read(&t) {
                out.push((t.strip_prefix(&root).unwrap().to_path_buf(), bytes));
            }
        }
    }
    out.sort();
    assert!(out.len() >= 20, "corpus {case}: {} transcripts", out.len());
    out
}

/// Frame boundaries of a clean transcript (to place mutations).
fn frame_spans(bytes: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut pos = 0u64;
    while let Ok(Step::Frame(f)) = walk_frame(bytes, pos, bytes.len() as u64) {
        spans.push((f.offset as usize, (f.offset + f.len) as usize));
        pos = f.offset + f.len;
    }
    spans
}

/// One frame, decoded by libzstd's streaming decoder (window capped as
/// sessionfs caps it), checksum verified; `None` on any error or when the
/// frame does not end where libzstd delimited it.
fn decode_one(frame: &[u8]) -> Option<Vec<u8>> {
    let mut d = zstd_safe::DCtx::create();
    d.set_parameter(DParameter::WindowLogMax(24)).ok()?;
    let mut input = InBuffer::around(frame);
    let mut out = Vec::new();
    let mut chunk = vec![0u8; 128 * 1024];
    loop {
        let mut output = OutBuffer::around(&mut chunk[..]);
        let hint = d.decompress_stream(&mut output, &mut input).ok()?;
        let n = output.pos();
        out.extend_from_slice(&chunk[..n]);
        if out.len() > 64 << 20 {
            return None;
        }
        if hint == 0 {
            return (input.pos() == frame.len()).then_some(out);
        }
        if n == 0 && input.pos() == frame.len() {
            return None;
        }
    }
}

/// The verified prefix of `data`, computed without sessionfs: frames
/// delimited by libzstd (`ZSTD_findFrameCompressedSize`), skippable frames
/// skipped, each decoded and verified by libzstd, up to the first failure;
/// the first data frame must be the header line `header`, later frames
/// must end with `\n`, and the reserved frame-header bits (mask 0x18, as
/// the reference checks) must be 0.
fn verified_prefix(data: &[u8], header: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut pos = 0;
    let mut first = true;
    while pos < data.len() {
        let rest = &data[pos..];
        let Ok(size) = zstd_safe::find_frame_compressed_size(rest) else {
            break;
        };
        let frame = &rest[..size];
        let magic = u32::from_le_bytes(frame[..4].try_into().unwrap());
        pos += size;
        if magic & 0xFFFF_FFF0 == 0x184D_2A50 {
            continue;
        }
        if frame[4] & 0x18 != 0 {
            break;
        }
        let Some(plain) = decode_one(frame) else {
            break;
        };
        if first {
            if plain != header {
                break;
            }
            first = false;
        } else if plain.last().is_some_and(|&b| b != b'\n') {
            break;
        }
        out.extend(plain);
    }
    out
}

/// Offsets in `data[from..]` where a checksummed frame starts that libzstd
/// decodes with a valid checksum.
fn verifiable_frames_from(data: &[u8], from: usize) -> Vec<usize> {
    (from..data.len().saturating_sub(4))
        .filter(|&p| data[p..p + 4] == [0x28, 0xB5, 0x2F, 0xFD])
        .filter(|&p| {
            let Ok(size) = zstd_safe::find_frame_compressed_size(&data[p..]) else {
                return false;
            };
            data[p + 4] & 0x04 != 0 && decode_one(&data[p..p + size]).is_some()
        })
        .collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    BitFlip { at: u32, bit: u8 },
    Insert { at: u32, byte: u8 },
    Delete { at: u32 },
    Truncate { at: u32 },
    Duplicate { frame: u32 },
    Swap { frame: u32 },
    Skippable { frame: u32, len: u16 },
    HugeSkippable { frame: u32 },
    HugeClaim { frame: u32, which: u8 },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<u32>(), 0..8u8).prop_map(|(at, bit)| Mutation::BitFlip { at, bit }),
        (any::<u32>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Insert { at, byte }),
        any::<u32>().prop_map(|at| Mutation::Delete { at }),
        any::<u32>().prop_map(|at| Mutation::Truncate { at }),
        any::<u32>().prop_map(|frame| Mutation::Duplicate { frame }),
        any::<u32>().prop_map(|frame| Mutation::Swap { frame }),
        (any::<u32>(), any::<u16>()).prop_map(|(frame, len)| Mutation::Skippable { frame, len }),
        any::<u32>().prop_map(|frame| Mutation::HugeSkippable { frame }),
        (any::<u32>(), 0..3u8).prop_map(|(frame, which)| Mutation::HugeClaim { frame, which }),
    ]
}

/// `bytes` with `m` applied.
fn apply(bytes: &[u8], m: &Mutation) -> Vec<u8> {
    let spans = frame_spans(bytes);
    let mut v = bytes.to_vec();
    let at = |x: u32| x as usize % bytes.len();
    let span = |x: u32| spans[x as usize % spans.len()];
    match *m {
        Mutation::BitFlip { at: a, bit } => v[at(a)] ^= 1 << bit,
        Mutation::Insert { at: a, byte } => v.insert(at(a), byte),
        Mutation::Delete { at: a } => {
            v.remove(at(a));
        }
        Mutation::Truncate { at: a } => v.truncate(at(a)),
        Mutation::Duplicate { frame } => {
            let (s, e) = span(frame);
            let copy = bytes[s..e].to_vec();
            v.splice(e..e, copy);
        }
        Mutation::Swap { frame } => {
            let k = frame as usize % spans.len();
            if k + 1 < spans.len() {
                let (a, b) = (spans[k], spans[k + 1]);
                let mut swapped = bytes[b.0..b.1].to_vec();
                swapped.extend_from_slice(&bytes[a.0..a.1]);
                v.splice(a.0..b.1, swapped);
            }
        }
        Mutation::Skippable { frame, len } => {
            let (s, _) = span(frame);
            let mut f = 0x184D_2A53u32.to_le_bytes().to_vec();
            f.extend_from_slice(&u32::from(len % 512).to_le_bytes());
            f.extend(std::iter::repeat_n(0xA5, usize::from(len % 512)));
            v.splice(s..s, f);
        }
        Mutation::HugeSkippable { frame } => {
            let (s, _) = span(frame);
            let mut f = 0x184D_2A50u32.to_le_bytes().to_vec();
            f.extend_from_slice(&u32::MAX.to_le_bytes());
            v.splice(s..s, f);
        }
        Mutation::HugeClaim { frame, which } => {
            let (s, e) = span(frame);
            let fhd = v[s + 4];
            let single = fhd & 0x20 != 0;
            let dict = [0, 1, 2, 4][usize::from(fhd & 3)];
            let fcs = match (fhd >> 6, single) {
                (0, false) => 0,
                (0, true) => 1,
                (f, _) => 1 << f,
            };
            let fcs_at = s + 5 + usize::from(!single) + dict;
            let block_at = fcs_at + fcs;
            match which {
                // The content size claims all it can hold.
                0 if fcs > 0 => v[fcs_at..fcs_at + fcs].fill(0xFF),
                // The window claims 2^41 bytes.
                1 if !single => v[s + 5] = 0xFF,
                // The first block claims 2 MiB.
                _ if block_at + 3 <= e => {
                    let keep = v[block_at] & 0x07;
                    v[block_at] = keep | 0xF8;
                    v[block_at + 1] = 0xFF;
                    v[block_at + 2] = 0x7F;
                }
                _ => v[s + 4] |= 0x08,
            }
        }
    }
    v
}

/// What the store serves of `path`: sequential reads from 0 until the
/// first error or the end (nothing when it cannot be opened).
fn served_by_store(path: &Path) -> Vec<u8> {
    let Ok(t) = Transcript::open(path, Encoding::Zstd, Arc::new(FrameCache::new(4 << 20))) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    loop {
        match t.read(out.len() as u64, 64 * 1024) {
            Ok(b) if b.is_empty() => return out,
            Ok(b) => out.extend(b),
            Err(_) => return out,
        }
    }
}

fn header_line(bytes: &[u8]) -> Vec<u8> {
    let (s, e) = frame_spans(bytes)[0];
    decode_one(&bytes[s..e]).unwrap()
}

/// One store-level case: the served bytes, and `--repair`'s safety.
fn check_case(dir: &Path, original: &[u8], mutated: &[u8], m: &Mutation) {
    let header = header_line(original);
    let want = verified_prefix(mutated, &header);
    let path = dir.join("session.jsonl.zstd");
    fs::write(&path, mutated).unwrap();
    let served = served_by_store(&path);
    assert!(
        served == want,
        "{m:?}: served {} bytes, the verified prefix is {} bytes",
        served.len(),
        want.len()
    );
    let report = check_transcript(&path, false).unwrap_or_else(|e| panic!("{m:?}: check: {e}"));
    assert_eq!(fs::read(&path).unwrap(), mutated, "{m:?}: check wrote");
    let repaired =
        check_transcript(&path, true).unwrap_or_else(|e| panic!("{m:?}: check --repair: {e}"));
    let after = fs::read(&path).unwrap();
    if repaired.repaired {
        let cut = repaired.torn_at.unwrap() as usize;
        assert_eq!(report.torn_at, Some(cut as u64), "{m:?}");
        assert_eq!(after, &mutated[..cut], "{m:?}: repair did more than cut");
        let copy = repaired.quarantined.as_ref().expect("a quarantine copy");
        assert_eq!(
            fs::read(copy).unwrap(),
            &mutated[cut..],
            "{m:?}: the quarantine copy is not the cut bytes"
        );
        let lost = verifiable_frames_from(mutated, cut);
        assert!(
            lost.is_empty(),
            "{m:?}: repair cut verifiable frames at {lost:?}"
        );
    } else {
        assert_eq!(after, mutated, "{m:?}: a refused repair changed the file");
    }
}

fn cases() -> u32 {
    env_count("SESSIONFS_MUTATION_CASES", 400)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    })]

    #[test]
    fn mutated_corpus_transcripts_serve_exactly_the_verified_prefix(
        pick in any::<u32>(),
        unpacked in any::<bool>(),
        m in mutation(),
    ) {
        let files = if unpacked { unpacked_files() } else { normal_files() };
        let (_, original) = &files[pick as usize % files.len()];
        let mutated = apply(original, &m);
        let dir = tempfile::tempdir().unwrap();
        std::env::set_var("XDG_STATE_HOME", state_home());
        check_case(dir.path(), original, &mutated, &m);
    }
}

fn normal_files() -> &'static [(PathBuf, Vec<u8>)] {
    static FILES: std::sync::OnceLock<Vec<(PathBuf, Vec<u8>)>> = std::sync::OnceLock::new();
    FILES.get_or_init(|| corpus_transcripts("normal"))
}

fn unpacked_files() -> &'static [(PathBuf, Vec<u8>)] {
    static FILES: std::sync::OnceLock<Vec<(PathBuf, Vec<u8>)>> = std::sync::OnceLock::new();
    FILES.get_or_init(|| corpus_transcripts("unpacked"))
}

/// The quarantine base of this test binary's repairs: in the build's
/// scratch folder, never `$HOME`; emptied once per run.
fn state_home() -> PathBuf {
    static HOME: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    HOME.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("mutation-state");
        let _ = fs::remove_dir_all(&dir);
        dir
    })
    .clone()
}

/// A small deterministic generator for the mount sample.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 16) as u32
    }
}

/// A sample through a real mount: each round mutates every session of a
/// copy of the corpus' `normal` store once, mounts it with the daemon under
/// RLIMIT_AS 256 MiB, and reads each transcript with `cat` under a 10 s
/// deadline: the output is the verified prefix, the daemon never dies.
#[test]
fn mutated_transcripts_through_a_mount_under_an_address_space_limit() {
    let rounds = env_count("SESSIONFS_MUTATION_MOUNT_ROUNDS", 2);
    let mut rng = XorShift(0x5E55_10F5_D00D_F00D);
    for round in 0..rounds {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        common::copy_tree(&common::corpus_dir().join("normal/root"), &root);
        let mut expected = Vec::new();
        for (i, (rel, original)) in normal_files().iter().enumerate() {
            let (a, b) = (rng.next(), rng.next());
            let m = match (i + round as usize) % 9 {
                0 => Mutation::BitFlip {
                    at: a,
                    bit: (b % 8) as u8,
                },
                1 => Mutation::Insert {
                    at: a,
                    byte: b as u8,
                },
                2 => Mutation::Delete { at: a },
                3 => Mutation::Truncate { at: a },
                4 => Mutation::Duplicate { frame: a },
                5 => Mutation::Swap { frame: a },
                6 => Mutation::Skippable {
                    frame: a,
                    len: b as u16,
                },
                7 => Mutation::HugeSkippable { frame: a },
                _ => Mutation::HugeClaim {
                    frame: a,
                    which: (b % 3) as u8,
                },
            };
            let mutated = apply(original, &m);
            fs::write(root.join(rel), &mutated).unwrap();
            let want = verified_prefix(&mutated, &header_line(original));
            expected.push((rel.with_extension(""), m, want));
        }
        let mut mount = common::Mount::start_with_rlimit_as(&root, &[], AS_LIMIT);
        for (view, m, want) in &expected {
            let path = mount.join(view);
            let out = Command::new("timeout")
                .args(["-k", "2", "10", "cat"])
                .arg(&path)
                .output()
                .unwrap();
            assert_ne!(
                out.status.code(),
                Some(124),
                "{m:?}: cat of {} hung",
                view.display()
            );
            assert!(
                out.stdout == *want,
                "{m:?}: {} served {} bytes, the verified prefix is {} bytes",
                view.display(),
                out.stdout.len(),
                want.len()
            );
            mount.assert_alive();
        }
        mount.stop();
    }
}
