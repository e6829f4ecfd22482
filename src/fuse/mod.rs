//! The FUSE adapter: maps kernel requests to store calls and store errors
//! to errno values. It holds no store logic.

pub mod access;
mod adapter;
pub mod budget;
pub mod error;
pub mod fs;
mod fs_write;
mod handles;
mod inode;
mod run;
mod writer;

pub use run::{run_mount, MountConfig};
