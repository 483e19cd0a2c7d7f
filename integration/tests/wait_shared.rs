//! Jittered waits on an `Arc` of the limiter, cloned into spawned tasks,
//! and `Jitter::new`'s minimum (feature `wait`).

use std::sync::Arc;
use std::time::Duration;

use shuffle_limiter::{Jitter, Quota, ShardedLimiter, TokioClock};
use tokio::time::Instant;

fn limiter() -> Arc<ShardedLimiter<TokioClock>> {
    Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(2))
            .buckets(2)
            .per_tenant(1)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_shared_waiter_is_cloned_into_tasks_and_keeps_the_limiter_alive() {
    let limiter = limiter();
    let fixed = Duration::from_millis(100);
    let jitter = Jitter::new(fixed, fixed);
    let waiter = Arc::clone(&limiter);
    assert_eq!(Arc::strong_count(&limiter), 2);
    let start = Instant::now();
    let tasks: Vec<_> = (0..3)
        .map(|_| {
            let waiter = Arc::clone(&waiter);
            tokio::spawn(async move { waiter.wait("t").jitter(jitter).await.unwrap().bucket() })
        })
        .collect();
    drop(waiter);
    let mut buckets = Vec::new();
    for task in tasks {
        buckets.push(task.await.unwrap());
    }
    // The tenant's one bucket holds one token: the first is at once, each
    // later one 1 s (its refill) plus the 100 ms jitter after a denial.
    assert_eq!(buckets.iter().filter(|&&b| b == buckets[0]).count(), 3);
    assert!(
        start.elapsed() >= Duration::from_millis(2_100),
        "{:?}",
        start.elapsed()
    );
    // Every task is done and dropped its clone: only ours is left.
    assert_eq!(Arc::strong_count(&limiter), 1);
}

#[tokio::test(start_paused = true)]
async fn jitter_new_delays_every_wake_up_by_at_least_its_minimum() {
    let limiter = limiter();
    let jitter = Jitter::new(Duration::from_millis(300), Duration::from_millis(300));
    limiter.wait("t").jitter(jitter).await.unwrap(); // the one token, at once
    let start = Instant::now();
    limiter.wait("t").jitter(jitter).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(1_300));
}

#[test]
fn jitter_new_takes_its_bounds_in_either_order() {
    let (short, long) = (Duration::from_millis(5), Duration::from_millis(9));
    assert_eq!(Jitter::new(long, short), Jitter::new(short, long));
    let jitter = Jitter::new(long, short);
    assert_eq!((jitter.min(), jitter.max()), (short, long));
    for _ in 0..1_000 {
        let extra = jitter.sample();
        assert!(short <= extra && extra <= long, "{extra:?}");
    }
    assert_eq!(Jitter::up_to(long).min(), Duration::ZERO);
}
