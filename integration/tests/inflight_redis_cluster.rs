//! In-flight leases on a Redis Cluster of three masters: every key of a
//! limit shares its hash tag, so each script runs on the one node that
//! holds the limit's slot, and two limits on different nodes keep their
//! seats apart. Needs `redis-server` 7 or later and `redis-cli`.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use shuffle_limiter::inflight::{InFlight, LeaseOptions, LeaseSource, RejectReason};

#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_cluster::{RedisCluster, one_at_a_time};

/// The slot of `key`, as the cluster computes it.
async fn keyslot(admin: &mut MultiplexedConnection, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(admin)
        .await
        .unwrap()
}

#[test]
fn leases_hold_on_a_cluster_each_limit_in_its_slot() {
    let _serial = one_at_a_time();
    let cluster = RedisCluster::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut admin = cluster.nodes[0].connection().await;
        // Two names whose slots live on different nodes.
        let mut names = Vec::new();
        let mut owners = Vec::new();
        for i in 0.. {
            let name = format!("lease-{i}");
            let owner = cluster.owner(keyslot(&mut admin, &name).await).port;
            if !owners.contains(&owner) {
                names.push(name);
                owners.push(owner);
            }
            if names.len() == 2 {
                break;
            }
        }
        let connection = cluster.connect().await;
        let build = |name: &str| {
            let options =
                LeaseOptions::new(name, Duration::from_secs(10)).deadline(Duration::from_secs(2));
            InFlight::builder()
                .concurrency(4)
                .pools(2)
                .per_tenant(1)
                .build_redis(connection.clone(), options)
        };
        let (a, b) = (
            build(&names[0]).await.unwrap(),
            build(&names[1]).await.unwrap(),
        );
        for pool in 0..2 {
            let key = a.key(pool).unwrap();
            assert_eq!(
                keyslot(&mut admin, key).await,
                keyslot(&mut admin, &names[0]).await
            );
        }
        // a's tenant fills its pool; b, on another node, is untouched.
        let held: Vec<_> = [a.try_acquire("t").await, a.try_acquire("t").await]
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert!(held.iter().all(|l| l.source() == LeaseSource::Redis));
        let busy = a.try_acquire("t").await.unwrap_err();
        assert_eq!(
            busy.rejected().map(|r| r.reason()),
            Some(RejectReason::Busy)
        );
        let other = b.try_acquire("t").await.unwrap();
        assert_eq!(other.source(), LeaseSource::Redis);
        drop(held);
        let mut back = None;
        for _ in 0..200 {
            if let Ok(lease) = a.try_acquire("t").await {
                back = Some(lease);
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(back.is_some(), "the released seats never came back");
    });
}
