//! The FUSE adapter: maps kernel requests to store calls and store errors
//! to errno values. It holds no store logic.

mod adapter;
pub mod fs;
mod inode;
mod run;

pub use run::{run_mount, MountConfig};
