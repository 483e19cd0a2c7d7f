//! A quota cut while callers wait, under tokio's paused time: the change
//! bound `R₂·t + max(B₁, B₂)` holds for the grants returned to callers
//! within `t` of the change, however early their slots were reserved.

use std::sync::Arc;
use std::time::Duration;

use shuffle_limiter::{Quota, ShardedLimiter, TokioClock};
use tokio::sync::Mutex;
use tokio::time::{Instant, sleep};

/// Grants returned within `t` of `change`, for each `t` of `within`.
fn counted(returned: &[Instant], change: Instant, within: &[u64]) -> Vec<usize> {
    within
        .iter()
        .map(|&secs| {
            let end = change + Duration::from_secs(secs);
            returned
                .iter()
                .filter(|&&at| at > change && at <= end)
                .count()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_quota_cut_slows_the_callers_already_waiting() {
    let limiter = Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(100).with_burst(10))
            .buckets(2)
            .per_tenant(2)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    );
    let returned = Arc::new(Mutex::new(Vec::new()));
    let callers: Vec<_> = (0..300)
        .map(|_| {
            let (limiter, returned) = (Arc::clone(&limiter), Arc::clone(&returned));
            tokio::spawn(async move {
                limiter.wait("t").await.unwrap();
                returned.lock().await.push(Instant::now());
            })
        })
        .collect();
    // Every caller has its slot (the burst at once, the rest reserved at
    // 100/s for the next 2.9 s); then the upstream cuts us to 2/s.
    sleep(Duration::from_millis(1)).await;
    assert_eq!(returned.lock().await.len(), 10);
    let change = Instant::now();
    limiter
        .set_quota(Quota::per_second(2).with_burst(10))
        .unwrap();
    sleep(Duration::from_secs(30)).await;
    let returned = returned.lock().await.clone();
    let within = [1, 2, 5, 10, 30];
    let bound: Vec<usize> = within.iter().map(|&t| 2 * t as usize + 10).collect();
    let granted = counted(&returned, change, &within);
    for ((t, got), max) in within.iter().zip(&granted).zip(&bound) {
        assert!(
            got <= max,
            "{got} grants within {t} s of the cut, where 2/s and a burst of 10 allow {max} \
             (all: {granted:?} within {within:?})"
        );
    }
    // Not a stall either: the waiters go on at the new pace.
    assert!(granted[4] >= 2 * 30 - 10, "{granted:?} within {within:?}");
    for caller in callers {
        caller.abort();
    }
}
