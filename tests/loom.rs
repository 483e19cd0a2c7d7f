//! Every interleaving of a few concurrent checks, model-checked with loom.
//!
//! ```text
//! RUSTFLAGS="--cfg shuffle_limiter_loom" cargo test --release --test loom
//! ```
#![cfg(shuffle_limiter_loom)]

use loom::thread;
use shuffle_limiter::{Assignment, ManualClock, Quota, ShardedLimiter};

fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(3, f);
}

/// Explores every interleaving with at most `preemptions` forced switches.
fn model_bounded(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(preemptions);
    builder.check(f);
}

fn limiter(quota: Quota, n: u32, k: u32, cache: usize) -> ShardedLimiter<ManualClock> {
    ShardedLimiter::builder()
        .quota(quota)
        .buckets(n)
        .per_tenant(k)
        .tenant_cache(cache)
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

#[test]
fn one_token_is_granted_once() {
    model(|| {
        let limiter = loom::sync::Arc::new(limiter(Quota::per_second(1), 1, 1, 0));
        let other = limiter.clone();
        let t = thread::spawn(move || other.check("a").is_ok());
        let here = limiter.check("a").is_ok();
        let there = t.join().unwrap();
        assert!(here ^ there, "exactly one of the two checks is granted");
    });
}

#[test]
fn two_buckets_pay_two_racing_checks_once_each() {
    model(|| {
        // Two buckets of one token each, both the tenant's.
        let limiter = loom::sync::Arc::new(limiter(Quota::per_second(2), 2, 2, 0));
        let other = limiter.clone();
        let t = thread::spawn(move || other.check("a").map(|g| g.bucket()));
        let here = limiter.check("a").map(|g| g.bucket());
        let there = t.join().unwrap();
        let (Ok(a), Ok(b)) = (here, there) else {
            panic!("two tokens, two checks: both must be granted ({here:?}, {there:?})");
        };
        assert_ne!(a, b, "each bucket's token is taken once");
        assert!(limiter.check("a").is_err(), "and nothing is left");
    });
}

#[test]
fn the_shard_cache_never_returns_a_torn_or_foreign_shard() {
    model_bounded(2, || {
        // One set of five ways. "a" is cached first, in way 0; while another
        // thread reads it (and "b" from a possibly half-written way), five
        // more tenants are written, the fifth of them over "a".
        let limiter = loom::sync::Arc::new(limiter(Quota::per_second(64), 64, 4, 3));
        let reference = Assignment::new(64, 4, b"").unwrap();
        assert_eq!(limiter.shard("a"), reference.shard("a"));
        let other = limiter.clone();
        let reference2 = reference.clone();
        let t = thread::spawn(move || {
            for key in ["a", "b"] {
                assert_eq!(other.shard(key), reference2.shard(key));
            }
        });
        for key in ["b", "c", "d", "e", "f"] {
            assert_eq!(limiter.shard(key), reference.shard(key));
        }
        t.join().unwrap();
    });
}
