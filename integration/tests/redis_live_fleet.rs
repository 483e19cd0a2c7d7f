//! A fleet over Redis in the one-slot layout, across live changes and the
//! values they leave: a quota version is never reused after the quota key
//! is lost, a weight only a quota raised elsewhere holds is not refused as
//! never fitting (nor a wait one cut elsewhere makes too large left
//! sleeping), a stray hold-off instant does not keep every wait from its
//! slot, and an idle limiter leaves only what live changes wrote. Every
//! test starts its own `redis-server` on 127.0.0.1.

use std::time::Duration;

use shuffle_limiter::redis::{FailurePolicy, RedisLimiter, RedisOptions, Source};
use shuffle_limiter::{DenialReason, Limit, Quota, Request, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;
#[path = "support/fleet.rs"]
#[allow(dead_code)] // `Load` is the other fleet tests'
mod fleet;
use fleet::{drain, runtime};

/// `burst` tokens over 4 buckets, refilling 2 tokens/s in all (one token
/// per 2 s per bucket, whatever the burst): slow enough that a test's own
/// time adds at most a token or two.
fn slow(burst: u32) -> Quota {
    Quota::new(burst, Duration::from_secs(10 * u64::from(burst) / 20)).with_burst(burst)
}

/// A limiter as one process of a fleet builds it: N = 4, k = 4.
async fn process(server: &RedisServer, name: &str, options: RedisOptions) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(slow(20))
        .buckets(4)
        .per_tenant(4)
        .name(name)
        .build_redis(&server.url(), options)
        .await
        .unwrap()
}

/// A process of a fleet whose tenants draw on 2 of 4 buckets.
async fn two_buckets(server: &RedisServer, name: &str) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(slow(20))
        .buckets(4)
        .per_tenant(2)
        .name(name)
        .build_redis(&server.url(), closed())
        .await
        .unwrap()
}

fn closed() -> RedisOptions {
    RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(2))
}

async fn redis_cmd(server: &RedisServer, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let _: redis::Value = cmd
        .query_async(&mut server.connection().await)
        .await
        .unwrap();
}

/// "No two processes ever decide with different quotas" (src/redis/quota.rs),
/// after the quota key is lost too. A FLUSHALL (a restart without
/// persistence, a `DEL`) made the next change write version 1 again, with
/// another meaning: B, still holding the old version 1 (a burst of 40),
/// was granted 40 where A had cut the fleet to 8. Versions now never go
/// back (the server's clock in microseconds, at the least).
#[test]
fn a_quota_key_lost_and_set_again_is_never_taken_for_the_old_one() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let a = process(&server, "reuse", closed()).await;
        let b = process(&server, "reuse", closed()).await;
        a.set_quota(slow(40)).await.unwrap();
        // B decides once: it adopts version 1 (burst 40).
        assert!(b.check("warm").await.is_ok());
        assert_eq!(b.quota(), slow(40));
        redis_cmd(&server, &["FLUSHALL"]).await;
        // A cuts the fleet's budget to a burst of 8.
        a.set_quota(slow(8)).await.unwrap();
        assert_eq!(a.quota(), slow(8));
        let granted = drain(&b, "t", 60).await;
        assert!(
            granted <= 9,
            "B granted {granted} after the fleet's quota was cut to a burst of 8 \
             (B still decides with {:?}, A with {:?})",
            b.quota(),
            a.quota()
        );
    });
}

/// Every process decides with a quota another set live "from its next
/// decision on" (src/guide/live.md): a weight that only the raised quota
/// holds is granted. B weighed it under the quota it last knew and denied
/// it as never fitting without asking Redis, for as long as it saw only
/// such requests.
#[test]
fn a_weight_only_a_quota_raised_elsewhere_holds_is_decided_by_redis() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let (a, b) = (
            two_buckets(&server, "heavy").await,
            two_buckets(&server, "heavy").await,
        );
        a.set_quota(slow(80)).await.unwrap();
        // In process, the same raise lets 30 through at once.
        let local = ShardedLimiter::builder()
            .quota(slow(20))
            .buckets(4)
            .per_tenant(2)
            .build()
            .unwrap();
        local.set_quota(slow(80)).unwrap();
        assert!(
            local
                .check(shuffle_limiter::Request::tenant("t").tokens(30))
                .is_ok()
        );
        // B learns the raise from Redis: the first is granted (the tenant's
        // two buckets hold 40), the rest are limited, none never fits.
        let mut answers = Vec::new();
        for _ in 0..3 {
            let decision = b
                .decide(shuffle_limiter::Request::tenant("t").tokens(30))
                .await;
            answers.push((
                decision.source(),
                decision.result().err().map(|d| d.reason()),
            ));
        }
        assert_eq!(answers[0], (Source::Redis, None), "{answers:?}");
        assert!(
            answers
                .iter()
                .all(|(_, reason)| !matches!(reason, Some(DenialReason::NeverFits { .. }))),
            "B denied requests of 30 tokens as never fitting, where the fleet's quota \
             (burst 80, 40 per tenant) holds them: {answers:?}; B decides with {:?}",
            b.quota()
        );
        assert_eq!(b.quota(), slow(80));
    });
}

/// The same for a wait: one that only the raised quota holds is granted,
/// not refused at once as never fitting under the quota this process was
/// built with.
#[test]
fn a_wait_only_a_raised_quota_holds_is_granted() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let (a, c) = (
            two_buckets(&server, "heavy-wait").await,
            two_buckets(&server, "heavy-wait").await,
        );
        a.set_quota(slow(80)).await.unwrap();
        let waited = c
            .wait(Request::tenant("t").tokens(30))
            .within(Duration::from_secs(2))
            .await;
        assert!(waited.is_ok(), "{:?}", waited.err().map(|d| d.reason()));
    });
}

/// A wait that another process's cut leaves too large ends at once as
/// never fitting: it does not sleep until the end of time (a wait with no
/// bound slept 30 years on the store's denial) or to its bound.
#[test]
fn a_wait_another_processs_cut_leaves_too_large_ends_as_never_fitting() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let (a, c) = (
            two_buckets(&server, "cut-wait").await,
            two_buckets(&server, "cut-wait").await,
        );
        a.set_quota(slow(8)).await.unwrap();
        let waited = tokio::time::timeout(
            Duration::from_secs(5),
            c.wait(Request::tenant("t").tokens(8)),
        )
        .await
        .expect("the wait ends");
        let reason = waited.map(|_| ()).unwrap_err().reason();
        assert_eq!(reason, DenialReason::NeverFits { asked: 8, most: 4 });
    });
}

/// What an idle limiter leaves behind (src/guide/redis.md, "Redis Cluster
/// and Valkey"): nothing but what a live change wrote, the quota key and
/// the `:born` key of each bucket a change of N added while that bucket
/// exists. A bucket removed again takes its `:born` key with it (it was
/// left for ever).
#[test]
fn an_idle_limiter_leaves_only_what_live_changes_wrote() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let limiter: RedisLimiter = ShardedLimiter::builder()
            .quota(Quota::per_second(1000).with_burst(8))
            .buckets(2)
            .max_buckets(4)
            .per_tenant(2)
            .name("leak")
            .build_redis(&server.url(), closed())
            .await
            .unwrap();
        assert!(limiter.check("t").await.is_ok());
        limiter.set_buckets(4).await.unwrap();
        assert!(limiter.check("t").await.is_ok());
        limiter.set_buckets(3).await.unwrap();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        let mut connection = server.connection().await;
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut connection)
            .await
            .unwrap();
        keys.sort();
        assert_eq!(keys, ["{leak}:b2:born", "{leak}:quota"]);
    });
}

/// A value of the hold-offs hash is untrusted: an instant later than any
/// hold-off writes (here the year 2191, the bucket itself not held) is
/// ignored. It made every booking look covered by a hold-off when its
/// wait woke: the slot was forgotten (its token still taken) and booked
/// again, until the wait's bound, while `check` would grant.
#[test]
fn a_stray_hold_off_instant_keeps_no_wait_from_its_slot() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let build = |name: &'static str| {
            let url = server.url();
            async move {
                ShardedLimiter::builder()
                    .quota(Quota::per_second(20).with_burst(1))
                    .buckets(1)
                    .per_tenant(1)
                    .name(name)
                    .build_redis(&url, closed())
                    .await
                    .unwrap()
            }
        };
        let (clean, poisoned) = (build("clean").await, build("poison").await);
        redis_cmd(
            &server,
            &["HSET", "{poison}:held", "{poison}:b0", "7000000000000000"],
        )
        .await;
        let mut waited = Vec::new();
        for limiter in [&clean, &poisoned] {
            assert!(limiter.check("t").await.is_ok());
            let start = std::time::Instant::now();
            let got = limiter.wait("t").within(Duration::from_secs(1)).await;
            waited.push((got.is_ok(), start.elapsed()));
        }
        let bucket: Option<String> = redis::cmd("GET")
            .arg("{poison}:b0")
            .query_async(&mut server.connection().await)
            .await
            .unwrap();
        assert!(
            waited.iter().all(|(ok, _)| *ok),
            "waits (granted, took): clean {:?}, poisoned {:?}; poisoned bucket {bucket:?}; \
             decisions in Redis: clean {}, poisoned {}",
            waited[0],
            waited[1],
            clean.stats().from_redis(),
            poisoned.stats().from_redis()
        );
    });
}

/// `remaining` counts the tenant's own buckets under the N in force, as a
/// check draws on them, though another process changed N since this one
/// last heard: it counted the shard of the old N, without its buckets
/// past the new N.
#[test]
fn remaining_counts_the_shard_under_an_n_changed_elsewhere() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let (a, b) = (
            two_buckets(&server, "moved").await,
            two_buckets(&server, "moved").await,
        );
        // A tenant whose shard holds the bucket the change removes.
        let tenant = (0..)
            .map(|i| format!("t{i}"))
            .find(|t| a.shard(t.as_str()).buckets().contains(&3))
            .unwrap();
        assert!(b.check("warm").await.is_ok());
        b.set_buckets(3).await.unwrap();
        let there = b.remaining(tenant.as_str()).await.unwrap();
        let here = a.remaining(tenant.as_str()).await.unwrap();
        assert_eq!(a.buckets(), 3, "A has heard of the change");
        assert_eq!(here, there, "A and B count the same shard");
        assert_eq!(a.shard(tenant.as_str()).buckets().len(), 2);
    });
}
