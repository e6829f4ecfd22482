//! A byte-capped LRU cache of decoded frames, shared by every transcript of
//! a mount (MOUNT.md, Reading: memory stays bounded whatever the
//! transcript sizes).

use std::sync::Arc;

use lru::LruCache;
use parking_lot::Mutex;

/// Default cap of the decoded-frame cache: 16 MiB.
pub const DEFAULT_CACHE_BYTES: u64 = 16 << 20;

/// Cache key: a transcript generation (unique per opened transcript) and a
/// frame number within it.
pub type FrameKey = (u64, usize);

/// Decoded frames, evicted least-recently-used first once their total
/// size exceeds the cap (bytes).
pub struct FrameCache {
    inner: Mutex<Inner>,
    cap_bytes: u64,
}

struct Inner {
    lru: LruCache<FrameKey, Arc<[u8]>>,
    bytes: u64,
}

impl FrameCache {
    /// A cache holding at most `cap_bytes` of decoded frames (a frame larger
    /// than the cap is returned to its reader but not kept).
    pub fn new(cap_bytes: u64) -> Self {
        FrameCache {
            inner: Mutex::new(Inner {
                lru: LruCache::unbounded(),
                bytes: 0,
            }),
            cap_bytes,
        }
    }

    /// The cached frame, marked most recently used.
    pub fn get(&self, key: &FrameKey) -> Option<Arc<[u8]>> {
        self.inner.lock().lru.get(key).cloned()
    }

    /// Whether the frame is cached (does not change the LRU order).
    pub fn contains(&self, key: &FrameKey) -> bool {
        self.inner.lock().lru.contains(key)
    }

    /// Inserts a decoded frame, evicting old ones to stay under the cap.
    pub fn insert(&self, key: FrameKey, frame: Arc<[u8]>) {
        let size = frame.len() as u64;
        if size > self.cap_bytes {
            return;
        }
        let mut inner = self.inner.lock();
        if let Some(old) = inner.lru.put(key, frame) {
            inner.bytes -= old.len() as u64;
        }
        inner.bytes += size;
        while inner.bytes > self.cap_bytes {
            match inner.lru.pop_lru() {
                Some((_, evicted)) => inner.bytes -= evicted.len() as u64,
                None => break,
            }
        }
    }

    /// Bytes currently held.
    pub fn bytes(&self) -> u64 {
        self.inner.lock().bytes
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
        let cache = FrameCache::new(100);
        for i in 0..10 {
            cache.insert((1, i), Arc::from(vec![0u8; 30]));
            assert!(cache.bytes() <= 100);
        }
        assert!(cache.get(&(1, 9)).is_some());
        assert!(cache.get(&(1, 0)).is_none());
        cache.insert((1, 99), Arc::from(vec![0u8; 101]));
        assert!(cache.get(&(1, 99)).is_none());
    }
}
