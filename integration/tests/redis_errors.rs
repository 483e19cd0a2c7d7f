//! What a Redis limiter refuses, with a typed error: keys of another type,
//! URLs that are not, wrong passwords, configurations that cannot work.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use shuffle_limiter::redis::{BuildError, Error, FailurePolicy, Source};
use shuffle_limiter::{Quota, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/serial.rs"]
mod serial;
use redis_server::RedisServer;
use serial::{options, redis_limiter, serial};

#[test]
fn a_key_of_another_type_is_never_granted_past_even_when_failing_open() {
    let server = RedisServer::start();
    serial(async {
        let limiter = redis_limiter(
            &server,
            Quota::per_second(16),
            (16, 1),
            "clash-open",
            FailurePolicy::FailOpen,
        )
        .await;
        let bucket = limiter.shard("victim").buckets()[0];
        let mut admin = server.connection().await;
        let () = redis::cmd("RPUSH")
            .arg(limiter.key(bucket).unwrap())
            .arg("x")
            .query_async(&mut admin)
            .await
            .unwrap();
        for _ in 0..50 {
            let decision = limiter.decide("victim").await;
            assert_eq!(decision.source(), Source::Policy);
            assert!(
                !decision.is_granted(),
                "a stray key must not lift the limit"
            );
        }
        // The breaker stayed closed for everyone else.
        let other = (0..100)
            .map(|i| format!("other-{i}"))
            .find(|o| !limiter.shard(o).contains(bucket))
            .unwrap();
        assert_eq!(limiter.decide(&other).await.source(), Source::Redis);
    });
}

#[test]
fn bad_urls_are_typed_errors_and_an_unreachable_server_is_not() {
    serial(async {
        let builder = ShardedLimiter::builder().quota(Quota::per_second(10));
        for url in ["http://127.0.0.1:6379", "not a url"] {
            let err = builder
                .clone()
                .build_redis(url, options(FailurePolicy::FailClosed))
                .await
                .unwrap_err();
            assert!(
                matches!(err, BuildError::InvalidUrl { .. }),
                "{url}: {err:?}"
            );
            assert!(err.to_string().contains("use redis://"), "{err}");
        }
        // A port nobody listens on: not an error of the build (the server
        // may be restarting, issue 24 item 9); the policy decides until it
        // answers, without waiting for it.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let started = Instant::now();
        let limiter = builder
            .clone()
            .build_redis(
                &format!("redis://127.0.0.1:{port}"),
                options(FailurePolicy::FailClosed),
            )
            .await
            .unwrap();
        let decision = limiter.decide("t").await;
        assert_eq!(decision.source(), Source::Policy);
        assert!(decision.result().is_err());
        assert!(started.elapsed() < Duration::from_secs(2));
    });
}

#[test]
fn a_wrong_password_is_a_typed_error() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    serial(async {
        let builder = ShardedLimiter::builder()
            .quota(Quota::per_second(10))
            .name("auth");
        let url = |auth: &str| format!("redis://{auth}127.0.0.1:{}", server.port);
        for auth in [":wrong@", ""] {
            let err = builder
                .clone()
                .build_redis(&url(auth), options(FailurePolicy::FailClosed))
                .await
                .unwrap_err();
            eprintln!("{err}");
            assert!(
                matches!(err, BuildError::Redis(Error::Auth { .. })),
                "{auth}: {err:?}"
            );
            assert!(err.to_string().contains("redis://:PASSWORD@host"), "{err}");
        }
        let limiter = builder
            .build_redis(&url(":s3cret@"), options(FailurePolicy::FailClosed))
            .await
            .unwrap();
        assert_eq!(limiter.decide("t").await.source(), Source::Redis);
    });
}

#[test]
fn a_key_holding_something_else_is_a_typed_error() {
    let server = RedisServer::start();
    serial(async {
        let limiter = redis_limiter(
            &server,
            Quota::per_second(16),
            (16, 2),
            "clash",
            FailurePolicy::FailClosed,
        )
        .await;
        let shard = limiter.shard("victim");
        let (hash, text) = (shard.buckets()[0], shard.buckets()[1]);
        let mut admin = server.connection().await;
        let () = redis::cmd("HSET")
            .arg(limiter.key(hash).unwrap())
            .arg("field")
            .arg("value")
            .query_async(&mut admin)
            .await
            .unwrap();
        let decision = limiter.decide("victim").await;
        assert_eq!(decision.source(), Source::Policy);
        assert!(!decision.is_granted(), "FailClosed denies");
        let Some(Error::NotABucket { key, .. }) = decision.error() else {
            panic!("{:?}", decision.error());
        };
        assert!(key == limiter.key(hash).unwrap() || key == limiter.key(text).unwrap());
        let message = decision.error().unwrap().to_string();
        eprintln!("{message}");
        assert!(message.contains("delete the key"), "{message}");

        let () = redis::cmd("DEL")
            .arg(limiter.key(hash).unwrap())
            .query_async(&mut admin)
            .await
            .unwrap();
        let () = redis::cmd("SET")
            .arg(limiter.key(text).unwrap())
            .arg("not a time")
            .query_async(&mut admin)
            .await
            .unwrap();
        // A string that is not a time is repaired as an empty bucket: the
        // other bucket (full again) pays, and the key now holds a time.
        let decision = limiter.decide("victim").await;
        assert_eq!(decision.source(), Source::Redis);
        assert_eq!(decision.result().unwrap().bucket(), hash);
        let repaired: String = redis::cmd("GET")
            .arg(limiter.key(text).unwrap())
            .query_async(&mut admin)
            .await
            .unwrap();
        assert!(repaired.parse::<u64>().is_ok(), "{repaired}");

        // One bad key does not take Redis away from the other tenants.
        let other = (0..100)
            .map(|i| format!("other-{i}"))
            .find(|o| limiter.shard(o).overlap(&shard) == 0)
            .unwrap();
        assert_eq!(limiter.decide(&other).await.source(), Source::Redis);
    });
}

#[test]
fn configurations_that_cannot_work_are_refused_before_connecting() {
    serial(async {
        // Nothing listens on port 1: every error below comes before connecting.
        let url = "redis://127.0.0.1:1";
        let base = || {
            ShardedLimiter::builder()
                .quota(Quota::per_second(40))
                .buckets(8)
        };
        let refuse = |builder: shuffle_limiter::Builder, options| async move {
            builder.build_redis(url, options).await.unwrap_err()
        };
        let err = refuse(
            ShardedLimiter::builder(),
            options(FailurePolicy::FailClosed),
        )
        .await;
        assert!(matches!(
            err,
            BuildError::Config(shuffle_limiter::ConfigError::MissingQuota)
        ));
        for name in ["", "a{b", "}"] {
            let err = refuse(base().name(name), options(FailurePolicy::FailClosed)).await;
            assert!(
                matches!(err, BuildError::InvalidName { .. }),
                "{name:?}: {err:?}"
            );
        }
        let err = refuse(
            base(),
            options(FailurePolicy::LocalFallback { replicas: 0 }),
        )
        .await;
        assert!(matches!(err, BuildError::ZeroReplicas), "{err:?}");
        let err = refuse(
            base(),
            options(FailurePolicy::LocalFallback { replicas: 6 }),
        )
        .await;
        assert!(
            matches!(
                err,
                BuildError::FallbackBurstTooSmall {
                    burst: 40,
                    replicas: 6,
                    buckets: 8
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string().contains("raise the burst to at least 48"),
            "{err}"
        );
        let err = refuse(
            base(),
            options(FailurePolicy::FailOpen).deadline(Duration::ZERO),
        )
        .await;
        assert!(
            matches!(err, BuildError::ZeroDuration { option: "deadline" }),
            "{err:?}"
        );
        // A bucket refilling over 40 years: within what 64-bit nanoseconds
        // count (the core takes it), beyond the 35 years the script counts.
        let long = base()
            .quota(Quota::new(1, Duration::from_secs(40 * 365 * 86_400)))
            .buckets(1)
            .per_tenant(1);
        let err = refuse(long, options(FailurePolicy::FailClosed)).await;
        assert!(matches!(err, BuildError::RefillTooLong { .. }), "{err:?}");
    });
}
