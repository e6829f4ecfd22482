//! The session lock file: `.sessionfs.lock` in a session directory, held
//! by one committing writer at a time across processes, mounts and
//! machines, with a lease that never compares two hosts' clocks.
//!
//! Source: MOUNT.md ("Shared roots"). Used by [`super::append`] around
//! every commit, on every root.
//!
//! # The file
//! Created with `O_CREAT|O_EXCL` (mode 0600). Its body is [`BODY_LEN`]
//! bytes: one JSON object padded with spaces and ended by `\n`, so that its
//! size never changes (a client's cached size cannot cut a read short):
//!
//! ```json
//! {"sessionfs_lock":1,"host":"h","boot":"b","pid":7,"pidns":"pid:[4026531836]",
//!  "token":"16 hex","len":1234,"lease_ms":15000,"renewal":3,"wall_ms":1767603600000}
//! ```
//!
//! `len` is the transcript's length before the commit (`null` until the
//! holder has learned it), `token` is random per lock, `renewal` counts
//! renewals, `wall_ms` is the holder's wall clock, for people only.
//! `pidns` is the holder's PID namespace: a waiter of the same host, boot
//! id and namespace whose `kill(pid, 0)` finds no such process knows the
//! holder died, and judges its lock stale at once instead of after the
//! lease (a daemon killed with `kill -9` and started again on the same
//! machine commits at once; [`HolderId::is_gone_here`]). Takeover is then
//! the same exactly-one-winner break as below.
//!
//! # The lease
//! * The holder rewrites the body (`renewal` + 1) and fsyncs it every
//!   [`LeaseConfig::renew_every`], from a thread, so the server stamps a new
//!   mtime and the body changes. The holder's own monotonic clock measures
//!   the time since the *start* of its last successful renewal; once that
//!   reaches `lease - holder_margin` the holder no longer writes, truncates,
//!   renews or acknowledges ([`LockGuard::check`] fails with EIO).
//! * A waiter reads the lock through a fresh descriptor and remembers the
//!   (body, size, mtime) it saw and when, on its own monotonic clock. It
//!   judges the lock expired only once it has seen that snapshot unchanged
//!   for `max(lease, body lease_ms) + waiter_margin`. A body carries a
//!   random token and a counter that only grows, so seeing the same
//!   parseable body twice means no renewal happened in between however far
//!   apart the looks were; an empty or unparseable body (a holder that died
//!   between create and write) is judged only from looks less than
//!   [`CONTINUITY`] apart. No wall clock is compared, so hosts' clocks may
//!   be off by any amount.
//! * Between the holder's last action and a takeover there is therefore at
//!   least `holder_margin + waiter_margin` for writes in flight to land.
//!
//! # Takeover (exactly one winner)
//! A waiter that judged the snapshot S stale claims the right to break it
//! by creating `.sessionfs.lock.break.<hash of S>.<g>` exclusively,
//! starting at generation g = 0: exactly one taker per generation wins.
//! The claimant re-reads the lock, and only if its body is still S and its
//! claim is younger than [`LeaseConfig::break_hold`] on its own clock, it
//! writes its own lock as `.sessionfs.lock.<token>.tmp` and
//! renames it over `.sessionfs.lock`: the lock never disappears, so no
//! plain creator can slip in, and a second claimant re-reading afterwards
//! finds another body and gives up. It then removes the claims of S.
//! If `rename` cannot replace on this client, it falls back to unlink and
//! exclusive create (it may then lose to a plain creator: the other writer
//! holds the lock, and the takeover's right to cut is lost with it).
//!
//! A breaker that dies leaves its claim behind. Claims are judged like
//! locks (unchanged for lease + margin): a stale claim of generation g lets
//! the next taker claim generation g + 1; claims are never removed by
//! other takers, so two live claimants of one generation cannot exist.
//! Two live breakers of different generations need the older one to pause
//! for more than `lease + waiter_margin - break_hold` between its re-check
//! and its rename — the same residual as a holder paused between its lease
//! check and its write, which any lease without server-side fencing keeps.
//!
//! The winner learns the dead holder's recorded length ([`Takeover`]), so
//! the commit may cut a torn frame beyond it (keeping the bytes in
//! quarantine).
//!
//! Test overrides (environment): `SESSIONFS_HOST_ID`, `SESSIONFS_BOOT_ID`
//! (the holder's identity), `SESSIONFS_LEASE_MS` (scales every duration of
//! [`LeaseConfig::default`]), `SESSIONFS_CLOCK_OFFSET_MS` (added to the
//! informational `wall_ms`; nothing depends on it).

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::error::{Result, StoreError};
use super::fskind::CommitProtocol;

/// Name of the lock file in a session directory.
pub const LOCK_NAME: &str = ".sessionfs.lock";

/// Name of the announcement a writer waiting for its turn leaves for the
/// others (fairness only, see [`super::turn`]).
pub const WAIT_NAME: &str = ".sessionfs.lock.wait";

/// Version of the lock body format.
pub const LOCK_FORMAT: u64 = 1;

/// Length of a lock body in bytes (padded JSON and `\n`).
pub const BODY_LEN: usize = 512;

/// Default lease: a holder silent this long (plus the waiter margin) is
/// taken over.
pub const LEASE: Duration = Duration::from_secs(15);

/// Default renewal period of a holder.
pub const RENEW_EVERY: Duration = Duration::from_secs(5);

/// Looks at an unparseable lock body further apart than this do not count
/// as one continuous observation.
pub const CONTINUITY: Duration = Duration::from_secs(1);

/// How many claim generations a takeover tries before waiting again.
const MAX_BREAK_GENERATIONS: u32 = 8;

/// Durations of the lease (see the module docs for how each is used).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseConfig {
    /// The lease: written into the body, and the least a waiter waits.
    pub lease: Duration,
    /// How often the holder renews.
    pub renew_every: Duration,
    /// Added by a waiter to the lease before judging a lock stale.
    pub waiter_margin: Duration,
    /// Subtracted by the holder from the lease: it stops acting at
    /// `lease - holder_margin` after its last renewal started.
    pub holder_margin: Duration,
    /// A breaker must rename its lock in place within this time of
    /// creating its claim, else it gives up.
    pub break_hold: Duration,
    /// Longest wait for the lock before [`StoreError::LockBusy`]. Longer
    /// than `lease + waiter_margin`, so a dead holder's lock is taken over
    /// within one wait.
    pub wait: Duration,
}

impl LeaseConfig {
    /// The durations scaled from one lease: renewal and waiter margin a
    /// third of it, holder margin and break hold a fifth, wait three times
    /// it (room for a dead holder and a dead breaker).
    pub fn from_lease(lease: Duration) -> LeaseConfig {
        LeaseConfig {
            lease,
            renew_every: lease / 3,
            waiter_margin: lease / 3,
            holder_margin: lease / 5,
            break_hold: lease / 5,
            wait: lease * 3,
        }
    }

    /// Time after a holder's last renewal until a waiter may take over.
    pub fn takeover_after(&self) -> Duration {
        self.lease + self.waiter_margin
    }
}

impl Default for LeaseConfig {
    /// [`LEASE`] (15 s: renew every 5 s, takeover 20 s after the last
    /// renewal, holder stops at 12 s, wait 45 s), or the lease in
    /// milliseconds from `SESSIONFS_LEASE_MS` (tests).
    fn default() -> Self {
        static LEASE_FROM_ENV: OnceLock<Duration> = OnceLock::new();
        let lease = *LEASE_FROM_ENV.get_or_init(|| {
            std::env::var("SESSIONFS_LEASE_MS")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .filter(|&ms| ms >= 50)
                .map_or(LEASE, Duration::from_millis)
        });
        LeaseConfig::from_lease(lease)
    }
}

/// Who holds a lock: host, boot id and process.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HolderId {
    pub host: String,
    pub boot: String,
    pub pid: u32,
    /// The holder's PID namespace as `/proc/self/ns/pid` names it
    /// (`pid:[4026531836]`; empty when unknown or in bodies written before
    /// it was recorded): with the host and boot id equal to a waiter's, it
    /// says the holder's `pid` means the same process to the waiter.
    pub pidns: String,
}

impl HolderId {
    /// This process: host from `SESSIONFS_HOST_ID` or the host name, boot
    /// id from `SESSIONFS_BOOT_ID` or `/proc/sys/kernel/random/boot_id`
    /// (read once per process).
    pub fn current() -> HolderId {
        static CURRENT: OnceLock<HolderId> = OnceLock::new();
        let mut id = CURRENT.get_or_init(HolderId::from_env).clone();
        id.pid = std::process::id(); // a forked child is another holder
        id
    }

    fn from_env() -> HolderId {
        let host = std::env::var("SESSIONFS_HOST_ID")
            .ok()
            .filter(|h| !h.is_empty())
            .unwrap_or_else(hostname);
        let boot = std::env::var("SESSIONFS_BOOT_ID")
            .ok()
            .filter(|b| !b.is_empty())
            .or_else(|| {
                fs::read_to_string("/proc/sys/kernel/random/boot_id")
                    .ok()
                    .map(|s| s.trim().to_string())
            })
            .unwrap_or_default();
        let pidns = fs::read_link("/proc/self/ns/pid")
            .ok()
            .and_then(|p| p.to_str().map(str::to_string))
            .unwrap_or_default();
        HolderId {
            host: clip(&host, 120),
            boot: clip(&boot, 64),
            pid: std::process::id(),
            pidns: clip(&pidns, 64),
        }
    }

    /// Whether the holder `other` is a process of this machine's boot and
    /// PID namespace that no longer exists (`kill(pid, 0)` fails with
    /// `ESRCH`): its lock is left by a process that died (a daemon killed
    /// with `kill -9`), and no lease needs to run out for it. `false` for
    /// any other holder, or when unsure (a pid taken again since is taken
    /// for the holder, which only makes the waiter wait the lease).
    pub fn is_gone_here(&self, other: &HolderId) -> bool {
        if self.pidns.is_empty()
            || self.boot.is_empty()
            || other.pid == 0
            || other.pid > i32::MAX as u32
            || (&other.host, &other.boot, &other.pidns) != (&self.host, &self.boot, &self.pidns)
        {
            return false;
        }
        // SAFETY: signal 0 only checks that the process exists.
        let r = unsafe { libc::kill(other.pid as libc::pid_t, 0) };
        r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    }
}

fn clip(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length.
    let r = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if r != 0 {
        return "unknown-host".into();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// A decoded lock body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockBody {
    pub holder: HolderId,
    pub token: String,
    /// The transcript's length before the commit, once known.
    pub len: Option<u64>,
    pub lease_ms: u64,
    pub renewal: u64,
    pub wall_ms: i64,
}

impl LockBody {
    fn new(holder: &HolderId, cfg: &LeaseConfig) -> LockBody {
        LockBody {
            holder: holder.clone(),
            token: random_token(),
            len: None,
            lease_ms: cfg.lease.as_millis() as u64,
            renewal: 0,
            wall_ms: wall_ms(),
        }
    }

    /// The body's bytes: JSON padded with spaces to [`BODY_LEN`] - 1, then
    /// `\n`.
    pub fn encode(&self) -> Vec<u8> {
        let v = json!({
            "sessionfs_lock": LOCK_FORMAT,
            "host": self.holder.host,
            "boot": self.holder.boot,
            "pid": self.holder.pid,
            "pidns": self.holder.pidns,
            "token": self.token,
            "len": self.len,
            "lease_ms": self.lease_ms,
            "renewal": self.renewal,
            "wall_ms": self.wall_ms,
        });
        let mut out = serde_json::to_vec(&v).unwrap_or_default();
        out.resize(BODY_LEN - 1, b' ');
        out.push(b'\n');
        out
    }

    /// Decodes a body; `None` for anything that is not a complete version-1
    /// body with a token.
    pub fn parse(bytes: &[u8]) -> Option<LockBody> {
        let v: Value = serde_json::from_slice(bytes).ok()?;
        if v.get("sessionfs_lock")?.as_u64()? != LOCK_FORMAT {
            return None;
        }
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let token = s("token").filter(|t| !t.is_empty())?;
        Some(LockBody {
            holder: HolderId {
                host: s("host").unwrap_or_default(),
                boot: s("boot").unwrap_or_default(),
                pid: v.get("pid").and_then(Value::as_u64).unwrap_or(0) as u32,
                pidns: s("pidns").unwrap_or_default(),
            },
            token,
            len: v.get("len").and_then(Value::as_u64),
            lease_ms: v.get("lease_ms").and_then(Value::as_u64).unwrap_or(0),
            renewal: v.get("renewal").and_then(Value::as_u64).unwrap_or(0),
            wall_ms: v.get("wall_ms").and_then(Value::as_i64).unwrap_or(0),
        })
    }

    fn describe(&self) -> String {
        format!(
            "pid {} on host {:?} (boot {})",
            self.holder.pid, self.holder.host, self.holder.boot
        )
    }
}

fn wall_ms() -> i64 {
    let offset = std::env::var("SESSIONFS_CLOCK_OFFSET_MS")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(0);
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
        + offset
}

/// 16 random hex digits from the kernel's generator (time, pid and a
/// counter mixed in if that fails).
pub(crate) fn random_token() -> String {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut bytes = [0u8; 8];
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    let mut value = u64::from_le_bytes(bytes);
    if n != bytes.len() as isize {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        value = (nanos ^ (u64::from(std::process::id()) << 32))
            .wrapping_add(COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
            .wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    format!("{value:016x}")
}

/// FNV-1a, 64 bits: names the claims of one stale body, the same on
/// every machine.
fn fnv64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// What a takeover learned of the lock it broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Takeover {
    /// The broken lock's holder, for logs.
    pub previous: String,
    /// The transcript length the dead holder recorded before its commit
    /// (`None`: it had not learned it, so it wrote nothing).
    pub recorded_len: Option<u64>,
}

/// One look at a lock (or claim) file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    body: Vec<u8>,
    size: u64,
    mtime: (i64, i64),
}

impl Snapshot {
    fn parsed(&self) -> Option<LockBody> {
        LockBody::parse(&self.body)
    }

    fn describe(&self) -> String {
        match self.parsed() {
            Some(b) => b.describe(),
            None => format!("an unreadable lock ({} bytes)", self.size),
        }
    }
}

/// Opens `path` afresh for reading (`O_DIRECT` first for a remote
/// protocol, so that the client's page cache is bypassed where it can be).
pub(crate) fn open_fresh_read(path: &Path, protocol: CommitProtocol) -> io::Result<File> {
    if protocol == CommitProtocol::Remote {
        match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_CLOEXEC | libc::O_DIRECT)
            .open(path)
        {
            Ok(f) => return Ok(f),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
    }
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
}

/// Reads a lock or claim file afresh; `None` when it does not exist (also
/// when it vanishes between the open and the `fstat` or read: some clients,
/// sshfs without attribute caching, answer `fstat` by path).
fn look(path: &Path, protocol: CommitProtocol) -> io::Result<Option<Snapshot>> {
    match look_once(path, protocol) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        r => r,
    }
}

fn look_once(path: &Path, protocol: CommitProtocol) -> io::Result<Option<Snapshot>> {
    let file = open_fresh_read(path, protocol)?;
    let meta = file.metadata()?;
    let mut body = Vec::with_capacity(BODY_LEN);
    // Bounded: a lock file is never larger than BODY_LEN; read a little
    // more to see a foreign, larger one as different.
    let r = (&file).take(4 * BODY_LEN as u64).read_to_end(&mut body);
    if let Err(e) = r {
        // O_DIRECT reads may be refused where the open was not.
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
        body.clear();
        let plain = open_fresh_read(path, CommitProtocol::Local)?;
        (&plain).take(4 * BODY_LEN as u64).read_to_end(&mut body)?;
    }
    Ok(Some(Snapshot {
        body,
        size: meta.len(),
        mtime: (meta.mtime(), meta.mtime_nsec()),
    }))
}

/// Observations of lock and claim files: snapshot, first seen, last seen
/// (this process' monotonic clock).
type Seen = HashMap<PathBuf, (Snapshot, Instant, Instant)>;

fn seen() -> &'static Mutex<Seen> {
    static SEEN: OnceLock<Mutex<Seen>> = OnceLock::new();
    SEEN.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Records a look at `path` and returns for how long that snapshot has
/// been seen unchanged.
fn observe(path: &Path, snap: &Snapshot) -> Duration {
    let now = Instant::now();
    let mut seen = seen().lock().unwrap_or_else(|p| p.into_inner());
    if seen.len() > 4096 {
        seen.clear();
    }
    let entry = seen
        .entry(path.to_path_buf())
        .or_insert_with(|| (snap.clone(), now, now));
    let continuous = snap.parsed().is_some() || now.duration_since(entry.2) < CONTINUITY;
    if entry.0 != *snap || !continuous {
        *entry = (snap.clone(), now, now);
    }
    entry.2 = now;
    now.duration_since(entry.1)
}

fn forget(path: &Path) {
    seen()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(path);
}

/// How long `snap` must stay unchanged before it is judged stale: at
/// once when its holder is a process of this machine that is gone
/// ([`HolderId::is_gone_here`]), else the lease and the waiter's margin.
fn stale_after(snap: &Snapshot, cfg: &LeaseConfig, me: &HolderId) -> Duration {
    let parsed = snap.parsed();
    if parsed.as_ref().is_some_and(|b| me.is_gone_here(&b.holder)) {
        return Duration::ZERO;
    }
    let body_lease = parsed.map_or(Duration::ZERO, |b| {
        Duration::from_millis(b.lease_ms.min(3_600_000))
    });
    cfg.lease.max(body_lease) + cfg.waiter_margin
}

/// How many times an exclusive create refused with EPERM while the name
/// does not exist afterwards is tried again before the error counts.
const AMBIGUOUS_CREATE_RETRIES: u32 = 8;

/// Creates `path` exclusively and writes `body` into it. `Ok(None)` when
/// it exists already (also when the client reports that as another error
/// but the name exists afterwards: sshfs turns the server's refusal into
/// EPERM; when the name is gone again by then — its holder removed it —
/// the create is retried). Returns the file and the instant before the
/// create, on the holder's clock ([`HolderInstant`]).
fn create_exclusive(path: &Path, body: &[u8]) -> io::Result<Option<(File, HolderInstant)>> {
    let mut attempt = 0;
    let (file, start) = loop {
        let start = HolderInstant::now();
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
        {
            Ok(f) => break (f, start),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(None),
            Err(e) => {
                if fs::symlink_metadata(path).is_ok() {
                    log::debug!(
                        "{}: exclusive create failed ({e}) and the name exists",
                        path.display()
                    );
                    return Ok(None);
                }
                if e.raw_os_error() == Some(libc::EPERM) && attempt < AMBIGUOUS_CREATE_RETRIES {
                    attempt += 1;
                    thread::sleep(Duration::from_millis(1));
                    continue;
                }
                return Err(e);
            }
        }
    };
    // Not fsynced: the exclusive create is what excludes; until the body
    // reaches the server (a network client may hold it back), waiters see
    // an empty body, which they judge only from continuous looks, as a
    // lock that cannot be taken over sooner than any other.
    if let Err(e) = file.write_all_at(body, 0) {
        let _ = fs::remove_file(path);
        return Err(e);
    }
    Ok(Some((file, start)))
}

/// A point in time on `CLOCK_BOOTTIME`: as [`Instant`] (`CLOCK_MONOTONIC`),
/// but counting the time the machine was suspended too. Every judgement a
/// holder makes of its own lease (may it still write, truncate,
/// acknowledge; may a claim still break a lock) uses it: a holder waking
/// from a suspend longer than its lease must know the lease ended, since
/// a waiter on another machine took the lock over meanwhile, yet its
/// monotonic clock stood still while it slept. Waiters keep [`Instant`]: a
/// suspended waiter only waits longer.
#[derive(Clone, Copy, Debug)]
struct HolderInstant(Duration);

impl HolderInstant {
    fn now() -> HolderInstant {
        use nix::time::{clock_gettime, ClockId};
        // CLOCK_BOOTTIME cannot fail on Linux since 2.6.39; the monotonic
        // clock otherwise.
        let ts = clock_gettime(ClockId::CLOCK_BOOTTIME)
            .or_else(|_| clock_gettime(ClockId::CLOCK_MONOTONIC))
            .unwrap_or_else(|_| nix::sys::time::TimeSpec::new(0, 0));
        HolderInstant(Duration::from(ts))
    }

    fn elapsed(&self) -> Duration {
        HolderInstant::now().0.saturating_sub(self.0)
    }
}

/// State shared by a guard and its renewal thread.
struct Shared {
    /// The lock file, open for renewals; closed before the holder unlinks
    /// it (sshfs keeps a file unlinked while open as `.fuse_hidden…`).
    file: Mutex<Option<File>>,
    body: Mutex<LockBody>,
    /// Start of the last successful renewal (or of the create).
    renewed: Mutex<HolderInstant>,
    stop: Mutex<bool>,
    wake: Condvar,
    cfg: LeaseConfig,
    protocol: CommitProtocol,
}

impl Shared {
    fn valid(&self) -> bool {
        let renewed = *self.renewed.lock().unwrap_or_else(|p| p.into_inner());
        renewed.elapsed() < self.cfg.lease.saturating_sub(self.cfg.holder_margin)
    }

    /// Rewrites the body (renewal + 1, `len` if given) and, with `sync` on
    /// a remote protocol, fsyncs it so that it reaches the server (NFS
    /// holds writes back until then); refused once the lease expired.
    fn renew(&self, len: Option<u64>, sync: bool) -> io::Result<()> {
        if !self.valid() {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the lease expired before it could be renewed",
            ));
        }
        let start = HolderInstant::now();
        // The body stays locked through the write, so that a renewal and a
        // recorded length never land out of order.
        let mut body = self.body.lock().unwrap_or_else(|p| p.into_inner());
        body.renewal += 1;
        body.wall_ms = wall_ms();
        if len.is_some() {
            body.len = len;
        }
        let file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let Some(file) = file.as_ref() else {
            return Err(io::Error::other("the lock was released"));
        };
        file.write_all_at(&body.encode(), 0)?;
        if sync && self.protocol == CommitProtocol::Remote {
            file.sync_data()?;
        }
        drop(body);
        *self.renewed.lock().unwrap_or_else(|p| p.into_inner()) = start;
        Ok(())
    }
}

/// Lock files this process holds now (guards alive), for the mount's
/// status file.
static HELD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// How many lock files this process holds now (one per append under way
/// on a transcript; 0 when nothing is being committed).
pub fn locks_held() -> usize {
    HELD.load(std::sync::atomic::Ordering::Relaxed)
}

/// A held lock: renewed by a thread while it lives, released (unlinked)
/// when dropped if it is still this holder's and the lease has not ended.
pub struct LockGuard {
    path: PathBuf,
    protocol: CommitProtocol,
    shared: Arc<Shared>,
    renewer: Option<thread::JoinHandle<()>>,
    takeover: Option<Takeover>,
}

impl LockGuard {
    fn start(
        path: PathBuf,
        protocol: CommitProtocol,
        file: File,
        body: LockBody,
        created: HolderInstant,
        cfg: &LeaseConfig,
        takeover: Option<Takeover>,
    ) -> LockGuard {
        let shared = Arc::new(Shared {
            file: Mutex::new(Some(file)),
            body: Mutex::new(body),
            renewed: Mutex::new(created),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            cfg: *cfg,
            protocol,
        });
        HELD.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let s = Arc::clone(&shared);
        let lock_path = path.clone();
        let renewer = thread::Builder::new()
            .name("sessionfs-lease".into())
            .spawn(move || renew_loop(&s, &lock_path))
            .ok();
        LockGuard {
            path,
            protocol,
            shared,
            renewer,
            takeover,
        }
    }

    /// Whether the lease still allows acting (writing, truncating,
    /// acknowledging).
    pub fn valid(&self) -> bool {
        self.shared.valid()
    }

    /// Fails with [`StoreError::CommitFailed`] (EIO) naming `before` when
    /// the lease no longer allows acting on `transcript`.
    pub fn check(&self, transcript: &Path, before: &str) -> Result<()> {
        if self.valid() {
            return Ok(());
        }
        let found = format!(
            "the lease on {} expired before {before} (no renewal reached the server for \
             {:?}); nothing more is written by this writer",
            self.path.display(),
            self.shared
                .cfg
                .lease
                .saturating_sub(self.shared.cfg.holder_margin)
        );
        log::error!("{}: {found}", transcript.display());
        Err(StoreError::CommitFailed {
            path: transcript.to_path_buf(),
            found,
        })
    }

    /// Records the transcript's length before the commit in the body (a
    /// renewal, not fsynced: a taker that does not see the length cuts
    /// nothing, which is the safe side).
    ///
    /// Errors: [`StoreError::Io`] when the rewrite fails, or the lease
    /// expired.
    pub fn record_len(&self, len: u64) -> Result<()> {
        self.shared
            .renew(Some(len), false)
            .map_err(|e| StoreError::io("renew lock", &self.path, e))
    }

    /// The broken lock, when this guard was won by a takeover.
    pub fn takeover(&self) -> Option<&Takeover> {
        self.takeover.as_ref()
    }

    /// The lock file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current body (tests, logs).
    pub fn body(&self) -> LockBody {
        self.shared
            .body
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

fn renew_loop(s: &Shared, path: &Path) {
    let mut stop = s.stop.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if *stop {
            return;
        }
        let (guard, _) = s
            .wake
            .wait_timeout(stop, s.cfg.renew_every)
            .unwrap_or_else(|p| p.into_inner());
        stop = guard;
        if *stop {
            return;
        }
        drop(stop);
        if let Err(e) = s.renew(None, true) {
            log::warn!("{}: lease renewal failed: {e}", path.display());
            if !s.valid() {
                return;
            }
        }
        stop = s.stop.lock().unwrap_or_else(|p| p.into_inner());
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        HELD.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        *self.shared.stop.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.renewer.take() {
            let _ = t.join();
        }
        // Unlink only while no waiter can have judged the lock stale (they
        // wait lease + margin after the last renewal), and only our own.
        let renewed = *self
            .shared
            .renewed
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if renewed.elapsed() >= self.shared.cfg.lease {
            log::warn!(
                "{}: the lease ended while held; leaving the lock for takeover",
                self.path.display()
            );
            return;
        }
        let (ours, holder) = {
            let body = self.shared.body.lock().unwrap_or_else(|p| p.into_inner());
            (body.token.clone(), body.holder.clone())
        };
        match look(&self.path, self.protocol) {
            Ok(Some(snap)) if snap.parsed().is_some_and(|b| b.token == ours) => {
                // Closed first: unlinked while open, a network client
                // may keep it under another name until the close.
                drop(
                    self.shared
                        .file
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .take(),
                );
                if let Err(e) = fs::remove_file(&self.path) {
                    log::warn!("{}: could not remove the lock: {e}", self.path.display());
                }
                if let Some(dir) = self.path.parent() {
                    super::turn::withdraw(dir, &holder);
                }
            }
            // The holder removed the lock's directory with the lock in it
            // (the doctor's --restore removing a fork): nothing to remove.
            Ok(None) if self.path.parent().is_some_and(|d| !d.exists()) => {
                log::debug!("{}: the lock went with its directory", self.path.display())
            }
            Ok(None) => log::warn!(
                "{}: the lock was removed while held (by another process); nothing to remove",
                self.path.display()
            ),
            Ok(Some(_)) => log::warn!(
                "{}: the lock is no longer this holder's; not removing it",
                self.path.display()
            ),
            Err(e) => log::warn!("{}: could not re-read the lock: {e}", self.path.display()),
        }
    }
}

/// Shortest and longest pause between two looks of a waiter.
pub(super) fn poll_bounds(protocol: CommitProtocol) -> (Duration, Duration) {
    match protocol {
        CommitProtocol::Local => (Duration::from_millis(1), Duration::from_millis(4)),
        CommitProtocol::Remote => (Duration::from_millis(5), Duration::from_millis(40)),
    }
}

/// Takes the lock of the session directory `dir`, waiting up to
/// `cfg.wait` and taking over a lock whose holder's lease ended.
///
/// `transcript` names the transcript for errors.
///
/// Errors: [`StoreError::LockBusy`] (EAGAIN) when a live holder kept it
/// for the whole wait; [`StoreError::Io`] when the lock cannot be created
/// or read (permissions, a vanished session directory: NotFound).
pub fn acquire(
    dir: &Path,
    transcript: &Path,
    cfg: &LeaseConfig,
    protocol: CommitProtocol,
    me: &HolderId,
) -> Result<LockGuard> {
    let path = dir.join(LOCK_NAME);
    let io_err = |op, e| StoreError::io(op, &path, e);
    let started = Instant::now();
    let (floor, cap) = poll_bounds(protocol);
    let mut pause = floor;
    super::turn::wait_my_turn(dir, protocol, me);
    let mut announced = false;
    loop {
        let body = LockBody::new(me, cfg);
        if let Some((file, created)) =
            create_exclusive(&path, &body.encode()).map_err(|e| io_err("create lock", e))?
        {
            forget(&path);
            let guard = LockGuard::start(path, protocol, file, body, created, cfg, None);
            if protocol == CommitProtocol::Remote {
                // Held: copies a network client kept of earlier locks of
                // this directory go (`hidden_locks`).
                super::hidden_locks::sweep(dir, cfg.takeover_after());
            }
            return Ok(guard);
        }
        let holder = match look(&path, protocol).map_err(|e| io_err("read lock", e))? {
            None => {
                forget(&path);
                continue;
            }
            Some(snap) => {
                if !announced {
                    super::turn::announce(dir, protocol, me);
                    announced = true;
                }
                let unchanged = observe(&path, &snap);
                if unchanged >= stale_after(&snap, cfg, me) {
                    if let Some(guard) = try_break(dir, &path, &snap, cfg, protocol, me)? {
                        return Ok(guard);
                    }
                }
                snap.describe()
            }
        };
        if started.elapsed() >= cfg.wait {
            return Err(StoreError::LockBusy {
                path: transcript.to_path_buf(),
                holder,
                waited: cfg.wait,
            });
        }
        // A little jitter keeps several waiters out of lock step.
        let jitter = Duration::from_micros(u64::from(std::process::id() % 7) * 150);
        thread::sleep(pause + jitter);
        pause = (pause * 2).min(cap);
        if pause == cap {
            // Announce again now and then: the holder removes the marker.
            announced = false;
        }
    }
}

/// Tries to take over the stale lock `stale` (see the module docs).
/// `Ok(None)`: not this taker (another claimant, the lock changed, or the
/// claim took too long).
fn try_break(
    dir: &Path,
    path: &Path,
    stale: &Snapshot,
    cfg: &LeaseConfig,
    protocol: CommitProtocol,
    me: &HolderId,
) -> Result<Option<LockGuard>> {
    let hash = fnv64(&stale.body);
    let claim_name = |g: u32| dir.join(format!("{LOCK_NAME}.break.{hash:016x}.{g}"));
    let io_err = |op, p: &Path, e| StoreError::io(op, p, e);
    for g in 0..MAX_BREAK_GENERATIONS {
        let claim = claim_name(g);
        let claim_body = LockBody::new(me, cfg).encode();
        match create_exclusive(&claim, &claim_body)
            .map_err(|e| io_err("create claim", &claim, e))?
        {
            Some((claim_file, claimed)) => {
                drop(claim_file);
                let won = finish_break(dir, path, stale, claimed, cfg, protocol, me);
                // Claims of this stale body are all void now: ours, and
                // older generations judged stale. A failed break removes
                // only its own.
                let first = if matches!(won, Ok(Some(_))) { 0 } else { g };
                for old in first..=g {
                    let p = claim_name(old);
                    let _ = fs::remove_file(&p);
                    forget(&p);
                }
                return won;
            }
            None => match look(&claim, protocol).map_err(|e| io_err("read claim", &claim, e))? {
                None => return Ok(None),
                Some(snap) => {
                    if observe(&claim, &snap) < stale_after(&snap, cfg, me) {
                        return Ok(None);
                    }
                    log::info!(
                        "{}: a takeover claim by {} was abandoned; claiming the next one",
                        claim.display(),
                        snap.describe()
                    );
                }
            },
        }
    }
    Ok(None)
}

fn finish_break(
    dir: &Path,
    path: &Path,
    stale: &Snapshot,
    claimed: HolderInstant,
    cfg: &LeaseConfig,
    protocol: CommitProtocol,
    me: &HolderId,
) -> Result<Option<LockGuard>> {
    let io_err = |op, p: &Path, e| StoreError::io(op, p, e);
    let now = look(path, protocol).map_err(|e| io_err("read lock", path, e))?;
    if now.as_ref().map(|s| &s.body) != Some(&stale.body) {
        return Ok(None);
    }
    let body = LockBody::new(me, cfg);
    let temp = dir.join(format!("{LOCK_NAME}.{}.tmp", body.token));
    let Some((file, created)) =
        create_exclusive(&temp, &body.encode()).map_err(|e| io_err("create lock", &temp, e))?
    else {
        return Ok(None);
    };
    let takeover = Takeover {
        previous: stale.describe(),
        recorded_len: stale.parsed().and_then(|b| b.len),
    };
    if claimed.elapsed() >= cfg.break_hold {
        let _ = fs::remove_file(&temp);
        log::warn!("{}: takeover took too long; giving it up", path.display());
        return Ok(None);
    }
    match fs::rename(&temp, path) {
        Ok(()) => {}
        Err(e) => {
            let _ = fs::remove_file(&temp);
            log::debug!(
                "{}: rename over the stale lock failed ({e}); unlinking it instead",
                path.display()
            );
            match fs::remove_file(path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err("remove stale lock", path, e)),
            }
            let Some((file, created)) = create_exclusive(path, &body.encode())
                .map_err(|e| io_err("create lock", path, e))?
            else {
                return Ok(None);
            };
            log_takeover(path, &takeover);
            forget(path);
            return Ok(Some(LockGuard::start(
                path.to_path_buf(),
                protocol,
                file,
                body,
                created,
                cfg,
                Some(takeover),
            )));
        }
    }
    log_takeover(path, &takeover);
    forget(path);
    Ok(Some(LockGuard::start(
        path.to_path_buf(),
        protocol,
        file,
        body,
        created,
        cfg,
        Some(takeover),
    )))
}

fn log_takeover(path: &Path, t: &Takeover) {
    log::warn!(
        "{}: took over the lock of {}, whose lease ended (recorded length {})",
        path.display(),
        t.previous,
        t.recorded_len
            .map_or_else(|| "none".to_string(), |l| l.to_string())
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Barrier;

    /// The holder's clock counts as `Instant` does while the machine runs
    /// (suspend cannot be made in a test: there it also counts the sleep).
    #[test]
    fn the_holders_clock_follows_the_monotonic_clock_while_running() {
        let (h, i) = (HolderInstant::now(), Instant::now());
        std::thread::sleep(Duration::from_millis(60));
        let (dh, di) = (h.elapsed(), i.elapsed());
        assert!(dh >= Duration::from_millis(60), "{dh:?}");
        let apart = dh.abs_diff(di);
        assert!(apart < Duration::from_millis(20), "{dh:?} vs {di:?}");
    }

    fn fast() -> LeaseConfig {
        LeaseConfig::from_lease(Duration::from_millis(300))
    }

    fn me(host: &str) -> HolderId {
        HolderId {
            host: host.into(),
            boot: "b".into(),
            pid: std::process::id(),
            pidns: String::new(),
        }
    }

    fn t(dir: &Path) -> PathBuf {
        dir.join("session.jsonl.zstd")
    }

    /// Writes a lock as a holder that then died would leave it.
    fn dead_lock(dir: &Path, len: Option<u64>) -> LockBody {
        let mut body = LockBody::new(&me("dead"), &fast());
        body.len = len;
        fs::write(dir.join(LOCK_NAME), body.encode()).unwrap();
        body
    }

    #[test]
    fn bodies_round_trip_at_a_fixed_length() {
        let mut b = LockBody::new(&me("h"), &LeaseConfig::default());
        b.len = Some(42);
        let bytes = b.encode();
        assert_eq!(bytes.len(), BODY_LEN);
        assert_eq!(LockBody::parse(&bytes), Some(b));
        assert_eq!(LockBody::parse(b""), None);
        assert_eq!(
            LockBody::parse(b"{\"sessionfs_lock\":2,\"token\":\"x\"}"),
            None
        );
    }

    #[test]
    fn held_excludes_and_release_unlinks() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LeaseConfig {
            wait: Duration::from_millis(100),
            ..fast()
        };
        let p = CommitProtocol::Local;
        let g = acquire(dir.path(), &t(dir.path()), &cfg, p, &me("a")).unwrap();
        assert!(g.takeover().is_none());
        let on_disk = LockBody::parse(&fs::read(dir.path().join(LOCK_NAME)).unwrap()).unwrap();
        assert_eq!(on_disk.holder.host, "a");
        let e = acquire(dir.path(), &t(dir.path()), &cfg, p, &me("b"))
            .err()
            .unwrap();
        assert_eq!(e.errno(), libc::EAGAIN, "{e}");
        assert!(e.to_string().contains("\"a\""), "{e}");
        drop(g);
        assert!(!dir.path().join(LOCK_NAME).exists());
        acquire(dir.path(), &t(dir.path()), &cfg, p, &me("b")).unwrap();
    }

    #[test]
    fn renewal_keeps_a_live_holder_and_changes_the_body() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = fast();
        let p = CommitProtocol::Local;
        let g = acquire(dir.path(), &t(dir.path()), &cfg, p, &me("a")).unwrap();
        let first = fs::read(dir.path().join(LOCK_NAME)).unwrap();
        // Waiters give up after 3 leases in all; the holder renews
        // throughout, so nobody takes over.
        let start = Instant::now();
        let waiter = LeaseConfig {
            wait: cfg.lease * 3,
            ..cfg
        };
        let e = acquire(dir.path(), &t(dir.path()), &waiter, p, &me("b"))
            .err()
            .unwrap();
        assert!(matches!(e, StoreError::LockBusy { .. }), "{e}");
        assert!(start.elapsed() >= cfg.lease * 3);
        assert!(g.valid());
        let now = LockBody::parse(&fs::read(dir.path().join(LOCK_NAME)).unwrap()).unwrap();
        assert!(now.renewal >= 3, "{now:?}");
        assert_ne!(fs::read(dir.path().join(LOCK_NAME)).unwrap(), first);
        assert_eq!(now.token, g.body().token);
    }

    #[test]
    fn a_holder_that_stops_renewing_expires_and_never_unlinks_a_successor() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = LeaseConfig {
            renew_every: Duration::from_secs(3600),
            ..fast()
        };
        let p = CommitProtocol::Local;
        let g = acquire(dir.path(), &t(dir.path()), &cfg, p, &me("a")).unwrap();
        g.record_len(7).unwrap();
        let t0 = Instant::now();
        let b = acquire(dir.path(), &t(dir.path()), &fast(), p, &me("b")).unwrap();
        let waited = t0.elapsed();
        assert!(waited >= cfg.takeover_after(), "{waited:?}");
        assert!(!g.valid(), "the old holder's lease ended first");
        assert!(g.check(&t(dir.path()), "writing").is_err());
        assert!(g.record_len(9).is_err(), "an expired holder never renews");
        assert_eq!(
            b.takeover().unwrap().recorded_len,
            Some(7),
            "the taker learns the recorded length"
        );
        drop(g);
        let on_disk = LockBody::parse(&fs::read(dir.path().join(LOCK_NAME)).unwrap()).unwrap();
        assert_eq!(on_disk.token, b.body().token, "the successor's lock stays");
    }

    /// A process of this machine that has exited, and its pid.
    fn exited_child_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    /// This machine's identity as a holder of pid `pid` would record it.
    fn here(pid: u32) -> HolderId {
        HolderId {
            pid,
            ..HolderId::from_env()
        }
    }

    #[test]
    fn a_lock_left_by_a_process_of_this_machine_that_is_gone_is_taken_at_once() {
        let me = HolderId::from_env();
        assert!(!me.pidns.is_empty(), "no /proc/self/ns/pid: {me:?}");
        let dir = tempfile::tempdir().unwrap();
        // A lease far beyond the wait: only the dead holder's absence can
        // let the waiter in.
        let cfg = LeaseConfig {
            wait: Duration::from_secs(5),
            ..LeaseConfig::from_lease(Duration::from_secs(600))
        };
        let mut body = LockBody::new(&here(exited_child_pid()), &cfg);
        body.len = Some(11);
        fs::write(dir.path().join(LOCK_NAME), body.encode()).unwrap();
        let g = acquire(dir.path(), &t(dir.path()), &cfg, CommitProtocol::Local, &me).unwrap();
        let taken = g.takeover().expect("a takeover of the dead holder's lock");
        assert_eq!(taken.recorded_len, Some(11), "the taker learns the length");
        let on_disk = LockBody::parse(&fs::read(dir.path().join(LOCK_NAME)).unwrap()).unwrap();
        assert_eq!(on_disk.token, g.body().token);
    }

    #[test]
    fn a_live_holder_or_one_of_another_namespace_or_boot_keeps_its_lease() {
        let me = HolderId::from_env();
        let cfg = LeaseConfig {
            wait: Duration::from_millis(300),
            ..LeaseConfig::from_lease(Duration::from_secs(600))
        };
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let gone = exited_child_pid();
        let holders = [
            ("a live process", here(sleeper.id())),
            (
                "another namespace",
                HolderId {
                    pidns: "pid:[1]".into(),
                    ..here(gone)
                },
            ),
            (
                "another boot",
                HolderId {
                    boot: "an-earlier-boot".into(),
                    ..here(gone)
                },
            ),
            (
                "another host",
                HolderId {
                    host: "elsewhere".into(),
                    ..here(gone)
                },
            ),
            (
                "a body without a namespace",
                HolderId {
                    pidns: String::new(),
                    ..here(gone)
                },
            ),
        ];
        for (what, holder) in holders {
            assert!(!me.is_gone_here(&holder), "{what}");
            let dir = tempfile::tempdir().unwrap();
            fs::write(
                dir.path().join(LOCK_NAME),
                LockBody::new(&holder, &cfg).encode(),
            )
            .unwrap();
            let e = acquire(dir.path(), &t(dir.path()), &cfg, CommitProtocol::Local, &me)
                .err()
                .unwrap_or_else(|| panic!("{what}: the lock was taken"));
            assert!(matches!(e, StoreError::LockBusy { .. }), "{what}: {e}");
        }
        let _ = sleeper.kill();
        let _ = sleeper.wait();
    }

    #[test]
    fn n_racing_takers_of_a_dead_lock_have_one_winner() {
        for round in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            dead_lock(dir.path(), Some(100));
            let n = 8;
            let barrier = Arc::new(Barrier::new(n));
            let winners = Arc::new(AtomicUsize::new(0));
            let inside = Arc::new(AtomicUsize::new(0));
            let threads: Vec<_> = (0..n)
                .map(|i| {
                    let dir = dir.path().to_path_buf();
                    let (barrier, winners, inside) = (
                        Arc::clone(&barrier),
                        Arc::clone(&winners),
                        Arc::clone(&inside),
                    );
                    thread::spawn(move || {
                        barrier.wait();
                        // Eight takers queue behind one another: on a
                        // loaded 2-core machine the last waited more than
                        // the fast lease's 900 ms (a full suite beside a
                        // tester's builds). What is tested is who wins,
                        // not how fast.
                        let cfg = LeaseConfig {
                            wait: Duration::from_secs(20),
                            ..fast()
                        };
                        let g = acquire(
                            &dir,
                            &t(&dir),
                            &cfg,
                            CommitProtocol::Local,
                            &me(&format!("t{i}")),
                        )
                        .unwrap();
                        assert_eq!(
                            inside.fetch_add(1, Ordering::SeqCst),
                            0,
                            "two holders at once"
                        );
                        if g.takeover().is_some() {
                            assert_eq!(g.takeover().unwrap().recorded_len, Some(100));
                            winners.fetch_add(1, Ordering::SeqCst);
                        }
                        thread::sleep(Duration::from_millis(5));
                        inside.fetch_sub(1, Ordering::SeqCst);
                    })
                })
                .collect();
            for th in threads {
                th.join().unwrap();
            }
            assert_eq!(winners.load(Ordering::SeqCst), 1, "round {round}");
            let left: Vec<_> = fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert!(left.is_empty(), "claims and temporaries removed: {left:?}");
        }
    }

    #[test]
    fn a_breaker_that_died_holding_its_claim_is_passed_over() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dead_lock(dir.path(), Some(5));
        // The dead breaker's claim of generation 0 for exactly this body.
        let hash = fnv64(&stale.encode());
        let claim0 = dir.path().join(format!("{LOCK_NAME}.break.{hash:016x}.0"));
        fs::write(&claim0, LockBody::new(&me("breaker"), &fast()).encode()).unwrap();
        let cfg = fast();
        let t0 = Instant::now();
        let g = acquire(
            dir.path(),
            &t(dir.path()),
            &cfg,
            CommitProtocol::Local,
            &me("c"),
        )
        .unwrap();
        assert_eq!(g.takeover().unwrap().recorded_len, Some(5));
        assert!(t0.elapsed() >= cfg.takeover_after());
        assert!(
            !claim0.exists(),
            "the abandoned claim is cleaned up by the winner"
        );
        drop(g);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn an_empty_lock_of_a_holder_that_died_before_writing_is_taken_over() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(LOCK_NAME), b"").unwrap();
        let g = acquire(
            dir.path(),
            &t(dir.path()),
            &fast(),
            CommitProtocol::Remote,
            &me("c"),
        )
        .unwrap();
        assert_eq!(g.takeover().unwrap().recorded_len, None);
    }

    #[test]
    fn a_breaker_whose_lock_changed_gives_up() {
        let dir = tempfile::tempdir().unwrap();
        let stale_body = dead_lock(dir.path(), None).encode();
        let stale = look(&dir.path().join(LOCK_NAME), CommitProtocol::Local)
            .unwrap()
            .unwrap();
        assert_eq!(stale.body, stale_body);
        // Someone renewed (or replaced) it since the judgement.
        dead_lock(dir.path(), None);
        let r = try_break(
            dir.path(),
            &dir.path().join(LOCK_NAME),
            &stale,
            &fast(),
            CommitProtocol::Local,
            &me("x"),
        )
        .unwrap();
        assert!(r.is_none());
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![std::ffi::OsString::from(LOCK_NAME)],
            "claim removed"
        );
    }
}
