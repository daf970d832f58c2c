//! A memo bounded by bytes, not entries: privacy-loss distributions range from a few hundred bytes
//! to tens of megabytes, so a count bound says nothing about memory. Least recently used entries
//! are dropped first; a value larger than the whole capacity is not kept. (Values are usually
//! `Arc`s: a dropped entry still in use stays alive until its users finish, so the bound is on
//! what the cache itself keeps alive.)

use std::collections::HashMap;
use std::hash::Hash;

struct Entry<V> {
    value: V,
    bytes: usize,
    last_used: u64,
}

/// A least-recently-used map whose entries' declared sizes sum to at most `capacity` bytes.
pub struct ByteCache<K, V> {
    capacity: usize,
    used: usize,
    clock: u64,
    map: HashMap<K, Entry<V>>,
}

impl<K: Eq + Hash + Clone, V: Clone> ByteCache<K, V> {
    /// An empty cache holding at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        ByteCache {
            capacity,
            used: 0,
            clock: 0,
            map: HashMap::new(),
        }
    }

    /// The value under `key`, marked as just used.
    pub fn get(&mut self, key: &K) -> Option<V> {
        self.clock += 1;
        let now = self.clock;
        self.map.get_mut(key).map(|e| {
            e.last_used = now;
            e.value.clone()
        })
    }

    /// Keeps `value` (of `bytes` bytes) under `key`, dropping least recently used entries until
    /// it fits; a value larger than the capacity only removes what was under `key`.
    pub fn insert(&mut self, key: K, value: V, bytes: usize) {
        self.remove(&key);
        if bytes > self.capacity {
            return;
        }
        while self.used + bytes > self.capacity {
            let oldest = self
                .map
                .iter()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => self.remove(&k),
                None => break,
            }
        }
        self.clock += 1;
        self.used += bytes;
        self.map.insert(
            key,
            Entry {
                value,
                bytes,
                last_used: self.clock,
            },
        );
    }

    /// Drops the entry under `key`, if any.
    pub fn remove(&mut self, key: &K) {
        if let Some(e) = self.map.remove(key) {
            self.used -= e.bytes;
        }
    }

    /// Bytes held.
    pub fn used(&self) -> usize {
        self.used
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_least_recently_used_go_first_and_the_bytes_never_exceed_the_capacity() {
        let mut c = ByteCache::new(100);
        c.insert("a", 1, 40);
        c.insert("b", 2, 40);
        assert_eq!(c.get(&"a"), Some(1)); // a is now more recent than b
        c.insert("c", 3, 40); // 120 > 100: b goes
        assert_eq!(
            (c.get(&"b"), c.get(&"a"), c.get(&"c")),
            (None, Some(1), Some(3))
        );
        assert_eq!(c.used(), 80);
        c.insert("a", 4, 10); // replacing frees the old size
        assert_eq!((c.used(), c.get(&"a")), (50, Some(4)));
        c.insert("huge", 5, 101); // larger than everything: not kept, nothing evicted
        assert_eq!((c.get(&"huge"), c.len(), c.used()), (None, 2, 50));
        for i in 0..1000 {
            c.insert("x", i, 1 + (i % 60) as usize);
            assert!(c.used() <= 100);
        }
    }
}
