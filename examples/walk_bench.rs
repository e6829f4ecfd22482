//! Measures the cold frame-header walk of one transcript (issue 11): the
//! frame index built by the store (`FrameIndex::extend`, chunked reads)
//! against a walk that reads each frame header with its own small read
//! (the walk before chunking), and against `FrameIndex::extend_parallel`
//! (the second half walked speculatively on another thread), each after the file's pages are dropped
//! from the page cache (`posix_fadvise(POSIX_FADV_DONTNEED)`, this file
//! only). Prints read calls and milliseconds, medians of RUNS.
//!
//! ```text
//! cargo run --release --example walk_bench -- FILE [RUNS] [cold|warm]
//! ```

use std::cell::Cell;
use std::fs::File;
use std::io;
use std::os::unix::io::AsRawFd;
use std::process::ExitCode;
use std::time::Instant;

use sessionfs::store::frame::{walk_frame, ReadAt, Step};
use sessionfs::store::index::FrameIndex;

/// A file that counts its read calls.
struct Counted {
    file: File,
    calls: Cell<u64>,
}

impl ReadAt for Counted {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.calls.set(self.calls.get() + 1);
        std::os::unix::fs::FileExt::read_at(&self.file, buf, offset)
    }

    fn read_at_cached(&self, buf: &mut [u8], offset: u64) -> Option<usize> {
        self.calls.set(self.calls.get() + 1);
        self.file.read_at_cached(buf, offset)
    }

    fn will_need(&self, offset: u64, len: u64) {
        self.file.will_need(offset, len);
    }
}

fn drop_pages(file: &File) {
    // SAFETY: a valid descriptor; advice only.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: walk_bench FILE [RUNS]");
        return ExitCode::from(2);
    };
    let runs: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(3);
    // `warm`: keep the page cache (a fresh mount of a file read recently).
    let cold = args.get(2).map(String::as_str) != Some("warm");
    let open = || Counted {
        file: File::open(path).expect("open"),
        calls: Cell::new(0),
    };
    let len = open().file.metadata().expect("stat").len();
    let (mut chunked, mut single, mut parallel) = (Vec::new(), Vec::new(), Vec::new());
    let (mut chunked_calls, mut single_calls, mut frames) = (0, 0, 0);
    for _ in 0..runs {
        let src = open();
        if cold {
            drop_pages(&src.file);
        }
        let t = Instant::now();
        let mut idx = FrameIndex::new();
        let mut decoded = 0;
        idx.extend(&src, len, &mut decoded).expect("walk");
        chunked.push(t.elapsed().as_secs_f64() * 1000.0);
        chunked_calls = src.calls.get();
        frames = idx.frames().len();

        let file = open().file;
        if cold {
            drop_pages(&file);
        }
        let t = Instant::now();
        let mut idx = FrameIndex::new();
        let mut decoded = 0;
        idx.extend_parallel(&file, len, &mut decoded, 0)
            .expect("walk");
        parallel.push(t.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(
            idx.frames().len(),
            frames,
            "the parallel walk found other frames"
        );

        let src = open();
        if cold {
            drop_pages(&src.file);
        }
        let t = Instant::now();
        let mut at = 0;
        while let Ok(Step::Frame(info)) = walk_frame(&src, at, len) {
            at += info.len;
        }
        single.push(t.elapsed().as_secs_f64() * 1000.0);
        single_calls = src.calls.get();
    }
    let (c, s) = (median(chunked), median(single));
    let cache = if cold { "cold" } else { "warm" };
    println!("file\t{path}\t{len} bytes\t{frames} data frames\t{cache} page cache");
    println!("walk with one read per frame header\t{s:.1} ms\t{single_calls} reads");
    println!("walk of the store (chunks when frames are dense, read-ahead hints)\t{c:.1} ms\t{chunked_calls} reads");
    let p = median(parallel);
    println!("the same with a speculative walk of the second half (extend_parallel)\t{p:.1} ms");
    println!("ratio\t{:.1}x", s / c.max(1e-9));
    ExitCode::SUCCESS
}
