//! The FUSE adapter: maps kernel requests to store calls and store errors
//! to errno values. It holds no store logic.

mod adapter;
pub mod fs;
mod fs_write;
mod inode;
mod rendered;
mod run;
mod writer;

pub use run::{run_mount, MountConfig};
