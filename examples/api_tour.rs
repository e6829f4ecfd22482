//! A tour of the public API (`sessionfs::api`): creates a session in a
//! store, appends events to it in two commits, reads them back (whole, from
//! an offset, line by line) and finds the session again by a compat-prefixed
//! id (`cse_…` for `session_…`, IDENTITY.md §2).
//!
//! ```text
//! cargo run --example api_tour -- ROOT
//! ```
//! ROOT is a session store directory (created when missing). Prints the
//! transcript's path, then one line per event read back.

use std::process::ExitCode;

use serde_json::json;
use sessionfs::api::{Error, Root};

/// The session this tour creates; `cse_` + the same body finds it.
const ID: &str = "session_01JH8Z4N7Q2W3E4R5T6Y7U8I9O";
const COMPAT_ID: &str = "cse_01JH8Z4N7Q2W3E4R5T6Y7U8I9O";
const CWD: &str = "/home/alice/code/app";
const CREATED_AT_MS: u64 = 1_767_603_711_000;

fn main() -> ExitCode {
    let Some(root) = std::env::args_os().nth(1) else {
        eprintln!("usage: api_tour ROOT");
        return ExitCode::from(2);
    };
    if let Err(e) = std::fs::create_dir_all(&root) {
        eprintln!("api_tour: cannot create {}: {e}", root.to_string_lossy());
        return ExitCode::FAILURE;
    }
    match tour(std::path::Path::new(&root)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("api_tour: {e}");
            ExitCode::FAILURE
        }
    }
}

fn tour(path: &std::path::Path) -> Result<(), Error> {
    let root = Root::open(path)?;

    // Create: the header is written by create_session; the first commit
    // publishes the session with its first events.
    let mut writer = root.create_session(ID, Some(CWD), CREATED_AT_MS)?;
    for (turn, text) in [(1, "hello"), (1, "world")] {
        let seq = writer.next_seq();
        writer.append_event(&json!({
            "type": "x-api-tour/note",
            "seq": seq,
            "time": CREATED_AT_MS + seq + 1,
            "data": {"turn": turn, "text": text},
            "ignorable": true,
        }))?;
    }
    let transcript = writer.commit()?.expect("two events were pending");
    println!("{}", transcript.display());

    // Append: a second commit is one more frame at the end.
    let seq = writer.next_seq();
    writer.append_event(&json!({
        "type": "x-api-tour/note",
        "seq": seq,
        "time": CREATED_AT_MS + seq + 1,
        "data": {"turn": 2, "text": "appended"},
        "ignorable": true,
    }))?;
    writer.commit()?;

    // Find by the compat-prefixed id, then read it back three ways.
    let session = root.find(COMPAT_ID)?;
    assert_eq!(session.id(), ID);
    let whole = session.read_all()?;
    let header_len = whole.iter().position(|&b| b == b'\n').map_or(0, |i| i + 1);
    let events = session.read_from(header_len as u64)?;
    assert_eq!(&whole[header_len..], &events[..]);
    let mut lines = session.lines();
    let header = lines.next().expect("a header line")?;
    assert_eq!(&header[..], &whole[..header_len - 1]);
    for line in lines {
        println!("{}", String::from_utf8_lossy(&line?));
    }
    Ok(())
}
