//! Waits that began before a change of N keep their place in line: the
//! slot a denial names is on the shard the store drew on, under the new N.
//! (Found by an outside review on 2026-12-05: a wait took a bucket of its
//! new shard for a spill bucket, which no booking takes ahead, and booked
//! nothing while every later waiter did.)

use std::sync::Arc;
use std::time::Duration;

use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
use shuffle_limiter::{Limit, Quota, ShardedLimiter, TokioClock};
use tokio::sync::Mutex;
use tokio::time::{Instant, sleep};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

/// `src/wait/mod.rs`: "Callers are served in the order they asked ... each
/// caller has at most one slot in the line", and `Handle` (handle.rs):
/// "After a change of N its checks draw on the shard under the new N".
///
/// No borrowing at all (d = 0). N = 4 buckets of 3 tokens, k = 1, then N
/// = 3 (4 tokens each, one every 250 ms). A handle made under N = 4 for a
/// tenant whose bucket (3) is gone under N = 3 waits first; eight fresh
/// waits of the same tenant ask 1 ms apart after it. The handle's wait is
/// denied on the new shard's bucket, which is not in the shard it
/// resolved; the wait took it for a spill bucket, booked nothing, and
/// was served after the eight (at 2.25 s).
#[tokio::test(start_paused = true)]
async fn a_wait_resolved_before_a_change_of_n_keeps_its_place_in_line() {
    let limiter: &'static ShardedLimiter<TokioClock> = Box::leak(Box::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(12).with_burst(12))
            .buckets(4)
            .max_buckets(4)
            .per_tenant(1)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    ));
    let tenant: &'static str = (0..)
        .map(|i| format!("t{i}"))
        .find(|t| limiter.shard(t.as_str()).buckets() == [3])
        .unwrap()
        .leak();
    let handle = limiter.handle(tenant);
    assert_eq!(handle.shard().buckets(), [3]);
    limiter.set_buckets(3).unwrap();
    let now_on = limiter.shard(tenant).buckets()[0];
    assert_ne!(now_on, 3);
    // Drain the tenant's bucket under N = 3.
    while limiter.check(tenant).is_ok() {}
    let start = Instant::now();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    {
        let order = Arc::clone(&order);
        tasks.push(tokio::spawn(async move {
            handle.wait().await.unwrap();
            order.lock().await.push(("handle", start.elapsed()));
        }));
    }
    for _ in 0..8 {
        sleep(Duration::from_millis(1)).await;
        let order = Arc::clone(&order);
        tasks.push(tokio::spawn(async move {
            limiter.wait(tenant).await.unwrap();
            order.lock().await.push(("fresh", start.elapsed()));
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let served = order.lock().await.clone();
    println!("served: {served:?}");
    assert_eq!(
        served[0],
        ("handle", Duration::from_millis(250)),
        "the first to ask gets the first slot"
    );
}

/// The same over Redis, with no handle: a process that has not yet heard
/// of N changed by another process resolves a wait's shard under the old
/// N; the script draws on the new shard (the store resolves it again), and
/// the wait booked no slot while the tenant's other waiters did (it was
/// served after four later waits).
/// N = 4 -> 3 (one-slot layout), k = 1, 4 tokens a bucket, one every 200 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_begun_before_hearing_of_a_change_of_n_keeps_its_place_over_redis() {
    let server = RedisServer::start();
    let options = || RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(2));
    let url = server.url();
    let build = || {
        ShardedLimiter::builder()
            .quota(Quota::per_second(15).with_burst(12))
            .buckets(4)
            .max_buckets(4)
            .per_tenant(1)
            .name("review46-n")
            .build_redis(&url, options())
    };
    let (here, there) = (Arc::new(build().await.unwrap()), build().await.unwrap());
    let tenant: &'static str = (0..)
        .map(|i| format!("t{i}"))
        .find(|t| here.shard(t.as_str()).buckets() == [3])
        .unwrap()
        .leak();
    there.set_buckets(3).await.unwrap();
    assert_eq!(here.buckets(), 4, "this process has not heard yet");
    // Drain the tenant's bucket under N = 3 (from the other process).
    while there.check(tenant).await.is_ok() {}
    let start = std::time::Instant::now();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    {
        let (here, order) = (Arc::clone(&here), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            here.wait(tenant).await.unwrap();
            order.lock().await.push(("first", start.elapsed()));
        }));
    }
    // Once the first has asked (and this process heard of N = 3), others.
    sleep(Duration::from_millis(30)).await;
    assert_eq!(here.buckets(), 3);
    for _ in 0..4 {
        let (here, order) = (Arc::clone(&here), Arc::clone(&order));
        tasks.push(tokio::spawn(async move {
            here.wait(tenant).await.unwrap();
            order.lock().await.push(("later", start.elapsed()));
        }));
        sleep(Duration::from_millis(5)).await;
    }
    for task in tasks {
        task.await.unwrap();
    }
    let served = order.lock().await.clone();
    println!("served: {served:?}");
    assert_eq!(served[0].0, "first", "the first to ask is served first");
}
