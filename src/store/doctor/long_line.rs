//! A transcript whose last line is longer than sessionfs holds to
//! continue a session ([`MAX_LINE_BYTES`], its newline included): it
//! reads as it is, but the mount and `sessionfs append` refuse to append
//! to it (they need that line for the next `seq`;
//! [`crate::store::error::StoreError::LastLineTooLong`]). Reported only.

use std::path::Path;

use super::super::limits::MAX_LINE_BYTES;
use super::finding::{Finding, Kind};

/// The finding for a transcript at `path` whose last line starts at
/// decoded byte `start` and is `len` bytes long, its newline included
/// (the file offset `at`: the frame holding the line's end, or the
/// line's start in a raw transcript); `None` when the line is no longer
/// than [`MAX_LINE_BYTES`].
pub fn last_line_finding(path: &Path, start: u64, len: u64, at: u64) -> Option<Finding> {
    if len <= MAX_LINE_BYTES as u64 {
        return None;
    }
    let detail = format!(
        "the last line (from byte {start} of the decoded transcript) is {len} bytes, its newline \
         included: longer than the {MAX_LINE_BYTES} bytes (16 MiB) sessionfs holds to continue \
         a session, so the mount and `sessionfs append` refuse to append to it (EFBIG); it \
         reads as it is"
    );
    Some(Finding::new(path, Kind::LastLineTooLong, detail).at(at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_line_over_the_limit_with_its_newline_is_reported() {
        let p = Path::new("/r/p/s/session.jsonl.zstd");
        let max = MAX_LINE_BYTES as u64;
        assert!(last_line_finding(p, 90, max, 7).is_none());
        let f = last_line_finding(p, 90, max + 1, 7).unwrap();
        assert_eq!((f.kind, f.offset), (Kind::LastLineTooLong, Some(7)));
        assert!(
            f.detail.contains(&format!("{} bytes", max + 1)),
            "{}",
            f.detail
        );
        assert!(f.detail.contains("byte 90"), "{}", f.detail);
        assert!(f.fix.contains("new session"), "{}", f.fix);
    }
}
