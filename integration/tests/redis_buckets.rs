//! Changing N of a Redis limiter while it runs, against a real
//! `redis-server`: the N one process sets is the one every other process
//! decides with next, on its tenants' new shards; buckets that stay keep
//! their tokens, added ones start empty, removed ones are deleted; a
//! process without room for the new N fails until rebuilt; a handle made
//! before the change draws on the new shard; and a fleet
//! checking all along never gets more than the budget.

use std::time::{Duration, Instant};

use redis::AsyncCommands;
use shuffle_limiter::redis::{Error, FailurePolicy, RedisLimiter, RedisOptions, Source};
use shuffle_limiter::set::{LimiterSet, SetConfig};
use shuffle_limiter::{Assignment, ConfigError, Limit, MonotonicClock, Quota, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;
#[path = "support/fleet.rs"]
mod fleet;
use fleet::{Load, drain, runtime};

/// 40 tokens refilling over 40 s: a test's own time adds a token or two.
fn slow() -> Quota {
    Quota::new(40, Duration::from_secs(40))
}

/// A limiter as one process of a fleet builds it: 4 buckets of 10, all
/// four every tenant's, with room for `max`.
async fn process(server: &RedisServer, name: &str, max: u32) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(slow())
        .buckets(4)
        .max_buckets(max)
        .per_tenant(4)
        .name(name)
        .build_redis(
            &server.url(),
            RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(2)),
        )
        .await
        .unwrap()
}

#[test]
fn n_set_by_one_process_is_what_the_others_decide_with_next() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let a = process(&server, "grow", 8).await;
        let b = process(&server, "grow", 8).await;
        // 20 of the 40 used: each of the 4 buckets holds 5 of its 10.
        assert_eq!(drain(&a, "t", 20).await, 20);
        a.set_buckets(8).await.unwrap();
        assert_eq!(a.buckets(), 8);
        // b learns N from Redis on its next decision, and draws on the
        // tenant's shard among 8: the buckets below 4 kept their 5 tokens
        // (the new burst, 5, holds them all), the ones added are empty.
        let shard = Assignment::new(8, 4, b"").unwrap().shard("t");
        let kept = shard.buckets().iter().filter(|&&b| b < 4).count() as u32;
        let left = drain(&b, "t", 40).await;
        assert!(
            (5 * kept..=5 * kept + 1).contains(&left),
            "{left} left, {kept} of its buckets kept 5 each"
        );
        assert_eq!((b.buckets(), b.shard("t")), (8, shard));
        assert_eq!(b.bucket_burst(7), Some(5));
        let mut connection = server.connection().await;
        let exists: bool = connection.exists("{grow}:b7").await.unwrap();
        assert!(exists, "the added buckets are written, empty");
        // And back: the removed buckets' keys go, with their tokens.
        b.set_buckets(4).await.unwrap();
        for bucket in 4..8 {
            let exists: bool = connection
                .exists(format!("{{grow}}:b{bucket}"))
                .await
                .unwrap();
            assert!(!exists, "bucket {bucket} was removed");
        }
        assert!(drain(&a, "t", 40).await <= 1 + 5 * kept);
        assert_eq!(a.buckets(), 4);
        let text: String = connection.get("{grow}:quota").await.unwrap();
        assert!(text.ends_with(" 40 40000000000 40 4"), "{text}");
        assert_eq!(a.stats().from_policy() + b.stats().from_policy(), 0);
    });
}

/// A handle made before a change of N draws, over Redis as in process, on
/// its tenant's shard under the new N, resolved again on each check.
#[test]
fn a_handle_made_before_a_change_of_n_draws_on_the_new_shard() {
    // A tenant whose shard among 8 keeps some of the 4 buckets, not all.
    let kept = |tenant: &str| {
        let shard = Assignment::new(8, 4, b"").unwrap().shard(tenant);
        shard.buckets().iter().filter(|&&b| b < 4).count() as u32
    };
    let tenant = (0..100)
        .map(|i| format!("t{i}"))
        .find(|t| (1..4).contains(&kept(t)))
        .expect("some tenant keeps part of its shard");
    let server = RedisServer::start();
    runtime().block_on(async {
        let limiter = process(&server, "handle", 8).await;
        let handle = limiter.handle(tenant.as_str());
        limiter.set_buckets(8).await.unwrap();
        let shard = limiter.shard(tenant.as_str());
        assert_ne!(handle.shard(), shard);
        // Its kept buckets hold 5 each (the burst under 8); the added ones
        // are empty: every grant comes from the kept ones of the new shard.
        for _ in 0..5 * kept(&tenant) {
            let bucket = handle.check().await.unwrap().bucket();
            assert!(
                shard.contains(bucket),
                "bucket {bucket} is not in {shard:?}"
            );
        }
    });
}

#[test]
fn a_process_without_room_for_the_new_n_fails_until_rebuilt() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let a = process(&server, "room", 8).await;
        let small = process(&server, "room", 4).await;
        assert!(small.check("t").await.is_ok());
        a.set_buckets(6).await.unwrap();
        let decision = small.decide("t").await;
        assert_eq!(decision.source(), Source::Policy);
        assert!(!decision.is_granted());
        let error = decision.error().unwrap();
        assert!(
            matches!(
                error,
                Error::Config(ConfigError::BucketsAboveMax {
                    buckets: 6,
                    max_buckets: 4
                })
            ),
            "{error:?}"
        );
        assert!(error.to_string().contains(".max_buckets(6)"), "{error}");
        // Refused here too, and nothing changed in Redis.
        assert!(matches!(small.set_buckets(5).await, Err(Error::Config(_))));
        let rebuilt = process(&server, "room", 8).await;
        assert!(rebuilt.check("t").await.is_ok());
        assert_eq!(rebuilt.buckets(), 6);
    });
}

#[test]
fn a_change_of_n_racing_a_fleet_keeps_the_budget() {
    let server = RedisServer::start();
    runtime().block_on(async {
        // 200/s with a burst of 40: every N below splits it exactly.
        let quota = Quota::per_second(200).with_burst(40);
        let build = || async {
            ShardedLimiter::builder()
                .quota(quota)
                .buckets(8)
                .max_buckets(10)
                .per_tenant(2)
                .name("fleet-resize")
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
        for n in [10, 5, 8, 4, 10, 8] {
            tokio::time::sleep(Duration::from_millis(100)).await;
            changer.set_buckets(n).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let granted = load.stop().await as f64;
        let bound = 200.0 * start.elapsed().as_secs_f64() + 40.0;
        assert!(granted <= bound, "{granted} granted, at most {bound}");
        // The load kept the buckets busy: well over the burst.
        assert!(granted > 80.0, "{granted} granted of {bound}");
        assert_eq!(changer.buckets(), 8);
    });
}

#[test]
fn a_reload_changes_n_over_redis_for_the_fleet() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let text = |buckets: u32| {
            format!(
                "[limiters.partner]\nrate = \"40/40s\"\nbuckets = {buckets}\nmax_buckets = 8\n\
                 per_tenant = 4\nredis = \"{}\"\nfailure_policy = \"fail_closed\"\n",
                server.url()
            )
        };
        let config = |buckets| -> SetConfig { toml::from_str(&text(buckets)).unwrap() };
        let set = LimiterSet::connect(&config(4)).await.unwrap();
        let other = process(&server, "partner", 8).await;
        let grown = config(8);
        let reload = set
            .reload_connect(&grown, MonotonicClock::new())
            .await
            .unwrap();
        assert_eq!(reload.changed(), ["partner"]);
        assert_eq!(set.get_redis("partner").unwrap().buckets(), 8);
        // Another process of the fleet takes it on its next decision.
        assert!(other.check("t").await.is_ok());
        assert_eq!(other.buckets(), 8);
    });
}

/// Issue 24, item 8 over Redis: a quota and N that neither order of
/// `set_quota` and `set_buckets` reaches are set in one script, for every
/// process; and a process that learns both at once moves its local
/// fallback to both (its share of the new quota over the new N), where two
/// steps stopped half-way.
#[test]
fn a_quota_and_n_together_reach_the_fleet_and_its_fallbacks_in_one_step() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let url = server.url();
        let build = || {
            ShardedLimiter::builder()
                .quota(Quota::per_second(2).with_burst(16))
                .buckets(2)
                .max_buckets(8)
                .per_tenant(2)
                .name("both")
                .build_redis(
                    &url,
                    RedisOptions::new(FailurePolicy::LocalFallback { replicas: 2 })
                        .deadline(Duration::from_secs(2)),
                )
        };
        let (a, b) = (build().await.unwrap(), build().await.unwrap());
        let fast = Quota::per_second(u32::MAX).with_burst(16);
        // 4294967295/s is too fast for 2 buckets.
        assert!(matches!(
            a.set_quota(fast).await,
            Err(Error::Config(ConfigError::RateTooHigh { .. }))
        ));
        a.set_quota_and_buckets(fast, 8).await.unwrap();
        assert_eq!((a.quota(), a.buckets()), (fast, 8));
        let share = Quota::new(u32::MAX, Duration::from_secs(2)).with_burst(8);
        let fallback = a.fallback().unwrap();
        assert_eq!((fallback.quota(), fallback.buckets()), (share, 8));
        // b learns both from Redis at its next decision, fallback and all.
        assert_eq!(b.decide("t").await.source(), Source::Redis);
        assert_eq!((b.quota(), b.buckets()), (fast, 8));
        let fallback = b.fallback().unwrap();
        assert_eq!((fallback.quota(), fallback.buckets()), (share, 8));
    });
}

/// The largest N moves in one script too: the change reads every bucket
/// with one `MGET`, which Lua's `unpack` cannot hand 65 536 keys at once.
#[test]
fn the_largest_n_changes_its_quota_and_its_n() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let n = shuffle_limiter::MAX_BUCKETS;
        let limiter = ShardedLimiter::builder()
            .quota(Quota::new(n, Duration::from_secs(8000)).with_burst(2 * n))
            .buckets(n)
            .per_tenant(2)
            .name("largest")
            .build_redis(
                &server.url(),
                RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(10)),
            )
            .await
            .unwrap();
        limiter.check("t").await.unwrap();
        let doubled = Quota::new(2 * n, Duration::from_secs(8000)).with_burst(4 * n);
        limiter.set_quota(doubled).await.unwrap();
        let snapshot = limiter.snapshot().await.unwrap();
        assert_eq!(snapshot.len(), n as usize);
        assert!(
            snapshot.iter().all(|b| b.burst() == 4),
            "every bucket's burst doubled"
        );
        // One bucket paid a token of its 2: it keeps its share, 2 of 4.
        let short: Vec<_> = snapshot.iter().filter(|b| b.available() < 4).collect();
        assert_eq!(short.len(), 1, "{short:?}");
        assert_eq!(short[0].available(), 2);
        limiter.set_buckets(n / 2).await.unwrap();
        assert_eq!(limiter.snapshot().await.unwrap().len(), (n / 2) as usize);
    });
}
