//! The FUSE adapter: maps kernel requests to store calls and store errors
//! to errno values. It holds no store logic.

mod adapter;
mod crash_hook;
pub mod fs;
mod fs_write;
mod inode;
mod run;
mod writer;

pub use run::{run_mount, MountConfig};
