//! A byte-capped LRU cache of decoded frames, shared by every transcript of
//! a mount (MOUNT.md, Reading: memory stays bounded whatever the
//! transcript sizes).

use std::collections::HashSet;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use lru::LruCache;
use parking_lot::{Condvar, Mutex};

/// Default cap of the decoded-frame cache: 8 MiB (issue 11: within the
/// daemon's 64 MiB budget with 20,000 sessions walked; a sequential reader
/// needs a few frames, its read-ahead 16).
pub const DEFAULT_CACHE_BYTES: u64 = 8 << 20;

/// Cache key: a transcript generation (unique per opened transcript) and a
/// frame number within it.
pub type FrameKey = (u64, usize);

/// What one cached frame costs besides its decoded bytes, counted against
/// the cap (bytes): its LRU node and hash slot, its `Arc` and `Vec`
/// headers and the allocator's rounding, about 130 bytes measured. A
/// transcript of millions of one-byte frames (a fresh tester's 8,000,000
/// frames of 10 bytes) otherwise filled an 8 MiB cap with 8 million
/// entries: 1.7 GB.
const ENTRY_OVERHEAD: u64 = 160;

/// The bytes one cached frame of `len` decoded bytes counts for.
fn cost(len: usize) -> u64 {
    len as u64 + ENTRY_OVERHEAD
}

/// Decoded frames, evicted least-recently-used first once their total
/// size exceeds the cap (bytes).
pub struct FrameCache {
    inner: Mutex<Inner>,
    /// Signalled whenever a frame being decoded is done (or failed).
    decoded: Condvar,
    cap_bytes: u64,
    /// Read-ahead worker, started on first use: decodes the frames after a
    /// sequential reader on the other core.
    prefetch: OnceLock<Option<SyncSender<PrefetchTask>>>,
}

/// A read-ahead task: decodes some frames into the cache.
pub type PrefetchTask = Box<dyn FnOnce() + Send>;

/// Read-ahead tasks waiting at most; more are dropped (read-ahead is a hint).
const PREFETCH_QUEUE: usize = 4;

struct Inner {
    lru: LruCache<FrameKey, Arc<Vec<u8>>>,
    bytes: u64,
    /// Frames some thread is decoding now: others wait instead of decoding
    /// them a second time.
    in_flight: HashSet<FrameKey>,
}

impl FrameCache {
    /// A cache holding at most `cap_bytes` of decoded frames (a frame larger
    /// than the cap is returned to its reader but not kept).
    pub fn new(cap_bytes: u64) -> Self {
        FrameCache {
            inner: Mutex::new(Inner {
                lru: LruCache::unbounded(),
                bytes: 0,
                in_flight: HashSet::new(),
            }),
            decoded: Condvar::new(),
            cap_bytes,
            prefetch: OnceLock::new(),
        }
    }

    /// The cached frame, or the result of `decode` (cached on success). If
    /// another thread is decoding the same frame, waits for it rather than
    /// decoding it twice.
    ///
    /// Errors: `decode`'s error.
    pub fn get_or_decode<E>(
        &self,
        key: FrameKey,
        decode: impl FnOnce() -> Result<Vec<u8>, E>,
    ) -> Result<Arc<Vec<u8>>, E> {
        {
            let mut inner = self.inner.lock();
            loop {
                if let Some(frame) = inner.lru.get(&key) {
                    return Ok(Arc::clone(frame));
                }
                if inner.in_flight.insert(key) {
                    break;
                }
                // Bounded wait: a decoder that failed also notifies, and a
                // frame too large to cache is then decoded here.
                let timed_out = self
                    .decoded
                    .wait_for(&mut inner, Duration::from_millis(200))
                    .timed_out();
                if timed_out || !inner.in_flight.contains(&key) {
                    if let Some(frame) = inner.lru.get(&key) {
                        return Ok(Arc::clone(frame));
                    }
                    if inner.in_flight.insert(key) {
                        break;
                    }
                }
            }
        }
        // The marker is removed (and waiters woken) however `decode` ends,
        // an unwinding panic included: no reader waits for it forever.
        let guard = InFlight { cache: self, key };
        let result = decode().map(Arc::new);
        if let Ok(frame) = &result {
            let mut inner = self.inner.lock();
            Self::insert_locked(&mut inner, self.cap_bytes, key, Arc::clone(frame));
        }
        drop(guard);
        result
    }

    /// Runs `task` on the read-ahead worker thread, unless the queue is
    /// full (read-ahead is only a hint) or no thread could be started.
    pub fn prefetch(&self, task: PrefetchTask) {
        if let Some(tx) = self.worker() {
            match tx.try_send(task) {
                Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
            }
        }
    }

    /// Starts the read-ahead worker thread now (a mount does, as it
    /// starts), so that the first read that hands it frames does not wait
    /// for the thread to be made. Later calls do nothing.
    pub fn start_prefetch(&self) {
        self.worker();
    }

    /// The read-ahead worker's queue, the thread started on first use;
    /// `None` when no thread could be started.
    fn worker(&self) -> Option<&SyncSender<PrefetchTask>> {
        self.prefetch
            .get_or_init(|| {
                let (tx, rx) = sync_channel::<PrefetchTask>(PREFETCH_QUEUE);
                let started = std::thread::Builder::new()
                    .name("sessionfs-readahead".into())
                    .spawn(move || {
                        for task in rx {
                            task();
                        }
                    });
                started.ok().map(|_| tx)
            })
            .as_ref()
    }

    /// The cap of the decoded bytes held (bytes).
    pub fn cap_bytes(&self) -> u64 {
        self.cap_bytes
    }

    /// The cached frame, marked most recently used.
    pub fn get(&self, key: &FrameKey) -> Option<Arc<Vec<u8>>> {
        self.inner.lock().lru.get(key).cloned()
    }

    /// Whether the frame is cached (does not change the LRU order).
    pub fn contains(&self, key: &FrameKey) -> bool {
        self.inner.lock().lru.contains(key)
    }

    /// Inserts a decoded frame, evicting old ones to stay under the cap.
    pub fn insert(&self, key: FrameKey, frame: Arc<Vec<u8>>) {
        let mut inner = self.inner.lock();
        Self::insert_locked(&mut inner, self.cap_bytes, key, frame);
    }

    fn insert_locked(inner: &mut Inner, cap_bytes: u64, key: FrameKey, frame: Arc<Vec<u8>>) {
        let size = cost(frame.len());
        if size > cap_bytes {
            return;
        }
        if let Some(old) = inner.lru.put(key, frame) {
            inner.bytes -= cost(old.len());
        }
        inner.bytes += size;
        while inner.bytes > cap_bytes {
            match inner.lru.pop_lru() {
                Some((_, evicted)) => inner.bytes -= cost(evicted.len()),
                None => break,
            }
        }
    }

    /// Bytes currently held: decoded bytes plus each frame's overhead.
    pub fn bytes(&self) -> u64 {
        self.inner.lock().bytes
    }
}

/// The in-flight marker of one frame being decoded: dropping it removes
/// the marker and wakes the readers waiting for that frame.
struct InFlight<'a> {
    cache: &'a FrameCache,
    key: FrameKey,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.cache.inner.lock().in_flight.remove(&self.key);
        self.cache.decoded.notify_all();
    }
}

impl Default for FrameCache {
    fn default() -> Self {
        Self::new(DEFAULT_CACHE_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stays_under_its_cap() {
        let cap = 5 * cost(30);
        let cache = FrameCache::new(cap);
        for i in 0..10 {
            cache.insert((1, i), Arc::new(vec![0u8; 30]));
            assert!(cache.bytes() <= cap);
        }
        assert!(cache.get(&(1, 9)).is_some());
        assert!(cache.get(&(1, 0)).is_none());
        cache.insert((1, 99), Arc::new(vec![0u8; cap as usize]));
        assert!(
            cache.get(&(1, 99)).is_none(),
            "larger than the cap with its overhead"
        );
    }

    #[test]
    fn tiny_frames_count_their_overhead() {
        let cache = FrameCache::new(1 << 20);
        for i in 0..100_000 {
            cache.insert((1, i), Arc::new(vec![b'\n']));
        }
        let held = (0..100_000).filter(|i| cache.contains(&(1, *i))).count();
        assert!(
            held as u64 <= (1 << 20) / ENTRY_OVERHEAD,
            "{held} one-byte frames held"
        );
        assert!(held > 1000, "{held}");
    }

    #[test]
    fn a_decode_that_unwinds_does_not_leave_readers_waiting() {
        let cache = Arc::new(FrameCache::new(1 << 20));
        let key = (7, 3);
        let panicking = {
            let cache = Arc::clone(&cache);
            std::thread::spawn(move || {
                let _ = cache.get_or_decode::<()>(key, || panic!("decoder unwinds"));
            })
        };
        assert!(panicking.join().is_err(), "the decoder did not panic");
        assert!(!cache.inner.lock().in_flight.contains(&key));
        // A later reader decodes the frame itself instead of waiting for
        // the marker of the decode that unwound (it would wait forever).
        let (tx, rx) = std::sync::mpsc::channel();
        {
            let cache = Arc::clone(&cache);
            std::thread::spawn(move || {
                let r = cache.get_or_decode::<()>(key, || Ok(vec![1, 2, 3]));
                let _ = tx.send(r.map(|v| v.to_vec()));
            });
        }
        let r = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("a reader of the frame still waits after 10 s");
        assert_eq!(r, Ok(vec![1, 2, 3]));
    }
}
