//! `session.md`, the rendered transcript, through a real mount of copies of
//! the corpus (issue 16, "Must show" 1 and 2):
//!
//! * over every session of `../shared/corpus/normal`: `session.md` exists
//!   and reads; each user message's text appears whole; the assistant text
//!   of each step (per stream block) equals the concatenation of its
//!   chunks — packed rows expanded here, independently of the renderer —
//!   and equals the step's `assistant/message` text; every tool call
//!   appears with its name; every event present is rendered or listed;
//!   forks and subagents name their parent; the mount's Markdown equals
//!   `sessionfs render`;
//! * a session growing on disk while mounted: `tail -f -s 0.25 session.md`
//!   shows the new turn within 3 s, and the rendering after growth is
//!   byte-identical to a fresh rendering of the whole transcript;
//! * a transcript damaged in its middle renders up to the damage and says
//!   where and why it stopped (and `sessionfs render` prints the same and
//!   exits with 1); a session refused at lookup has no `session.md`;
//! * times are local clock times in the `TZ` given.
//!
//! Every wait has a deadline; children are killed by a guard; mounts are
//! stopped by the harness on every path.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use sessionfs::store::frame::encode_frame;

use common::{copy_tree, corpus_dir, run_ok, zstd_dc, Mount};

/// How long a new turn may take to show in `tail -f` (issue 16).
const SHOW_WITHIN: Duration = Duration::from_secs(3);

/// Every event of a transcript's plaintext, packed rows expanded as the
/// reference's `decodeStorageRecord` does (member k: seq0 + k, a delta
/// chunk event of the row's turn, step and index).
fn events(plain: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    for line in std::str::from_utf8(plain).unwrap().lines().skip(1) {
        let v: Value = serde_json::from_str(line).unwrap();
        let ty = v["type"].as_str().unwrap().to_string();
        let kind = match ty.as_str() {
            "text-chunks" => Some(("text-delta", "texts", "text")),
            "reasoning-chunks" => Some(("reasoning-delta", "texts", "text")),
            "tool-call-chunks" => Some(("tool-call-delta", "args", "argumentsDelta")),
            _ => None,
        };
        let Some((chunk_type, members, field)) = kind else {
            out.push(v);
            continue;
        };
        let d = &v["data"];
        for (k, m) in d[members].as_array().unwrap().iter().enumerate() {
            let mut chunk = serde_json::json!({"type": chunk_type, "index": d["index"]});
            chunk[field] = m.clone();
            out.push(serde_json::json!({
                "type": "assistant/chunk",
                "seq": v["seq0"].as_u64().unwrap() + k as u64,
                "data": {"turn": d["turn"], "step": d["step"], "chunk": chunk},
                "packed": ty,
            }));
        }
    }
    out
}

/// `sessionfs render ROOT ID`: a fresh rendering of the whole transcript.
fn render_cli(root: &Path, id: &str) -> Vec<u8> {
    run_ok(
        env!("CARGO_BIN_EXE_sessionfs"),
        [
            std::ffi::OsStr::new("render"),
            root.as_os_str(),
            std::ffi::OsStr::new(id),
        ],
        None,
    )
}

/// Every session directory under a mount (project/session), found by
/// listing.
fn session_dirs(mnt: &Path) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for project in fs::read_dir(mnt).unwrap() {
        let project = project.unwrap();
        if project.file_name().as_encoded_bytes().starts_with(b".by-") {
            continue;
        }
        for session in fs::read_dir(project.path()).unwrap() {
            dirs.push(session.unwrap().path());
        }
    }
    dirs.sort();
    dirs
}

/// The checks of "Must show" 1 on one session: `md` is its rendering and
/// `plain` its transcript text.
fn check_session(name: &str, plain: &[u8], md: &str) {
    let header: Value =
        serde_json::from_str(std::str::from_utf8(plain).unwrap().lines().next().unwrap()).unwrap();
    let id = header["id"].as_str().unwrap();
    assert!(
        md.contains(&format!("- **Session:** `{id}`")),
        "{name}: no id line"
    );
    if let Some(parent) = header["parentSession"].as_str() {
        assert!(
            md.contains(&format!("- **Parent session:** `{parent}`")),
            "{name}: the parent {parent} is not named"
        );
    }
    let evs = events(plain);
    // Text of each stream block: (turn, step, index, kind) → pieces.
    let mut blocks: BTreeMap<(u64, u64, u64), (String, String)> = BTreeMap::new();
    let mut step_text: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let mut types = BTreeSet::new();
    let mut first_user = true;
    for e in &evs {
        let ty = e["type"].as_str().unwrap();
        types.insert(ty.to_string());
        let d = &e["data"];
        let seq = e["seq"].as_u64();
        match ty {
            "user/message" => {
                for b in d["content"].as_array().unwrap() {
                    if let Some(t) = b["text"].as_str() {
                        assert!(md.contains(t), "{name}: user text {t:?} not whole");
                    }
                }
                if first_user {
                    first_user = false;
                    // The title line: the first words of this message, at
                    // most 60 characters.
                    let title = md.lines().next().unwrap().strip_prefix("# ").unwrap();
                    assert!(title.chars().count() <= 60, "{name}: title too long");
                    let text = d["content"][0]["text"].as_str().unwrap().replace('/', "_");
                    let words: Vec<&str> = text.split_whitespace().collect();
                    let title_words: Vec<&str> = title.split(' ').collect();
                    let n = title_words.len();
                    assert_eq!(
                        &words[..n - 1],
                        &title_words[..n - 1],
                        "{name}: title {title:?}"
                    );
                    assert_eq!(
                        words[n - 1].trim_end_matches('.'),
                        title_words[n - 1],
                        "{name}: title {title:?}"
                    );
                    let len = |w: &[&str]| w.join(" ").chars().count();
                    assert!(
                        words.len() == n || len(&words[..=n]) > 60,
                        "{name}: title {title:?} could hold one more word"
                    );
                }
            }
            "assistant/chunk" => {
                let c = &d["chunk"];
                let kind = c["type"].as_str().unwrap();
                if kind == "text-delta" || kind == "reasoning-delta" {
                    let key = (
                        d["turn"].as_u64().unwrap(),
                        d["step"].as_u64().unwrap(),
                        c["index"].as_u64().unwrap(),
                    );
                    let entry = blocks
                        .entry(key)
                        .or_insert_with(|| (kind.to_string(), String::new()));
                    entry.1.push_str(c["text"].as_str().unwrap());
                }
            }
            "assistant/message" => {
                let key = (d["turn"].as_u64().unwrap(), d["step"].as_u64().unwrap());
                let text: String = d["message"]["content"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|b| b["type"] == "text")
                    .map(|b| b["text"].as_str().unwrap())
                    .collect();
                step_text.insert(key, text);
            }
            "tool/call" => {
                let tool = d["name"].as_str().unwrap();
                assert!(
                    md.contains(&format!("**Tool call** `{tool}`")),
                    "{name}: tool call {tool} (seq {seq:?}) missing"
                );
                assert!(
                    md.contains(d["arguments"].as_str().unwrap()),
                    "{name}: arguments missing"
                );
            }
            "turn/start" => assert!(
                md.contains(&format!("## Turn {} · ", d["turn"])),
                "{name}: turn {} heading",
                d["turn"]
            ),
            "turn/end" => assert!(
                md.contains(&format!(
                    "**Turn {} ended:** {}",
                    d["turn"],
                    d["reason"]["kind"].as_str().unwrap()
                )),
                "{name}: end of turn {}",
                d["turn"]
            ),
            "step/start" => assert!(md.contains(&format!("### Step {}\n", d["step"]))),
            "todo/write" => {
                for t in d["todos"].as_array().unwrap() {
                    assert!(md.contains(t["content"].as_str().unwrap()), "{name}: todo");
                }
            }
            "request/header" => assert!(md.contains(&format!(
                "*Request ({}): {} / {}*",
                d["reason"].as_str().unwrap(),
                d["header"]["config"]["provider"].as_str().unwrap(),
                d["header"]["config"]["model"].as_str().unwrap()
            ))),
            "tool/result" => {
                for b in d["message"]["content"].as_array().unwrap() {
                    let call = b["toolCallId"].as_str().unwrap();
                    assert!(
                        md.contains(&format!("**Tool result** `{call}`")),
                        "{name}: result of {call}"
                    );
                    for part in b["content"].as_array().unwrap() {
                        let text = part["text"].as_str().unwrap();
                        // Shown whole, or its first lines and a note.
                        let head: String = text.lines().take(40).collect::<Vec<_>>().join("\n");
                        assert!(md.contains(&head), "{name}: result text of {call}");
                        if text.lines().count() > 40 {
                            assert!(md.contains("more lines ("), "{name}: no shortening note");
                        }
                    }
                }
            }
            "session/end-seed" => assert!(md.contains("*End of the seed:")),
            // Structure only: closes the step.
            "step/end" => {}
            _ => assert!(
                md.contains(&format!("- `{ty}` event, seq {}", seq.unwrap())),
                "{name}: event {ty} (seq {seq:?}) neither rendered nor listed"
            ),
        }
    }
    for ((turn, step, index), (kind, text)) in &blocks {
        let label = if kind == "text-delta" {
            "**Assistant:**"
        } else {
            "**Reasoning:**"
        };
        assert!(
            md.contains(&format!("{label}\n\n{text}\n\n")),
            "{name}: block {index} of turn {turn} step {step} is not its chunks concatenated"
        );
    }
    // The step's streamed text is the assistant message's text.
    for ((turn, step), text) in &step_text {
        let streamed: String = blocks
            .iter()
            .filter(|((t, s, _), (k, _))| t == turn && s == step && k == "text-delta")
            .map(|(_, (_, t))| t.as_str())
            .collect();
        assert_eq!(
            &streamed, text,
            "{name}: turn {turn} step {step}: chunks differ from the message"
        );
        assert!(
            md.contains(text.as_str()),
            "{name}: assistant text of turn {turn} step {step}"
        );
    }
    assert!(
        types.len() > 3,
        "{name}: too few event types to be a real session"
    );
}

#[test]
fn every_corpus_session_renders_through_the_mount() {
    let tmp = tempfile::Builder::new()
        .prefix("sessionfs-render-")
        .tempdir()
        .unwrap();
    let root = tmp.path().join("root");
    copy_tree(&corpus_dir().join("normal").join("root"), &root);
    let mount = Mount::start(&root, &["--read-only"]);
    let dirs = session_dirs(mount.path());
    assert_eq!(dirs.len(), 23, "the normal corpus has 23 sessions");
    let (mut forks, mut listed_unknown) = (0, 0);
    for dir in &dirs {
        let name = dir
            .strip_prefix(mount.path())
            .unwrap()
            .display()
            .to_string();
        let names: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            names.iter().any(|n| n == "session.md"),
            "{name}: session.md not listed"
        );
        let md_path = dir.join("session.md");
        let meta = fs::metadata(&md_path).unwrap();
        let md = fs::read(&md_path).unwrap();
        assert_eq!(
            meta.len(),
            md.len() as u64,
            "{name}: st_size is not the length read"
        );
        assert!(
            meta.permissions().readonly(),
            "{name}: session.md is writable"
        );
        let md = String::from_utf8(md).unwrap();
        let plain = fs::read(dir.join("session.jsonl")).unwrap();
        check_session(&name, &plain, &md);
        let header: Value =
            serde_json::from_slice(plain.split(|&b| b == b'\n').next().unwrap()).unwrap();
        forks += usize::from(header.get("parentSession").is_some());
        listed_unknown += usize::from(md.contains("- `x-vendor/telemetry` event"));
        // The command line renders the same Markdown.
        assert_eq!(
            render_cli(&root, header["id"].as_str().unwrap()),
            md.as_bytes(),
            "{name}: sessionfs render differs from session.md"
        );
    }
    assert_eq!(forks, 2, "the corpus has a fork and a subagent");
    assert_eq!(
        listed_unknown, 1,
        "the corpus's unknown ignorable event is listed"
    );
    mount.stop();
}

/// Kills and reaps a child process on drop, whatever happened.
struct ChildGuard(Option<Child>);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The last `seq` of a transcript's events (packed rows expanded).
fn last_seq(plain: &[u8]) -> u64 {
    events(plain)
        .last()
        .and_then(|e| e["seq"].as_u64())
        .expect("a transcript with events")
}

#[test]
fn a_growing_session_is_followed_by_tail_and_equals_a_fresh_rendering() {
    const SESSION: &str = "--home-alice-work-app--/Session-A";
    let tmp = tempfile::Builder::new()
        .prefix("sessionfs-render-grow-")
        .tempdir()
        .unwrap();
    let root = tmp.path().join("root");
    copy_tree(&corpus_dir().join("normal").join("root"), &root);
    let backing = root.join(SESSION).join("session.jsonl.zstd");
    let mount = Mount::start(&root, &[]);
    let md_path = mount.join(SESSION).join("session.md");
    let before = fs::read(&md_path).unwrap();
    assert!(!before.is_empty());

    let child = Command::new("tail")
        .args(["-n", "0", "-f", "-s", "0.25"])
        .arg(&md_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut guard = ChildGuard(Some(child));
    let stdout = guard.0.as_mut().unwrap().stdout.take().unwrap();
    let (tx, rx) = mpsc::channel::<String>();
    let reader = thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Tail prints nothing until something is appended: wait (polling, on a
    // deadline) until it holds session.md open, so that the growth comes
    // after its start.
    let opened = Instant::now() + Duration::from_secs(5);
    while Instant::now() < opened {
        let fds = fs::read_dir(format!("/proc/{}/fd", guard.0.as_ref().unwrap().id()));
        let has = fds.map(|d| {
            d.flatten()
                .any(|f| fs::read_link(f.path()).is_ok_and(|p| p == md_path))
        });
        if has.unwrap_or(false) {
            break;
        }
        thread::sleep(Duration::from_millis(10));
    }

    let plain = zstd_dc(&backing);
    let seq = last_seq(&plain) + 1;
    let marker = "Please render this new turn of the growth test, word by word.";
    let lines = format!(
        concat!(
            "{{\"type\":\"turn/start\",\"seq\":{s0},\"time\":1767614500000,\"data\":{{\"turn\":9}}}}\n",
            "{{\"type\":\"user/message\",\"seq\":{s1},\"time\":1767614500001,\"data\":{{\"id\":\"msg-grow\",\"role\":\"user\",",
            "\"content\":[{{\"type\":\"text\",\"text\":\"{m}\"}}],\"source\":{{\"kind\":\"user\"}}}},\"surfaceOp\":\"append\"}}\n",
            "{{\"type\":\"turn/end\",\"seq\":{s2},\"time\":1767614500002,\"data\":{{\"turn\":9,\"reason\":{{\"kind\":\"completed\"}}}}}}\n"
        ),
        s0 = seq,
        s1 = seq + 1,
        s2 = seq + 2,
        m = marker
    );
    let frame = encode_frame(lines.as_bytes()).unwrap();
    let written = Instant::now();
    fs::OpenOptions::new()
        .append(true)
        .open(&backing)
        .unwrap()
        .write_all(&frame)
        .unwrap();

    let mut seen = Vec::new();
    let deadline = written + SHOW_WITHIN;
    let mut shown = false;
    while !shown {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                shown = line.contains(marker);
                seen.push(line);
            }
            Err(_) => break,
        }
    }
    drop(guard);
    let _ = reader.join();
    assert!(
        shown,
        "tail -f did not show the new turn within {SHOW_WITHIN:?}; it printed {seen:?}"
    );
    eprintln!("new turn shown by tail -f after {:?}", written.elapsed());

    let after = fs::read(&md_path).unwrap();
    assert!(
        after.starts_with(&before),
        "the rendering did not grow at its end"
    );
    assert!(String::from_utf8_lossy(&after).contains("**Turn 9 ended:** completed"));
    // Read-only, even on a read-write mount, and never removed or renamed.
    let w = fs::OpenOptions::new()
        .append(true)
        .open(&md_path)
        .unwrap_err();
    assert_eq!(w.raw_os_error(), Some(libc::EACCES));
    let rm = fs::remove_file(&md_path).unwrap_err();
    assert_eq!(rm.raw_os_error(), Some(libc::EPERM));
    let mv = fs::rename(&md_path, md_path.with_file_name("x.md")).unwrap_err();
    assert_eq!(mv.raw_os_error(), Some(libc::EPERM));
    assert_eq!(
        after,
        render_cli(&root, "Session-A"),
        "the rendering after growth differs from a fresh rendering"
    );
    mount.stop();
}

#[test]
fn damage_stops_the_rendering_and_refused_sessions_have_no_session_md() {
    let tmp = tempfile::Builder::new()
        .prefix("sessionfs-render-damage-")
        .tempdir()
        .unwrap();
    for case in ["corrupt-tail", "corrupt-header"] {
        copy_tree(
            &corpus_dir().join(case).join("root"),
            &tmp.path().join(case),
        );
    }
    // A byte flipped inside a middle frame: rendered up to that frame.
    let root = tmp.path().join("corrupt-tail");
    let mount = Mount::start(&root, &["--read-only"]);
    let dir = mount.join("--home-alice-work-app--/bitflip-middle-frame");
    let md = String::from_utf8(fs::read(dir.join("session.md")).unwrap()).unwrap();
    let stop = md
        .find("**Rendering stopped** at line ")
        .expect("no stop paragraph");
    assert!(
        md[stop..].contains("of session.jsonl): "),
        "where is not said: {}",
        &md[stop..]
    );
    assert!(
        md[..stop].contains("## Turn 1"),
        "nothing before the damage was rendered"
    );
    // The rendering stops where the damaged frame begins: the view offset
    // given is the plaintext length of every frame before it (decoded
    // here with the zstd library), so every line before it was rendered.
    let number = |after: &str| -> u64 {
        md[stop..]
            .split(after)
            .nth(1)
            .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no number after {after:?} in {}", &md[stop..]))
    };
    // The store names the damaged frame's offset ("damaged at byte N" for
    // damage in the middle, "corrupt at byte N" otherwise).
    let frame_word = if md[stop..].contains("damaged at byte ") {
        "damaged at byte "
    } else {
        "corrupt at byte "
    };
    let (at, frame) = (number("(byte "), number(frame_word));
    let backing =
        fs::read(root.join("--home-alice-work-app--/bitflip-middle-frame/session.jsonl.zstd"))
            .unwrap();
    let before = zstd::stream::decode_all(&backing[..frame as usize]).unwrap();
    assert_eq!(
        at,
        before.len() as u64,
        "the rendering stopped before the damaged frame"
    );
    let last_user = events(&before)
        .iter()
        .rev()
        .find(|e| e["type"] == "user/message")
        .map(|e| {
            e["data"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .unwrap();
    assert!(
        md[..stop].contains(&last_user),
        "the last user message before the damage is missing"
    );
    // The command line prints the same and exits with status 1.
    let cli = Command::new(env!("CARGO_BIN_EXE_sessionfs"))
        .arg("render")
        .arg(&root)
        .arg("bitflip-middle-frame")
        .output()
        .unwrap();
    assert_eq!(
        cli.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&cli.stderr)
    );
    assert_eq!(
        cli.stdout,
        md.as_bytes(),
        "sessionfs render differs from session.md"
    );
    let intact =
        fs::read_to_string(mount.join("--home-alice-work-app--/intact-control/session.md"))
            .unwrap();
    assert!(!intact.contains("Rendering stopped"));
    mount.stop();

    // A session refused at lookup (header-less) has no session.md (its
    // lookup fails; session.jsonl fails with EIO); its valid neighbour has
    // one.
    let root = tmp.path().join("corrupt-header");
    let mount = Mount::start(&root, &["--read-only"]);
    let bad = mount.join("--home-alice-work-app--/headerless");
    let jsonl = fs::metadata(bad.join("session.jsonl")).unwrap_err();
    assert_eq!(jsonl.raw_os_error(), Some(libc::EIO));
    assert!(fs::read(bad.join("session.md")).is_err());
    let err = fs::metadata(bad.join("session.md")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    assert!(fs::metadata(mount.join("--home-alice-work-app--/valid-neighbour/session.md")).is_ok());
    mount.stop();
}

#[test]
fn times_are_local_clock_times_in_the_tz_given() {
    // Session-A was created at 1767614400000 ms: 2026-01-05 12:00:00 UTC,
    // its first turn one second later. A POSIX TZ string needs no tz
    // database.
    let root = corpus_dir().join("normal").join("root");
    for (tz, created, turn) in [
        ("UTC0", "2026-01-05 12:00:00 +00:00", "2026-01-05 12:00:01"),
        ("JST-9", "2026-01-05 21:00:00 +09:00", "2026-01-05 21:00:01"),
        ("XST+5", "2026-01-05 07:00:00 -05:00", "2026-01-05 07:00:01"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_sessionfs"))
            .args(["render".as_ref(), root.as_os_str(), "Session-A".as_ref()])
            .env("TZ", tz)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "TZ={tz}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let md = String::from_utf8(out.stdout).unwrap();
        assert!(
            md.contains(&format!("- **Created:** {created}")),
            "TZ={tz}:\n{md}"
        );
        assert!(
            md.contains(&format!("## Turn 1 · {turn}\n")),
            "TZ={tz}:\n{md}"
        );
    }
}

/// `session.md`'s title line is the views' title when the first event is
/// not the user message (a `session/start` at seq 0, then a `user/message`
/// at seq 1): while no user message is written `session.md` is empty (the
/// title line is written once, when it is known); once it is, the title
/// line of `session.md`, of `sessionfs render` and the `.by-title` link
/// name all carry the first user message's title.
#[test]
fn the_title_line_is_the_views_title_when_events_precede_the_user_message() {
    use sessionfs::store::naming::project_dir_name;

    let tmp = tempfile::Builder::new()
        .prefix("sessionfs-render-title-")
        .tempdir()
        .unwrap();
    let root = tmp.path().join("root");
    let id = "late_title-session";
    let dir = root.join(project_dir_name(Some("/w")).unwrap()).join(id);
    fs::create_dir_all(&dir).unwrap();
    let backing = dir.join("session.jsonl.zstd");
    let header = format!(
        "{{\"type\":\"session\",\"version\":0,\"id\":\"{id}\",\"createdAt\":1767600000000,\"cwd\":\"/w\",\"delegationDepth\":0}}\n"
    );
    let start = "{\"type\":\"session/start\",\"seq\":0,\"time\":1767600000500,\"data\":{}}\n";
    let user = "{\"type\":\"user/message\",\"seq\":1,\"time\":1767600001000,\"data\":{\"id\":\"m1\",\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Fix the flaky parser/lexer test before lunch.\"}],\"source\":{\"kind\":\"user\"}}}\n";
    let mut bytes = encode_frame(header.as_bytes()).unwrap();
    bytes.extend(encode_frame(start.as_bytes()).unwrap());
    fs::write(&backing, &bytes).unwrap();
    let title = "Fix the flaky parser_lexer test before lunch";
    // The views' short id: the first 8 characters after the last `_`.
    let link = format!("{title} title-se");

    let mount = Mount::start(&root, &["--attr-timeout", "0.2"]);
    let md_path = mount
        .path()
        .join(dir.strip_prefix(&root).unwrap())
        .join("session.md");
    assert_eq!(fs::read(&md_path).unwrap(), b"", "no user message yet");
    assert_eq!(
        render_cli(&root, id),
        b"",
        "sessionfs render before the user message"
    );

    let mut file = fs::OpenOptions::new().append(true).open(&backing).unwrap();
    file.write_all(&encode_frame(user.as_bytes()).unwrap())
        .unwrap();
    drop(file);
    let deadline = Instant::now() + Duration::from_secs(5);
    let by_title = |mount: &Mount| -> Vec<String> {
        fs::read_dir(mount.join(".by-title"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    while !by_title(&mount).contains(&link) {
        assert!(
            Instant::now() < deadline,
            "the title did not show in .by-title: {:?}",
            by_title(&mount)
        );
        thread::sleep(Duration::from_millis(50));
    }
    let md = loop {
        let md = String::from_utf8(fs::read(&md_path).unwrap()).unwrap();
        if !md.is_empty() || Instant::now() >= deadline {
            break md;
        }
        thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        md.lines().next(),
        Some(format!("# {title}").as_str()),
        "{md}"
    );
    assert!(md.contains("- `session/start` event, seq 0\n"), "{md}");
    assert!(
        md.contains("Fix the flaky parser/lexer test before lunch."),
        "{md}"
    );
    assert_eq!(
        render_cli(&root, id),
        md.as_bytes(),
        "sessionfs render differs from session.md"
    );
    mount.stop();
}
