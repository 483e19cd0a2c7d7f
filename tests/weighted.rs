//! Weighted requests paid by several of a tenant's buckets together, driven
//! by `ManualClock`: every tenant may ask for what its buckets hold
//! together, whichever buckets its id drew, and the budget holds with
//! threads racing such requests.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use shuffle_limiter::{Clock, DenialReason, ManualClock, Quota, Request, ShardedLimiter};

fn limiter(quota: Quota, n: u32, k: u32) -> ShardedLimiter<ManualClock> {
    ShardedLimiter::builder()
        .quota(quota)
        .buckets(n)
        .per_tenant(k)
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

#[test]
fn every_tenant_may_ask_for_what_its_buckets_hold_together() {
    // B = 10 over 8 buckets: two of 2 tokens, six of 1. Paid by one bucket,
    // a weight of 2 was possible only for tenants holding a bucket of 2;
    // together, every tenant may ask for the sum of its two bursts.
    let limiter = limiter(Quota::per_second(10), 8, 2);
    let bursts: Vec<u32> = limiter.snapshot().iter().map(|b| b.burst()).collect();
    assert_eq!(bursts, [2, 2, 1, 1, 1, 1, 1, 1]);
    let mut pooled = 0;
    for t in 0..200 {
        let tenant = format!("tenant-{t}");
        let sum: u32 = limiter
            .shard(&tenant)
            .buckets()
            .iter()
            .map(|&b| bursts[b as usize])
            .sum();
        let err = limiter
            .check(Request::tenant(&tenant).tokens(sum + 1))
            .unwrap_err();
        let never = DenialReason::NeverFits {
            asked: sum + 1,
            most: sum,
        };
        assert_eq!(err.reason(), never, "{tenant}");
        assert_eq!(err.retry_after(), Duration::MAX, "{tenant}");
        // A fresh tenant's buckets may have been drawn on by earlier ones:
        // wait until they are full, then take the lot at once.
        let clock = limiter.clock();
        clock.advance(limiter.full_in(&tenant));
        let grant = limiter.check(Request::tenant(&tenant).tokens(sum)).unwrap();
        let paid: u32 = grant.payments().iter().map(|p| p.tokens()).sum();
        assert_eq!(paid, sum, "{tenant}: {grant:?}");
        assert_eq!(grant.remaining(), 0, "{tenant}");
        assert_eq!(limiter.remaining(&tenant), 0, "{tenant}");
        pooled += usize::from(grant.payments().len() == 2);
    }
    assert_eq!(pooled, 200, "every sum of two bursts needs both buckets");
}

#[test]
fn a_request_paid_together_is_all_or_nothing() {
    // Two buckets of 3, both the tenant's; 2 + 2 tokens left: a weight of 5
    // is refused whole and takes nothing, a weight of 4 takes both.
    let limiter = limiter(Quota::per_second(6), 2, 2);
    let tenant = limiter.handle("t");
    let weighed = |n: u32| limiter.handle(Request::tenant("t").tokens(n));
    weighed(2).check().unwrap();
    assert_eq!(tenant.remaining(), 4);
    let denied = weighed(5).check().unwrap_err();
    assert_eq!(denied.reason(), DenialReason::Limited);
    assert_eq!(tenant.remaining(), 4, "a denial takes nothing");
    // A token every 333.3 ms per bucket: the fifth arrives with the next.
    assert_eq!(denied.retry_after(), Duration::from_nanos(333_333_334));
    let grant = weighed(4).check().unwrap();
    assert_eq!(grant.payments().len(), 2);
    assert_eq!(tenant.remaining(), 0);
}

#[test]
fn threads_racing_weighted_requests_never_exceed_the_budget() {
    // R = 1000/s, B = 32: 8 buckets of 4 tokens, a token every 8 ms each;
    // every tenant owns 2. In each round the clock moves by 8 to 24 ms
    // (whole tokens, and fewer than a bucket holds, so an empty bucket loses
    // no refill), then 3 threads race weighted requests (1 to 8 tokens) for
    // tenants of their own until each is denied a few times in a row, and
    // then the main thread takes whatever is left, token by token. The
    // grants must never exceed 4 + ⌊t / 8 ms⌋ per bucket. A request paid
    // together that loses a race is given back, so the grants reach that
    // budget exactly, but for tokens a give-back could not return because
    // another request had drawn on the bucket in between: those are
    // counted, and must stay rare.
    let limiter = limiter(Quota::per_second(1000).with_burst(32), 8, 2);
    let clock = limiter.clock().clone();
    let (granted, pooled) = (AtomicU64::new(0), AtomicU64::new(0));
    let barrier = Barrier::new(4);
    let done = AtomicBool::new(false);
    let mut failure = None;
    let mut lost = 0;
    std::thread::scope(|s| {
        for worker in 0..3u64 {
            let (limiter, granted, pooled, barrier, done) =
                (&limiter, &granted, &pooled, &barrier, &done);
            s.spawn(move || {
                let mut i = worker * 1_000_000;
                loop {
                    barrier.wait(); // the clock has moved, or the test is over
                    if done.load(Ordering::Relaxed) {
                        return;
                    }
                    let mut denied_in_a_row = 0;
                    while denied_in_a_row < 4 {
                        i += 1;
                        let n = 1 + (i * 7 % 8) as u32;
                        match limiter.check(Request::tenant(&i.to_le_bytes()).tokens(n)) {
                            Ok(grant) => {
                                granted.fetch_add(u64::from(n), Ordering::Relaxed);
                                let several = grant.payments().len() > 1;
                                pooled.fetch_add(u64::from(several), Ordering::Relaxed);
                                denied_in_a_row = 0;
                            }
                            Err(denied) => {
                                // Never a weight the buckets cannot hold.
                                assert_eq!(denied.reason(), DenialReason::Limited, "{n}");
                                denied_in_a_row += 1;
                            }
                        }
                    }
                    barrier.wait(); // the round is over
                }
            });
        }
        for round in 0..300u64 {
            barrier.wait();
            barrier.wait();
            let t = clock.now_nanos();
            let budget = 8 * (4 + t / 8_000_000);
            granted.fetch_add(drain(&limiter), Ordering::Relaxed);
            let got = granted.load(Ordering::Relaxed);
            if got > budget {
                failure = Some(format!(
                    "round {round}, at {t} ns: granted {got} > {budget}"
                ));
                break;
            }
            lost = budget - got;
            clock.advance(Duration::from_millis(8 * (1 + round % 3)));
        }
        done.store(true, Ordering::Relaxed);
        barrier.wait();
    });
    assert_eq!(failure, None);
    let granted = granted.load(Ordering::Relaxed);
    assert!(
        pooled.load(Ordering::Relaxed) > 100,
        "requests paid together were raced"
    );
    assert!(
        lost * 1000 <= granted,
        "{lost} of {granted} tokens lost to give-backs that lost a race"
    );
}

/// Takes every token left in every bucket, one at a time; returns how many.
/// Bounded, so that a limiter granting past its burst fails here instead of
/// looping for ever.
fn drain(limiter: &ShardedLimiter<ManualClock>) -> u64 {
    let most = u64::from(limiter.quota().burst());
    let mut taken = 0;
    for t in 0u32..100_000 {
        if limiter.snapshot().iter().all(|b| b.available() == 0) {
            return taken;
        }
        let tenant = limiter.handle(Request::tenant(format!("drain-{t}")));
        while taken <= most && tenant.check().is_ok() {
            taken += 1;
        }
        assert!(taken <= most, "granted past the burst of {most}");
    }
    panic!("100 000 tenants did not empty every bucket")
}

/// The answer of the store seam's check (what code generic over the store
/// calls), which the in-process store gives at once.
fn seam_check(
    limiter: &ShardedLimiter<ManualClock>,
    request: Request<'_>,
) -> Result<shuffle_limiter::Grant, shuffle_limiter::Denied> {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    let checking = shuffle_limiter::Limit::check(limiter, request);
    match std::pin::pin!(checking).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(answer) => answer,
        Poll::Pending => panic!("the in-process store answers at once"),
    }
}

#[test]
fn the_store_seam_refuses_a_weight_that_never_fits_as_the_check_does() {
    let limiter = limiter(Quota::per_second(10), 8, 2);
    let most: u32 = limiter
        .shard("t")
        .buckets()
        .iter()
        .map(|&b| limiter.snapshot()[b as usize].burst())
        .sum();
    let heavy = Request::tenant("t").tokens(most + 1);
    let by_seam = seam_check(&limiter, heavy.clone()).unwrap_err();
    let by_check = limiter.check(heavy).unwrap_err();
    assert_eq!(by_seam.reason(), by_check.reason());
    assert!(
        matches!(by_seam.reason(), DenialReason::NeverFits { asked, most: m } if asked == most + 1 && m == most),
        "{by_seam:?}"
    );
    // Nothing was taken: the whole burst is still there.
    assert_eq!(
        seam_check(&limiter, Request::tenant("t").tokens(most))
            .unwrap()
            .tokens(),
        most
    );
}
