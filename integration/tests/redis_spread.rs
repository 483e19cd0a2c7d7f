//! The spread layout against a real Redis Cluster (three masters on free
//! 127.0.0.1 ports, see `support/redis_cluster.rs`): buckets spread over the
//! nodes, the budget holds exactly, a tenant gets its k buckets' worth, and
//! a node stopped with `SIGSTOP` touches only the tenants whose shards hold
//! one of its buckets, as `blast` predicts, where the one-slot layout loses
//! every tenant to it.

#![cfg(feature = "redis")]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use shuffle_limiter::redis::{BuildError, Error, FailurePolicy, Layout, RedisOptions, Source};
use shuffle_limiter::{DenialReason, Limit, Quota, Request, ShardedLimiter};

#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/spread.rs"]
mod spread;
use redis_cluster::{RedisCluster, one_at_a_time};
use spread::{bucket_nodes, build, runtime, spread};

// ---------------------------------------------------------------------------

#[test]
fn spread_buckets_live_on_several_nodes_and_the_fleet_gets_exactly_the_burst() {
    let _serial = one_at_a_time();
    let cluster = RedisCluster::start();
    runtime().block_on(async {
        // 10 tokens per bucket, one more per hour: nothing refills here.
        let builder = ShardedLimiter::builder()
            .quota(Quota::new(8, Duration::from_secs(3600)).with_burst(80))
            .buckets(8)
            .per_tenant(2)
            .name("spread-budget");
        let connection = cluster.connect().await;
        // Two limiters on two connections: two processes, each with its own
        // view of the buckets' rooms.
        let a = build(builder.clone(), &connection, spread()).await;
        let b = build(builder, &cluster.connect().await, spread()).await;
        assert_eq!(a.layout(), Layout::Spread);
        let nodes = bucket_nodes(&cluster, &a).await;
        let used: BTreeSet<_> = nodes.iter().collect();
        assert!(used.len() >= 2, "all buckets on one node: {nodes:?}");

        // A tenant alone gets its two buckets' worth, ten from each.
        let mut paid = BTreeMap::new();
        for _ in 0..25 {
            if let Ok(grant) = a.check("alone").await {
                *paid.entry(grant.bucket()).or_insert(0) += 1;
            }
        }
        let own: BTreeMap<u32, i32> = a
            .shard("alone")
            .buckets()
            .iter()
            .map(|&b| (b, 10))
            .collect();
        assert_eq!(paid, own, "each own bucket paid its burst");
        // Empty, each bucket has its next token in one interval, 3600 s: the
        // denial names that, whether it asked both buckets or knew them.
        let hour = Duration::from_secs(3600);
        let decision = b.decide("alone").await;
        assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
        let retry = decision.result().unwrap_err().retry_after();
        assert!(
            retry <= hour && retry > hour - Duration::from_secs(60),
            "{retry:?}"
        );
        let cached = a.decide("alone").await;
        assert_eq!(
            cached.source(),
            Source::CachedDenial,
            "a process that saw both buckets empty asks nobody"
        );
        let retry = cached.result().unwrap_err().retry_after();
        assert!(
            retry <= hour && retry > hour - Duration::from_secs(60),
            "{retry:?}"
        );

        // Weights: one bucket's burst is the most a request may ask.
        let err = a
            .check(Request::tenant("weighted").tokens(11))
            .await
            .unwrap_err();
        assert_eq!(
            err.reason(),
            DenialReason::NeverFits {
                asked: 11,
                most: 10
            }
        );
        assert!(err.to_string().contains("Layout::OneSlot"), "{err}");
        let grant = a
            .check(Request::tenant("weighted").tokens(10))
            .await
            .unwrap();
        assert_eq!(grant.payments().len(), 1);
        let read = a
            .decide(Request::tenant("weighted").tokens(0))
            .await
            .into_result()
            .unwrap();
        let weighted = a.shard("weighted");
        let left = 20 - 10 - 10 * weighted.overlap(&a.shard("alone")) as u64;
        assert_eq!(
            read.remaining(),
            left,
            "a weight of 0 reads every own bucket"
        );

        // The fleet: 200 tenants over both processes, five requests each,
        // drain every bucket and get exactly the burst B = 80, no more.
        let limiters = Arc::new([a, b]);
        let tasks: Vec<_> = (0..200)
            .map(|t| {
                let limiters = Arc::clone(&limiters);
                tokio::spawn(async move {
                    let limiter = &limiters[t % 2];
                    let mut granted = 0;
                    for _ in 0..5 {
                        let decision = limiter.decide(format!("tenant-{t}")).await;
                        assert_ne!(decision.source(), Source::Policy, "{:?}", decision.error());
                        granted += u64::from(decision.is_granted());
                    }
                    granted
                })
            })
            .collect();
        let mut fleet = 20 + 10; // "alone" and "weighted"
        for task in tasks {
            fleet += task.await.unwrap();
        }
        assert_eq!(fleet, 80, "the fleet got the burst B exactly");
        for limiter in limiters.iter() {
            assert_eq!(limiter.stats().errors(), 0);
        }
    });
}

#[test]
fn spread_under_a_flood_every_bucket_stays_within_its_rate_and_burst() {
    let _serial = one_at_a_time();
    let cluster = RedisCluster::start();
    runtime().block_on(async {
        // R = 400/s, B = 400 over N = 8: 50/s and 50 per bucket.
        let builder = ShardedLimiter::builder()
            .quota(Quota::per_second(400).with_burst(400))
            .buckets(8)
            .per_tenant(2)
            .name("spread-flood");
        let options = spread();
        let a = Arc::new(build(builder.clone(), &cluster.connect().await, options.clone()).await);
        let b = Arc::new(build(builder, &cluster.connect().await, options).await);
        let started = Instant::now();
        let stop = started + Duration::from_millis(1500);
        let tasks: Vec<_> = (0..16)
            .map(|t| {
                let limiter = Arc::clone(if t % 2 == 0 { &a } else { &b });
                tokio::spawn(async move {
                    let mut per_bucket = [0u64; 8];
                    let mut i = t;
                    while Instant::now() < stop {
                        if let Ok(grant) = limiter.check(format!("flood-{}", i % 40)).await {
                            per_bucket[grant.bucket() as usize] += 1;
                        }
                        i += 16;
                        tokio::task::yield_now().await;
                    }
                    per_bucket
                })
            })
            .collect();
        let mut per_bucket = [0u64; 8];
        for task in tasks {
            for (sum, got) in per_bucket.iter_mut().zip(task.await.unwrap()) {
                *sum += got;
            }
        }
        let t = started.elapsed().as_secs_f64();
        let fleet: u64 = per_bucket.iter().sum();
        let covered: BTreeSet<u32> = (0..40)
            .flat_map(|i| a.shard(format!("flood-{i}")).buckets().to_vec())
            .collect();
        // Every grant is one GCRA step on one bucket: each within R/N·t + B/N.
        for (bucket, &got) in per_bucket.iter().enumerate() {
            let bound = 50.0 * t + 50.0;
            assert!(got as f64 <= bound, "bucket {bucket}: {got} > {bound:.0}");
        }
        assert!(fleet as f64 <= 400.0 * t + 400.0, "{fleet} over {t:.2} s");
        // ... and the flood did reach the budget of the buckets it covers
        // (their bursts, then their rates), give or take a slow machine.
        let reachable = covered.len() as f64 / 8.0 * (400.0 + 400.0 * 1.5);
        assert!(
            fleet as f64 >= 0.75 * reachable,
            "only {fleet} granted of {reachable:.0}"
        );
        assert_eq!(a.stats().errors() + b.stats().errors(), 0);
    });
}

#[test]
fn spread_refuses_borrowing_at_build_with_what_to_change() {
    runtime().block_on(async {
        let err = ShardedLimiter::builder()
            .quota(Quota::per_second(100))
            .buckets(8)
            .per_tenant(2)
            .borrow_from(2)
            .name("spread-borrow")
            // Refused before any connection: nothing listens on port 1.
            .build_redis("redis://127.0.0.1:1", spread())
            .await
            .unwrap_err();
        assert!(
            matches!(err, BuildError::SpreadBorrowing { spill: 2 }),
            "{err}"
        );
        let message = err.to_string();
        assert!(message.contains("borrow_from") && message.contains("Layout::OneSlot"));
    });
}

/// The live changes in the spread layout: refunds and bookings go one
/// bucket per call, in each bucket's slot; a quota is not set live there
/// yet, and says so.
#[test]
fn spread_refunds_and_queued_waits_work_bucket_by_bucket() {
    let _serial = one_at_a_time();
    let cluster = RedisCluster::start();
    runtime().block_on(async {
        // 4 buckets of 1 token, one every 400 ms each; a tenant holds 2.
        let builder = ShardedLimiter::builder()
            .quota(Quota::per_second(10).with_burst(4))
            .buckets(4)
            .per_tenant(2)
            .name("spread-live");
        let connection = cluster.connect().await;
        let limiter = Arc::new(build(builder, &connection, spread()).await);
        let err = limiter
            .set_quota(Quota::per_second(20).with_burst(8))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::SpreadQuota), "{err:?}");
        assert!(err.to_string().contains("one-slot layout"), "{err}");

        // A refund goes back to the bucket that paid, in its own slot.
        let first = limiter.check("t").await.unwrap();
        let second = limiter.check("t").await.unwrap();
        assert_ne!(first.bucket(), second.bucket());
        assert!(limiter.check("t").await.is_err());
        limiter.refund(first).await.unwrap();
        assert!(limiter.check("t").await.is_ok(), "the refunded token");

        // Both buckets empty: three waiters queue for the next slots, in
        // the order they asked, each after the one before.
        let start = Instant::now();
        let mut waiters = Vec::new();
        for i in 0..3u32 {
            let limiter = Arc::clone(&limiter);
            waiters.push(tokio::spawn(async move {
                limiter.wait("t").await.unwrap();
                (i, start.elapsed())
            }));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut served = Vec::new();
        for waiter in waiters {
            served.push(waiter.await.unwrap());
        }
        served.sort_by_key(|&(_, at)| at);
        // The first two asked get the two buckets' next tokens, due within
        // a few ms of each other (so either may wake first); the third
        // waits for the round after.
        let order: Vec<u32> = served.iter().map(|&(i, _)| i).collect();
        assert_eq!(order[2], 2, "{served:?}");
        assert!(served[1].1 < Duration::from_millis(500), "{served:?}");
        // Two buckets refilling 400 ms apart at most: three tokens take at
        // most 800 ms, and none comes before a bucket refilled.
        let last = served[2].1;
        assert!(last <= Duration::from_millis(900), "{served:?}");
        assert!(
            served[0].1 + Duration::from_millis(5) >= Duration::from_millis(100),
            "{served:?}"
        );
        assert_eq!(limiter.stats().from_policy(), 0);
    });
}

/// A deadline as long as a `Duration` holds is a deadline that never comes:
/// every decision is made, none panics adding it to the clock.
#[test]
fn a_deadline_of_duration_max_decides() {
    let server = redis_server::RedisServer::start();
    runtime().block_on(async {
        let limiter = ShardedLimiter::builder()
            .quota(Quota::per_second(100))
            .buckets(4)
            .per_tenant(2)
            .name("huge-deadline")
            .build_redis(
                &server.url(),
                RedisOptions::new(FailurePolicy::FailClosed)
                    .layout(Layout::Spread)
                    .deadline(Duration::MAX),
            )
            .await
            .unwrap();
        let limiter = Arc::new(limiter);
        for request in [1, 0] {
            let limiter = Arc::clone(&limiter);
            let decided = tokio::spawn(async move {
                let decision = limiter.decide(Request::tenant("t").tokens(request)).await;
                (decision.source(), decision.is_granted())
            });
            assert_eq!(
                decided.await.unwrap(),
                (Source::Redis, true),
                "{request} tokens"
            );
        }
    });
}

/// A refund made by another process reaches what this one saw of a bucket
/// within a second, as it reaches a cached denial in the one-slot layout.
#[test]
fn another_process_refund_reaches_what_was_seen_within_a_second() {
    let server = redis_server::RedisServer::start();
    let url = server.url();
    runtime().block_on(async {
        let process = || {
            ShardedLimiter::builder()
                .quota(Quota::per_hour(8))
                .buckets(4)
                .per_tenant(2)
                .name("seen")
                .build_redis(
                    &url,
                    RedisOptions::new(FailurePolicy::FailClosed)
                        .layout(Layout::Spread)
                        .deadline(Duration::from_secs(1)),
                )
        };
        let (a, b) = (process().await.unwrap(), process().await.unwrap());
        let mut grants = Vec::new();
        for _ in 0..5 {
            grants.extend(b.check("t").await.ok());
        }
        assert_eq!(grants.len(), 4);
        assert!(!a.decide("t").await.is_granted());
        assert_eq!(a.decide("t").await.source(), Source::CachedDenial);
        assert_eq!(b.refund(grants.pop().unwrap()).await.unwrap().given(), 1);
        let started = Instant::now();
        let granted = loop {
            let decision = a.decide("t").await;
            if decision.is_granted() || started.elapsed() > Duration::from_secs(5) {
                break decision.is_granted();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let took = started.elapsed();
        assert!(granted && took <= Duration::from_millis(2500), "{took:?}");
    });
}
