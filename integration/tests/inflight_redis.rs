//! In-flight permits held by a fleet, against a real `redis-server`: two
//! limits on their own connections stand for two processes. Never more
//! than C seats out between them; a dropped permit frees its seats, a
//! process that stops frees them within the TTL, a late release frees
//! nobody else's, and a held permit outlives many TTLs.
//!
//! The TTL-driven tests use short real TTLs, since Redis's clock cannot be
//! paused, with bounded waits; they run one at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use shuffle_limiter::inflight::{LeaseSource, RejectReason};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/leases.rs"]
mod support;

use redis_server::RedisServer;
use support::{closed, held, limit, members, one_at_a_time, runtime, seats, within};

const TTL: Duration = Duration::from_millis(300);

fn busy<T: std::fmt::Debug>(answer: Result<T, shuffle_limiter::inflight::LeaseError>) -> bool {
    match answer {
        Err(e) => e.rejected().map(|r| r.reason()) == Some(RejectReason::Busy),
        Ok(lease) => panic!("expected busy, got {lease:?}"),
    }
}

#[test]
fn never_more_than_c_seats_out_across_two_processes() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let shape = (12, 4, 2); // 3 seats a pool
        let ttl = Duration::from_secs(10); // expiry plays no part here
        let a = limit(&server, shape, closed("fleet", ttl)).await;
        let b = limit(&server, shape, closed("fleet", ttl)).await;
        let out = Arc::new(AtomicU32::new(0));
        let per_pool: Arc<[AtomicU32; 4]> = Arc::new(Default::default());
        let (most, granted) = (Arc::new(AtomicU32::new(0)), Arc::new(AtomicU32::new(0)));
        let mut tasks = Vec::new();
        for worker in 0..16u32 {
            let inflight = if worker % 2 == 0 {
                a.clone()
            } else {
                b.clone()
            };
            let (out, per_pool, most, granted) =
                (out.clone(), per_pool.clone(), most.clone(), granted.clone());
            tasks.push(tokio::spawn(async move {
                for round in 0..25u32 {
                    let tenant = format!("tenant-{}", (worker * 7 + round) % 10);
                    let seats = 1 + (worker + round) % 3;
                    let request = shuffle_limiter::Request::tenant(&tenant).tokens(seats);
                    let Ok(lease) = inflight.try_acquire(request).await else {
                        tokio::task::yield_now().await;
                        continue;
                    };
                    // Counted after the grant and before the release: never
                    // more than Redis holds, so a bound on it is a bound on
                    // nothing looser.
                    let now = out.fetch_add(lease.seats(), Ordering::SeqCst) + lease.seats();
                    most.fetch_max(now, Ordering::SeqCst);
                    for (pool, seats) in lease.pools() {
                        let p = per_pool[pool as usize].fetch_add(seats, Ordering::SeqCst);
                        assert!(p + seats <= 3, "pool {pool}: {} seats out", p + seats);
                    }
                    granted.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(u64::from(round % 3))).await;
                    for (pool, seats) in lease.pools() {
                        per_pool[pool as usize].fetch_sub(seats, Ordering::SeqCst);
                    }
                    out.fetch_sub(lease.seats(), Ordering::SeqCst);
                    drop(lease);
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let most = most.load(Ordering::SeqCst);
        assert!(most <= 12, "{most} seats out at once");
        assert!(most >= 6, "the test never filled the pools: at most {most}");
        assert!(granted.load(Ordering::Relaxed) > 50);
        // Every release lands, in the background: the pools empty again.
        let mut connection = support::connect(&server).await;
        let mut emptied = None;
        for _ in 0..300 {
            let mut sum = 0;
            for pool in 0..4 {
                sum += held(&mut connection, &a, pool).await;
            }
            if sum == 0 {
                emptied = Some(());
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            emptied.is_some(),
            "seats left held after every lease was dropped"
        );
    });
}

#[test]
fn a_dropped_permit_frees_its_seats_for_the_other_process() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let a = limit(&server, (2, 1, 1), closed("drop", TTL * 10)).await;
        let b = limit(&server, (2, 1, 1), closed("drop", TTL * 10)).await;
        let first = a.try_acquire("t").await.unwrap();
        let second = b.try_acquire("t").await.unwrap();
        assert_eq!(
            (first.source(), second.source()),
            (LeaseSource::Redis, LeaseSource::Redis)
        );
        assert_ne!(first.token(), second.token());
        assert!(busy(a.try_acquire("t").await));
        drop(first);
        // A waiting acquire of the other process is served by the release.
        let third = b.acquire_within("t", Duration::from_secs(2)).await.unwrap();
        assert_eq!(third.seats(), 1);
        assert!(busy(a.try_acquire("t").await));
    });
}

#[test]
fn a_process_that_stops_frees_its_seats_within_the_ttl() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    // The dead process: its own runtime, shut down with its lease held, so
    // that nothing renews or releases it.
    let dead = runtime();
    let lease = dead.block_on(async {
        let a = limit(&server, (1, 1, 1), closed("dead", TTL)).await;
        a.try_acquire("t").await.unwrap()
    });
    dead.shutdown_background();
    runtime().block_on(async {
        let b = limit(&server, (1, 1, 1), closed("dead", TTL)).await;
        assert!(busy(b.try_acquire("t").await), "freed before its TTL");
        let freed = within(TTL * 4, || async { b.try_acquire("t").await.ok() }).await;
        let (after, taken) = freed.expect("the seat never came back");
        assert!(
            after <= TTL + Duration::from_millis(200),
            "freed after {after:?}"
        );
        assert_eq!(taken.source(), LeaseSource::Redis);
    });
    drop(lease); // nothing left to release it: a no-op
}

#[test]
fn a_late_release_never_frees_the_next_holders_seats() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    // A paused process: a runtime of one thread that nobody drives between
    // its calls, so that its renewals stop while its lease is still held.
    let paused = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (a, stale) = paused.block_on(async {
        let a = limit(&server, (1, 1, 1), closed("fence", TTL)).await;
        let lease = a.try_acquire("t").await.unwrap();
        (a, lease)
    });
    let main = runtime();
    let (b, fresh) = main.block_on(async {
        let b = limit(&server, (1, 1, 1), closed("fence", TTL)).await;
        let (_, fresh) = within(TTL * 4, || async { b.try_acquire("t").await.ok() })
            .await
            .expect("the paused lease never expired");
        (b, fresh)
    });
    assert!(fresh.token() > stale.token());
    // The paused process wakes and gives back what it thinks it holds.
    drop(stale);
    paused.block_on(async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(busy(a.try_acquire("t").await));
    });
    main.block_on(async {
        let mut connection = support::connect(&server).await;
        let left = members(&mut connection, &b, 0).await;
        let token = fresh.token().unwrap();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].0, format!("{token}:1"));
        assert!(busy(b.try_acquire("t").await));
        assert!(!fresh.is_lost());
    });
}

#[test]
fn renewal_keeps_a_long_held_permit_past_several_ttls() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let ttl = Duration::from_millis(500);
        let a = limit(&server, (1, 1, 1), closed("long", ttl)).await;
        let b = limit(&server, (1, 1, 1), closed("long", ttl)).await;
        let lease = a.try_acquire("t").await.unwrap();
        let start = std::time::Instant::now();
        while start.elapsed() < ttl * 3 + ttl / 5 {
            assert!(
                busy(b.try_acquire("t").await),
                "lost after {:?}",
                start.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!lease.is_lost());
        drop(lease);
        let freed = within(Duration::from_secs(2), || async {
            b.try_acquire("t").await.ok()
        });
        assert!(freed.await.is_some());
    });
}

#[test]
fn a_renewal_that_finds_its_lease_gone_says_it_is_lost() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let a = limit(&server, (2, 1, 1), closed("lost", TTL)).await;
        let lease = a.try_acquire("t").await.unwrap();
        assert!(!lease.is_lost());
        let mut connection = support::connect(&server).await;
        let _: () = redis::cmd("DEL")
            .arg(a.key(0).unwrap())
            .query_async(&mut connection)
            .await
            .unwrap();
        let lost = tokio::time::timeout(TTL * 3, lease.lost()).await;
        assert!(lost.is_ok(), "never said it was lost");
        assert!(lease.is_lost());
        // Its renewal created nothing: both seats are free for others.
        let one = a.try_acquire("u").await.unwrap();
        let two = a.try_acquire("v").await.unwrap();
        assert_eq!(one.seats() + two.seats(), 2);
    });
}

#[test]
fn seats_are_all_or_nothing_over_the_tenants_pools() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        // 3 pools of 2; each tenant holds 2 of them: 4 seats at most.
        let a = limit(&server, (6, 3, 2), closed("seats", TTL * 10)).await;
        let b = limit(&server, (6, 3, 2), closed("seats", TTL * 10)).await;
        let request = |n| shuffle_limiter::Request::tenant("t").tokens(n);
        let three = a.try_acquire(request(3)).await.unwrap();
        let taken: Vec<(u32, u32)> = three.pools().collect();
        assert_eq!(taken.len(), 2, "3 seats take from both pools: {taken:?}");
        assert_eq!(taken[0].1, 2, "the roomiest first: {taken:?}");
        assert!(taken.iter().all(|&(p, _)| a.shard("t").contains(p)));
        // One seat is left: two are refused, and take nothing.
        let mut connection = support::connect(&server).await;
        let before: Vec<_> = {
            let mut all = Vec::new();
            for pool in 0..3 {
                all.push(members(&mut connection, &a, pool).await);
            }
            all
        };
        assert!(busy(b.try_acquire(request(2)).await));
        for pool in 0..3 {
            assert_eq!(
                members(&mut connection, &a, pool).await.len(),
                before[pool as usize].len()
            );
        }
        let one = b.try_acquire(request(1)).await.unwrap();
        assert_eq!(one.seats(), 1);
        let never = b.try_acquire(request(5)).await.unwrap_err();
        assert_eq!(
            never.rejected().map(|r| r.reason()),
            Some(RejectReason::NeverFits { asked: 5, most: 4 })
        );
        drop((three, one));
        let back = within(Duration::from_secs(2), || async {
            b.try_acquire(request(4)).await.ok()
        });
        assert_eq!(back.await.expect("the seats never came back").1.seats(), 4);
    });
}

#[test]
fn a_lease_forgotten_by_a_restarted_server_is_lost() {
    let _serial = one_at_a_time();
    let mut server = RedisServer::start();
    runtime().block_on(async {
        // A connection that reconnects by itself, as a service has.
        let client = redis::Client::open(server.url()).unwrap();
        let connection = client.get_connection_manager().await.unwrap();
        let a = shuffle_limiter::inflight::InFlight::builder()
            .concurrency(1)
            .build_redis(connection, closed("restart", TTL))
            .await
            .unwrap();
        // A user's request takes from its tenant's pools, as in process.
        let lease = a
            .try_acquire(shuffle_limiter::Request::tenant("t").user("u"))
            .await
            .unwrap();
        assert!(!lease.is_lost());
        server.restart(); // no persistence: every lease forgotten
        let lost = tokio::time::timeout(TTL * 5, lease.lost()).await;
        assert!(lost.is_ok(), "the renewals never noticed");
        // The seat is free again in the new server, for anyone.
        let freed = within(Duration::from_secs(3), || async {
            a.try_acquire("v").await.ok()
        });
        assert!(freed.await.is_some());
    });
}

/// A restarted server's counter must not hand out a token a process still
/// holds: counting from 1 again, it gave another process's lease the only
/// seat of C = 1 under the same token and member name as the forgotten
/// one, whose renewals then went on succeeding on it, never lost.
#[test]
fn after_a_restart_no_token_is_given_twice_and_the_forgotten_lease_is_lost() {
    let _serial = one_at_a_time();
    let mut server = RedisServer::start();
    runtime().block_on(async {
        let ttl = Duration::from_millis(1500);
        let client = redis::Client::open(server.url()).unwrap();
        let connection = client.get_connection_manager().await.unwrap();
        let a = shuffle_limiter::inflight::InFlight::builder()
            .concurrency(1)
            .build_redis(connection, closed("reuse", ttl))
            .await
            .unwrap();
        let held = a.try_acquire("t").await.unwrap();
        server.restart(); // no persistence: the lease and the counter forgotten
        let b = limit(&server, (1, 1, 1), closed("reuse", ttl)).await;
        let other = b.try_acquire("u").await.unwrap();
        assert_ne!(other.token(), held.token(), "a token given twice");
        let lost = tokio::time::timeout(ttl * 3, held.lost()).await;
        assert!(lost.is_ok(), "C = 1, yet two leases hold its seat");
        assert!(!other.is_lost());
    });
}

/// A server restarted from its last snapshot (RDB, or a failover to a
/// replica that lagged) has the counter back at an older value. Promised:
/// [`Lease::token`](shuffle_limiter::inflight::Lease::token) is "unique to
/// it among every lease of the limit, growing with each", and the guide's
/// *Fencing*: a release that comes late "frees nothing of theirs". Counting
/// on from the old value gave a new lease the token (and member) of one
/// still held, whose release then freed the new holder's seat: C + 1 out.
#[test]
fn a_redis_restarted_from_a_snapshot_gives_no_token_twice() {
    let _serial = one_at_a_time();
    let file = format!("shuffle-snapshot-{}.rdb", std::process::id());
    let mut server = RedisServer::start_with(&["--dbfilename", &file]);
    let rt = runtime();
    // Process one, over a connection manager (it survives the restart).
    let one = rt.block_on(async {
        let client = redis::Client::open(server.url()).unwrap();
        let manager = client.get_connection_manager().await.unwrap();
        shuffle_limiter::inflight::InFlight::builder()
            .concurrency(2)
            .pools(1)
            .per_tenant(1)
            .build_redis(manager, closed("snap", Duration::from_secs(60)))
            .await
            .unwrap()
    });
    let a = rt.block_on(async {
        // A lease taken and given back: the counter exists, the pool is
        // empty; the snapshot is taken (as `save 60 1000` would).
        drop(one.try_acquire("t").await.unwrap());
        let gone = within(Duration::from_secs(3), || async {
            (seats(&server, &one, 0).await == 0).then_some(())
        });
        assert!(gone.await.is_some(), "the first lease was not released");
        let mut connection = server.connection().await;
        let _: () = redis::cmd("SAVE")
            .query_async(&mut connection)
            .await
            .unwrap();
        // A lease after the snapshot.
        one.try_acquire("t").await.unwrap()
    });
    // The server crashes and restarts from its snapshot.
    server.restart();
    rt.block_on(async {
        let back = within(Duration::from_secs(5), || async {
            let mut c = one.connection().clone();
            redis::cmd("PING").query_async::<String>(&mut c).await.ok()
        });
        assert!(
            back.await.is_some(),
            "the connection manager did not reconnect"
        );
        // Process two takes a seat.
        let two = limit(&server, (2, 1, 1), closed("snap", Duration::from_secs(60))).await;
        let b = two.try_acquire("t").await.unwrap();
        let same_token = a.token() == b.token();
        // Process one's holder ends its call: its release must free only
        // its own seat (which Redis forgot), never b's.
        drop(a);
        tokio::time::sleep(Duration::from_millis(500)).await;
        // b still holds one seat of C = 2: at most one more may be taken.
        let x = two.try_acquire("t").await;
        let y = two.try_acquire("t").await;
        let out = 1 + u32::from(x.is_ok()) + u32::from(y.is_ok());
        let tokens = (b.token(), x.as_ref().ok().and_then(|l| l.token()));
        let _ = std::fs::remove_file(std::env::temp_dir().join(&file));
        assert!(
            out <= 2,
            "{out} leases held at once with C = 2 (tokens {tokens:?}): the old holder's \
             release removed the new holder's member"
        );
        assert!(!same_token, "token {:?} given twice", b.token());
    });
}
