//! Holes of sparse files: where the next bytes that are not known to be
//! zeros start, so that a search for a frame magic number (which holds no
//! zero byte) skips the holes instead of reading them. A transcript grown
//! by `truncate -s 20G` is 20 GiB of holes after its frames; reading them
//! cost the mount seconds of CPU while `lseek(SEEK_DATA)` answers at once.
//!
//! Source: lseek(2) (`SEEK_DATA`, Linux 3.1); file systems without it
//! report the whole file as data (the generic implementation), and an
//! error other than `ENXIO` is taken the same way: the bytes are read.

use std::fs::File;
use std::os::unix::io::AsRawFd;

/// The offset at or after `offset` where the next bytes of `file` that
/// may not be zeros start (`lseek(SEEK_DATA)`): `offset` itself when they
/// start there or when the file system cannot tell, `u64::MAX` when only
/// holes follow up to the end of the file (`ENXIO`, also when `offset` is
/// at or past the end).
pub fn next_data(file: &File, offset: u64) -> u64 {
    let Ok(at) = libc::off_t::try_from(offset) else {
        return offset;
    };
    // SAFETY: a valid descriptor; lseek reads no memory. The descriptor's
    // file position moves, which no reader of a transcript relies on (all
    // reads are positioned: pread).
    let found = unsafe { libc::lseek(file.as_raw_fd(), at, libc::SEEK_DATA) };
    if found >= 0 {
        return (found as u64).max(offset);
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENXIO) => u64::MAX,
        _ => offset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    #[test]
    fn holes_are_skipped_and_data_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse");
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.write_all_at(b"head", 0).unwrap();
        let far = 64u64 << 20;
        f.write_all_at(b"tail", far).unwrap();
        f.set_len(far + (64 << 20)).unwrap();
        assert_eq!(next_data(&f, 0), 0);
        assert_eq!(next_data(&f, 2), 2);
        let after_head = next_data(&f, 1 << 20);
        // A file system without holes says "data here"; one with holes
        // skips to the block of the tail.
        assert!(
            after_head == 1 << 20 || (after_head <= far && after_head > 1 << 20),
            "{after_head}"
        );
        if after_head != 1 << 20 {
            assert_eq!(next_data(&f, far + (1 << 20)), u64::MAX);
        }
        assert_eq!(next_data(&f, far + (128 << 20)), u64::MAX);
    }
}
