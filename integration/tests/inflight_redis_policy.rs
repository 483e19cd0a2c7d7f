//! In-flight leases over Redis when things are not as they should be:
//! pool keys holding other data, Redis gone, waits that cannot be served,
//! options that cannot work — and the hung tenant, whose pools are the
//! only ones it can fill.

use std::time::Duration;

use redis::AsyncCommands;
use shuffle_limiter::inflight::{InFlight, LeaseBuildError, LeaseError, LeaseSource, RejectReason};
use shuffle_limiter::redis::{Error, FailurePolicy};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/leases.rs"]
mod support;

use redis_server::RedisServer;
use support::{closed, limit, one_at_a_time, options, runtime};

const TTL: Duration = Duration::from_secs(10);

fn reason(answer: Result<impl std::fmt::Debug, LeaseError>) -> Option<RejectReason> {
    answer.unwrap_err().rejected().map(|r| r.reason())
}

#[test]
fn a_hung_tenant_fills_its_own_pools_and_no_other() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        // The hung-tenant scene: C = 40 in 8 pools of 5, k = 2.
        let a = limit(&server, (40, 8, 2), closed("hung", TTL)).await;
        let b = limit(&server, (40, 8, 2), closed("hung", TTL)).await;
        let hung = a.shard("tenant-0");
        let mut held = Vec::new();
        while let Ok(lease) = a.try_acquire("tenant-0").await {
            held.push(lease);
        }
        assert_eq!(held.len(), 10, "its two pools' seats, and no more");
        assert_eq!(
            reason(a.try_acquire("tenant-0").await),
            Some(RejectReason::Busy)
        );
        let (mut served, mut starved) = (0, 0);
        for t in 1..40 {
            let tenant = format!("tenant-{t}");
            let answer = b.try_acquire(tenant.as_str()).await;
            if b.shard(tenant.as_str()).same_set(&hung) {
                assert_eq!(reason(answer), Some(RejectReason::Busy), "{tenant}");
                starved += 1;
            } else {
                let lease = answer.unwrap_or_else(|e| panic!("{tenant}: {e}"));
                assert!(lease.pools().all(|(p, _)| !hung.contains(p)), "{tenant}");
                served += 1;
            }
        }
        assert!(served >= 35, "{served} served, {starved} starved");
    });
}

#[test]
fn pool_keys_holding_other_data_are_typed_errors() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let shape = (8, 4, 2);
        let closed_limit = limit(&server, shape, closed("values", TTL)).await;
        let open = limit(
            &server,
            shape,
            options("values", TTL).failure_policy(FailurePolicy::FailOpen),
        )
        .await;
        let local =
            options("values", TTL).failure_policy(FailurePolicy::LocalFallback { replicas: 2 });
        let fallback = limit(&server, shape, local).await;
        let mut connection = support::connect(&server).await;
        let tenant = "tenant-1";
        let shard = closed_limit.shard(tenant);
        let key = closed_limit.key(shard.buckets()[0]).unwrap().to_owned();
        let _: () = connection.set(&key, "not a pool").await.unwrap();
        for inflight in [&closed_limit, &open] {
            match inflight.try_acquire(tenant).await.unwrap_err() {
                LeaseError::Redis(Error::NotAPool { key: k, .. }) => assert_eq!(k, key),
                other => panic!("{other}"),
            }
        }
        // Only the local fallback grants: data is not an outage.
        let lease = fallback.try_acquire(tenant).await.unwrap();
        assert_eq!(lease.source(), LeaseSource::Fallback);
        assert_eq!(lease.token(), None);
        // A tenant whose pools do not hold that key is served by Redis.
        let other = (0..100)
            .map(|t| format!("tenant-{t}"))
            .find(|t| !closed_limit.shard(t.as_str()).contains(shard.buckets()[0]))
            .unwrap();
        let lease = closed_limit.try_acquire(other.as_str()).await.unwrap();
        assert_eq!(lease.source(), LeaseSource::Redis);
        // A member that is not a lease, and a counter that is not one.
        let _: () = connection.del(&key).await.unwrap();
        let _: () = connection.zadd(&key, "garbage", 1u64 << 52).await.unwrap();
        let refused = closed_limit.try_acquire(tenant).await.unwrap_err();
        assert!(
            matches!(refused, LeaseError::Redis(Error::NotAPool { .. })),
            "{refused}"
        );
        assert!(refused.to_string().contains("delete the key"), "{refused}");
        let _: () = connection.del(&key).await.unwrap();
        let _: () = connection
            .set("{values}:lease", "not a number")
            .await
            .unwrap();
        let refused = closed_limit.try_acquire(tenant).await.unwrap_err();
        assert!(
            matches!(refused, LeaseError::Redis(Error::NotAPool { .. })),
            "{refused}"
        );
    });
}

#[test]
fn with_redis_gone_the_failure_policy_answers() {
    let _serial = one_at_a_time();
    let mut server = RedisServer::start();
    runtime().block_on(async {
        let shape = (8, 4, 2);
        let quick = |policy| {
            closed("gone", TTL)
                .deadline(Duration::from_millis(300))
                .failure_policy(policy)
        };
        let closed_limit = limit(&server, shape, quick(FailurePolicy::FailClosed)).await;
        let open = limit(&server, shape, quick(FailurePolicy::FailOpen)).await;
        let local = limit(
            &server,
            shape,
            quick(FailurePolicy::LocalFallback { replicas: 2 }),
        )
        .await;
        server.kill();
        let refused = closed_limit.try_acquire("t").await.unwrap_err();
        assert!(refused.rejected().is_none(), "{refused}");
        assert!(matches!(refused, LeaseError::Redis(_)));
        let lease = open.try_acquire("t").await.unwrap();
        assert_eq!((lease.source(), lease.token()), (LeaseSource::Open, None));
        // The fallback holds this process's share: C / 2 = 4, 2 per tenant.
        let fallback = local.fallback().unwrap();
        assert_eq!(fallback.concurrency(), 4);
        let leases: Vec<_> = [local.try_acquire("t").await, local.try_acquire("t").await]
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert!(leases.iter().all(|l| l.source() == LeaseSource::Fallback));
        assert_eq!(
            reason(local.try_acquire("t").await),
            Some(RejectReason::Busy)
        );
        drop(leases);
        assert_eq!(
            fallback.available(),
            4,
            "a fallback permit gives its seat back"
        );
    });
}

#[test]
fn a_hung_redis_is_left_alone_until_it_answers_again() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let deadline = Duration::from_millis(150);
        let retry_every = Duration::from_millis(400);
        let options = closed("hang", TTL)
            .deadline(deadline)
            .retry_every(retry_every);
        // 10 seats a pool: the acquires that missed their deadline may
        // still take theirs once the server runs again.
        let a = limit(&server, (40, 4, 2), options).await;
        drop(a.try_acquire("t").await.unwrap());
        server.signal("-STOP");
        let mut slow = 0;
        let quick = loop {
            let start = std::time::Instant::now();
            let refused = a.try_acquire("t").await.unwrap_err();
            assert!(
                matches!(refused, LeaseError::Redis(Error::Timeout { .. })),
                "{refused}"
            );
            if start.elapsed() < deadline / 3 {
                break start.elapsed();
            }
            slow += 1;
            assert!(
                slow <= 8,
                "still waiting for Redis after {slow} missed deadlines"
            );
        };
        assert!(
            slow >= 3,
            "left alone after {slow} missed deadlines ({quick:?})"
        );
        server.signal("-CONT");
        tokio::time::sleep(retry_every + Duration::from_millis(100)).await;
        let lease = a.try_acquire("t").await.unwrap();
        assert_eq!(lease.source(), LeaseSource::Redis);
    });
}

#[test]
fn waits_are_bounded_in_time_and_in_callers() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let a = limit(&server, (1, 1, 1), closed("waits", TTL)).await;
        let held = a.try_acquire("t").await.unwrap();
        let max_wait = Duration::from_millis(150);
        let start = std::time::Instant::now();
        let late = a.acquire_within("t", max_wait).await;
        assert_eq!(reason(late), Some(RejectReason::TimedOut { max_wait }));
        assert!(start.elapsed() < Duration::from_secs(1));
        // No queue: a wait is refused at once.
        let none = InFlight::builder()
            .concurrency(1)
            .max_queue(0)
            .build_redis(support::connect(&server).await, closed("waits", TTL))
            .await
            .unwrap();
        let full = none.acquire_within("t", Duration::from_secs(5)).await;
        assert_eq!(reason(full), Some(RejectReason::QueueFull { max_queue: 0 }));
        // Seats no pool can ever hold, and none at all, as in process.
        let request = shuffle_limiter::Request::tenant("t").tokens(2);
        let never = reason(a.acquire(request).await);
        assert_eq!(never, Some(RejectReason::NeverFits { asked: 2, most: 1 }));
        let zero = shuffle_limiter::Request::tenant("t").tokens(0);
        assert_eq!(
            reason(a.try_acquire(zero).await),
            Some(RejectReason::ZeroSeats)
        );
        // A waiter of the other process is served once the seat is back.
        let waiter = tokio::spawn(none.try_acquire("t"));
        assert!(waiter.await.unwrap().is_err());
        // No bound at all (a bound past the clock's reach) is no panic.
        let waiter = tokio::spawn(a.acquire_within("t", Duration::MAX));
        tokio::time::sleep(Duration::from_millis(30)).await;
        drop(held);
        assert_eq!(waiter.await.unwrap().unwrap().seats(), 1);
    });
}

/// Promised by `Builder::max_wait` ("the longest an acquire waits ...
/// unless its own `within` says otherwise") and `build_redis` ("queue
/// lengths and waits are each process's own"), and by a `LimiterSet`'s
/// unset `max_wait` ("no bound"): over Redis the builder's bound, or none,
/// applies unless `LeaseOptions::max_wait` sets one. It was replaced by
/// the options' default of 1 s.
#[test]
fn the_builders_max_wait_bounds_an_acquire_over_redis() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let build = |builder: shuffle_limiter::inflight::Builder, options| async {
            let connection = support::connect(&server).await;
            builder.build_redis(connection, options).await.unwrap()
        };
        let builder = || InFlight::builder().concurrency(1).pools(1);
        let bounded = builder().max_wait(Duration::from_millis(200));
        let limit = build(bounded.clone(), closed("wait", TTL)).await;
        let _held = limit.try_acquire("t").await.unwrap();
        let started = std::time::Instant::now();
        let late = limit.acquire("t").await;
        let max_wait = Duration::from_millis(200);
        let waited = started.elapsed();
        assert_eq!(
            reason(late),
            Some(RejectReason::TimedOut { max_wait }),
            "waited {waited:?}"
        );
        // The options' bound, when set, comes first.
        let max_wait = Duration::from_millis(50);
        let options = closed("wait", TTL).max_wait(max_wait);
        let first = build(bounded, options).await.acquire("t").await;
        assert_eq!(reason(first), Some(RejectReason::TimedOut { max_wait }));
        // Neither sets one: no bound (not 1 s).
        let unbounded = build(builder(), closed("wait", TTL)).await;
        let waiter = tokio::spawn(unbounded.acquire("t"));
        tokio::time::sleep(Duration::from_millis(1300)).await;
        drop(_held);
        assert_eq!(waiter.await.unwrap().unwrap().seats(), 1);
    });
}

#[test]
fn options_that_cannot_work_are_refused_by_name() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let build = |options| {
            let server = &server;
            async move {
                InFlight::builder()
                    .concurrency(8)
                    .pools(4)
                    .build_redis(support::connect(server).await, options)
                    .await
                    .unwrap_err()
            }
        };
        let zero = build(options("o", Duration::ZERO)).await;
        assert!(matches!(zero, LeaseBuildError::ZeroTtl), "{zero}");
        assert!(zero.to_string().contains("use a TTL"), "{zero}");
        let slow = build(options("o", TTL).renew_every(TTL)).await;
        assert!(
            matches!(slow, LeaseBuildError::RenewTooSlow { .. }),
            "{slow}"
        );
        let name = build(options("a{b}", TTL)).await;
        assert!(
            matches!(name, LeaseBuildError::InvalidName { .. }),
            "{name}"
        );
        let prefix = build(options("o", TTL).key_prefix("x{")).await;
        assert!(
            matches!(prefix, LeaseBuildError::InvalidKeyPrefix { .. }),
            "{prefix}"
        );
        let share =
            build(options("o", TTL).failure_policy(FailurePolicy::LocalFallback { replicas: 3 }))
                .await;
        assert!(
            matches!(
                share,
                LeaseBuildError::FallbackTooSmall {
                    concurrency: 8,
                    replicas: 3,
                    pools: 4
                }
            ),
            "{share}"
        );
        let counts = InFlight::builder()
            .concurrency(3)
            .pools(4)
            .build_redis(support::connect(&server).await, options("o", TTL))
            .await
            .unwrap_err();
        assert!(matches!(counts, LeaseBuildError::Config(_)), "{counts}");
    });
}

/// A bounded wait ends within its bound even when an attempt would take a
/// whole deadline: over a stopped Redis, each attempt is cut at what is left
/// of the bound (its first one included), and the answer is `TimedOut`.
#[test]
fn a_bounded_wait_over_a_stopped_redis_ends_within_its_bound() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let deadline = Duration::from_millis(300);
        let options = |name| {
            options(name, TTL)
                .deadline(deadline)
                .retry_every(Duration::from_secs(10))
                .failure_policy(FailurePolicy::LocalFallback { replicas: 1 })
        };
        let a = limit(&server, (1, 1, 1), options("bound")).await;
        let fresh = limit(&server, (1, 1, 1), options("fresh")).await;
        server.signal("-STOP");
        // Redis stopped: the fallback's one seat is taken.
        let fallback = a.try_acquire("t").await.unwrap();
        assert_eq!(fallback.source(), LeaseSource::Fallback);
        for (limit, max_wait) in [(&a, 350), (&fresh, 50)] {
            let max_wait = Duration::from_millis(max_wait);
            let start = std::time::Instant::now();
            let answer =
                tokio::time::timeout(Duration::from_secs(5), limit.acquire_within("t", max_wait))
                    .await
                    .expect("hang guard");
            let took = start.elapsed();
            assert_eq!(reason(answer), Some(RejectReason::TimedOut { max_wait }));
            // 604 ms for the 350 ms bound before: an attempt ran its whole deadline.
            assert!(
                took <= max_wait + Duration::from_millis(100),
                "acquire_within({max_wait:?}) answered after {took:?} (deadline {deadline:?})"
            );
        }
        server.signal("-CONT");
    });
}

/// A bound of zero waits for no seat, not for no answer: its one try is
/// bounded by the deadline, as `try_acquire`'s is, so a slow round trip
/// (here Redis paused for 50 ms) still takes a free seat.
#[test]
fn a_zero_bound_is_one_try_however_long_its_round_trip() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let limit = limit(&server, (2, 2, 1), options("zero", TTL)).await;
        server.signal("-STOP");
        let resume = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            server.signal("-CONT");
        };
        let (taken, ()) = tokio::join!(limit.acquire_within("t", Duration::ZERO), resume);
        assert_eq!(taken.unwrap().source(), LeaseSource::Redis);
    });
}
