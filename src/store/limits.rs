//! Fixed caps on what a file's contents may make sessionfs allocate or
//! decode. Numbers read from disk (content sizes, window sizes, block
//! sizes, skippable sizes) are claims; every allocation they could size is
//! bounded by one of these instead (FORMAT.md, Transcript encoding).

/// Longest line sessionfs holds in memory, in bytes (16 MiB): a header
/// line, the last line of a frame when the next `seq` is looked up. A
/// longer header line is its own error ("header line longer than …").
pub const MAX_LINE_BYTES: usize = 16 << 20;

/// Largest decompressed frame held whole in memory (bytes, 8 MiB). Larger
/// frames are only ever read through a streaming decoder.
pub const MAX_WHOLE_FRAME: u64 = 8 << 20;

/// Base-2 logarithm of the largest zstd window a frame may need (16 MiB):
/// frames needing more are refused when decoded (zstd level 19 needs
/// 8 MiB; the reference writes at level 3, 2 MiB at most).
pub const MAX_WINDOW_LOG: u32 = 24;

/// Decompressed bytes the damage classifier may decode in all while it
/// looks for a verifiable frame after a failed walk (bytes, 1 GiB).
pub const SCAN_DECODE_BUDGET: u64 = 1 << 30;

/// Bytes the damage classifier searches at most for a frame magic number
/// after a failed walk before it gives up (bytes, 1 GiB): a file of
/// gigabytes of garbage (or a sparse file of zeros) is called damaged, its
/// bytes kept, in about a second instead of being searched to its end.
pub const SCAN_BYTES: u64 = 1 << 30;

/// Frame magic numbers the damage classifier tries at most after a failed
/// walk before it gives up (and then never calls the tail torn).
pub const SCAN_CANDIDATES: usize = 4096;
