//! The in-process limiter shared by threads: racing over thousands of
//! tenants, they are granted exactly the budget, no token lost or doubled.

use std::sync::Barrier;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use shuffle_limiter::{Clock, ManualClock, Quota, ShardedLimiter};

#[path = "support/manual.rs"]
mod manual;
use manual::make;

#[test]
fn threads_racing_over_thousands_of_tenants_use_the_budget_exactly() {
    // R = 1000/s, B = 64, 16 buckets of 4 tokens, a token every 16 ms each.
    // In each round the clock moves, then 3 threads race to drain every
    // bucket through tenants of their own, 5 000 in all. The clock stands
    // still within a round, so a bucket stays drained once a thread has been
    // denied by a tenant holding it. However the threads interleave, every
    // round ends with each bucket short of a whole token; and since a round
    // is shorter than a bucket takes to fill, no refill is lost in between.
    // The grants so far are then exactly 4 + ⌊t / 16 ms⌋ per bucket: none
    // granted twice (a lost compare-and-swap), none left behind.
    // Nothing panics inside the scope, where a panic would leave the other
    // threads waiting at the barrier: a failure is noted and reported after.
    let (limiter, clock) = make(Quota::per_second(1000).with_burst(64), 16, 2);
    let granted = AtomicU64::new(0);
    let overrun = AtomicBool::new(false);
    let barrier = Barrier::new(4);
    let done = AtomicBool::new(false);
    let mut failure = None;
    std::thread::scope(|s| {
        for worker in 0..3u64 {
            let (limiter, granted, overrun, barrier, done) =
                (&limiter, &granted, &overrun, &barrier, &done);
            s.spawn(move || {
                let mut i = worker * 1_667;
                loop {
                    barrier.wait(); // the clock has moved, or the test is over
                    if done.load(Ordering::Relaxed) {
                        return;
                    }
                    let mut drained = [false; 16];
                    for _ in 0..5_000 {
                        if drained.iter().all(|&d| d) {
                            break;
                        }
                        i = (i + 7_919) % 5_000;
                        let id = i.to_le_bytes();
                        let tenant = limiter.handle(&id);
                        // A tenant's two buckets hold 8 tokens at most.
                        let n = (0..=8).take_while(|_| tenant.check().is_ok()).count();
                        overrun.fetch_or(n > 8, Ordering::Relaxed);
                        granted.fetch_add(n as u64, Ordering::Relaxed);
                        for &b in tenant.shard().buckets() {
                            drained[b as usize] = true;
                        }
                    }
                    overrun.fetch_or(!drained.iter().all(|&d| d), Ordering::Relaxed);
                    barrier.wait(); // every bucket drained
                }
            });
        }
        for round in 0..1_000u64 {
            barrier.wait();
            barrier.wait();
            let t = clock.now_nanos();
            let (got, want) = (granted.load(Ordering::Relaxed), 16 * (4 + t / 16_000_000));
            if got != want || overrun.load(Ordering::Relaxed) {
                failure = Some(format!(
                    "round {round}, at {t} ns: granted {got}, want {want}"
                ));
                break;
            }
            // 1 to 31 ms: less than the 48 ms a drained bucket takes to fill.
            clock.advance(Duration::from_micros(1_000 + (round * 3_701) % 30_000));
        }
        done.store(true, Ordering::Relaxed);
        barrier.wait();
    });
    assert!(
        !overrun.into_inner(),
        "a tenant was granted more than its buckets hold, or some buckets were never drained"
    );
    assert_eq!(failure, None);
}

#[test]
fn the_limiter_is_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<ShardedLimiter>();
    assert_send_sync::<ShardedLimiter<ManualClock>>();
    assert_send_sync::<shuffle_limiter::Handle<'static>>();
}
