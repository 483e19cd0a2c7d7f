//! The Redis backend against a real Redis Cluster: three masters without
//! replicas, started by each test on free 127.0.0.1 ports, joined with
//! `redis-cli --cluster create`, and killed when the test ends.
//!
//! The limiter talks to the cluster through the `redis` crate's async cluster
//! client, which routes each `EVALSHA` by its first key. The tests need
//! `redis-server` 7 or later (for `--cluster-port`) and `redis-cli` (Debian:
//! `apt-get install redis-server`, which pulls in `redis-tools`), or their
//! paths in `REDIS_SERVER` and `REDIS_CLI`. They run one cluster at a time.
#![cfg(feature = "redis")]

use std::time::Duration;

use redis::Value;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use shuffle_limiter::redis::{FailurePolicy, RedisLimiter, RedisOptions, Source};
use shuffle_limiter::{Builder, Limit, ManualClock, Quota, Request, ShardedLimiter};

#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/same_answers.rs"]
mod same_answers;
use redis_cluster::{RedisCluster, one_at_a_time};
use redis_server::RedisServer;
use same_answers::assert_same_answers;

/// The script the limiter loads, to ask the nodes whether they hold it.
const DRAW_LUA: &str = concat!(
    include_str!("../../src/redis/prelude.lua"),
    include_str!("../../src/redis/held.lua"),
    include_str!("../../src/redis/draw.lua"),
    include_str!("../../src/redis/draw_one.lua")
);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// The slot of `key`, as the cluster computes it.
async fn keyslot(admin: &mut MultiplexedConnection, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(admin)
        .await
        .unwrap()
}

/// Checks that all of the limiter's keys share the slot of its name (the
/// hash tag), and returns it.
async fn one_slot(
    admin: &mut MultiplexedConnection,
    limiter: &RedisLimiter<ClusterConnection>,
) -> u16 {
    let slot = keyslot(admin, limiter.name()).await;
    for b in 0..limiter.buckets() {
        let key = limiter.key(b).unwrap();
        assert_eq!(
            keyslot(admin, key).await,
            slot,
            "{key} left the slot of {}",
            limiter.name()
        );
    }
    slot
}

/// Builds on a clone of the cluster connection, with a deadline a busy
/// machine cannot miss: these tests are about decisions, not latency.
async fn on_cluster(
    builder: Builder,
    connection: &ClusterConnection,
    options: RedisOptions,
) -> RedisLimiter<ClusterConnection> {
    builder
        .build_redis_with(connection.clone(), options.deadline(Duration::from_secs(2)))
        .await
        .unwrap()
}

/// Whether `node` holds the limiter's script.
async fn holds_script(node: &RedisServer) -> bool {
    let sha = redis::Script::new(DRAW_LUA).get_hash().to_owned();
    let [exists]: [bool; 1] = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(sha)
        .query_async(&mut node.connection().await)
        .await
        .unwrap();
    exists
}

/// Whether `node` holds a library of functions (the draw's: nothing else
/// loads one here).
async fn holds_functions(node: &RedisServer) -> bool {
    let libraries: Vec<Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(&mut node.connection().await)
        .await
        .unwrap();
    !libraries.is_empty()
}

fn fail_closed() -> RedisOptions {
    RedisOptions::new(FailurePolicy::FailClosed)
}

// ---------------------------------------------------------------------------

#[test]
fn the_cluster_answers_as_the_in_process_limiter() {
    let _serial = one_at_a_time();
    let cluster = RedisCluster::start();
    runtime().block_on(async {
        // One token per 6000 s per bucket: neither clock refills one during
        // the test. A burst of 30 over 6 buckets: 5 each.
        let builder = ShardedLimiter::builder()
            .quota(Quota::new(6, Duration::from_secs(6000)).with_burst(30))
            .buckets(6)
            .per_tenant(2)
            .salt(b"cluster")
            .name("cluster-differential");
        let local = builder.clone().clock(ManualClock::new()).build().unwrap();
        let connection = cluster.connect().await;
        let remote = on_cluster(builder, &connection, fail_closed().cache_denials(false)).await;
        let mut admin = cluster.nodes[0].connection().await;
        one_slot(&mut admin, &remote).await;
        assert_same_answers(&local, &remote, 600).await;
        assert_eq!(remote.stats().errors(), 0);
    });
}

#[test]
fn limiters_on_different_nodes_keep_their_keys_and_their_tenants_apart() {
    let _serial = one_at_a_time();
    let cluster = RedisCluster::start();
    runtime().block_on(async {
        let mut admin = cluster.nodes[0].connection().await;
        // Two names whose hash tags fall on different nodes.
        let mut names: Vec<(String, u16)> = Vec::new();
        for i in 0..100 {
            let name = format!("api-{i}");
            let port = cluster.owner(keyslot(&mut admin, &name).await).port;
            if names.iter().all(|(_, p)| *p != port) {
                names.push((name, port));
            }
            if names.len() == 2 {
                break;
            }
        }
        let [(a_name, a_port), (b_name, b_port)] = <[_; 2]>::try_from(names).unwrap();

        // 10 tokens per bucket, one more every 6 minutes: nothing refills
        // while the test runs.
        let builder = |name: &str| {
            ShardedLimiter::builder()
                .quota(Quota::new(160, Duration::from_secs(3600)))
                .buckets(16)
                .per_tenant(2)
                .name(name)
        };
        let connection = cluster.connect().await;
        let a = on_cluster(builder(&a_name), &connection, fail_closed()).await;
        let b = on_cluster(builder(&b_name), &connection, fail_closed()).await;
        for (limiter, port) in [(&a, a_port), (&b, b_port)] {
            let slot = one_slot(&mut admin, limiter).await;
            assert_eq!(cluster.owner(slot).port, port, "{}", limiter.name());
        }

        // A noisy tenant on A takes all that its two buckets hold, ten tokens
        // at a time, and then nothing.
        let noisy = a.shard("noisy");
        let mut drained = Vec::new();
        for _ in 0..2 {
            let took = a.check(Request::tenant("noisy").tokens(10)).await;
            drained.push(took.expect("a full bucket of ten").bucket());
        }
        drained.sort_unstable();
        let mut own = noisy.buckets().to_vec();
        own.sort_unstable();
        assert_eq!(drained, own, "one grant from each of its buckets");
        assert!(a.check("noisy").await.is_err());
        // Tenants of A that share none, one or both of its buckets keep what
        // they do not share.
        for shared in 0..=2 {
            let tenant = (0..2000)
                .map(|t| format!("tenant-{t}"))
                .find(|t| a.shard(t).overlap(&noisy) == shared)
                .expect("a tenant for every overlap");
            let decision = a.decide(Request::tenant(&tenant).tokens(0)).await;
            assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
            let left = decision.result().unwrap().remaining();
            assert_eq!(left, 10 * (2 - shared as u64), "{tenant} shares {shared}");
            assert_eq!(a.check(&tenant).await.is_ok(), shared < 2, "{tenant}");
        }
        // The same tenant on B, another limiter on another node, is untouched.
        let decision = b.decide(Request::tenant("noisy").tokens(3)).await;
        assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
        assert_eq!(decision.result().unwrap().remaining(), 17);

        // Each limiter's buckets live on the node of its slot, and only there.
        for node in &cluster.nodes {
            let mut direct = node.connection().await;
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg("*")
                .query_async(&mut direct)
                .await
                .unwrap();
            let expected = match node.port {
                p if p == a_port => Some(&a_name),
                p if p == b_port => Some(&b_name),
                _ => None,
            };
            match expected {
                Some(name) => {
                    assert!(!keys.is_empty(), "no buckets of {name} on its node");
                    let tag = format!("{{{name}}}:b");
                    assert!(
                        keys.iter().all(|k| k.starts_with(&tag)),
                        "{name}'s node holds {keys:?}"
                    );
                }
                None => assert!(keys.is_empty(), "the third node holds {keys:?}"),
            }
        }
        assert_eq!(a.stats().errors() + b.stats().errors(), 0);
    });
}

#[test]
fn a_script_flushed_on_the_node_of_the_slot_reloads_itself() {
    let _serial = one_at_a_time();
    let cluster = RedisCluster::start();
    runtime().block_on(async {
        let connection = cluster.connect().await;
        let limiter = on_cluster(
            ShardedLimiter::builder()
                .quota(Quota::per_second(1000))
                .name("cluster-flush"),
            &connection,
            fail_closed(),
        )
        .await;
        // Building loaded the script and the draw's functions on every node.
        for node in &cluster.nodes {
            assert!(holds_script(node).await, "no script on port {}", node.port);
            assert!(
                holds_functions(node).await,
                "no functions on port {}",
                node.port
            );
        }
        let mut admin = cluster.nodes[0].connection().await;
        let owner = cluster.owner(one_slot(&mut admin, &limiter).await);
        owner.script_calls().await;
        let decision = limiter.decide("before-flush").await;
        assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
        assert_eq!(owner.script_calls().await, (0, 1), "by FCALL");

        for flush in ["SCRIPT", "FUNCTION"] {
            let () = redis::cmd(flush)
                .arg("FLUSH")
                .query_async(&mut owner.connection().await)
                .await
                .unwrap();
        }
        for node in &cluster.nodes {
            let held = (holds_script(node).await, holds_functions(node).await);
            let here = node.port != owner.port;
            assert_eq!(held, (here, here), "port {}", node.port);
        }

        // No function on the node of the slot: the script, which is not
        // there either (NOSCRIPT), so sent whole (EVAL), which loads it.
        let decision = limiter.decide("after-flush").await;
        assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
        assert!(decision.is_granted());
        assert!(
            holds_script(owner).await,
            "the script is back on port {}",
            owner.port
        );
        // An FCALL that found no function, an EVALSHA that found no script.
        let (mut evalsha, mut fcall) = owner.script_calls().await;
        assert_eq!((evalsha, fcall), (1, 1));
        // Once it was answered, the library is loaded again (the masters
        // that hold it say so), and the decisions go as the script until it
        // is there, then by FCALL again.
        let mut decisions = 1;
        while fcall < 2 && decisions <= 100 {
            let decision = limiter.decide(format!("after-flush-{decisions}")).await;
            assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
            decisions += 1;
            let (more_evalsha, more_fcall) = owner.script_calls().await;
            (evalsha, fcall) = (evalsha + more_evalsha, fcall + more_fcall);
        }
        assert_eq!(
            (evalsha + fcall) as usize,
            decisions + 1,
            "two for the first (its EVAL aside), one for each after"
        );
        assert_eq!(fcall, 2, "by FCALL again");
        assert!(holds_functions(owner).await, "port {}", owner.port);
        assert_eq!(limiter.stats().errors(), 0);
        assert_eq!(limiter.stats().from_redis() as usize, 1 + decisions);
    });
}
