//! The spread layout's hold-off on a real 3-master Redis Cluster with one
//! node stopped by `SIGSTOP`: every bucket on the live nodes is held.
//!
//! cargo test -p integration --test redis_spread_holdoff -- --nocapture

#![cfg(feature = "redis")]

use std::time::Duration;

use shuffle_limiter::redis::{Error, FailurePolicy, Layout, RedisOptions};
use shuffle_limiter::upstream::HoldOff;
use shuffle_limiter::{Limit, Quota, ShardedLimiter};

#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/spread.rs"]
mod spread;
use redis_cluster::{RedisCluster, one_at_a_time};
use spread::{Resume, bucket_nodes, build, runtime};

/// Guide, "Isolation over Redis"/DESIGN: no shared choke point; a stopped
/// node reaches only its own buckets. `Limit::hold_off` (an upstream's 429)
/// in the spread layout sends one script per bucket, all at once (src/redis/
/// holdoff.rs): a stopped node's buckets stay unheld (`Error::NotAllHeld`
/// names them) and every bucket on the live nodes is held. It held them
/// one after another under one deadline, so a stopped node's bucket early
/// in the order spent it and a tenant wholly on live nodes kept being
/// granted while the upstream had asked everyone to stop.
#[test]
fn spread_hold_off_all_reaches_the_buckets_of_the_live_nodes_while_one_is_stopped() {
    let _serial = one_at_a_time();
    let cluster = RedisCluster::start();
    runtime().block_on(async {
        let connection = cluster.connect_with(Duration::from_secs(60)).await;
        let limiter = build(
            ShardedLimiter::builder()
                .quota(Quota::per_second(1_000).with_burst(800))
                .buckets(8)
                .per_tenant(2)
                .name("spread-holdoff"),
            &connection,
            RedisOptions::new(FailurePolicy::FailClosed)
                .layout(Layout::Spread)
                .deadline(Duration::from_millis(100)),
        )
        .await;
        let nodes = bucket_nodes(&cluster, &limiter).await;
        // The node holding the lowest-numbered bucket that has live buckets
        // after it.
        let stopped = nodes[0];
        let on_stopped: Vec<u32> = (0..8).filter(|&b| nodes[b as usize] == stopped).collect();
        let assignment = limiter.assignment().clone();
        let live = (0..500)
            .map(|t| format!("tenant-{t}"))
            .find(|t| {
                assignment
                    .shard(t.as_str())
                    .buckets()
                    .iter()
                    .all(|b| !on_stopped.contains(b))
            })
            .expect("a tenant wholly on live nodes");
        assert!(limiter.check(live.as_str()).await.is_ok());

        cluster.nodes[stopped].signal("-STOP");
        let resume = Resume(&cluster.nodes[stopped]);
        let held = limiter
            .hold_off(HoldOff::all(Duration::from_secs(30)))
            .await;
        // Whatever the hold-off answered, the live nodes' buckets must be
        // held: the upstream said stop.
        let after = limiter.decide(live.as_str()).await;
        drop(resume);
        println!(
            "stopped node {stopped} holds {on_stopped:?}; hold_off -> {held:?}; \
             {live} then: {:?} from {:?}",
            after.result().map(|g| g.bucket()),
            after.source()
        );
        assert!(
            !after.is_granted(),
            "{live} (buckets {:?}, all on live nodes) was granted right after \
             hold_off(all, 30 s) [{held:?}]",
            assignment.shard(live.as_str()).buckets()
        );
        // The error names exactly the stopped node's buckets.
        match &held {
            Err(Error::NotAllHeld { unheld, .. }) => assert_eq!(unheld, &on_stopped),
            other => panic!("{other:?}"),
        }
    });
}
