//! The `sessionfs` binary: the command line lives in [`sessionfs::cli`].

fn main() -> std::process::ExitCode {
    sessionfs::cli::main()
}
