//! The public API's example (`examples/api_tour.rs`) is run as a program
//! over an empty root; the reference oracle then loads what it wrote and
//! must read exactly the events the example printed back through the API.

mod common;

use std::process::{Command, Stdio};

use serde_json::Value;

use common::oracle::{oracle_session, run_oracle};
use common::sha256_hex;

const ID: &str = "session_01JH8Z4N7Q2W3E4R5T6Y7U8I9O";

#[test]
fn the_api_example_writes_a_session_the_reference_loads() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new("timeout")
        .args(["-k", "5", "600"])
        .arg(cargo)
        .args(["run", "--quiet", "--example", "api_tour", "--"])
        .arg(&root)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "api_tour failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut printed = stdout.lines();
    let path = printed.next().expect("the transcript path");
    assert_eq!(
        path,
        root.join("--home-alice-code-app--")
            .join(ID)
            .join("session.jsonl.zstd")
            .to_str()
            .unwrap()
    );
    let events: Vec<&str> = printed.collect();
    let texts: Vec<(u64, String)> = events
        .iter()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (v["seq"].as_u64().unwrap(), v["data"]["text"].to_string())
        })
        .collect();
    assert_eq!(
        texts,
        vec![
            (0, "\"hello\"".to_string()),
            (1, "\"world\"".to_string()),
            (2, "\"appended\"".to_string())
        ]
    );

    let (report, out) = run_oracle(&root, &[]);
    assert!(
        out.status.success(),
        "oracle failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(report["list"]["count"], 1, "list(): {}", report["list"]);
    let s = oracle_session(&report, ID);
    let raw = &s["readRaw"];
    assert_eq!(raw["ok"], true, "readRaw: {raw}");
    let content = raw["content"].as_str().unwrap();
    let (header, body) = content.split_once('\n').unwrap();
    let header: Value = serde_json::from_str(header).unwrap();
    assert_eq!(header["id"], ID);
    assert_eq!(header["cwd"], "/home/alice/code/app");
    let expected_body: String = events.iter().map(|l| format!("{l}\n")).collect();
    assert_eq!(
        body, expected_body,
        "the reference reads the events printed"
    );
    let load = &s["load"];
    assert_eq!(load["ok"], true, "load: {load}");
    assert_eq!(load["eventCount"], 3);
    assert_eq!(load["contiguous"], true);
    assert_eq!(load["eventsSha256"], sha256_hex(expected_body.as_bytes()));
    assert_eq!(s["loadMutated"].as_array().map(Vec::len), Some(0));
    assert_eq!(
        report["files"][0]["zstdFrames"], 3,
        "header, then one frame per commit"
    );
}
