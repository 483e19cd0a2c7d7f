//! The assignment contract of `docs/assignment.md`: its known-answer vectors
//! and worked example, read out of the document itself so that the two cannot
//! drift, and a test for each property the document promises.

use std::collections::HashMap;

use sha2::{Digest, Sha256};
use shuffle_limiter::{Assignment, DEFAULT_TENANT_CACHE, ManualClock, Quota, ShardedLimiter};

#[path = "support/spec.rs"]
mod spec;
use spec::{bucket_list, code, hex_bytes, section};
#[path = "support/reference.rs"]
mod reference;
use reference::{DOMAIN, limiter, reference_scores, reference_shard};

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
