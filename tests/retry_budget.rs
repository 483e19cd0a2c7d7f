//! Retry budgets per bucket (`upstream::RetryBudget`) on a `ManualClock`:
//! a tenant whose calls keep failing retries no more than its budget, and
//! every tenant whose shard differs keeps its retries untouched.

use std::time::Duration;

use shuffle_limiter::upstream::RetryBudget;
use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};

#[test]
fn a_failing_tenant_spends_its_own_shards_retries_alone() {
    let clock = ManualClock::new();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(1000))
        .buckets(8)
        .per_tenant(2)
        .clock(clock.clone())
        .build()
        .unwrap();
    let retries = RetryBudget::of(&limiter).most(1000).clock(clock.clone());
    let failing = limiter.shard("failing");
    let apart: Vec<String> = (0..200)
        .map(|t| format!("t{t}"))
        .filter(|t| {
            limiter
                .shard(t.as_str())
                .buckets()
                .iter()
                .all(|&b| !failing.contains(b))
        })
        .collect();
    assert!(apart.len() > 50);
    // Every tenant calls for a while; their grants fill their budgets.
    for _ in 0..20 {
        for tenant in apart.iter().map(String::as_str).chain(["failing"]) {
            if let Ok(grant) = limiter.check(tenant) {
                retries.deposit(&grant);
            }
        }
        clock.advance(Duration::from_millis(100));
    }
    let before: Vec<u64> = apart
        .iter()
        .map(|t| retries.banked(&limiter.shard(t.as_str())))
        .collect();
    // Half of the failing tenant's calls fail, and each failure asks to retry.
    let (mut calls, mut retried) = (0u64, 0u64);
    for step in 0..2_000u64 {
        if let Ok(grant) = limiter.check("failing") {
            calls += 1;
            retries.deposit(&grant);
            if step % 2 == 0 && retries.withdraw(&failing) {
                retried += 1;
            }
        }
        clock.advance(Duration::from_millis(5));
    }
    // 10 s at most 2 floor retries a second (one per bucket), plus 0.2 of
    // its calls, plus what it banked before (20 calls: 4).
    let bound = calls / 5 + 2 * 10 + 4 + 1;
    assert!(
        retried <= bound,
        "{retried} retries of {calls} calls, bound {bound}"
    );
    assert!(
        retried >= calls / 5,
        "{retried} of {calls}: the budget gave too little"
    );
    let after: Vec<u64> = apart
        .iter()
        .map(|t| retries.banked(&limiter.shard(t.as_str())))
        .collect();
    assert_eq!(before, after, "a tenant apart lost retries");
}

#[test]
fn deposits_are_capped_and_the_floor_paces_retries() {
    let clock = ManualClock::new();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(10_000))
        .buckets(2)
        .per_tenant(1)
        .clock(clock.clone())
        .build()
        .unwrap();
    let retries = RetryBudget::of(&limiter)
        .ratio(1.5)
        .most(3)
        .floor_per_second(2)
        .clock(clock.clone());
    let shard = limiter.shard("t");
    for _ in 0..100 {
        retries.deposit(&limiter.check("t").unwrap());
    }
    assert_eq!(retries.banked(&shard), 3, "capped at 3");
    // 3 banked, then one from the floor, then none until 500 ms later.
    let taken = (0..10).filter(|_| retries.withdraw(&shard)).count();
    assert_eq!(taken, 4);
    clock.advance(Duration::from_millis(499));
    assert!(!retries.withdraw(&shard));
    clock.advance(Duration::from_millis(1));
    assert!(retries.withdraw(&shard));
    // A ratio beyond 1 deposits one retry per token: 1 call, 1 retry.
    let retries = RetryBudget::of(&limiter).ratio(7.0).floor_per_second(0);
    retries.deposit(&limiter.check("t").unwrap());
    assert!(retries.withdraw(&shard) && !retries.withdraw(&shard));
}
