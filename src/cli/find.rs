//! `sessionfs locate` and `sessionfs cat`: one session by id.

use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use clap::Args;

use super::{fail, open_store, output_result, EXIT_AMBIGUOUS, EXIT_ERROR};
use crate::identity::IdLookupError;
use crate::store::catalog::FindError;

/// How much `cat` reads at a time.
const CAT_CHUNK: u32 = 1 << 20;

#[derive(Debug, Args)]
pub(super) struct IdArgs {
    /// The session store's root directory.
    pub(super) root: PathBuf,
    /// The session id (exact, or any id with the same part after the last
    /// '_', at least 8 characters long). An empty id is a usage error.
    #[arg(value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub(super) id: String,
}

pub(super) fn exit_code_of_find(e: &FindError) -> u8 {
    match e {
        FindError::Id(IdLookupError::Ambiguous { .. }) => EXIT_AMBIGUOUS,
        _ => EXIT_ERROR,
    }
}

pub(super) fn locate(args: IdArgs) -> u8 {
    let (_identity, store) = match open_store(&args.root) {
        Ok(v) => v,
        Err(code) => return code,
    };
    match store.find_by_id(&args.id) {
        Ok(summary) => {
            let mut out = io::stdout().lock();
            output_result(
                out.write_all(summary.transcript_path.as_os_str().as_bytes())
                    .and_then(|()| out.write_all(b"\n")),
            )
        }
        Err(e) => {
            eprintln!("sessionfs: {e}");
            exit_code_of_find(&e)
        }
    }
}

pub(super) fn cat(args: IdArgs) -> u8 {
    let (_identity, store) = match open_store(&args.root) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let transcript = match store.find_transcript_by_id(&args.id) {
        Ok((_, transcript)) => transcript,
        Err(e) => {
            eprintln!("sessionfs: {e}");
            return exit_code_of_find(&e);
        }
    };
    let mut out = io::stdout().lock();
    let mut offset = 0u64;
    loop {
        let chunk = match transcript.read(offset, CAT_CHUNK) {
            Ok(chunk) => chunk,
            Err(e) => return fail(e),
        };
        if chunk.is_empty() {
            break;
        }
        if let Err(e) = out.write_all(&chunk) {
            return output_result(Err(e));
        }
        offset += chunk.len() as u64;
    }
    output_result(out.flush())
}
