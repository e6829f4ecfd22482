//! Mounting: options, signals, clean unmount (MOUNT.md, Mount options).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fuser::{Config, MountOption, SessionACL};

use super::adapter::Adapter;
use super::fs::SessionFs;
use crate::store::{Encoding, Store, StoreOptions};

/// Everything `sessionfs mount` needs (MOUNT.md, Mount options).
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// The store root: the identity root's real path, resolved once.
    pub root: PathBuf,
    /// Where to mount.
    pub mountpoint: PathBuf,
    /// Refuse every write with EROFS.
    pub read_only: bool,
    /// The root's encoding, `None` to detect it.
    pub compression: Option<Encoding>,
    /// Batch window of appends (milliseconds).
    pub batch_ms: u64,
    /// Attribute and entry timeout of the kernel's cache.
    pub attr_timeout: Duration,
    /// Cap of the decoded-frame cache (bytes).
    pub cache_bytes: u64,
    /// Let other users reach the mount (`allow_other`).
    pub allow_other: bool,
    /// Raw `-o` options as mount(8) passes them, comma-separated items.
    pub options: Vec<String>,
    /// Where frame indexes of large transcripts are persisted (outside the
    /// store), `None` for nowhere.
    pub index_dir: Option<PathBuf>,
    /// Budget of the bytes all writers may hold uncommitted (bytes; a
    /// write past it fails with ENOSPC).
    pub pending_budget: u64,
}

/// How often the serving loop checks for a signal or an external unmount.
const POLL: Duration = Duration::from_millis(50);

/// Mount options from `-o` items, as mount(8) and fstab pass them.
/// `allow_other`/`allow_root` select who may use the mount; `ro` makes it
/// read-only; fsname/subtype are ours; the rest goes to the kernel.
fn mount_options(config: &MountConfig) -> (Vec<MountOption>, SessionACL, bool) {
    let mut read_only = config.read_only;
    let mut acl = if config.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    let mut out = vec![
        MountOption::FSName(format!("sessionfs:{}", config.root.display())),
        // The direct mount(2) path ignores Subtype; pass it raw.
        MountOption::CUSTOM("subtype=sessionfs".into()),
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    for item in config.options.iter().flat_map(|o| o.split(',')) {
        match item.trim() {
            "" | "rw" | "defaults" | "nodev" | "nosuid" | "default_permissions" => {}
            "ro" => read_only = true,
            "allow_other" => acl = SessionACL::All,
            "allow_root" => acl = SessionACL::RootAndOwner,
            "auto_unmount" => out.push(MountOption::AutoUnmount),
            "noatime" => out.push(MountOption::NoAtime),
            "noexec" => out.push(MountOption::NoExec),
            "exec" => out.push(MountOption::Exec),
            "sync" => out.push(MountOption::Sync),
            "async" => out.push(MountOption::Async),
            "dirsync" => out.push(MountOption::DirSync),
            // Options for mount(8) itself or for the helper, not the kernel.
            "auto" | "noauto" | "user" | "nouser" | "users" | "_netdev" | "nofail" => {}
            other if other.starts_with("x-") || other.starts_with("user=") => {}
            other if other.starts_with("max_read=") || other.starts_with("blksize=") => {
                out.push(MountOption::CUSTOM(other.to_string()))
            }
            // Access-time and device flags have no meaning for this file
            // system, and the FUSE kernel module refuses unknown options
            // (EINVAL): say so instead of failing the mount.
            other => log::warn!("mount option {other:?} is not used by sessionfs; ignoring it"),
        }
    }
    if read_only {
        out.push(MountOption::RO);
    }
    (out, acl, read_only)
}

/// A mount point left behind by a killed daemon answers ENOTCONN; it is
/// detached so that the new mount can take its place.
fn recover_stale_mountpoint(mountpoint: &Path) -> Result<(), String> {
    // Listing needs a live daemon; a stat may come from the kernel's
    // attribute cache of a dead mount.
    let probe = std::fs::read_dir(mountpoint).and_then(|_| std::fs::metadata(mountpoint));
    match probe {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!(
            "mount point {} is not a directory",
            mountpoint.display()
        )),
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            log::warn!(
                "mount point {} was left behind by a dead daemon (ENOTCONN); detaching it",
                mountpoint.display()
            );
            if unmount(mountpoint, libc::MNT_DETACH) {
                Ok(())
            } else {
                Err(format!(
                    "mount point {} is stale and could not be detached; run `umount -l {}` and retry",
                    mountpoint.display(),
                    mountpoint.display()
                ))
            }
        }
        Err(e) => Err(format!(
            "mount point {}: {e}; create the directory (mkdir -p) or pick another",
            mountpoint.display()
        )),
    }
}

/// The mount point and the index cache must lie outside the store: inside,
/// the mount would show itself (an endless tree), and the cache would
/// write into the store, which reads never do.
fn refuse_inside_root(config: &MountConfig) -> Result<(), String> {
    let root = &config.root;
    let inside = |p: &Path| resolved(p).starts_with(root);
    if inside(&config.mountpoint) {
        return Err(format!(
            "mount point {} is inside the session root {}; mount it elsewhere",
            config.mountpoint.display(),
            root.display()
        ));
    }
    if let Some(dir) = &config.index_dir {
        if inside(dir) {
            return Err(format!(
                "--index-cache {} is inside the session root {}; sessionfs never writes \
                 caches into the store: pick a directory outside it",
                dir.display(),
                root.display()
            ));
        }
    }
    Ok(())
}

/// `path` with symbolic links and `..` resolved, also when its last
/// components do not exist yet: the deepest existing ancestor is resolved
/// and the rest applied to it.
fn resolved(path: &Path) -> PathBuf {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let parts: Vec<std::path::Component> = abs.components().collect();
    for keep in (1..=parts.len()).rev() {
        let prefix: PathBuf = parts[..keep].iter().collect();
        let Ok(mut out) = prefix.canonicalize() else {
            continue;
        };
        for part in &parts[keep..] {
            match part {
                std::path::Component::ParentDir => {
                    out.pop();
                }
                std::path::Component::Normal(name) => out.push(name),
                _ => {}
            }
        }
        return out;
    }
    abs
}

/// `umount2(path, flags)`; true on success.
fn unmount(path: &Path, flags: i32) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated path.
    unsafe { libc::umount2(c.as_ptr(), flags) == 0 }
}

/// Raises the soft limit of open files to the hard limit: every open
/// transcript and passed-through file holds a descriptor.
fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Keeps freed heap memory for reuse instead of returning it to the kernel
/// after every read: frames and replies are allocated and freed at the
/// read rate, and re-faulting their pages cost more than decoding them.
/// The caches bound what is held.
fn keep_freed_memory() {
    // SAFETY: mallopt only tunes glibc's allocator.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, super::budget::KEEP_FREED_BYTES);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
    }
}

/// Read-ahead of the mount, in KiB. The kernel caps FUSE read-ahead at
/// 128 KiB during INIT; sequential reads of transcripts run about 2x faster
/// with 1 MiB requests (fewer round trips, more frames decoded ahead).
const READ_AHEAD_KB: u32 = 1024;

/// Raises the mount's read-ahead through its backing device info in sysfs
/// (root only; best effort: a failure only costs speed).
fn raise_read_ahead(mountpoint: &Path) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::metadata(mountpoint) else {
        return;
    };
    let dev = meta.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let knob = format!("/sys/class/bdi/{major}:{minor}/read_ahead_kb");
    if let Err(e) = std::fs::write(&knob, READ_AHEAD_KB.to_string()) {
        log::debug!("could not raise read-ahead ({knob}): {e}");
    }
}

fn spawn_named(name: &str, body: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(body)
        .map(|_| ())
        .map_err(|e| format!("cannot start thread {name}: {e}"))
}

/// Mounts and serves until SIGINT, SIGTERM or an external unmount.
///
/// Errors: a message naming what failed (root, mount point, mount call)
/// and what to do.
pub fn run_mount(config: MountConfig) -> Result<(), String> {
    raise_fd_limit();
    keep_freed_memory();
    let store = Store::open(
        &config.root,
        StoreOptions {
            compression: config.compression,
            cache_bytes: config.cache_bytes,
            index_dir: config.index_dir.clone(),
        },
    )
    .map_err(|e| format!("cannot open the session root: {e}"))?;
    recover_stale_mountpoint(&config.mountpoint)?;
    refuse_inside_root(&config)?;
    let (mut options, acl, mut read_only) = mount_options(&config);
    if options.contains(&MountOption::AutoUnmount) {
        if acl == SessionACL::Owner {
            return Err(
                "-o auto_unmount needs allow_root or allow_other as well (fusermount3 \
                        requires it); add -o allow_root"
                    .into(),
            );
        }
        let found = std::env::var_os("PATH")
            .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("fusermount3").is_file()));
        if !found {
            return Err(
                "-o auto_unmount needs the fusermount3 helper, which is not on PATH; \
                        install it (apt-get install fuse3) or drop auto_unmount"
                    .into(),
            );
        }
    }
    if !read_only {
        if let Err(e) = crate::store::publish::probe_publication_support(&config.root) {
            log::warn!(
                "new sessions cannot be published in {} ({e}); mounting read-only \
                 (pass --read-only to silence this)",
                config.root.display()
            );
            options.push(MountOption::RO);
            read_only = true;
        }
    }
    let mut fuse_config = Config::default();
    fuse_config.mount_options = options;
    fuse_config.acl = acl;
    // More request threads than cores: a request may wait for a transcript's
    // append lock, and the others must still be served meanwhile.
    fuse_config.n_threads = Some(4);
    fuse_config.clone_fd = true;

    let batch_window = Duration::from_millis(config.batch_ms);
    let mut core = SessionFs::new(Arc::new(store), batch_window);
    core.set_pending_budget(config.pending_budget);
    let core = Arc::new(core);
    let (invalidations, invalidated) = std::sync::mpsc::channel::<u64>();
    core.set_invalidation_channel(invalidations);
    let adapter = Adapter::new(Arc::clone(&core), config.attr_timeout);
    let session = fuser::Session::new(adapter, &config.mountpoint, &fuse_config).map_err(|e| {
        format!(
            "cannot mount {} on {}: {e}; mounting needs root (or fusermount3 and /dev/fuse access)",
            config.root.display(),
            config.mountpoint.display()
        )
    })?;
    // Kernel cache notifications are sent from this thread, never from a
    // request handler (MOUNT.md, Details; FUSE-NOTES §3).
    let notifier = session.notifier();
    spawn_named("sessionfs-notify", move || {
        for ino in invalidated {
            let _ = notifier.inval_inode(fuser::INodeNo(ino), -1, 0);
        }
    })?;
    let background = session
        .spawn()
        .map_err(|e| format!("cannot start the FUSE session: {e}"))?;
    raise_read_ahead(&config.mountpoint);
    if !read_only && !batch_window.is_zero() {
        let core = Arc::clone(&core);
        let tick = batch_window.min(POLL);
        spawn_named("sessionfs-commit", move || loop {
            std::thread::sleep(tick);
            core.commit_due();
        })?;
    }
    log::info!(
        "mounted {} at {} ({}, attribute timeout {:?}, batch window {:?}, cache {} bytes, \
         pending budget {} bytes)",
        config.root.display(),
        config.mountpoint.display(),
        if read_only { "read-only" } else { "read-write" },
        config.attr_timeout,
        batch_window,
        config.cache_bytes,
        config.pending_budget
    );

    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| format!("cannot install the signal handler: {e}"))?;
    }
    while !stop.load(Ordering::Relaxed) && !background.guard.is_finished() {
        std::thread::sleep(POLL);
    }
    if background.guard.is_finished() {
        log::info!("{} was unmounted; exiting", config.mountpoint.display());
        return background
            .join()
            .map_err(|e| format!("the FUSE session ended with an error: {e}"));
    }
    log::info!(
        "signal received; unmounting {}",
        config.mountpoint.display()
    );
    let committed = core.commit_all();
    if committed > 0 {
        log::info!("committed the pending lines of {committed} writer(s) before unmounting");
    }
    if let Err(e) = background.umount_and_join() {
        log::warn!(
            "unmounting {} failed ({e}), files are still open in it; detaching it lazily",
            config.mountpoint.display()
        );
        unmount(&config.mountpoint, libc::MNT_DETACH);
    }
    Ok(())
}
