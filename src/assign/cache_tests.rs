//! The tenant cache's tests: what it returns, how it fills and evicts, its
//! false hits, and readers racing writers.

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
        let cache = ShardCache::new(8, &a, 0);
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
            ShardCache::new(0, &a, 0).get_or_assign(b"x", &a, a.buckets()),
            a.shard(b"x")
        );
    }
}

#[test]
fn a_cache_is_one_and_a_half_ways_per_tenant_asked_for() {
    let small = Assignment::new(8, 2, b"").unwrap();
    let large = Assignment::new(MAX_BUCKETS, 8, b"").unwrap();
    let cache = ShardCache::new(100_000, &small, 0);
    // 150 000 ways of one word, 8 to a set of 64 bytes.
    assert_eq!((cache.capacity(), cache.bytes()), (150_000, 1_200_000));
    let cache = ShardCache::new(100_000, &large, 0);
    // Four words an entry: 2 to a set.
    assert_eq!((cache.capacity(), cache.bytes()), (150_000, 4_800_000));
    let cache = ShardCache::new(1, &small, 0);
    assert_eq!((cache.capacity(), cache.bytes()), (8, 64));
    assert_eq!(ShardCache::new(0, &small, 0).capacity(), 0);
}

#[test]
fn a_cache_of_no_entries_packs_the_shards_of_every_n_up_to_its_room() {
    // Built at N = 4 with room for 8: indices 4..8 need a third bit.
    let a = Assignment::new(4, 4, b"").unwrap();
    for (entries, room) in [(0, 8), (100, 8), (0, 300)] {
        let cache = ShardCache::new(entries, &a, room);
        for t in 0..200u32 {
            let key = t.to_le_bytes();
            for n in [4, 5, 8, room] {
                let expected = a.resized(n).shard(key);
                assert_eq!(cache.get_or_assign(&key, &a, n), expected, "{entries} {n}");
            }
        }
    }
}

#[test]
fn a_change_of_n_misses_what_was_cached_for_another_n() {
    // A cache laid out for up to 16 buckets, used at 8, then 12, then 8.
    let a = Assignment::new(8, 2, b"").unwrap();
    let cache = ShardCache::new(4_000, &a, 16);
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

/// The set of `cache` that `key` goes to.
fn set_of(cache: &ShardCache, key: &[u8]) -> usize {
    let at = u128::from(cache.hashers[0].hash_one(key)) * cache.sets.len() as u128;
    (at >> 64) as usize
}

#[test]
fn a_second_lookup_hits_the_cache() {
    for (n, k) in [(64, 4), (1024, 8)] {
        let (a, b) = (
            Assignment::new(n, k, b"a").unwrap(),
            Assignment::new(n, k, b"b").unwrap(),
        );
        let cache = ShardCache::new(1_000, &a, 0);
        let keys = keys_told_apart(&a, &b, 100);
        for key in &keys {
            assert_eq!(cache.get_or_assign(key, &a, a.buckets()), a.shard(key)); // a miss
        }
        // Only a set that more keys go to than it has ways evicts any:
        // every other key hits. (In a set that overflows, which keys stay
        // is the per-thread coin's, and each miss of the second pass
        // evicts another: a set of three keys and two ways may miss all
        // three, so a count of all hits depends on the hashers' seeds.)
        let mut per_set = std::collections::HashMap::<usize, usize>::new();
        for key in &keys {
            *per_set.entry(set_of(&cache, key)).or_default() += 1;
        }
        let ways = cache.layout.ways();
        let alone: Vec<_> = (keys.iter())
            .filter(|key| per_set[&set_of(&cache, &key[..])] <= ways)
            .collect();
        // 100 keys in 1 500 ways: for k = 8, two ways a set, about one key
        // in a hundred shares its set with two others.
        assert!(
            alone.len() >= 80,
            "N = {n}, k = {k}: {} of 100",
            alone.len()
        );
        for key in alone {
            let shard = cache.get_or_assign(&key[..], &b, b.buckets());
            assert_eq!(shard, a.shard(key), "N = {n}, k = {k}: {key:?} missed");
        }
    }
}

#[test]
fn a_full_set_keeps_what_it_holds_and_evicts_one_entry_per_miss() {
    let (a, b) = (
        Assignment::new(64, 4, b"a").unwrap(),
        Assignment::new(64, 4, b"b").unwrap(),
    );
    let cache = ShardCache::new(1, &a, 0); // one set of 8 ways
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
    let held = |key: &[u8; 4]| {
        (cache.find(&cache.sets[0], cache.tag(key, 64))).map(|payloads| {
            cache
                .layout
                .unpack(payloads.into_iter().take(cache.layout.words))
        })
    };
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
    let cache = ShardCache::new(1, &a, 0);
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
    let mut cache = ShardCache::new(1, &a, 0);
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
        let cache = ShardCache::new(1, &a, 0); // one set: constant eviction
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

/// Two writers of one tenant under two Ns (a change of N while both miss)
/// may leave a way holding words of both entries. Every word's tag carries
/// N, so a lookup under either N misses that way instead of taking a shard
/// half of one N and half of the other.
#[test]
fn an_entry_torn_between_two_ns_is_missed() {
    // 40 bits of shard (k = 5 of up to 256): two words an entry.
    let a = Assignment::new(32, 5, b"").unwrap();
    let cache = ShardCache::new(1, &a, 256);
    assert_eq!(cache.layout.words, 2);
    let (small, large) = (a.resized(16), a.resized(32));
    let key = (0..1_000u32)
        .map(u32::to_le_bytes)
        .find(|key| small.shard(key).ranked()[4] != large.shard(key).ranked()[4])
        .unwrap();
    let set = &cache.sets[0];
    for (n, m) in [(16, 32), (32, 16)] {
        let entry = |n| {
            let tag = cache.tag(&key, n);
            cache.layout.entry(tag, &a.resized(n).shard(key))
        };
        let (mine, theirs) = (entry(n), entry(m));
        // The first word of n's entry, the second of m's.
        set.0[0].store(mine[0], Ordering::Relaxed);
        set.0[1].store(theirs[1], Ordering::Relaxed);
        assert_eq!(cache.find(set, cache.tag(&key, n)), None, "N = {n}");
        assert_eq!(cache.get_or_assign(&key, &a, n), a.resized(n).shard(key));
    }
}
