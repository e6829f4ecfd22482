//! Mounting and serving: the mount call, readiness, the serving loop and
//! the daemon's own unmount (MOUNT.md, Mount options).
//!
//! Life of a mount: the caller installs the SIGINT/SIGTERM flag before
//! anything else; [`preflight`] checks everything that can be checked
//! before mounting; the mount is made and its mount id noted; the daemon
//! reports readiness once the mount answers a request; on a signal it
//! commits pending lines and unmounts its own mount (found by mount id,
//! never by path alone); on an external unmount it only exits.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{Config, MountOption, SessionACL};

use super::adapter::Adapter;
use super::fs::{Invalidation, SessionFs};
use super::mount_table::{self, MountEntry};
use super::preflight;
use super::status::{StatusFile, StatusInfo};
use crate::store::{Encoding, Store, StoreOptions};

/// Everything `sessionfs mount` needs (MOUNT.md, Mount options).
#[derive(Debug, Clone)]
pub struct MountConfig {
    /// The store root: the identity root's real path, resolved once.
    pub root: PathBuf,
    /// Where to mount (absolute).
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
    /// Let root reach the mount besides its owner (`allow_root`).
    pub allow_root: bool,
    /// Have `fusermount3` remove the mount if the daemon dies
    /// (`auto_unmount`; needs `allow_root` or `allow_other`).
    pub auto_unmount: bool,
    /// Options for the kernel as mount(8) passes them (`noexec`,
    /// `noatime`, `sync`, `max_read=N`, …), one item each.
    pub kernel_options: Vec<String>,
    /// Where frame indexes of large transcripts are persisted (outside the
    /// store), `None` for nowhere.
    pub index_dir: Option<PathBuf>,
    /// Every sessionfs option by its `-o` name with the value in effect,
    /// for `.sessionfs-status`.
    pub settings: serde_json::Map<String, serde_json::Value>,
    /// Budget of the bytes all writers may hold uncommitted (bytes; a
    /// write past it fails with ENOSPC).
    pub pending_budget: u64,
}

/// How often the serving loop checks for a signal or an external unmount.
const POLL: Duration = Duration::from_millis(50);

/// How long the daemon waits for its new mount to answer a first request.
const READY_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the daemon waits for the session to end after unmounting.
const END_TIMEOUT: Duration = Duration::from_secs(3);

/// fuser mount options and access control for `config`: fsname and subtype
/// are ours; `kernel_options` go to the kernel as given.
fn mount_options(config: &MountConfig, read_only: bool) -> (Vec<MountOption>, SessionACL) {
    let acl = if config.allow_other {
        SessionACL::All
    } else if config.allow_root {
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    let mut out = vec![
        MountOption::FSName(fs_name(config)),
        // The direct mount(2) path ignores Subtype; pass it raw.
        MountOption::CUSTOM("subtype=sessionfs".into()),
        MountOption::DefaultPermissions,
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    for item in &config.kernel_options {
        out.push(match item.as_str() {
            "noatime" => MountOption::NoAtime,
            "noexec" => MountOption::NoExec,
            "sync" => MountOption::Sync,
            "async" => MountOption::Async,
            "dirsync" => MountOption::DirSync,
            other => MountOption::CUSTOM(other.to_string()),
        });
    }
    if config.auto_unmount {
        out.push(MountOption::AutoUnmount);
    }
    if read_only {
        out.push(MountOption::RO);
    }
    (out, acl)
}

/// `fusermount3 -o` options for `config`: what [`mount_options`] gives
/// the kernel, spelled as fusermount3 takes them.
fn fusermount_options(config: &MountConfig, read_only: bool) -> Vec<String> {
    let mut out = vec![
        format!("fsname={}", fs_name(config)),
        "subtype=sessionfs".to_string(),
        "default_permissions".to_string(),
        "nodev".to_string(),
        "nosuid".to_string(),
    ];
    out.extend(config.kernel_options.iter().cloned());
    if config.allow_other || config.allow_root {
        // fuser filters the requests of others for allow_root.
        out.push("allow_other".to_string());
    }
    if read_only {
        out.push("ro".to_string());
    }
    out
}

/// The mount's source as mountinfo shows it: `sessionfs:<ROOT>`.
fn fs_name(config: &MountConfig) -> String {
    format!("{}{}", mount_table::SOURCE_PREFIX, config.root.display())
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
/// The caches bound what is held. At most two malloc arenas: glibc
/// reserves 64 MiB of address space for each thread's arena, which under an
/// address-space limit (`RLIMIT_AS` of 256 MiB) left no room for the
/// request buffers, and the daemon aborted at start. Allocations of 4 MiB
/// and more are mapped on their own: fuser's request buffers (16 MiB +
/// 4 KiB per thread, zeroed) then start as untouched zero pages, where
/// carved from freed heap memory `calloc` cleared, so made resident, all of
/// them; and a writer's incomplete line, which grows to 16 MiB in a buffer
/// that doubles, goes back to the kernel from its 4 MiB steps on when
/// freed, whatever thread frees it (`malloc_trim` does not shrink the top
/// of a thread's arena; under a 16 MiB threshold a 16 MiB line's buffer
/// stayed resident after its handle closed, seen in CI on 2 cores).
fn keep_freed_memory() {
    // SAFETY: mallopt only tunes glibc's allocator.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_TRIM_THRESHOLD, super::budget::KEEP_FREED_BYTES);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 4 << 20);
    }
}

/// Read-ahead of the mount, in KiB. The kernel caps FUSE read-ahead at
/// 128 KiB during INIT; sequential reads of transcripts run about 2x faster
/// with 1 MiB requests (fewer round trips, more frames decoded ahead).
const READ_AHEAD_KB: u32 = 1024;

/// Raises the read-ahead of the mount's device `dev` (`major:minor`)
/// through its backing device info in sysfs (root only; best effort: a
/// failure only costs speed).
fn raise_read_ahead(dev: &str) {
    let knob = format!("/sys/class/bdi/{dev}/read_ahead_kb");
    if let Err(e) = std::fs::write(&knob, READ_AHEAD_KB.to_string()) {
        log::debug!("could not raise read-ahead ({knob}): {e}");
    }
}

/// How long after the mount starts the survey of encodings begins.
const SURVEY_DELAY: Duration = Duration::from_secs(2);

/// Puts the calling thread in the idle scheduling class for CPU
/// (`SCHED_IDLE`) and disk (`IOPRIO_CLASS_IDLE`): it runs only when
/// nothing else wants the core or the disk. Best effort: a refusal
/// leaves the thread as it was.
fn background_priority() {
    // SAFETY: sched_setscheduler and ioprio_set on the calling thread
    // (pid 0), with a parameter struct we own.
    unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param);
        const IOPRIO_WHO_PROCESS: libc::c_long = 1;
        const IOPRIO_CLASS_IDLE: libc::c_long = 3;
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0 as libc::c_long,
            IOPRIO_CLASS_IDLE << 13,
        );
    }
}

fn spawn_named(name: &str, body: impl FnOnce() + Send + 'static) -> Result<(), String> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(body)
        .map(|_| ())
        .map_err(|e| format!("cannot start thread {name}: {e}"))
}

/// Why the serving loop ended.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// SIGINT or SIGTERM.
    Signal,
    /// The mount was removed from outside (`umount`, `fusermount3 -u`).
    Unmounted,
}

/// Mounts and serves until SIGINT, SIGTERM (`stop` set) or an external
/// unmount. `on_ready` runs once the mount answers requests (readiness
/// for mount(8)'s helper and systemd). A signal before the mount is made
/// ends start-up with `Ok` and nothing mounted.
///
/// Errors: a message naming what failed (root, mount point, options,
/// mount call) and what to do; nothing is mounted then.
pub fn run_mount(
    config: MountConfig,
    stop: Arc<AtomicBool>,
    on_ready: impl FnOnce(),
) -> Result<(), String> {
    raise_fd_limit();
    keep_freed_memory();
    let mut read_only = preflight::check(&config)?;
    // What the root lives on (logged once, nothing written); a kind that
    // cannot give the commit protocol what it needs mounts read-only.
    let root_fs = crate::store::fskind::detect(&config.root);
    root_fs.log_once();
    if !read_only {
        if let Err(reason) = root_fs.writability() {
            log::warn!("{reason}");
            eprintln!("sessionfs: {reason}");
            read_only = true;
        }
    }
    let store = Store::open(
        &config.root,
        StoreOptions {
            compression: config.compression,
            cache_bytes: config.cache_bytes,
            index_dir: config.index_dir.clone(),
            catalog_ttl: config.attr_timeout,
        },
    )
    .map_err(|e| format!("cannot open the session root: {e}"))?;
    crate::store::decode::warm_up();
    store.frame_cache().start_prefetch();
    if stop.load(Ordering::SeqCst) {
        log::info!("signal received before mounting; exiting");
        return Ok(());
    }
    let (options, acl) = mount_options(&config, read_only);
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
    core.set_single_caller(!(config.allow_other || config.allow_root));
    let core = Arc::new(core);
    // The survey walks the whole root (two `stat`s a session) for a log
    // line only: it waits until the mount's first requests were answered
    // and then runs only on an idle core and disk (measured: started at
    // once, it took a quarter of the CPU of a fresh mount's first `find`
    // over the views).
    let survey = Arc::clone(&core.store);
    spawn_named("sessionfs-survey", move || {
        std::thread::sleep(SURVEY_DELAY);
        background_priority();
        survey.report_mixed_encodings()
    })?;
    // The first listing of a view after a mount need not wait for the
    // views' snapshot (see `warm_views`).
    let warm = Arc::clone(&core);
    spawn_named("sessionfs-views", move || {
        warm.warm_views();
        warm.sweep_views()
    })?;
    let (invalidations, invalidated) = std::sync::mpsc::channel::<Invalidation>();
    core.set_invalidation_channel(invalidations);
    let mut settings = config.settings.clone();
    settings.insert("ro".into(), read_only.into());
    // Options left to their defaults show the value in effect.
    let store = core.store();
    let effective: [(&str, String); 4] = [
        (
            "compression",
            format!("{:?}", store.encoding()).to_lowercase(),
        ),
        ("cache_size", config.cache_bytes.to_string()),
        ("pending_budget", config.pending_budget.to_string()),
        (
            "index_cache",
            store
                .index_dir()
                .map_or_else(|| "none".to_string(), |d| d.display().to_string()),
        ),
    ];
    for (key, value) in effective {
        // The index folder as resolved at start-up, not as given.
        if key == "index_cache" || settings.get(key).is_none_or(serde_json::Value::is_null) {
            settings.insert(key.into(), value.into());
        }
    }
    for item in &config.kernel_options {
        let (k, v) = item.split_once('=').unwrap_or((item, ""));
        let v = if v.is_empty() { true.into() } else { v.into() };
        settings.insert(k.to_string(), v);
    }
    let status = Arc::new(StatusFile::new(
        StatusInfo {
            root: config.root.clone(),
            mountpoint: config.mountpoint.clone(),
            options: settings,
            cache_cap_bytes: config.cache_bytes,
            root_fs: root_fs.to_string(),
            commit_protocol: format!("{:?}", root_fs.protocol()).to_lowercase(),
        },
        Arc::clone(&core),
    ));
    let adapter = Adapter::new(Arc::clone(&core), config.attr_timeout).with_status(status);
    let session = if nix::unistd::geteuid().is_root() || config.auto_unmount {
        fuser::Session::new(adapter, &config.mountpoint, &fuse_config)
            .map_err(|e| preflight::explain_mount_error(&config, &e))?
    } else {
        // A normal user mounts through fusermount3 (fuser's own path needs
        // /dev/fuse open to the user: see fusermount.rs).
        let fd =
            super::fusermount::mount(&config.mountpoint, &fusermount_options(&config, read_only))
                .map_err(|e| {
                format!(
                    "cannot mount {} on {}: {e}",
                    config.root.display(),
                    config.mountpoint.display()
                )
            })?;
        fuser::Session::from_fd(adapter, fd, acl, fuse_config)
            .map_err(|e| format!("cannot start the FUSE session: {e}"))?
    };
    // The mount exists from here on: find its identity before anything
    // else can be mounted over it.
    let own = mount_table::top_at(&config.mountpoint)
        .filter(|m| m.source.as_deref() == Some(fs_name(&config).as_str()));
    let Some(own) = own else {
        // Dropping the session unmounts through fuser, which checks its
        // own connection first.
        drop(session);
        return Err(format!(
            "mounted {} but cannot find the mount in /proc/self/mountinfo; gave up",
            config.mountpoint.display()
        ));
    };
    log::debug!("mount id {} (device {})", own.id, own.dev);
    // Kernel cache notifications are sent from this thread, never from a
    // request handler (MOUNT.md, Details; FUSE-NOTES §3).
    let notifier = session.notifier();
    spawn_named("sessionfs-notify", move || {
        for what in invalidated {
            // Offset -1: attributes only; 0 with length 0: the cached
            // pages too, which hold a directory's cached listing or a
            // file's bytes.
            let _ = match what {
                Invalidation::Attrs(ino) => notifier.inval_inode(fuser::INodeNo(ino), -1, 0),
                Invalidation::Listing(ino) | Invalidation::Pages(ino) => {
                    notifier.inval_inode(fuser::INodeNo(ino), 0, 0)
                }
            };
        }
    })?;
    let background = session
        .spawn()
        .map_err(|e| format!("cannot start the FUSE session: {e}"))?;
    // fuser would unmount by path when the session is dropped, which can
    // hit a newer mount at the same path: the session is never dropped,
    // and the daemon unmounts its own mount itself (by mount id).
    let background: &'static fuser::BackgroundSession = Box::leak(Box::new(background));
    let session_ended = || background.guard.is_finished();

    let ready = wait_until_serving(&config.mountpoint, &stop, &session_ended);
    let end = match ready {
        Serving::Yes => {
            raise_read_ahead(&own.dev);
            if !read_only && !batch_window.is_zero() {
                let core = Arc::clone(&core);
                let tick = batch_window.min(POLL);
                spawn_named("sessionfs-commit", move || loop {
                    std::thread::sleep(tick);
                    core.commit_due();
                })?;
            }
            log::info!(
                "mounted {} at {} ({}, attribute timeout {:?}, batch window {:?}, cache {} \
                 bytes, pending budget {} bytes)",
                config.root.display(),
                config.mountpoint.display(),
                if read_only { "read-only" } else { "read-write" },
                config.attr_timeout,
                batch_window,
                config.cache_bytes,
                config.pending_budget
            );
            on_ready();
            serve(&own, &stop, &session_ended)
        }
        Serving::Stopped => End::Signal,
        Serving::Ended => End::Unmounted,
        Serving::TimedOut => {
            unmount_own(&own, &config.mountpoint);
            return Err(format!(
                "the mount at {} did not answer within {READY_TIMEOUT:?}; unmounted it",
                config.mountpoint.display()
            ));
        }
    };
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    match end {
        End::Unmounted => log::info!("{} was unmounted; exiting", config.mountpoint.display()),
        End::Signal => log::info!(
            "signal received; unmounting {}",
            config.mountpoint.display()
        ),
    }
    let committed = core.commit_all();
    if committed > 0 {
        log::info!("committed the pending lines of {committed} writer(s)");
    }
    if end == End::Signal {
        unmount_own(&own, &config.mountpoint);
    }
    let deadline = Instant::now() + END_TIMEOUT;
    while !session_ended() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if !session_ended() {
        log::warn!(
            "files are still open in the detached mount of {}; their next requests fail \
             with ENOTCONN",
            config.mountpoint.display()
        );
    }
    Ok(())
}

/// Outcome of waiting for a new mount to answer.
enum Serving {
    Yes,
    Stopped,
    Ended,
    TimedOut,
}

/// Waits until the mount at `mountpoint` answers a getattr and a readdir
/// (asked from a helper thread), a signal arrives, or the session ends.
/// The helper thread's request is always answered before the daemon
/// exits: the session keeps serving until the mount is gone.
fn wait_until_serving(
    mountpoint: &Path,
    stop: &AtomicBool,
    session_ended: &dyn Fn() -> bool,
) -> Serving {
    let (tx, rx) = std::sync::mpsc::channel();
    let path = mountpoint.to_path_buf();
    let probe = std::thread::Builder::new()
        .name("sessionfs-ready".into())
        .spawn(move || {
            // A stat of the mount's root is a request the session must
            // answer; nothing is opened, so a `umount` right after the mount
            // appears never finds it busy because of this probe.
            let r = std::fs::metadata(&path).map(|_| ());
            let _ = tx.send(r);
        });
    if probe.is_err() {
        return Serving::TimedOut;
    }
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok(Ok(())) => return Serving::Yes,
            Ok(Err(e)) => {
                log::warn!("{}: {e}", mountpoint.display());
                return Serving::Ended;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Serving::Ended,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        let outcome = if stop.load(Ordering::SeqCst) {
            Serving::Stopped
        } else if session_ended() {
            Serving::Ended
        } else if Instant::now() > deadline {
            Serving::TimedOut
        } else {
            continue;
        };
        // The helper thread's request is answered by the still-running
        // session (or fails once the connection ends): the daemon never
        // exits while one of its own threads waits on its own mount.
        let _ = rx.recv_timeout(Duration::from_secs(2));
        return outcome;
    }
}

/// Serves until a signal, the end of the session, or the disappearance of
/// mount `own` from the mount table (a lazy external unmount leaves the
/// session running while files are open).
fn serve(own: &MountEntry, stop: &AtomicBool, session_ended: &dyn Fn() -> bool) -> End {
    let mut ticks = 0u32;
    let mut heap = super::heap::Trimmer::new(super::status::requests_answered());
    loop {
        if stop.load(Ordering::SeqCst) {
            return End::Signal;
        }
        if session_ended() {
            return End::Unmounted;
        }
        ticks = ticks.wrapping_add(1);
        if ticks.is_multiple_of(4) && !mount_table::is_mounted(own.id) {
            return End::Unmounted;
        }
        heap.tick(super::status::requests_answered());
        std::thread::sleep(POLL);
    }
}

/// Unmounts the daemon's own mount `own` at `path`: only while the mount
/// visible at `path` is this very mount (same mount id); never a mount
/// made there later, nor one stacked on it. Busy: detached lazily. Best
/// effort: failures are logged.
fn unmount_own(own: &MountEntry, path: &Path) {
    for lazy in [false, true] {
        match mount_table::top_at(path) {
            Some(top) if top.id == own.id => {}
            Some(_) if mount_table::is_mounted(own.id) => {
                log::warn!(
                    "another file system is mounted over {}; leaving the sessionfs mount \
                     under it (unmount the upper one, then `umount {}`)",
                    path.display(),
                    path.display()
                );
                return;
            }
            _ => return,
        }
        match unmount_path(path, lazy) {
            Ok(()) => return,
            Err(e) if !lazy => {
                log::debug!("unmounting {} failed ({e}); detaching it", path.display())
            }
            Err(e) => log::warn!("cannot unmount {}: {e}", path.display()),
        }
    }
}

/// `umount2(path)` (lazily: `MNT_DETACH`); as a normal user, through
/// `fusermount3 -u` (`-z` for lazy), which checks that the mount is ours.
pub(super) fn unmount_path(path: &Path, lazy: bool) -> Result<(), String> {
    let flags = if lazy {
        nix::mount::MntFlags::MNT_DETACH
    } else {
        nix::mount::MntFlags::empty()
    };
    match nix::mount::umount2(path, flags) {
        Ok(()) => Ok(()),
        Err(nix::errno::Errno::EPERM) if !nix::unistd::geteuid().is_root() => {
            let mut cmd = std::process::Command::new("fusermount3");
            cmd.arg("-u").arg("-q");
            if lazy {
                cmd.arg("-z");
            }
            let out = cmd
                .arg("--")
                .arg(path)
                .stdin(std::process::Stdio::null())
                .output()
                .map_err(|e| format!("fusermount3: {e}"))?;
            if out.status.success() {
                Ok(())
            } else {
                Err(format!(
                    "fusermount3 -u: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ))
            }
        }
        Err(e) => Err(e.to_string()),
    }
}
