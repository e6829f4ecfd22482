//! Fixture generator for the benchmarks (`scripts/bench.sh`): writes
//! stores in the on-disk format (FORMAT.md) with sessionfs's own frame
//! encoder, so no reference installation is needed.
//!
//! ```text
//! cargo run --release --example gen_store -- big ROOT [PLAINTEXT_MB] [FRAMES]
//! cargo run --release --example gen_store -- many ROOT [SESSIONS] [PROJECTS]
//! cargo run --release --example gen_store -- projects ROOT COUNT
//! ```
//! `big` writes one transcript of about PLAINTEXT_MB MiB (default 1024) in
//! FRAMES frames (default 20,000) under `--bench-big--/big-session/`;
//! `many` writes SESSIONS small sessions (default 10,000) over PROJECTS
//! projects (default 20; 500 × 40 is `many ROOT 20000 500`, one project of
//! 10,000 is `many ROOT 10000 1`); `projects` adds COUNT empty project
//! directories (`--bench-empty-N--`), for the cost of a root's size.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

use sessionfs::store::frame::encode_frame;
use sessionfs::store::naming::{encode_id, project_key};

const WORDS: [&str; 32] = [
    "the",
    "parser",
    "reads",
    "input",
    "line",
    "buffer",
    "agent",
    "tool",
    "call",
    "result",
    "file",
    "error",
    "retry",
    "session",
    "frame",
    "index",
    "cache",
    "mount",
    "append",
    "batch",
    "header",
    "offset",
    "checksum",
    "window",
    "user",
    "assistant",
    "reasoning",
    "step",
    "turn",
    "patch",
    "test",
    "build",
];

/// A small deterministic generator (xorshift64*), so fixtures are the same
/// on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

fn header_line(id: &str, cwd: &str, created_at_ms: u64) -> String {
    format!(
        "{{\"type\":\"session\",\"version\":0,\"id\":{},\"createdAt\":{created_at_ms},\"cwd\":{},\"delegationDepth\":0}}\n",
        serde_json::Value::from(id),
        serde_json::Value::from(cwd)
    )
}

fn event_line(rng: &mut Rng, seq: u64, out: &mut String) {
    let words = 8 + rng.next() % 60;
    let mut text = String::new();
    for i in 0..words {
        if i > 0 {
            text.push(' ');
        }
        text.push_str(WORDS[(rng.next() % WORDS.len() as u64) as usize]);
    }
    let kinds = [
        "assistant/message",
        "tool/result",
        "user/message",
        "tool/call",
    ];
    let kind = kinds[(rng.next() % 4) as usize];
    let id = format!("m-{:x}", rng.next());
    let text = [serde_json::json!({"type": "text", "text": text})];
    // Shaped as the reference checks each event it loads (its messages,
    // their sources and surface markers), so that it loads every session.
    let (data, surface) = match kind {
        "user/message" => (
            serde_json::json!({"id": id, "role": "user", "content": text, "source": {"kind": "user"}}),
            true,
        ),
        "assistant/message" => (
            serde_json::json!({"turn": 1, "step": 1, "message": {"id": id, "role": "assistant",
                "content": text, "source": {"kind": "model", "provider": "deepseek",
                "model": "deepseek-chat"}}}),
            true,
        ),
        "tool/result" => (
            serde_json::json!({"turn": 1, "step": 1, "message": {"id": id, "role": "user",
                "content": [{"type": "tool-result", "toolCallId": id, "content": text}],
                "source": {"kind": "tool", "callId": id}}}),
            true,
        ),
        _ => (
            serde_json::json!({"id": id, "text": text[0]["text"]}),
            false,
        ),
    };
    let mut event = serde_json::json!({"type": kind, "seq": seq,
        "time": 1_767_600_000_000u64 + seq * 7, "data": data});
    if surface {
        event["surfaceOp"] = "append".into();
    }
    out.push_str(&event.to_string());
    out.push('\n');
}

fn session_dir(root: &Path, cwd: &str, id: &str) -> std::io::Result<std::path::PathBuf> {
    let key = project_key(cwd).map_err(|e| std::io::Error::other(e.to_string()))?;
    let enc = encode_id(id).map_err(|e| std::io::Error::other(e.to_string()))?;
    let dir = root.join(key).join(enc);
    fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn big(root: &Path, plaintext_mb: u64, frames: u64) -> std::io::Result<()> {
    let (id, cwd) = ("big-session", "/bench/big");
    let dir = session_dir(root, cwd, id)?;
    let mut out =
        BufWriter::with_capacity(1 << 20, fs::File::create(dir.join("session.jsonl.zstd"))?);
    out.write_all(&encode_frame(
        header_line(id, cwd, 1_767_600_000_000).as_bytes(),
    )?)?;
    let per_frame = (plaintext_mb << 20) / frames.max(1);
    let mut rng = Rng(0x5eed);
    let mut seq = 0;
    let mut batch = String::new();
    for _ in 0..frames {
        batch.clear();
        while (batch.len() as u64) < per_frame {
            event_line(&mut rng, seq, &mut batch);
            seq += 1;
        }
        out.write_all(&encode_frame(batch.as_bytes())?)?;
    }
    out.flush()?;
    println!(
        "wrote {} ({} events in {} frames)",
        dir.display(),
        seq,
        frames + 1
    );
    Ok(())
}

fn many(root: &Path, sessions: u64, projects: u64) -> std::io::Result<()> {
    let mut rng = Rng(0xfeed);
    for n in 0..sessions {
        let cwd = format!("/bench/project-{:03}", n % projects.max(1));
        let id = format!("session_{n:08}-{:016x}", rng.next());
        let dir = session_dir(root, &cwd, &id)?;
        let mut file = header_line(&id, &cwd, 1_767_600_000_000 + n).into_bytes();
        file = encode_frame(&file)?;
        let mut batch = String::new();
        for seq in 0..(3 + rng.next() % 10) {
            event_line(&mut rng, seq, &mut batch);
        }
        file.extend(encode_frame(batch.as_bytes())?);
        fs::write(dir.join("session.jsonl.zstd"), file)?;
    }
    println!(
        "wrote {sessions} sessions in {projects} projects under {}",
        root.display()
    );
    Ok(())
}

fn empty_projects(root: &Path, count: u64) -> std::io::Result<()> {
    for n in 0..count {
        fs::create_dir_all(root.join(format!("--bench-empty-{n}--")))?;
    }
    println!(
        "added {count} empty project directories under {}",
        root.display()
    );
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: u64| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(default);
    let result = match (args.first().map(String::as_str), args.get(1)) {
        (Some("big"), Some(root)) => big(Path::new(root), num(2, 1024), num(3, 20_000)),
        (Some("many"), Some(root)) => many(Path::new(root), num(2, 10_000), num(3, 20)),
        (Some("projects"), Some(root)) => empty_projects(Path::new(root), num(2, 0)),
        _ => {
            eprintln!(
                "usage: gen_store big ROOT [PLAINTEXT_MB] [FRAMES] | gen_store many ROOT \
                 [SESSIONS] [PROJECTS] | gen_store projects ROOT COUNT"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gen_store: {e}");
            ExitCode::FAILURE
        }
    }
}
