//! Retry budgets a fleet shares, over a real `redis-server` on 127.0.0.1:
//! two "processes" (two limiters and two budgets on one server) count each
//! deposit once and drain one budget; a flaky tenant's withdrawals leave a
//! disjoint tenant's retries untouched; the cap holds; bad values are typed
//! errors; Redis down gives no retry; and `Upstream` retries a failing
//! tenant within the fleet's budget, once for the fleet.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redis::AsyncCommands;
use shuffle_limiter::redis::{
    Error, FailurePolicy, Layout, RedisLimiter, RedisOptions, RedisRetryBudget,
};
use shuffle_limiter::upstream::{Answer, Upstream};
use shuffle_limiter::{Limit, Quota, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

/// 8 buckets of 100 tokens, k = 2: nothing runs dry during a test.
async fn process(server: &RedisServer, name: &str, layout: Layout) -> RedisLimiter {
    let options = RedisOptions::new(FailurePolicy::FailClosed)
        .layout(layout)
        .deadline(Duration::from_millis(500));
    ShardedLimiter::builder()
        .quota(Quota::per_second(800).with_burst(800))
        .buckets(8)
        .per_tenant(2)
        .salt("retry")
        .name(name)
        .build_redis(&server.url(), options)
        .await
        .unwrap()
}

/// One whole retry per token, no floor: the counts are exact.
fn budget(limiter: &RedisLimiter, most: u32) -> RedisRetryBudget {
    RedisRetryBudget::of(limiter)
        .ratio(1.0)
        .floor_per_second(0)
        .most(most)
}

/// `calls` one-token grants of `tenant`, deposited.
async fn deposit(limiter: &RedisLimiter, retries: &RedisRetryBudget, tenant: &str, calls: u32) {
    for _ in 0..calls {
        retries.deposit(&limiter.check(tenant).await.unwrap());
    }
}

/// A tenant sharing no bucket with `of`.
fn apart(limiter: &RedisLimiter, of: &str) -> String {
    let held = limiter.shard(of);
    (0..)
        .map(|t| format!("t{t}"))
        .find(|t| (limiter.shard(t.as_str()).buckets().iter()).all(|&b| !held.contains(b)))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deposits_from_two_processes_count_once_and_drain_one_budget() {
    let server = RedisServer::start();
    for layout in [Layout::OneSlot, Layout::Spread] {
        let name = format!("fleet-{layout:?}");
        let (a, b) = (
            process(&server, &name, layout).await,
            process(&server, &name, layout).await,
        );
        let (ra, rb) = (budget(&a, 50), budget(&b, 50));
        let shard = a.shard("acme");
        deposit(&a, &ra, "acme", 7).await;
        deposit(&b, &rb, "acme", 5).await;
        // A process's own deposits count for its own withdraw at once: the
        // withdraw sends them (the background flush is 100 ms away).
        assert!(ra.try_withdraw(&shard).await.unwrap(), "{layout:?}");
        // (In the spread layout, the deposits of the buckets it asked.)
        ra.flush().await.unwrap();
        assert_eq!(rb.banked(&shard).await.unwrap(), 11, "{layout:?}");
        assert_eq!(ra.banked(&shard).await.unwrap(), 11, "{layout:?}");
        // Withdrawals from both drain the one budget of 11 left.
        let mut granted = 0;
        for i in 0..40 {
            let retries = if i % 2 == 0 { &ra } else { &rb };
            granted += u32::from(retries.try_withdraw(&shard).await.unwrap());
        }
        assert_eq!(granted, 11, "{layout:?}");
        assert_eq!(rb.banked(&shard).await.unwrap(), 0, "{layout:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deposits_reach_the_other_process_in_the_background() {
    let server = RedisServer::start();
    let (a, b) = (
        process(&server, "background", Layout::OneSlot).await,
        process(&server, "background", Layout::OneSlot).await,
    );
    let (ra, rb) = (budget(&a, 50), budget(&b, 50));
    let shard = a.shard("acme");
    deposit(&a, &ra, "acme", 3).await;
    // Not flushed by hand: the background flush sends them within 100 ms.
    let seen = tokio::time::timeout(Duration::from_secs(5), async {
        while rb.banked(&shard).await.unwrap() < 3 {
            tokio::task::yield_now().await;
        }
    });
    seen.await.expect("the deposits never reached Redis");
    assert_eq!(rb.banked(&shard).await.unwrap(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flaky_tenant_drains_only_its_shard_and_the_cap_holds() {
    let server = RedisServer::start();
    let (a, b) = (
        process(&server, "flaky", Layout::OneSlot).await,
        process(&server, "flaky", Layout::OneSlot).await,
    );
    let (ra, rb) = (budget(&a, 3), budget(&b, 3));
    let quiet = apart(&a, "flaky");
    // 100 calls each bank at most 3 retries a bucket, 6 a shard.
    deposit(&a, &ra, "flaky", 50).await;
    deposit(&b, &rb, "flaky", 50).await;
    deposit(&a, &ra, &quiet, 50).await;
    let (flaky, quiet) = (a.shard("flaky"), a.shard(quiet.as_str()));
    assert_eq!(rb.banked(&flaky).await.unwrap(), 6);
    assert_eq!(ra.banked(&quiet).await.unwrap(), 6);
    // Both processes retry the flaky tenant as long as they may.
    let mut granted = 0;
    for _ in 0..50 {
        granted += u32::from(ra.withdraw(&flaky).await);
        granted += u32::from(rb.withdraw(&flaky).await);
    }
    assert_eq!(granted, 6, "the cap, once for the fleet");
    assert_eq!(rb.banked(&quiet).await.unwrap(), 6, "untouched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_gives_the_fleet_one_retry_a_bucket_not_one_a_process() {
    let server = RedisServer::start();
    let (a, b) = (
        process(&server, "floor", Layout::OneSlot).await,
        process(&server, "floor", Layout::OneSlot).await,
    );
    // One floor retry per second per bucket, nothing deposited: within
    // the second this takes, the two buckets give two retries in all.
    let ra = RedisRetryBudget::of(&a).floor_per_second(1);
    let rb = RedisRetryBudget::of(&b).floor_per_second(1);
    let shard = a.shard("acme");
    let mut granted = 0;
    for _ in 0..10 {
        granted += u32::from(ra.try_withdraw(&shard).await.unwrap());
        granted += u32::from(rb.try_withdraw(&shard).await.unwrap());
    }
    assert_eq!(granted, 2);
    // A floor above what microseconds count (10⁶ a second) is a floor
    // still, not none: it gives retries with nothing deposited.
    let rc = RedisRetryBudget::of(&a).floor_per_second(2_000_000);
    let shard = a.shard("busy");
    assert!(rc.try_withdraw(&shard).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_values_are_typed_errors_and_give_no_retry() {
    let server = RedisServer::start();
    let a = process(&server, "bad", Layout::OneSlot).await;
    let retries = budget(&a, 10);
    let shard = a.shard("acme");
    let key = format!("{}:retry", a.key(shard.buckets()[0]).unwrap());
    let mut connection = server.connection().await;
    for bad in ["garbage", "-5 0", "1e9 0", "99999999999999999999 0"] {
        let _: () = connection.set(&key, bad).await.unwrap();
        let error = retries.try_withdraw(&shard).await.unwrap_err();
        assert!(
            matches!(&error, Error::NotARetryBudget { key: k, .. } if *k == key),
            "{bad}: {error}"
        );
        assert!(!retries.withdraw(&shard).await);
        assert!(matches!(
            retries.banked(&shard).await,
            Err(Error::NotARetryBudget { .. })
        ));
    }
    let _: () = connection.del(&key).await.unwrap();
    let _: () = connection.hset(&key, "f", "v").await.unwrap();
    let error = retries.try_withdraw(&shard).await.unwrap_err();
    assert!(matches!(error, Error::NotARetryBudget { .. }), "{error}");
    assert!(matches!(
        retries.banked(&shard).await,
        Err(Error::NotARetryBudget { .. })
    ));
    // A count above the cap (another process's settings) counts as the cap.
    let _: () = connection.del(&key).await.unwrap();
    let _: () = connection.set(&key, "900000 0").await.unwrap();
    let mut granted = 0;
    for _ in 0..40 {
        granted += u32::from(retries.try_withdraw(&shard).await.unwrap());
    }
    assert_eq!(granted, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_a_withdraw_answers_no_retry() {
    let mut server = RedisServer::start();
    let a = process(&server, "down", Layout::OneSlot).await;
    let retries = budget(&a, 10);
    let shard = a.shard("acme");
    deposit(&a, &retries, "acme", 5).await;
    retries.flush().await.unwrap();
    server.kill();
    let start = std::time::Instant::now();
    assert!(retries.try_withdraw(&shard).await.is_err());
    assert!(!retries.withdraw(&shard).await);
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "bounded by the deadline"
    );
}

/// An answer of a status alone.
struct Status(u16);

impl Answer for Status {
    fn status(&self) -> u16 {
        self.0
    }

    fn header(&self, _: &str) -> Option<&[u8]> {
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_in_each_process_retries_a_failing_tenant_once_for_the_fleet() {
    let server = RedisServer::start();
    let (a, b) = (
        process(&server, "calls", Layout::OneSlot).await,
        process(&server, "calls", Layout::OneSlot).await,
    );
    // Ten good calls of the tenant from process a bank ten retries; the
    // calls below deposit nothing (a ratio of 0), so the ten are all the
    // fleet may retry.
    let seed = budget(&a, 50);
    deposit(&a, &seed, "flaky", 10).await;
    seed.flush().await.unwrap();
    let (ra, rb) = (budget(&a, 50).ratio(0.0), budget(&b, 50).ratio(0.0));
    let upstreams = [
        Upstream::new(Arc::new(a)).retries(ra),
        Upstream::new(Arc::new(b)).retries(rb),
    ];
    // Then its account fails every call, in both processes.
    let sent = AtomicU32::new(0);
    for i in 0..20 {
        let upstream = &upstreams[i % 2];
        let answer = upstream
            .call("flaky", |_| {
                sent.fetch_add(1, Ordering::Relaxed);
                async { Status(500) }
            })
            .await
            .unwrap();
        assert_eq!(answer.status(), 500);
    }
    // 20 first attempts, and the ten retries, once for the fleet.
    assert_eq!(sent.load(Ordering::Relaxed), 20 + 10);
    let shard = upstreams[0].limiter().shard("flaky");
    let banked = upstreams[1].retry_budget().unwrap().banked(&shard).await;
    assert_eq!(banked.unwrap(), 0);
}

/// The flaky account of `upstream_feedback.rs`, over Redis: a tenant whose
/// account fails every other call, called from two processes among 19
/// others, retries within what its own buckets earned, and every tenant
/// whose shard differs keeps what its buckets earned, to the retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flaky_account_over_two_processes_spends_only_its_own_shards_retries() {
    let server = RedisServer::start();
    let (a, b) = (
        process(&server, "account", Layout::OneSlot).await,
        process(&server, "account", Layout::OneSlot).await,
    );
    // 0.05 of a retry per token: the flaky account wants more than that.
    let retries = |limiter: &RedisLimiter| {
        (RedisRetryBudget::of(limiter))
            .ratio(0.05)
            .floor_per_second(0)
            .most(50)
    };
    let (ra, rb) = (retries(&a), retries(&b));
    let upstreams = [
        Upstream::new(Arc::new(a)).retries(ra),
        Upstream::new(Arc::new(b)).retries(rb),
    ];
    let limiter = upstreams[0].limiter();
    let tenants: Vec<String> = (0..20).map(|t| format!("tenant-{t}")).collect();
    let flaky = &tenants[7];
    // Tokens each bucket paid, as the grants say.
    let paid: Vec<AtomicU32> = (0..8).map(|_| AtomicU32::new(0)).collect();
    let (mut calls, mut sent) = (0, AtomicU32::new(0));
    for round in 0..30 {
        for (i, tenant) in tenants.iter().enumerate() {
            let upstream = &upstreams[(round + i) % 2];
            let fails = tenant == flaky;
            let attempt = AtomicU32::new(0);
            upstream
                .call(tenant.as_str(), |grant| {
                    for payment in grant.payments() {
                        paid[payment.bucket() as usize]
                            .fetch_add(payment.tokens(), Ordering::Relaxed);
                    }
                    if fails {
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                    let n = attempt.fetch_add(1, Ordering::Relaxed);
                    let status = if fails && (round + n as usize).is_multiple_of(2) {
                        500
                    } else {
                        200
                    };
                    async move { Status(status) }
                })
                .await
                .unwrap();
            calls += u32::from(fails);
        }
    }
    for upstream in &upstreams {
        upstream.retry_budget().unwrap().flush().await.unwrap();
    }
    let own = limiter.shard(flaky.as_str());
    let earned = |b: u32| u64::from(paid[b as usize].load(Ordering::Relaxed)) * 50;
    let retried = u64::from(*sent.get_mut() - calls);
    let budget: u64 = own.buckets().iter().map(|&b| earned(b)).sum::<u64>() / 1000;
    // What its buckets earned is spent or banked, once for the fleet (to
    // the fraction of a retry each of its 2 buckets may hold).
    let banked = upstreams[0].retry_budget().unwrap().banked(&own).await;
    let kept = retried + banked.unwrap();
    assert!(retried > 0, "it did retry");
    assert!(
        kept <= budget && kept + 2 >= budget,
        "{retried} retried + banked = {kept}, {budget} earned"
    );
    // Every tenant apart from it: what its buckets earned, to the cap.
    let mut apart = 0;
    for tenant in &tenants {
        let shard = limiter.shard(tenant.as_str());
        if shard.buckets().iter().all(|&b| !own.contains(b)) {
            let want: u64 = (shard.buckets().iter())
                .map(|&b| earned(b).min(50_000) / 1000)
                .sum();
            let got = upstreams[1].retry_budget().unwrap().banked(&shard).await;
            assert_eq!(got.unwrap(), want, "{tenant}");
            apart += 1;
        }
    }
    assert!(apart >= 5, "{apart} tenants apart");
}
