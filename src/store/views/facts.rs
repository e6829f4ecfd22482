//! What the views need of one session: its header facts and its title,
//! read once (issue 14).

use std::ffi::OsString;

use serde_json::Value;

use super::super::title::title_of_user_message;
use super::super::transcript::Transcript;

/// The facts of one valid session that the `.by-*` views show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewFacts {
    /// The project directory name.
    pub project: OsString,
    /// The session directory name (the encoded id).
    pub session: OsString,
    /// The header's id.
    pub id: String,
    /// The header's `cwd`, as stored.
    pub cwd: Option<String>,
    /// The header's `createdAt`, milliseconds since the Unix epoch.
    pub created_at_ms: u64,
    /// The title ([`crate::store::title`]); empty when there is none.
    pub title: String,
}

/// Plaintext read per step while looking for the first user message.
const STEP: u32 = 64 * 1024;

/// Plaintext read at most while looking for the first user message; a
/// session without one in its first 16 MiB has the empty title for good.
const SCAN_LIMIT: u64 = 16 * 1024 * 1024;

/// The title of a transcript: the first `user/message` event's title.
/// Reads the view from the start, frame by frame, only up to that event.
/// Returns `(title, final)`: `final` is false when the transcript holds
/// no user message yet (the title may appear when it grows) or a read
/// failed (damage: tried again when the file changes).
pub fn scan_title(t: &Transcript) -> (String, bool) {
    let mut offset = 0u64;
    let mut pending: Vec<u8> = Vec::new();
    let mut first_line = true;
    loop {
        let chunk = match t.read(offset, STEP) {
            Ok(c) => c,
            Err(e) => {
                log::debug!("title of {}: {e}", t.path().display());
                return (String::new(), false);
            }
        };
        if chunk.is_empty() {
            return (String::new(), false);
        }
        offset += chunk.len() as u64;
        pending.extend_from_slice(&chunk);
        let mut start = 0;
        while let Some(nl) = pending[start..].iter().position(|&b| b == b'\n') {
            let line = &pending[start..start + nl];
            start += nl + 1;
            if std::mem::take(&mut first_line) {
                continue; // the header
            }
            if let Some(title) = user_message_title(line) {
                return (title, true);
            }
        }
        pending.drain(..start);
        if offset >= SCAN_LIMIT {
            return (String::new(), true);
        }
    }
}

/// `Some(title)` when `line` is a `user/message` event (the empty title
/// when it holds no text).
fn user_message_title(line: &[u8]) -> Option<String> {
    // Cheap test before parsing: most lines are other events.
    if !line.windows(14).any(|w| w == b"\"user/message\"") {
        return None;
    }
    let v: Value = serde_json::from_slice(line).ok()?;
    if v.get("type").and_then(Value::as_str) != Some("user/message") {
        return None;
    }
    Some(
        v.get("data")
            .and_then(title_of_user_message)
            .unwrap_or_default(),
    )
}
