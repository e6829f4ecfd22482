//! Identity versus location (`../shared/spec/IDENTITY.md`).
//!
//! Two rules live here:
//!
//! 1. [`IdentityRoot`]: the store root is resolved exactly once, at
//!    start-up. Its real path (symbolic links followed, its own bytes) is
//!    used for every I/O; its Unicode NFC form is the *identity* that is
//!    logged and compared. Nothing re-resolves it later and nothing derives
//!    storage from the process's current directory afterwards, so a `cd`,
//!    a worktree switch or a symlink retargeted after start-up changes
//!    nothing that is served or written.
//! 2. Session ids are compared by their *body* ([`ids_match`],
//!    [`resolve_id`]): `cse_01J9…` finds `session_01J9…`, an exact match
//!    always wins, and an ambiguous body match fails with the candidates
//!    listed. Two different full ids are never merged.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use unicode_normalization::UnicodeNormalization;

/// The store root, resolved once at start-up (IDENTITY.md §1).
///
/// Cloning copies the resolved value; it is never resolved again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityRoot {
    /// The path as the user gave it.
    given: PathBuf,
    /// The real path (or, after a permission fallback, the absolute given
    /// path): the bytes every I/O uses.
    io_path: PathBuf,
    /// NFC form of `io_path`: what is logged, recorded and compared.
    identity: String,
    /// The errno of the permission error that made resolution fall back to
    /// the absolute given path, if it did.
    fallback_errno: Option<i32>,
}

/// Why the root could not be resolved at start-up. Each message says which
/// path, what failed and what to do.
#[derive(Debug)]
pub enum RootError {
    /// The root (or a directory on its path) does not exist.
    Missing { given: PathBuf },
    /// Resolving the root's symbolic links loops (ELOOP).
    SymlinkLoop { given: PathBuf },
    /// The root resolves to something that is not a directory.
    NotADirectory { given: PathBuf, real: PathBuf },
    /// Resolving failed for another reason.
    Resolve { given: PathBuf, source: io::Error },
    /// The root is relative and the current directory cannot be read to
    /// make it absolute.
    CurrentDir { given: PathBuf, source: io::Error },
}

impl RootError {
    /// The path as the user gave it.
    pub fn given(&self) -> &Path {
        match self {
            RootError::Missing { given }
            | RootError::SymlinkLoop { given }
            | RootError::NotADirectory { given, .. }
            | RootError::Resolve { given, .. }
            | RootError::CurrentDir { given, .. } => given,
        }
    }
}

impl fmt::Display for RootError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RootError::Missing { given } => write!(
                f,
                "session root {}: no such directory; check the path, or create the \
                 directory first (an empty directory is an empty store)",
                given.display()
            ),
            RootError::SymlinkLoop { given } => write!(
                f,
                "session root {}: symbolic link loop while resolving it (ELOOP); fix the \
                 links on its path or give the real directory",
                given.display()
            ),
            RootError::NotADirectory { given, real } => write!(
                f,
                "session root {} resolves to {}, which is not a directory; give the \
                 directory that holds the project directories",
                given.display(),
                real.display()
            ),
            RootError::Resolve { given, source } => write!(
                f,
                "session root {}: cannot resolve its real path: {source}; check the path \
                 and its permissions",
                given.display()
            ),
            RootError::CurrentDir { given, source } => write!(
                f,
                "session root {} is relative and the current directory cannot be read \
                 ({source}); give an absolute path",
                given.display()
            ),
        }
    }
}

impl std::error::Error for RootError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RootError::Resolve { source, .. } | RootError::CurrentDir { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }
}

impl IdentityRoot {
    /// Resolves `given` once: `realpath` (symbolic links, `.`, `..` and
    /// trailing slashes resolved) for I/O, its NFC form as the identity.
    /// Logs the result once at info level.
    ///
    /// Errors: see [`IdentityRoot::resolve_with`].
    pub fn resolve(given: &Path) -> Result<IdentityRoot, RootError> {
        Self::resolve_with(given, |p| std::fs::canonicalize(p))
    }

    /// [`IdentityRoot::resolve`] with the real-path call supplied by the
    /// caller: the fault-injection seam of the tests.
    ///
    /// * `realpath` fails with EPERM or EACCES (cloud-storage mounts,
    ///   sandboxes denying metadata reads on an ancestor): falls back to
    ///   `given` made absolute against the current directory at this moment,
    ///   and logs one warning.
    /// * Errors: [`RootError::Missing`] (ENOENT, or ENOTDIR on the way),
    ///   [`RootError::SymlinkLoop`] (ELOOP), [`RootError::NotADirectory`]
    ///   when the real path is a file, [`RootError::Resolve`] for any other
    ///   failure, [`RootError::CurrentDir`] when a relative root must be
    ///   made absolute and the current directory cannot be read.
    pub fn resolve_with<F>(given: &Path, realpath: F) -> Result<IdentityRoot, RootError>
    where
        F: FnOnce(&Path) -> io::Result<PathBuf>,
    {
        let given_buf = given.to_path_buf();
        let (io_path, fallback_errno) = match realpath(given) {
            Ok(real) => {
                // A metadata failure here is left to the store to report
                // when it opens the root; only a definite non-directory is
                // refused now.
                if let Ok(meta) = std::fs::metadata(&real) {
                    if !meta.is_dir() {
                        return Err(RootError::NotADirectory {
                            given: given_buf,
                            real,
                        });
                    }
                }
                (real, None)
            }
            Err(e) => match e.raw_os_error() {
                Some(code) if code == libc::EPERM || code == libc::EACCES => {
                    // Made absolute once, against the current directory of
                    // this moment; `.`, repeated and trailing separators
                    // dropped, `..` kept (removing it lexically could change
                    // which directory is named when a symlink precedes it).
                    let abs: PathBuf = std::path::absolute(given)
                        .map_err(|source| RootError::CurrentDir {
                            given: given_buf.clone(),
                            source,
                        })?
                        .components()
                        .collect();
                    log::warn!(
                        "session root {}: cannot resolve its real path ({e}); using it as \
                         given, made absolute: {}",
                        given.display(),
                        abs.display()
                    );
                    (abs, Some(code))
                }
                Some(code) if code == libc::ELOOP => {
                    return Err(RootError::SymlinkLoop { given: given_buf })
                }
                Some(code) if code == libc::ENOENT || code == libc::ENOTDIR => {
                    return Err(RootError::Missing { given: given_buf })
                }
                _ if e.kind() == io::ErrorKind::NotFound => {
                    return Err(RootError::Missing { given: given_buf })
                }
                _ => {
                    return Err(RootError::Resolve {
                        given: given_buf,
                        source: e,
                    })
                }
            },
        };
        let identity = nfc(&io_path.to_string_lossy());
        log::debug!(
            "identity root {identity} (given as {}, I/O through {})",
            given.display(),
            io_path.display()
        );
        Ok(IdentityRoot {
            given: given_buf,
            io_path,
            identity,
            fallback_errno,
        })
    }

    /// The path every I/O uses: the real path's own bytes (NFD stays NFD).
    pub fn io_path(&self) -> &Path {
        &self.io_path
    }

    /// The identity: NFC form of the I/O path, as logged and compared. A
    /// path that is not valid UTF-8 is shown with U+FFFD replacements.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// The path as the user gave it.
    pub fn given(&self) -> &Path {
        &self.given
    }

    /// Whether resolution fell back to the absolute given path after a
    /// permission error (EPERM or EACCES), and with which errno.
    pub fn fallback_errno(&self) -> Option<i32> {
        self.fallback_errno
    }
}

impl fmt::Display for IdentityRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.identity)
    }
}

/// The NFC form of `s`.
pub fn nfc(s: &str) -> String {
    s.nfc().collect()
}

/// The NFD form of `s`.
pub fn nfd(s: &str) -> String {
    s.nfd().collect()
}

/// Shortest body, in characters (not bytes), that two ids may share to name
/// the same session (IDENTITY.md §2).
pub const MIN_BODY_CHARS: usize = 8;

/// The body of an id: the part after its last `_`; the whole id when it has
/// no `_`.
pub fn id_body(id: &str) -> &str {
    match id.rfind('_') {
        Some(i) => &id[i + 1..],
        None => id,
    }
}

/// Whether two ids name the same session: equal, or with equal bodies of
/// at least [`MIN_BODY_CHARS`] characters. Case and spaces matter.
pub fn ids_match(a: &str, b: &str) -> bool {
    if a == b {
        return true;
    }
    let body = id_body(a);
    body == id_body(b) && body.chars().count() >= MIN_BODY_CHARS
}

/// Why looking a session up by id failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdLookupError {
    /// No id equals `wanted` or shares its body.
    NotFound { wanted: String },
    /// No id equals `wanted` and several share its body.
    Ambiguous {
        wanted: String,
        candidates: Vec<String>,
    },
    /// Several candidates carry exactly the id `wanted` (a duplicate id).
    Duplicate { wanted: String, count: usize },
}

impl fmt::Display for IdLookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IdLookupError::NotFound { wanted } => write!(
                f,
                "no session with id {wanted:?} (nor one sharing its part after the last '_'); \
                 run `sessionfs list ROOT` to see the ids"
            ),
            IdLookupError::Ambiguous { wanted, candidates } => {
                let list: Vec<String> = candidates.iter().map(|c| format!("{c:?}")).collect();
                write!(
                    f,
                    "session id {wanted:?} is ambiguous: no session has exactly this id and \
                     {} share its part after the last '_': {}; give the full id",
                    candidates.len(),
                    list.join(", ")
                )
            }
            IdLookupError::Duplicate { wanted, count } => write!(
                f,
                "session id {wanted:?} names {count} sessions (duplicate id); remove or move \
                 all but one"
            ),
        }
    }
}

impl std::error::Error for IdLookupError {}

/// Finds the one candidate that `wanted` names (IDENTITY.md §2): the
/// candidate whose id equals `wanted`; else the only one whose id matches
/// by body ([`ids_match`]).
///
/// Errors: [`IdLookupError::Duplicate`] when several ids equal `wanted`;
/// [`IdLookupError::Ambiguous`] (candidates listed, sorted) when none does
/// and several match by body; [`IdLookupError::NotFound`] when none matches.
pub fn resolve_id<S, T, I>(wanted: &str, candidates: I) -> Result<T, IdLookupError>
where
    S: AsRef<str>,
    I: IntoIterator<Item = (S, T)>,
{
    let mut exact: Vec<T> = Vec::new();
    let mut by_body: Vec<(String, T)> = Vec::new();
    for (id, value) in candidates {
        let id = id.as_ref();
        if id == wanted {
            exact.push(value);
        } else if exact.is_empty() && ids_match(id, wanted) {
            by_body.push((id.to_string(), value));
        }
    }
    match exact.len() {
        1 => return Ok(exact.pop().expect("one exact match")),
        0 => {}
        count => {
            return Err(IdLookupError::Duplicate {
                wanted: wanted.to_string(),
                count,
            })
        }
    }
    match by_body.len() {
        0 => Err(IdLookupError::NotFound {
            wanted: wanted.to_string(),
        }),
        1 => Ok(by_body.pop().expect("one body match").1),
        _ => {
            let mut ids: Vec<String> = by_body.into_iter().map(|(id, _)| id).collect();
            ids.sort();
            Err(IdLookupError::Ambiguous {
                wanted: wanted.to_string(),
                candidates: ids,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::fs;
    use std::os::unix::fs::symlink;
    use std::sync::Once;

    // ---- A log capture per test thread, to count what resolution logs. ----

    thread_local! {
        static CAPTURED: RefCell<Vec<(log::Level, String)>> = const { RefCell::new(Vec::new()) };
    }

    struct Capture;

    impl log::Log for Capture {
        fn enabled(&self, _: &log::Metadata) -> bool {
            true
        }
        fn log(&self, record: &log::Record) {
            if record.target().starts_with("sessionfs::identity") {
                CAPTURED.with(|c| {
                    c.borrow_mut()
                        .push((record.level(), record.args().to_string()))
                });
            }
        }
        fn flush(&self) {}
    }

    static CAPTURE: Capture = Capture;
    static INIT: Once = Once::new();

    /// Starts capturing this thread's identity log records; returns them
    /// when `f` is done.
    fn logged<R>(f: impl FnOnce() -> R) -> (R, Vec<(log::Level, String)>) {
        INIT.call_once(|| {
            // The unit tests of this crate must not install a global logger
            // of their own: these tests count what resolution logs.
            log::set_logger(&CAPTURE).expect(
                "another unit test installed a global logger; the identity tests \
                 need theirs to count what resolution logs",
            );
            log::set_max_level(log::LevelFilter::Trace);
        });
        CAPTURED.with(|c| c.borrow_mut().clear());
        let r = f();
        (r, CAPTURED.with(|c| std::mem::take(&mut *c.borrow_mut())))
    }

    fn err(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    // ---- Must show 1: one identity root, resolved once. ----

    #[test]
    fn symlink_trailing_slash_and_dotdot_give_one_identity_root() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let store = base.join("store");
        fs::create_dir_all(store.join("sub")).unwrap();
        symlink(&store, base.join("link")).unwrap();

        let spellings = [
            store.clone(),
            base.join("link"),
            PathBuf::from(format!("{}/", store.display())),
            PathBuf::from(format!("{}/", base.join("link").display())),
            store.join("sub").join(".."),
            base.join("link").join("sub").join("..").join("."),
        ];
        for given in &spellings {
            let (root, logs) = logged(|| IdentityRoot::resolve(given).unwrap());
            assert_eq!(root.io_path(), store, "given {}", given.display());
            assert_eq!(root.identity(), store.to_str().unwrap());
            assert_eq!(root.given(), given.as_path());
            assert_eq!(root.fallback_errno(), None);
            let infos: Vec<_> = logs
                .iter()
                .filter(|(l, _)| *l == log::Level::Debug)
                .collect();
            assert_eq!(infos.len(), 1, "logged once: {logs:?}");
            assert!(infos[0].1.contains(root.identity()));
            assert!(logs.iter().all(|(l, _)| *l != log::Level::Warn));
        }
    }

    #[test]
    fn nfd_named_root_is_reached_by_its_bytes_and_known_by_its_nfc_identity() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let nfd_name = "cafe\u{301}-项目";
        let nfc_name = "caf\u{e9}-项目";
        assert_ne!(nfd_name, nfc_name);
        let real = base.join(nfd_name);
        fs::create_dir(&real).unwrap();
        fs::write(real.join("marker"), b"here").unwrap();
        symlink(&real, base.join("alias")).unwrap();

        for given in [real.clone(), base.join("alias")] {
            let root = IdentityRoot::resolve(&given).unwrap();
            // I/O uses the NFD bytes, which is the only spelling that exists.
            assert_eq!(root.io_path(), real);
            assert_eq!(fs::read(root.io_path().join("marker")).unwrap(), b"here");
            // The identity is NFC.
            assert_eq!(root.identity(), format!("{}/{nfc_name}", base.display()));
            assert_eq!(root.to_string(), root.identity());
        }
        // On Linux the NFC spelling is another name, which does not exist.
        let nfc_spelling = base.join(nfc_name);
        if !nfc_spelling.exists() {
            assert!(matches!(
                IdentityRoot::resolve(&nfc_spelling),
                Err(RootError::Missing { .. })
            ));
        }
    }

    #[test]
    fn retargeting_the_symlink_after_resolution_changes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let (a, b) = (base.join("a"), base.join("b"));
        fs::create_dir(&a).unwrap();
        fs::create_dir(&b).unwrap();
        fs::write(a.join("which"), b"a").unwrap();
        fs::write(b.join("which"), b"b").unwrap();
        let link = base.join("root");
        symlink(&a, &link).unwrap();

        let root = IdentityRoot::resolve(&link).unwrap();
        let copy = root.clone();
        fs::remove_file(&link).unwrap();
        symlink(&b, &link).unwrap();

        assert_eq!(root.io_path(), a);
        assert_eq!(copy, root);
        assert_eq!(fs::read(root.io_path().join("which")).unwrap(), b"a");
        // Only a new resolution (a new start-up) sees the new target.
        assert_eq!(IdentityRoot::resolve(&link).unwrap().io_path(), b);
    }

    #[test]
    fn permission_errors_fall_back_to_the_absolute_given_path_with_one_warning() {
        for code in [libc::EPERM, libc::EACCES] {
            let given = Path::new("/denied//by/./sandbox/cafe\u{301}/");
            let (root, logs) =
                logged(|| IdentityRoot::resolve_with(given, |_| Err(err(code))).unwrap());
            assert_eq!(root.fallback_errno(), Some(code));
            assert_eq!(root.io_path(), Path::new("/denied/by/sandbox/cafe\u{301}"));
            assert_eq!(root.identity(), "/denied/by/sandbox/caf\u{e9}");
            let warns = logs.iter().filter(|(l, _)| *l == log::Level::Warn).count();
            let infos = logs.iter().filter(|(l, _)| *l == log::Level::Debug).count();
            assert_eq!((warns, infos), (1, 1), "{logs:?}");
        }
    }

    #[test]
    fn permission_fallback_of_a_relative_root_uses_the_cwd_of_that_moment() {
        let cwd = std::env::current_dir().unwrap();
        let root =
            IdentityRoot::resolve_with(Path::new("rel/store"), |_| Err(err(libc::EACCES))).unwrap();
        assert_eq!(root.io_path(), cwd.join("rel/store"));
        assert!(root.io_path().is_absolute());
    }

    #[test]
    fn missing_root_and_symlink_loop_are_start_up_errors() {
        let given = Path::new("/no/such/store");
        for code in [libc::ENOENT, libc::ENOTDIR] {
            let e = IdentityRoot::resolve_with(given, |_| Err(err(code))).unwrap_err();
            assert!(matches!(e, RootError::Missing { .. }), "{e:?}");
            let msg = e.to_string();
            assert!(
                msg.contains("/no/such/store") && msg.contains("no such directory"),
                "{msg}"
            );
        }
        let e = IdentityRoot::resolve_with(given, |_| Err(err(libc::ELOOP))).unwrap_err();
        assert!(matches!(e, RootError::SymlinkLoop { .. }));
        let msg = e.to_string();
        assert!(
            msg.contains("/no/such/store") && msg.contains("loop"),
            "{msg}"
        );
        let e = IdentityRoot::resolve_with(given, |_| Err(err(libc::EIO))).unwrap_err();
        assert!(matches!(e, RootError::Resolve { .. }));
        assert!(e.to_string().contains("/no/such/store"));
        assert_eq!(e.given(), given);
    }

    #[test]
    fn real_missing_root_loop_and_file_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path();
        assert!(matches!(
            IdentityRoot::resolve(&base.join("missing")),
            Err(RootError::Missing { .. })
        ));
        symlink(base.join("l2"), base.join("l1")).unwrap();
        symlink(base.join("l1"), base.join("l2")).unwrap();
        assert!(matches!(
            IdentityRoot::resolve(&base.join("l1")),
            Err(RootError::SymlinkLoop { .. })
        ));
        fs::write(base.join("file"), b"").unwrap();
        let e = IdentityRoot::resolve(&base.join("file")).unwrap_err();
        assert!(matches!(e, RootError::NotADirectory { .. }));
        assert!(e.to_string().contains("not a directory"));
    }

    // ---- Must show 2: the id rules. ----

    #[test]
    fn prefix_rewrites_match_by_body() {
        assert!(ids_match("session_01AbCdEfGh", "cse_01AbCdEfGh"));
        assert!(ids_match("cse_01AbCdEfGh", "session_01AbCdEfGh"));
        // An id without `_` is all body.
        assert_eq!(id_body("01AbCdEfGh"), "01AbCdEfGh");
        assert!(ids_match("01AbCdEfGh", "session_01AbCdEfGh"));
        // The last `_` counts.
        assert_eq!(id_body("a_b_01AbCdEfGh"), "01AbCdEfGh");
        assert!(ids_match("x_y_01AbCdEfGh", "cse_01AbCdEfGh"));
        assert_eq!(id_body("trailing_"), "");
    }

    #[test]
    fn short_bodies_do_not_match() {
        assert!(!ids_match("session_01AbCd", "cse_01AbCd")); // 6 characters
        assert!(!ids_match("session_01AbCdE", "cse_01AbCdE")); // 7
        assert!(ids_match("session_01AbCdEf", "cse_01AbCdEf")); // 8
        assert!(!ids_match("a_", "b_"));
        // Characters, not bytes: four 2-byte characters are 8 bytes but 4
        // characters; eight of them match.
        assert!(!ids_match("a_éééé", "b_éééé"));
        assert!(ids_match("a_éééééééé", "b_éééééééé"));
        // Equal ids always match, however short.
        assert!(ids_match("x", "x"));
        assert!(ids_match("", ""));
    }

    #[test]
    fn case_and_trailing_spaces_matter() {
        assert!(!ids_match("session_01AbCdEfGh", "cse_01abcdefgh"));
        assert!(!ids_match("session_01AbCdEfGh", "cse_01AbCdEfGh "));
        assert!(!ids_match("session_01AbCdEfGh ", "session_01AbCdEfGh"));
        assert!(!ids_match("Session-A", "session-a"));
        // NFC and NFD spellings are different ids.
        assert!(!ids_match("x_caf\u{e9}12345678", "y_cafe\u{301}12345678"));
    }

    #[test]
    fn exact_match_wins_over_body_matches() {
        let c = vec![
            ("session_01AbCdEfGh", 1),
            ("cse_01AbCdEfGh", 2),
            ("other_01AbCdEfGh", 3),
        ];
        assert_eq!(resolve_id("cse_01AbCdEfGh", c.clone()), Ok(2));
        assert_eq!(resolve_id("session_01AbCdEfGh", c), Ok(1));
    }

    #[test]
    fn one_body_match_is_found() {
        let c = vec![("session_01AbCdEfGh", 1), ("session-a", 2)];
        assert_eq!(resolve_id("cse_01AbCdEfGh", c.clone()), Ok(1));
        assert_eq!(resolve_id("01AbCdEfGh", c.clone()), Ok(1));
        assert_eq!(
            resolve_id("cse_01AbCd", c.clone()),
            Err(IdLookupError::NotFound {
                wanted: "cse_01AbCd".into()
            })
        );
        assert!(matches!(
            resolve_id("cse_01abcdefgh", c),
            Err(IdLookupError::NotFound { .. })
        ));
    }

    #[test]
    fn ambiguity_is_reported_with_the_candidates() {
        let c = vec![
            ("session_01AbCdEfGh".to_string(), 1),
            ("agent_01AbCdEfGh".to_string(), 2),
            ("unrelated".to_string(), 3),
        ];
        let e = resolve_id("cse_01AbCdEfGh", c).unwrap_err();
        assert_eq!(
            e,
            IdLookupError::Ambiguous {
                wanted: "cse_01AbCdEfGh".into(),
                candidates: vec!["agent_01AbCdEfGh".into(), "session_01AbCdEfGh".into()],
            }
        );
        let msg = e.to_string();
        assert!(
            msg.contains("\"agent_01AbCdEfGh\"") && msg.contains("\"session_01AbCdEfGh\""),
            "{msg}"
        );
        assert!(msg.contains("ambiguous"));
    }

    #[test]
    fn two_exact_matches_are_a_duplicate_never_a_merge() {
        let c = vec![("dup-id-123456", 1), ("dup-id-123456", 2)];
        assert_eq!(
            resolve_id("dup-id-123456", c),
            Err(IdLookupError::Duplicate {
                wanted: "dup-id-123456".into(),
                count: 2
            })
        );
    }

    #[test]
    fn odd_inputs_do_not_panic() {
        let long = "x_".repeat(10_000) + &"é".repeat(10_000);
        let c = vec![
            ("".to_string(), 0),
            ("_".to_string(), 1),
            ("🚀_🚀🚀🚀🚀🚀🚀🚀🚀".to_string(), 2),
            (long.clone(), 3),
        ];
        assert!(matches!(resolve_id("", c.clone()), Ok(0)));
        assert!(matches!(resolve_id("_", c.clone()), Ok(1)));
        assert!(matches!(
            resolve_id("cse_🚀🚀🚀🚀🚀🚀🚀🚀", c.clone()),
            Ok(2)
        ));
        assert!(matches!(resolve_id(&long, c.clone()), Ok(3)));
        assert!(matches!(
            resolve_id("__", c.clone()),
            Err(IdLookupError::NotFound { .. })
        ));
        assert!(matches!(
            resolve_id("", Vec::<(String, ())>::new()),
            Err(IdLookupError::NotFound { .. })
        ));
    }

    mod props {
        use super::super::*;
        use proptest::prelude::*;

        fn id() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<String>(),
                "[a-z]{0,4}_[0-9A-Za-z]{0,12}",
                "[a-zé🚀_ ]{0,20}",
            ]
        }

        proptest! {
            #[test]
            fn matching_is_reflexive_symmetric_and_never_panics(a in id(), b in id()) {
                prop_assert!(ids_match(&a, &a));
                prop_assert_eq!(ids_match(&a, &b), ids_match(&b, &a));
                let body = id_body(&a);
                prop_assert!(a.ends_with(body));
                prop_assert!(!body.contains('_'));
            }

            #[test]
            fn resolve_returns_only_a_matching_candidate(
                wanted in id(),
                ids in proptest::collection::vec(id(), 0..8),
            ) {
                let candidates: Vec<(String, usize)> =
                    ids.iter().cloned().enumerate().map(|(i, s)| (s, i)).collect();
                match resolve_id(&wanted, candidates) {
                    Ok(i) => {
                        prop_assert!(ids_match(&ids[i], &wanted));
                        // An exact match wins whenever there is one.
                        if ids.contains(&wanted) {
                            prop_assert_eq!(&ids[i], &wanted);
                        }
                    }
                    Err(IdLookupError::NotFound { .. }) => {
                        prop_assert!(ids.iter().all(|s| !ids_match(s, &wanted)));
                    }
                    Err(IdLookupError::Ambiguous { candidates, .. }) => {
                        prop_assert!(!ids.contains(&wanted));
                        prop_assert!(candidates.len() >= 2);
                        prop_assert!(candidates.iter().all(|s| ids_match(s, &wanted)));
                    }
                    Err(IdLookupError::Duplicate { count, .. }) => {
                        prop_assert!(count >= 2);
                        prop_assert_eq!(ids.iter().filter(|s| **s == wanted).count(), count);
                    }
                }
            }

            #[test]
            fn a_prefix_rewrite_finds_the_session(
                prefix in "[a-z]{1,8}",
                other in "[a-z]{1,8}",
                body in "[0-9A-Za-z]{8,26}",
            ) {
                let stored = format!("{prefix}_{body}");
                let asked = format!("{other}_{body}");
                prop_assert_eq!(resolve_id(&asked, vec![(stored, ())]), Ok(()));
            }
        }
    }
}
