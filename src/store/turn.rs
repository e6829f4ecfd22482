//! Turns between writers of one session: a courtesy on top of the commit
//! protocol so that a writer committing in a tight loop does not starve
//! the others. Correctness never depends on it.
//!
//! A writer that waits for the session's lock ([`super::lease::acquire`]),
//! or whose lines were refused because another writer committed their
//! `seq` first (a writer on a network root reads the tail and commits in
//! many round trips, which a writer on a local root beats every time),
//! announces itself in `.sessionfs.lock.wait` ([`announce`]): one JSON
//! line naming it and the longest it asks others to wait (its window).
//! Before taking the lock, a writer that finds another's announcement
//! waits until it is withdrawn or its window has passed since this writer
//! first saw it ([`wait_my_turn`]); the announcer withdraws it when it
//! releases the lock after its own commit ([`withdraw`]). A new
//! announcement (each carries a random token) opens a new window. Bodies
//! of earlier versions are empty: they ask for the waiting writer's own
//! window once, as their fixed stand-back did.
//!
//! Source: MOUNT.md ("Shared roots", "Appending": appends to one session
//! are serialized across mounts).

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::fskind::CommitProtocol;
use super::lease::{poll_bounds, random_token, HolderId, WAIT_NAME};

/// The longest a writer waits for one announcement, whatever it asks.
pub const MAX_WAIT: Duration = Duration::from_millis(200);

/// The longest announcement read (bytes); a longer file is not one.
const MAX_ANNOUNCEMENT_BYTES: u64 = 1024;

/// How long a writer on a root of `protocol` asks the others to wait for
/// it: time for its read of the new tail and its commit (local 20 ms,
/// network 100 ms). Ends early when it withdraws its announcement.
pub fn window(protocol: CommitProtocol) -> Duration {
    match protocol {
        CommitProtocol::Local => Duration::from_millis(20),
        CommitProtocol::Remote => Duration::from_millis(100),
    }
}

/// The body of `.sessionfs.lock.wait`:
/// `{"sessionfs_wait":1,"host":…,"boot":…,"pid":…,"pidns":…,"window_ms":…,"token":…}`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Announcement {
    by: HolderId,
    window: Duration,
    token: String,
}

impl Announcement {
    fn encode(&self) -> String {
        json!({
            "sessionfs_wait": 1,
            "host": self.by.host,
            "boot": self.by.boot,
            "pid": self.by.pid,
            "pidns": self.by.pidns,
            "window_ms": self.window.as_millis() as u64,
            "token": self.token,
        })
        .to_string()
            + "\n"
    }

    /// `None` for an empty, foreign or damaged body.
    fn parse(bytes: &[u8]) -> Option<Announcement> {
        let v: Value = serde_json::from_slice(bytes).ok()?;
        if v.get("sessionfs_wait")?.as_u64()? != 1 {
            return None;
        }
        let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        Some(Announcement {
            by: HolderId {
                host: text("host")?,
                boot: text("boot")?,
                pid: u32::try_from(v.get("pid")?.as_u64()?).ok()?,
                pidns: text("pidns").unwrap_or_default(),
            },
            window: Duration::from_millis(v.get("window_ms")?.as_u64()?),
            token: text("token").unwrap_or_default(),
        })
    }
}

/// Whether `bytes` are an announcement's body (of this version; the empty
/// bodies of earlier versions are not told from an empty file): the
/// network client's cleaner ([`super::hidden_locks`]) recognizes the copies
/// sshfs keeps of one unlinked while open.
pub(crate) fn is_announcement(bytes: &[u8]) -> bool {
    Announcement::parse(bytes).is_some()
}

/// The session directories where a writer of this process announced
/// itself and has not withdrawn yet, with that writer.
fn announced() -> &'static Mutex<HashSet<(PathBuf, HolderId)>> {
    static SET: OnceLock<Mutex<HashSet<(PathBuf, HolderId)>>> = OnceLock::new();
    SET.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Per session directory: the announcement body this process is waiting
/// for and when it first saw it.
type FirstSeen = HashMap<PathBuf, (Vec<u8>, Instant)>;

fn first_seen() -> &'static Mutex<FirstSeen> {
    static MAP: OnceLock<Mutex<FirstSeen>> = OnceLock::new();
    MAP.get_or_init(|| Mutex::new(HashMap::new()))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Announces writer `me` (on a root of `protocol`) as waiting for its turn
/// in session directory `dir`, replacing any announcement there. Errors
/// are ignored (a courtesy).
pub fn announce(dir: &Path, protocol: CommitProtocol, me: &HolderId) {
    let body = Announcement {
        by: me.clone(),
        window: window(protocol),
        token: random_token(),
    }
    .encode();
    let written = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_CLOEXEC)
        .open(dir.join(WAIT_NAME))
        .and_then(|f| f.write_all_at(body.as_bytes(), 0));
    if written.is_ok() {
        let mut set = lock(announced());
        if set.len() > 4096 {
            set.clear();
        }
        set.insert((dir.to_path_buf(), me.clone()));
    }
}

/// The announcement file's body, `None` when there is none.
fn read_body(marker: &Path) -> Option<Vec<u8>> {
    let file = File::open(marker).ok()?;
    let mut body = Vec::new();
    (&file)
        .take(MAX_ANNOUNCEMENT_BYTES + 1)
        .read_to_end(&mut body)
        .ok()?;
    Some(body)
}

/// Before writer `me` (on a root of `protocol`) takes the lock of `dir`:
/// while another writer's announcement is there and its window (at most
/// [`MAX_WAIT`]; this writer's own window for a body of an earlier
/// version) has not passed since this process first saw it, waits,
/// looking again every poll of `protocol`. An announcement whose window
/// passed is removed. Returns at once when there is none (one failed open
/// on the common path) or it is `me`'s.
pub fn wait_my_turn(dir: &Path, protocol: CommitProtocol, me: &HolderId) {
    let marker = dir.join(WAIT_NAME);
    let poll = poll_bounds(protocol).0;
    loop {
        let Some(body) = read_body(&marker) else {
            return;
        };
        let parsed = Announcement::parse(&body);
        if parsed.as_ref().is_some_and(|a| &a.by == me) {
            return;
        }
        let wait = parsed
            .map_or_else(|| window(protocol), |a| a.window)
            .min(MAX_WAIT);
        let since = {
            let mut seen = lock(first_seen());
            if seen.len() > 4096 {
                seen.clear();
            }
            let entry = seen
                .entry(dir.to_path_buf())
                .or_insert_with(|| (body.clone(), Instant::now()));
            if entry.0 != body {
                *entry = (body, Instant::now());
            }
            entry.1
        };
        if since.elapsed() >= wait {
            let _ = fs::remove_file(&marker);
            lock(first_seen()).remove(dir);
            return;
        }
        thread::sleep(poll.min(wait - since.elapsed()));
    }
}

/// At release of the lock of `dir` by writer `me`: withdraws `me`'s
/// announcement there, if this process made one (it had its turn); another
/// writer's is left for it.
pub fn withdraw(dir: &Path, me: &HolderId) {
    if !lock(announced()).remove(&(dir.to_path_buf(), me.clone())) {
        return;
    }
    let marker = dir.join(WAIT_NAME);
    if let Some(body) = read_body(&marker) {
        if Announcement::parse(&body).is_some_and(|a| &a.by == me) {
            let _ = fs::remove_file(&marker);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(pid: u32) -> HolderId {
        HolderId {
            host: "h".into(),
            boot: "b".into(),
            pid,
            pidns: "pid:[1]".into(),
        }
    }

    #[test]
    fn an_announcement_reads_back_and_junk_is_none() {
        let a = Announcement {
            by: holder(7),
            window: Duration::from_millis(100),
            token: "t".into(),
        };
        assert_eq!(Announcement::parse(a.encode().as_bytes()), Some(a));
        for junk in [&b""[..], b"{}", b"not json", b"{\"sessionfs_wait\":2}"] {
            assert_eq!(Announcement::parse(junk), None, "{junk:?}");
        }
    }

    #[test]
    fn a_writer_waits_for_anothers_announcement_until_it_is_withdrawn() {
        let dir = tempfile::tempdir().unwrap();
        let (waiter, announcer) = (holder(1), holder(2));
        announce(dir.path(), CommitProtocol::Remote, &announcer);
        // Its own announcement does not hold the announcer back.
        let t = Instant::now();
        wait_my_turn(dir.path(), CommitProtocol::Local, &announcer);
        assert!(t.elapsed() < Duration::from_millis(50));
        // Another writer waits until it is withdrawn (here after 30 ms).
        let path = dir.path().to_path_buf();
        let withdrawer = thread::spawn(move || {
            thread::sleep(Duration::from_millis(30));
            withdraw(&path, &announcer);
        });
        let t = Instant::now();
        wait_my_turn(dir.path(), CommitProtocol::Local, &waiter);
        let waited = t.elapsed();
        withdrawer.join().unwrap();
        assert!(waited >= Duration::from_millis(30), "{waited:?}");
        assert!(!dir.path().join(WAIT_NAME).exists());
    }

    #[test]
    fn an_announcement_not_withdrawn_holds_back_for_its_window_once() {
        let dir = tempfile::tempdir().unwrap();
        announce(dir.path(), CommitProtocol::Local, &holder(2));
        let t = Instant::now();
        wait_my_turn(dir.path(), CommitProtocol::Local, &holder(1));
        assert!(t.elapsed() >= window(CommitProtocol::Local));
        // Removed once its window passed: the next acquisition goes at once.
        assert!(!dir.path().join(WAIT_NAME).exists());
        let t = Instant::now();
        wait_my_turn(dir.path(), CommitProtocol::Local, &holder(1));
        assert!(t.elapsed() < window(CommitProtocol::Local));
    }

    #[test]
    fn withdraw_leaves_another_writers_announcement() {
        let dir = tempfile::tempdir().unwrap();
        announce(dir.path(), CommitProtocol::Local, &holder(1));
        // Holder 2 announced last: holder 1's withdrawal leaves it.
        announce(dir.path(), CommitProtocol::Local, &holder(2));
        withdraw(dir.path(), &holder(1));
        let body = fs::read(dir.path().join(WAIT_NAME)).unwrap();
        assert_eq!(Announcement::parse(&body).unwrap().by, holder(2));
    }
}
