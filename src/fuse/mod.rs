//! The FUSE adapter: maps kernel requests to store calls and store errors
//! to errno values. It holds no store logic.

mod adapter;
pub mod fs;
#[cfg(test)]
mod fs_tests;
mod fs_write;
mod inode;
mod run;
mod writer;

pub use run::{run_mount, MountConfig};
