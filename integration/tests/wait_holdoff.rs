//! A hold-off while callers wait, under tokio's paused time: a wait that
//! booked a slot before the upstream said stop does not get it early; it
//! books again and returns at the end of the hold-off or later.

use std::sync::Arc;
use std::time::Duration;

use shuffle_limiter::upstream::HoldOff;
use shuffle_limiter::{Quota, ShardedLimiter, TokioClock};
use tokio::time::{Instant, sleep};

#[tokio::test(start_paused = true)]
async fn a_slot_booked_before_a_hold_off_waits_for_its_end() {
    let limiter = Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(2).with_burst(2))
            .buckets(2)
            .per_tenant(2)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    );
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
