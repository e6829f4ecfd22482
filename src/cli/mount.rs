//! `sessionfs mount`: its flags (each also an `-o` option, see
//! [`super::options`]), the mount configuration built from them, and the
//! daemon's readiness report (mount(8)'s helper pipe, systemd's
//! `NOTIFY_SOCKET`).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, FromArgMatches, ValueEnum};

use super::options::{self, MountOptions};
use super::units::{parse_bytes, parse_seconds};
use super::{fail, helper, remount, EXIT_OK, EXIT_USAGE};
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
    /// MiB, GiB allowed; 1024-based) [default: 8 MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub(super) cache_size: Option<u64>,
    /// Budget of the bytes all writers may hold uncommitted (incomplete
    /// lines included), in bytes (suffixes as for --cache-size); a write
    /// past it fails with ENOSPC [default: 32 MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub(super) pending_budget: Option<u64>,
    /// Let other users reach the mount (needs user_allow_other in
    /// /etc/fuse.conf unless run as root).
    #[arg(long)]
    pub(super) allow_other: bool,
    /// Let root reach the mount besides the user who mounted it.
    #[arg(long)]
    pub(super) allow_root: bool,
    /// Have fusermount3 remove the mount if the daemon dies (needs
    /// --allow-root or --allow-other, and fusermount3).
    #[arg(long)]
    pub(super) auto_unmount: bool,
    /// Mount options, comma-separated, as mount(8) passes them
    /// (repeatable): every flag above by its name with `_` for `-`
    /// (attr_timeout=0.5, batch_ms=0, cache_size=64M, index_cache=none,
    /// compression=zstd, allow_other, ...), `ro`, kernel options (noexec,
    /// noatime, sync, max_read=N), and mount(8)'s generic options.
    #[arg(short = 'o', value_name = "OPTIONS", action = clap::ArgAction::Append)]
    pub(super) options: Vec<String>,
    /// Where frame indexes of large transcripts are kept between mounts
    /// (outside the store), or `none` [default: $XDG_CACHE_HOME/sessionfs/index,
    /// else ~/.cache/sessionfs/index].
    #[arg(long, value_name = "DIR")]
    pub(super) index_cache: Option<PathBuf>,
}

/// `sessionfs mount …` as parsed first (`args` is the whole command line,
/// `helper_form` when mount(8) ran `sessionfs ROOT MOUNTPOINT -o …`):
/// expands `-o` into flags, then remounts, detaches (helper form) or
/// mounts in the foreground.
pub(super) fn dispatch(
    first: MountArgs,
    args: &[OsString],
    helper_form: bool,
    mount_command: clap::Command,
) -> u8 {
    let options = match options::parse(&mount_command, &first.options) {
        Ok(o) => o,
        Err(e) => {
            fail(e);
            return EXIT_USAGE;
        }
    };
    if options.remount {
        return remount::run(&first.mountpoint, &options);
    }
    if helper_form {
        return helper::run_detached(args, &first.mountpoint);
    }
    // The flags from -o come first, so that a flag on the command line
    // wins over the same option in -o.
    let mut argv: Vec<OsString> = vec![args[0].clone()];
    argv.extend(options.flags.iter().cloned());
    argv.extend(args.iter().skip(2).cloned());
    let matches = match mount_command.clone().try_get_matches_from(argv) {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            return EXIT_USAGE;
        }
    };
    let settings = options::settings(&mount_command, &matches);
    match MountArgs::from_arg_matches(&matches) {
        Ok(args) => run(args, &options, settings),
        Err(e) => {
            let _ = e.print();
            EXIT_USAGE
        }
    }
}

fn run(
    args: MountArgs,
    options: &MountOptions,
    settings: serde_json::Map<String, serde_json::Value>,
) -> u8 {
    let identity = match IdentityRoot::resolve(&args.root) {
        Ok(identity) => identity,
        Err(e) => return fail(e),
    };
    let mountpoint = match crate::fuse::resolved_bounded(&args.mountpoint) {
        Ok(path) => path,
        Err(why) => return fail(why),
    };
    // Resolved once, at start-up: the status file and every later use
    // name the same absolute folder whatever the working directory.
    let index_dir = match args.index_cache {
        Some(dir) if dir.as_os_str() == "none" => None,
        // An existing folder by its real path; another made absolute.
        Some(dir) => match std::fs::canonicalize(&dir).or_else(|_| std::path::absolute(&dir)) {
            Ok(abs) => Some(abs),
            Err(e) => {
                return fail(format!(
                    "--index-cache {}: cannot make it an absolute path ({e}); give an absolute \
                     path",
                    crate::store::error::Shown(&dir)
                ))
            }
        },
        None => crate::store::index_store::default_index_dir(),
    };
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
        index_dir,
        allow_other: args.allow_other,
        allow_root: args.allow_root,
        auto_unmount: args.auto_unmount,
        kernel_options: options.kernel.clone(),
        settings,
        pending_budget: args
            .pending_budget
            .unwrap_or(crate::fuse::budget::DEFAULT_PENDING_BUDGET),
    };
    let on_ready = || {
        helper::report_ready();
        // systemd's Type=notify: READY=1 once the mount answers requests.
        if let Err(e) = sd_notify::notify(&[sd_notify::NotifyState::Ready]) {
            log::warn!("cannot notify the service manager (NOTIFY_SOCKET): {e}");
        }
    };
    match crate::fuse::run_mount(config, super::stop_flag(), on_ready) {
        Ok(()) => EXIT_OK,
        Err(e) => fail(e),
    }
}
