//! The mount's policies live in its core (`SessionFs`), tested here
//! without a mount (issue 15, "one error path"; issue 9, items 3 and 5):
//! rename flags and ownership changes are refused by the core, every
//! refusal carries its errno from the one map, the pending budget is
//! shared by all writers and given back at release, and `.by-id` is
//! filtered per caller.

use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sessionfs::fuse::access::Caller;
use sessionfs::fuse::fs::SessionFs;
use sessionfs::store::naming::{encode_id, project_dir_name};
use sessionfs::store::publish::publish_session;
use sessionfs::store::{Encoding, Store, StoreOptions};

const ROOT_INO: u64 = 1;

fn header(id: &str, cwd: &str) -> String {
    format!(
        "{{\"type\":\"session\",\"version\":0,\"id\":{},\"createdAt\":1767600000000,\"cwd\":{},\"delegationDepth\":0}}\n",
        serde_json::to_string(id).unwrap(),
        serde_json::to_string(cwd).unwrap()
    )
}

/// A root holding the sessions `(id, cwd)`, and a core over it.
fn core_over(sessions: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf, SessionFs) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    std::fs::create_dir(&root).unwrap();
    for (id, cwd) in sessions {
        publish_session(&root, Encoding::Zstd, header(id, cwd).as_bytes(), b"").unwrap();
    }
    let store = Store::open(
        &root,
        StoreOptions {
            compression: None,
            cache_bytes: 1 << 20,
            index_dir: None,
            ..StoreOptions::default()
        },
    )
    .unwrap();
    let core = SessionFs::new(Arc::new(store), Duration::from_millis(200));
    (tmp, root, core)
}

fn rel(id: &str, cwd: &str) -> PathBuf {
    PathBuf::from(project_dir_name(Some(cwd)).unwrap()).join(encode_id(id).unwrap())
}

/// The inode of mount path `path`, looked up component by component.
fn ino_of(core: &SessionFs, path: &Path) -> u64 {
    path.iter().fold(ROOT_INO, |parent, name| {
        core.lookup(parent, name)
            .unwrap_or_else(|e| panic!("lookup {name:?}: {e}"))
            .ino
    })
}

#[test]
fn rename_flags_and_ownership_changes_follow_the_core_policy() {
    let (_tmp, root, core) = core_over(&[("policy", "/srv/app")]);
    let session = rel("policy", "/srv/app");
    std::fs::write(root.join(&session).join("notes.txt"), b"x").unwrap();
    let dir = ino_of(&core, &session);
    let file = ino_of(&core, &session.join("notes.txt"));

    // RENAME_EXCHANGE is refused; RENAME_NOREPLACE is passed through
    // (mv -n): EEXIST onto an existing name, a rename onto a new one.
    let e = core
        .rename(
            dir,
            OsStr::new("notes.txt"),
            dir,
            OsStr::new("n2"),
            libc::RENAME_EXCHANGE,
        )
        .unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e:?}");
    std::fs::write(root.join(&session).join("taken.txt"), b"y").unwrap();
    let noreplace = libc::RENAME_NOREPLACE;
    let e = core
        .rename(
            dir,
            OsStr::new("notes.txt"),
            dir,
            OsStr::new("taken.txt"),
            noreplace,
        )
        .unwrap_err();
    assert_eq!(e.errno(), libc::EEXIST, "{e:?}");
    assert_eq!(
        std::fs::read(root.join(&session).join("taken.txt")).unwrap(),
        b"y"
    );
    assert!(root.join(&session).join("notes.txt").exists());
    core.rename(
        dir,
        OsStr::new("notes.txt"),
        dir,
        OsStr::new("n2"),
        noreplace,
    )
    .unwrap();
    assert!(root.join(&session).join("n2").exists());

    // The inode follows its file across the rename (MOUNT.md, The tree).
    let file2 = ino_of(&core, &session.join("n2"));
    assert_eq!(file, file2);
    // chown: to the owner it has, a no-op (`tar x`, `cp -a` do it); of a
    // passed-through file, its backing file's owner changes; the
    // transcript keeps its owner.
    use std::os::unix::fs::MetadataExt;
    let n2 = root.join(&session).join("n2");
    let (uid, gid) = {
        let m = std::fs::metadata(&n2).unwrap();
        (m.uid(), m.gid())
    };
    core.setattr(file2, None, None, (Some(uid), Some(gid)), None, None, None)
        .unwrap();
    let view = ino_of(&core, &session.join("session.jsonl"));
    let t = core.getattr(view).unwrap();
    core.setattr(
        view,
        None,
        None,
        (Some(t.uid), Some(t.gid)),
        None,
        None,
        None,
    )
    .unwrap();
    let e = core
        .setattr(
            view,
            None,
            None,
            (Some(t.uid + 1000), None),
            None,
            None,
            None,
        )
        .unwrap_err();
    assert_eq!(e.errno(), libc::EPERM, "chown of the transcript: {e:?}");
    if nix::unistd::geteuid().is_root() {
        core.setattr(file2, None, None, (Some(1000), None), None, None, None)
            .unwrap();
        assert_eq!(std::fs::metadata(&n2).unwrap().uid(), 1000);
    }
    assert_eq!(core.ioctl(view).unwrap_err().errno(), libc::ENOTTY);
    assert_eq!(core.xattrs(view).unwrap_err().errno(), libc::ENOSYS);
    assert_eq!(core.getattr(999_999).unwrap_err().errno(), libc::ENOENT);
    assert_eq!(
        core.read(view, 999_999, 0, 10).unwrap_err().errno(),
        libc::EBADF
    );
}

#[test]
fn the_pending_budget_is_shared_by_all_writers_and_returned_at_release() {
    let (_tmp, _root, mut core) = core_over(&[("budget", "/srv/app")]);
    core.set_pending_budget(100);
    let view = ino_of(&core, &rel("budget", "/srv/app").join("session.jsonl"));
    let flags = libc::O_WRONLY | libc::O_APPEND;
    let (a, writer) = core.open(view, flags).unwrap();
    assert!(writer);
    let (b, _) = core.open(view, flags).unwrap();
    let part = [b'{'; 60];
    assert_eq!(core.write(a, 0, &part, true).unwrap(), 60);
    let e = core.write(b, 0, &part, true).unwrap_err();
    assert_eq!(e.errno(), libc::ENOSPC, "{e:?}");
    assert_eq!(
        core.write(b, 0, &part[..40], true).unwrap(),
        40,
        "what is left fits"
    );
    core.release(a).unwrap();
    assert_eq!(
        core.write(b, 0, &part, true).unwrap(),
        60,
        "a's bytes came back"
    );
    core.release(b).unwrap();
}

#[test]
fn by_id_lists_and_resolves_only_what_the_caller_can_reach() {
    let (_tmp, root, core) = core_over(&[("open", "/srv/a"), ("closed", "/srv/b")]);
    let chmod = |p: &Path, mode| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    for (id, cwd) in [("open", "/srv/a"), ("closed", "/srv/b")] {
        let session = root.join(rel(id, cwd));
        chmod(session.parent().unwrap(), 0o755);
        chmod(&session, 0o755);
        chmod(&session.join("session.jsonl.zstd"), 0o644);
    }
    let closed_project = root.join(rel("closed", "/srv/b").parent().unwrap());
    chmod(&closed_project, 0o700);
    let by_id = core.lookup(ROOT_INO, OsStr::new(".by-id")).unwrap().ino;
    assert!(core.is_per_user(by_id));
    assert!(!core.is_per_user(ROOT_INO));

    let names = |caller: &Caller| {
        let mut v: Vec<String> = core
            .readdir_as(caller, by_id, 0)
            .unwrap()
            .iter()
            .map(|(_, e)| e.name.to_string_lossy().into_owned())
            .filter(|n| n != "." && n != "..")
            .collect();
        v.sort();
        v
    };
    // A caller that is neither the owner (root) nor in its group.
    let stranger = Caller::new(65534, 65534, 0);
    assert_eq!(names(&Caller::root()), vec!["closed", "open"]);
    assert_eq!(names(&stranger), vec!["open"]);
    // The listing root took first is not handed to the stranger.
    assert_eq!(names(&Caller::root()), vec!["closed", "open"]);
    assert!(core.lookup_as(&stranger, by_id, OsStr::new("open")).is_ok());
    let e = core
        .lookup_as(&stranger, by_id, OsStr::new("closed"))
        .unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT);
    assert!(core
        .lookup_as(&Caller::root(), by_id, OsStr::new("closed"))
        .is_ok());
}

/// A mount only its owner can reach (no `allow_other`, no `allow_root`)
/// lets the kernel cache the views' entries like any other; their
/// listings are never cached (sessions come and go without the view's
/// mtime changing).
#[test]
fn views_are_cached_when_only_the_owner_can_reach_the_mount() {
    let (_tmp, _root, mut core) = core_over(&[("solo", "/srv/app")]);
    core.set_single_caller(true);
    let by_id = core.lookup(ROOT_INO, OsStr::new(".by-id")).unwrap().ino;
    let by_date = core.lookup(ROOT_INO, OsStr::new(".by-date")).unwrap().ino;
    assert!(!core.is_per_user(by_id));
    assert!(!core.is_per_user(by_date));
    assert!(core.opendir(by_id).unwrap(), "the listing is not cached");
    assert!(core.opendir(by_date).unwrap(), "the listing is not cached");
    assert!(
        !core.opendir(ROOT_INO).unwrap(),
        "the root's listing may be"
    );
    assert!(core.lookup(by_id, OsStr::new("solo")).is_ok());
}

/// A view's link whose session was removed on disk after the views'
/// snapshot was taken (it lives at most 0.5 s) is a dangling link while
/// listed, not an entry `ls -l` cannot stat; once the snapshot is renewed
/// it is gone.
#[test]
fn a_view_link_whose_session_went_is_a_dangling_link_until_the_views_follow() {
    let (_tmp, root, mut core) = core_over(&[("gone", "/srv/app"), ("stays", "/srv/app")]);
    core.set_single_caller(true);
    let by_title = core.lookup(ROOT_INO, OsStr::new(".by-title")).unwrap().ino;
    let listing = core.readdir(by_title, 0).unwrap();
    let link = listing
        .iter()
        .map(|(_, e)| e.name.clone())
        .find(|n| n.to_string_lossy().contains("gone"))
        .expect("a link of session gone");
    std::fs::remove_dir_all(root.join(rel("gone", "/srv/app"))).unwrap();
    let attr = core
        .lookup(by_title, &link)
        .expect("the listed link still answers");
    assert_eq!(attr.kind, sessionfs::fuse::fs::Kind::Symlink);
    // Past the snapshot's age, the link is gone.
    std::thread::sleep(Duration::from_millis(600));
    let e = core.lookup(by_title, &link).unwrap_err();
    assert_eq!(e.errno(), libc::ENOENT);
}
