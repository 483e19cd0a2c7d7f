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
//! looks for, under the N it looks under. Two writers racing on one way may
//! leave words of two tenants mixed, or of one tenant under two Ns (a change
//! of N meanwhile); then the tags disagree and the readers miss, and compute
//! the shard again. A miss that finds no empty way replaces a way chosen by a
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
            len: self.own,
            spill: self.spill,
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
    /// A cache for about `entries` tenants of `assignment`'s shards under
    /// any N up to `room`, or none for 0. Even with no entries, every shard
    /// passes through an entry's packing, so its bucket indices must fit
    /// the bits of the largest N the limiter may change to.
    pub(crate) fn new(entries: usize, assignment: &Assignment, room: u32) -> Self {
        let layout = Layout::of(
            room.max(assignment.buckets()),
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
        // Every path yields the packed payloads, unpacked once at the end:
        // a shard merged from several paths (a call's among them) was
        // copied on by loads wider than the stores that had just built it,
        // a stall on every keyed check.
        let payloads = if self.sets.is_empty() {
            self.assign(key, assignment, buckets)
        } else {
            let at = u128::from(self.hashers[0].hash_one(key)) * self.sets.len() as u128;
            let set = &self.sets[(at >> 64) as usize];
            let tag = self.tag(key, buckets);
            match self.find(set, tag) {
                Some(payloads) => payloads,
                None => self.miss(set, tag, key, assignment, buckets),
            }
        };
        self.layout
            .unpack(payloads.into_iter().take(self.layout.words))
    }

    /// The payloads of `key`'s shard, computed: for a cache of no entries.
    #[inline(never)]
    fn assign(&self, key: &[u8], assignment: &Assignment, buckets: u32) -> [u64; 4] {
        let shard = assignment.shard_in(key, buckets);
        self.layout
            .entry(0, &shard)
            .map(|word| word & self.layout.mask())
    }

    /// [`get_or_assign`](Self::get_or_assign) for a key not in the cache:
    /// its payloads, computed and cached.
    #[cold]
    #[inline(never)]
    fn miss(
        &self,
        set: &Set,
        tag: u64,
        key: &[u8],
        assignment: &Assignment,
        buckets: u32,
    ) -> [u64; 4] {
        let entry = self.layout.entry(tag, &assignment.shard_in(key, buckets));
        self.insert(set, &entry);
        entry.map(|word| word & self.layout.mask())
    }

    /// The tag hash of `key` among `buckets` buckets: N added just above
    /// the payload bits, so that one key's tags under two Ns always differ
    /// in the bits an entry keeps (N < 2¹⁷ and the payload at most 32 bits
    /// leave its whole difference inside them), while two keys' tags stay
    /// as unrelated as their hashes. And N added once more at the bottom,
    /// for the low half that the odd words of a multi-word entry carry:
    /// each word then differs under two Ns (the half above gains N plus a
    /// carry that grows with N), so a way left with words of one tenant's
    /// entries under two Ns by racing writers is missed, never read as a
    /// shard half of each.
    #[inline]
    fn tag(&self, key: &[u8], buckets: u32) -> u64 {
        let hash = self.hashers[1].hash_one(key);
        let n = u64::from(buckets);
        hash.wrapping_add(n << self.layout.payload).wrapping_add(n)
    }

    /// The payloads of the entry tagged `tag` in `set`, if there is one.
    #[inline]
    fn find(&self, set: &Set, tag: u64) -> Option<[u64; 4]> {
        let layout = self.layout;
        let mask = layout.mask();
        if layout.words == 1 {
            let tag = layout.tag(tag, 0);
            let word = set
                .0
                .iter()
                .map(|w| w.load(Ordering::Relaxed))
                .find(|w| w & !mask == tag)?;
            return Some([word & mask, 0, 0, 0]);
        }
        let mut words = [0; 4];
        for way in set.0.chunks_exact(layout.words) {
            let entry = &mut words[..layout.words];
            for (word, atomic) in entry.iter_mut().zip(way) {
                *word = atomic.load(Ordering::Relaxed);
            }
            if (0..layout.words).all(|w| entry[w] & !mask == layout.tag(tag, w)) {
                entry.iter_mut().for_each(|w| *w &= mask);
                return Some(words);
            }
        }
        None
    }

    fn insert(&self, set: &Set, entry: &[u64; 4]) {
        let words = self.layout.words;
        let empty = set
            .0
            .chunks_exact(words)
            .position(|way| way[0].load(Ordering::Relaxed) == 0);
        let way =
            empty.unwrap_or_else(|| crate::random::position(self.layout.ways() as u64) as usize);
        for (atomic, &word) in set.0[way * words..][..words].iter().zip(entry) {
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
#[path = "cache_tests.rs"]
mod tests;
