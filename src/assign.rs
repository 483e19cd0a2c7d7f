//! Which buckets a tenant draws from: the specified assignment, and a bounded
//! cache in front of it.
//!
//! The assignment is a compatibility contract, specified in
//! `docs/assignment.md`: it depends on the salt, the tenant's bytes, the
//! number of buckets N and the shard size k, and on nothing else, so every
//! process on every platform computes the same shard.

use std::fmt;
use std::hash::BuildHasher;

use sha2::{Digest, Sha256};

use crate::sync::{AtomicU64, Ordering, fence};

/// The most buckets a limiter may have.
pub const MAX_BUCKETS: u32 = 1 << 16;

/// The most buckets one tenant may be assigned.
pub const MAX_PER_TENANT: u32 = 8;

/// Domain separation for the seed hash; part of the specification.
const DOMAIN: &[u8] = b"shuffle-limiter/assign/v1";

/// SplitMix64's increment; the score of bucket `i` is the (i+1)-th output of
/// SplitMix64 started at the tenant's seed.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The k buckets assigned to one tenant, highest rendezvous score first.
///
/// ```
/// use shuffle_limiter::{Quota, ShardedLimiter};
///
/// let limiter = ShardedLimiter::builder()
///     .quota(Quota::per_second(16))
///     .buckets(16)
///     .per_tenant(2)
///     .build()?;
/// let shard = limiter.shard("tenant-42");
/// assert_eq!(shard.buckets().len(), 2);
/// assert!(shard.buckets().iter().all(|&b| b < 16));
/// assert_ne!(shard.buckets()[0], shard.buckets()[1]);
/// # Ok::<(), shuffle_limiter::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    len: u8,
    buckets: [u32; MAX_PER_TENANT as usize],
}

impl Shard {
    /// The bucket indices, k distinct values below N, highest score first.
    #[inline]
    pub fn buckets(&self) -> &[u32] {
        &self.buckets[..usize::from(self.len)]
    }

    /// Whether `bucket` is one of this shard's.
    pub fn contains(&self, bucket: u32) -> bool {
        self.buckets().contains(&bucket)
    }

    /// How many buckets two shards have in common.
    pub fn overlap(&self, other: &Shard) -> usize {
        self.buckets()
            .iter()
            .filter(|&&b| other.contains(b))
            .count()
    }

    /// The same buckets as a set, ignoring the rank order.
    pub fn same_set(&self, other: &Shard) -> bool {
        self.len == other.len && self.overlap(other) == usize::from(self.len)
    }
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Shard").field(&self.buckets()).finish()
    }
}

/// The specified tenant → shard function, without a cache or buckets.
///
/// [`ShardedLimiter::shard`](crate::ShardedLimiter::shard) gives the same
/// answer; this type is for tools that need shards without a limiter, such as
/// a sizing script or another backend. See `docs/assignment.md` for the
/// specification and known-answer vectors.
///
/// ```
/// use shuffle_limiter::Assignment;
///
/// let a = Assignment::new(16, 2, b"").unwrap();
/// assert_eq!(a.shard("tenant-0"), a.shard(b"tenant-0"));
/// ```
#[derive(Clone)]
pub struct Assignment {
    buckets: u32,
    per_tenant: u32,
    /// SHA-256 with the domain, salt length and salt already absorbed.
    prefix: Sha256,
}

impl Assignment {
    /// The assignment of `per_tenant` of `buckets` buckets under `salt`.
    ///
    /// Returns `None` unless `1 <= per_tenant <= min(buckets, MAX_PER_TENANT)`
    /// and `buckets <= MAX_BUCKETS`; the limiter's builder reports the same
    /// conditions as typed errors.
    pub fn new(buckets: u32, per_tenant: u32, salt: impl AsRef<[u8]>) -> Option<Self> {
        Self::valid(buckets, per_tenant).then(|| {
            let salt = salt.as_ref();
            let mut prefix = Sha256::new();
            prefix.update(DOMAIN);
            prefix.update((salt.len() as u64).to_be_bytes());
            prefix.update(salt);
            Assignment {
                buckets,
                per_tenant,
                prefix,
            }
        })
    }

    /// Whether `new` accepts these counts (a function of its own, so that
    /// cargo-mutants, which leaves `new` alone, reaches it).
    fn valid(buckets: u32, per_tenant: u32) -> bool {
        (1..=buckets.min(MAX_PER_TENANT)).contains(&per_tenant) && buckets <= MAX_BUCKETS
    }

    /// N: buckets in all.
    pub fn buckets(&self) -> u32 {
        self.buckets
    }

    /// k: buckets per tenant.
    pub fn per_tenant(&self) -> u32 {
        self.per_tenant
    }

    /// The tenant's 64-bit seed: the first 8 bytes, big-endian, of
    /// SHA-256(domain ‖ salt length ‖ salt ‖ tenant).
    pub fn seed(&self, tenant: impl AsRef<[u8]>) -> u64 {
        let mut h = self.prefix.clone();
        h.update(tenant.as_ref());
        let digest = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first)
    }

    /// The tenant's shard.
    pub fn shard(&self, tenant: impl AsRef<[u8]>) -> Shard {
        self.shard_of_seed(self.seed(tenant))
    }

    /// The shard for a seed: the k buckets with the highest scores.
    pub(crate) fn shard_of_seed(&self, seed: u64) -> Shard {
        let k = self.per_tenant as usize;
        let mut top = Shard {
            len: 0,
            buckets: [0; MAX_PER_TENANT as usize],
        };
        let mut scores = [0u64; MAX_PER_TENANT as usize];
        for bucket in 0..self.buckets {
            let s = score(seed, bucket);
            let filled = usize::from(top.len);
            if filled == k && s <= scores[k - 1] {
                continue;
            }
            // Strictly lower scores move down; an equal score keeps its place
            // ahead, because it belongs to a smaller bucket index.
            let at = scores[..filled].iter().take_while(|&&t| t >= s).count();
            let end = filled.min(k - 1);
            scores.copy_within(at..end, at + 1);
            top.buckets.copy_within(at..end, at + 1);
            scores[at] = s;
            top.buckets[at] = bucket;
            top.len = (end + 1) as u8;
        }
        top
    }
}

impl fmt::Debug for Assignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Assignment")
            .field("buckets", &self.buckets)
            .field("per_tenant", &self.per_tenant)
            .finish_non_exhaustive()
    }
}

/// The rendezvous score of `bucket` for a tenant with `seed`.
#[inline]
fn score(seed: u64, bucket: u32) -> u64 {
    let mut z = seed.wrapping_add(GAMMA.wrapping_mul(u64::from(bucket) + 1));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

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

    #[test]
    fn top_k_ranks_by_score_with_ties_to_the_smaller_index() {
        let a = Assignment::new(64, 4, b"").unwrap();
        for t in 0..200u32 {
            let seed = a.seed(t.to_le_bytes());
            let shard = a.shard_of_seed(seed);
            let mut all: Vec<(u64, u32)> = (0..64).map(|b| (score(seed, b), b)).collect();
            all.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
            let want: Vec<u32> = all[..4].iter().map(|&(_, b)| b).collect();
            assert_eq!(shard.buckets(), &want[..]);
        }
    }

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

    #[test]
    fn scores_match_the_worked_example_of_the_specification() {
        // docs/assignment.md, "Worked example": tenant-0 under example-salt.
        let seed = 0x4433_efaf_c1ce_150c;
        assert_eq!(
            Assignment::new(5, 2, b"example-salt")
                .unwrap()
                .seed(b"tenant-0"),
            seed
        );
        let want: [u64; 5] = [
            0xfd54_215b_f3f1_2e91,
            0x71e1_5126_a816_3610,
            0xe30e_c87a_dc93_1941,
            0x5197_9f48_6e10_0318,
            0xfc93_42d4_35f3_2932,
        ];
        for (bucket, &score_of) in (0..).zip(&want) {
            assert_eq!(score(seed, bucket), score_of, "bucket {bucket}");
        }
    }

    #[test]
    fn shards_compare_as_sets_and_count_what_they_share() {
        let shard = |buckets: &[u32]| {
            let mut s = Shard {
                len: buckets.len() as u8,
                buckets: [0; MAX_PER_TENANT as usize],
            };
            s.buckets[..buckets.len()].copy_from_slice(buckets);
            s
        };
        let (a, b) = (shard(&[3, 1, 4]), shard(&[4, 3, 1]));
        assert!(a.same_set(&b) && a != b);
        assert_eq!(a.overlap(&shard(&[1, 5, 4])), 2);
        assert!(!a.same_set(&shard(&[3, 1, 5])));
        // A shorter shard inside a longer one is not the same set, either way.
        assert!(!shard(&[3, 1]).same_set(&a));
        assert!(!a.same_set(&shard(&[3, 1])));
        assert!(a.contains(4) && !a.contains(0));
        assert_eq!(format!("{a:?}"), "Shard([3, 1, 4])");
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
