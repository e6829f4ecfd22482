//! The one 64-bit hash of names that the crate keys things by: derived
//! inode numbers, listing cookies, the id index's body hashes, the seen
//! directories of a catalog and callers' view keys. It is xxh3 (the
//! `xxhash-rust` crate): its output for a given input is fixed by the
//! algorithm's specification, so numbers do not change between builds,
//! and a 60-byte name costs a few nanoseconds (SipHash, the standard
//! library's `DefaultHasher`, cost several times that, which showed in
//! the listing of every view directory). Not collision resistant against
//! chosen names; nothing here relies on that.

use xxhash_rust::xxh3::{xxh3_64, xxh3_64_with_seed};

/// The hash of `bytes`.
pub fn of(bytes: &[u8]) -> u64 {
    xxh3_64(bytes)
}

/// The hash of `bytes` under `seed` (a parent's number, another name's
/// hash): `(seed, bytes)` pairs hash apart from each other.
pub fn seeded(seed: u64, bytes: &[u8]) -> u64 {
    xxh3_64_with_seed(bytes, seed)
}

/// The hash of the pair `(first, second)`; `("ab", "c")` and `("a", "bc")`
/// hash apart.
pub fn pair(first: &[u8], second: &[u8]) -> u64 {
    seeded(of(first), second)
}

/// Bits of a [`session_key`]: the rest of a keyed inode number names what
/// links to the session (`fuse/inode.rs`).
pub const SESSION_KEY_BITS: u32 = 60;

/// A number for session directory `session` of project directory
/// `project` ([`SESSION_KEY_BITS`] bits of their [`pair`] hash): the same
/// in every catalog and view snapshot, so a `.by-id` or view link keeps
/// its inode number while its session is there.
pub fn session_key(project: &[u8], session: &[u8]) -> u64 {
    pair(project, session) & ((1 << SESSION_KEY_BITS) - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_split_differently_hash_apart() {
        assert_ne!(pair(b"ab", b"c"), pair(b"a", b"bc"));
        assert_ne!(pair(b"", b"x"), pair(b"x", b""));
    }

    #[test]
    fn the_output_is_xxh3s_specified_one() {
        // Test vector of the reference implementation (XXH3_64bits of the
        // empty input, seed 0).
        assert_eq!(of(b""), 0x2D06_8005_38D3_94C2);
        assert_eq!(seeded(0, b"abc"), of(b"abc"));
    }
}
