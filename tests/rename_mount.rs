//! Issue 11, Must show 5 and the `forget` half of 3: pass-through entries
//! of a session directory behave as on the backing file system. Inodes
//! follow the file, not the path (a rename moves the inode: the new name
//! answers at once, an open descriptor keeps writing to the renamed file);
//! `ln -s`, `ln` and `mkfifo` work and make what they make on the backing
//! file system; and inodes the kernel forgets (`drop_caches`) leave the
//! daemon's table (`.sessionfs-status` → `inodes`).
//!
//! Expectations are read from the backing file system directly.

mod common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::time::{Duration, Instant};

use common::{corpus_copy, sh_ok, Mount};

/// A session directory of the `normal` corpus case.
const SESSION: &str = "--home-alice-work-app--/Session-A";

fn status_inodes(mount: &Mount) -> u64 {
    let text = fs::read_to_string(mount.join(".sessionfs-status")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v["inodes"].as_u64().expect("inodes in the status")
}

#[test]
fn an_append_after_rename_lands_in_the_renamed_file() {
    let (_tmp, root) = corpus_copy("normal");
    let mount = Mount::start(&root, &[]);
    let dir = mount.join(SESSION);
    let backing = root.join(SESSION);
    // The sequence of the issue, as a shell user types it.
    sh_ok(
        "cd \"$1\" && echo AAA > a.txt && mv a.txt b.txt && echo NEW-A > a.txt && echo appended >> b.txt",
        [&dir],
    );
    assert_eq!(
        fs::read_to_string(backing.join("b.txt")).unwrap(),
        "AAA\nappended\n"
    );
    assert_eq!(
        fs::read_to_string(backing.join("a.txt")).unwrap(),
        "NEW-A\n"
    );
    assert_eq!(
        fs::read_to_string(dir.join("b.txt")).unwrap(),
        "AAA\nappended\n"
    );
    assert_eq!(fs::read_to_string(dir.join("a.txt")).unwrap(), "NEW-A\n");

    // An open descriptor keeps writing to the file after it is renamed.
    let mut f = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(dir.join("log.txt"))
        .unwrap();
    f.write_all(b"one\n").unwrap();
    fs::rename(dir.join("log.txt"), dir.join("log-old.txt")).unwrap();
    fs::write(dir.join("log.txt"), b"fresh\n").unwrap();
    f.write_all(b"two\n").unwrap();
    drop(f);
    assert_eq!(
        fs::read(backing.join("log-old.txt")).unwrap(),
        b"one\ntwo\n"
    );
    assert_eq!(fs::read(backing.join("log.txt")).unwrap(), b"fresh\n");
    mount.stop();
}

#[test]
fn the_new_name_answers_at_once_for_files_and_folders() {
    let (_tmp, root) = corpus_copy("normal");
    let mount = Mount::start(&root, &[]);
    let dir = mount.join(SESSION);
    // Looked up (and cached by the kernel) before the rename.
    fs::write(dir.join("c.txt"), b"see\n").unwrap();
    let before = fs::metadata(dir.join("c.txt")).unwrap();
    let out = sh_ok(
        "cd \"$1\" && mv c.txt d.txt && cat d.txt && ls -l d.txt",
        [&dir],
    );
    assert!(
        String::from_utf8_lossy(&out).starts_with("see\n"),
        "{out:?}"
    );
    let after = fs::metadata(dir.join("d.txt")).unwrap();
    assert_eq!(after.ino(), before.ino(), "the inode follows the file");
    assert_eq!(
        after.ino(),
        fs::metadata(root.join(SESSION).join("d.txt"))
            .unwrap()
            .ino()
    );
    assert!(
        fs::metadata(dir.join("c.txt")).is_err(),
        "the old name is gone"
    );

    fs::create_dir(dir.join("folder")).unwrap();
    fs::write(dir.join("folder/inside.txt"), b"in\n").unwrap();
    fs::metadata(dir.join("folder/inside.txt")).unwrap();
    let out = sh_ok(
        "cd \"$1\" && mv folder moved && cat moved/inside.txt && ls -l moved",
        [&dir],
    );
    assert!(String::from_utf8_lossy(&out).starts_with("in\n"), "{out:?}");
    assert!(fs::metadata(dir.join("folder")).is_err());
    fs::write(dir.join("moved/second.txt"), b"2\n").unwrap();
    assert_eq!(
        fs::read(root.join(SESSION).join("moved/second.txt")).unwrap(),
        b"2\n"
    );
    mount.stop();
}

#[test]
fn symlinks_hard_links_and_fifos_are_made_on_the_backing_file_system() {
    let (_tmp, root) = corpus_copy("normal");
    let mount = Mount::start(&root, &[]);
    let dir = mount.join(SESSION);
    let backing = root.join(SESSION);
    fs::write(dir.join("target.txt"), b"t\n").unwrap();
    sh_ok(
        "cd \"$1\" && ln -s target.txt soft && ln target.txt hard && mkfifo pipe",
        [&dir],
    );
    assert_eq!(
        fs::read_link(backing.join("soft")).unwrap(),
        Path::new("target.txt")
    );
    assert_eq!(
        fs::read_link(dir.join("soft")).unwrap(),
        Path::new("target.txt")
    );
    assert_eq!(fs::read(dir.join("soft")).unwrap(), b"t\n");
    let (b_target, b_hard) = (
        fs::metadata(backing.join("target.txt")).unwrap(),
        fs::metadata(backing.join("hard")).unwrap(),
    );
    assert_eq!(b_target.ino(), b_hard.ino());
    assert_eq!(b_hard.nlink(), 2);
    let (m_target, m_hard) = (
        fs::metadata(dir.join("target.txt")).unwrap(),
        fs::metadata(dir.join("hard")).unwrap(),
    );
    assert_eq!(m_target.ino(), m_hard.ino(), "hard links share an inode");
    assert_eq!(m_hard.nlink(), 2);
    assert!(fs::symlink_metadata(backing.join("pipe"))
        .unwrap()
        .file_type()
        .is_fifo());
    assert!(fs::symlink_metadata(dir.join("pipe"))
        .unwrap()
        .file_type()
        .is_fifo());
    // Not in a project directory, and not over the transcript's names.
    let fails = |script: &str| {
        !common::sh(script, [&mount.join("--home-alice-work-app--")])
            .status
            .success()
    };
    assert!(fails("cd \"$1\" && ln -s x link-in-project"));
    assert!(fails("cd \"$1\"/Session-A && ln -s x session.jsonl.zstd"));
    mount.stop();
}

/// Entries made through the mount get the modes the caller asked for, as
/// the same commands give them on the backing file system: with umask 0 a
/// `mkdir` is 0777 and `touch` and `mkfifo` 0666 (the daemon's own umask is
/// not applied on top; pjdfstest's rename group found it), a directory
/// made in a set-group-ID one keeps the bit it inherits, and opening an
/// existing file with `O_CREAT` changes nothing of it.
#[test]
fn entries_made_get_the_modes_asked_as_on_the_backing_file_system() {
    let (_tmp, root) = corpus_copy("normal");
    let mount = Mount::start(&root, &[]);
    let native = tempfile::tempdir().unwrap();
    let script = "cd \"$1\" && umask 0 && mkdir d && touch f && mkfifo p && \
                  mkdir -m 2755 g && mkdir g/in && umask 077 && mkdir tight && touch t && \
                  chmod 600 f && : >> f";
    let modes = |dir: &Path| -> Vec<(String, u32)> {
        sh_ok(script, [dir]);
        ["d", "f", "p", "g", "g/in", "tight", "t"]
            .iter()
            .map(|n| {
                let mode = fs::symlink_metadata(dir.join(n)).unwrap().mode() & 0o7777;
                (n.to_string(), mode)
            })
            .collect()
    };
    let want = modes(native.path());
    assert_eq!(want[0], ("d".to_string(), 0o777), "the native reference");
    assert_eq!(modes(&mount.join(SESSION)), want, "through the mount");
    let backing: Vec<(String, u32)> = want
        .iter()
        .map(|(n, _)| {
            let mode = fs::symlink_metadata(root.join(SESSION).join(n))
                .unwrap()
                .mode();
            (n.clone(), mode & 0o7777)
        })
        .collect();
    assert_eq!(backing, want, "on the backing file system");
    mount.stop();
}

/// `touch` (utimensat) of passed-through entries changes the entry's own
/// times, as on the backing file system: a FIFO's without waiting for a
/// writer, a socket's, and with `-h` a symbolic link's (dangling or not),
/// never its target's.
#[test]
fn times_are_set_on_the_entry_itself() {
    use std::os::unix::net::UnixListener;
    use std::process::Command;
    let (_tmp, root) = corpus_copy("normal");
    let backing = root.join(SESSION);
    fs::write(backing.join("target"), b"t\n").unwrap();
    std::os::unix::fs::symlink("target", backing.join("lnk")).unwrap();
    std::os::unix::fs::symlink("/nonexistent-target", backing.join("dang")).unwrap();
    sh_ok("mkfifo \"$1\"/pipe", [&backing]);
    let _socket = UnixListener::bind(backing.join("sock")).unwrap();
    let mount = Mount::start(&root, &[]);
    let dir = mount.join(SESSION);
    let target_before = fs::metadata(backing.join("target")).unwrap().mtime();
    for (name, args) in [
        ("pipe", vec!["-d", "2001-01-01"]),
        ("sock", vec!["-d", "2001-01-01"]),
        ("lnk", vec!["-h", "-d", "2001-01-01"]),
        ("dang", vec!["-h", "-d", "2001-01-01"]),
    ] {
        let mut child = Command::new("touch")
            .args(&args)
            .arg(dir.join(name))
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                // Release a request waiting in the FIFO's open, then fail.
                let _ = fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(backing.join("pipe"));
                let _ = child.wait();
                panic!("touch of {name} did not return within 10 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "touch {args:?} {name}: {status}");
        let m = fs::symlink_metadata(backing.join(name)).unwrap();
        // 2001-01-01 in any zone of the machine: within a day of it.
        assert!(
            (m.mtime() - 978_307_200).abs() < 86_400,
            "{name}: mtime {}",
            m.mtime()
        );
    }
    assert_eq!(
        fs::metadata(backing.join("target")).unwrap().mtime(),
        target_before,
        "the link's target keeps its time"
    );
    mount.stop();
}

#[test]
fn inodes_the_kernel_forgets_leave_the_table() {
    let (_tmp, root) = corpus_copy("normal");
    // Files made on the backing side, so that only lookups bring them in.
    let backing = root.join(SESSION).join("many");
    fs::create_dir(&backing).unwrap();
    for i in 0..2000 {
        fs::write(backing.join(format!("f{i}")), b"x").unwrap();
    }
    let mount = Mount::start(&root, &[]);
    let start = status_inodes(&mount);
    let dir = mount.join(SESSION).join("many");
    for i in 0..2000 {
        fs::metadata(dir.join(format!("f{i}"))).unwrap();
    }
    let held = status_inodes(&mount);
    assert!(held >= start + 2000, "looked up: {start} -> {held}");
    // Reclaimable dentries and inodes go; the kernel sends FORGET.
    fs::write("/proc/sys/vm/drop_caches", b"2").expect("write drop_caches (needs root)");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut now = held;
    while now > start + 100 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        now = status_inodes(&mount);
    }
    assert!(
        now <= start + 100,
        "after drop_caches the table holds {now} inodes (before {held}, at start {start})"
    );
    mount.stop();
}

/// The tester's atomic-replace sequence: `ln a b; mv tmp b` replaces one
/// name of a hard-linked file. The other name still reads, appends to,
/// changes the mode of and truncates its own file, not the replacement
/// (it once answered with the replacement's bytes and wrote into it).
#[test]
fn a_hard_link_whose_other_name_is_replaced_keeps_its_own_file() {
    use std::os::unix::fs::PermissionsExt;
    let (_tmp, root) = corpus_copy("normal");
    let mount = Mount::start(root.as_path(), &[]);
    let dir = mount.join(SESSION);
    let backing = root.join(SESSION);
    fs::write(dir.join("a"), b"AAAA\n").unwrap();
    fs::hard_link(dir.join("a"), dir.join("b")).unwrap();
    fs::write(dir.join("tmp"), b"REPLACEMENT\n").unwrap();
    fs::rename(dir.join("tmp"), dir.join("b")).unwrap();
    assert_eq!(fs::read(dir.join("a")).unwrap(), b"AAAA\n");
    assert_eq!(fs::read(dir.join("b")).unwrap(), b"REPLACEMENT\n");
    let mut f = fs::OpenOptions::new()
        .append(true)
        .open(dir.join("a"))
        .unwrap();
    f.write_all(b"appended\n").unwrap();
    drop(f);
    fs::set_permissions(dir.join("a"), fs::Permissions::from_mode(0o600)).unwrap();
    assert_eq!(fs::read(backing.join("a")).unwrap(), b"AAAA\nappended\n");
    assert_eq!(fs::read(backing.join("b")).unwrap(), b"REPLACEMENT\n");
    let mode = |p: &Path| fs::metadata(p).unwrap().mode() & 0o777;
    assert_eq!(mode(&backing.join("a")), 0o600);
    assert_ne!(mode(&backing.join("b")), 0o600, "b's mode unchanged");
    // A symbolic link or FIFO moved over a name of a hard-linked file:
    // the other name still reads its file (it gave EIO).
    fs::write(dir.join("c1"), b"orig\n").unwrap();
    fs::hard_link(dir.join("c1"), dir.join("c2")).unwrap();
    std::os::unix::fs::symlink("nowhere", dir.join("s")).unwrap();
    fs::rename(dir.join("s"), dir.join("c2")).unwrap();
    assert_eq!(fs::read(dir.join("c1")).unwrap(), b"orig\n");
    assert_eq!(fs::read_link(dir.join("c2")).unwrap(), Path::new("nowhere"));
    mount.stop();
}

/// A folder renamed on the backing side and replaced by another of the
/// same name: a descriptor (or working directory) open in the old one
/// never lists, creates in or removes from the new one (it did, for the
/// attribute timeout); it fails instead, as the mount reaches files by
/// name (README).
#[test]
fn a_folder_replaced_outside_the_mount_is_not_acted_on_through_an_old_descriptor() {
    use std::os::fd::AsRawFd;
    let (_tmp, root) = corpus_copy("normal");
    let mount = Mount::start(root.as_path(), &["--attr-timeout", "0.2"]);
    let backing = root.join(SESSION);
    fs::create_dir_all(mount.join(SESSION).join("work/src")).unwrap();
    fs::write(mount.join(SESSION).join("work/src/keep.txt"), b"keep\n").unwrap();
    let dir = fs::File::open(mount.join(SESSION).join("work/src")).unwrap();
    fs::rename(backing.join("work"), backing.join("work-old")).unwrap();
    fs::create_dir_all(backing.join("work/src")).unwrap();
    fs::write(backing.join("work/src/other.txt"), b"other\n").unwrap();
    let deadline = Instant::now() + Duration::from_millis(500);
    while Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let name = std::ffi::CString::new("created.txt").unwrap();
    // SAFETY: a valid descriptor and NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_CREAT | libc::O_WRONLY,
            0o644,
        )
    };
    let err = std::io::Error::last_os_error().raw_os_error();
    if fd >= 0 {
        // SAFETY: the descriptor just opened.
        unsafe { libc::close(fd) };
    }
    assert!(fd < 0, "create through the old descriptor succeeded");
    assert!(
        matches!(err, Some(libc::ESTALE) | Some(libc::ENOENT)),
        "{err:?}"
    );
    assert!(!backing.join("work/src/created.txt").exists());
    assert_eq!(
        fs::read(backing.join("work/src/other.txt")).unwrap(),
        b"other\n"
    );
    assert_eq!(
        fs::read(backing.join("work-old/src/keep.txt")).unwrap(),
        b"keep\n"
    );
    drop(dir);
    mount.stop();
}
