//! Transcripts that grow on disk while mounted, through a real mount of a
//! copy of `../shared/corpus/normal/root`:
//!
//! * `tail -f -s 0.25` of the view prints every appended line exactly once,
//!   in order, within 3 s of its frame being written;
//! * a descriptor opened before the growth sees it without reopening: its
//!   `fstat` size grows within ~2 s, and `pread` past the old end returns
//!   the new bytes, never zeros or short data;
//! * `mmap` (shared and private, from Rust and from Python) equals `read`;
//! * a torn last frame on disk is invisible through the mount (size and
//!   content, fresh and open descriptors) until its remaining bytes are
//!   appended, and then shows within 3 s;
//! * a rewrite in place with its mtime put back is read as it is now;
//! * a byte flipped in a frame the mount already read makes reads of the
//!   view fail with EIO within 3 s, and `session.md` stop at the damage;
//! * the daemon logs no panic, is still running at the end, and exits
//!   cleanly on SIGTERM.
//!
//! Every wait has a deadline; child processes are killed and reaped by a
//! guard, and the mount is stopped by the harness on every path.
//!
//! Sources: ../shared/spec/MOUNT.md ("Attributes", "Reading", "Details"),
//! ../shared/notes/FUSE-NOTES.md §4.

mod common;

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use sessionfs::store::frame::encode_frame;

use common::{copy_tree, corpus_dir, run_ok, sha256_hex, zstd_dc, Mount};

/// The session the growth tests append to.
const SESSION: &str = "--home-alice-work-app--/Session-A";
/// How long an appended line may take to show (README, What the mount
/// shows: within the attribute timeout, default 1 s, with margin).
const SHOW_WITHIN: Duration = Duration::from_secs(3);
/// How long an open descriptor's `fstat` may take to show growth (the
/// attribute timeout is 1 s by default; polling adds a little).
const FSTAT_WITHIN: Duration = Duration::from_millis(2500);
/// Longer than the default attribute timeout: a torn frame must stay
/// invisible past it.
const PAST_ATTR_TIMEOUT: Duration = Duration::from_millis(1500);

/// A copy of the normal corpus root, mounted.
struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    mount: Mount,
}

impl Fixture {
    fn new() -> Fixture {
        let tmp = tempfile::Builder::new()
            .prefix("sessionfs-growth-")
            .tempdir()
            .unwrap();
        let root = tmp.path().join("root");
        copy_tree(&corpus_dir().join("normal").join("root"), &root);
        let mount = Mount::start(&root, &[]);
        Fixture {
            _tmp: tmp,
            root,
            mount,
        }
    }

    /// The backing `session.jsonl.zstd` of `SESSION`.
    fn backing(&self) -> PathBuf {
        self.root.join(SESSION).join("session.jsonl.zstd")
    }

    /// The view `session.jsonl` of `SESSION` in the mount.
    fn view(&self) -> PathBuf {
        self.mount.join(SESSION).join("session.jsonl")
    }

    /// Checks the daemon is alive and logged no panic, then stops it (a
    /// clean exit, no mount left behind).
    fn finish(self) {
        let Fixture {
            _tmp, mut mount, ..
        } = self;
        mount.assert_alive();
        let log = mount.stop();
        assert!(
            !log.to_lowercase().contains("panic"),
            "the daemon's log mentions a panic:\n{log}"
        );
        drop(_tmp);
    }
}

/// Kills and reaps a child process on drop, whatever happened.
struct ChildGuard(Option<Child>);

impl ChildGuard {
    fn stop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The `seq` of the last event in a transcript's plaintext (a packed chunk
/// row counts as its members, FORMAT.md "Event lines").
fn last_seq(plain: &[u8]) -> u64 {
    let text = std::str::from_utf8(plain).unwrap();
    let last = text.lines().last().expect("an empty transcript");
    let v: Value = serde_json::from_str(last).unwrap();
    if let Some(seq) = v.get("seq").and_then(Value::as_u64) {
        return seq;
    }
    let seq0 = v["seq0"]
        .as_u64()
        .expect("a last line with neither seq nor seq0");
    let n = v["data"]["texts"]
        .as_array()
        .or(v["data"]["args"].as_array())
        .map_or(1, Vec::len) as u64;
    seq0 + n - 1
}

/// The next `seq` of the backing transcript, from `zstd -dc`.
fn next_seq(backing: &Path) -> u64 {
    let plain = zstd_dc(backing);
    assert!(
        plain.ends_with(b"\n"),
        "{} does not end a line",
        backing.display()
    );
    last_seq(&plain) + 1
}

/// `n` event lines continuing at `*seq`, tagged with `batch`.
fn batch(seq: &mut u64, n: usize, batch: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            let s = *seq;
            *seq += 1;
            format!(
                "{{\"type\":\"test/growth\",\"seq\":{s},\"time\":{},\"data\":{{\"batch\":{batch},\
                 \"line\":{i},\"text\":\"appended on disk while mounted\"}}}}\n",
                1_767_700_000_000u64 + s
            )
            .into_bytes()
        })
        .collect()
}

/// Appends `frames` (already encoded) to the backing file in one write.
fn append(backing: &Path, bytes: &[u8]) {
    let mut f = OpenOptions::new().append(true).open(backing).unwrap();
    f.write_all(bytes).unwrap();
}

/// Appends the lines as one checksummed, sized frame (as the reference
/// writes); returns their plaintext.
fn append_frame(backing: &Path, lines: &[Vec<u8>]) -> Vec<u8> {
    let plain = lines.concat();
    append(backing, &encode_frame(&plain).unwrap());
    plain
}

fn stat_len(path: &Path) -> u64 {
    fs::metadata(path)
        .unwrap_or_else(|e| panic!("stat {}: {e}", path.display()))
        .len()
}

/// Polls `f` every 20 ms until it returns `Some`, or panics with `what`
/// after `timeout`.
fn wait_for<T>(timeout: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?}: {what}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Spawns a thread that sends every line `tail` prints, with the time it
/// arrived.
fn line_reader(child: &mut Child) -> (Receiver<(Vec<u8>, Instant)>, thread::JoinHandle<()>) {
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        loop {
            let mut line = Vec::new();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if tx.send((line, Instant::now())).is_err() {
                        return;
                    }
                }
            }
        }
    });
    (rx, handle)
}

/// Receives one line before `deadline`; panics with `what` otherwise.
fn recv_line(
    rx: &Receiver<(Vec<u8>, Instant)>,
    deadline: Instant,
    what: &str,
) -> (Vec<u8>, Instant) {
    let left = deadline.saturating_duration_since(Instant::now());
    match rx.recv_timeout(left) {
        Ok(v) => v,
        Err(RecvTimeoutError::Timeout) => panic!("tail printed nothing in time: {what}"),
        Err(RecvTimeoutError::Disconnected) => panic!("tail exited: {what}"),
    }
}

// ---------------------------------------------------------------------------
// 1. tail -f follows growth made on disk.
// ---------------------------------------------------------------------------

#[test]
fn tail_f_follows_a_transcript_appended_on_disk() {
    let fx = Fixture::new();
    let backing = fx.backing();
    let view = fx.view();
    let initial = fs::read(&view).unwrap();
    assert_eq!(initial, zstd_dc(&backing), "the view differs from zstd -dc");
    let mut seq = next_seq(&backing);

    let stderr = fx._tmp.path().join("tail.stderr");
    let mut tail = ChildGuard(Some(
        Command::new("tail")
            .args(["-n", "+1", "-f", "-s", "0.25"])
            .arg(&view)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(File::create(&stderr).unwrap())
            .spawn()
            .expect("spawn tail"),
    ));
    let (rx, reader) = line_reader(tail.0.as_mut().unwrap());

    // The existing lines first, each once.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    while seen.len() < initial.len() {
        seen.extend(recv_line(&rx, deadline, "the existing lines").0);
    }
    assert!(
        seen == initial,
        "tail printed other than the existing lines"
    );

    // Batches of one to three lines, one frame each, at gaps shorter and
    // longer than the attribute timeout, and a burst of frames written
    // back to back.
    let gaps_ms = [0u64, 100, 400, 1200, 0, 250, 1500, 50];
    let mut worst = Duration::ZERO;
    let mut appended = 0;
    for (k, gap) in gaps_ms.iter().enumerate() {
        let frames: Vec<Vec<Vec<u8>>> = if k == 4 {
            (0..3).map(|j| batch(&mut seq, j + 1, 100 + j)).collect()
        } else {
            vec![batch(&mut seq, k % 3 + 1, k)]
        };
        let written = Instant::now();
        for lines in &frames {
            append_frame(&backing, lines);
        }
        let deadline = written + SHOW_WITHIN;
        for lines in &frames {
            for want in lines {
                let what = format!("batch {k}, line {}", String::from_utf8_lossy(want));
                let (got, at) = recv_line(&rx, deadline, &what);
                assert_eq!(
                    String::from_utf8_lossy(&got),
                    String::from_utf8_lossy(want),
                    "tail printed lines out of order, twice or changed"
                );
                worst = worst.max(at - written);
                appended += 1;
            }
        }
        thread::sleep(Duration::from_millis(*gap));
    }
    // Nothing more: every line exactly once.
    thread::sleep(Duration::from_millis(1500));
    let extra: Vec<String> = rx
        .try_iter()
        .map(|(l, _)| String::from_utf8_lossy(&l).into_owned())
        .collect();
    assert!(extra.is_empty(), "tail printed more lines: {extra:?}");
    eprintln!("tail -f: {appended} appended lines, slowest shown after {worst:?}");

    tail.stop();
    reader.join().unwrap();
    let tail_err = fs::read_to_string(&stderr).unwrap_or_default();
    assert!(
        !tail_err.contains("truncated"),
        "tail saw the file shrink: {tail_err}"
    );
    assert_eq!(fs::read(&view).unwrap(), zstd_dc(&backing));
    fx.finish();
}

// ---------------------------------------------------------------------------
// 2. A descriptor opened before the growth sees it.
// ---------------------------------------------------------------------------

/// Polls the open descriptor until its `fstat` size and a `pread` at
/// `old_len` show all of `new` (appended as frames ending at `boundaries`,
/// relative to `old_len`). Every `pread` must return a prefix of `new` that
/// ends at a frame boundary: never zeros, never other bytes, never a piece
/// of a frame. Returns how long it took.
fn wait_open_fd_sees(f: &File, old_len: u64, new: &[u8], boundaries: &[usize]) -> Duration {
    let start = Instant::now();
    let mut buf = vec![0u8; new.len() + 4096];
    wait_for(FSTAT_WITHIN, "an open descriptor to see the growth", || {
        let size = f.metadata().unwrap().len();
        assert!(
            boundaries.iter().any(|&b| old_len + b as u64 == size),
            "fstat size {size} is not the old size {old_len} plus whole frames {boundaries:?}"
        );
        let n = f.read_at(&mut buf, old_len).unwrap();
        assert!(
            buf[..n] == new[..n],
            "pread past the old end returned other bytes than appended (zeros: {})",
            buf[..n].iter().filter(|&&b| b == 0).count()
        );
        assert!(
            boundaries.contains(&n),
            "pread past the old end returned {n} bytes, not a whole number of frames \
             {boundaries:?}"
        );
        // Once the size is known, a read returns all of it.
        if size == old_len + new.len() as u64 {
            assert_eq!(n, new.len(), "short pread after fstat showed the new size");
        }
        (n == new.len() && size == old_len + new.len() as u64).then_some(())
    });
    start.elapsed()
}

#[test]
fn an_open_descriptor_sees_growth_without_reopening() {
    let fx = Fixture::new();
    let backing = fx.backing();
    let view = fx.view();
    let mut seq = next_seq(&backing);

    let f = File::open(&view).unwrap();
    let mut expected = zstd_dc(&backing);
    let old_len = f.metadata().unwrap().len();
    assert_eq!(old_len, expected.len() as u64);
    let mut buf = vec![0u8; expected.len() + 100];
    let n = f.read_at(&mut buf, 0).unwrap();
    assert!(buf[..n] == expected[..], "the view differs from zstd -dc");

    for round in 0..3 {
        // Two frames in one write.
        let a = batch(&mut seq, 2 + round, 10 * round).concat();
        let b = batch(&mut seq, 1, 10 * round + 1).concat();
        let mut bytes = encode_frame(&a).unwrap();
        bytes.extend(encode_frame(&b).unwrap());
        let old_len = expected.len() as u64;
        append(&backing, &bytes);
        let new = [a.as_slice(), b.as_slice()].concat();
        let took = wait_open_fd_sees(&f, old_len, &new, &[0, a.len(), new.len()]);
        eprintln!("round {round}: the open descriptor saw the growth after {took:?}");
        expected.extend_from_slice(&new);

        // Reads straddling the old end, and all of it, through the old fd.
        let mut buf = vec![0u8; 300];
        let n = f.read_at(&mut buf, old_len - 100).unwrap();
        assert_eq!(n, 300.min(100 + new.len()));
        assert!(buf[..n] == expected[old_len as usize - 100..old_len as usize - 100 + n]);
        let mut all = vec![0u8; expected.len() + 100];
        let n = f.read_at(&mut all, 0).unwrap();
        assert!(
            all[..n] == expected[..],
            "round {round}: whole read differs"
        );
        assert_eq!(expected, zstd_dc(&backing));
    }
    // A fresh open agrees.
    assert_eq!(fs::read(&view).unwrap(), expected);
    drop(f);
    fx.finish();
}

// ---------------------------------------------------------------------------
// 3. mmap equals read.
// ---------------------------------------------------------------------------

/// The bytes of `f` through `mmap(len, prot, flags)`.
fn mmap_bytes(f: &File, len: usize, prot: libc::c_int, flags: libc::c_int) -> Vec<u8> {
    // SAFETY: a fresh mapping of `len` bytes of an open file, copied out and
    // unmapped before returning; nothing else refers to it.
    unsafe {
        let p = libc::mmap(std::ptr::null_mut(), len, prot, flags, f.as_raw_fd(), 0);
        assert!(
            p != libc::MAP_FAILED,
            "mmap failed: {}",
            std::io::Error::last_os_error()
        );
        let out = std::slice::from_raw_parts(p as *const u8, len).to_vec();
        libc::munmap(p, len);
        out
    }
}

/// Every transcript view of the mounted root.
fn all_views(fx: &Fixture) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for project in fs::read_dir(&fx.root).unwrap() {
        let project = project.unwrap();
        if !project.file_type().unwrap().is_dir() {
            continue;
        }
        for session in fs::read_dir(project.path()).unwrap() {
            let session = session.unwrap();
            if session.path().join("session.jsonl.zstd").is_file() {
                out.push(
                    fx.mount
                        .join(project.file_name())
                        .join(session.file_name())
                        .join("session.jsonl"),
                );
            }
        }
    }
    out.sort();
    out
}

const PY_MMAP: &str = r#"
import hashlib, mmap, sys
for p in sys.argv[1:]:
    with open(p, "rb") as f:
        shared = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        a = hashlib.sha256(shared[:]).hexdigest()
        shared.close()
        private = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        b = hashlib.sha256(private[:]).hexdigest()
        private.close()
    print(a, b)
"#;

fn check_mmap_equals_read(views: &[PathBuf]) {
    for view in views {
        let read = fs::read(view).unwrap();
        assert!(!read.is_empty(), "{}: empty", view.display());
        let f = File::open(view).unwrap();
        let len = f.metadata().unwrap().len() as usize;
        assert_eq!(len, read.len(), "{}: size", view.display());
        let shared = mmap_bytes(&f, len, libc::PROT_READ, libc::MAP_SHARED);
        assert!(shared == read, "{}: MAP_SHARED differs", view.display());
        let private = mmap_bytes(
            &f,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE,
        );
        assert!(private == read, "{}: MAP_PRIVATE differs", view.display());
    }
    let out = run_ok(
        "python3",
        std::iter::once("-c".as_ref())
            .chain(std::iter::once(PY_MMAP.as_ref()))
            .chain(views.iter().map(|v| v.as_os_str())),
        None,
    );
    let out = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), views.len());
    for (view, line) in views.iter().zip(lines) {
        let want = sha256_hex(&fs::read(view).unwrap());
        assert_eq!(
            line,
            format!("{want} {want}"),
            "{}: Python mmap ACCESS_READ / ACCESS_COPY differ from read",
            view.display()
        );
    }
}

#[test]
fn mmap_reads_equal_read() {
    let fx = Fixture::new();
    let views = all_views(&fx);
    assert!(
        views.len() >= 20,
        "the corpus has fewer transcripts than expected"
    );
    check_mmap_equals_read(&views);

    // After growth on disk too.
    let backing = fx.backing();
    let view = fx.view();
    let old_len = stat_len(&view);
    let mut seq = next_seq(&backing);
    let plain = append_frame(&backing, &batch(&mut seq, 40, 0));
    wait_for(SHOW_WITHIN, "the view to show the growth", || {
        (stat_len(&view) == old_len + plain.len() as u64).then_some(())
    });
    assert_eq!(fs::read(&view).unwrap(), zstd_dc(&backing));
    check_mmap_equals_read(std::slice::from_ref(&view));
    fx.finish();
}

// ---------------------------------------------------------------------------
// 4. A torn last frame is invisible through the mount.
// ---------------------------------------------------------------------------

/// For longer than the attribute timeout: `stat` shows `len`, a fresh read
/// shows `content`, and the open descriptor reads nothing past `len`.
fn stays_invisible(view: &Path, f: &File, content: &[u8], what: &str) {
    let len = content.len() as u64;
    let until = Instant::now() + PAST_ATTR_TIMEOUT;
    let mut buf = vec![0u8; 64 * 1024];
    while Instant::now() < until {
        assert_eq!(stat_len(view), len, "{what}: stat shows a torn frame");
        assert_eq!(
            f.metadata().unwrap().len(),
            len,
            "{what}: fstat shows a torn frame"
        );
        assert_eq!(
            f.read_at(&mut buf, len).unwrap(),
            0,
            "{what}: pread past the end returned bytes of a torn frame"
        );
        thread::sleep(Duration::from_millis(100));
    }
    assert!(
        fs::read(view).unwrap() == content,
        "{what}: a fresh read shows other bytes"
    );
}

#[test]
fn a_torn_last_frame_is_invisible_through_the_mount_until_completed() {
    let fx = Fixture::new();
    let backing = fx.backing();
    let view = fx.view();
    let content = fs::read(&view).unwrap();
    let mut seq = next_seq(&backing);
    let f = File::open(&view).unwrap();

    let plain = batch(&mut seq, 60, 0).concat();
    let frame = encode_frame(&plain).unwrap();
    assert!(frame.len() > 40);
    // Grow the torn frame in steps: magic only, half, all but 10 bytes.
    let mut written = 0;
    for cut in [4, frame.len() / 2, frame.len() - 10] {
        append(&backing, &frame[written..cut]);
        written = cut;
        stays_invisible(
            &view,
            &f,
            &content,
            &format!("cut at {cut} of {}", frame.len()),
        );
    }
    // Completed: shows within 3 s, through a fresh open and the old fd.
    append(&backing, &frame[written..]);
    let full_len = (content.len() + plain.len()) as u64;
    let start = Instant::now();
    wait_for(SHOW_WITHIN, "the completed frame to show", || {
        (stat_len(&view) == full_len).then_some(())
    });
    eprintln!("the completed frame showed after {:?}", start.elapsed());
    let mut expected = content.clone();
    expected.extend_from_slice(&plain);
    assert!(
        fs::read(&view).unwrap() == expected,
        "completed content differs"
    );
    wait_for(
        SHOW_WITHIN,
        "the open descriptor to see the completed frame",
        || (f.metadata().unwrap().len() == full_len).then_some(()),
    );
    let mut buf = vec![0u8; plain.len() + 100];
    let n = f.read_at(&mut buf, content.len() as u64).unwrap();
    assert!(
        buf[..n] == plain[..],
        "the old descriptor reads other bytes"
    );
    assert_eq!(expected, zstd_dc(&backing));
    drop(f);
    fx.finish();
}

// ---------------------------------------------------------------------------
// 5. Damage in place to frames the mount already read.
// ---------------------------------------------------------------------------

/// A byte of a frame the mount already decoded flipped on disk (the same
/// length, the same inode): within the attribute timeout reads of the
/// view fail with EIO and `session.md` says where rendering stopped, as a
/// fresh mount of the damaged file does; cached bytes are not served on
/// (helper 28: the mount went on serving the original transcript).
#[test]
fn a_frame_damaged_in_place_after_it_was_read_fails_reads() {
    let fx = Fixture::new();
    let backing = fx.backing();
    let view = fx.view();
    let md = view.with_file_name("session.md");
    assert_eq!(fs::read(&view).unwrap(), zstd_dc(&backing));
    let rendered = fs::read_to_string(&md).unwrap();
    assert!(!rendered.contains("Rendering stopped"), "{rendered}");

    // Byte 200: inside the first event frame (the header frame is 117
    // bytes), past its frame header.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&backing)
        .unwrap();
    let mut byte = [0u8];
    f.read_exact_at(&mut byte, 200).unwrap();
    f.write_all_at(&[byte[0] ^ 0xff], 200).unwrap();
    drop(f);
    let zstd = Command::new("zstd")
        .args(["-tq", "--"])
        .arg(&backing)
        .status()
        .unwrap();
    assert!(!zstd.success(), "zstd -t finds the flipped file intact");

    let failed = wait_for(SHOW_WITHIN, "a read of the damaged view to fail", || {
        fs::read(&view).err()
    });
    assert_eq!(failed.raw_os_error(), Some(libc::EIO), "{failed}");
    wait_for(SHOW_WITHIN, "session.md to stop at the damage", || {
        fs::read_to_string(&md)
            .ok()
            .filter(|s| s.contains("**Rendering stopped**"))
    });
    fx.finish();
}

/// A transcript rewritten in place to the same decoded length with its
/// mtime put back (`touch -d`): the size and mtime the mount reports do not
/// change, so the kernel's own check keeps its cached pages; the mount
/// drops them when it rebuilds the view, and within the attribute timeout
/// a plain read returns the bytes on disk (helper 30: `cat` served the old
/// bytes for good, `dd iflag=direct` the new ones).
#[test]
fn a_rewrite_with_its_mtime_put_back_is_read_as_it_is_now() {
    let fx = Fixture::new();
    let backing = fx.backing();
    let view = fx.view();
    let old = fs::read(&view).unwrap();
    assert_eq!(old, zstd_dc(&backing));
    let mtime = fs::metadata(&backing).unwrap().modified().unwrap();
    // One letter of the last line changed: the same decoded length.
    let mut new = old.clone();
    let at = new[..new.len() - 1]
        .iter()
        .rposition(|b| b.is_ascii_lowercase())
        .unwrap();
    new[at] = if new[at] == b'a' { b'b' } else { b'a' };
    let header_end = new.iter().position(|&b| b == b'\n').unwrap() + 1;
    let mut bytes = encode_frame(&new[..header_end]).unwrap();
    bytes.extend(encode_frame(&new[header_end..]).unwrap());
    thread::sleep(Duration::from_millis(50));
    let f = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&backing)
        .unwrap();
    (&f).write_all(&bytes).unwrap();
    f.set_modified(mtime).unwrap();
    drop(f);
    assert_eq!(zstd_dc(&backing), new);
    wait_for(SHOW_WITHIN, "a plain read to show the rewrite", || {
        (fs::read(&view).unwrap() == new).then_some(())
    });
    fx.finish();
}
