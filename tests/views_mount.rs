//! The `.by-cwd/`, `.by-date/` and `.by-title/` views (issue 14) over a
//! copy of the corpus through a real mount, against expectations computed
//! here from the corpus's own records (`expected.json`, `ops.jsonl`) and
//! from `date(1)`.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{copy_tree, corpus_dir, Mount};
use serde_json::Value;
use sessionfs::store::frame::encode_frame;
use unicode_normalization::UnicodeNormalization;

/// A POSIX time zone 14 hours east of UTC: needs no tz database, and puts
/// some corpus sessions on another day than UTC does.
const TZ: &str = "XYZ-14";

/// How long a change of the store may take to show in a view.
const FOLLOW: Duration = Duration::from_secs(2);

struct Expected {
    id: String,
    cwd: Option<String>,
    created_ms: u64,
    /// `project/session` as the reference placed it.
    dir: String,
    title: String,
}

/// The title rules of issue 14, written here independently of the crate:
/// control and white-space characters become spaces, `/` becomes `_`,
/// runs of spaces collapse, leading spaces go, at most 60 characters cut
/// after the last whole word, trailing spaces and dots removed.
fn title_of(text: &str) -> String {
    let mut words: Vec<String> = Vec::new();
    let cleaned: String = text
        .chars()
        .map(|c| {
            if c.is_control() || c.is_whitespace() {
                ' '
            } else if c == '/' {
                '_'
            } else {
                c
            }
        })
        .collect();
    for w in cleaned.split(' ').filter(|w| !w.is_empty()) {
        words.push(w.to_string());
    }
    let mut out = String::new();
    for w in &words {
        let len = out.chars().count() + usize::from(!out.is_empty()) + w.chars().count();
        if len > 60 {
            if out.is_empty() {
                out = w.chars().take(60).collect();
            }
            break;
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(w);
    }
    out.trim_end_matches([' ', '.']).to_string()
}

fn short_id(id: &str) -> String {
    let body = id.rsplit('_').next().unwrap_or(id);
    body.chars()
        .take(8)
        .map(|c| if c == '/' { '_' } else { c })
        .collect()
}

/// The sessions of corpus `normal`: headers and placement from
/// `expected.json`, the first user message from `ops.jsonl`.
fn expected() -> Vec<Expected> {
    let case = corpus_dir().join("normal");
    let doc: Value =
        serde_json::from_slice(&fs::read(case.join("expected.json")).unwrap()).unwrap();
    let report = &doc["report"];
    let mut first_user: BTreeMap<String, String> = BTreeMap::new();
    for line in fs::read_to_string(case.join("ops.jsonl")).unwrap().lines() {
        let op: Value = serde_json::from_str(line).unwrap();
        let Some(id) = op["id"].as_str() else {
            continue;
        };
        if first_user.contains_key(id) {
            continue;
        }
        for ev in op["events"].as_array().into_iter().flatten() {
            if ev["type"] == "user/message" {
                let texts: Vec<&str> = ev["data"]["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|b| b["type"] == "text")
                    .filter_map(|b| b["text"].as_str())
                    .collect();
                first_user.insert(id.to_string(), texts.join(" "));
                break;
            }
        }
    }
    let dirs: BTreeMap<String, String> = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let dir = s["dirs"][0].as_str().unwrap().trim_end_matches('/');
            (s["id"].as_str().unwrap().to_string(), dir.to_string())
        })
        .collect();
    report["list"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let id = h["id"].as_str().unwrap().to_string();
            Expected {
                cwd: h["cwd"].as_str().map(String::from),
                created_ms: h["createdAt"].as_u64().unwrap(),
                dir: dirs[&id].clone(),
                title: title_of(first_user.get(&id).map_or("", String::as_str)),
                id,
            }
        })
        .collect()
}

/// `date(1)` of a creation time in [`TZ`] with `format`.
fn local(ms: u64, format: &str) -> String {
    let out = Command::new("date")
        .env("TZ", TZ)
        .arg("-d")
        .arg(format!("@{}", ms / 1000))
        .arg(format!("+{format}"))
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The `.by-cwd` directory a cwd must be shown at, relative to `.by-cwd`.
fn cwd_dir(cwd: Option<&str>) -> PathBuf {
    let Some(cwd) = cwd else {
        return PathBuf::from("_no-cwd");
    };
    let cwd: String = cwd.nfc().collect();
    let cwd = cwd.replace('\\', "/");
    cwd.split('/').filter(|c| !c.is_empty()).collect()
}

/// Every link under `dir`: (path relative to `dir`, the session
/// directory it resolves to, relative to the mount).
fn links_under(mount: &Path, dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    let mount_real = fs::canonicalize(mount).unwrap();
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let t = entry.file_type().unwrap();
            if t.is_dir() {
                stack.push(entry.path());
            } else {
                assert!(t.is_symlink(), "{:?}", entry.path());
                let real = fs::canonicalize(entry.path())
                    .unwrap_or_else(|e| panic!("{:?} does not resolve: {e}", entry.path()));
                let rel = real.strip_prefix(&mount_real).unwrap();
                assert!(real.join("session.jsonl").is_file(), "{real:?}");
                out.push((
                    entry.path().strip_prefix(dir).unwrap().to_path_buf(),
                    rel.to_string_lossy().into_owned(),
                ));
            }
        }
    }
    out
}

fn mount_corpus(root: &Path, args: &[&str]) -> Mount {
    Mount::start_wrapped(
        root,
        args,
        Duration::from_secs(300),
        &[],
        &[(OsStr::new("TZ"), OsStr::new(TZ))],
    )
}

#[test]
fn views_show_every_corpus_session_where_its_header_says() {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let mount = mount_corpus(root.path(), &[]);
    let sessions = expected();
    assert_eq!(sessions.len(), 23);
    let by_dir: BTreeMap<&str, &Expected> = sessions.iter().map(|s| (s.dir.as_str(), s)).collect();

    // .by-cwd: every header cwd as a path, every link to its session.
    let cwd_links = links_under(mount.path(), &mount.join(".by-cwd"));
    assert_eq!(cwd_links.len(), 23, "{cwd_links:#?}");
    let mut seen = BTreeSet::new();
    for (link, target) in &cwd_links {
        let s = by_dir
            .get(target.as_str())
            .unwrap_or_else(|| panic!("{target}"));
        assert!(seen.insert(target.clone()), "{target} linked twice");
        assert_eq!(
            link.parent().unwrap(),
            cwd_dir(s.cwd.as_deref()),
            "{}",
            s.id
        );
        let name = link.file_name().unwrap().to_str().unwrap();
        let want = [
            local(s.created_ms, "%Y-%m-%d %H-%M-%S"),
            s.title.clone(),
            short_id(&s.id),
        ]
        .join(" ");
        assert_eq!(name, want, "{}", s.id);
    }
    let dir_of = |id: &str| {
        let s = sessions.iter().find(|s| s.id == id).unwrap();
        cwd_links
            .iter()
            .find(|(_, t)| *t == s.dir)
            .unwrap()
            .0
            .parent()
            .unwrap()
            .to_path_buf()
    };
    // The cwds the issue names.
    assert_eq!(dir_of("cwd-slash"), Path::new(""));
    assert_eq!(dir_of("cwd-root"), Path::new("root"));
    assert_eq!(dir_of("double//slash"), Path::new("srv/double/slash"));
    assert_eq!(
        dir_of("trailing-slash"),
        Path::new(&common::CORPUS_APP_CWD[1..])
    );
    assert_eq!(dir_of("ünïcödé-🚀"), Path::new("C:/Users/dev/repo"));
    assert_eq!(dir_of("~tilde~"), Path::new("home/carol/~tmp/100%/x y"));
    // The NFC/NFD pair shares one directory, spelled NFC; the two long
    // cwds whose keys collide do not.
    assert_eq!(dir_of("."), dir_of(".."));
    assert_eq!(dir_of("."), Path::new("home/bob/项目/caf\u{e9}"));
    assert!(mount.join(".by-cwd/home/bob/项目/caf\u{e9}").is_dir());
    assert_ne!(dir_of("long-cwd-c"), dir_of("long-cwd-e"));
    assert!(dir_of("long-cwd-c").ends_with("other-path-segments/elsewhere"));
    assert!(dir_of("long-cwd-e").ends_with("more-path-segments/final"));
    assert_eq!(
        fs::read_link(mount.join(".by-cwd/root").join(format!(
            "{} {} cwd-root",
            local(1767654000000, "%Y-%m-%d %H-%M-%S"),
            sessions.iter().find(|s| s.id == "cwd-root").unwrap().title
        )))
        .unwrap(),
        Path::new("../../--root--/cwd-root")
    );

    // .by-date: every session once, under its local creation day.
    let date_links = links_under(mount.path(), &mount.join(".by-date"));
    assert_eq!(date_links.len(), 23);
    let targets: BTreeSet<&String> = date_links.iter().map(|(_, t)| t).collect();
    assert_eq!(targets.len(), 23);
    for (link, target) in &date_links {
        let s = by_dir[target.as_str()];
        assert_eq!(
            link.parent().unwrap(),
            Path::new(&local(s.created_ms, "%Y/%m/%d"))
        );
        let want = format!(
            "{} {} {}",
            local(s.created_ms, "%H-%M-%S"),
            s.title,
            short_id(&s.id)
        );
        assert_eq!(link.file_name().unwrap().to_str().unwrap(), want);
    }
    // In this zone some sessions fall on another day than in UTC.
    assert!(sessions.iter().any(|s| {
        let utc = Command::new("date")
            .env("TZ", "UTC0")
            .arg("-d")
            .arg(format!("@{}", s.created_ms / 1000))
            .arg("+%d")
            .output()
            .unwrap()
            .stdout;
        String::from_utf8(utc).unwrap().trim() != local(s.created_ms, "%d")
    }));

    // .by-title: flat, every session once, named by its title.
    let title_links = links_under(mount.path(), &mount.join(".by-title"));
    assert_eq!(title_links.len(), 23);
    for (link, target) in &title_links {
        let s = by_dir[target.as_str()];
        assert_eq!(link.parent().unwrap(), Path::new(""));
        let want = format!("{} {}", s.title, short_id(&s.id));
        assert_eq!(link.file_name().unwrap().to_str().unwrap(), want);
        assert!(!s.title.is_empty() && s.title.chars().count() <= 60);
    }

    // Read-only.
    assert!(fs::create_dir(mount.join(".by-cwd/x")).is_err());
    assert!(fs::remove_dir(mount.join(".by-cwd/root")).is_err());
    mount.stop();
}

fn write_session(root: &Path, id: &str, cwd: &str, created_ms: u64, text: &str) -> PathBuf {
    let key = sessionfs::store::naming::project_key(cwd).unwrap();
    let dir = root.join(key).join(id);
    fs::create_dir_all(&dir).unwrap();
    let header = serde_json::json!({
        "type": "session", "version": 0, "id": id, "createdAt": created_ms, "cwd": cwd,
        "delegationDepth": 0,
    });
    let msg = serde_json::json!({
        "type": "user/message", "seq": 0, "time": created_ms, "data": {
            "id": "m1", "role": "user", "content": [{"type": "text", "text": text}],
        },
    });
    let mut bytes = encode_frame(format!("{header}\n").as_bytes()).unwrap();
    bytes.extend(encode_frame(format!("{msg}\n").as_bytes()).unwrap());
    // Published as the store does: a temporary name, then a link.
    let tmp = dir.join("session.jsonl.zstd.00ff.tmp");
    fs::write(&tmp, bytes).unwrap();
    fs::hard_link(&tmp, dir.join("session.jsonl.zstd")).unwrap();
    fs::remove_file(&tmp).unwrap();
    dir
}

/// Waits until `check` holds, at most [`FOLLOW`]; returns how long it took.
fn within_follow(what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    loop {
        if check() {
            return start.elapsed();
        }
        assert!(start.elapsed() < FOLLOW, "{what}: not within {FOLLOW:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn names(dir: &Path) -> Vec<String> {
    match fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[test]
fn a_session_created_or_removed_on_disk_follows_in_every_view() {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let mount = mount_corpus(root.path(), &[]);
    // Every view listed once, so the mount has a snapshot to change.
    assert_eq!(names(&mount.join(".by-title")).len(), 23);
    let ms = 1_767_700_000_000; // 2026-01-06 11:46:40 UTC
    let day = mount.join(".by-date").join(local(ms, "%Y/%m/%d"));
    let name_date = format!("{} Fresh session here new12345", local(ms, "%H-%M-%S"));
    let name_cwd = format!(
        "{} Fresh session here new12345",
        local(ms, "%Y-%m-%d %H-%M-%S")
    );
    let in_cwd = mount.join(".by-cwd").join(&common::CORPUS_APP_CWD[1..]);
    // Listed before the change too: the kernel keeps a view directory's
    // listing until its mtime moves (opendir is declined), and must see
    // it move.
    let before = names(&in_cwd);
    assert!(
        !before.is_empty() && !before.contains(&name_cwd),
        "{before:?}"
    );
    let dir = write_session(
        root.path(),
        "x_new12345",
        common::CORPUS_APP_CWD,
        ms,
        "Fresh session here.",
    );
    within_follow("appears in .by-title", || {
        names(&mount.join(".by-title")).contains(&"Fresh session here new12345".to_string())
    });
    within_follow("appears in .by-date", || names(&day).contains(&name_date));
    within_follow("appears in .by-cwd", || names(&in_cwd).contains(&name_cwd));
    assert_eq!(
        fs::read_link(day.join(&name_date)).unwrap(),
        Path::new("../../../../--home-alice-work-app--/x_new12345")
    );
    assert!(day.join(&name_date).join("session.jsonl").is_file());
    fs::remove_dir_all(&dir).unwrap();
    within_follow("leaves .by-title", || {
        !names(&mount.join(".by-title"))
            .iter()
            .any(|n| n.contains("new12345"))
    });
    within_follow("leaves .by-date", || !names(&day).contains(&name_date));
    within_follow("leaves .by-cwd", || !names(&in_cwd).contains(&name_cwd));
    within_follow("lookup fails", || {
        fs::symlink_metadata(day.join(&name_date)).is_err()
    });
    mount.stop();
}

/// A transcript replaced or removed inside its session directory changes
/// no project directory's stamp: the views still follow it (found by a
/// fresh tester: they kept the old title, and the removed session).
#[test]
fn a_transcript_replaced_or_removed_in_its_directory_follows_in_the_views() {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let ms = 1_767_700_000_000;
    let dir = write_session(
        root.path(),
        "x_rep12345",
        common::CORPUS_APP_CWD,
        ms,
        "Original title here.",
    );
    // Past the window in which a directory's stamp is not trusted (a
    // change in the same clock tick could keep it), so that the project's
    // stamp is taken as it is and not listed again.
    std::thread::sleep(Duration::from_millis(2500));
    let mount = mount_corpus(root.path(), &[]);
    let titles = || names(&mount.join(".by-title"));
    assert!(titles().contains(&"Original title here rep12345".to_string()));
    let scratch = tempfile::tempdir().unwrap();
    let other = write_session(
        scratch.path(),
        "x_rep12345",
        common::CORPUS_APP_CWD,
        ms,
        "Replaced title here.",
    );
    fs::rename(
        other.join("session.jsonl.zstd"),
        dir.join("session.jsonl.zstd"),
    )
    .unwrap();
    // Found by the background sweep (every second while the views are in
    // use), then read again: a few seconds at most, even on a busy host.
    let within_sweep = |what: &str, check: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !check() {
            assert!(Instant::now() < deadline, "{what}: not within 10 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    within_sweep("the new title", &|| {
        let t = titles();
        t.contains(&"Replaced title here rep12345".to_string())
            && !t.contains(&"Original title here rep12345".to_string())
    });
    // Rewritten in place (the same inode), shorter: read again.
    let third = write_session(
        scratch.path(),
        "x_rep12345",
        common::CORPUS_APP_CWD,
        ms,
        "Short.",
    );
    let shorter = fs::read(third.join("session.jsonl.zstd")).unwrap();
    let transcript = dir.join("session.jsonl.zstd");
    assert!((shorter.len() as u64) < fs::metadata(&transcript).unwrap().len());
    let ino = fs::metadata(&transcript).unwrap().ino();
    fs::write(&transcript, &shorter).unwrap();
    assert_eq!(fs::metadata(&transcript).unwrap().ino(), ino, "in place");
    within_sweep("the rewritten title", &|| {
        let t = titles();
        t.contains(&"Short rep12345".to_string())
            && !t.contains(&"Replaced title here rep12345".to_string())
    });
    // Emptied in place: no header, no session.
    fs::File::options()
        .write(true)
        .open(&transcript)
        .unwrap()
        .set_len(0)
        .unwrap();
    within_sweep("an emptied transcript leaves .by-title", &|| {
        !titles().iter().any(|n| n.contains("rep12345"))
    });
    fs::write(&transcript, &shorter).unwrap();
    within_sweep("written again", &|| {
        titles().contains(&"Short rep12345".to_string())
    });
    fs::remove_file(&transcript).unwrap();
    within_sweep("leaves .by-title", &|| {
        !titles().iter().any(|n| n.contains("rep12345"))
    });
    mount.stop();
}

#[test]
fn a_second_mount_lists_the_titles_without_decoding_a_frame() {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let cache = tempfile::tempdir().unwrap();
    let cache_arg = cache.path().to_str().unwrap();
    let first = mount_corpus(root.path(), &["--index-cache", cache_arg]);
    // `ls -l` of the mount's root reads no session for the views.
    let out = Command::new("ls")
        .arg("-la")
        .arg(first.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains(".by-date"));
    assert_eq!(first.status()["views"]["sessions_read"], 0);
    assert_eq!(first.status()["views"]["ready"], false);
    let mut listed = names(&first.join(".by-title"));
    listed.sort();
    assert_eq!(listed.len(), 23);
    let s = first.status();
    assert!(s["frames_decoded"].as_u64().unwrap() >= 23, "{s}");
    assert_eq!(s["views"]["sessions_read"], 23, "{s}");
    first.stop();

    let second = mount_corpus(root.path(), &["--index-cache", cache_arg]);
    // The persisted catalog is brought up to date before any view is
    // listed, and still without reading a session.
    let deadline = Instant::now() + Duration::from_secs(10);
    while second.status()["views"]["ready"] != true && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let s = second.status();
    assert_eq!(s["views"]["ready"], true, "{s}");
    assert_eq!(s["views"]["sessions_read"], 0, "{s}");
    let mut again = names(&second.join(".by-title"));
    again.sort();
    assert_eq!(again, listed);
    // A day and a cwd list too, still without decoding.
    let day = local(1767603600000, "%Y/%m/%d");
    assert!(!names(&second.join(".by-date").join(day)).is_empty());
    assert_eq!(
        names(&second.join(".by-cwd").join(&common::CORPUS_APP_CWD[1..])).len(),
        11
    );
    let s = second.status();
    assert_eq!(s["frames_decoded"], 0, "{s}");
    assert_eq!(s["views"]["sessions_read"], 0, "{s}");
    // Every link resolves (this opens the transcripts).
    assert_eq!(
        links_under(second.path(), &second.join(".by-title")).len(),
        23
    );
    second.stop();
}

#[test]
fn damaged_corpus_cases_show_exactly_the_sessions_list_accepts() {
    for case in [
        "duplicate",
        "corrupt-header",
        "corrupt-tail",
        "torn",
        "flat",
        "mismatch",
        "identity-moved",
        "stray-files",
    ] {
        let root = tempfile::tempdir().unwrap();
        copy_tree(&corpus_dir().join(case).join("root"), root.path());
        // What `sessionfs list` accepts (the store's own validation).
        let out = Command::new(env!("CARGO_BIN_EXE_sessionfs"))
            .args(["list", "--json"])
            .arg(root.path())
            .output()
            .unwrap();
        let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut want: Vec<String> = listed
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let path = Path::new(s["path"].as_str().unwrap());
                let dir = path.parent().unwrap();
                let project = dir.parent().unwrap().file_name().unwrap();
                format!(
                    "{}/{}",
                    project.to_string_lossy(),
                    dir.file_name().unwrap().to_string_lossy()
                )
            })
            .collect();
        want.sort();
        assert!(!want.is_empty(), "{case}: list accepts no session");
        let mount = mount_corpus(root.path(), &[]);
        for view in [".by-title", ".by-date", ".by-cwd"] {
            let mut got: Vec<String> = links_under(mount.path(), &mount.join(view))
                .into_iter()
                .map(|(_, target)| target)
                .collect();
            got.sort();
            assert_eq!(got, want, "{case} {view}");
        }
        mount.stop();
    }
}

/// Runs `argv` as uid/gid 65534 (nobody) without supplementary groups;
/// returns (status ok, stdout).
fn as_nobody(argv: &[&str]) -> (bool, String) {
    let out = Command::new("timeout")
        .args([
            "-k",
            "5",
            "30",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
        ])
        .args(argv)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run setpriv (util-linux)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn each_user_sees_only_the_sessions_they_may_read() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    copy_tree(&corpus_dir().join("normal/root"), &root);
    let status = Command::new("chmod")
        .args(["-R", "a+rX"])
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(status.success());
    let chmod = |p: &Path, mode| fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap();
    chmod(tmp.path(), 0o755);
    // `--root--` holds the sessions of `/` and `/root`; Session-A's
    // transcript alone is closed.
    chmod(&root.join("--root--"), 0o700);
    chmod(
        &root.join("--home-alice-work-app--/Session-A/session.jsonl.zstd"),
        0o600,
    );
    let mount = mount_corpus(&root, &["--allow-other"]);
    let title = mount.join(".by-title");
    assert_eq!(names(&title).len(), 23, "root sees every session");
    let (ok, out) = as_nobody(&["ls", "-1", title.to_str().unwrap()]);
    assert!(ok);
    let seen: Vec<&str> = out.lines().collect();
    assert_eq!(seen.len(), 20, "{out}");
    for hidden in ["cwd-root", "cwd-slas", "Session-"] {
        assert!(
            !seen.iter().any(|n| n.ends_with(hidden)),
            "{hidden} in {out}"
        );
    }
    // A directory with nothing the caller may see is not there for them.
    let by_cwd = mount.join(".by-cwd");
    assert!(names(&by_cwd).contains(&"root".to_string()));
    let (ok, out) = as_nobody(&["ls", "-1", by_cwd.to_str().unwrap()]);
    assert!(ok);
    assert!(
        !out.lines().any(|n| n == "root" || n.ends_with("cwd-slas")),
        "{out}"
    );
    assert!(out.lines().any(|n| n == "home"), "{out}");
    let (ok, _) = as_nobody(&["ls", by_cwd.join("root").to_str().unwrap()]);
    assert!(!ok, "nobody lists .by-cwd/root");
    // What nobody sees, nobody can follow.
    let (ok, out) = as_nobody(&[
        "sh",
        "-c",
        &format!("cat '{}'/*/session.jsonl | wc -l", title.display()),
    ]);
    assert!(ok && out.trim().parse::<u64>().unwrap() > 0, "{out}");
    mount.stop();
}

/// The table's count of held inodes, from `.sessionfs-status`.
fn inodes_held(mount: &Path) -> u64 {
    let status: Value =
        serde_json::from_str(&fs::read_to_string(mount.join(".sessionfs-status")).unwrap())
            .unwrap();
    status["inodes"].as_u64().unwrap()
}

/// A link of a view or of `.by-id` is numbered by its session (issue 11:
/// the daemon's memory): the number a listing shows is the one `lstat`
/// gives, each link has its own, the mount holds no table entry for it
/// (walking every link of the views and `.by-id` grows the table by their
/// directories only), and a link keeps its number when the views change.
#[test]
fn a_link_is_numbered_by_its_session_and_held_without_an_entry() {
    use std::os::unix::fs::{DirEntryExt, MetadataExt};
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let mount = mount_corpus(root.path(), &[]);
    let held_before = inodes_held(mount.path());
    let mut numbers: BTreeMap<u64, PathBuf> = BTreeMap::new();
    let mut dirs = 0u64;
    let mut stack: Vec<PathBuf> = [".by-cwd", ".by-date", ".by-title", ".by-id"]
        .iter()
        .map(|v| mount.join(v))
        .collect();
    while let Some(dir) = stack.pop() {
        dirs += 1;
        for entry in fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
                continue;
            }
            let meta = fs::symlink_metadata(&path).unwrap();
            assert!(meta.file_type().is_symlink(), "{path:?}");
            assert_eq!(entry.ino(), meta.ino(), "{path:?}: listing and lstat agree");
            let target = fs::read_link(&path).unwrap();
            assert_eq!(meta.len(), target.as_os_str().len() as u64, "{path:?}");
            if let Some(other) = numbers.insert(meta.ino(), path.clone()) {
                panic!("{path:?} and {other:?} share number {}", meta.ino());
            }
        }
    }
    // 23 sessions in each of four places.
    assert_eq!(numbers.len(), 4 * 23, "{numbers:?}");
    let held_after = inodes_held(mount.path());
    assert!(
        held_after - held_before <= dirs,
        "walking {} links and {dirs} directories held {} more inodes",
        numbers.len(),
        held_after - held_before
    );
    for path in numbers.values() {
        assert!(path.join("session.jsonl").is_file(), "{path:?} resolves");
    }
    // A new session changes every view; the old links keep their numbers.
    write_session(
        root.path(),
        "x_new12345",
        common::CORPUS_APP_CWD,
        1_767_700_000_000,
        "Fresh session here.",
    );
    within_follow("appears in .by-title", || {
        names(&mount.join(".by-title")).contains(&"Fresh session here new12345".to_string())
    });
    for (ino, path) in &numbers {
        assert_eq!(fs::symlink_metadata(path).unwrap().ino(), *ino, "{path:?}");
    }
    mount.stop();
}

/// `.sessionfs-status`'s `views` member.
fn views_status(mount: &Path) -> Value {
    let status: Value =
        serde_json::from_str(&fs::read_to_string(mount.join(".sessionfs-status")).unwrap())
            .unwrap();
    status["views"].clone()
}

/// A transcript removed inside its session directory while the views were
/// idle is not listed by their first listing after (a fresh tester's
/// case: 15 s after the removal, the first `find` still showed its links;
/// a use after an idle spell now waits for a sweep).
#[test]
fn the_first_listing_after_an_idle_spell_shows_what_changed_meanwhile() {
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let mount = mount_corpus(root.path(), &[]);
    let titles = || names(&mount.join(".by-title"));
    let removed = "cwd-root";
    assert!(
        titles().iter().any(|n| n.ends_with(removed)),
        "{:?}",
        titles()
    );
    // Idle: no use of the views, so the sweeps stop; wait until the last
    // one is older than the idle threshold (2 s).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let views = views_status(mount.path());
        if views["swept_ms_ago"].as_u64().is_some_and(|ms| ms > 2_500) {
            break;
        }
        assert!(Instant::now() < deadline, "never idle: {views}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let sweeps = views_status(mount.path())["sweeps"].as_u64().unwrap();
    let transcript = root.path().join("--root--/cwd-root/session.jsonl.zstd");
    let aside = root.path().join("aside.zstd");
    fs::rename(&transcript, &aside).unwrap();
    let after = titles();
    assert!(
        !after.iter().any(|n| n.ends_with(removed)),
        "the first listing after the idle spell: {after:?}"
    );
    assert!(views_status(mount.path())["sweeps"].as_u64().unwrap() > sweeps);
    // And back: the next listing after the next idle spell shows it again
    // (not asserted on timing; the sweeps while in use bring it within 2 s).
    fs::rename(&aside, &transcript).unwrap();
    within_follow("comes back", || {
        titles().iter().any(|n| n.ends_with(removed))
    });
    mount.stop();
}

/// The mount's own directories (`.by-id`, the views) behave as read-only
/// directories of a local file system (a fresh tester's findings): `chmod`
/// and `touch -h` fail with EPERM instead of succeeding without effect,
/// they use no disk (`du` counts 0), a directory's link count is 2 plus
/// its subdirectories, and a listing's `..` is the parent's number.
#[test]
fn the_mounts_own_directories_are_read_only_use_no_disk_and_count_their_links() {
    use std::os::unix::fs::MetadataExt;
    let root = tempfile::tempdir().unwrap();
    copy_tree(&corpus_dir().join("normal/root"), root.path());
    let mount = mount_corpus(root.path(), &[]);
    let fails = |script: &str| {
        let out = common::sh(script, [mount.path()]);
        assert!(!out.status.success(), "{script} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    assert!(fails("chmod 777 \"$1\"/.by-date").contains("not permitted"));
    assert!(fails("touch -h -d 2001-01-01 \"$1\"/.by-id/Session-A").contains("not permitted"));
    let du = common::sh_ok(
        "du -sk \"$1\"/.by-cwd \"$1\"/.by-date \"$1\"/.by-id",
        [mount.path()],
    );
    for line in String::from_utf8_lossy(&du).lines() {
        assert!(line.starts_with("0\t"), "{line}");
    }
    let mut checked = 0;
    let mut stack = vec![mount.join(".by-cwd"), mount.join(".by-date")];
    while let Some(dir) = stack.pop() {
        let parent_ino = fs::metadata(dir.parent().unwrap()).unwrap().ino();
        let subdirs: Vec<PathBuf> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.file_type().unwrap().is_dir())
            .map(|e| e.path())
            .collect();
        let meta = fs::metadata(&dir).unwrap();
        let top = dir.parent() == Some(mount.path());
        if !top {
            assert_eq!(meta.nlink(), 2 + subdirs.len() as u64, "{dir:?}");
        }
        let dotdot = nix_dotdot_ino(&dir);
        assert_eq!(dotdot, parent_ino, "{dir:?}: `..`");
        checked += 1;
        stack.extend(subdirs);
    }
    assert!(checked > 10, "{checked}");
    mount.stop();

    /// The number a listing of `dir` gives `..` (its `readdir` entry, as
    /// `ls -ia` prints it; std's listing leaves `.` and `..` out).
    fn nix_dotdot_ino(dir: &Path) -> u64 {
        let out = Command::new("ls").arg("-ia").arg(dir).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find(|l| l.split_whitespace().nth(1) == Some(".."))
            .unwrap_or_else(|| panic!("no `..` in {text}"));
        line.split_whitespace().next().unwrap().parse().unwrap()
    }
}
