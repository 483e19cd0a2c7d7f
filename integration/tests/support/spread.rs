//! The helpers of the spread-layout tests: a runtime, the options, a
//! limiter on a cluster connection, which node holds each bucket, and a
//! stopped node resumed however a test ends.

// Each test file uses a part of this.
#![allow(dead_code)]

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use shuffle_limiter::Builder;
use shuffle_limiter::redis::{FailurePolicy, Layout, RedisLimiter, RedisOptions};

use super::redis_cluster::RedisCluster;
use super::redis_server::RedisServer;

pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// FailClosed, spread, and a deadline a busy machine cannot miss where the
/// test is about decisions, not latency.
pub(crate) fn spread() -> RedisOptions {
    RedisOptions::new(FailurePolicy::FailClosed)
        .layout(Layout::Spread)
        .deadline(Duration::from_secs(2))
}

pub(crate) async fn build(
    builder: Builder,
    connection: &ClusterConnection,
    options: RedisOptions,
) -> RedisLimiter<ClusterConnection> {
    builder
        .build_redis_with(connection.clone(), options)
        .await
        .unwrap()
}

/// The node (index into `cluster.nodes`) that holds each bucket's key.
pub(crate) async fn bucket_nodes(
    cluster: &RedisCluster,
    limiter: &RedisLimiter<ClusterConnection>,
) -> Vec<usize> {
    let mut admin: MultiplexedConnection = cluster.nodes[0].connection().await;
    let mut nodes = Vec::new();
    for b in 0..limiter.buckets() {
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(limiter.key(b).unwrap())
            .query_async(&mut admin)
            .await
            .unwrap();
        let port = cluster.owner(slot).port;
        nodes.push(cluster.nodes.iter().position(|n| n.port == port).unwrap());
    }
    nodes
}

/// The node holding the most of `nodes`' buckets (as `bucket_nodes`
/// answers), and those buckets.
pub(crate) fn busiest(nodes: &[usize]) -> (usize, Vec<u32>) {
    let node = (0..3)
        .max_by_key(|&n| nodes.iter().filter(|&&x| x == n).count())
        .unwrap();
    let on: Vec<u32> = (0..nodes.len() as u32)
        .filter(|&b| nodes[b as usize] == node)
        .collect();
    (node, on)
}

/// Resumes a stopped node however the test ends.
pub(crate) struct Resume<'a>(pub(crate) &'a RedisServer);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.signal("-CONT");
    }
}
