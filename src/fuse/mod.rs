//! The FUSE adapter: maps kernel requests to store calls and store errors
//! to errno values. It holds no store logic.

pub mod access;
mod adapter;
pub mod budget;
mod conflict;
mod crash_hook;
pub mod error;
pub mod fs;
#[cfg(test)]
mod fs_tests;
mod fs_write;
mod fusermount;
mod handles;
mod heap;
mod inode;
mod made_mode;
pub mod mount_table;
mod preflight;
mod rendered;
mod run;
pub mod status;
mod views;
mod writer;

pub use preflight::{probe_child, resolve_child, resolved, resolved_bounded};
pub use run::{run_mount, MountConfig};
