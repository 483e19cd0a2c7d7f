//! The properties `docs/assignment.md` promises of the assignment, each a
//! test: determinism, the seed, uniformity, minimal churn and nesting, and
//! the salt.

use std::collections::HashMap;

use proptest::prelude::*;
use sha2::{Digest, Sha256};
use shuffle_limiter::{
    Assignment, DEFAULT_TENANT_CACHE, ManualClock, Quota, Shard, ShardedLimiter,
};

#[path = "support/reference.rs"]
mod reference;
use reference::{DOMAIN, limiter, reference_seed, reference_shard, tenant};

/// Upper tail of the chi-square distribution at p = 1e-6, by degrees of
/// freedom. Computed with mpmath 1.3 (40 digits): bisection on the regularized
/// upper incomplete gamma Q(df/2, x/2) = 1e-6. Check: for df = 2,
/// Q = exp(-x/2), so x = 2·ln(1e6) = 27.631021 exactly.
fn chi_square_critical(df: usize) -> f64 {
    match df {
        2 => 27.631021,
        5 => 35.888187,
        7 => 40.521831,
        14 => 54.635306,
        55 => 119.90242,
        _ => panic!("no critical value tabled for df = {df}"),
    }
}

// --- Determinism ----------------------------------------------------------------

#[test]
fn a_shard_depends_on_n_k_salt_and_key_bytes_only() {
    let (n, k, salt) = (16, 3, b"s3cret");
    let first = Assignment::new(n, k, salt).unwrap();
    let second = Assignment::new(n, k, salt).unwrap();
    let cloned = first.clone();
    let default_cache = limiter(n, k, salt, DEFAULT_TENANT_CACHE);
    let other = ShardedLimiter::builder()
        .quota(Quota::per_hour(1_000).with_burst(640))
        .buckets(n)
        .per_tenant(k)
        .salt(salt)
        .name("elsewhere")
        .clock(ManualClock::new())
        .tenant_cache(0)
        .build()
        .unwrap();
    // The smallest cache (one set of 4 ways) evicts all the time, so hits
    // and misses mix.
    let tiny = limiter(n, k, salt, 1);
    for round in 0..3 {
        for i in 0..500 {
            let key = tenant(i);
            let want = first.shard(&key);
            assert_eq!(
                want.buckets(),
                &reference_shard(n, k, salt, key.as_bytes())[..]
            );
            for (who, got) in [
                ("second", second.shard(&key)),
                ("clone", cloned.shard(&key)),
                ("cached", default_cache.shard(&key)),
                ("uncached", other.shard(&key)),
                ("tiny cache", tiny.shard(&key)),
                ("tenant handle", default_cache.handle(&key).shard()),
            ] {
                assert_eq!(got, want, "{who}, round {round}, {key}");
            }
        }
    }
    // Any spelling of the same bytes is the same tenant.
    let want = first.shard(b"tenant-7");
    assert_eq!(first.shard("tenant-7"), want);
    assert_eq!(first.shard(String::from("tenant-7")), want);
    let owned: Vec<u8> = b"tenant-7".into();
    assert_eq!(first.shard(owned), want);
    assert_eq!(first.shard(&b"tenant-7"[..]), want);
    // Keys that share a prefix are different tenants, also in the cache.
    for key in [&b"tenant"[..], b"tenant\0", b"tenant\0\0", b"tenan"] {
        assert_eq!(
            default_cache.shard(key).buckets(),
            &reference_shard(n, k, salt, key)[..]
        );
    }
}

#[test]
fn keys_may_be_any_bytes() {
    let (n, k, salt) = (64, 4, b"example-salt");
    let a = Assignment::new(n, k, salt).unwrap();
    let l = limiter(n, k, salt, DEFAULT_TENANT_CACHE);
    let mut big = vec![0xA5u8; 1 << 20];
    let mut keys: Vec<Vec<u8>> = vec![
        Vec::new(),
        vec![0],
        vec![0xFF, 0xFE, 0xFD],
        vec![0xC0, 0x80], // overlong NUL, not UTF-8
        (0..=255).collect(),
        vec![b'x'; 40],
        vec![b'x'; 41],
        big.clone(),
    ];
    *big.last_mut().unwrap() ^= 1; // the whole key is hashed, not a prefix
    keys.push(big);
    let mut seeds = Vec::new();
    for key in &keys {
        let shard = a.shard(key);
        assert_eq!(
            shard.buckets(),
            &reference_shard(n, k, salt, key)[..],
            "{} bytes",
            key.len()
        );
        assert_eq!(l.shard(key), shard);
        assert_eq!(l.shard(key), shard, "second look, from the cache");
        let grant = l.check(key).unwrap();
        assert!(shard.contains(grant.bucket()));
        seeds.push(a.seed(key));
    }
    seeds.sort_unstable();
    seeds.dedup();
    assert_eq!(
        seeds.len(),
        keys.len(),
        "two different keys got the same seed"
    );
}

// --- The seed ---------------------------------------------------------------------

#[test]
fn the_seed_is_the_specified_sha256_prefix() {
    let tenants = [&b""[..], b"t", b"tenant-42", &[0xFF; 100]];
    // Lengths past one byte and past two bytes catch a short length field.
    for salt_len in [0usize, 1, 12, 255, 256, 300, 65_536] {
        let salt: Vec<u8> = (0..salt_len).map(|i| (i * 7) as u8).collect();
        let a = Assignment::new(5, 2, &salt).unwrap();
        let b = Assignment::new(64, 4, &salt).unwrap();
        for t in tenants {
            let mut h = Sha256::new();
            h.update(DOMAIN);
            h.update((salt_len as u64).to_be_bytes());
            h.update(&salt);
            h.update(t);
            let digest = h.finalize();
            let want = u64::from_be_bytes(digest[..8].try_into().unwrap());
            assert_eq!(a.seed(t), want, "salt of {salt_len} bytes");
            assert_eq!(b.seed(t), want, "the seed does not depend on N or k");
        }
    }
    // The length prefix keeps salt and tenant apart.
    let ab = Assignment::new(8, 2, b"ab").unwrap().seed(b"c");
    let a = Assignment::new(8, 2, b"a").unwrap().seed(b"bc");
    let none = Assignment::new(8, 2, b"").unwrap().seed(b"abc");
    assert!(ab != a && a != none && ab != none);
}

#[test]
fn the_seed_uses_all_64_bits() {
    const TENANTS: u32 = 4096;
    let a = Assignment::new(16, 2, b"").unwrap();
    let seeds: Vec<u64> = (0..TENANTS).map(|i| a.seed(tenant(i))).collect();
    // Each bit is set in about half the seeds: within 5 sigma (sigma = 32),
    // which a seed cut to 31 or 48 bits, or reduced modulo anything but a
    // power of two near 2^64, fails.
    for bit in 0..64 {
        let set = seeds.iter().filter(|&&s| s >> bit & 1 == 1).count() as f64;
        let (mean, sigma) = (f64::from(TENANTS) / 2.0, (f64::from(TENANTS) / 4.0).sqrt());
        assert!(
            (set - mean).abs() <= 5.0 * sigma,
            "bit {bit} set in {set} of {TENANTS}"
        );
    }
    // The top 16 bits take about 65536·(1 − e^(−1/16)) ≈ 3971 values.
    let mut high: Vec<u64> = seeds.iter().map(|s| s >> 48).collect();
    high.sort_unstable();
    high.dedup();
    assert!(
        high.len() > 3850,
        "only {} distinct top-16-bit values",
        high.len()
    );
}

// --- Uniformity -------------------------------------------------------------------

/// Shards of tenants `tenant-0 … tenant-(count-1)`.
fn shards(n: u32, k: u32, salt: &[u8], count: u32) -> Vec<Shard> {
    let a = Assignment::new(n, k, salt).unwrap();
    (0..count).map(|i| a.shard(tenant(i))).collect()
}

/// Pearson's statistic of `observed` against `expected` counts.
fn chi_square(observed: &[u64], expected: &[f64]) -> f64 {
    observed
        .iter()
        .zip(expected)
        .map(|(&o, &e)| (o as f64 - e).powi(2) / e)
        .sum()
}

fn binomial(n: u64, r: u64) -> u64 {
    (0..r).fold(1, |acc, i| acc * (n - i) / (i + 1))
}

fn assert_uniform(n: u32, k: u32, tenants: u32) {
    let all = shards(n, k, b"", tenants);
    let t = f64::from(tenants);
    let subsets = binomial(n.into(), k.into()) as usize;

    let mut by_subset: HashMap<u32, u64> = HashMap::new();
    let mut by_bucket = vec![0u64; n as usize];
    let mut by_rank = vec![vec![0u64; n as usize]; k as usize];
    for shard in &all {
        let mask = shard.buckets().iter().fold(0u32, |m, &b| m | 1 << b);
        assert_eq!(mask.count_ones(), k, "{shard:?} repeats a bucket");
        *by_subset.entry(mask).or_default() += 1;
        for (rank, &b) in shard.buckets().iter().enumerate() {
            by_bucket[b as usize] += 1;
            by_rank[rank][b as usize] += 1;
        }
    }
    assert_eq!(
        by_subset.len(),
        subsets,
        "some of the C({n},{k}) subsets never occur"
    );
    let observed: Vec<u64> = by_subset.values().copied().collect();
    let stat = chi_square(&observed, &vec![t / subsets as f64; subsets]);
    let critical = chi_square_critical(subsets - 1);
    assert!(
        stat < critical,
        "subsets of {n} choose {k}: chi-square {stat:.1} ≥ {critical}"
    );

    // Bucket counts: each is Binomial(T, k/N), but they always sum to kT, with
    // covariance T·(p·I − …) of rank N−1; dividing by T·k(N−k)/(N(N−1))
    // instead of the mean makes the statistic chi-square with N−1 df.
    let (nf, kf) = (f64::from(n), f64::from(k));
    let scale = t * kf * (nf - kf) / (nf * (nf - 1.0));
    let stat: f64 = by_bucket
        .iter()
        .map(|&c| (c as f64 - t * kf / nf).powi(2) / scale)
        .sum();
    let critical = chi_square_critical(n as usize - 1);
    assert!(
        stat < critical,
        "buckets of {n} choose {k}: {by_bucket:?}, chi-square {stat:.1}"
    );

    // At each rank, the bucket is uniform over N: multinomial, N−1 df.
    for (rank, counts) in by_rank.iter().enumerate() {
        let stat = chi_square(counts, &vec![t / nf; n as usize]);
        assert!(
            stat < critical,
            "rank {rank} of {n} choose {k}: {counts:?}, chi-square {stat:.1}"
        );
    }
}

#[test]
fn shards_are_uniform_over_subsets_buckets_and_ranks_6_choose_2() {
    assert_uniform(6, 2, 100_000);
}

#[test]
fn shards_are_uniform_over_subsets_buckets_and_ranks_8_choose_3() {
    assert_uniform(8, 3, 100_000);
}

// --- Minimal churn and nesting ----------------------------------------------------------

#[test]
fn growing_n_by_one_moves_k_in_n_plus_one_tenants_by_one_bucket() {
    const TENANTS: u32 = 20_000;
    for (n, k) in [(5, 2), (16, 2), (64, 4)] {
        let before = shards(n, k, b"", TENANTS);
        let after = shards(n + 1, k, b"", TENANTS);
        let mut changed = 0u32;
        for (old, new) in before.iter().zip(&after) {
            if old.same_set(new) {
                assert_eq!(old, new, "an unchanged shard keeps its order too");
                continue;
            }
            changed += 1;
            assert!(
                new.contains(n),
                "{old:?} → {new:?} without the new bucket {n}"
            );
            assert_eq!(old.overlap(new), k as usize - 1, "{old:?} → {new:?}");
            // The new bucket enters at its rank; the old last one drops out.
            let kept: Vec<u32> = new.buckets().iter().copied().filter(|&b| b != n).collect();
            assert_eq!(kept, old.buckets()[..k as usize - 1], "{old:?} → {new:?}");
        }
        // Binomial(T, k/(N+1)) within 5 sigma.
        let p = f64::from(k) / f64::from(n + 1);
        let (mean, sigma) = (
            f64::from(TENANTS) * p,
            (f64::from(TENANTS) * p * (1.0 - p)).sqrt(),
        );
        assert!(
            (f64::from(changed) - mean).abs() <= 5.0 * sigma,
            "{n} → {}, k = {k}: {changed} of {TENANTS} changed, expected {mean:.0} ± {sigma:.0}",
            n + 1
        );
    }
}

#[test]
fn the_k_shard_is_the_first_k_of_the_k_plus_one_shard() {
    for n in [8, 9, 64] {
        let by_k: Vec<Vec<Shard>> = (1..=8)
            .map(|k| shards(n, k, b"example-salt", 1000))
            .collect();
        for k in 1..8 {
            for (smaller, larger) in by_k[k - 1].iter().zip(&by_k[k]) {
                assert_eq!(smaller.buckets(), &larger.buckets()[..k], "N = {n}");
                assert!(smaller.buckets().iter().all(|&b| larger.contains(b)));
            }
        }
    }
}

// --- The salt -----------------------------------------------------------------------

#[test]
fn shards_under_different_salts_agree_no_more_than_chance() {
    const TENANTS: u32 = 20_000;
    let (n, k) = (16, 2);
    // One salt differs from the other in a single bit ('t' vs 'u').
    let salts: [&[u8]; 3] = [b"", b"example-salt", b"example-salu"];
    let by_salt: Vec<Vec<Shard>> = salts.iter().map(|s| shards(n, k, s, TENANTS)).collect();
    // P(j shared) = C(k,j)·C(N−k,k−j)/C(N,k) = 91/120, 28/120, 1/120.
    let expected: Vec<f64> = (0..=k)
        .map(|j| {
            let ways = binomial(k.into(), j.into()) * binomial((n - k).into(), (k - j).into());
            f64::from(TENANTS) * ways as f64 / binomial(n.into(), k.into()) as f64
        })
        .collect();
    for (x, y) in [(0, 1), (0, 2), (1, 2)] {
        let mut overlaps = vec![0u64; k as usize + 1];
        for (a, b) in by_salt[x].iter().zip(&by_salt[y]) {
            overlaps[a.overlap(b)] += 1;
        }
        let stat = chi_square(&overlaps, &expected);
        assert!(
            stat < chi_square_critical(k as usize),
            "salts {:?} and {:?}: overlaps {overlaps:?}, expected {expected:?}",
            salts[x],
            salts[y]
        );
    }
    for i in 0..1000 {
        let seeds: Vec<u64> = salts
            .iter()
            .map(|s| Assignment::new(n, k, s).unwrap().seed(tenant(i)))
            .collect();
        assert!(
            seeds[0] != seeds[1] && seeds[0] != seeds[2] && seeds[1] != seeds[2],
            "{seeds:?}"
        );
    }
}

// --- Properties over arbitrary input --------------------------------------------------

fn n_and_k() -> impl Strategy<Value = (u32, u32)> {
    prop_oneof![3 => 1u32..=64, 1 => 65u32..=4096].prop_flat_map(|n| (Just(n), 1..=n.min(8)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_key_gets_k_distinct_valid_buckets_as_specified(
        (n, k) in n_and_k(),
        salt in prop::collection::vec(any::<u8>(), 0..40),
        key in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let a = Assignment::new(n, k, &salt).unwrap();
        let shard = a.shard(&key);
        let buckets = shard.buckets();
        prop_assert_eq!(buckets.len(), k as usize);
        prop_assert!(buckets.iter().all(|&b| b < n));
        let mut distinct = buckets.to_vec();
        distinct.sort_unstable();
        distinct.dedup();
        prop_assert_eq!(distinct.len(), k as usize);
        prop_assert_eq!(buckets, &reference_shard(n, k, &salt, &key)[..]);
        prop_assert_eq!(a.seed(&key), reference_seed(&salt, &key));
    }

    #[test]
    fn nesting_and_growth_hold_for_any_key(
        n in 1u32..=300,
        salt in prop::collection::vec(any::<u8>(), 0..40),
        key in prop::collection::vec(any::<u8>(), 0..200),
    ) {
        let top = n.min(8);
        for k in 1..top {
            let smaller = Assignment::new(n, k, &salt).unwrap().shard(&key);
            let larger = Assignment::new(n, k + 1, &salt).unwrap().shard(&key);
            prop_assert_eq!(smaller.buckets(), &larger.buckets()[..k as usize]);
        }
        let old = Assignment::new(n, top, &salt).unwrap().shard(&key);
        let new = Assignment::new(n + 1, top, &salt).unwrap().shard(&key);
        prop_assert!(old == new || (new.contains(n) && old.overlap(&new) == top as usize - 1));
    }
}
