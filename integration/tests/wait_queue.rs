//! Waits that queue, under tokio's paused time: each waiter reserves the
//! earliest slot its shard can give and sleeps exactly until it, so callers
//! are served in the order they asked; a waiter that gives up hands its
//! slot back when no one queued behind it.

use std::sync::Arc;
use std::time::Duration;

use shuffle_limiter::{Quota, Request, ShardedLimiter, TokioClock};
use tokio::sync::Mutex;
use tokio::time::{Instant, sleep, timeout};

/// `buckets` buckets of one token each, one token a second each; a tenant
/// holds `per_tenant` of them.
fn limiter(buckets: u32, per_tenant: u32) -> Arc<ShardedLimiter<TokioClock>> {
    Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(buckets))
            .buckets(buckets)
            .per_tenant(per_tenant)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    )
}

#[tokio::test(start_paused = true)]
async fn waiters_are_served_in_the_order_they_asked() {
    let limiter = limiter(4, 1);
    assert!(limiter.check("t").is_ok());
    let start = Instant::now();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..6u64 {
        let (limiter, order) = (Arc::clone(&limiter), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            limiter.wait("t").await.unwrap();
            order.lock().await.push((i, start.elapsed()));
        }));
        // Each asks a moment after the one before.
        sleep(Duration::from_millis(1)).await;
    }
    for task in tasks {
        task.await.unwrap();
    }
    // One token a second, each to the next in line, exactly on time.
    let served = order.lock().await.clone();
    let want: Vec<(u64, Duration)> = (0..6).map(|i| (i, Duration::from_secs(i + 1))).collect();
    assert_eq!(served, want);
}

/// Two tenants on the same two buckets (a token a second each, due at the
/// same instants), one with 8 callers asking back to back, one with a
/// single caller: the single caller is never behind more than the others'
/// one request each, so its turn comes within ⌈9 / 2⌉ = 5 s, and it gets
/// its ninth of the shard. (Polling, it was seen getting nothing for 3.5 s.)
#[tokio::test(start_paused = true)]
async fn a_lone_caller_beside_a_busy_tenant_waits_its_turn_and_no_more() {
    let limiter = limiter(4, 2);
    let busy = "busy";
    let lone = (0..10_000)
        .map(|i| format!("lone-{i}"))
        .find(|t| limiter.shard(t) == limiter.shard(busy))
        .expect("a tenant with the same two buckets");
    let run_for = Duration::from_secs(60);
    let start = Instant::now();
    let caller = |tenant: String| {
        let limiter = Arc::clone(&limiter);
        tokio::spawn(async move {
            let (mut waits, mut granted) = (Vec::new(), 0u32);
            while start.elapsed() < run_for {
                let asked = Instant::now();
                limiter.wait(&tenant).await.unwrap();
                waits.push(asked.elapsed());
                granted += 1;
            }
            (waits, granted)
        })
    };
    let busy_callers: Vec<_> = (0..8).map(|_| caller(busy.to_owned())).collect();
    let (lone_waits, lone_granted) = caller(lone).await.unwrap();
    let mut busy_granted = 0;
    for task in busy_callers {
        busy_granted += task.await.unwrap().1;
    }
    let longest = lone_waits.iter().max().copied().unwrap();
    assert!(
        longest <= Duration::from_secs(5),
        "the lone caller waited {longest:?}"
    );
    // 2 tokens a second until the last queued caller was served, plus the
    // burst of 2, in turn among 9.
    let end = start.elapsed().as_secs();
    let total = u64::from(lone_granted + busy_granted);
    assert!(
        total <= 2 * end + 2 && total + 2 >= 2 * end,
        "{total} in {end} s"
    );
    let share = f64::from(lone_granted) / total as f64;
    assert!(
        (share - 1.0 / 9.0).abs() < 0.02,
        "{lone_granted} of {total} for the lone caller"
    );
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_gives_up_hands_its_slot_back_if_no_one_queued_behind() {
    let limiter = limiter(4, 1);
    assert!(limiter.check("t").is_ok());
    let start = Instant::now();
    // It reserves the token due at 1 s, then gives up at 0.5 s.
    assert!(
        timeout(Duration::from_millis(500), limiter.wait("t"))
            .await
            .is_err()
    );
    // The token at 1 s is there for the next caller.
    limiter.wait("t").await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_weighted_waiter_that_gives_up_hands_back_every_token_it_reserved() {
    // 4 buckets of 2 tokens, one token a second each; a tenant holds one.
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(4).with_burst(8))
        .buckets(4)
        .per_tenant(1)
        .clock(TokioClock::new())
        .build()
        .unwrap();
    let two = || Request::tenant("t").tokens(2);
    assert!(limiter.check(two()).is_ok());
    let start = Instant::now();
    // It reserves the two tokens due at 2 s, then gives up at 0.5 s.
    assert!(
        timeout(Duration::from_millis(500), limiter.wait(two()))
            .await
            .is_err()
    );
    // Both come back: the next two are due at 2 s, not a token later.
    limiter.wait(two()).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_gives_up_with_others_behind_leaves_them_their_slots() {
    let limiter = limiter(4, 1);
    assert!(limiter.check("t").is_ok());
    let start = Instant::now();
    // The first reserves 1 s; the second, 2 s.
    let first = tokio::spawn({
        let limiter = Arc::clone(&limiter);
        async move { timeout(Duration::from_millis(500), limiter.wait("t")).await }
    });
    sleep(Duration::from_millis(1)).await;
    let second = tokio::spawn({
        let limiter = Arc::clone(&limiter);
        async move {
            limiter.wait("t").await.unwrap();
            start.elapsed()
        }
    });
    assert!(first.await.unwrap().is_err());
    // The second keeps its slot at 2 s; the slot at 1 s cannot move behind
    // it, so it is lost and a third caller comes after the second.
    limiter.wait("t").await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    assert_eq!(second.await.unwrap(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn a_bounded_wait_reserves_inside_its_bound_or_returns_at_once() {
    let limiter = limiter(4, 1);
    assert!(limiter.check("t").is_ok());
    let start = Instant::now();
    let queued = tokio::spawn({
        let limiter = Arc::clone(&limiter);
        async move { limiter.wait("t").await.unwrap() }
    });
    sleep(Duration::from_millis(1)).await;
    // The slot at 1 s is taken; the next, at 2 s, is past 1.5 s.
    let denied = limiter
        .wait("t")
        .within(Duration::from_millis(1500))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_millis(1));
    assert_eq!(denied.retry_after(), Duration::from_millis(1999));
    // Within 2.5 s, it gets the slot at 2 s.
    limiter
        .wait("t")
        .within(Duration::from_millis(2500))
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    queued.await.unwrap();
}
