//! Changing the quota of a running limiter, and refunds, with threads
//! checking all along: the budget around a change, the shares each bucket
//! keeps, and what a refund may give back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use shuffle_limiter::{
    Clock, ConfigError, DenialReason, ManualClock, Quota, Request, ShardedLimiter,
};

const N: u32 = 8;
const STEP: Duration = Duration::from_millis(1);

fn limiter(quota: Quota) -> (ShardedLimiter<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = ShardedLimiter::builder()
        .quota(quota)
        .buckets(N)
        .per_tenant(2)
        .clock(clock.clone())
        .build()
        .unwrap();
    (limiter, clock)
}

/// Tokens per nanosecond and burst, as the bound counts them.
fn rate(quota: Quota) -> f64 {
    f64::from(quota.count()) / quota.period().as_nanos() as f64
}

/// Two threads checking 100 tenants as fast as they can until stopped,
/// counting their grants; `refund_every` gives back every so many grants
/// at once.
struct Load {
    stop: Arc<AtomicBool>,
    granted: Arc<AtomicU64>,
    refunded: Arc<AtomicU64>,
    workers: Vec<thread::JoinHandle<()>>,
}

impl Load {
    fn start(limiter: &Arc<ShardedLimiter<ManualClock>>, refund_every: Option<u64>) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let granted = Arc::new(AtomicU64::new(0));
        let refunded = Arc::new(AtomicU64::new(0));
        let workers = (0..2)
            .map(|w| {
                let (limiter, stop) = (Arc::clone(limiter), Arc::clone(&stop));
                let (granted, refunded) = (Arc::clone(&granted), Arc::clone(&refunded));
                thread::spawn(move || {
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        i += 1;
                        if let Ok(grant) = limiter.check(format!("t{}", (i * 7 + w) % 100)) {
                            let n = granted.fetch_add(1, Ordering::Relaxed) + 1;
                            if refund_every.is_some_and(|every| n % every == 0) {
                                limiter.refund(grant);
                                refunded.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                })
            })
            .collect();
        Load {
            stop,
            granted,
            refunded,
            workers,
        }
    }

    fn stop(self) -> (u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        for worker in self.workers {
            worker.join().unwrap();
        }
        (
            self.granted.load(Ordering::Relaxed),
            self.refunded.load(Ordering::Relaxed),
        )
    }
}

/// Waits (boundedly) until the load has emptied every bucket.
fn drained(limiter: &ShardedLimiter<ManualClock>) {
    for _ in 0..1_000_000 {
        if limiter.snapshot().iter().all(|b| b.available() == 0) {
            return;
        }
        thread::yield_now();
    }
    panic!(
        "the load never emptied the buckets: {:?}",
        limiter.snapshot()
    );
}

#[test]
fn a_change_racing_checks_keeps_the_budget_of_both_quotas() {
    let pairs = [
        (Quota::per_second(800), Quota::per_second(200)),
        (Quota::per_second(200), Quota::per_second(800)),
        (
            Quota::per_second(100).with_burst(400),
            Quota::per_second(3000).with_burst(40),
        ),
        (
            Quota::per_second(3000).with_burst(40),
            Quota::per_second(100).with_burst(400),
        ),
    ];
    for (before, after) in pairs {
        let (limiter, clock) = limiter(before);
        let limiter = Arc::new(limiter);
        let load = Load::start(&limiter, None);
        drained(&limiter);
        for _ in 0..50 {
            clock.advance(STEP);
            drained(&limiter);
        }
        // 10 ms more, and the change while the load is checking and the
        // buckets hold what refilled meanwhile. 10 ms refills less than
        // any burst here (30 of 40 at 3000/s), so none of it is lost to a
        // full bucket whichever side of the race wins: if the load drains
        // the buckets before the change, the floor below still holds. (At
        // 30 ms, 3000/s refilled 90 into a burst of 40; a load that won the
        // race took 40, and the floor, which counts 90, failed 2 runs in
        // 300.)
        clock.advance(STEP * 10);
        limiter.set_quota(after).unwrap();
        let c = clock.now_nanos() as f64;
        for _ in 0..50 {
            clock.advance(STEP);
            drained(&limiter);
        }
        let end = clock.now_nanos() as f64;
        let (granted, _) = load.stop();
        let bursts = f64::from(before.burst().max(after.burst()));
        let bound = rate(before) * c + rate(after) * (end - c) + bursts;
        let floor = rate(before) * c + rate(after) * (end - c) - f64::from(N);
        assert!(
            granted as f64 <= bound,
            "{before} then {after}: {granted} granted, at most {bound}"
        );
        assert!(
            granted as f64 >= floor,
            "{before} then {after}: {granted} granted, the load should take at least {floor}"
        );
        assert_eq!(limiter.quota(), after);
    }
}

#[test]
fn quotas_changed_in_a_tight_loop_never_lift_the_budget() {
    // One burst, so that the bound is the tightest one (every change of
    // the rate still moves every bucket to another interval).
    let quotas = [
        Quota::per_second(400),
        Quota::per_second(100).with_burst(400),
        Quota::per_second(2000).with_burst(400),
    ];
    let (limiter, clock) = limiter(quotas[0]);
    let limiter = Arc::new(limiter);
    let load = Load::start(&limiter, None);
    drained(&limiter);
    // Time adds the rate in force; a change adds nothing (a rise of the
    // burst could add what it rises by).
    let mut bound = f64::from(quotas[0].burst());
    let mut current = quotas[0];
    for i in 1..=600 {
        clock.advance(STEP / 2);
        bound += rate(current) * (STEP / 2).as_nanos() as f64;
        let next = quotas[i % 3];
        limiter.set_quota(next).unwrap();
        bound += f64::from(next.burst().saturating_sub(current.burst()));
        current = next;
        // The load empties the buckets before the next step, racing the
        // change just made.
        drained(&limiter);
    }
    let (granted, _) = load.stop();
    assert!(
        granted as f64 <= bound,
        "{granted} granted, at most {bound}"
    );
    // The load took most of it: a check that races a change loses its
    // tokens (they stay taken), so a tight loop of changes costs some.
    assert!(granted as f64 > 0.8 * bound, "{granted} of {bound}");
}

#[test]
fn each_bucket_keeps_its_share_of_the_burst() {
    // 4 buckets of 2 tokens, 500 ms apart.
    let (limiter, clock) = limiter(Quota::per_second(16));
    let limiter = Arc::new(limiter);
    let states = || {
        limiter
            .snapshot()
            .iter()
            .map(|b| b.available())
            .collect::<Vec<_>>()
    };
    // Empty every bucket, then let 250 ms refill a quarter of each.
    for i in 0..100 {
        let _ = limiter.check(format!("t{i}"));
    }
    assert_eq!(states(), [0; 8]);
    clock.advance(Duration::from_millis(250));
    limiter
        .set_quota(Quota::per_second(16).with_burst(64))
        .unwrap();
    // A quarter of 2 was half a token: a quarter of 8 is 2.
    assert_eq!(states(), [2; 8]);
    limiter.set_quota(Quota::per_second(16)).unwrap();
    assert_eq!(states(), [0; 8], "a share of half a token is no token");
    clock.advance(Duration::from_millis(250));
    assert_eq!(states(), [1; 8]);
    // The shards stay as they were.
    let shard = limiter.shard("t1");
    limiter.set_quota(Quota::per_second(1600)).unwrap();
    assert_eq!(limiter.shard("t1"), shard);
}

#[test]
fn a_refused_quota_changes_nothing() {
    let (limiter, _clock) = limiter(Quota::per_second(16));
    let _ = limiter.check("t");
    let before = limiter.snapshot();
    let err = limiter.set_quota(Quota::per_second(4)).unwrap_err();
    assert_eq!(
        err,
        ConfigError::BurstTooSmall {
            burst: 4,
            buckets: N
        }
    );
    assert!(err.to_string().contains("burst"), "{err}");
    assert_eq!(limiter.quota(), Quota::per_second(16));
    assert_eq!(limiter.snapshot(), before);
}

#[test]
fn a_cut_burst_refuses_weights_the_buckets_no_longer_hold() {
    let (limiter, _clock) = limiter(Quota::per_second(80));
    assert!(limiter.check(Request::tenant("t").tokens(15)).is_ok());
    limiter.set_quota(Quota::per_second(16)).unwrap();
    let err = limiter.check(Request::tenant("t").tokens(15)).unwrap_err();
    assert_eq!(err.reason(), DenialReason::NeverFits { asked: 15, most: 4 });
    assert_eq!(err.retry_after(), Duration::MAX);
}

#[test]
fn grants_minus_refunds_stay_within_the_budget() {
    let quota = Quota::per_second(800);
    let (limiter, clock) = limiter(quota);
    let limiter = Arc::new(limiter);
    let load = Load::start(&limiter, Some(3));
    for _ in 0..100 {
        clock.advance(STEP);
        drained(&limiter);
    }
    let t = clock.now_nanos() as f64;
    let (granted, refunded) = load.stop();
    let net = (granted - refunded) as f64;
    let bound = rate(quota) * t + f64::from(quota.burst());
    assert!(
        net <= bound,
        "{granted} granted, {refunded} refunded: at most {bound} net"
    );
    // Refunded tokens were granted again: a third more grants than the
    // budget, and the net close to it. What may stay unclaimed at the
    // stop: under a token of credit per bucket (drained reads whole
    // tokens), and one refund per worker given back after the last drain.
    assert!(refunded > 200, "{refunded}");
    let workers = 2.0;
    assert!(net > bound - f64::from(N) - workers, "{net} net of {bound}");
}

#[test]
fn a_refund_goes_back_to_the_buckets_that_paid_and_never_past_full() {
    let (limiter, clock) = limiter(Quota::per_second(16));
    let tenant = limiter.handle("t");
    let [first, second] = <[u32; 2]>::try_from(tenant.shard().buckets()).unwrap();
    let available = |b: u32| limiter.snapshot()[b as usize].available();
    // A weight of 3 over two buckets of 2: the roomier pays 2, the other 1.
    let mut grant = limiter
        .handle(Request::tenant("t").tokens(3))
        .check()
        .unwrap();
    let paid: Vec<(u32, u32)> = grant
        .payments()
        .iter()
        .map(|p| (p.bucket(), p.tokens()))
        .collect();
    assert_eq!(paid.len(), 2);
    assert_eq!(grant.tokens(), 3);
    let err = grant.part(4).unwrap_err();
    assert_eq!((err.requested(), err.granted()), (4, 3));
    assert!(err.to_string().contains("at most"), "{err}");
    assert_eq!(grant.tokens(), 3, "a part refused leaves the grant whole");
    // Refunding 2: the last payer gets its 1 back first, then the first 1.
    limiter.refund(grant.part(2).unwrap());
    // What stays is the first payer's other token: refunded, it gives
    // back that one and no more.
    let kept: Vec<(u32, u32)> = grant
        .payments()
        .iter()
        .map(|p| (p.bucket(), p.tokens()))
        .collect();
    assert_eq!(kept, [(paid[0].0, 1)]);
    assert_eq!(available(paid[1].0), 2);
    assert_eq!(available(paid[0].0), 1);
    // No other bucket gained anything.
    for b in (0..N).filter(|&b| b != first && b != second) {
        assert_eq!(available(b), 2);
    }
    // Two tokens of one bucket, given back: two tokens' worth of credit.
    let mut grant = limiter.check(Request::tenant("t2").tokens(2)).unwrap();
    let payer = grant.bucket();
    assert_eq!(available(payer), 0);
    limiter.refund(grant.part(2).unwrap());
    assert_eq!(available(payer), 2);
    // A refund after the bucket refilled gives back only what is missing:
    // 100 ms of the 500 ms a token costs, and the bucket is full.
    let grant = tenant.check().unwrap();
    let bucket = limiter.snapshot()[grant.bucket() as usize];
    assert_eq!(
        (bucket.available(), bucket.full_in()),
        (1, Duration::from_millis(500))
    );
    clock.advance(Duration::from_millis(400));
    let payer = grant.bucket();
    limiter.refund(grant);
    let bucket = limiter.snapshot()[payer as usize];
    assert_eq!((bucket.available(), bucket.full_in()), (2, Duration::ZERO));
}
