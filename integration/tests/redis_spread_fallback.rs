//! The spread layout's local fallback on a real 3-master Redis Cluster with
//! one node stopped by `SIGSTOP`: the fallback decides on the stopped
//! buckets alone, so the fleet keeps within its budget.
//!
//! cargo test -p integration --test redis_spread_fallback -- --nocapture

#![cfg(feature = "redis")]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use shuffle_limiter::redis::{FailurePolicy, Layout, RedisOptions, Source};
use shuffle_limiter::{Quota, ShardedLimiter};

#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/spread.rs"]
mod spread;
use redis_cluster::{RedisCluster, one_at_a_time};
use spread::{Resume, bucket_nodes, build, busiest, runtime};

/// Guide, "When Redis fails": `LocalFallback { replicas }` gives each process
/// 1/replicas of the budget, and in the spread layout decides only on the
/// buckets Redis could not answer for; DESIGN.md: "Over any interval t,
/// grants ≤ R·t + B". With one node of m buckets stopped, the fleet gets at
/// most R·(N−m)/N from Redis and R·m/N from the fallbacks. It got ~1.35×
/// its budget when a tenant with one stopped bucket, its live bucket
/// *denied by Redis*, went to a fallback drawing on its whole shard, live
/// buckets included: their budget paid twice.
#[test]
fn spread_local_fallback_with_one_node_stopped_keeps_the_fleet_within_the_budget() {
    let _serial = one_at_a_time();
    let cluster = RedisCluster::start();
    runtime().block_on(async {
        const N: u32 = 6;
        const RATE: u64 = 120; // R per second
        const BURST: u32 = 12; // B; each of 2 replicas falls back to 60/s, 6
        let builder = || {
            ShardedLimiter::builder()
                .quota(Quota::per_second(RATE as u32).with_burst(BURST))
                .buckets(N)
                .per_tenant(2)
                .name("spread-fallback")
        };
        let options = RedisOptions::new(FailurePolicy::LocalFallback { replicas: 2 })
            .layout(Layout::Spread)
            .deadline(Duration::from_millis(100));
        // Two processes of the fleet, each on its own cluster connection.
        let a = build(
            builder(),
            &cluster.connect_with(Duration::from_secs(60)).await,
            options.clone(),
        )
        .await;
        let b = build(
            builder(),
            &cluster.connect_with(Duration::from_secs(60)).await,
            options,
        )
        .await;
        let nodes = bucket_nodes(&cluster, &a).await;
        let (stopped, on_stopped) = busiest(&nodes);
        assert!(
            on_stopped.len() < N as usize,
            "all buckets on one node: {nodes:?}"
        );
        for limiter in [&a, &b] {
            let decision = limiter.decide("before").await;
            assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
        }

        cluster.nodes[stopped].signal("-STOP");
        let resume = Resume(&cluster.nodes[stopped]);
        let granted = Arc::new(AtomicU64::new(0));
        let by_policy = Arc::new(AtomicU64::new(0));
        let limiters = Arc::new([a, b]);
        let run_for = Duration::from_secs(3);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for l in 0..2 {
            for task in 0..4 {
                let (limiters, granted, by_policy) = (
                    Arc::clone(&limiters),
                    Arc::clone(&granted),
                    Arc::clone(&by_policy),
                );
                tasks.push(tokio::spawn(async move {
                    let mut i = task;
                    while started.elapsed() < run_for {
                        let tenant = format!("tenant-{}", i % 60);
                        i += 4;
                        let decision = limiters[l].decide(tenant.as_str()).await;
                        if decision.is_granted() {
                            granted.fetch_add(1, Ordering::Relaxed);
                            if decision.source() == Source::Policy {
                                by_policy.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }));
            }
        }
        for task in tasks {
            task.await.unwrap();
        }
        let elapsed = started.elapsed();
        drop(resume);
        let granted = granted.load(Ordering::Relaxed);
        let budget = RATE as f64 * elapsed.as_secs_f64() + f64::from(BURST);
        println!(
            "stopped node held {on_stopped:?} of {N}; granted {granted} ({} by the local \
             fallback) in {elapsed:?}; budget R·t + B = {budget:.0}",
            by_policy.load(Ordering::Relaxed)
        );
        // 10 % of slack for timing; the fleet must not exceed its budget.
        assert!(
            granted as f64 <= budget * 1.10,
            "the fleet was granted {granted} against a budget of {budget:.0} \
             ({} of them by the local fallback)",
            by_policy.load(Ordering::Relaxed)
        );
    });
}
