//! A bounded, lock-free cache of tenant → shard in front of the assignment,
//! so that a hot tenant does not pay SHA-256 on every check.

use std::fmt;
use std::hash::BuildHasher;

use crate::sync::{AtomicU64, Ordering, fence};

use super::{Assignment, MAX_PER_TENANT, Shard};

/// The most tenants the cache may hold.
pub(crate) const MAX_CACHE_ENTRIES: usize = 1 << 24;

/// Entries per set: with its version, a set fills two cache lines exactly.
const WAYS: usize = 5;

/// One set of a [`ShardCache`]: a sequence lock over five entries, each a
/// 64-bit tenant fingerprint (zero when empty) and a packed shard.
///
/// Everything is an atomic, so readers never write: they read the version,
/// the entries, and the version again, and trust what they read only if the
/// version was even and unchanged. A writer makes the version odd while it
/// writes, and simply skips caching if another writer holds the set.
#[repr(align(128))]
struct Set {
    version: AtomicU64,
    /// `[fingerprint, shard low, shard high]` per way.
    ways: [[AtomicU64; 3]; WAYS],
}

// Two cache lines exactly: one miss (and its adjacent-line prefetch) per lookup.
#[cfg(not(shuffle_limiter_loom))]
const _: () = assert!(std::mem::size_of::<Set>() == 128);

/// A fixed-size, set-associative cache of tenant → shard, allocated once.
///
/// A tenant is known by a 64-bit fingerprint from a hasher seeded at random
/// for each cache, independent of the hash that picks its set. A false hit
/// needs two tenants in one set with equal fingerprints: about 5 in 2⁶⁴ per
/// lookup, no likelier than two tenants sharing a 64-bit seed, which the
/// assignment itself accepts, and not something a tenant can aim for without
/// the random seeds. Memory is fixed at build time and never grows with the
/// number of distinct tenants.
pub(crate) struct ShardCache {
    sets: Box<[Set]>,
    hashers: [foldhash::fast::RandomState; 2],
}

impl ShardCache {
    /// A cache of at least `entries` tenants (rounded up to a power of two
    /// sets of five), or none for 0.
    pub(crate) fn new(entries: usize) -> Self {
        ShardCache {
            sets: (0..Self::sets_for(entries))
                .map(|_| Set {
                    version: AtomicU64::new(0),
                    ways: std::array::from_fn(|_| std::array::from_fn(|_| AtomicU64::new(0))),
                })
                .collect(),
            hashers: Default::default(),
        }
    }

    /// Sets for at least `entries` tenants: a power of two, or none for 0.
    /// (Apart from `new`, which cargo-mutants leaves alone.)
    fn sets_for(entries: usize) -> usize {
        if entries == 0 {
            0
        } else {
            entries.div_ceil(WAYS).next_power_of_two()
        }
    }

    /// Entries the cache can hold.
    pub(crate) fn capacity(&self) -> usize {
        self.sets.len() * WAYS
    }

    /// The cached shard of `key`, computing and caching it on a miss.
    #[inline]
    pub(crate) fn get_or_assign(&self, key: &[u8], assignment: &Assignment) -> Shard {
        if self.sets.is_empty() {
            return assignment.shard(key);
        }
        let set = &self.sets[self.hashers[0].hash_one(key) as usize & (self.sets.len() - 1)];
        // Never zero, so an empty way never matches.
        let fingerprint = self.hashers[1].hash_one(key) | 1;
        if let Some(packed) = set.find(fingerprint) {
            return unpack(packed, assignment.per_tenant);
        }
        let shard = assignment.shard(key);
        set.insert(fingerprint, pack(&shard));
        shard
    }
}

impl Set {
    #[inline]
    fn find(&self, fingerprint: u64) -> Option<[u64; 2]> {
        let before = self.version.load(Ordering::Acquire);
        if before & 1 == 1 {
            return None; // being written: treat as a miss
        }
        let mut found = None;
        for way in &self.ways {
            if way[0].load(Ordering::Relaxed) == fingerprint {
                found = Some([
                    way[1].load(Ordering::Relaxed),
                    way[2].load(Ordering::Relaxed),
                ]);
                break;
            }
        }
        fence(Ordering::Acquire);
        (self.version.load(Ordering::Relaxed) == before)
            .then_some(found)
            .flatten()
    }

    fn insert(&self, fingerprint: u64, packed: [u64; 2]) {
        let version = self.version.load(Ordering::Relaxed);
        if version & 1 == 1
            || self
                .version
                .compare_exchange(version, version + 1, Ordering::Acquire, Ordering::Relaxed)
                .is_err()
        {
            return; // another thread is writing this set; caching can wait
        }
        fence(Ordering::Release);
        // Round robin over the ways, by the number of writes so far.
        let way = &self.ways[(version / 2) as usize % WAYS];
        for (word, value) in way.iter().zip([fingerprint, packed[0], packed[1]]) {
            word.store(value, Ordering::Relaxed);
        }
        self.version.store(version + 2, Ordering::Release);
    }
}

/// Bucket indices are below 2¹⁶, so a shard of up to 8 packs into 128 bits.
fn pack(shard: &Shard) -> [u64; 2] {
    let mut words = [0u64; 2];
    for (i, &b) in shard.buckets().iter().enumerate() {
        words[i / 4] |= u64::from(b) << (16 * (i % 4));
    }
    words
}

fn unpack(words: [u64; 2], k: u32) -> Shard {
    let mut shard = Shard {
        len: k as u8,
        buckets: [0; MAX_PER_TENANT as usize],
    };
    for (i, b) in shard.buckets.iter_mut().enumerate().take(k as usize) {
        *b = (words[i / 4] >> (16 * (i % 4))) as u32 & 0xFFFF;
    }
    shard
}

impl fmt::Debug for ShardCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardCache")
            .field("capacity", &self.capacity())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assign::MAX_BUCKETS;

    #[test]
    fn the_cache_returns_exactly_what_the_assignment_computes() {
        let a = Assignment::new(MAX_BUCKETS, 8, b"salt").unwrap();
        let cache = ShardCache::new(8);
        assert_eq!(cache.capacity(), 10); // 2 sets of 5
        for round in 0..3 {
            for t in 0..100u32 {
                let key = format!("tenant-{t}");
                let cached = cache.get_or_assign(key.as_bytes(), &a);
                assert_eq!(cached, a.shard(&key), "{round}");
            }
        }
        let long = vec![7u8; 1 << 20];
        assert_eq!(cache.get_or_assign(&long, &a), a.shard(&long));
        assert_eq!(cache.get_or_assign(&long, &a), a.shard(&long));
        assert_eq!(ShardCache::new(0).get_or_assign(b"x", &a), a.shard(b"x"));
    }

    /// Keys whose shards differ under the two assignments, so that a lookup
    /// under `b` that returns the shard under `a` must have hit the cache.
    fn keys_told_apart(a: &Assignment, b: &Assignment, count: usize) -> Vec<[u8; 4]> {
        (0..1_000u32)
            .map(u32::to_le_bytes)
            .filter(|key| a.shard(key) != b.shard(key))
            .take(count)
            .collect()
    }

    #[test]
    fn a_second_lookup_hits_the_cache() {
        let (a, b) = (
            Assignment::new(64, 4, b"a").unwrap(),
            Assignment::new(64, 4, b"b").unwrap(),
        );
        let cache = ShardCache::new(1_000);
        let keys = keys_told_apart(&a, &b, 100);
        for key in &keys {
            assert_eq!(cache.get_or_assign(key, &a), a.shard(key)); // a miss
        }
        let hits = keys
            .iter()
            .filter(|key| cache.get_or_assign(&key[..], &b) == a.shard(key))
            .count();
        // 100 tenants in 256 sets of 5: only a set of six or more evicts one.
        assert!(hits >= 95, "{hits} of 100 hit");
    }

    #[test]
    fn a_full_set_keeps_all_five_entries_and_evicts_the_oldest() {
        let (a, b) = (
            Assignment::new(64, 4, b"a").unwrap(),
            Assignment::new(64, 4, b"b").unwrap(),
        );
        let cache = ShardCache::new(5); // one set
        let keys = keys_told_apart(&a, &b, 6);
        for key in &keys[..5] {
            cache.get_or_assign(key, &a);
        }
        for key in &keys[..5] {
            assert_eq!(cache.get_or_assign(key, &b), a.shard(key), "kept");
        }
        // A sixth tenant takes the place of the first, the oldest.
        cache.get_or_assign(&keys[5], &a);
        for key in &keys[1..6] {
            assert_eq!(cache.get_or_assign(key, &b), a.shard(key), "kept");
        }
        assert_eq!(cache.get_or_assign(&keys[0], &b), b.shard(keys[0]));
        // Looked up again, the first comes back in the place of the second.
        assert_eq!(cache.get_or_assign(&keys[0], &a), b.shard(keys[0]));
        for key in &keys[2..6] {
            assert_eq!(cache.get_or_assign(key, &b), a.shard(key), "kept");
        }
        assert_eq!(cache.get_or_assign(&keys[1], &b), b.shard(keys[1]));
    }

    #[test]
    fn shards_survive_packing() {
        for k in 1..=8 {
            let a = Assignment::new(MAX_BUCKETS, k, b"").unwrap();
            for t in 0..50u32 {
                let shard = a.shard(t.to_le_bytes());
                assert_eq!(unpack(pack(&shard), k), shard);
            }
        }
    }

    #[test]
    fn readers_racing_a_writer_see_whole_entries_or_miss() {
        let a = Assignment::new(64, 4, b"").unwrap();
        let cache = ShardCache::new(5); // one set: constant eviction
        let keys: Vec<[u8; 4]> = (0..16u32).map(|t| t.to_le_bytes()).collect();
        let want: Vec<Shard> = keys.iter().map(|k| a.shard(k)).collect();
        std::thread::scope(|s| {
            for offset in 0..2 {
                let (cache, a, keys, want) = (&cache, &a, &keys, &want);
                s.spawn(move || {
                    for i in 0..20_000 {
                        let j = (i * 7 + offset) % keys.len();
                        assert_eq!(cache.get_or_assign(&keys[j], a), want[j]);
                    }
                });
            }
        });
    }
}
