//! The command line: parses arguments (clap) and dispatches to the store,
//! the identity root and the FUSE adapter. It holds no store logic.
//!
//! Every command that takes a ROOT resolves it once, at start-up, into an
//! [`IdentityRoot`] (IDENTITY.md §1) and never looks at the process's
//! current directory afterwards.

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::identity::{IdLookupError, IdentityRoot};
use crate::store::catalog::{FindError, SessionListing, SessionSummary};
use crate::store::error::Shown;
use crate::store::{naming, Encoding, Store, StoreOptions, DEFAULT_CACHE_BYTES};

/// Exit status: success.
pub const EXIT_OK: u8 = 0;
/// Exit status: a session or store error (root missing, session not found
/// or damaged, mount failed, some sessions skipped by `list`).
pub const EXIT_ERROR: u8 = 1;
/// Exit status: a usage error (bad arguments).
pub const EXIT_USAGE: u8 = 2;
/// Exit status: the id matches several sessions by body.
pub const EXIT_AMBIGUOUS: u8 = 3;

/// Widest ID column of the `list` table; longer ids overflow their row.
const MAX_ID_COLUMN: usize = 40;

/// How much `cat` reads at a time.
const CAT_CHUNK: u32 = 1 << 20;

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
  sessionfs key /home/alice/work/app

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
    Mount(MountArgs),

    /// List the sessions of ROOT: id, created time, size, last modified,
    /// project cwd. Bad sessions are reported on stderr; the others are
    /// still listed.
    #[command(after_help = format!("\
Examples:
  sessionfs list ~/.dsh/sessions
  sessionfs list ~/.dsh/sessions --project /home/alice/work/app
  sessionfs list ~/.dsh/sessions --json | jq -r '.[].id'

Times are ISO 8601, UTC. SIZE is the decompressed transcript's length in bytes.
--project matches the cwd recorded in each session's header exactly, in the
spelling given, in NFC and in NFD; it never returns a session of another cwd
that shares the same project directory (`/a/b-c` and `/a-b/c`).

{EXIT_CODES}"))]
    List(ListArgs),

    /// Print the path of the transcript file of the session ID.
    #[command(after_help = format!("\
Examples:
  sessionfs locate ~/.dsh/sessions session_01JH8Z4N7Q2W3E4R5T6Y7U8I9O
  sessionfs locate ~/.dsh/sessions cse_01JH8Z4N7Q2W3E4R5T6Y7U8I9O

{EXIT_CODES}"))]
    Locate(IdArgs),

    /// Write the decompressed transcript of the session ID to stdout.
    #[command(after_help = format!("\
Examples:
  sessionfs cat ~/.dsh/sessions cse_01JH8Z4N7Q2W3E4R5T6Y7U8I9O | tail -n 5
  sessionfs cat ~/.dsh/sessions 3f6c1d2e-8a4b-4c1f-9e2d-7b5a6c8d9e0f | jq -c .

{EXIT_CODES}"))]
    Cat(IdArgs),

    /// Print the project directory name (`--<key>--`) of a cwd, as the
    /// store derives it. PATH is used as given: not resolved, not
    /// normalized.
    #[command(after_help = format!("\
Examples:
  sessionfs key /home/alice/work/app        # --home-alice-work-app--
  sessionfs key 'C:\\Users\\dev\\repo'         # --C-Users-dev-repo--
  sessionfs key \"$PWD\"

{EXIT_CODES}"))]
    Key(KeyArgs),

    /// Verify transcripts fully (every frame decoded, checksums verified)
    /// and report torn tails, skippable frames and corruption; with
    /// --repair, truncate a torn last frame (the only repair there is).
    #[command(after_help = format!("\
Examples:
  sessionfs check ~/.dsh/sessions
  sessionfs check --repair ~/.dsh/sessions/--home-alice-work-app--/3f6c1d2e/session.jsonl.zstd

PATH is a transcript (session.jsonl.zstd) or a root (every transcript under it).
Stop every writer of a session before repairing it. Corrupt frames are never
repaired: restore the file from a backup.
Exit codes: 0 every transcript is clean (or was repaired), 1 a problem remains,
2 usage error."))]
    Check(CheckArgs),
}

#[derive(Debug, Args)]
struct CheckArgs {
    /// A transcript file, or a root whose transcripts are all checked.
    path: PathBuf,
    /// Truncate a torn last frame (incomplete write) so that appends work
    /// again. Nothing else is changed.
    #[arg(long)]
    repair: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Compression {
    /// `session.jsonl.zstd` transcripts.
    Zstd,
    /// Raw `session.jsonl` transcripts.
    None,
}

#[derive(Debug, Args)]
struct MountArgs {
    /// The session store's root directory.
    root: PathBuf,
    /// Where to mount it: an existing directory outside ROOT (what it holds
    /// is hidden while mounted).
    mountpoint: PathBuf,
    /// Refuse every write (EROFS).
    #[arg(long)]
    read_only: bool,
    /// The root's encoding [default: the root's own; zstd for an empty root].
    #[arg(long, value_enum)]
    compression: Option<Compression>,
    /// Batch window of appends, in milliseconds (0 commits on every write).
    #[arg(long, value_name = "N", default_value_t = 200)]
    batch_ms: u64,
    /// How long the kernel may cache attributes and names, in seconds
    /// (fractions allowed).
    #[arg(long, value_name = "SECONDS", default_value = "1", value_parser = parse_seconds)]
    attr_timeout: Duration,
    /// Cap of the decoded-frame cache, in bytes (suffixes K, M, G, KiB,
    /// MiB, GiB allowed; 1024-based) [default: 16 MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    cache_size: Option<u64>,
    /// Budget of the bytes all writers may hold uncommitted (incomplete
    /// lines included), in bytes (suffixes as for --cache-size); a write
    /// past it fails with ENOSPC [default: 32 MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pending_budget: Option<u64>,
    /// Let other users reach the mount (needs user_allow_other in
    /// /etc/fuse.conf unless run as root).
    #[arg(long)]
    allow_other: bool,
    /// Mount options, comma-separated, as mount(8) passes them (repeatable).
    #[arg(short = 'o', value_name = "OPTIONS", action = clap::ArgAction::Append)]
    options: Vec<String>,
    /// Where frame indexes of large transcripts are kept between mounts
    /// (outside the store), or `none` [default: $XDG_CACHE_HOME/sessionfs/index,
    /// else ~/.cache/sessionfs/index].
    #[arg(long, value_name = "DIR")]
    index_cache: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ListArgs {
    /// The session store's root directory.
    root: PathBuf,
    /// Only the sessions whose header cwd is PATH (NFC or NFD spelling).
    #[arg(long, value_name = "PATH")]
    project: Option<String>,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct IdArgs {
    /// The session store's root directory.
    root: PathBuf,
    /// The session id (exact, or any id with the same part after the last
    /// '_', at least 8 characters long).
    id: String,
}

#[derive(Debug, Args)]
struct KeyArgs {
    /// A working directory, as a session header would record it.
    path: OsString,
}

/// Parses `--attr-timeout`: non-negative seconds, fractions allowed.
fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !secs.is_finite() || secs < 0.0 {
        return Err(format!("{s:?} is not a non-negative number of seconds"));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("{s:?}: {e}"))
}

/// Parses a byte count: plain digits, or digits followed by K, M, G (or
/// KiB, MiB, GiB), 1024-based, case-insensitive.
fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, suffix) = t.split_at(digits_end);
    if digits.is_empty() {
        return Err(format!(
            "{s:?} is not a byte count (e.g. 16777216 or 16MiB)"
        ));
    }
    let n: u64 = digits.parse().map_err(|_| format!("{s:?} is too large"))?;
    let shift = match suffix.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => {
            return Err(format!(
                "{s:?}: unknown unit (use K, M, G, KiB, MiB or GiB)"
            ))
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

/// Names that are subcommands or top-level flags: anything else in first
/// position is the mount(8) helper form `sessionfs ROOT MOUNTPOINT -o …`.
const SUBCOMMANDS: [&str; 7] = ["mount", "list", "locate", "cat", "key", "check", "help"];

/// Inserts `mount` when invoked in the mount(8) helper form.
fn with_implicit_mount(mut args: Vec<OsString>) -> Vec<OsString> {
    if is_helper_form(&args) {
        args.insert(1, OsString::from("mount"));
    }
    args
}

/// Whether `args` is the mount(8) helper form `sessionfs ROOT MOUNTPOINT …`.
fn is_helper_form(args: &[OsString]) -> bool {
    args.get(1).is_some_and(|first| {
        let b = first.as_bytes();
        let is_subcommand = SUBCOMMANDS.iter().any(|s| s.as_bytes() == b);
        !is_subcommand && !b.starts_with(b"-") && args.len() >= 3
    })
}

/// How long the mount(8) helper form waits for its daemon's mount.
const DETACH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The mount(8) helper form detaches once the mount is ready, as other
/// FUSE file systems do (MOUNT.md, Mount options): it starts `sessionfs
/// mount …` in a new session, waits until MOUNTPOINT is mounted, and exits
/// 0, or 1 with the daemon's exit status when it failed first.
fn run_detached(args: Vec<OsString>, mountpoint: &Path) -> u8 {
    use std::os::unix::process::CommandExt;
    let Ok(exe) = std::env::current_exe() else {
        return fail("cannot find the sessionfs executable to start the daemon");
    };
    let Ok(mountpoint) = std::path::absolute(mountpoint) else {
        return fail(format_args!(
            "mount point {}: cannot make it absolute",
            mountpoint.display()
        ));
    };
    // The daemon must not hold the caller's output open (a pipe reader
    // would wait for the unmount): its log goes to $SESSIONFS_LOG_FILE, or
    // nowhere.
    let log = std::env::var_os("SESSIONFS_LOG_FILE").and_then(|p| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .ok()
    });
    let stderr = match log {
        Some(f) => std::process::Stdio::from(f),
        None => std::process::Stdio::null(),
    };
    let mut cmd = std::process::Command::new(exe);
    cmd.args(&args[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr);
    // SAFETY: setsid is async-signal-safe; it detaches the daemon from the
    // caller's session so that mount(8) can return.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return fail(format_args!("cannot start the sessionfs daemon: {e}")),
    };
    let deadline = std::time::Instant::now() + DETACH_TIMEOUT;
    loop {
        if is_mount_point(&mountpoint) {
            return EXIT_OK;
        }
        if let Ok(Some(status)) = child.try_wait() {
            return fail(format_args!(
                "the sessionfs daemon exited before mounting ({status})"
            ));
        }
        if std::time::Instant::now() > deadline {
            return fail(format_args!(
                "{} was not mounted within {DETACH_TIMEOUT:?}; the daemon (pid {}) is still starting",
                mountpoint.display(),
                child.id()
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Whether `path` is a mount point in /proc/self/mountinfo.
fn is_mount_point(path: &Path) -> bool {
    let Ok(table) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let wanted = path.as_os_str().as_bytes();
    table.lines().any(|line| {
        line.split(' ')
            .nth(4)
            .is_some_and(|field| unescape_mountinfo(field).as_slice() == wanted)
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape_mountinfo(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            out.push((b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Entry point of the `sessionfs` binary: sets up logging (RUST_LOG,
/// default info), parses the process's arguments and runs the command.
pub fn main() -> ExitCode {
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
    let helper_form = is_helper_form(&args);
    let args = with_implicit_mount(args);
    let cli = match Cli::try_parse_from(args.clone()) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(EXIT_USAGE));
        }
    };
    let code = match cli.command {
        Command::Mount(mount) if helper_form => run_detached(args, &mount.mountpoint),
        Command::Mount(args) => cmd_mount(args),
        Command::List(args) => cmd_list(args),
        Command::Locate(args) => cmd_locate(args),
        Command::Cat(args) => cmd_cat(args),
        Command::Key(args) => cmd_key(args),
        Command::Check(args) => cmd_check(args),
    };
    ExitCode::from(code)
}

fn fail(message: impl std::fmt::Display) -> u8 {
    eprintln!("sessionfs: {message}");
    EXIT_ERROR
}

/// Outcome of writing to stdout: a closed pipe ends the command quietly.
fn output_result(r: io::Result<()>) -> u8 {
    match r {
        Ok(()) => EXIT_OK,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => EXIT_OK,
        Err(e) => fail(format_args!("writing to stdout: {e}")),
    }
}

/// Resolves ROOT once and opens the store on its I/O path.
fn open_store(root: &Path) -> Result<(IdentityRoot, Store), u8> {
    let identity = IdentityRoot::resolve(root).map_err(fail)?;
    let store = Store::open(identity.io_path(), StoreOptions::default()).map_err(fail)?;
    Ok((identity, store))
}

fn cmd_mount(args: MountArgs) -> u8 {
    let identity = match IdentityRoot::resolve(&args.root) {
        Ok(identity) => identity,
        Err(e) => return fail(e),
    };
    let mountpoint = match std::path::absolute(&args.mountpoint) {
        Ok(p) => p,
        Err(e) => {
            return fail(format_args!(
                "mount point {}: cannot make it absolute ({e}); give an absolute path",
                args.mountpoint.display()
            ))
        }
    };
    let options = args
        .options
        .iter()
        .flat_map(|o| o.split(','))
        .map(str::trim)
        .filter(|o| !o.is_empty())
        .map(str::to_string)
        .collect();
    let config = crate::fuse::MountConfig {
        root: identity.io_path().to_path_buf(),
        mountpoint,
        read_only: args.read_only,
        compression: args.compression.map(|c| match c {
            Compression::Zstd => Encoding::Zstd,
            Compression::None => Encoding::Raw,
        }),
        batch_ms: args.batch_ms,
        attr_timeout: args.attr_timeout,
        cache_bytes: args.cache_size.unwrap_or(DEFAULT_CACHE_BYTES),
        index_dir: match args.index_cache {
            Some(dir) if dir.as_os_str() == "none" => None,
            Some(dir) => Some(dir),
            None => crate::store::index_store::default_index_dir(),
        },
        allow_other: args.allow_other,
        options,
        pending_budget: args
            .pending_budget
            .unwrap_or(crate::fuse::budget::DEFAULT_PENDING_BUDGET),
    };
    match crate::fuse::run_mount(config) {
        Ok(()) => EXIT_OK,
        Err(e) => fail(e),
    }
}

fn cmd_check(args: CheckArgs) -> u8 {
    use crate::store::check::{classify, CheckTarget};
    let path = &args.path;
    let shown = Shown(path);
    match classify(path) {
        CheckTarget::File => check_files(std::slice::from_ref(path), args.repair).0,
        CheckTarget::Root => check_root(path, args.repair),
        CheckTarget::SessionDir => problem_only(
            path,
            "a session directory, not a session store root: check its transcript \
             (session.jsonl.zstd or session.jsonl) or give the root",
        ),
        CheckTarget::ProjectDir => problem_only(
            path,
            &format!(
                "a project directory, not a session store root: give the root \
                 (the directory that holds {shown})"
            ),
        ),
        CheckTarget::Other(what) => problem_only(path, &what),
    }
}

/// Writes `text` to stdout; `Err(code)` when that fails (a closed pipe ends
/// the command quietly).
fn emit(text: &str) -> Result<(), u8> {
    match io::stdout().lock().write_all(text.as_bytes()) {
        Ok(()) => Ok(()),
        Err(e) => Err(output_result(Err(e))),
    }
}

/// One `PROBLEM` line about `path`; exit status 1.
fn problem_only(path: &Path, what: &str) -> u8 {
    let _ = emit(&problem_line(path, what));
    EXIT_ERROR
}

fn problem_line(path: &Path, what: &str) -> String {
    format!("PROBLEM\t{}\t{what}\n", Shown(path))
}

/// Checks each transcript of `paths` and reports it; returns the exit
/// status, and whether the output was cut short (stdout closed).
fn check_files(paths: &[PathBuf], repair: bool) -> (u8, bool) {
    use crate::store::check::check_transcript;
    let mut code = EXIT_OK;
    for path in paths {
        let text = match check_transcript(path, repair) {
            Ok(r) => {
                if r.has_problem() {
                    code = EXIT_ERROR;
                }
                check_report_text(&r)
            }
            Err(e) => {
                code = EXIT_ERROR;
                problem_line(path, &format!("cannot check it: {e}"))
            }
        };
        if let Err(written) = emit(&text) {
            return (if code == EXIT_OK { written } else { code }, true);
        }
    }
    (code, false)
}

/// The report of one transcript: a status line (`ok`, `repaired` or
/// `PROBLEM`), then one indented line per note.
fn check_report_text(r: &crate::store::check::CheckReport) -> String {
    let mut notes: Vec<String> = r.problems.clone();
    let (unit, torn_unit) = if r.raw {
        ("header line", "torn last line")
    } else {
        ("header frame", "torn last frame")
    };
    if let Some(at) = r.torn_at {
        notes.push(if r.torn_in_header {
            format!(
                "{torn_unit} at byte {at}: the file is torn inside its {unit}: nothing \
                 committed; restore it from a backup or remove the session directory"
            )
        } else if r.repaired {
            format!("{torn_unit} at byte {at}: truncated (repaired)")
        } else {
            format!("{torn_unit} at byte {at}: run with --repair to truncate it")
        });
    }
    for at in &r.skippable {
        notes.push(format!(
            "skippable frame at byte {at}: the reference refuses it (sessionfs skips it); \
             check does not remove it (committed data is never rewritten)"
        ));
    }
    let status = if r.has_problem() {
        "PROBLEM"
    } else if r.repaired {
        "repaired"
    } else {
        "ok"
    };
    let summary = if r.raw {
        format!("{} lines, {} bytes", r.lines, r.plain_len)
    } else {
        format!("{} frames, {} bytes decompressed", r.frames, r.plain_len)
    };
    let mut text = format!("{status}\t{}\t{summary}\n", Shown(&r.path));
    for n in notes {
        text.push_str(&format!("\t{n}\n"));
    }
    text
}

/// Where a store error is about, for its `PROBLEM` line.
fn store_error_path(e: &crate::store::StoreError) -> Option<&Path> {
    use crate::store::StoreError as E;
    match e {
        E::Io { path, .. }
        | E::FlatArtifact { path }
        | E::EncodingMismatch { path, .. }
        | E::Misplaced { path, .. }
        | E::HeaderLess { path, .. }
        | E::Corrupt { path, .. }
        | E::UnsupportedVersion { path, .. }
        | E::NotFound { path }
        | E::InvalidLine { path, .. }
        | E::SeqConflict { path, .. }
        | E::TornTail { path, .. }
        | E::AlreadyExists { path } => Some(path),
        E::DuplicateId { paths, .. } => paths.first().map(PathBuf::as_path),
        _ => None,
    }
}

/// Checks every transcript under `root`, then what the mount and `list`
/// refuse in it (flat artifacts, encoding mismatches, duplicates, misplaced
/// sessions, entries under a transcript's name that are no files, …).
fn check_root(root: &Path, repair: bool) -> u8 {
    use crate::store::check::transcripts_under;
    let paths = transcripts_under(root);
    let (mut code, cut) = check_files(&paths, repair);
    if cut {
        return code;
    }
    let listing = Store::open(root, StoreOptions::default()).and_then(|store| store.sessions());
    let listing = match listing {
        Ok(listing) => listing,
        Err(e) => return problem_only(root, &format!("cannot list the store: {e}")),
    };
    for e in &listing.errors {
        code = EXIT_ERROR;
        let path = store_error_path(e).unwrap_or(root);
        let text = problem_line(path, &format!("the mount and list refuse it: {e}"));
        if let Err(written) = emit(&text) {
            return if code == EXIT_OK { written } else { code };
        }
    }
    if paths.is_empty() && listing.errors.is_empty() && listing.sessions.is_empty() {
        let empty = std::fs::read_dir(root).is_ok_and(|mut it| it.next().is_none());
        return if empty {
            match emit(&format!(
                "ok\t{}\tan empty store (no sessions)\n",
                Shown(root)
            )) {
                Ok(()) => EXIT_OK,
                Err(written) => written,
            }
        } else {
            problem_only(
                root,
                "not a session store root: no transcript at \
                 <project>/<session>/session.jsonl[.zstd] under it",
            )
        };
    }
    code
}

fn cmd_key(args: KeyArgs) -> u8 {
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

fn cmd_list(args: ListArgs) -> u8 {
    let (_identity, store) = match open_store(&args.root) {
        Ok(v) => v,
        Err(code) => return code,
    };
    let listing = match &args.project {
        Some(path) => store.sessions_for_project(path),
        None => store.sessions(),
    };
    let SessionListing {
        mut sessions,
        errors,
    } = match listing {
        Ok(listing) => listing,
        Err(e) => return fail(e),
    };
    sessions.sort_by(|a, b| {
        (a.created_at_ms, &a.id, &a.project_dir).cmp(&(b.created_at_ms, &b.id, &b.project_dir))
    });
    for e in &errors {
        eprintln!("sessionfs: skipped: {e}");
    }
    let mut out = io::BufWriter::new(io::stdout().lock());
    let written = if args.json {
        write_json(&mut out, &sessions)
    } else {
        write_table(&mut out, &sessions)
    }
    .and_then(|()| out.flush());
    match output_result(written) {
        EXIT_OK if !errors.is_empty() => EXIT_ERROR,
        code => code,
    }
}

fn write_json(out: &mut impl Write, sessions: &[SessionSummary]) -> io::Result<()> {
    let array: Vec<serde_json::Value> = sessions
        .iter()
        .map(|s| {
            serde_json::json!({
                "id": s.id,
                "cwd": s.cwd,
                "createdAt": format_utc_ms(i64::try_from(s.created_at_ms).unwrap_or(i64::MAX)),
                "createdAtMs": s.created_at_ms,
                "size": s.plain_len,
                "modified": format_utc_ms(system_time_ms(s.modified)),
                "project": s.project_dir.to_string_lossy(),
                "path": s.transcript_path.to_string_lossy(),
            })
        })
        .collect();
    // A failed write keeps its kind (a closed pipe stays `BrokenPipe`).
    serde_json::to_writer_pretty(&mut *out, &array).map_err(io::Error::from)?;
    writeln!(out)
}

fn write_table(out: &mut impl Write, sessions: &[SessionSummary]) -> io::Result<()> {
    let header = ["ID", "CREATED", "SIZE", "MODIFIED", "CWD"];
    let rows: Vec<[String; 5]> = sessions
        .iter()
        .map(|s| {
            [
                printable(&s.id),
                format_utc_ms(i64::try_from(s.created_at_ms).unwrap_or(i64::MAX)),
                s.plain_len.to_string(),
                format_utc_ms(system_time_ms(s.modified)),
                s.cwd.as_deref().map_or_else(|| "-".to_string(), printable),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    // A very long id overflows its own row instead of widening every row.
    widths[0] = widths[0].min(MAX_ID_COLUMN);
    let line = |out: &mut dyn Write, cells: [&str; 5]| -> io::Result<()> {
        let mut text = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                let pad = widths[i].saturating_sub(cell.chars().count());
                // SIZE is right-aligned, the rest left-aligned.
                if i == 2 {
                    text.push_str(&" ".repeat(pad));
                    text.push_str(cell);
                } else {
                    text.push_str(cell);
                    text.push_str(&" ".repeat(pad));
                }
                text.push_str("  ");
            }
        }
        writeln!(out, "{}", text.trim_end())
    };
    line(out, header)?;
    for row in &rows {
        line(out, [&row[0], &row[1], &row[2], &row[3], &row[4]])?;
    }
    Ok(())
}

/// `s` with control characters escaped, so that one session stays one line
/// of the table.
fn printable(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_string();
    }
    s.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn exit_code_of_find(e: &FindError) -> u8 {
    match e {
        FindError::Id(IdLookupError::Ambiguous { .. }) => EXIT_AMBIGUOUS,
        _ => EXIT_ERROR,
    }
}

fn cmd_locate(args: IdArgs) -> u8 {
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

fn cmd_cat(args: IdArgs) -> u8 {
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

/// Milliseconds since the Unix epoch (negative before it, saturating).
fn system_time_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => i64::try_from(e.duration().as_millis()).map_or(i64::MIN, |ms| -ms),
    }
}

/// Formats milliseconds since the Unix epoch as ISO 8601 in UTC, the way
/// JavaScript's `Date.prototype.toISOString` does
/// (`2026-01-05T09:00:00.000Z`; years outside 0–9999 as `±YYYYYY`).
pub fn format_utc_ms(ms: i64) -> String {
    const DAY_MS: i64 = 86_400_000;
    let days = ms.div_euclid(DAY_MS);
    let in_day = ms.rem_euclid(DAY_MS);
    let (year, month, day) = civil_from_days(days);
    let (h, rest) = (in_day / 3_600_000, in_day % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let (s, milli) = (rest / 1000, rest % 1000);
    let year = if (0..=9999).contains(&year) {
        format!("{year:04}")
    } else if year < 0 {
        format!("-{:06}", year.unsigned_abs())
    } else {
        format!("+{year:06}")
    };
    format!("{year}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}Z")
}

/// Year, month, day of a day count since 1970-01-01 (proleptic Gregorian;
/// H. Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // [0, 146096]
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // [0, 399]
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // [0, 365]
    let mp = (5 * doy + 2) / 153; // [0, 11]
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn iso_times_match_javascript() {
        for (ms, iso) in [
            (0, "1970-01-01T00:00:00.000Z"),
            (1_767_603_600_000, "2026-01-05T09:00:00.000Z"),
            (951_782_400_000, "2000-02-29T00:00:00.000Z"),
            (-1, "1969-12-31T23:59:59.999Z"),
            (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
            (253_402_300_800_000, "+010000-01-01T00:00:00.000Z"),
            (8_640_000_000_000_000, "+275760-09-13T00:00:00.000Z"),
            (-62_198_755_200_000, "-000001-01-01T00:00:00.000Z"),
        ] {
            assert_eq!(format_utc_ms(ms), iso, "{ms}");
        }
        // No panic at the extremes.
        let _ = format_utc_ms(i64::MAX);
        let _ = format_utc_ms(i64::MIN);
    }

    #[test]
    fn byte_counts_and_seconds() {
        assert_eq!(parse_bytes("16777216"), Ok(16 << 20));
        assert_eq!(parse_bytes("16MiB"), Ok(16 << 20));
        assert_eq!(parse_bytes("16m"), Ok(16 << 20));
        assert_eq!(parse_bytes("2 G"), Ok(2 << 30));
        assert_eq!(parse_bytes("0"), Ok(0));
        assert!(parse_bytes("").is_err());
        assert!(parse_bytes("MiB").is_err());
        assert!(parse_bytes("-5").is_err());
        assert!(parse_bytes("5 PiB").is_err());
        assert!(parse_bytes("99999999999999999999").is_err());
        assert!(parse_bytes("17179869184G").is_err());
        assert_eq!(parse_seconds("1"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_seconds("0.25"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_seconds("0"), Ok(Duration::ZERO));
        assert!(parse_seconds("-1").is_err());
        assert!(parse_seconds("nan").is_err());
        assert!(parse_seconds("inf").is_err());
        assert!(parse_seconds("1e400").is_err());
        assert!(parse_seconds("soon").is_err());
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
        assert_eq!(m.compression, Some(Compression::None));
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

    #[test]
    fn mount_helper_form_is_mount() {
        let args = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            with_implicit_mount(args(&["sessionfs", "/r", "/m", "-o", "rw"])),
            args(&["sessionfs", "mount", "/r", "/m", "-o", "rw"])
        );
        for unchanged in [
            &["sessionfs", "list", "/r"][..],
            &["sessionfs", "--help"],
            &["sessionfs", "key", "/x"],
            &["sessionfs", "/r"],
            &["sessionfs"],
        ] {
            assert_eq!(with_implicit_mount(args(unchanged)), args(unchanged));
        }
    }

    #[test]
    fn printable_escapes_control_characters() {
        assert_eq!(printable("a b/é🚀"), "a b/é🚀");
        assert_eq!(printable("a\tb\nc"), "a\\tb\\nc");
    }
}
