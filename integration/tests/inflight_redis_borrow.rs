//! Borrowing over Redis leases, against a real `redis-server`: a tenant
//! whose own pools are full takes seats of its spill pools above their
//! reserve, as in process; the owners of a spill pool always keep its
//! reserve; two limits on their own connections (two processes) never
//! hold more than C between them, nor borrow more of a pool than its share
//! less its reserve.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use shuffle_limiter::inflight::{InFlight, LeaseOptions, RedisInFlight, RejectReason};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/leases.rs"]
mod support;

use redis_server::RedisServer;
use support::{closed, connect, held, runtime};

/// C = 16 over N = 8 pools (2 seats each), k = 2, d = 2, the reserve a
/// half: 1 of each pool's 2 seats kept for its owners.
fn builder() -> shuffle_limiter::inflight::Builder {
    InFlight::builder()
        .concurrency(16)
        .pools(8)
        .per_tenant(2)
        .borrow_from(2)
        .lender_reserve(0.5)
}

async fn limit(
    server: &RedisServer,
    options: LeaseOptions,
) -> RedisInFlight<MultiplexedConnection> {
    builder()
        .build_redis(connect(server).await, options)
        .await
        .unwrap()
}

/// A tenant whose own pools include `pool`, found by its id alone.
fn owner_of(inflight: &RedisInFlight<MultiplexedConnection>, pool: u32, not: &str) -> String {
    (0..)
        .map(|i| format!("owner-{i}"))
        .find(|t| t != not && inflight.shard(t.as_str()).buckets().contains(&pool))
        .unwrap()
}

#[test]
fn a_full_tenant_borrows_above_the_reserve_and_the_owners_keep_it() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let ttl = Duration::from_secs(10);
        let a = limit(&server, closed("borrow", ttl)).await;
        let b = limit(&server, closed("borrow", ttl)).await;
        let mut connection = connect(&server).await;
        let shard = a.shard("t");
        assert_eq!(shard.spill().len(), 2);

        // Its own 4 seats first, none of them borrowed, from process A.
        let mut own = Vec::new();
        for _ in 0..4 {
            let lease = a.try_acquire("t").await.unwrap();
            assert!(!lease.borrowed(), "{lease:?}");
            assert!(lease.pools().all(|(p, _)| shard.buckets().contains(&p)));
            own.push(lease);
        }
        // Then one seat above the reserve of each spill pool, from process
        // B: the pools are the fleet's, not a process's.
        let mut borrowed = Vec::new();
        for _ in 0..2 {
            let lease = b.try_acquire("t").await.unwrap();
            assert!(lease.borrowed(), "{lease:?}");
            let (pool, seats) = lease.pools().next().unwrap();
            assert!(shard.spill().contains(&pool) && seats == 1, "{lease:?}");
            borrowed.push(lease);
        }
        let refused = a.try_acquire("t").await.unwrap_err();
        assert_eq!(
            refused.rejected().map(|r| r.reason()),
            Some(RejectReason::Busy)
        );
        for &pool in shard.spill() {
            assert_eq!(held(&mut connection, &a, pool).await, 1, "pool {pool}");
        }

        // The owners of each spill pool still get its reserve; then it is
        // full for everyone.
        let mut theirs = Vec::new();
        for &pool in shard.spill() {
            let owner = owner_of(&a, pool, "t");
            while let Ok(lease) = b.try_acquire(owner.as_str()).await {
                theirs.push(lease);
            }
            assert_eq!(held(&mut connection, &a, pool).await, 2, "pool {pool}");
        }

        // A borrowed seat given back is the owners' again, and the tenant
        // borrows nothing while its own pools have room.
        drop(borrowed);
        drop(own.pop());
        let again = tokio::time::timeout(Duration::from_secs(2), async {
            loop {
                match a.try_acquire("t").await {
                    Ok(lease) => break lease,
                    Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                }
            }
        })
        .await
        .expect("the seat given back is free again within 2 s");
        assert!(!again.borrowed(), "{again:?}");
    });
}

#[test]
fn two_processes_borrowing_hold_at_most_c_and_lend_at_most_above_the_reserve() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let ttl = Duration::from_secs(10);
        let a = limit(&server, closed("fleet", ttl)).await;
        let b = limit(&server, closed("fleet", ttl)).await;
        // Seats out in each pool, and of them the borrowed ones.
        let out: Arc<[AtomicU32; 8]> = Arc::new(Default::default());
        let lent: Arc<[AtomicU32; 8]> = Arc::new(Default::default());
        let total = Arc::new(AtomicU32::new(0));
        let seen = Arc::new(Mutex::new(BTreeMap::<&str, u32>::new()));
        let mut tasks = Vec::new();
        for worker in 0..16u32 {
            let inflight = if worker % 2 == 0 {
                a.clone()
            } else {
                b.clone()
            };
            let (out, lent, total, seen) = (out.clone(), lent.clone(), total.clone(), seen.clone());
            tasks.push(tokio::spawn(async move {
                for round in 0..30u32 {
                    // A few heavy tenants, so that own pools fill and spill
                    // pools lend.
                    let tenant = format!("tenant-{}", (worker + round) % 4);
                    let seats = 1 + (worker * 3 + round) % 2;
                    let request = shuffle_limiter::Request::tenant(&tenant).tokens(seats);
                    let Ok(lease) = inflight.try_acquire(request).await else {
                        tokio::task::yield_now().await;
                        continue;
                    };
                    let own = inflight.shard(tenant.as_str());
                    let now = total.fetch_add(lease.seats(), Ordering::SeqCst) + lease.seats();
                    assert!(now <= 16, "{now} seats out of C = 16");
                    for (pool, seats) in lease.pools() {
                        let p = out[pool as usize].fetch_add(seats, Ordering::SeqCst) + seats;
                        assert!(p <= 2, "pool {pool}: {p} seats of its 2");
                        if !own.buckets().contains(&pool) {
                            assert!(own.spill().contains(&pool), "{lease:?} of {own:?}");
                            let l = lent[pool as usize].fetch_add(seats, Ordering::SeqCst) + seats;
                            assert!(l <= 1, "pool {pool}: {l} lent, above its reserve of 1");
                        }
                    }
                    let key = if lease.borrowed() { "borrowed" } else { "own" };
                    *seen.lock().unwrap().entry(key).or_default() += 1;
                    tokio::time::sleep(Duration::from_millis(u64::from(1 + round % 3))).await;
                    for (pool, seats) in lease.pools() {
                        out[pool as usize].fetch_sub(seats, Ordering::SeqCst);
                        if !own.buckets().contains(&pool) {
                            lent[pool as usize].fetch_sub(seats, Ordering::SeqCst);
                        }
                    }
                    total.fetch_sub(lease.seats(), Ordering::SeqCst);
                    drop(lease);
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let seen = seen.lock().unwrap();
        assert!(seen.get("borrowed").copied().unwrap_or(0) > 5, "{seen:?}");
        assert!(seen.get("own").copied().unwrap_or(0) > 50, "{seen:?}");
    });
}

#[test]
fn over_redis_a_tenant_gets_what_it_gets_in_process() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let redis = limit(&server, closed("same", Duration::from_secs(10))).await;
        let local = builder().build().unwrap();
        // The same sequence of one tenant's requests, each kept: the same
        // seats granted, the same borrowed, the same refusals. (What one
        // tenant can take does not hang on how ties between its pools go.)
        let requests = [
            ("t", 1),
            ("t", 2),
            ("t", 2),
            ("t", 5),
            ("t", 1),
            ("t", 1),
            ("t", 1),
        ];
        let (mut kept_redis, mut kept_local) = (Vec::new(), Vec::new());
        for (tenant, seats) in requests {
            let request = shuffle_limiter::Request::tenant(tenant).tokens(seats);
            let over = redis.try_acquire(request.clone()).await;
            let here = local.try_acquire(request);
            let over_answer = over
                .as_ref()
                .map(|l| (l.seats(), l.borrowed()))
                .map_err(|e| e.rejected().map(|r| r.reason()));
            let here_answer = here
                .as_ref()
                .map(|p| (p.seats(), p.borrowed()))
                .map_err(|r| Some(r.reason()));
            assert_eq!(over_answer, here_answer, "{tenant} asking {seats}");
            kept_redis.extend(over.ok());
            kept_local.extend(here.ok());
        }
        assert!(kept_redis.iter().any(|l| l.borrowed()), "{kept_redis:?}");
    });
}
