//! Fixture generator for the views benchmark (`scripts/bench_views.py`,
//! issue 14): a root of SESSIONS small sessions (default 10,000) in
//! projects of 100 sessions each (`/bench/views/project-NNN`), created
//! 100 per day (one day per project, so a `.by-date` day and a project
//! directory hold the same number of sessions), each opening with a user
//! message, so every session has a title.
//!
//! ```text
//! cargo run --release --example gen_views_store -- ROOT [SESSIONS]
//! ```

use std::fs;
use std::path::Path;
use std::process::ExitCode;

use sessionfs::store::frame::encode_frame;
use sessionfs::store::naming::{encode_id, project_key};

const PER_DAY: u64 = 100;
const DAY_MS: u64 = 86_400_000;
const WORDS: [&str; 12] = [
    "fix", "the", "flaky", "parser", "test", "in", "mount", "cache", "index", "retry", "build",
    "frame",
];

fn write_one(root: &Path, n: u64) -> std::io::Result<()> {
    let project = n / PER_DAY;
    let cwd = format!("/bench/views/project-{project:03}");
    let id = format!("session_{n:08}x");
    // Noon UTC of day `project` after 2026-01-01, one session every 5 minutes.
    let created = 1_767_268_800_000 + project * DAY_MS + (n % PER_DAY) * 300_000;
    let dir = root
        .join(project_key(&cwd).map_err(|e| std::io::Error::other(e.to_string()))?)
        .join(encode_id(&id).map_err(|e| std::io::Error::other(e.to_string()))?);
    fs::create_dir_all(&dir)?;
    let header = serde_json::json!({
        "type": "session", "version": 0, "id": id, "createdAt": created, "cwd": cwd,
        "delegationDepth": 0,
    });
    let text: Vec<&str> = (0..9)
        .map(|i| WORDS[((n * 7 + i * 5) % WORDS.len() as u64) as usize])
        .collect();
    let events = format!(
        "{}\n{}\n",
        serde_json::json!({"type": "turn/start", "seq": 0, "time": created, "data": {"turn": 1}}),
        serde_json::json!({"type": "user/message", "seq": 1, "time": created + 1, "data": {
            "id": format!("m{n}"), "role": "user",
            "content": [{"type": "text", "text": text.join(" ")}],
            "source": {"kind": "user"},
        }, "surfaceOp": "append"}),
    );
    let mut bytes = encode_frame(format!("{header}\n").as_bytes())?;
    bytes.extend(encode_frame(events.as_bytes())?);
    fs::write(dir.join("session.jsonl.zstd"), bytes)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(root) = args.first() else {
        eprintln!("usage: gen_views_store ROOT [SESSIONS]");
        return ExitCode::from(2);
    };
    let sessions = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000u64);
    for n in 0..sessions {
        if let Err(e) = write_one(Path::new(root), n) {
            eprintln!("gen_views_store: {e}");
            return ExitCode::FAILURE;
        }
    }
    println!("wrote {sessions} sessions under {root}");
    ExitCode::SUCCESS
}
