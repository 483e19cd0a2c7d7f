//! The assignment contract of `docs/assignment.md`: its known-answer vectors
//! and worked example, read out of the document itself so that the two cannot
//! drift, and a test for each property the document promises.

use std::collections::HashMap;

use proptest::prelude::*;
use sha2::{Digest, Sha256};
use shuffle_limiter::{
    Assignment, DEFAULT_TENANT_CACHE, ManualClock, Quota, Shard, ShardedLimiter,
};

#[path = "support/spec.rs"]
mod spec;
use spec::{bucket_list, code, hex_bytes, section};

/// The domain string, as the specification spells it.
const DOMAIN: &[u8] = b"shuffle-limiter/assign/v1";

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

// --- An independent reading of the specification ---------------------------

/// SHA-256 seed built from one concatenated message (the crate absorbs a
/// precomputed prefix instead).
fn reference_seed(salt: &[u8], tenant: &[u8]) -> u64 {
    let mut message = DOMAIN.to_vec();
    message.extend_from_slice(&(salt.len() as u64).to_be_bytes());
    message.extend_from_slice(salt);
    message.extend_from_slice(tenant);
    let digest = Sha256::digest(&message);
    u64::from_be_bytes(digest[..8].try_into().unwrap())
}

/// The scores of buckets 0..n as the successive outputs of SplitMix64 started
/// at `seed`: the "(i+1)-th output" reading of the specification.
fn reference_scores(seed: u64, n: u32) -> Vec<u64> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut out = state;
            out = (out ^ (out >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            out = (out ^ (out >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            out ^ (out >> 31)
        })
        .collect()
}

/// A full sort by (score descending, index ascending), then the first k.
fn reference_shard(n: u32, k: u32, salt: &[u8], tenant: &[u8]) -> Vec<u32> {
    let scores = reference_scores(reference_seed(salt, tenant), n);
    let mut order: Vec<u32> = (0..n).collect();
    order.sort_by_key(|&b| (std::cmp::Reverse(scores[b as usize]), b));
    order.truncate(k as usize);
    order
}

// --- Reading the document ----------------------------------------------------

#[derive(Debug)]
struct Vector {
    line: &'static str,
    buckets: u32,
    per_tenant: u32,
    salt: Vec<u8>,
    tenant: Vec<u8>,
    seed: u64,
    shard: Vec<u32>,
}

fn vectors() -> Vec<Vector> {
    section("Known-answer vectors")
        .lines()
        .filter(|line| line.starts_with("| ") && line.as_bytes()[2].is_ascii_digit())
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cells.len(), 7, "{line}");
            let salt = match cells[2] {
                "none" => Vec::new(),
                other => code(other)
                    .unwrap_or_else(|| panic!("salt cell in {line}"))
                    .into(),
            };
            let tenant = match cells[3] {
                "-" => Vec::new(),
                other => hex_bytes(code(other).unwrap_or_else(|| panic!("tenant cell in {line}"))),
            };
            assert!(!tenant.is_empty() || cells[4] == "(empty)", "{line}");
            // A backticked rendering must be exactly the tenant's bytes.
            if let Some(text) = code(cells[4]) {
                assert_eq!(
                    text.as_bytes(),
                    &tenant[..],
                    "rendering differs from hex: {line}"
                );
            }
            let seed = code(cells[5]).unwrap_or_else(|| panic!("seed cell in {line}"));
            Vector {
                line,
                buckets: cells[0].parse().unwrap(),
                per_tenant: cells[1].parse().unwrap(),
                salt,
                tenant,
                seed: u64::from_str_radix(seed, 16).unwrap(),
                shard: bucket_list(cells[6]),
            }
        })
        .collect()
}

/// A limiter with a tenant cache of `cache` entries (0: none).
fn limiter(n: u32, k: u32, salt: &[u8], cache: usize) -> ShardedLimiter {
    ShardedLimiter::builder()
        .quota(Quota::per_second(1000 * n)) // burst ≥ N: 1000 tokens per bucket
        .buckets(n)
        .per_tenant(k)
        .salt(salt)
        .tenant_cache(cache)
        .build()
        .unwrap()
}

fn tenant(i: u32) -> String {
    format!("tenant-{i}")
}

// --- Known answers -------------------------------------------------------------

#[test]
fn the_documented_vectors_cover_what_they_should() {
    let vectors = vectors();
    for (n, k) in [(5, 2), (16, 2), (64, 4)] {
        for salt in [&b""[..], b"example-salt"] {
            let here: Vec<&Vector> = vectors
                .iter()
                .filter(|v| (v.buckets, v.per_tenant, &v.salt[..]) == (n, k, salt))
                .collect();
            assert!(
                here.len() >= 20,
                "{n}, {k}, {salt:?}: {} vectors",
                here.len()
            );
            assert!(here.iter().any(|v| v.tenant.is_empty()), "no empty tenant");
            assert!(
                here.iter().any(|v| std::str::from_utf8(&v.tenant).is_err()),
                "no non-UTF-8 tenant"
            );
            assert!(
                here.iter()
                    .any(|v| !v.tenant.is_ascii() && std::str::from_utf8(&v.tenant).is_ok()),
                "no non-ASCII UTF-8 tenant"
            );
            assert!(
                here.iter().any(|v| v.tenant.len() > 40),
                "no tenant past the cache's 40 bytes"
            );
        }
    }
}

#[test]
fn the_crate_reproduces_every_documented_vector() {
    let mut limiters: HashMap<(u32, u32, Vec<u8>), [ShardedLimiter; 2]> = HashMap::new();
    for v in vectors() {
        let (n, k) = (v.buckets, v.per_tenant);
        let assignment = Assignment::new(n, k, &v.salt).unwrap();
        assert_eq!(assignment.seed(&v.tenant), v.seed, "seed: {}", v.line);
        let [cached, uncached] = limiters.entry((n, k, v.salt.clone())).or_insert_with(|| {
            [
                limiter(n, k, &v.salt, DEFAULT_TENANT_CACHE),
                limiter(n, k, &v.salt, 0),
            ]
        });
        // Evaluated in order: the first cached look misses, the second hits.
        let answers = [
            ("assignment", assignment.shard(&v.tenant).buckets().to_vec()),
            ("cache miss", cached.shard(&v.tenant).buckets().to_vec()),
            ("cache hit", cached.shard(&v.tenant).buckets().to_vec()),
            ("uncached", uncached.shard(&v.tenant).buckets().to_vec()),
            ("reference", reference_shard(n, k, &v.salt, &v.tenant)),
        ];
        for (who, shard) in answers {
            assert_eq!(shard, v.shard, "{who}: {}", v.line);
        }
        let grant = cached.check(&v.tenant).unwrap();
        assert!(
            v.shard.contains(&grant.bucket()),
            "granted from {}: {}",
            grant.bucket(),
            v.line
        );
    }
}

/// One row of "Known-answer vectors: spill sets".
#[derive(Debug)]
struct SpillVector {
    line: &'static str,
    buckets: u32,
    per_tenant: u32,
    spill: u32,
    salt: Vec<u8>,
    tenant: Vec<u8>,
    shard: Vec<u32>,
    spill_set: Vec<u32>,
}

fn spill_vectors() -> Vec<SpillVector> {
    section("Known-answer vectors: spill sets")
        .lines()
        .filter(|line| line.starts_with("| ") && line.as_bytes()[2].is_ascii_digit())
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cells.len(), 8, "{line}");
            let salt = match cells[3] {
                "none" => Vec::new(),
                other => code(other)
                    .unwrap_or_else(|| panic!("salt cell in {line}"))
                    .into(),
            };
            let tenant = match cells[4] {
                "-" => Vec::new(),
                other => hex_bytes(code(other).unwrap_or_else(|| panic!("tenant cell in {line}"))),
            };
            if let Some(text) = code(cells[5]) {
                assert_eq!(
                    text.as_bytes(),
                    &tenant[..],
                    "rendering differs from hex: {line}"
                );
            }
            SpillVector {
                line,
                buckets: cells[0].parse().unwrap(),
                per_tenant: cells[1].parse().unwrap(),
                spill: cells[2].parse().unwrap(),
                salt,
                tenant,
                shard: bucket_list(cells[6]),
                spill_set: match cells[7] {
                    "-" => Vec::new(),
                    list => bucket_list(list),
                },
            }
        })
        .collect()
}

#[test]
fn the_crate_reproduces_every_spill_set_vector() {
    let vectors = spill_vectors();
    assert!(vectors.len() >= 50, "{} spill vectors", vectors.len());
    assert!(vectors.iter().any(|v| v.spill == 0) && vectors.iter().any(|v| v.buckets == 65536));
    for v in vectors {
        let (n, k, d) = (v.buckets, v.per_tenant, v.spill);
        let lending = Assignment::new(n, k, &v.salt)
            .unwrap()
            .with_spill(d)
            .unwrap();
        let shard = lending.shard(&v.tenant);
        assert_eq!(shard.buckets(), v.shard, "shard: {}", v.line);
        assert_eq!(shard.spill(), v.spill_set, "spill: {}", v.line);
        // The shard for k + d is the shard followed by the spill set.
        let wider = reference_shard(n, k + d, &v.salt, &v.tenant);
        assert_eq!(
            wider,
            [v.shard.clone(), v.spill_set.clone()].concat(),
            "{}",
            v.line
        );
        // A limiter that lends draws on the same buckets, cached or not.
        for cache in [DEFAULT_TENANT_CACHE, 0] {
            let limiter = ShardedLimiter::builder()
                .quota(Quota::per_second(n))
                .buckets(n)
                .per_tenant(k)
                .borrow_from(d)
                .salt(&v.salt)
                .tenant_cache(cache)
                .clock(ManualClock::new())
                .build()
                .unwrap();
            for _ in 0..2 {
                assert_eq!(limiter.shard(&v.tenant), shard, "limiter: {}", v.line);
            }
        }
    }
}

#[test]
fn spill_sets_are_bounded_by_what_a_shard_holds() {
    let a = || Assignment::new(8, 2, b"").unwrap();
    assert_eq!(a().with_spill(6).map(|a| a.spill()), Some(6));
    assert!(a().with_spill(7).is_none());
    assert!(Assignment::new(64, 4, b"").unwrap().with_spill(5).is_none());
    assert!(Assignment::new(5, 2, b"").unwrap().with_spill(4).is_none());
    assert_eq!(
        Assignment::new(5, 2, b"")
            .unwrap()
            .with_spill(3)
            .unwrap()
            .shard("t")
            .spill()
            .len(),
        3
    );
}

#[test]
fn the_worked_example_checks_out() {
    let block = section("Worked example");
    let body = &block[block.find("```text\n").expect("no text block") + 8..];
    let body = &body[..body.find("```").unwrap()];
    let field: HashMap<&str, &str> = body
        .lines()
        .map(|l| {
            let (name, value) = l.split_once(" = ").unwrap();
            (name.trim(), value.trim())
        })
        .collect();
    let (salt, tenant) = (b"example-salt", b"tenant-0");

    let mut message = DOMAIN.to_vec();
    message.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 12]);
    message.extend_from_slice(salt);
    message.extend_from_slice(tenant);
    assert_eq!(hex_bytes(field["M"]), message);
    let digest = Sha256::digest(&message);
    assert_eq!(hex_bytes(field["SHA-256(M)"]), &digest[..]);

    let assignment = Assignment::new(5, 2, salt).unwrap();
    let seed = assignment.seed(tenant);
    assert_eq!(u64::from_str_radix(field["seed"], 16).unwrap(), seed);
    let scores = reference_scores(seed, 5);
    for (i, score) in scores.iter().enumerate() {
        assert_eq!(
            u64::from_str_radix(field[&*format!("score({i})")], 16).unwrap(),
            *score
        );
    }
    assert_eq!(
        bucket_list(field["shard"]),
        assignment.shard(tenant).buckets()
    );
}

#[test]
fn limits_are_those_specified() {
    for (n, k) in [(1, 1), (8, 8), (9, 8), (65_536, 1), (65_536, 8)] {
        assert!(Assignment::new(n, k, b"").is_some(), "{n}, {k}");
    }
    for (n, k) in [
        (0, 0),
        (0, 1),
        (5, 0),
        (4, 5),
        (9, 9),
        (65_537, 2),
        (u32::MAX, 2),
    ] {
        assert!(Assignment::new(n, k, b"").is_none(), "{n}, {k}");
        let built = ShardedLimiter::builder()
            .quota(Quota::per_second(100_000))
            .buckets(n)
            .per_tenant(k)
            .build();
        assert!(built.is_err(), "{n}, {k}");
    }
    // The largest N scores every bucket up to 65535 (the proptests stay below
    // 4097 buckets, for speed).
    for (n, key) in [(65_535, &b"t"[..]), (65_536, b"t"), (65_536, b"")] {
        let a = Assignment::new(n, 8, b"example-salt").unwrap();
        assert_eq!(
            a.shard(key).buckets(),
            &reference_shard(n, 8, b"example-salt", key)[..]
        );
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
                ("tenant handle", default_cache.tenant(&key).shard()),
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
