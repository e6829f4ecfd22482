//! A test-only hook of the commit protocol: a daemon that stops for good
//! in the middle of a frame while it holds the session's lock, so that a
//! test can `kill -9` it there (tests/shared_root_net.rs, "crash between
//! machines").
//!
//! Inert unless the environment variable `SESSIONFS_TEST_HALT_MID_FRAME`
//! names a directory when the daemon starts; even then it acts only once a
//! test creates the file `arm` in that directory. The next commit of this
//! daemon then, under the lock and after the tail was settled (the lock body
//! records the length before it), writes the first half of a zstd frame at
//! the transcript's end, fsyncs it, removes `arm`, writes those bytes to
//! `halted` in the directory, and blocks that request thread forever.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::store::append::{CommitHooks, CommitOptions};
use crate::store::frame::encode_frame;

/// The variable that enables the hook (a directory).
pub const HALT_ENV: &str = "SESSIONFS_TEST_HALT_MID_FRAME";

/// The commit options every writer of this daemon uses: the defaults, plus
/// the hook when `SESSIONFS_TEST_HALT_MID_FRAME` is set.
pub fn commit_options() -> CommitOptions {
    match std::env::var_os(HALT_ENV) {
        None => CommitOptions::default(),
        Some(dir) => {
            let dir = PathBuf::from(dir);
            CommitOptions {
                hooks: Some(Arc::new(CommitHooks {
                    before_write: Some(Box::new(move |path: &Path| halt_mid_frame(&dir, path))),
                    ..Default::default()
                })),
                ..Default::default()
            }
        }
    }
}

fn halt_mid_frame(dir: &Path, transcript: &Path) {
    if fs::remove_file(dir.join("arm")).is_err() {
        return; // not armed (or already fired)
    }
    let line = "{\"type\":\"x-sessionfs/torn\",\"seq\":0,\"time\":0,\"data\":{\"pad\":\""
        .to_owned()
        + &"torn frame of a killed writer ".repeat(40)
        + "\"},\"ignorable\":true}\n";
    let frame = match encode_frame(line.as_bytes()) {
        Ok(f) => f,
        Err(e) => {
            log::error!("{HALT_ENV}: cannot encode the torn frame: {e}");
            return;
        }
    };
    let half = &frame[..frame.len() / 2];
    let written = OpenOptions::new()
        .write(true)
        .open(transcript)
        .and_then(|f| {
            let len = f.metadata()?.len();
            f.write_all_at(half, len)?;
            f.sync_all()?;
            Ok(len)
        });
    match written {
        Ok(at) => log::warn!(
            "{HALT_ENV}: wrote {} of {} bytes of a frame at byte {at} of {}; halting this commit for good",
            half.len(),
            frame.len(),
            transcript.display()
        ),
        Err(e) => log::error!("{HALT_ENV}: cannot write the torn frame to {}: {e}", transcript.display()),
    }
    let tmp = dir.join("halted.tmp");
    if let Ok(mut f) = fs::File::create(&tmp) {
        let _ = f.write_all(half);
        let _ = f.sync_all();
        let _ = fs::rename(&tmp, dir.join("halted"));
    }
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}
