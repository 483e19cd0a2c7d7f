//! A script the server lost (a failover, a restart, `SCRIPT FLUSH`) on a
//! real 3-master Redis Cluster while another node is stopped by
//! `SIGSTOP`: a limiter whose slot lives on a node that answers goes on
//! deciding and refunding.
//!
//! cargo test -p integration --test redis_cluster_scripts -- --nocapture

#![cfg(feature = "redis")]

use std::time::Duration;

use shuffle_limiter::redis::{FailurePolicy, RedisOptions, Source};
use shuffle_limiter::{Limit, Quota, ShardedLimiter};

#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/spread.rs"]
mod spread;
use redis_cluster::{RedisCluster, one_at_a_time};
use spread::{Resume, bucket_nodes, build, runtime};

/// DESIGN, "no shared choke point": one stopped node reaches only its own
/// slots. A script missing on the node that holds the limiter's slot was
/// loaded with `SCRIPT LOAD`, which a Cluster client sends to every master
/// and waits for: with another master stopped, every decision went to the
/// failure policy at the deadline, and refunds failed. The call now goes
/// as an `EVAL` to its keys' node.
#[test]
fn a_lost_script_is_sent_to_its_keys_node_while_another_node_is_stopped() {
    let _serial = one_at_a_time();
    let cluster = RedisCluster::start();
    runtime().block_on(async {
        let connection = cluster.connect_with(Duration::from_secs(60)).await;
        let limiter = build(
            ShardedLimiter::builder()
                .quota(Quota::per_second(1_000).with_burst(100))
                .buckets(4)
                .per_tenant(2)
                .name("lost-scripts"),
            &connection,
            RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(2)),
        )
        .await;
        let owner = bucket_nodes(&cluster, &limiter).await[0];
        let grant = limiter.check("t").await.expect("granted before");

        // The owner loses its scripts (as a promoted replica has none);
        // another master stops.
        let mut admin = cluster.nodes[owner].connection().await;
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut admin)
            .await
            .unwrap();
        let stopped = (owner + 1) % cluster.nodes.len();
        cluster.nodes[stopped].signal("-STOP");
        let _resume = Resume(&cluster.nodes[stopped]);

        let decision = limiter.decide("t").await;
        assert_eq!(
            (decision.source(), decision.is_granted()),
            (Source::Redis, true),
            "{:?}",
            decision.error()
        );
        let refunded = limiter.refund(grant).await;
        assert!(refunded.is_ok(), "{refunded:?}");
        limiter
            .set_quota(Quota::per_second(1_000).with_burst(50))
            .await
            .expect("a change on the live node");
    });
}
