//! The command line: parses arguments (clap) and dispatches to the store,
//! the identity root and the FUSE adapter. It holds no store logic.
//!
//! Every command that takes a ROOT resolves it once, at start-up, into an
//! [`IdentityRoot`] (IDENTITY.md §1) and never looks at the process's
//! current directory afterwards.

mod append;
mod check;
mod dates;
mod doctor;
mod find;
mod helper;
mod key;
mod list;
mod list_views;
mod mount;
mod options;
mod remount;
mod render;
mod units;

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use clap::{CommandFactory, Parser, Subcommand};

use crate::identity::IdentityRoot;
use crate::store::{Store, StoreOptions};

pub use dates::format_utc_ms;

/// Exit status: success.
pub const EXIT_OK: u8 = 0;
/// Exit status: a session or store error (root missing, session not found
/// or damaged, mount failed, some sessions skipped by `list`).
pub const EXIT_ERROR: u8 = 1;
/// Exit status: a usage error (bad arguments).
pub const EXIT_USAGE: u8 = 2;
/// Exit status: the id matches several sessions by body.
pub const EXIT_AMBIGUOUS: u8 = 3;

const EXIT_CODES: &str = "\
Exit status:
  0  success
  1  a session or store error: the root is missing or unreadable, no session
     has the id, the session is damaged, the mount failed; for `list`, some
     sessions could not be read (the others are still listed)
  2  usage error (bad arguments)
  3  the id is ambiguous: no session has exactly this id and several share
     its part after the last '_' (give the full id)";

const MAIN_AFTER_HELP: &str = "\
Examples:
  sessionfs mount ~/.dsh/sessions /mnt/sessions
  sessionfs list ~/.dsh/sessions --project \"$PWD\"
  sessionfs locate ~/.dsh/sessions cse_01JH8Z4N7Q2W3E4R5T6Y7U8I9O
  sessionfs cat ~/.dsh/sessions session_01JH8Z4N7Q2W3E4R5T6Y7U8I9O | jq .type
  sessionfs key /home/alice/code/app

Ids: a session is found by its exact id, or else by its part after the last
'_' when that part has at least 8 characters (cse_X finds session_X).

Started by mount(8) as `sessionfs ROOT MOUNTPOINT -o OPTIONS` (no
subcommand), sessionfs runs `mount`.

Logging: RUST_LOG=debug|info|warn|error (default info), on stderr.
";

/// `sessionfs`: shows a session store as plain, decompressed, append-only
/// `session.jsonl` files, and finds sessions by id from anywhere.
#[derive(Debug, Parser)]
#[command(
    name = "sessionfs",
    version,
    about = "A FUSE file system over a session store, and tools to find sessions by id",
    after_help = format!("{MAIN_AFTER_HELP}\n{EXIT_CODES}"),
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Mount ROOT at MOUNTPOINT (runs in the foreground until unmounted,
    /// SIGINT or SIGTERM).
    #[command(after_help = format!("\
Examples:
  sessionfs mount ~/.dsh/sessions /mnt/sessions
  sessionfs mount --read-only --attr-timeout 0.5 /srv/sessions /mnt/sessions
  sessionfs mount /srv/sessions /mnt/sessions -o allow_other,auto_unmount

{EXIT_CODES}"))]
    Mount(mount::MountArgs),

    /// Internal: lists and stats a mount point for `mount`'s pre-flight
    /// check, in a process of its own so that a daemon that never answers
    /// cannot keep `mount` from exiting (prints `dir`, `notdir` or
    /// `errno N`).
    #[command(name = "__probe-mountpoint", hide = true)]
    ProbeMountpoint { path: std::path::PathBuf },

    /// Internal: resolves a path (links, `..`) for `mount`, in a process
    /// of its own for the same reason (prints the path).
    #[command(name = "__resolve-path", hide = true)]
    ResolvePath { path: std::path::PathBuf },

    /// List the sessions of ROOT: id, created time, size, last modified,
    /// project cwd. Bad sessions are reported on stderr; the others are
    /// still listed.
    #[command(after_help = format!("\
Examples:
  sessionfs list ~/.dsh/sessions
  sessionfs list ~/.dsh/sessions --project /home/alice/code/app
  sessionfs list ~/.dsh/sessions --json | jq -r '.[].id'

Times are ISO 8601, UTC. SIZE is the decompressed transcript's length in bytes.
--project matches the cwd recorded in each session's header exactly, in the
spelling given, in NFC and in NFD; it never returns a session of another cwd
that shares the same project directory (`/a/b-c` and `/a-b/c`).

{EXIT_CODES}"))]
    List(list::ListArgs),

    /// Print the path of the transcript file of the session ID.
    #[command(after_help = format!("\
Examples:
  sessionfs locate ~/.dsh/sessions session_01JH8Z4N7Q2W3E4R5T6Y7U8I9O
  sessionfs locate ~/.dsh/sessions cse_01JH8Z4N7Q2W3E4R5T6Y7U8I9O

{EXIT_CODES}"))]
    Locate(find::IdArgs),

    /// Write the decompressed transcript of the session ID to stdout.
    #[command(after_help = format!("\
Examples:
  sessionfs cat ~/.dsh/sessions cse_01JH8Z4N7Q2W3E4R5T6Y7U8I9O | tail -n 5
  sessionfs cat ~/.dsh/sessions 3f6c1d2e-8a4b-4c1f-9e2d-7b5a6c8d9e0f | jq -c .

{EXIT_CODES}"))]
    Cat(find::IdArgs),

    /// Append JSONL lines from stdin to the session ID (or create the
    /// session ID when none has it: the first line is then its header),
    /// under the same rules as a write through the mount.
    #[command(after_help = append::AFTER_HELP)]
    Append(find::IdArgs),

    /// Write the session ID as readable Markdown to stdout: the same text
    /// as `session.md` in the mount.
    #[command(after_help = format!("{}\n\n{EXIT_CODES}", render::AFTER_HELP))]
    Render(find::IdArgs),

    /// Print the project directory name (`--<key>--`) of a cwd, as the
    /// store derives it. PATH is used as given: not resolved, not
    /// normalized.
    #[command(after_help = format!("\
Examples:
  sessionfs key /home/alice/code/app        # --home-alice-code-app--
  sessionfs key 'C:\\Users\\dev\\repo'         # --C-Users-dev-repo--
  sessionfs key \"$PWD\"

{EXIT_CODES}"))]
    Key(key::KeyArgs),

    /// Verify transcripts fully (every frame decoded, checksums verified)
    /// and report torn tails, skippable frames and corruption; with
    /// --repair, truncate a torn last frame (the only repair there is).
    #[command(after_help = format!("\
Examples:
  sessionfs check ~/.dsh/sessions
  sessionfs check --repair ~/.dsh/sessions/--home-alice-code-app--/3f6c1d2e/session.jsonl.zstd

PATH is a transcript (session.jsonl.zstd) or a root (every transcript under it).
Stop every writer of a session before repairing it. Corrupt frames are never
repaired: restore the file from a backup.
Exit codes: 0 every transcript is clean (or was repaired), 1 a problem remains,
2 usage error."))]
    Check(check::CheckArgs),

    /// Find every problem of a store (or one transcript), say what the
    /// reference does with each and what fixes it; with --repair, fix what
    /// is lossless and set aside what cannot be read.
    #[command(after_help = "\
Examples:
  sessionfs doctor ~/.dsh/sessions
  sessionfs doctor --json ~/.dsh/sessions | jq '.summary'
  sessionfs doctor --repair ~/.dsh/sessions
  sessionfs doctor --restore ~/.local/state/sessionfs/quarantine/--home-a-sessions--/20261201T010101Z

Each finding: its kind, path, byte offset (when there is one), what the
reference harness does with it, and the command that fixes it. --repair
copies every original into the quarantine folder first (printed) and writes
atomically; sessions the reference refuses only for their content (an
unknown event type, a cwd it rejects) are never changed.
Exit codes: 0 no problem left (content refusals alone are reported, exit 0),
1 a problem remains, 2 usage error.")]
    Doctor(doctor::DoctorArgs),
}

/// Entry point of the `sessionfs` binary: sets up logging (RUST_LOG,
/// default info), parses the process's arguments and runs the command.
pub fn main() -> ExitCode {
    // The mount daemon takes SIGINT and SIGTERM from its very start, so
    // that a signal at any moment of start-up ends it cleanly.
    if std::env::args_os().nth(1).is_some_and(|a| a == "mount") {
        let _ = stop_flag();
    }
    let _ = env_logger::Builder::from_env(
        env_logger::Env::default().default_filter_or("info,fuser=error"),
    )
    .try_init();
    raise_open_file_limit();
    run(std::env::args_os().collect())
}

/// Raises the soft limit of open files to the hard limit. The store keeps
/// up to 1024 validated transcripts open (one descriptor each), which a
/// common soft limit of 1024 cannot hold beside the process's other files.
fn raise_open_file_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct
    // passed, which lives for both calls.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 || limit.rlim_cur >= limit.rlim_max
        {
            return;
        }
        let soft = limit.rlim_cur;
        limit.rlim_cur = limit.rlim_max;
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
            log::debug!(
                "raised the open-file limit from {soft} to {}",
                limit.rlim_max
            );
        }
    }
}

/// Parses `args` (program name first) and runs the command; returns the
/// documented exit status.
pub fn run(args: Vec<OsString>) -> ExitCode {
    let helper_form = helper::is_helper_form(&args);
    let args = helper::with_implicit_mount(args);
    let cli = match Cli::try_parse_from(args.clone()) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(EXIT_USAGE));
        }
    };
    let code = match cli.command {
        Command::Mount(first) => {
            helper::take_ready_pipe();
            let mount_command = Cli::command()
                .find_subcommand("mount")
                .cloned()
                .expect("the mount subcommand is defined")
                .args_override_self(true);
            mount::dispatch(first, &args, helper_form, mount_command)
        }
        Command::ProbeMountpoint { path } => crate::fuse::probe_child(&path),
        Command::ResolvePath { path } => crate::fuse::resolve_child(&path),
        Command::List(args) => list::run(args),
        Command::Locate(args) => find::locate(args),
        Command::Cat(args) => find::cat(args),
        Command::Render(args) => render::run(args),
        Command::Append(args) => append::run(&args.root, &args.id, &mut std::io::stdin().lock()),
        Command::Key(args) => key::run(args),
        Command::Check(args) => check::run(args),
        Command::Doctor(args) => doctor::run(args),
    };
    ExitCode::from(code)
}

/// Prints `sessionfs: MESSAGE` on stderr (and, in a daemon started by the
/// mount(8) helper form, to the waiting parent); returns exit status 1.
/// `n` and the noun, singular for 1 (`1 problem`, `2 problems`).
pub(super) fn counted(n: impl Into<u64>, singular: &str, plural: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { singular } else { plural })
}

pub(super) fn fail(message: impl std::fmt::Display) -> u8 {
    let text = format!("sessionfs: {message}");
    eprintln!("{text}");
    helper::report_failure(&text);
    EXIT_ERROR
}

/// The flag SIGINT, SIGTERM and SIGHUP set, installed on first use (for
/// the mount daemon: first thing in [`main`]). A hang-up (the terminal or
/// ssh session of a foreground mount closed) ends the mount as cleanly as
/// SIGTERM, unless SIGHUP came ignored (`nohup`), which is kept.
pub(super) fn stop_flag() -> Arc<AtomicBool> {
    static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();
    Arc::clone(STOP.get_or_init(|| {
        let stop = Arc::new(AtomicBool::new(false));
        let mut signals = vec![signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM];
        if !is_ignored(libc::SIGHUP) {
            signals.push(signal_hook::consts::SIGHUP);
        }
        // Held back while the handlers are installed: a signal that came
        // between a handler's install and its flag's registration would
        // run a handler with nothing to set, and be lost (a SIGINT 2.6 ms
        // after exec left a daemon mounted). Delivered once unblocked.
        let held = SignalsHeld::new(&signals);
        for &signal in &signals {
            if let Err(e) = signal_hook::flag::register(signal, Arc::clone(&stop)) {
                eprintln!("sessionfs: cannot install the handler of signal {signal}: {e}");
            }
        }
        drop(held);
        stop
    }))
}

/// Signals blocked in this thread until dropped (then the thread's
/// earlier mask is back, and what came meanwhile is delivered).
struct SignalsHeld(libc::sigset_t);

impl SignalsHeld {
    fn new(signals: &[libc::c_int]) -> SignalsHeld {
        // SAFETY: the sets are initialised by sigemptyset before use, and
        // pthread_sigmask only changes this thread's mask.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigemptyset(&mut old);
            for &s in signals {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            SignalsHeld(old)
        }
    }
}

impl Drop for SignalsHeld {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved by `new`.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut());
        }
    }
}

/// Whether `signal` is ignored (`SIG_IGN`, as `nohup` leaves SIGHUP).
fn is_ignored(signal: libc::c_int) -> bool {
    // SAFETY: a null new action only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Outcome of writing to stdout: a closed pipe ends the command quietly.
pub(super) fn output_result(r: io::Result<()>) -> u8 {
    match r {
        Ok(()) => EXIT_OK,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => EXIT_OK,
        Err(e) => fail(format_args!("writing to stdout: {e}")),
    }
}

/// Resolves ROOT once and opens the store on its I/O path.
pub(super) fn open_store(root: &Path) -> Result<(IdentityRoot, Store), u8> {
    if let Some(why) = crate::store::check::not_a_root(root) {
        return Err(fail(format_args!(
            "{}: {why}",
            crate::store::error::Shown(root)
        )));
    }
    let identity = IdentityRoot::resolve(root).map_err(fail)?;
    let store = Store::open(identity.io_path(), StoreOptions::default()).map_err(fail)?;
    Ok((identity, store))
}

/// Writes `text` to stdout; `Err(code)` when that fails (a closed pipe ends
/// the command quietly).
pub(super) fn emit(text: &str) -> Result<(), u8> {
    match io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => Ok(()),
        Err(e) => Err(output_result(Err(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn mount_options_parse() {
        let cli = Cli::try_parse_from([
            "sessionfs",
            "mount",
            "/r",
            "/m",
            "--read-only",
            "--compression",
            "none",
            "--batch-ms",
            "0",
            "--attr-timeout",
            "0.5",
            "--cache-size",
            "1048576",
            "--allow-other",
            "-o",
            "ro,auto_unmount",
            "-odefault_permissions",
        ])
        .unwrap();
        let Command::Mount(m) = cli.command else {
            panic!("not mount")
        };
        assert!(m.read_only && m.allow_other);
        assert_eq!(m.compression, Some(mount::Compression::None));
        assert_eq!(m.batch_ms, 0);
        assert_eq!(m.attr_timeout, Duration::from_millis(500));
        assert_eq!(m.cache_size, Some(1 << 20));
        assert_eq!(m.options, ["ro,auto_unmount", "default_permissions"]);

        let cli = Cli::try_parse_from(["sessionfs", "mount", "/r", "/m"]).unwrap();
        let Command::Mount(m) = cli.command else {
            panic!("not mount")
        };
        assert_eq!((m.batch_ms, m.attr_timeout), (200, Duration::from_secs(1)));
        assert_eq!(m.cache_size, None);
        assert!(!m.read_only && !m.allow_other && m.options.is_empty());
    }
}
