//! `sessionfs key`: the project directory name of a cwd.

use std::ffi::OsString;
use std::io::{self, Write};

use clap::Args;

use super::{output_result, EXIT_USAGE};
use crate::store::naming;

#[derive(Debug, Args)]
pub(super) struct KeyArgs {
    /// A working directory, as a session header would record it.
    pub(super) path: OsString,
}

pub(super) fn run(args: KeyArgs) -> u8 {
    let Some(path) = args.path.to_str() else {
        eprintln!(
            "sessionfs: {:?} is not valid UTF-8; a session header records its cwd as text",
            args.path
        );
        return EXIT_USAGE;
    };
    match naming::project_key(path) {
        Ok(key) => output_result(writeln!(io::stdout().lock(), "{key}")),
        Err(e) => {
            eprintln!("sessionfs: {e}");
            EXIT_USAGE
        }
    }
}
