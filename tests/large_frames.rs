//! Frames too large to cache are never decoded whole into memory: reads go
//! through a cursor that a sequential reader keeps using, so `cat` of a
//! frame of any size decodes it once (MOUNT.md, Reading: memory bounded).

use std::sync::Arc;

use sessionfs::store::frame::encode_frame;
use sessionfs::store::{Encoding, FrameCache, Transcript};

/// A data frame of `rle_blocks` RLE blocks of 128 KiB of `a`, then a raw
/// block holding `\n`; 8 MiB window, 8-byte content size, no checksum.
fn rle_frame(rle_blocks: u32) -> (Vec<u8>, u64) {
    rle_frame_ending(rle_blocks, b'\n')
}

/// As [`rle_frame`], its last byte `last`.
fn rle_frame_ending(rle_blocks: u32, last_byte: u8) -> (Vec<u8>, u64) {
    let content = u64::from(rle_blocks) * 131_072 + 1;
    let mut f = vec![0x28, 0xB5, 0x2F, 0xFD, 0xC0, 13 << 3];
    f.extend_from_slice(&content.to_le_bytes());
    for _ in 0..rle_blocks {
        let header: u32 = (1 << 1) | (131_072 << 3);
        f.extend_from_slice(&header.to_le_bytes()[..3]);
        f.push(b'a');
    }
    let last: u32 = 1 | (1 << 3);
    f.extend_from_slice(&last.to_le_bytes()[..3]);
    f.push(last_byte);
    (f, content)
}

/// A large frame ending inside a line is corruption, as a small one is: a
/// read that reaches its end fails, alone and with a frame after it (the
/// fresh tester's 9 MiB frame was served, glued to the next line).
#[test]
fn a_large_frame_ending_inside_a_line_fails_the_read_that_reaches_its_end() {
    let (frame, content) = rle_frame_ending(72, b'x'); // 9 MiB
    let next = encode_frame(b"{\"type\":\"x\",\"seq\":0,\"time\":1,\"data\":{}}\n").unwrap();
    for with_next in [false, true] {
        let mut bytes = frame.clone();
        if with_next {
            bytes.extend_from_slice(&next);
        }
        let (_dir, t, header) = transcript_with(&bytes);
        let end = header + content;
        // Before the end: the bytes, as they are.
        assert_eq!(t.read(header, 4096).unwrap().len(), 4096);
        let mut offset = header;
        let failed = loop {
            match t.read(offset, 1 << 20) {
                Ok(chunk) if chunk.is_empty() => break None,
                Ok(chunk) => offset += chunk.len() as u64,
                Err(e) => break Some(e),
            }
        };
        let e = failed.unwrap_or_else(|| panic!("read to {offset} of {end} without an error"));
        assert!(offset < end, "{e}: read to {offset}");
        assert!(e.to_string().contains("ends inside a line"), "{e}");
    }
}

fn transcript_with(frame: &[u8]) -> (tempfile::TempDir, Transcript, u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("session.jsonl.zstd");
    let header = b"{\"type\":\"session\",\"version\":0,\"id\":\"big\",\"createdAt\":1,\"delegationDepth\":0}\n";
    let mut bytes = encode_frame(header).unwrap();
    bytes.extend_from_slice(frame);
    std::fs::write(&path, bytes).unwrap();
    let t = Transcript::open(&path, Encoding::Zstd, Arc::new(FrameCache::new(16 << 20))).unwrap();
    (dir, t, header.len() as u64)
}

#[test]
fn a_sequential_read_of_a_large_frame_decodes_it_once() {
    let (frame, content) = rle_frame(512); // 64 MiB
    let (_dir, t, header) = transcript_with(&frame);
    assert_eq!(t.refresh().unwrap().plain_len, header + content);
    let before = t.frames_decoded();
    let mut offset = header;
    let mut total = 0u64;
    while offset < header + content {
        let chunk = t.read(offset, 1 << 20).unwrap();
        assert!(!chunk.is_empty());
        let end = offset + chunk.len() as u64 == header + content;
        let body = if end {
            &chunk[..chunk.len() - 1]
        } else {
            &chunk[..]
        };
        assert!(body.iter().all(|&b| b == b'a'), "at {offset}");
        if end {
            assert_eq!(chunk.last(), Some(&b'\n'));
        }
        offset += chunk.len() as u64;
        total += chunk.len() as u64;
    }
    assert_eq!(total, content);
    assert_eq!(t.frames_decoded() - before, 1, "the cursor was not reused");
}

#[test]
fn random_reads_of_a_large_frame_are_exact() {
    let (frame, content) = rle_frame(100);
    let (_dir, t, header) = transcript_with(&frame);
    let end = header + content;
    for (at, len) in [
        (end - 1, 1u32),
        (header, 10),
        (end - 100, 100),
        (header + 5_000_000, 4096),
        (header + 3, 7),
    ] {
        let got = t.read(at, len).unwrap();
        let want_len = (end - at).min(u64::from(len)) as usize;
        assert_eq!(got.len(), want_len, "at {at}");
        let last_is_newline = at + want_len as u64 == end;
        for (i, b) in got.iter().enumerate() {
            let is_last = last_is_newline && i == want_len - 1;
            assert_eq!(*b, if is_last { b'\n' } else { b'a' }, "at {at}+{i}");
        }
    }
}
