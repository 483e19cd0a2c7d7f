//! Changing a Redis limiter while it runs, against a real `redis-server`:
//! a quota set by one process is the one every other process decides with
//! next, each bucket keeps its share, and refunds give back what was taken.

use std::time::Duration;

use redis::AsyncCommands;
use shuffle_limiter::redis::{Error, FailurePolicy, RedisLimiter, RedisOptions, Source};
use shuffle_limiter::{Limit, Quota, Request, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;
#[path = "support/fleet.rs"]
mod fleet;
use fleet::{Load, drain, runtime};

/// 20 tokens over 4 buckets of 5, refilling one token per 2 s per bucket:
/// slow enough that a test's own time adds at most a token or two.
fn slow(burst: u32) -> Quota {
    Quota::new(burst, Duration::from_secs(10 * u64::from(burst) / 20)).with_burst(burst)
}

/// A limiter as one process of a fleet builds it.
async fn process(server: &RedisServer, name: &str, policy: FailurePolicy) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(slow(20))
        .buckets(4)
        .per_tenant(4)
        .name(name)
        .build_redis(
            &server.url(),
            RedisOptions::new(policy).deadline(Duration::from_secs(2)),
        )
        .await
        .unwrap()
}

#[test]
fn a_quota_set_by_one_process_is_what_the_others_decide_with_next() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let a = process(&server, "rise", FailurePolicy::FailClosed).await;
        let b = process(&server, "rise", FailurePolicy::FailClosed).await;
        // Half the burst used, then the burst doubled: each bucket keeps
        // half of its new 10, so 20 are left, not the 40 a rebuild gives.
        assert_eq!(drain(&a, "t", 10).await, 10);
        a.set_quota(slow(40)).await.unwrap();
        assert_eq!(a.quota(), slow(40));
        let left = drain(&b, "t", 60).await;
        assert!((20..=22).contains(&left), "{left} left after the rise");
        assert_eq!(b.quota(), slow(40), "b took the quota from Redis");
        assert_eq!(b.bucket_burst(0), Some(10));
        // A cut the other way: empty buckets stay empty.
        b.set_quota(slow(8)).await.unwrap();
        assert!(drain(&a, "t", 10).await <= 1);
        assert_eq!(a.quota(), slow(8));
        // Decisions went to Redis; none were made by the policy.
        assert_eq!(b.stats().from_policy() + a.stats().from_policy(), 0);
    });
}

/// `LocalFallback { replicas: 2 }`: each process's fallback holds half the
/// budget. A cut whose half the fallback cannot take (a burst of 6 over 2
/// replicas, 3 for 4 buckets) is refused by the process that makes it; made
/// by a process with another policy, it leaves this process's fallback
/// denying, not granting on the half of the old budget it had.
#[test]
fn a_quota_the_local_fallback_cannot_share_is_refused_or_denied() {
    let mut server = RedisServer::start();
    runtime().block_on(async {
        let fallback = FailurePolicy::LocalFallback { replicas: 2 };
        let a = process(&server, "share", fallback).await;
        let err = a.set_quota(slow(6)).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::FallbackBurstTooSmall {
                    burst: 6,
                    replicas: 2,
                    buckets: 4
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("raise the burst to at least 8"),
            "{err}"
        );
        assert_eq!(a.quota(), slow(20), "nothing changed");
        let mut connection = server.connection().await;
        let key: Option<String> = connection.get("{share}:quota").await.unwrap();
        assert_eq!(key, None);

        let b = process(&server, "share", FailurePolicy::FailClosed).await;
        b.set_quota(slow(6)).await.unwrap();
        assert_eq!(a.decide("t").await.source(), Source::Redis);
        assert_eq!(a.quota(), slow(6), "a took the quota from Redis");
        server.kill();
        let decision = a.decide("t").await;
        assert_eq!(decision.source(), Source::Policy);
        assert!(!decision.is_granted(), "granted on the old budget's half");
    });
}

#[test]
fn a_quota_the_buckets_cannot_take_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let a = process(&server, "refused", FailurePolicy::FailClosed).await;
        let err = a.set_quota(Quota::per_second(3)).await.unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{err:?}");
        assert!(err.to_string().contains("burst"), "{err}");
        let mut connection = server.connection().await;
        let key: Option<String> = connection.get("{refused}:quota").await.unwrap();
        assert_eq!(key, None);
        assert_eq!(drain(&a, "t", 30).await, 20);
    });
}

#[test]
fn a_stray_quota_key_denies_and_deleting_it_restores_the_built_quota() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let a = process(&server, "stray", FailurePolicy::FailOpen).await;
        a.set_quota(slow(40)).await.unwrap();
        let mut connection = server.connection().await;
        let _: () = connection.set("{stray}:quota", "lots").await.unwrap();
        // Even FailOpen does not grant on a key it cannot read.
        let decision = a.decide("t").await;
        assert_eq!(decision.source(), Source::Policy);
        assert!(!decision.is_granted());
        let error = decision.error().unwrap();
        assert!(matches!(error, Error::NotAQuota { .. }), "{error:?}");
        assert!(error.to_string().contains("delete it"), "{error}");
        // Without the key, everyone is back on the quota built with.
        let _: () = connection.del("{stray}:quota").await.unwrap();
        let b = process(&server, "stray", FailurePolicy::FailOpen).await;
        assert!(b.check("t").await.is_ok());
        assert!(a.check("t").await.is_ok());
        assert_eq!(a.quota(), slow(20));
    });
}

#[test]
fn refunds_give_back_to_the_buckets_that_paid_once_whatever_the_quota() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let a = process(&server, "refund", FailurePolicy::FailClosed).await;
        let b = process(&server, "refund", FailurePolicy::FailClosed).await;
        // A weight of 8 over buckets of 5 takes two of them.
        let mut grant = a.check(Request::tenant("t").tokens(8)).await.unwrap();
        assert_eq!(grant.payments().len(), 2);
        let err = grant.part(9).unwrap_err();
        assert_eq!((err.requested(), err.granted()), (9, 8));
        a.refund(grant.part(6).unwrap()).await.unwrap();
        // 20 - 8 + 6 left.
        let grant = b.check("t").await.unwrap();
        assert!(
            (17..=18).contains(&grant.remaining()),
            "{}",
            grant.remaining()
        );
        // Another process changes the quota; a refund counted under the old
        // one learns the new one and gives back a token of it.
        b.set_quota(slow(40)).await.unwrap();
        let before = b
            .check(Request::tenant("t").tokens(0))
            .await
            .unwrap()
            .remaining();
        a.refund(grant).await.unwrap();
        let after = b
            .check(Request::tenant("t").tokens(0))
            .await
            .unwrap()
            .remaining();
        assert!(
            (before + 1..=before + 2).contains(&after),
            "{before} then {after}"
        );
        assert_eq!(a.quota(), slow(40));
        // Full buckets take nothing back.
        let full = b.check("u").await.unwrap();
        let _: () = server
            .connection()
            .await
            .del(&["{refund}:b0", "{refund}:b1", "{refund}:b2", "{refund}:b3"][..])
            .await
            .unwrap();
        b.refund(full).await.unwrap();
        assert_eq!(drain(&b, "t", 60).await, 40);
    });
}

#[test]
fn a_change_racing_a_fleet_keeps_the_budget_of_both_quotas() {
    use std::time::Instant;

    let server = RedisServer::start();
    runtime().block_on(async {
        let (before, after) = (
            Quota::per_second(400).with_burst(40),
            Quota::per_second(100).with_burst(200),
        );
        let build = || async {
            ShardedLimiter::builder()
                .quota(before)
                .buckets(8)
                .per_tenant(2)
                .name("fleet-change")
                .build_redis(
                    &server.url(),
                    RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(2)),
                )
                .await
                .unwrap()
        };
        let changer = build().await;
        let start = Instant::now();
        let load = Load::start(vec![build().await, build().await]);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let change_from = start.elapsed();
        changer.set_quota(after).await.unwrap();
        let change_to = start.elapsed();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let granted = load.stop().await as f64;
        let end = start.elapsed();
        let rate = |q: Quota| f64::from(q.count()) / q.period().as_secs_f64();
        let bound = rate(before) * change_to.as_secs_f64()
            + rate(after) * (end - change_from).as_secs_f64()
            + f64::from(before.burst().max(after.burst()));
        assert!(granted <= bound, "{granted} granted, at most {bound}");
        // The load kept the buckets busy: well over the first burst.
        assert!(granted > 100.0, "{granted} granted of {bound}");
    });
}

/// Over Redis the waits queue the same way: the script draws at the slot's
/// instant, so waiters are served in the order they asked, and one that
/// gives up hands its slot back.
#[test]
fn waits_queue_in_redis_and_a_waiter_that_gives_up_hands_its_slot_back() {
    use std::sync::Arc;
    use std::time::Instant;

    let server = RedisServer::start();
    runtime().block_on(async {
        // One bucket of one token, a token every 100 ms.
        let limiter = Arc::new(
            ShardedLimiter::builder()
                .quota(Quota::per_second(10).with_burst(1))
                .buckets(1)
                .name("queue")
                .build_redis(
                    &server.url(),
                    RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(2)),
                )
                .await
                .unwrap(),
        );
        // Timed from before the first grant, which the server makes up to a
        // round trip later: every slot is due at least 100 ms after it.
        let start = Instant::now();
        assert!(limiter.check("t").await.is_ok());
        let mut waiters = Vec::new();
        for i in 0..4u32 {
            let limiter = Arc::clone(&limiter);
            waiters.push(tokio::spawn(async move {
                limiter.wait("t").await.unwrap();
                (i, start.elapsed())
            }));
            // Time for it to book (one round trip) before the next asks,
            // even on a loaded host; the four ask within the first slot.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut served = Vec::new();
        for waiter in waiters {
            served.push(waiter.await.unwrap());
        }
        served.sort_by_key(|&(_, at)| at);
        let order: Vec<u32> = served.iter().map(|&(i, _)| i).collect();
        assert_eq!(order, [0, 1, 2, 3], "{served:?}");
        // One slot every 100 ms from the first grant (a few ms of slack for
        // the server's clock against this process's).
        for (slot, &(_, at)) in served.iter().enumerate() {
            let due = Duration::from_millis(100 * (slot as u64 + 1));
            assert!(
                at + Duration::from_millis(5) >= due && at < due + Duration::from_millis(60),
                "{served:?}"
            );
        }
        // The next slot, 100 ms on, reserved and given up after 30 ms: the
        // next caller gets it, not the one after.
        let asked = Instant::now();
        let gave_up = tokio::time::timeout(Duration::from_millis(30), async {
            limiter.wait("t").await.unwrap()
        })
        .await;
        assert!(gave_up.is_err());
        tokio::time::sleep(Duration::from_millis(10)).await;
        limiter.wait("t").await.unwrap();
        let took = asked.elapsed();
        assert!(took < Duration::from_millis(160), "{took:?}");
    });
}

/// A denial this process remembers does not outlive tokens given back to
/// the bucket it was about.
#[test]
fn a_refund_is_not_denied_from_a_remembered_denial() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let a = process(&server, "forget", FailurePolicy::FailClosed).await;
        let mut last = None;
        while let Ok(grant) = a.check("t").await {
            last = Some(grant);
        }
        // Denied from memory now, without a round trip.
        assert!(a.check("t").await.is_err());
        assert!(a.stats().from_cache() >= 1);
        a.refund(last.unwrap()).await.unwrap();
        assert!(a.check("t").await.is_ok(), "the token given back");
    });
}

/// A weight that fits the burst this process knows, but not the burst
/// another process cut it to: this process learns the cut from Redis
/// and draws again, and the request never fits. It is denied as such,
/// by Redis, not handed to the failure policy as a store error (a
/// fail-open policy would grant it).
#[test]
fn a_weight_another_processs_cut_leaves_too_large_never_fits() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let a = process(&server, "cut-weight", FailurePolicy::FailOpen).await;
        let b = process(&server, "cut-weight", FailurePolicy::FailOpen).await;
        b.set_quota(slow(8)).await.unwrap();
        // `a` still knows a burst of 20 over its 4 buckets: 12 tokens fit.
        let denied = a.check(Request::tenant("t").tokens(12)).await.unwrap_err();
        assert_eq!(
            denied.reason(),
            shuffle_limiter::DenialReason::NeverFits { asked: 12, most: 8 },
            "retry after {:?}",
            denied.retry_after()
        );
        assert_eq!(a.quota(), slow(8));
        assert_eq!(a.stats().from_policy(), 0, "not a store error");
    });
}
