//! Users of a tenant, isolated one level down (`per_user`, `Request::user`):
//! the specified subset, read out of `docs/assignment.md` and recomputed
//! from its text, and a flooding user on `ManualClock` that takes down only
//! the users holding its very buckets.

use std::time::Duration;

use sha2::{Digest, Sha256};
use shuffle_limiter::{
    Assignment, ConfigError, DenialReason, ManualClock, Quota, Request, ShardedLimiter,
};

#[path = "support/spec.rs"]
mod spec;
use spec::{bucket_list, code, hex_bytes, section};

/// One row of "Known-answer vectors: users' subsets".
#[derive(Debug)]
struct UserVector {
    line: &'static str,
    buckets: u32,
    per_tenant: u32,
    per_user: u32,
    salt: Vec<u8>,
    tenant: Vec<u8>,
    user: Vec<u8>,
    seed: u64,
    shard: Vec<u32>,
    subset: Vec<u32>,
}

fn user_vectors() -> Vec<UserVector> {
    section("Known-answer vectors: users' subsets")
        .lines()
        .filter(|line| line.starts_with("| ") && line.as_bytes()[2].is_ascii_digit())
        .map(|line| {
            let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
            assert_eq!(cells.len(), 10, "{line}");
            let bytes = |cell: &str| match cell {
                "-" => Vec::new(),
                other => hex_bytes(code(other).unwrap_or_else(|| panic!("hex cell in {line}"))),
            };
            let user = bytes(cells[5]);
            if let Some(text) = code(cells[6]) {
                assert_eq!(text.as_bytes(), &user[..], "rendering differs: {line}");
            }
            UserVector {
                line,
                buckets: cells[0].parse().unwrap(),
                per_tenant: cells[1].parse().unwrap(),
                per_user: cells[2].parse().unwrap(),
                salt: match cells[3] {
                    "none" => Vec::new(),
                    other => code(other).unwrap().into(),
                },
                tenant: bytes(cells[4]),
                user,
                seed: u64::from_str_radix(code(cells[7]).unwrap(), 16).unwrap(),
                shard: bucket_list(cells[8]),
                subset: bucket_list(cells[9]),
            }
        })
        .collect()
}

/// The user's seed as the document's text defines it, written here from
/// the text rather than taken from the crate.
fn seed_from_the_text(salt: &[u8], tenant: &[u8], user: &[u8]) -> u64 {
    let mut message = b"shuffle-limiter/user/v1".to_vec();
    message.extend((salt.len() as u64).to_be_bytes());
    message.extend(salt);
    message.extend((tenant.len() as u64).to_be_bytes());
    message.extend(tenant);
    message.extend(user);
    let digest = Sha256::digest(&message);
    u64::from_be_bytes(digest[..8].try_into().unwrap())
}

#[test]
fn the_crate_reproduces_every_user_vector() {
    let vectors = user_vectors();
    assert!(vectors.len() >= 100, "{} user vectors", vectors.len());
    assert!(vectors.iter().any(|v| v.user.is_empty()));
    for v in vectors {
        let (n, k, j) = (v.buckets, v.per_tenant, v.per_user);
        let a = Assignment::new(n, k, &v.salt).unwrap();
        assert_eq!(a.user_seed(&v.tenant, &v.user), v.seed, "{}", v.line);
        assert_eq!(seed_from_the_text(&v.salt, &v.tenant, &v.user), v.seed);
        assert_eq!(a.shard(&v.tenant).buckets(), v.shard, "{}", v.line);
        let subset = a.user_subset(&v.tenant, &v.user, j).unwrap();
        assert_eq!(subset.buckets(), v.subset, "{}", v.line);
        let limiter = ShardedLimiter::builder()
            .quota(Quota::per_second(n))
            .buckets(n)
            .per_tenant(k)
            .per_user(j)
            .salt(&v.salt)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let nested = limiter.shard(Request::tenant(&v.tenant).user(&v.user));
        assert_eq!(nested.buckets(), v.subset, "limiter: {}", v.line);
    }
}

#[test]
fn the_worked_example_is_what_its_lines_say() {
    let text = section("Extension: a user's subset");
    let value = |name: &str| -> &str {
        let line = text
            .lines()
            .find(|l| l.starts_with(name) && l[name.len()..].trim_start().starts_with('='))
            .unwrap_or_else(|| panic!("no line {name}"));
        line.split('=').nth(1).unwrap().trim()
    };
    let (salt, tenant, user) = (b"example-salt", b"tenant-0", b"user-7");
    let mut message = b"shuffle-limiter/user/v1".to_vec();
    message.extend(12u64.to_be_bytes());
    message.extend(salt);
    message.extend(8u64.to_be_bytes());
    message.extend(tenant);
    message.extend(user);
    assert_eq!(hex_bytes(value("U ")), message);
    assert_eq!(hex_bytes(value("SHA-256(U)")), Sha256::digest(&message)[..]);
    let a = Assignment::new(8, 4, salt).unwrap();
    let seed = u64::from_str_radix(value("user_seed"), 16).unwrap();
    assert_eq!(a.user_seed(tenant, user), seed);
    assert_eq!(bucket_list(value("shard")), a.shard(tenant).buckets());
    let subset = a.user_subset(tenant, user, 2).unwrap();
    assert_eq!(bucket_list(value("subset")), subset.buckets());
}

#[test]
fn buckets_per_user_outside_one_to_k_say_what_to_change() {
    let build = |j| {
        ShardedLimiter::builder()
            .quota(Quota::per_second(8))
            .per_tenant(4)
            .per_user(j)
            .build()
    };
    for j in [0, 5] {
        let err = build(j).unwrap_err();
        assert_eq!(
            err,
            ConfigError::PerUser {
                per_user: j,
                per_tenant: 4
            }
        );
        assert!(
            err.to_string().contains("use per_user from 1 to 4"),
            "{err}"
        );
    }
    // Unset, every user draws on all of its tenant's buckets.
    let all = ShardedLimiter::builder()
        .quota(Quota::per_second(8))
        .per_tenant(4)
        .build()
        .unwrap();
    assert_eq!(all.per_user(), 4);
    assert!(
        all.shard(Request::tenant("t").user("u"))
            .same_set(&all.shard("t"))
    );
}

/// `rate` per second (and as many at once) over 8 buckets, 4 per tenant, 2
/// per user.
fn four_then_two(rate: u32) -> ShardedLimiter<ManualClock> {
    ShardedLimiter::builder()
        .quota(Quota::per_second(rate))
        .buckets(8)
        .per_tenant(4)
        .per_user(2)
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

#[test]
fn a_user_may_ask_for_what_its_buckets_hold_together() {
    // 8 buckets of 2 tokens; a user holds 2 of its tenant's 4.
    let limiter = four_then_two(16);
    let user = limiter.handle(Request::tenant("acme").user("u"));
    assert_eq!(
        user.shard(),
        limiter.shard(Request::tenant("acme").user("u"))
    );
    let err = limiter
        .handle(Request::tenant("acme").user("u").tokens(5))
        .check()
        .unwrap_err();
    assert_eq!(err.reason(), DenialReason::NeverFits { asked: 5, most: 4 });
    assert_eq!(err.retry_after(), Duration::MAX);
    let grant = limiter
        .check(Request::tenant("acme").user("u").tokens(4))
        .unwrap();
    let paid: Vec<u32> = grant.payments().iter().map(|p| p.bucket()).collect();
    assert!(paid.iter().all(|&b| user.shard().contains(b)), "{paid:?}");
    let denied = limiter
        .check(Request::tenant("acme").user("u"))
        .unwrap_err();
    assert_eq!(denied.reason(), DenialReason::Limited);
    // The tenant's other two buckets are untouched.
    assert_eq!(limiter.remaining("acme"), 4);
}

#[test]
fn a_flooding_user_takes_down_only_the_users_holding_its_pair() {
    // R = 800/s, B = 800 over N = 8: 100 tokens a bucket, 100/s each. The
    // tenant holds k = 4 buckets, each user j = 2 of them. user-0 floods at
    // 50 times what its two buckets sustain (10 000/s, in 100 ms steps,
    // first in every step); the tenant's 299 other users ask once every 2 s
    // each, and 100 other tenants once a second. A user sharing one bucket
    // with the flooder draws on its other one, which the users of up to
    // half the pairs share: about 60 requests/s against its 100/s.
    const STEP: Duration = Duration::from_millis(100);
    const STEPS: u32 = 300;
    let limiter = four_then_two(800);
    let flooder = limiter.handle(Request::tenant("acme").user("user-0"));
    let users: Vec<_> = (1..300)
        .map(|u| limiter.handle(Request::tenant("acme").user(format!("user-{u}"))))
        .collect();
    let tenants: Vec<_> = (0..100)
        .map(|t| limiter.handle(Request::tenant(format!("other-{t}"))))
        .collect();
    let (mut asked, mut granted) = (vec![0u32; users.len()], vec![0u32; users.len()]);
    let mut all_granted = 0u64;
    for step in 0..STEPS {
        for _ in 0..1_000 {
            match flooder.check() {
                Ok(_) => all_granted += 1,
                Err(_) => break, // nothing refills within the step
            }
        }
        for (i, user) in users.iter().enumerate() {
            if (step + i as u32).is_multiple_of(20) {
                asked[i] += 1;
                let ok = user.check().is_ok();
                granted[i] += u32::from(ok);
                all_granted += u64::from(ok);
            }
        }
        for (i, tenant) in tenants.iter().enumerate() {
            if (step + i as u32).is_multiple_of(10) {
                all_granted += u64::from(tenant.check().is_ok());
            }
        }
        limiter.clock().advance(STEP);
    }
    let flood = flooder.shard();
    let mut twins = 0;
    for (i, user) in users.iter().enumerate() {
        let share = f64::from(granted[i]) / f64::from(asked[i]);
        if user.shard().same_set(&flood) {
            twins += 1;
            assert!(
                share < 0.05,
                "user-{}, the flooder's pair, got {share}",
                i + 1
            );
        } else {
            assert!(
                share >= 0.99,
                "user-{} ({:?}) got {share}",
                i + 1,
                user.shard()
            );
        }
    }
    // 1 in C(4, 2) = 6 users hold the flooder's pair: 49.8 of 299 expected.
    assert!(
        (30..=70).contains(&twins),
        "{twins} users share the flooder's pair"
    );
    // The budget over the whole run: R · t + B.
    let seconds = u64::from(STEPS) * STEP.as_millis() as u64 / 1_000;
    assert!(all_granted <= 800 * seconds + 800, "{all_granted} granted");
}
