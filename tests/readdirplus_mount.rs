//! Listings are readdirplus (issue 11, Listing cost; README, Scale):
//! `ls -l` of a project sends no lookup per session; the entries a
//! listing sends without attributes (a session's `session.jsonl` and
//! `session.md`, the views' links) are still listed, under their own
//! inode numbers (the vendored fuser's patch, `vendor/fuser/PATCHED.md`);
//! and the entries a listing hands the kernel are released when the
//! kernel forgets them.

mod common;

use std::fs;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::Path;
use std::time::{Duration, Instant};

use common::lines::{header_line, note};
use common::{run_ok, Mount};
use sessionfs::store::session_writer::SessionWriter;
use sessionfs::store::{Store, StoreOptions};

const PROJECT: &str = "--home-x-app--";
const SESSIONS: usize = 300;

/// A root with one project of [`SESSIONS`] sessions, `s000` ... `s299`,
/// each a header and one event, written through the store.
fn root_with_sessions() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), StoreOptions::default()).unwrap();
    for i in 0..SESSIONS {
        let id = format!("s{i:03}");
        let header = header_line(
            &id,
            Some("/home/x/app"),
            1_767_225_600_000 + i as u64 * 60_000,
        );
        let event = note(0, "readdirplus", i as u64);
        let mut w = SessionWriter::create(&id).unwrap();
        w.accept(&store, format!("{header}{event}").as_bytes())
            .unwrap();
        w.commit(&store).unwrap();
    }
    dir
}

fn requests(mount: &Mount, op: &str) -> u64 {
    mount.status()["requests"]["by_op"][op]
        .as_u64()
        .unwrap_or(0)
}

#[test]
fn ls_l_of_a_project_looks_up_no_session() {
    let root = root_with_sessions();
    let mount = Mount::start(root.path(), &[]);
    let lookups = requests(&mount, "lookup");
    let listing = run_ok(
        "ls",
        [
            "-l".as_ref(),
            "--time-style=+%s".as_ref(),
            mount.join(PROJECT).as_os_str(),
        ],
        None,
    );
    let listing = String::from_utf8(listing).unwrap();
    let rows: Vec<&str> = listing.lines().skip(1).collect();
    assert_eq!(rows.len(), SESSIONS, "{listing}");
    // Each row agrees with the backing session directory (type, mtime).
    for row in &rows {
        let fields: Vec<&str> = row.split_whitespace().collect();
        let name = fields[fields.len() - 1];
        let mtime = fields[fields.len() - 2];
        let backing = fs::symlink_metadata(root.path().join(PROJECT).join(name)).unwrap();
        assert!(row.starts_with('d'), "{row}");
        assert_eq!(mtime, backing.mtime().to_string(), "{row}");
    }
    let sent = requests(&mount, "lookup") - lookups;
    // The project itself and a few probes of ls; not one per session.
    assert!(
        sent < 10,
        "ls -l of {SESSIONS} sessions sent {sent} lookups (readdirplus: {})",
        requests(&mount, "readdirplus")
    );
    assert!(requests(&mount, "readdirplus") > 0);
    mount.stop();
}

/// `(name, d_ino)` of every entry of `dir`, as readdir(3) returns them.
fn dir_inos(dir: &Path) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().to_string_lossy().into_owned(), e.ino())
        })
        .collect();
    v.sort();
    v
}

#[test]
fn entries_sent_without_attributes_are_listed_with_their_inode_numbers() {
    let root = root_with_sessions();
    let mount = Mount::start(root.path(), &[]);
    let session = mount.join(PROJECT).join("s007");
    let entries = dir_inos(&session);
    let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["session.jsonl", "session.md"], "{entries:?}");
    for (name, ino) in &entries {
        let st = fs::symlink_metadata(session.join(name)).unwrap();
        assert_eq!(*ino, st.ino(), "d_ino of {name} is its st_ino");
    }
    // A view's links, with or without attributes, likewise.
    let titles = mount.join(".by-title");
    let links = dir_inos(&titles);
    assert_eq!(links.len(), SESSIONS, "{links:?}");
    for (name, ino) in links.iter().step_by(37) {
        let st = fs::symlink_metadata(titles.join(name)).unwrap();
        assert!(st.file_type().is_symlink(), "{name}");
        assert_eq!(*ino, st.ino(), "d_ino of .by-title/{name} is its st_ino");
    }
    // find sees every transcript (it trusts d_type and d_ino).
    let found = run_ok(
        "find",
        [
            mount.path().as_os_str(),
            "-name".as_ref(),
            "session.jsonl".as_ref(),
        ],
        None,
    );
    let found = String::from_utf8(found).unwrap();
    let in_projects = found.lines().filter(|l| l.contains(PROJECT)).count();
    assert_eq!(in_projects, SESSIONS, "{found}");
    mount.stop();
}

#[test]
fn entries_a_listing_hands_the_kernel_are_released_when_it_forgets_them() {
    let root = root_with_sessions();
    let mount = Mount::start(root.path(), &[]);
    let start = mount.status()["inodes"].as_u64().unwrap();
    // Only listed: no stat of any session directory.
    let names = fs::read_dir(mount.join(PROJECT)).unwrap().count();
    assert_eq!(names, SESSIONS);
    let held = mount.status()["inodes"].as_u64().unwrap();
    assert!(
        held >= start + SESSIONS as u64,
        "a listing with attributes holds its entries: {start} -> {held}"
    );
    fs::write("/proc/sys/vm/drop_caches", b"2").expect("write drop_caches (needs root)");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut now = held;
    while now > start + 10 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        now = mount.status()["inodes"].as_u64().unwrap();
    }
    assert!(
        now <= start + 10,
        "after drop_caches the table holds {now} inodes (listed {held}, at start {start})"
    );
    mount.stop();
}

/// Lines of `ls -l DIR` after its header, or what it says.
fn ls_l(dir: &Path) -> Vec<String> {
    let out = run_ok(
        "ls",
        ["-l".as_ref(), "--time-style=+%s".as_ref(), dir.as_os_str()],
        None,
    );
    String::from_utf8(out)
        .unwrap()
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect()
}

#[test]
fn an_owner_only_mount_declines_opendir_and_still_lists_fresh_with_attributes() {
    let root = root_with_sessions();
    let ttl = Duration::from_millis(300);
    let mount = Mount::start(root.path(), &["--attr-timeout", "300ms"]);
    let found = run_ok("find", [mount.path().as_os_str()], None);
    assert!(String::from_utf8_lossy(&found).lines().count() > SESSIONS);
    // The kernel sent no opendir (declined once: FUSE_NO_OPENDIR_SUPPORT)
    // and so no releasedir, for 300 session directories and the views.
    assert!(requests(&mount, "opendir") <= 1, "{}", mount.status());
    assert_eq!(requests(&mount, "releasedir"), 0, "{}", mount.status());
    assert_eq!(ls_l(&mount.join(PROJECT)).len(), SESSIONS);
    // Once the attribute timeout has passed, a second `ls -l` is not
    // served from a cached listing without attributes (a lookup per
    // session): the listing was dropped from the kernel's cache when its
    // pass ended, and is read again with attributes.
    let deadline = Instant::now() + ttl * 2;
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (lookups, plus) = (requests(&mount, "lookup"), requests(&mount, "readdirplus"));
    assert_eq!(ls_l(&mount.join(PROJECT)).len(), SESSIONS);
    let sent = requests(&mount, "lookup") - lookups;
    assert!(sent < 10, "the second ls -l sent {sent} lookups");
    assert!(requests(&mount, "readdirplus") > plus, "listed again");
    // A session created on disk shows in the project's listing and in
    // `.by-id` within the attribute timeout (plus the catalog's own
    // freshness interval), though the kernel caches listings.
    let new = root.path().join(PROJECT).join("s-new");
    fs::create_dir(&new).unwrap();
    fs::copy(
        root.path().join(PROJECT).join("s000/session.jsonl.zstd"),
        new.join("session.jsonl.zstd"),
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let shown = |dir: &Path| {
        fs::read_dir(dir)
            .unwrap()
            .any(|e| e.unwrap().file_name() == "s-new")
    };
    while !(shown(&mount.join(PROJECT)) && shown(&mount.join(".by-id")))
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(shown(&mount.join(PROJECT)), "new session not listed");
    assert!(shown(&mount.join(".by-id")), "new session not in .by-id");
    mount.stop();
}

#[test]
fn a_mount_other_users_reach_answers_opendir() {
    let root = root_with_sessions();
    let mount = Mount::start(root.path(), &["--allow-other"]);
    assert_eq!(ls_l(&mount.join(PROJECT)).len(), SESSIONS);
    // Its per-user views must stay out of the cache the users share.
    assert!(requests(&mount, "opendir") >= 1, "{}", mount.status());
    mount.stop();
}

/// A view directory listed on its own (`ls -l`, a file manager) sends its
/// links with their attributes: stat-ing them sends no lookup each. One
/// listed within the walk gap of another directory's listing (`find`)
/// sends them without: the kernel's cost of taking them with attributes
/// is three times the walk's (README, Scale). The gap is set to 0 (never a
/// walk) and to 10 s (always one) so that the host's speed decides
/// nothing.
#[test]
fn a_view_listed_on_its_own_sends_its_links_attributes_and_a_walk_does_not() {
    let root = root_with_sessions();
    let mount_with_gap = |ms: &str| {
        let bin = Path::new(env!("CARGO_BIN_EXE_sessionfs"));
        let envs = [("SESSIONFS_WALK_GAP_MS", ms)];
        Mount::start_custom(bin, root.path(), &[], common::watchdog_duration(), &envs)
    };
    // Lookups `ls -l .by-title` sends, after `before` ran.
    let lookups_of_ls = |mount: &Mount, before: &dyn Fn()| {
        before();
        let at_start = requests(mount, "lookup");
        let titles = mount.join(".by-title");
        let listed = run_ok("ls", ["-l".as_ref(), titles.as_os_str()], None);
        assert_eq!(
            String::from_utf8(listed).unwrap().lines().count() - 1,
            SESSIONS
        );
        requests(mount, "lookup") - at_start
    };

    let alone = mount_with_gap("0");
    let lookups = lookups_of_ls(&alone, &|| {});
    assert!(
        lookups < 10,
        "ls -l of .by-title alone sent {lookups} lookups"
    );
    alone.stop();

    let walk = mount_with_gap("10000");
    let project = walk.join(PROJECT);
    let lookups = lookups_of_ls(&walk, &|| fs::read_dir(&project).unwrap().for_each(drop));
    assert!(
        lookups >= SESSIONS as u64,
        "ls -l of .by-title within a walk sent {lookups} lookups"
    );
    walk.stop();
}
