//! The installed reference oracle and the test scripts run with it
//! (`tests/oracle/*.mjs`). Included by the tests that use it with
//! `#[path = "oracle/helper.rs"] mod oracle;`.

#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The installed reference oracle: `$SESSIONFS_ORACLE_DIR`, default
/// `<temp dir>/sessionfs-oracle` (`.ci/run` installs it there). Panics,
/// never skips, when it is missing.
pub fn oracle_dir() -> PathBuf {
    let dir = std::env::var_os("SESSIONFS_ORACLE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("sessionfs-oracle"));
    assert!(
        dir.join("node_modules/.bin/node").exists() && dir.join("lib.mjs").exists(),
        "the reference oracle is not installed at {}: install it \
         (`cp -a ../shared/tools/oracle/. DIR && (cd DIR && npm ci)`) and set \
         SESSIONFS_ORACLE_DIR=DIR; .ci/run does this. This test never skips.",
        dir.display()
    );
    dir
}

/// Runs `script` (a path under the oracle directory, such as `oracle.mjs`,
/// or a script of `tests/oracle`) with the oracle's node; the oracle
/// directory is not passed. Panics when node does not exit 0 within 300 s.
pub fn node<I, S>(script: &Path, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let dir = oracle_dir();
    let out = Command::new("timeout")
        .args(["-k", "5", "300"])
        .arg(dir.join("node_modules/.bin/node"))
        .arg("--max-old-space-size=2048")
        .arg(script)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "node {} failed ({}): {}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// A script of `tests/oracle`, run with the oracle directory as its first
/// argument.
pub fn script<I, S>(name: &str, args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/oracle")
        .join(name);
    let mut all: Vec<std::ffi::OsString> = vec![oracle_dir().into_os_string()];
    all.extend(args.into_iter().map(|a| a.as_ref().to_os_string()));
    node(&path, all)
}

/// The oracle's report over `root` (on its own copy), sessions' text
/// included (`oracle.mjs ROOT --content`).
pub fn report(root: &Path) -> serde_json::Value {
    let out = node(
        &oracle_dir().join("oracle.mjs"),
        [root.as_os_str(), OsStr::new("--content")],
    );
    serde_json::from_slice(&out.stdout).expect("the oracle printed a JSON report")
}

/// One session of a report.
pub fn session<'a>(report: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    report["sessions"]
        .as_array()
        .expect("report.sessions")
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("the oracle found no session {id:?}"))
}
