//! Holding off when the upstream says stop (`upstream::HoldOff`), in
//! process on a `ManualClock`: nothing from the buckets held before the
//! instant, one token at it, every other bucket untouched, and never a
//! token more than the budget.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use shuffle_limiter::upstream::{HoldOff, MAX_HOLD_OFF};
use shuffle_limiter::{ManualClock, Quota, Request, ShardedLimiter};

/// 8 tokens/s over N = 8 buckets of 2 tokens, k = 2.
fn limiter(clock: &ManualClock) -> ShardedLimiter<ManualClock> {
    ShardedLimiter::builder()
        .quota(Quota::per_second(8).with_burst(16))
        .buckets(8)
        .per_tenant(2)
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn every_bucket_stops_until_the_instant_and_they_come_back_one_after_another() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    limiter.hold_off(HoldOff::all(Duration::from_secs(3)));
    // Bucket b of 8 (1/s each) comes back b/8 of a second after the
    // instant: together they resume at 8/s, not as a burst of 8.
    let back = |b: u32| Duration::from_secs(3) + Duration::from_millis(125) * b;
    for t in 0..50 {
        let tenant = format!("t{t}");
        let first = *limiter
            .shard(tenant.as_str())
            .buckets()
            .iter()
            .min()
            .unwrap();
        let denied = limiter.check(tenant.as_str()).unwrap_err();
        assert_eq!(denied.retry_after(), back(first), "{tenant}");
    }
    clock.advance(Duration::from_secs(3) - Duration::from_nanos(1));
    assert!(limiter.snapshot().iter().all(|b| b.available() == 0));
    clock.advance(Duration::from_nanos(1));
    let available = |limiter: &ShardedLimiter<ManualClock>| -> Vec<u64> {
        limiter.snapshot().iter().map(|b| b.available()).collect()
    };
    assert_eq!(available(&limiter), [1, 0, 0, 0, 0, 0, 0, 0]);
    clock.advance(Duration::from_millis(125 * 7));
    assert_eq!(available(&limiter), [1; 8]);
    clock.advance(Duration::from_millis(125));
    assert_eq!(available(&limiter), [2, 1, 1, 1, 1, 1, 1, 1]);
}

#[test]
fn a_tenant_hold_off_stops_its_own_buckets_and_no_other() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let held = limiter.shard("acme");
    limiter.hold_off(HoldOff::tenant("acme", Duration::from_secs(60)));
    assert_eq!(limiter.remaining("acme"), 0);
    let (mut apart, mut sharing) = (0, 0);
    for t in 0..200 {
        let tenant = format!("t{t}");
        let shared = limiter
            .shard(tenant.as_str())
            .buckets()
            .iter()
            .filter(|&&b| held.contains(b))
            .count();
        let left = limiter.remaining(tenant.as_str());
        match shared {
            0 => apart += u64::from(left == 4),
            1 => sharing += u64::from(left == 2),
            _ => assert_eq!(left, 0, "{tenant} holds acme's buckets"),
        }
        assert_eq!(left, 4 - 2 * shared as u64, "{tenant}");
    }
    assert!(
        apart > 50 && sharing > 50,
        "{apart} apart, {sharing} sharing"
    );
    // A user's hold-off stops the user's j buckets alone.
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(8).with_burst(16))
        .buckets(8)
        .per_tenant(4)
        .per_user(1)
        .clock(clock.clone())
        .build()
        .unwrap();
    let user = Request::tenant("acme").user("ann");
    limiter.hold_off(HoldOff::tenant(user.clone(), Duration::from_secs(60)));
    assert_eq!(limiter.remaining(user), 0);
    assert_eq!(limiter.remaining("acme"), 6);
}

#[test]
fn a_hold_off_is_cut_to_an_hour_and_never_adds_a_token() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let hold = HoldOff::all(Duration::MAX);
    assert_eq!(hold.duration(), MAX_HOLD_OFF);
    limiter.hold_off(hold);
    // The first of t's buckets comes back within an interval (1 s) of it.
    let longest = MAX_HOLD_OFF..MAX_HOLD_OFF + Duration::from_secs(1);
    assert!(longest.contains(&limiter.check("t").unwrap_err().retry_after()));
    // A hold-off of zero takes nothing.
    let fresh = self::limiter(&clock);
    fresh.hold_off(HoldOff::all(Duration::ZERO));
    assert_eq!(fresh.remaining("t"), 4);
    // A shorter hold-off after a longer one shortens nothing.
    limiter.hold_off(HoldOff::all(Duration::from_secs(1)));
    assert!(longest.contains(&limiter.check("t").unwrap_err().retry_after()));

    // Random checks, hold-offs and time: grants stay within R·t + B.
    let clock = ManualClock::new();
    let random = self::limiter(&clock);
    let limiter = &random;
    let (mut rng, mut granted, mut elapsed) = (0x9E37_79B9_7F4A_7C15u64, 0u64, 0u64);
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    for _ in 0..20_000 {
        match next() % 200 {
            0 => limiter.hold_off(HoldOff::all(Duration::from_millis(next() % 500))),
            1..=4 => {
                let tenant = format!("t{}", next() % 30);
                let before = limiter.remaining(tenant.as_str());
                limiter.hold_off(HoldOff::tenant(
                    tenant.as_str(),
                    Duration::from_millis(next() % 300),
                ));
                assert!(limiter.remaining(tenant.as_str()) <= before);
            }
            5..=60 => {
                let step = next() % 50_000_000;
                clock.advance(Duration::from_nanos(step));
                elapsed += step;
            }
            _ => {
                let tenant = format!("t{}", next() % 30);
                granted += u64::from(limiter.check(tenant.as_str()).is_ok());
            }
        }
    }
    // 8/s for `elapsed` ns, plus the burst of 16.
    let bound = 8 * elapsed / 1_000_000_000 + 16;
    assert!(granted <= bound, "{granted} granted, bound {bound}");
    assert!(
        granted > bound / 4,
        "{granted} granted of {bound}: the test drew too little"
    );
}

/// A check that starts once `hold_off` returned is held off, whatever the
/// threads: none races the change into a grant.
#[test]
fn no_check_after_a_hold_off_is_granted_from_other_threads() {
    let clock = ManualClock::new();
    let limiter = Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(1_000_000).with_burst(1_000_000))
            .buckets(4)
            .per_tenant(2)
            .clock(clock)
            .build()
            .unwrap(),
    );
    let held = Arc::new(AtomicBool::new(false));
    let (late, checked) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let threads: Vec<_> = (0..3u32)
        .map(|i| {
            let (limiter, held) = (Arc::clone(&limiter), Arc::clone(&held));
            let (late, checked) = (Arc::clone(&late), Arc::clone(&checked));
            std::thread::spawn(move || {
                // Checks until the hold-off, then 2 000 more.
                let (mut j, mut after_it) = (0u32, 0);
                while after_it < 2_000 {
                    let after = held.load(Ordering::Acquire);
                    let tenant = format!("t{}", (i * 7 + j) % 40);
                    let granted = limiter.check(tenant.as_str()).is_ok();
                    checked.fetch_add(1, Ordering::Relaxed);
                    if after {
                        after_it += 1;
                        late.fetch_add(u64::from(granted), Ordering::Relaxed);
                    }
                    j = j.wrapping_add(1);
                }
            })
        })
        .collect();
    // The checks run first (granted: a million tokens), then the hold-off.
    while checked.load(Ordering::Relaxed) < 3_000 {
        std::thread::yield_now();
    }
    limiter.hold_off(HoldOff::all(Duration::from_secs(60)));
    held.store(true, Ordering::Release);
    for thread in threads {
        thread.join().unwrap();
    }
    assert_eq!(late.load(Ordering::Relaxed), 0);
    assert!(limiter.check("t1").is_err());
}

/// The guide's upstream: 5 a second, 5 at once, over 5 buckets of one
/// token a second each, k = 1, so that one bucket is watched.
fn one_each(clock: &ManualClock) -> ShardedLimiter<ManualClock> {
    ShardedLimiter::builder()
        .quota(Quota::per_second(5).with_burst(5))
        .buckets(5)
        .per_tenant(1)
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn a_refund_or_a_settlement_during_a_hold_off_gives_no_token_before_the_instant() {
    let clock = ManualClock::new();
    let limiter = one_each(&clock);
    // A call in flight when another gets 429 with `Retry-After: 1` (one
    // interval of the bucket), and then found not sent: refunded.
    let in_flight = limiter.check("acme").unwrap();
    limiter.hold_off(HoldOff::tenant("acme", Duration::from_secs(1)));
    assert!(limiter.check("acme").is_err(), "held off");
    assert_eq!(limiter.refund(in_flight).given(), 1);
    assert!(limiter.check("acme").is_err(), "a token before the instant");
    clock.advance(Duration::from_secs(1));
    assert!(limiter.check("acme").is_ok(), "its token at the instant");

    // A settlement below the estimate, during a hold-off.
    let clock = ManualClock::new();
    let limiter = one_each(&clock);
    let estimate = limiter.check("acme").unwrap();
    limiter.hold_off(HoldOff::tenant("acme", Duration::from_secs(1)));
    clock.advance(Duration::from_millis(100));
    let _ = limiter.settle(estimate, 0);
    assert!(limiter.check("acme").is_err(), "a token before the instant");
    clock.advance(Duration::from_millis(900));
    assert!(limiter.check("acme").is_ok(), "its token at the instant");
    // Past the instant, a refund gives back as ever: the bucket is empty,
    // and the token comes back.
    let grant = limiter.check("acme");
    assert!(grant.is_err(), "one token a second");
    clock.advance(Duration::from_secs(1));
    let grant = limiter.check("acme").unwrap();
    assert_eq!(limiter.refund(grant).given(), 1);
    assert!(limiter.check("acme").is_ok(), "the token refunded");
}
