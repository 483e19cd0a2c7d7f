//! Borrowing from spill buckets above a reserve, driven by `ManualClock`:
//! the budget still holds, a lone tenant can use the whole of it, and the
//! owners of a bucket keep their reserve.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use shuffle_limiter::{Clock, ConfigError, ManualClock, Quota, Request, ShardedLimiter};

fn lending(quota: Quota, n: u32, k: u32, d: u32, reserve: f64) -> ShardedLimiter<ManualClock> {
    ShardedLimiter::builder()
        .quota(quota)
        .buckets(n)
        .per_tenant(k)
        .borrow_from(d)
        .lender_reserve(reserve)
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

#[test]
fn threads_borrowing_from_every_bucket_use_the_budget_exactly() {
    // R = 1000/s, B = 32: 8 buckets of 4 tokens, a token every 8 ms each.
    // Every tenant owns 2 buckets and may borrow all of the other 6 down to
    // nothing, so one tenant denied means every bucket is short of a token.
    // In each round the clock moves (by less than the 24 ms a drained bucket,
    // short of one token, takes to fill, so no refill is lost), then 3
    // threads race, each hammering
    // tenants of its own until one is denied. The grants so far must then be
    // exactly 4 + ⌊t / 8 ms⌋ per bucket: none granted twice, none left
    // behind, borrowed or not. A failure is noted and reported after the
    // scope, where a panic would leave the other threads at the barrier.
    let limiter = lending(Quota::per_second(1000).with_burst(32), 8, 2, 6, 0.0);
    let clock = limiter.clock().clone();
    let (granted, borrowed) = (AtomicU64::new(0), AtomicU64::new(0));
    let barrier = Barrier::new(4);
    let done = AtomicBool::new(false);
    let mut failure = None;
    std::thread::scope(|s| {
        for worker in 0..3u64 {
            let (limiter, granted, borrowed, barrier, done) =
                (&limiter, &granted, &borrowed, &barrier, &done);
            s.spawn(move || {
                let mut i = worker * 1_000;
                loop {
                    barrier.wait(); // the clock has moved, or the test is over
                    if done.load(Ordering::Relaxed) {
                        return;
                    }
                    i += 1;
                    let id = i.to_le_bytes();
                    let tenant = limiter.handle(&id);
                    // 32 tokens at most in all the buckets together.
                    for grant in (0..=32).map_while(|_| tenant.check().ok()) {
                        granted.fetch_add(1, Ordering::Relaxed);
                        borrowed.fetch_add(u64::from(grant.borrowed()), Ordering::Relaxed);
                    }
                    barrier.wait(); // every bucket drained
                }
            });
        }
        for round in 0..1_000u64 {
            barrier.wait();
            barrier.wait();
            let t = clock.now_nanos();
            let (got, want) = (granted.load(Ordering::Relaxed), 8 * (4 + t / 8_000_000));
            if got != want {
                failure = Some(format!(
                    "round {round}, at {t} ns: granted {got}, want {want}"
                ));
                break;
            }
            // 1 to 23 ms.
            clock.advance(Duration::from_micros(1_000 + (round * 3_701) % 22_000));
        }
        done.store(true, Ordering::Relaxed);
        barrier.wait();
    });
    assert_eq!(failure, None);
    // Most of the budget is in buckets the hammering tenant does not own.
    let (granted, borrowed) = (granted.into_inner(), borrowed.into_inner());
    assert!(borrowed * 2 > granted, "{borrowed} of {granted} borrowed");
}

#[test]
fn a_lone_tenant_borrowing_from_every_other_bucket_sustains_the_whole_rate() {
    // R = 100/s over 8 buckets; alone, a tenant with k = 2 gets 25 % of it
    // without borrowing, and with d = 6 nearly all of it, even with half of
    // every spill bucket's burst kept back (the reserve holds back burst,
    // not rate: a bucket emptied to its reserve still refills at its pace).
    let quota = Quota::per_second(100);
    let share = |d: u32, reserve: f64| {
        let limiter = lending(quota, 8, 2, d, reserve);
        let tenant = limiter.handle("alone");
        let mut grants = 0u64;
        for _ in 0..10_000 {
            grants += (0..=100).map_while(|_| tenant.check().ok()).count() as u64;
            limiter.clock().advance(Duration::from_millis(1));
        }
        // 10 s: at most R·t + B = 1000 + 100.
        assert!(grants <= 1_100, "{grants}");
        grants as f64 / 1_000.0
    };
    let alone = share(0, 0.5);
    assert!((0.25..0.28).contains(&alone), "without borrowing: {alone}");
    for reserve in [0.0, 0.5, 0.9] {
        let borrowing = share(6, reserve);
        assert!(borrowing >= 0.95, "reserve {reserve}: {borrowing}");
    }
    let some = share(2, 0.5);
    assert!((0.5..0.55).contains(&some), "d = 2: {some}");
}

#[test]
fn the_owners_of_a_bucket_keep_its_reserve_whatever_borrowers_take() {
    // 8 buckets of 4 tokens, k = 2, d = 2, reserve 1/2: a borrower leaves
    // 2 tokens in each spill bucket, and the owners may take them.
    let limiter = lending(Quota::per_second(32), 8, 2, 2, 0.5);
    let borrower = limiter.handle("borrower");
    let grants: Vec<_> = (0..=32).map_while(|_| borrower.check().ok()).collect();
    // Its own 8 tokens, then 2 above the reserve from each spill bucket.
    assert_eq!(grants.len(), 12);
    assert_eq!(grants.iter().filter(|g| g.borrowed()).count(), 4);
    let spill = borrower.shard().spill().to_vec();
    for grant in &grants {
        assert_eq!(grant.borrowed(), spill.contains(&grant.bucket()));
    }
    for &lender in &spill {
        // An owner of the lender that owns nothing else the borrower drew on.
        let owner = (0u32..1_000_000)
            .map(|i| limiter.handle(Request::tenant(i.to_le_bytes().to_vec())))
            .find(|t| {
                t.shard().contains(lender)
                    && t.shard().buckets().iter().all(|&b| {
                        b == lender || (!borrower.shard().contains(b) && !spill.contains(&b))
                    })
            })
            .unwrap();
        let from_lender = (0..=32)
            .map_while(|_| owner.check().ok())
            .filter(|g| g.bucket() == lender)
            .count();
        assert_eq!(from_lender, 2, "bucket {lender}: the reserve, to its owner");
    }
}

#[test]
fn borrowing_is_refused_beyond_eight_buckets_a_tenant_or_a_reserve_outside_0_to_1() {
    let base = || {
        ShardedLimiter::builder()
            .quota(Quota::per_second(100))
            .buckets(16)
            .per_tenant(2)
            .clock(ManualClock::new())
    };
    assert!(base().borrow_from(6).build().is_ok());
    let err = base().borrow_from(7).build().unwrap_err();
    assert_eq!(
        err,
        ConfigError::SpillTooLarge {
            spill: 7,
            per_tenant: 2,
            max: 6
        }
    );
    assert!(
        err.to_string().contains("use borrow_from of at most 6"),
        "{err}"
    );
    let small = base().buckets(4).borrow_from(3).build().unwrap_err();
    assert!(small.to_string().contains("at most 2"), "{small}");
    for reserve in [-0.1, 1.0, 2.0, f64::NAN, f64::INFINITY] {
        let err = base()
            .borrow_from(2)
            .lender_reserve(reserve)
            .build()
            .unwrap_err();
        assert!(
            matches!(&err, ConfigError::LenderReserve { .. })
                && err.to_string().contains("up to but not including 1"),
            "{reserve}: {err}"
        );
    }
    assert!(base().borrow_from(2).lender_reserve(0.0).build().is_ok());
    assert!(base().borrow_from(2).lender_reserve(0.999).build().is_ok());
}

#[test]
fn without_borrowing_nothing_is_borrowed_and_shards_do_not_change() {
    let off = lending(Quota::per_second(32), 8, 2, 0, 0.5);
    let on = lending(Quota::per_second(32), 8, 2, 4, 0.5);
    for i in 0..200u32 {
        let (a, b) = (off.shard(&i.to_le_bytes()), on.shard(&i.to_le_bytes()));
        assert_eq!(a.buckets(), b.buckets());
        assert!(a.spill().is_empty() && b.spill().len() == 4);
        assert!(b.spill().iter().all(|&s| !b.contains(s)));
    }
    let tenant = off.handle("t");
    let grants: Vec<_> = (0..=32).map_while(|_| tenant.check().ok()).collect();
    assert_eq!(grants.len(), 8);
    assert!(grants.iter().all(|g| !g.borrowed()));
}

#[test]
fn a_weighted_request_the_own_buckets_pay_together_is_not_borrowed() {
    // 8 buckets of 4 tokens, k = 2, d = 2, no reserve: a full spill bucket
    // could lend a request of up to 4 tokens. Pooling comes before
    // borrowing: a weight no own bucket pays alone but the two pay
    // together is paid by them, and the spill buckets keep every token.
    let limiter = lending(Quota::per_second(32), 8, 2, 2, 0.0);
    let tenant = limiter.handle("pooled");
    let (own, spill) = (
        tenant.shard().buckets().to_vec(),
        tenant.shard().spill().to_vec(),
    );
    let held = |buckets: &[u32]| -> Vec<u64> {
        let snapshot = limiter.snapshot();
        buckets
            .iter()
            .map(|&b| snapshot[b as usize].available())
            .collect()
    };
    let pooled = |n: u32| {
        let grant = limiter
            .handle(Request::tenant("pooled").tokens(n))
            .check()
            .unwrap();
        assert!(!grant.borrowed(), "weight {n}: {grant:?}");
        let mut paid: Vec<(u32, u32)> = grant
            .payments()
            .iter()
            .map(|p| (p.bucket(), p.tokens()))
            .collect();
        paid.sort();
        assert_eq!(held(&spill), [4, 4], "weight {n}: the spill buckets lent");
        paid
    };
    // Three tokens from each own bucket, one at a time: one left in each.
    for _ in 0..6 {
        assert!(!tenant.check().unwrap().borrowed());
    }
    assert_eq!(held(&own), [1, 1]);
    // Two tokens, which a spill bucket could lend alone.
    assert_eq!(
        pooled(2),
        [(own[0].min(own[1]), 1), (own[0].max(own[1]), 1)]
    );
    assert_eq!(tenant.remaining(), 0);
    // Full again, the whole sum of the two bursts, more than a spill
    // bucket holds.
    limiter.clock().advance(limiter.full_in("pooled"));
    assert_eq!(
        pooled(8),
        [(own[0].min(own[1]), 4), (own[0].max(own[1]), 4)]
    );
    assert_eq!(held(&own), [0, 0]);
    // Now the own buckets are empty: a spill bucket lends.
    assert!(
        limiter
            .handle(Request::tenant("pooled").tokens(2))
            .check()
            .unwrap()
            .borrowed()
    );
}

/// A lone tenant takes its own buckets and, of each spill bucket, what is
/// above the reserve, at once: k·b + d·(1 − r)·b where r·b is whole. A
/// reserve a float cannot hold exactly (0.1, 0.9, ...) landed a sliver
/// above its whole tokens and kept one more of each spill bucket (20 where
/// 22 were due at r = 0.9, so no token was ever lent).
#[test]
fn a_lone_tenant_borrows_down_to_the_reserve_exactly_whatever_the_float() {
    for r in [0.5, 0.25, 0.1, 0.2, 0.3, 0.6, 0.7, 0.9] {
        // 8 buckets of 10 tokens, k = 2, d = 2.
        let limiter = ShardedLimiter::builder()
            .quota(Quota::per_second(80).with_burst(80))
            .buckets(8)
            .per_tenant(2)
            .borrow_from(2)
            .lender_reserve(r)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let at_once = (0..100).map_while(|_| limiter.check("lone").ok()).count();
        let kept = (r * 10.0_f64).round() as usize;
        assert_eq!(at_once, 20 + 2 * (10 - kept), "r = {r}");
    }
}
