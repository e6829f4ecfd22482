//! `sessionfs append ROOT ID`: lines from stdin appended to a session under
//! the store's write rules ([`crate::store::SessionWriter`], through
//! [`crate::api::Root::appender`]), the same rules as a write through the
//! mount (MOUNT.md, Appending and Creating a session).
//!
//! The session is the one the id rules find (exact id, else a unique body
//! match; IDENTITY.md §2); when none is found, the session `ID` is created
//! and stdin's first line must be its header. Stdin is read in batches of
//! up to 4 MiB, each checked whole and committed as one frame.

use std::io::{BufRead, Read};

use crate::api::{Error, Root};
use crate::identity::IdLookupError;
use crate::store::limits::MAX_LINE_BYTES;
use crate::store::StoreError;

/// Input bytes checked and committed as one frame.
const BATCH_BYTES: usize = 4 << 20;

/// Exit status: success.
const EXIT_OK: u8 = 0;
/// Exit status: a refused line or a store error.
const EXIT_ERROR: u8 = 1;
/// Exit status: the id matches several sessions by body.
const EXIT_AMBIGUOUS: u8 = 3;

/// Help shown after `sessionfs append --help`.
pub const AFTER_HELP: &str = "\
Examples:
  echo '{\"type\":\"x-note\",\"seq\":618,\"time\":1767603711000,\"data\":{},\"ignorable\":true}' \\
    | sessionfs append ~/.dsh/sessions cse_01JH8Z4N7Q2W3E4R5T6Y7U8I9O
  sessionfs append ~/.dsh/sessions my-new-session < header-and-events.jsonl

Every line must be one JSON object continuing the session's seq (a new
session: its header first, then seq 0, 1, ...). Lines are committed in
batches of up to 4 MiB; a refused line stops the command, and nothing of
its batch is stored (earlier batches stay). A session is created only for
an ID no session has, exactly or by its part after the last '_'.

Exit status:
  0  every line was stored
  1  a line was refused (invalid, seq not continuing, incomplete last line,
     longer than 16 MiB, another writer got there first), the id is taken,
     or a store error
  2  usage error
  3  the id matches several sessions by body";

/// Runs `sessionfs append ROOT ID` with `input` as stdin; messages go to
/// stderr. Returns the exit status.
pub fn run(root: &std::path::Path, id: &str, input: &mut dyn BufRead) -> u8 {
    let root = match Root::open(root) {
        Ok(root) => root,
        Err(e) => return fail(&e),
    };
    let mut writer = match root.appender(id) {
        Ok(w) => w,
        Err(e) => return fail(&e),
    };
    let mut batch = Vec::new();
    let mut lines_before = 0usize;
    loop {
        let mut line = Vec::new();
        // At most one byte past the limit is read: a longer line is
        // refused without holding it.
        let n = match (&mut *input)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(n) => n,
            Err(e) => {
                eprintln!("sessionfs: reading stdin: {e}");
                return EXIT_ERROR;
            }
        };
        if line.len() > MAX_LINE_BYTES {
            let stored = if lines_before > 0 {
                format!(" (the {lines_before} lines before it were)")
            } else {
                String::new()
            };
            eprintln!(
                "sessionfs: stdin: line {} is longer than {MAX_LINE_BYTES} bytes (16 MiB, its \
                 newline included), more than sessionfs continues a session from; split the \
                 record; nothing of this batch was stored{stored}",
                lines_before + batch.iter().filter(|&&b| b == b'\n').count() + 1
            );
            return EXIT_ERROR;
        }
        batch.extend_from_slice(&line);
        let at_end = n == 0 || !line.ends_with(b"\n");
        if batch.len() >= BATCH_BYTES || (at_end && !batch.is_empty()) {
            let lines_in_batch = batch.iter().filter(|&&b| b == b'\n').count();
            if let Err(mut e) = writer.append_lines(&batch) {
                if let Error::Store(
                    StoreError::InvalidLine { line, .. } | StoreError::SeqConflict { line, .. },
                ) = &mut e
                {
                    *line += lines_before;
                }
                eprintln!(
                    "sessionfs: stdin: {e}; nothing of this batch was stored{}",
                    taken_by_body(&root, id, &e)
                );
                return EXIT_ERROR;
            }
            if let Err(e) = writer.commit() {
                eprintln!("sessionfs: {e}; nothing of this batch was stored");
                return EXIT_ERROR;
            }
            lines_before += lines_in_batch;
            batch.clear();
        }
        if at_end {
            return EXIT_OK;
        }
    }
}

/// For a header refused in the first line because `id` found an existing
/// session by its body (IDENTITY.md §2), a sentence saying which; else
/// nothing.
fn taken_by_body(root: &Root, id: &str, e: &Error) -> String {
    let Error::Store(StoreError::InvalidLine {
        line: 1, reason, ..
    }) = e
    else {
        return String::new();
    };
    if !reason.contains("header") {
        return String::new();
    }
    match root.find(id) {
        Ok(s) if s.id() != id => format!(
            ". The id {id:?} names the existing session {:?} (the same part after the last \
             '_'), so its lines continue that session; a new session needs an id no session \
             has, exactly or by that part",
            s.id()
        ),
        _ => String::new(),
    }
}

fn fail(e: &Error) -> u8 {
    eprintln!("sessionfs: {e}");
    match e {
        Error::Id(IdLookupError::Ambiguous { .. }) => EXIT_AMBIGUOUS,
        _ => EXIT_ERROR,
    }
}
