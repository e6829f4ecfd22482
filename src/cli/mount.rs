//! `sessionfs mount`: its flags and the mount configuration built from
//! them.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::units::{parse_bytes, parse_seconds};
use super::{fail, EXIT_OK};
use crate::identity::IdentityRoot;
use crate::store::{Encoding, DEFAULT_CACHE_BYTES};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum Compression {
    /// `session.jsonl.zstd` transcripts.
    Zstd,
    /// Raw `session.jsonl` transcripts.
    None,
}

#[derive(Debug, Args)]
pub(super) struct MountArgs {
    /// The session store's root directory.
    pub(super) root: PathBuf,
    /// Where to mount it: an existing directory outside ROOT (what it holds
    /// is hidden while mounted).
    pub(super) mountpoint: PathBuf,
    /// Refuse every write (EROFS).
    #[arg(long)]
    pub(super) read_only: bool,
    /// The root's encoding [default: the root's own; zstd for an empty root].
    #[arg(long, value_enum)]
    pub(super) compression: Option<Compression>,
    /// Batch window of appends, in milliseconds (0 commits on every write).
    #[arg(long, value_name = "N", default_value_t = 200)]
    pub(super) batch_ms: u64,
    /// How long the kernel may cache attributes and names, in seconds
    /// (fractions allowed).
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = parse_seconds)]
    pub(super) attr_timeout: Duration,
    /// Cap of the decoded-frame cache, in bytes (suffixes K, M, G, KiB,
    /// MiB, GiB allowed; 1024-based) [default: 16 MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub(super) cache_size: Option<u64>,
    /// Let other users reach the mount (needs user_allow_other in
    /// /etc/fuse.conf unless run as root).
    #[arg(long)]
    pub(super) allow_other: bool,
    /// Mount options, comma-separated, as mount(8) passes them (repeatable).
    #[arg(short = 'o', value_name = "OPTIONS", action = clap::ArgAction::Append)]
    pub(super) options: Vec<String>,
    /// Where frame indexes of large transcripts are kept between mounts
    /// (outside the store), or `none` [default: $XDG_CACHE_HOME/sessionfs/index,
    /// else ~/.cache/sessionfs/index].
    #[arg(long, value_name = "DIR")]
    pub(super) index_cache: Option<PathBuf>,
}

pub(super) fn run(args: MountArgs) -> u8 {
    let identity = match IdentityRoot::resolve(&args.root) {
        Ok(identity) => identity,
        Err(e) => return fail(e),
    };
    let mountpoint = match std::path::absolute(&args.mountpoint) {
        Ok(p) => p,
        Err(e) => {
            return fail(format_args!(
                "mount point {}: cannot make it absolute ({e}); give an absolute path",
                args.mountpoint.display()
            ))
        }
    };
    let options = args
        .options
        .iter()
        .flat_map(|o| o.split(','))
        .map(str::trim)
        .filter(|o| !o.is_empty())
        .map(str::to_string)
        .collect();
    let config = crate::fuse::MountConfig {
        root: identity.io_path().to_path_buf(),
        mountpoint,
        read_only: args.read_only,
        compression: args.compression.map(|c| match c {
            Compression::Zstd => Encoding::Zstd,
            Compression::None => Encoding::Raw,
        }),
        batch_ms: args.batch_ms,
        attr_timeout: args.attr_timeout,
        cache_bytes: args.cache_size.unwrap_or(DEFAULT_CACHE_BYTES),
        index_dir: match args.index_cache {
            Some(dir) if dir.as_os_str() == "none" => None,
            Some(dir) => Some(dir),
            None => crate::store::index_store::default_index_dir(),
        },
        allow_other: args.allow_other,
        options,
    };
    match crate::fuse::run_mount(config) {
        Ok(()) => EXIT_OK,
        Err(e) => fail(e),
    }
}
