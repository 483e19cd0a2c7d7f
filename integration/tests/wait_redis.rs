//! Waits over Redis while Redis fails, in both layouts, against a real
//! `redis-server` on 127.0.0.1: a wait sleeps until the store is next tried
//! (it never goes round without sleeping), never books a slot ahead on a
//! retry time the failure policy gave, keeps the policy's reason, and
//! returns within its deadline.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use shuffle_limiter::redis::{FailurePolicy, Layout, RedisLimiter, RedisOptions};
use shuffle_limiter::{DenialReason, Limit, Quota, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

const LAYOUTS: [Layout; 2] = [Layout::OneSlot, Layout::Spread];
const RETRY_EVERY: Duration = Duration::from_millis(100);

/// Two buckets of one token, one a second each; the tenant holds one.
async fn limiter(server: &RedisServer, name: &str, layout: Layout) -> Arc<RedisLimiter> {
    let options = RedisOptions::new(FailurePolicy::FailClosed)
        .layout(layout)
        .retry_every(RETRY_EVERY);
    Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(2).with_burst(2))
            .buckets(2)
            .per_tenant(1)
            .name(name)
            .build_redis(&server.url(), options)
            .await
            .unwrap(),
    )
}

/// Resumes a stopped server however the test ends.
struct Resume<'a>(&'a RedisServer);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.signal("-CONT");
    }
}

/// How far ahead of the server's clock the tenant's bucket is booked.
async fn booked_ahead(admin: &mut MultiplexedConnection, limiter: &RedisLimiter) -> Duration {
    let bucket = limiter.shard("t").buckets()[0];
    let tat: Option<u64> = redis::cmd("GET")
        .arg(limiter.key(bucket).unwrap())
        .query_async(admin)
        .await
        .unwrap();
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(admin).await.unwrap();
    let now = secs * 1_000_000 + micros;
    Duration::from_micros(tat.unwrap_or(0).saturating_sub(now))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_while_redis_is_down_sleeps_until_the_next_probe() {
    for layout in LAYOUTS {
        let mut server = RedisServer::start();
        let limiter = limiter(&server, "down", layout).await;
        server.kill();
        let run = Duration::from_secs(1);
        let waited = tokio::time::timeout(run, async { limiter.wait("t").await.unwrap() }).await;
        assert!(waited.is_err(), "{layout:?}: granted with Redis down");
        // One probe and its policy decision every 100 ms, a few more at
        // the start; never a loop that does not sleep.
        let decisions = limiter.stats().from_policy();
        assert!(
            decisions <= 4 * (run.as_millis() / RETRY_EVERY.as_millis()) as u64,
            "{layout:?}: {decisions} policy decisions in {run:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_wait_while_redis_is_down_keeps_the_policys_reason_and_retry() {
    for layout in LAYOUTS {
        let mut server = RedisServer::start();
        let limiter = limiter(&server, "bounded", layout).await;
        server.kill();
        let max_wait = Duration::from_millis(600);
        let start = Instant::now();
        let denied = limiter
            .wait("t")
            .within(max_wait)
            .await
            .expect_err("granted with Redis down");
        let took = start.elapsed();
        assert!(
            took <= max_wait + Duration::from_millis(200),
            "{layout:?}: {took:?}"
        );
        assert_eq!(
            denied.reason(),
            DenialReason::StoreUnavailable,
            "{layout:?}"
        );
        // When the store is next tried, not a rate limit's time made up.
        assert!(
            denied.retry_after() <= RETRY_EVERY,
            "{layout:?}: retry after {:?}",
            denied.retry_after()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_across_a_stopped_server_book_no_slot_the_budget_did_not_grant() {
    for layout in LAYOUTS {
        let server = RedisServer::start();
        let mut admin = server.connection().await;
        let limiter = limiter(&server, "stopped", layout).await;
        // The tenant's one token, so that the waits below must queue.
        limiter.check("t").await.unwrap();
        let resume = Resume(&server);
        server.signal("-STOP");
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                tokio::spawn(async move {
                    tokio::time::timeout(Duration::from_secs(8), async {
                        limiter.wait("t").await.unwrap()
                    })
                    .await
                })
            })
            .collect();
        // One waiter gives up during the stop.
        let dropped = {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_millis(700), async {
                    limiter.wait("t").await.unwrap()
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(1500)).await;
        drop(resume);
        assert!(dropped.await.unwrap().is_err());
        for waiter in waiters {
            // One token a second, two waiters: both within a few seconds of
            // the server's return.
            assert!(
                waiter.await.unwrap().is_ok(),
                "{layout:?}: a waiter starved"
            );
        }
        // The two waiters' grants (and the dropped one's, if it was
        // booked) are all the bucket owes: at most a few seconds of its
        // one-token-a-second pace.
        let ahead = booked_ahead(&mut admin, &limiter).await;
        assert!(
            ahead <= Duration::from_secs(3),
            "{layout:?}: booked {ahead:?} ahead"
        );
        // A plain caller is told when the bucket really has room.
        if let Err(denied) = limiter.check("t").await {
            assert!(
                denied.retry_after() <= Duration::from_secs(3),
                "{layout:?}: {denied:?}"
            );
        }
    }
}

/// Another process cuts the quota while this one's callers sleep on slots
/// reserved at the old pace: the grants returned after the cut keep to the
/// change bound `R₂·t + max(B₁, B₂)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_cut_by_another_process_slows_the_callers_already_waiting() {
    let server = RedisServer::start();
    let url = server.url();
    let build = |quota: Quota| {
        ShardedLimiter::builder()
            .quota(quota)
            .buckets(2)
            .per_tenant(2)
            .name("cut")
            .build_redis(
                &url,
                RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_millis(500)),
            )
    };
    let here = Arc::new(build(Quota::per_second(20).with_burst(4)).await.unwrap());
    let returned = Arc::new(std::sync::Mutex::new(Vec::new()));
    let callers: Vec<_> = (0..40)
        .map(|_| {
            let (limiter, returned) = (Arc::clone(&here), Arc::clone(&returned));
            tokio::spawn(async move {
                limiter.wait("t").await.unwrap();
                returned.lock().unwrap().push(Instant::now());
            })
        })
        .collect();
    // The burst at once, the other 36 reserved at 20/s for the next 1.8 s.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let there = build(Quota::per_second(20).with_burst(4)).await.unwrap();
    there
        .set_quota(Quota::per_second(2).with_burst(4))
        .await
        .unwrap();
    let change = Instant::now();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let returned = returned.lock().unwrap().clone();
    for secs in [1, 2, 3] {
        let end = change + Duration::from_secs(secs);
        let got = returned
            .iter()
            .filter(|&&at| at > change && at <= end)
            .count();
        let max = 2 * secs as usize + 4;
        assert!(
            got <= max,
            "{got} grants within {secs} s of the cut, where 2/s and a burst of 4 allow {max}"
        );
    }
    for caller in callers {
        caller.abort();
    }
}

/// With the local fallback, a wait while Redis is down sleeps until the
/// fallback's bucket has room (its denial is made now, not at the lead),
/// then takes that token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_the_local_fallback_sleeps_until_its_bucket_refills() {
    for layout in LAYOUTS {
        let mut server = RedisServer::start();
        let options = RedisOptions::new(FailurePolicy::LocalFallback { replicas: 1 })
            .layout(layout)
            .retry_every(RETRY_EVERY);
        let limiter = ShardedLimiter::builder()
            .quota(Quota::per_second(2).with_burst(2))
            .buckets(2)
            .per_tenant(1)
            .name("fallback")
            .build_redis(&server.url(), options)
            .await
            .unwrap();
        server.kill();
        // The fallback's one token for the tenant, then one a second.
        limiter.check("t").await.unwrap();
        let start = Instant::now();
        let before = limiter.stats().from_policy();
        tokio::time::timeout(Duration::from_secs(3), async {
            limiter.wait("t").await.unwrap()
        })
        .await
        .expect("the fallback's next token never came");
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(900), "{layout:?}: {took:?}");
        let decisions = limiter.stats().from_policy() - before;
        assert!(
            decisions <= 40,
            "{layout:?}: {decisions} policy decisions in {took:?}"
        );
    }
}
