//! Values in Redis that the limiter did not write, against a real
//! `redis-server`: a quota key of another type, a quota version no double
//! holds, and bucket keys booked far ahead by waits. None of them may lift
//! the budget, under any failure policy but the local fallback.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;
use redis::aio::MultiplexedConnection;
use shuffle_limiter::redis::{Error, FailurePolicy, Layout, RedisLimiter, RedisOptions, Source};
use shuffle_limiter::{Limit, Quota, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

/// Grants for `tenant` until the first denial (at most `most`).
async fn drain(limiter: &RedisLimiter, tenant: &str, most: u32) -> u32 {
    for granted in 0..most {
        if limiter.check(tenant).await.is_err() {
            return granted;
        }
    }
    most
}

/// A runtime with two workers, as the other Redis tests run in.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `burst` tokens over 1000 s: nothing refills within a test.
fn slow(burst: u32) -> Quota {
    Quota::new(burst, Duration::from_secs(1000)).with_burst(burst)
}

/// A limiter as one process of a fleet builds it, with a deadline a busy
/// machine cannot miss (these tests are about values, not latency).
async fn build(
    server: &RedisServer,
    name: &str,
    (quota, buckets, k): (Quota, u32, u32),
    options: RedisOptions,
) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(quota)
        .buckets(buckets)
        .per_tenant(k)
        .name(name)
        .build_redis(&server.url(), options.deadline(Duration::from_secs(2)))
        .await
        .unwrap()
}

/// Runs `command` with `args` on the test's own connection.
async fn admin(connection: &mut MultiplexedConnection, command: &str, args: &[&str]) {
    let mut cmd = redis::cmd(command);
    for arg in args {
        cmd.arg(*arg);
    }
    let () = cmd.query_async(connection).await.unwrap();
}

/// What `TYPE` answers for `key`.
async fn key_type(connection: &mut MultiplexedConnection, key: &str) -> String {
    redis::cmd("TYPE")
        .arg(key)
        .query_async(connection)
        .await
        .unwrap()
}

#[test]
fn a_quota_key_of_another_type_denies_even_under_fail_open() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let writes: [(&str, &[&str]); 3] = [
            ("HSET", &["field", "value"]),
            ("RPUSH", &["1 16 1000000000000 16 2"]),
            ("SADD", &["member"]),
        ];
        for (i, (command, args)) in writes.into_iter().enumerate() {
            let name = format!("typed{i}");
            let limiter = build(
                &server,
                &name,
                (slow(16), 2, 2),
                RedisOptions::new(FailurePolicy::FailOpen),
            )
            .await;
            let key = format!("{{{name}}}:quota");
            let mut with_key = vec![key.as_str()];
            with_key.extend_from_slice(args);
            admin(&mut connection, command, &with_key).await;
            // The tenant's buckets hold 16: a key of another type is data,
            // not an outage, so FailOpen grants none of it.
            let mut granted = 0;
            for _ in 0..40 {
                let decision = limiter.decide("t").await;
                if decision.is_granted() {
                    granted += 1;
                    continue;
                }
                assert_eq!(decision.source(), Source::Policy, "{command}");
                let error = decision.error().unwrap();
                assert!(
                    matches!(error, Error::NotAQuota { key: k, .. } if *k == key),
                    "{command}: {error:?}"
                );
            }
            assert_eq!(granted, 0, "{command}: {granted} of 40 granted");
            // Changing the quota or giving back meets the same typed error.
            let err = limiter.set_quota(slow(8)).await.unwrap_err();
            assert!(matches!(err, Error::NotAQuota { .. }), "{command}: {err:?}");
            // The key is left as it was: someone else's data.
            assert_ne!(key_type(&mut connection, &key).await, "string", "{command}");
        }
    });
}

#[test]
fn a_spread_quota_key_of_another_type_denies_even_under_fail_open() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let limiter = build(
            &server,
            "typed-spread",
            (slow(8), 4, 2),
            RedisOptions::new(FailurePolicy::FailOpen).layout(Layout::Spread),
        )
        .await;
        let mut connection = server.connection().await;
        admin(
            &mut connection,
            "HSET",
            &["{typed-spread:b0}:quota", "f", "v"],
        )
        .await;
        // 50 tenants, 10 decisions each: the four buckets hold 8 in all.
        let (mut granted, mut typed) = (0, 0);
        for i in 0..500 {
            let decision = limiter.decide(format!("t{}", i % 50)).await;
            if decision.is_granted() {
                granted += 1;
            } else if let Some(Error::NotAQuota { key, .. }) = decision.error() {
                assert_eq!(key, "{typed-spread:b0}:quota");
                typed += 1;
            }
        }
        assert!(granted <= 8, "{granted} granted where the buckets hold 8");
        assert!(typed > 0, "no decision named the quota key");
    });
}

#[test]
fn a_quota_version_no_double_holds_is_refused_and_never_decided_with() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let shape = (slow(8), 8, 8);
        let a = build(
            &server,
            "big",
            shape,
            RedisOptions::new(FailurePolicy::FailOpen),
        )
        .await;
        let b = build(
            &server,
            "big",
            shape,
            RedisOptions::new(FailurePolicy::FailClosed),
        )
        .await;
        let mut connection = server.connection().await;
        // 2^53: burst 64, which a double cannot tell from 2^53 + 1.
        let _: () = connection
            .set("{big}:quota", "9007199254740992 64 8000000000000 64 8")
            .await
            .unwrap();
        let decision = a.decide("t").await;
        // Another process setting burst 8 must not write a version that
        // reads the same as the one `a` decides with ...
        let change = b.set_quota(slow(8)).await;
        // ... so that no process decides with burst 64, nor with either.
        let granted = u32::from(decision.is_granted())
            + drain(&a, "t", 100).await
            + drain(&b, "t", 100).await;
        assert_eq!(granted, 0, "{granted} granted on a key no double holds");
        let error = decision.error().unwrap();
        assert!(matches!(error, Error::NotAQuota { .. }), "{error:?}");
        assert!(error.to_string().contains("2^53"), "{error}");
        let err = change.unwrap_err();
        assert!(matches!(err, Error::NotAQuota { .. }), "{err:?}");

        // 2^53 - 1 is the last version a double holds: decided with, but
        // a change would write 2^53, so it is refused and writes nothing.
        let last = "9007199254740991 8 1000000000000 8 8";
        let _: () = connection.set("{big}:quota", last).await.unwrap();
        assert_eq!(drain(&a, "u", 100).await, 8);
        let err = b.set_quota(slow(16)).await.unwrap_err();
        assert!(matches!(err, Error::NotAQuota { .. }), "{err:?}");
        let key: String = connection.get("{big}:quota").await.unwrap();
        assert_eq!(key, last);
        assert_eq!(drain(&b, "u", 100).await, 0);
    });
}

/// Books waits on one tenant until each of its buckets is owed 4 s or more,
/// and checks that each bucket key lives at least until that bucket is full
/// again by the server's clock: an expired key reads as a full bucket, so
/// another process would be granted what the waits booked.
async fn waits_far_ahead_keep_their_keys(server: &RedisServer, layout: Layout, name: &str) {
    // Two buckets of one token, 2/s each.
    let limiter = Arc::new(
        build(
            server,
            name,
            (Quota::per_second(4).with_burst(2), 2, 2),
            RedisOptions::new(FailurePolicy::FailClosed).layout(layout),
        )
        .await,
    );
    let waiters: Vec<_> = (0..24)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move { limiter.wait("t").await.unwrap() })
        })
        .collect();
    let keys: Vec<String> = (0..2).map(|b| limiter.key(b).unwrap().to_owned()).collect();
    let mut connection = server.connection().await;
    let owed = |tat: Option<u64>, now: u64| tat.map_or(0, |tat| tat.saturating_sub(now));
    // Bounded: 24 bookings are a few dozen round trips.
    let asked = Instant::now();
    let (tats, now) = loop {
        let tats: Vec<Option<u64>> = connection.mget(&keys).await.unwrap();
        let (secs, micros): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut connection)
            .await
            .unwrap();
        let now = secs * 1_000_000 + micros;
        if tats.iter().all(|&tat| owed(tat, now) >= 4_000_000) {
            break (tats, now);
        }
        assert!(
            asked.elapsed() < Duration::from_secs(5),
            "{tats:?} at {now}"
        );
        tokio::task::yield_now().await;
    };
    for (key, tat) in keys.iter().zip(tats) {
        let ttl_ms: i64 = connection.pttl(key).await.unwrap();
        // A millisecond of slack for the reads between TIME and PTTL.
        let owed_ms = owed(tat, now) / 1000;
        assert!(
            ttl_ms + 1 >= owed_ms as i64,
            "{key} expires in {ttl_ms} ms, full again only in {owed_ms} ms"
        );
    }
    // Past the second the keys lived before: the TTL runs on the server's
    // clock, which no test clock drives. Another process still finds the
    // bookings, and is denied.
    let other = build(
        server,
        name,
        (Quota::per_second(4).with_burst(2), 2, 2),
        RedisOptions::new(FailurePolicy::FailClosed).layout(layout),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let decision = other.decide("t").await;
    assert_eq!(decision.source(), Source::Redis);
    assert!(!decision.is_granted(), "granted what the waits booked");
    for waiter in waiters {
        waiter.abort();
    }
}

#[test]
fn waits_booked_seconds_ahead_keep_their_one_slot_keys() {
    let server = RedisServer::start();
    runtime().block_on(waits_far_ahead_keep_their_keys(
        &server,
        Layout::OneSlot,
        "ahead",
    ));
}

#[test]
fn waits_booked_seconds_ahead_keep_their_spread_keys() {
    let server = RedisServer::start();
    runtime().block_on(waits_far_ahead_keep_their_keys(
        &server,
        Layout::Spread,
        "ahead-spread",
    ));
}

#[test]
fn a_quota_key_no_limiter_can_take_denies_and_never_panics() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let a = build(
            &server,
            "odd",
            (slow(8), 4, 2),
            RedisOptions::new(FailurePolicy::FailOpen),
        )
        .await;
        let mut connection = server.connection().await;
        for text in [
            "1 0 1000000000 8 4",
            "1 8 0 8 4",
            "1 8 1000000000 0 4",
            "1 8 1000000000 8 0",
            "1 8 1000000000 8 4294967295",
            "1 4294967295 1 4294967295 4",
            "1 8 340282366920938463463374607431768211455 8 4",
            "1 1 18446744073709551615 4294967295 4",
            "0 8 1000000000 8 4 5",
            "1 8 1000000000 8 4 ",
            " 1 8 1000000000 8 4",
            "1e3 8 1000000000 8 4",
            "0x10 8 1000000000 8 4",
            "",
        ] {
            let _: () = connection.set("{odd}:quota", text).await.unwrap();
            let decision = a.decide("t").await;
            assert!(!decision.is_granted(), "{text:?} granted");
            let error = decision.error();
            assert!(
                matches!(error, Some(Error::NotAQuota { .. } | Error::Config(_))),
                "{text:?}: {error:?}"
            );
        }
    });
}

#[test]
fn a_quota_key_of_version_0_is_refused_so_no_two_processes_differ() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let shape = (slow(8), 4, 4);
        let changer = build(
            &server,
            "zero",
            shape,
            RedisOptions::new(FailurePolicy::FailClosed),
        )
        .await;
        changer.set_quota(slow(8)).await.unwrap();
        let fresh = build(
            &server,
            "zero",
            shape,
            RedisOptions::new(FailurePolicy::FailClosed),
        )
        .await;
        // Version 0 is what a process built without a key decides with: a
        // key of version 0 with burst 64 would be taken by a process that
        // reads it, while a fresh one keeps its burst 8 under the same 0.
        let mut connection = server.connection().await;
        let _: () = connection
            .set("{zero}:quota", "0 64 8000000000000 64 4")
            .await
            .unwrap();
        let granted = drain(&changer, "t", 100).await + drain(&fresh, "t", 100).await;
        assert!(granted <= 8, "{granted} granted where the burst is 8");
        let decision = fresh.decide("t").await;
        let error = decision.error();
        assert!(matches!(error, Some(Error::NotAQuota { .. })), "{error:?}");
    });
}

#[test]
fn a_change_leaves_a_bucket_key_of_another_type_alone() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let limiter = build(
            &server,
            "foreign",
            (slow(8), 4, 2),
            RedisOptions::new(FailurePolicy::FailClosed),
        )
        .await;
        let mut connection = server.connection().await;
        admin(&mut connection, "HSET", &["{foreign}:b1", "f", "v"]).await;
        admin(&mut connection, "RPUSH", &["{foreign}:b3", "x"]).await;
        // A new quota would SET every bucket; a smaller N would DEL b3.
        let err = limiter.set_quota(slow(16)).await.unwrap_err();
        assert!(matches!(err, Error::NotABucket { .. }), "{err:?}");
        let err = limiter.set_buckets(2).await.unwrap_err();
        assert!(matches!(err, Error::NotABucket { .. }), "{err:?}");
        assert_eq!(key_type(&mut connection, "{foreign}:b1").await, "hash");
        assert_eq!(key_type(&mut connection, "{foreign}:b3").await, "list");
        // Nothing moved: no quota key, the limiter as built.
        let quota: Option<String> = connection.get("{foreign}:quota").await.unwrap();
        assert_eq!(quota, None);
        assert_eq!((limiter.quota(), limiter.buckets()), (slow(8), 4));
    });
}
