//! A bounded, lock-free cache of tenant → shard in front of the assignment,
//! so that a hot tenant does not pay SHA-256 and the rendezvous on every
//! check.
//!
//! # Layout
//! The cache is an array of 64-byte sets, each one cache line of eight
//! `AtomicU64` words, and a tenant's set is picked by a hash of its key. An
//! entry is one word for every limiter with a shard of at most 32 bits
//! (k · ⌈log₂ N⌉ ≤ 32: N ≤ 256 with k ≤ 4, N ≤ 65 536 with k ≤ 2, the default
//! N = 8 and k = 2 in 6 bits): the packed shard in the low bits, and a tag
//! from a second, independent hash of the key in the others. Larger shards
//! take two or four words, each with 32 bits of shard and 32 of tag. So a
//! set holds eight tenants (four or two for the large shards), and a cached
//! tenant costs 8 bytes (16 or 32) of a cache sized 1.5 times the tenants
//! asked for, so that sets seldom fill and the eviction of a tenant that is
//! still active stays rare.
//!
//! # Without a lock
//! A word is read and written whole, so a reader never sees a torn word, and
//! it trusts an entry only if every word of it carries the tag of the key it
//! looks for. Two writers racing on one way may leave words of two tenants
//! mixed; then the tags disagree and the readers miss, and compute the shard
//! again. A miss that finds no empty way replaces a way chosen by a
//! per-thread coin.
//!
//! # False hits
//! A false hit needs another tenant in the same set with the same tag: at
//! most (ways in a set) × 2^−t per lookup, where t is the tag's bits of
//! randomness, 63 minus the shard's bits in a one-word entry (57 bits at the
//! defaults, so 8 × 2^−57 per lookup) and at least 62 over the words of a
//! multi-word entry. The hashers are seeded at random for each cache, so a
//! tenant cannot aim for one; and a false hit would draw from another
//! tenant's buckets, never more than the budget.

use std::fmt;
use std::hash::BuildHasher;

use crate::sync::{AtomicU64, Ordering};

use super::{Assignment, MAX_PER_TENANT, Shard};

/// The most tenants the cache may be sized for.
pub(crate) const MAX_CACHE_ENTRIES: usize = 1 << 24;

/// Words in a set: one 64-byte cache line.
const WORDS: usize = 8;

/// Seeded at random for each cache; fixed under loom, which replays a model
/// many times over and needs its values to repeat.
#[cfg(not(shuffle_limiter_loom))]
type Hashers = foldhash::fast::RandomState;
#[cfg(shuffle_limiter_loom)]
type Hashers = foldhash::fast::FixedState;

/// One set: a cache line of words, zero when empty.
#[repr(align(64))]
struct Set([AtomicU64; WORDS]);

#[cfg(not(shuffle_limiter_loom))]
const _: () = assert!(std::mem::size_of::<Set>() == 64);

/// How a shard is packed into an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    /// Bits per bucket index: ⌈log₂ N⌉.
    bits: u32,
    /// Buckets per shard, k.
    own: u32,
    /// Spill buckets per shard, d, packed after the own ones.
    spill: u32,
    /// Words per entry: 1, 2 or 4.
    words: usize,
    /// Bits of the packed shard in each word: all of it in a one-word entry,
    /// else 32.
    payload: u32,
}

impl Layout {
    fn of(buckets: u32, per_tenant: u32, spill: u32) -> Layout {
        let bits = u32::BITS - buckets.saturating_sub(1).leading_zeros();
        let shard = bits * (per_tenant + spill);
        let (words, payload) = if shard <= 32 {
            (1, shard)
        } else {
            (shard.div_ceil(32).next_power_of_two() as usize, 32)
        };
        Layout {
            bits,
            own: per_tenant,
            spill,
            words,
            payload,
        }
    }

    /// Entries in a set.
    fn ways(self) -> usize {
        WORDS / self.words
    }

    /// The words of the entry for a tenant with tag hash `tag` and `shard`;
    /// none of them is zero, so an empty word never matches.
    fn entry(self, tag: u64, shard: &Shard) -> [u64; 4] {
        let mut packed = 0u128;
        for (i, &b) in shard.ranked().iter().enumerate() {
            packed |= u128::from(b) << (i as u32 * self.bits);
        }
        let mut words = [0; 4];
        for (w, word) in words.iter_mut().enumerate().take(self.words) {
            let payload = (packed >> (w as u32 * self.payload)) as u64 & self.mask();
            *word = self.tag(tag, w) | payload;
        }
        words
    }

    /// The tag bits of word `w` of an entry: the high bits of the tag hash
    /// in a one-word entry; in a multi-word entry, alternately its high and
    /// low halves, so that a whole entry carries 62 bits of it. The top bit
    /// is always set.
    #[inline]
    fn tag(self, tag: u64, w: usize) -> u64 {
        let tag = if self.words == 1 {
            tag
        } else if w.is_multiple_of(2) {
            tag & !0xFFFF_FFFF
        } else {
            tag << 32
        };
        (tag | 1 << 63) & !self.mask()
    }

    /// The payload bits of a word.
    #[inline]
    fn mask(self) -> u64 {
        (1u64 << self.payload) - 1 // payload <= 32
    }

    /// The shard packed in an entry's payloads.
    #[inline]
    fn unpack(self, payloads: impl Iterator<Item = u64>) -> Shard {
        let mut packed = 0u128;
        for (w, payload) in payloads.enumerate() {
            packed |= u128::from(payload) << (w as u32 * self.payload);
        }
        let index = (1u32 << self.bits) - 1;
        let mut shard = Shard {
            len: self.own as u8,
            spill: self.spill as u8,
            buckets: [0; MAX_PER_TENANT as usize],
        };
        let ranked = (self.own + self.spill) as usize;
        for (i, b) in shard.buckets.iter_mut().take(ranked).enumerate() {
            *b = (packed >> (i as u32 * self.bits)) as u32 & index;
        }
        shard
    }
}

/// A fixed-size, set-associative cache of tenant → shard, allocated once;
/// see the module documentation for its layout and its false hits. Memory
/// never grows with the number of distinct tenants.
pub(crate) struct ShardCache {
    sets: Box<[Set]>,
    layout: Layout,
    /// One hasher picks the set, the other makes the tag.
    hashers: [Hashers; 2],
}

impl ShardCache {
    /// A cache for about `entries` tenants of `assignment`'s shards, or none
    /// for 0.
    pub(crate) fn new(entries: usize, assignment: &Assignment) -> Self {
        let layout = Layout::of(
            assignment.buckets(),
            assignment.per_tenant(),
            assignment.spill(),
        );
        ShardCache {
            sets: (0..Self::sets_for(entries, layout))
                .map(|_| Set(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
            layout,
            hashers: Default::default(),
        }
    }

    /// Sets for `entries` tenants with room to spare: 1.5 ways per tenant.
    /// (Apart from `new`, which cargo-mutants leaves alone.)
    fn sets_for(entries: usize, layout: Layout) -> usize {
        (entries + entries / 2).div_ceil(layout.ways())
    }

    /// Tenants the cache can hold at once: its ways in all.
    pub(crate) fn capacity(&self) -> usize {
        self.sets.len() * self.layout.ways()
    }

    /// Bytes the cache takes.
    pub(crate) fn bytes(&self) -> usize {
        self.sets.len() * std::mem::size_of::<Set>()
    }

    /// The cached shard of `key` among `buckets` buckets, computing and
    /// caching it on a miss. N is part of the tag: after a change of N, the
    /// shards cached for another N miss (and are right again if N comes
    /// back), so a reader never takes one for the other.
    #[inline]
    pub(crate) fn get_or_assign(&self, key: &[u8], assignment: &Assignment, buckets: u32) -> Shard {
        if self.sets.is_empty() {
            return assignment.shard_in(key, buckets);
        }
        let at = u128::from(self.hashers[0].hash_one(key)) * self.sets.len() as u128;
        let set = &self.sets[(at >> 64) as usize];
        let tag = self.tag(key, buckets);
        if let Some(shard) = self.find(set, tag) {
            return shard;
        }
        let shard = assignment.shard_in(key, buckets);
        self.insert(set, tag, &shard);
        shard
    }

    /// The tag hash of `key` among `buckets` buckets: N added just above
    /// the payload bits, so that one key's tags under two Ns always differ
    /// in the bits an entry keeps (N < 2¹⁷ and the payload at most 32 bits
    /// leave its whole difference inside them), while two keys' tags stay
    /// as unrelated as their hashes.
    #[inline]
    fn tag(&self, key: &[u8], buckets: u32) -> u64 {
        let hash = self.hashers[1].hash_one(key);
        hash.wrapping_add(u64::from(buckets) << self.layout.payload)
    }

    #[inline]
    fn find(&self, set: &Set, tag: u64) -> Option<Shard> {
        let layout = self.layout;
        let mask = layout.mask();
        if layout.words == 1 {
            let tag = layout.tag(tag, 0);
            let word = set
                .0
                .iter()
                .map(|w| w.load(Ordering::Relaxed))
                .find(|w| w & !mask == tag)?;
            return Some(layout.unpack(std::iter::once(word & mask)));
        }
        let mut words = [0; 4];
        for way in set.0.chunks_exact(layout.words) {
            let entry = &mut words[..layout.words];
            for (word, atomic) in entry.iter_mut().zip(way) {
                *word = atomic.load(Ordering::Relaxed);
            }
            if (0..layout.words).all(|w| entry[w] & !mask == layout.tag(tag, w)) {
                return Some(layout.unpack(entry.iter().map(|w| w & mask)));
            }
        }
        None
    }

    fn insert(&self, set: &Set, tag: u64, shard: &Shard) {
        let words = self.layout.words;
        let empty = set
            .0
            .chunks_exact(words)
            .position(|way| way[0].load(Ordering::Relaxed) == 0);
        let way =
            empty.unwrap_or_else(|| crate::random::position(self.layout.ways() as u64) as usize);
        let entry = self.layout.entry(tag, shard);
        for (atomic, &word) in set.0[way * words..][..words].iter().zip(&entry) {
            atomic.store(word, Ordering::Relaxed);
        }
    }
}

impl fmt::Debug for ShardCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardCache")
            .field("capacity", &self.capacity())
            .field("bytes", &self.bytes())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assign::MAX_BUCKETS;

    #[test]
    fn shards_of_every_size_pack_into_one_two_or_four_words() {
        let layout = |n, k| {
            let l = Layout::of(n, k, 0);
            (l.bits, l.words, l.payload, l.ways())
        };
        assert_eq!(layout(8, 2), (3, 1, 6, 8));
        assert_eq!(layout(1, 1), (0, 1, 0, 8));
        assert_eq!(layout(256, 4), (8, 1, 32, 8));
        assert_eq!(layout(257, 4), (9, 2, 32, 4));
        assert_eq!(layout(MAX_BUCKETS, 2), (16, 1, 32, 8));
        assert_eq!(layout(MAX_BUCKETS, 5), (16, 4, 32, 2)); // 80 bits: 3 words, rounded up
        assert_eq!(layout(MAX_BUCKETS, 8), (16, 4, 32, 2));
        for k in 1..=MAX_PER_TENANT {
            for n in [k, 2, 3, 8, 100, 256, 1000, MAX_BUCKETS - 1, MAX_BUCKETS] {
                let Some(a) = Assignment::new(n, k, b"") else {
                    continue;
                };
                let layout = Layout::of(n, k, 0);
                for t in 0..40u32 {
                    let shard = a.shard(t.to_le_bytes());
                    let tag = u64::from(t).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                    let entry = layout.entry(tag, &shard);
                    let words = &entry[..layout.words];
                    assert!(words.iter().all(|&w| w != 0), "{n} {k}");
                    for (w, &word) in words.iter().enumerate() {
                        assert_eq!(word & !layout.mask(), layout.tag(tag, w));
                    }
                    let unpacked = layout.unpack(words.iter().map(|w| w & layout.mask()));
                    assert_eq!(unpacked, shard, "N = {n}, k = {k}");
                }
            }
        }
    }

    #[test]
    fn the_cache_returns_exactly_what_the_assignment_computes() {
        for (n, k, d) in [
            (8, 2, 0),
            (8, 2, 6),
            (64, 4, 0),
            (MAX_BUCKETS, 8, 0),
            (1, 1, 0),
            (1024, 2, 4),
        ] {
            let a = Assignment::new(n, k, b"salt")
                .unwrap()
                .with_spill(d)
                .unwrap();
            let cache = ShardCache::new(8, &a);
            assert_eq!(
                cache.capacity(),
                Layout::of(n, k, d).ways() * cache.sets.len()
            );
            for round in 0..3 {
                for t in 0..100u32 {
                    let key = format!("tenant-{t}");
                    let cached = cache.get_or_assign(key.as_bytes(), &a, a.buckets());
                    assert_eq!(cached, a.shard(&key), "{round}");
                }
            }
            let long = vec![7u8; 1 << 20];
            assert_eq!(cache.get_or_assign(&long, &a, a.buckets()), a.shard(&long));
            assert_eq!(cache.get_or_assign(&long, &a, a.buckets()), a.shard(&long));
            assert_eq!(
                ShardCache::new(0, &a).get_or_assign(b"x", &a, a.buckets()),
                a.shard(b"x")
            );
        }
    }

    #[test]
    fn a_cache_is_one_and_a_half_ways_per_tenant_asked_for() {
        let small = Assignment::new(8, 2, b"").unwrap();
        let large = Assignment::new(MAX_BUCKETS, 8, b"").unwrap();
        let cache = ShardCache::new(100_000, &small);
        // 150 000 ways of one word, 8 to a set of 64 bytes.
        assert_eq!((cache.capacity(), cache.bytes()), (150_000, 1_200_000));
        let cache = ShardCache::new(100_000, &large);
        // Four words an entry: 2 to a set.
        assert_eq!((cache.capacity(), cache.bytes()), (150_000, 4_800_000));
        let cache = ShardCache::new(1, &small);
        assert_eq!((cache.capacity(), cache.bytes()), (8, 64));
        assert_eq!(ShardCache::new(0, &small).capacity(), 0);
    }

    #[test]
    fn a_change_of_n_misses_what_was_cached_for_another_n() {
        // A cache laid out for up to 16 buckets, used at 8, then 12, then 8.
        let a = Assignment::new(8, 2, b"").unwrap();
        let cache = ShardCache::new(4_000, &a.resized(16));
        let keys: Vec<[u8; 4]> = (0..500u32).map(u32::to_le_bytes).collect();
        for round in 0..2 {
            for n in [8, 12, 8, 16] {
                let under = a.resized(n);
                for key in &keys {
                    assert_eq!(
                        cache.get_or_assign(key, &a, n),
                        under.shard(key),
                        "N = {n}, {round}"
                    );
                }
            }
        }
        // The shards of both N are held side by side: a lookup under 8 after
        // 16 finds 8's entries without computing them (here, under the salt
        // "b", it would compute other shards).
        let b = Assignment::new(8, 2, b"b").unwrap();
        let hits = keys
            .iter()
            .filter(|key| cache.get_or_assign(&key[..], &b, 8) == a.shard(key))
            .count();
        assert!(hits >= 450, "{hits} of 500");
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
        for (n, k) in [(64, 4), (1024, 8)] {
            let (a, b) = (
                Assignment::new(n, k, b"a").unwrap(),
                Assignment::new(n, k, b"b").unwrap(),
            );
            let cache = ShardCache::new(1_000, &a);
            let keys = keys_told_apart(&a, &b, 100);
            for key in &keys {
                assert_eq!(cache.get_or_assign(key, &a, a.buckets()), a.shard(key)); // a miss
            }
            let hits = keys
                .iter()
                .filter(|key| cache.get_or_assign(&key[..], &b, b.buckets()) == a.shard(key))
                .count();
            // 100 tenants in 1 500 ways: only a set that overflows evicts one.
            // Two ways a set for k = 8: a few sets overflow.
            assert!(hits >= 95, "N = {n}, k = {k}: {hits} of 100 hit");
        }
    }

    #[test]
    fn a_full_set_keeps_what_it_holds_and_evicts_one_entry_per_miss() {
        let (a, b) = (
            Assignment::new(64, 4, b"a").unwrap(),
            Assignment::new(64, 4, b"b").unwrap(),
        );
        let cache = ShardCache::new(1, &a); // one set of 8 ways
        let keys = keys_told_apart(&a, &b, 9);
        for key in &keys[..8] {
            cache.get_or_assign(key, &a, a.buckets());
        }
        let cached = |key: &[u8; 4]| cache.get_or_assign(key, &b, b.buckets()) == a.shard(key);
        assert!(
            keys[..8].iter().all(cached),
            "eight tenants fill the eight ways"
        );
        // A ninth takes the place of exactly one of them.
        cache.get_or_assign(&keys[8], &a, a.buckets());
        // Looked at without a lookup, which would cache what it misses.
        let held = |key: &[u8; 4]| cache.find(&cache.sets[0], cache.tag(key, 64));
        assert_eq!(held(&keys[8]), Some(a.shard(keys[8])));
        assert_eq!(
            keys[..8].iter().filter(|key| held(key).is_some()).count(),
            7
        );
    }

    #[test]
    fn evictions_spread_over_the_ways() {
        // Tenants cycling through one set of 8 ways: each miss replaces a way
        // chosen by the coin, so over many misses every way is replaced.
        let a = Assignment::new(64, 4, b"").unwrap();
        let cache = ShardCache::new(1, &a);
        let mut seen = [false; WORDS];
        for t in 0..200u32 {
            cache.get_or_assign(&t.to_le_bytes(), &a, a.buckets());
            let words: Vec<u64> = cache.sets[0]
                .0
                .iter()
                .map(|w| w.load(Ordering::Relaxed))
                .collect();
            for (w, word) in words.iter().enumerate() {
                seen[w] |= t >= 8 && *word != 0;
            }
        }
        assert_eq!(seen, [true; WORDS]);
    }

    #[test]
    fn false_hits_are_as_rare_as_the_tag_bits_say() {
        // With the tag cut to 8 bits of randomness (as if the shard took 55),
        // a lookup of an absent tenant in a full set hits one of the tags
        // held with probability (distinct tags held) / 2⁸ — about 3 % for 8.
        let a = Assignment::new(8, 2, b"").unwrap();
        let mut cache = ShardCache::new(1, &a);
        cache.layout.payload = 55;
        for t in 0..8u32 {
            cache.get_or_assign(&t.to_le_bytes(), &a, a.buckets());
        }
        let mask = cache.layout.mask();
        let mut held: Vec<u64> = cache.sets[0]
            .0
            .iter()
            .map(|w| w.load(Ordering::Relaxed) & !mask)
            .collect();
        held.sort_unstable();
        held.dedup();
        held.retain(|&tag| tag != 0);
        assert!(held.len() >= 5, "{held:?}");
        let lookups = 100_000u32;
        let false_hits = (1_000..1_000 + lookups)
            .filter(|t| {
                let tag = cache.layout.tag(cache.tag(&t.to_le_bytes(), 8), 0);
                held.contains(&tag)
            })
            .count() as f64;
        let p = held.len() as f64 / 256.0;
        let (mean, sd) = (
            p * f64::from(lookups),
            (p * (1.0 - p) * f64::from(lookups)).sqrt(),
        );
        assert!(
            (false_hits - mean).abs() < 5.0 * sd,
            "{false_hits} false hits, expected {mean:.0} ± {sd:.0}"
        );
    }

    #[test]
    fn readers_racing_writers_see_whole_entries_or_miss() {
        for (n, k) in [(64, 4), (1024, 8)] {
            let a = Assignment::new(n, k, b"").unwrap();
            let cache = ShardCache::new(1, &a); // one set: constant eviction
            let keys: Vec<[u8; 4]> = (0..16u32).map(|t| t.to_le_bytes()).collect();
            let want: Vec<Shard> = keys.iter().map(|k| a.shard(k)).collect();
            std::thread::scope(|s| {
                for offset in 0..2 {
                    let (cache, a, keys, want) = (&cache, &a, &keys, &want);
                    s.spawn(move || {
                        for i in 0..20_000 {
                            let j = (i * 7 + offset) % keys.len();
                            assert_eq!(cache.get_or_assign(&keys[j], a, a.buckets()), want[j]);
                        }
                    });
                }
            });
        }
    }
}
