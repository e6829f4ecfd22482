//! sessionfs: a FUSE file system that shows zstd-framed JSONL session
//! transcripts (the DeepSeek Harness store, `../shared/spec/FORMAT.md`) as
//! plain, decompressed, append-only `session.jsonl` files.
//!
//! The crate has two layers:
//! - [`store`]: the on-disk format (naming, header, frames, frame index,
//!   discovery). It knows nothing of FUSE and is tested without a mount.
//! - [`fuse`]: a thin adapter that maps kernel requests to store calls and
//!   store errors to errno values.

pub mod api;
pub mod cli;
pub mod fuse;
pub mod identity;
pub mod store;
