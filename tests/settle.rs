//! Settling grants at their real cost (`settle`), in process on a
//! `ManualClock`: the difference given back or charged as debt to the
//! buckets that paid, at most a burst of debt each, never to a bucket gone
//! since, and the budget held.

use std::time::Duration;

use shuffle_limiter::{ManualClock, Quota, Request, ShardedLimiter};

/// 100 tokens/s over N = 2 buckets of 50, k = 1.
fn limiter(clock: &ManualClock) -> ShardedLimiter<ManualClock> {
    ShardedLimiter::builder()
        .quota(Quota::per_second(100))
        .buckets(2)
        .max_buckets(4)
        .per_tenant(1)
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn a_cost_below_the_estimate_goes_back_and_one_above_is_charged() {
    let limiter = limiter(&ManualClock::new());
    let grant = limiter.check(Request::tenant("t").tokens(20)).unwrap();
    let settled = limiter.settle(grant, 12);
    assert_eq!((settled.refunded().given(), settled.charged()), (8, 0));
    assert_eq!(limiter.remaining("t"), 38);
    let grant = limiter.check(Request::tenant("t").tokens(20)).unwrap();
    assert_eq!(limiter.remaining("t"), 18);
    // 30 more than the estimate: 18 left, then 12 of debt.
    let settled = limiter.settle(grant, 50);
    assert_eq!((settled.charged(), settled.forgiven()), (30, 0));
    assert_eq!(limiter.remaining("t"), 0);
    let denied = limiter.check("t").unwrap_err();
    // 12 tokens of debt and the one asked for, at 50/s a bucket.
    assert_eq!(denied.retry_after(), Duration::from_millis(260));
}

#[test]
fn a_cost_equal_to_the_estimate_settles_nothing() {
    let limiter = limiter(&ManualClock::new());
    let grant = limiter.check(Request::tenant("t").tokens(20)).unwrap();
    let settled = limiter.settle(grant, 20);
    assert_eq!(settled, Default::default(), "even: nothing to settle");
    assert_eq!(limiter.remaining("t"), 30);
}

#[test]
fn debt_stops_at_one_burst_and_the_rest_is_forgiven() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let grant = limiter.check(Request::tenant("t").tokens(10)).unwrap();
    let settled = limiter.settle(grant, 1_000);
    // 40 left, then a burst (50) of debt: 90 of the 990 beyond the grant.
    assert_eq!((settled.charged(), settled.forgiven()), (90, 900));
    assert_eq!(
        limiter.check("t").unwrap_err().retry_after(),
        Duration::from_millis(1_020)
    );
    // The other bucket, another tenant's, paid nothing.
    let other = (0..1_000_000)
        .map(|i| format!("o{i}"))
        .find(|o| limiter.shard(o.as_str()) != limiter.shard("t"))
        .unwrap();
    assert_eq!(limiter.remaining(other.as_str()), 50);
    // A grant that took nothing (0 tokens) has no bucket to charge, not
    // even its full one.
    let none = limiter.check(Request::tenant(&other).tokens(0)).unwrap();
    let settled = limiter.settle(none, 5);
    assert_eq!((settled.charged(), settled.forgiven()), (0, 5));
    assert_eq!(limiter.remaining(other.as_str()), 50);
}

#[test]
fn a_bucket_gone_since_the_grant_is_charged_nothing() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    limiter.set_buckets(4).unwrap();
    clock.advance(Duration::from_secs(1)); // the buckets added fill
    let tenant = (0..1_000_000)
        .map(|i| format!("t{i}"))
        .find(|t| limiter.shard(t.as_str()).buckets()[0] >= 2)
        .unwrap();
    let grant = limiter
        .check(Request::tenant(tenant.as_str()).tokens(5))
        .unwrap();
    limiter.set_buckets(2).unwrap();
    limiter.set_buckets(4).unwrap(); // a bucket of that number again: another one
    let settled = limiter.settle(grant, 15);
    assert_eq!((settled.charged(), settled.forgiven()), (0, 10));
}

#[test]
fn estimates_and_settlements_keep_the_budget() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut granted, mut used, mut elapsed) = (0u64, 0i64, 0u64);
    for _ in 0..20_000 {
        if next() % 4 == 0 {
            let step = next() % 20_000_000;
            clock.advance(Duration::from_nanos(step));
            elapsed += step;
            continue;
        }
        let tenant = format!("t{}", next() % 10);
        let estimate = 1 + (next() % 8) as u32;
        if let Ok(grant) = limiter.check(Request::tenant(tenant.as_str()).tokens(estimate)) {
            granted += u64::from(estimate);
            let actual = (next() % 16) as u32;
            let settled = limiter.settle(grant, actual);
            used += i64::from(estimate) - i64::from(settled.refunded().given())
                + i64::from(settled.charged());
            assert!(settled.charged() + settled.forgiven() <= actual.saturating_sub(estimate));
        }
    }
    // Grants obey R·t + B; what settled costs took at most a burst of
    // debt more.
    let (rate, burst) = (100 * elapsed / 1_000_000_000, 100);
    assert!(
        granted <= rate + burst,
        "{granted} granted, {rate} + {burst}"
    );
    assert!(used <= (rate + 2 * burst) as i64, "{used} used");
    assert!(
        used > rate as i64 / 2,
        "{used} used of {rate}: the test drew too little"
    );
}

/// The store seam's answer (what code generic over the store calls), which
/// the in-process store gives at once.
fn ready<T>(future: impl std::future::Future<Output = T>) -> T {
    use std::task::{Context, Poll, Waker};
    match std::pin::pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(answer) => answer,
        Poll::Pending => panic!("the in-process store answers at once"),
    }
}

#[test]
fn the_store_seam_settles_as_the_limiter_does() {
    use shuffle_limiter::Limit;
    let limiter = limiter(&ManualClock::new());
    let grant = limiter.check(Request::tenant("t").tokens(20)).unwrap();
    let settled = ready(Limit::settle(&limiter, grant, 12)).unwrap();
    assert_eq!((settled.refunded().given(), settled.charged()), (8, 0));
    assert_eq!(limiter.remaining("t"), 38);
    let grant = limiter.check(Request::tenant("t").tokens(20)).unwrap();
    let settled = ready(Limit::settle(&limiter, grant, 30)).unwrap();
    assert_eq!((settled.refunded().given(), settled.charged()), (0, 10));
    assert_eq!(limiter.remaining("t"), 8);
}

/// Promise: src/guide/borrowing.md:14-15 "The owners of a bucket may always
/// take it to zero; a borrower never below the reserve."; src/grant/settle.rs
/// (`Settled`) "what no bucket could take is forgiven, never taken from
/// another tenant's bucket"; src/guide/upstream.md "a tenant that
/// underestimates pays with its own buckets' future and never with
/// another's". Settling a borrowed grant charges the lender's bucket (another
/// tenant's own) into a burst of debt, below the reserve its owners keep.
#[test]
fn settling_a_borrowed_grant_leaves_the_lenders_reserve() {
    let clock = ManualClock::new();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(8).with_burst(8)) // 2 buckets of 4 tokens
        .buckets(2)
        .per_tenant(1)
        .borrow_from(1)
        .lender_reserve(0.5) // owners keep 2 of 4
        .clock(clock.clone())
        .build()
        .unwrap();
    let borrower = "t0";
    let own = limiter.shard(borrower).buckets()[0];
    let owner = (1..)
        .map(|t| format!("t{t}"))
        .find(|t| limiter.shard(t.as_str()).buckets()[0] != own)
        .unwrap();
    // The borrower drains its own bucket, then borrows down to the reserve.
    let mut lent = Vec::new();
    while let Ok(grant) = limiter.check(borrower) {
        if grant.borrowed() {
            lent.push(grant);
        }
    }
    assert_eq!(lent.len(), 2, "4 tokens above a reserve of 2 lent out");
    // Its cost was more than estimated: settle one lent grant at 10 tokens.
    let settled = limiter.settle(lent.pop().unwrap(), 10);
    // The owners still hold their reserve: 2 tokens, with no time passing.
    let owners = (0..10)
        .map_while(|_| limiter.check(owner.as_str()).ok())
        .count();
    assert_eq!(
        owners,
        2,
        "owners got {owners} of their reserve of 2 (settle charged {} to their bucket)",
        settled.charged()
    );
}

/// What stays of a borrowed grant once a part of it is refunded is still
/// borrowed: settled above its estimate, its extra is forgiven, not
/// charged to the lender's bucket below its owners' reserve.
#[test]
fn the_rest_of_a_borrowed_grant_after_a_part_settles_as_borrowed() {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(8).with_burst(8)) // 2 buckets of 4 tokens
        .buckets(2)
        .per_tenant(1)
        .borrow_from(1)
        .lender_reserve(0.5) // owners keep 2 of 4
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let borrower = "t0";
    let own = limiter.shard(borrower).buckets()[0];
    let owner = (1..)
        .map(|t| format!("t{t}"))
        .find(|t| limiter.shard(t.as_str()).buckets()[0] != own)
        .unwrap();
    let own_tokens = Request::tenant(borrower).tokens(4);
    assert!(limiter.check(own_tokens).is_ok_and(|g| !g.borrowed()));
    // Both tokens above the reserve, in one grant.
    let mut lent = limiter.check(Request::tenant(borrower).tokens(2)).unwrap();
    assert!(lent.borrowed());
    limiter.refund(lent.part(1).unwrap()); // the lender holds 3 again
    assert!(lent.borrowed(), "the rest of a borrowed grant is borrowed");
    let settled = limiter.settle(lent, 10);
    assert_eq!(settled.charged(), 0, "{settled:?}");
    let owners = (0..10)
        .map_while(|_| limiter.check(owner.as_str()).ok())
        .count();
    assert_eq!(owners, 3, "the owners' reserve of 2 and the token refunded");
}

/// Edge: ManualClock near u64::MAX. Promise (changing.rs, `set_quota`): the
/// change "never hands out a fresh burst"; a bucket in debt (from `settle`)
/// stays empty until the debt is paid (rescale keeps what is owed beyond
/// the capacity). At the latest clock reading, a bucket in debt moved to a
/// longer interval overflows: a panic (debug) in `set_quota`, a full bucket
/// (release).
#[test]
fn a_quota_change_of_a_bucket_in_debt_at_the_latest_reading_keeps_the_debt() {
    let clock = ManualClock::new();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::with_period(1, Duration::from_nanos((1 << 61) - 1)).with_burst(1))
        .buckets(1)
        .per_tenant(1)
        .clock(clock.clone())
        .build()
        .unwrap();
    clock.set_nanos(u64::MAX);
    let grant = limiter.check("t").unwrap();
    let settled = limiter.settle(grant, 2); // one token of debt
    assert_eq!(settled.charged(), 1);
    limiter
        .set_quota(Quota::with_period(1, Duration::from_nanos(1 << 62)).with_burst(1))
        .unwrap();
    // No time has passed: one grant plus one token of debt on a burst of 1.
    assert!(
        limiter.check("t").is_err(),
        "a bucket in debt granted again"
    );
}
