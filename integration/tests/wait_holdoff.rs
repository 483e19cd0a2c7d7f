//! A hold-off while callers wait, under tokio's paused time: a wait that
//! booked a slot before the upstream said stop does not get it early; it
//! books again and returns at the end of the hold-off or later.

use std::sync::Arc;
use std::time::Duration;

use shuffle_limiter::upstream::HoldOff;
use shuffle_limiter::{Quota, ShardedLimiter, TokioClock};
use tokio::time::{Instant, sleep};

/// A limiter of `buckets` buckets, every tenant on all of them, on
/// tokio's clock.
fn limiter(quota: Quota, buckets: u32) -> Arc<ShardedLimiter<TokioClock>> {
    let limiter = ShardedLimiter::builder()
        .quota(quota)
        .buckets(buckets)
        .per_tenant(buckets)
        .clock(TokioClock::new())
        .build();
    Arc::new(limiter.unwrap())
}

#[tokio::test(start_paused = true)]
async fn a_slot_booked_before_a_hold_off_waits_for_its_end() {
    let limiter = limiter(Quota::per_second(2).with_burst(2), 2);
    let start = Instant::now();
    assert!(limiter.check("t").is_ok() && limiter.check("t").is_ok());
    // Both buckets are empty: the waits book slots within the next second.
    let waits: Vec<_> = (0..3)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                limiter.wait("t").await.unwrap();
                Instant::now()
            })
        })
        .collect();
    sleep(Duration::from_millis(10)).await;
    limiter.hold_off(HoldOff::all(Duration::from_secs(5)));
    let mut returned = Vec::new();
    for wait in waits {
        returned.push(wait.await.unwrap() - start);
    }
    returned.sort();
    let held_until = Duration::from_secs(5) + Duration::from_millis(10);
    assert!(returned[0] >= held_until, "{returned:?}");
    // One token per bucket at the end, then one per second each.
    assert!(
        returned[2] <= held_until + Duration::from_secs(1),
        "{returned:?}"
    );
}

/// Waits queued on one bucket, a slot a second: a hold-off keeps every
/// slot at or after its instant, and only those before it book again
/// (after the queue), so the queue loses the held time and no more.
#[tokio::test(start_paused = true)]
async fn slots_at_or_after_the_instant_are_kept() {
    let limiter = limiter(Quota::per_second(1).with_burst(1), 1);
    let start = Instant::now();
    assert!(limiter.check("t").is_ok());
    let mut waits = Vec::new();
    for _ in 0..6 {
        let limiter = Arc::clone(&limiter);
        waits.push(tokio::spawn(async move {
            limiter.wait("t").await.unwrap();
            Instant::now() - start
        }));
        // In line, one after another: slots at 1 s, 2 s, ... 6 s.
        tokio::task::yield_now().await;
    }
    sleep(Duration::from_millis(500)).await;
    limiter.hold_off(HoldOff::all(Duration::from_millis(2_000)));
    let mut returned = Vec::new();
    for wait in waits {
        returned.push(wait.await.unwrap());
    }
    returned.sort();
    let secs = |s: u64| Duration::from_secs(s);
    // Slots at 1 s and 2 s were before the instant (2.5 s): booked again
    // behind the queue, at 7 s and 8 s; 3 s to 6 s kept.
    assert_eq!(
        returned,
        [secs(3), secs(4), secs(5), secs(6), secs(7), secs(8)]
    );
}

/// A raise of the quota while callers wait keeps their slots; a cut makes
/// them book again at the new pace.
#[tokio::test(start_paused = true)]
async fn a_raise_keeps_the_queue_and_a_cut_books_it_again() {
    let mut runs = Vec::new();
    for to in [4, 1] {
        let limiter = limiter(Quota::per_second(2).with_burst(1), 1);
        let start = Instant::now();
        assert!(limiter.check("t").is_ok());
        let mut waits = Vec::new();
        for _ in 0..4 {
            let limiter = Arc::clone(&limiter);
            waits.push(tokio::spawn(async move {
                limiter.wait("t").await.unwrap();
                (Instant::now() - start).as_millis()
            }));
            tokio::task::yield_now().await;
        }
        sleep(Duration::from_millis(250)).await;
        let quota = Quota::per_second(to).with_burst(1);
        limiter.set_quota(quota).unwrap();
        let mut returned = Vec::new();
        for wait in waits {
            returned.push(wait.await.unwrap());
        }
        returned.sort();
        runs.push(returned);
    }
    // Raised: every slot kept, at the old pace (0.5 s apart).
    assert_eq!(runs[0], [500, 1000, 1500, 2000]);
    // Cut: booked again, after the slots already taken, at 1 s apart.
    let cut = &runs[1];
    assert!(cut[0] >= 2000, "{cut:?}");
    assert!(cut.windows(2).all(|w| w[1] - w[0] >= 1000), "{cut:?}");
}
