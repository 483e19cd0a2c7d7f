//! The reads of `state.rs` against a real `redis-server`, in both layouts:
//! what the draw left, missing and stray keys, a quota changed by another
//! process, and a server that stops answering.

use std::future::Future;
use std::time::{Duration, Instant};

use redis::AsyncCommands;

use crate::plan::whom::{Id, Whom};
use crate::redis::script::redis_server::RedisServer;
use crate::redis::{Error, FailurePolicy, Layout, RedisLimiter, RedisOptions};
use crate::{Limit, Quota, ShardedLimiter};

const LAYOUTS: [Layout; 2] = [Layout::OneSlot, Layout::Spread];

/// Eight buckets of 4 tokens, each refilling one token per 8000 s: the
/// server's clock, which runs during a test, refills nothing.
fn slow() -> Quota {
    Quota::new(8, Duration::from_secs(8000)).with_burst(32)
}

fn run<F: Future>(test: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(test)
}

async fn limiter(
    server: &RedisServer,
    name: &str,
    layout: Layout,
    deadline: Duration,
) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(slow())
        .buckets(8)
        .per_tenant(2)
        .name(name)
        .build_redis(
            &server.url(),
            RedisOptions::new(FailurePolicy::FailClosed)
                .deadline(deadline)
                .layout(layout),
        )
        .await
        .unwrap()
}

/// A deadline generous enough for a busy host.
const GENEROUS: Duration = Duration::from_secs(2);

#[test]
fn after_k_draws_the_reads_show_exactly_what_the_draws_took() {
    let server = RedisServer::start();
    run(async {
        for layout in LAYOUTS {
            let limiter = limiter(&server, &format!("drawn-{layout:?}"), layout, GENEROUS).await;
            let shard = limiter.shard("t");
            let own: u64 = (shard.buckets().iter())
                .map(|&b| u64::from(limiter.bucket_burst(b).unwrap()))
                .sum();
            // Missing keys read as full buckets.
            assert_eq!(limiter.remaining("t").await.unwrap(), own, "{layout:?}");
            let mut paid = [0u64; 8];
            for k in 1..=own {
                let grant = limiter.check("t").await.unwrap();
                paid[grant.bucket() as usize] += 1;
                let remaining = limiter.remaining("t").await.unwrap();
                assert_eq!(remaining, own - k, "{layout:?} after {k} draws");
                assert_eq!(grant.remaining(), remaining, "{layout:?} after {k} draws");
            }
            let interval = limiter.bucket_interval();
            let snapshot = limiter.store.snapshot_in_redis().await.unwrap();
            assert_eq!(snapshot.len(), 8, "{layout:?}");
            for (b, state) in snapshot.iter().enumerate() {
                let burst = limiter.bucket_burst(b as u32).unwrap();
                assert_eq!(
                    (state.bucket(), state.burst()),
                    (b as u32, burst),
                    "{layout:?}"
                );
                assert_eq!(
                    state.available(),
                    u64::from(burst) - paid[b],
                    "{layout:?} {b}"
                );
                // Full again once each token taken has come back, less the
                // time the test has run.
                let owed = interval * paid[b] as u32;
                assert!(state.full_in() <= owed, "{layout:?} {b}: {state:?}");
                assert!(
                    state.full_in() + GENEROUS * 10 > owed,
                    "{layout:?} {b}: {state:?}"
                );
                assert_eq!(state.full_in().is_zero(), paid[b] == 0, "{layout:?} {b}");
            }
        }
    });
}

#[test]
fn a_missing_key_reads_full_and_a_stray_string_empty_without_being_written() {
    let server = RedisServer::start();
    run(async {
        let mut redis = server.connection().await;
        for layout in LAYOUTS {
            let limiter = limiter(&server, &format!("stray-{layout:?}"), layout, GENEROUS).await;
            let shard = limiter.shard("t");
            let [first, second] = [shard.buckets()[0], shard.buckets()[1]];
            let burst = |b: u32| limiter.bucket_burst(b).unwrap();
            // Emptied by draws, then its key deleted: full again.
            for _ in 0..burst(first) + burst(second) {
                limiter.check("t").await.unwrap();
            }
            assert_eq!(limiter.remaining("t").await.unwrap(), 0);
            let _: () = redis.del(limiter.key(first).unwrap()).await.unwrap();
            let remaining = limiter.remaining("t").await.unwrap();
            assert_eq!(remaining, u64::from(burst(first)), "{layout:?}");
            // A value that is not a time reads as the empty bucket the
            // draw would repair it to, and stays as it was.
            let key = limiter.key(first).unwrap().to_owned();
            let _: () = redis.set(&key, "nan").await.unwrap();
            assert_eq!(limiter.remaining("t").await.unwrap(), 0, "{layout:?}");
            let state = limiter.store.snapshot_in_redis().await.unwrap()[first as usize];
            assert_eq!(state.available(), 0, "{layout:?}");
            assert_eq!(
                state.full_in(),
                limiter.bucket_interval() * burst(first),
                "{layout:?}"
            );
            let value: String = redis.get(&key).await.unwrap();
            assert_eq!(value, "nan", "{layout:?}: a read wrote");
        }
    });
}

#[test]
fn a_key_of_another_type_is_not_a_bucket_nor_a_quota() {
    let server = RedisServer::start();
    run(async {
        let mut redis = server.connection().await;
        for layout in LAYOUTS {
            let limiter = limiter(&server, &format!("typed-{layout:?}"), layout, GENEROUS).await;
            let shard = limiter.shard("t");
            let bucket = shard.buckets()[1];
            let key = limiter.key(bucket).unwrap().to_owned();
            let _: () = redis.hset(&key, "f", "v").await.unwrap();
            let remaining = limiter.remaining("t").await;
            assert!(
                matches!(&remaining, Err(Error::NotABucket { key: k, .. }) if *k == key),
                "{layout:?}: {remaining:?}"
            );
            let snapshot = limiter.store.snapshot_in_redis().await;
            assert!(
                matches!(&snapshot, Err(Error::NotABucket { key: k, .. }) if *k == key),
                "{layout:?}: {snapshot:?}"
            );
            let _: () = redis.del(&key).await.unwrap();
            assert!(
                limiter.store.snapshot_in_redis().await.is_ok(),
                "{layout:?}"
            );
            // The quota key of the bucket's slot: a hash, then a text of
            // another shape.
            let quota_key = limiter.store.shared.script.quota_key(bucket).to_owned();
            let _: () = redis.hset(&quota_key, "f", "v").await.unwrap();
            let remaining = limiter.remaining("t").await;
            assert!(
                matches!(&remaining, Err(Error::NotAQuota { key: k, .. }) if *k == quota_key),
                "{layout:?}: {remaining:?}"
            );
            let _: () = redis.del(&quota_key).await.unwrap();
            let _: () = redis.set(&quota_key, "1 2 3").await.unwrap();
            let snapshot = limiter.store.snapshot_in_redis().await;
            assert!(
                matches!(&snapshot, Err(Error::NotAQuota { key: k, .. }) if *k == quota_key),
                "{layout:?}: {snapshot:?}"
            );
            let _: () = redis.del(&quota_key).await.unwrap();
            assert!(limiter.remaining("t").await.is_ok(), "{layout:?}");
        }
    });
}

#[test]
fn a_quota_or_n_changed_by_another_process_is_followed() {
    let server = RedisServer::start();
    let url = server.url();
    run(async {
        let build = |max_buckets| {
            ShardedLimiter::builder()
                .quota(slow())
                .buckets(8)
                .max_buckets(max_buckets)
                .per_tenant(2)
                .name("followed")
                .build_redis(
                    &url,
                    RedisOptions::new(FailurePolicy::FailClosed).deadline(GENEROUS),
                )
        };
        let reader = build(16).await.unwrap();
        let changer = build(16).await.unwrap();
        let shard = reader.shard("t");
        // Twice the burst: each bucket keeps its share, a full one is full.
        let doubled = Quota::new(8, Duration::from_secs(8000)).with_burst(64);
        changer.set_quota(doubled).await.unwrap();
        let own: u64 = (shard.buckets().iter())
            .map(|&b| u64::from(changer.bucket_burst(b).unwrap()))
            .sum();
        assert_eq!(reader.remaining("t").await.unwrap(), own);
        assert_eq!(reader.quota(), doubled, "the reader took the new quota");
        // N from 8 to 12: the snapshot reads the new N's buckets, each with
        // its burst under the new split.
        changer.set_buckets(12).await.unwrap();
        let snapshot = reader.store.snapshot_in_redis().await.unwrap();
        assert_eq!(snapshot.len(), 12);
        assert_eq!(reader.buckets(), 12);
        for state in &snapshot {
            let burst = changer.bucket_burst(state.bucket()).unwrap();
            assert_eq!(state.burst(), burst, "{state:?}");
            assert_eq!(reader.bucket_burst(state.bucket()), Some(burst));
        }
        // The buckets added start empty, the others kept their tokens.
        let available: u64 = snapshot.iter().map(|s| s.available()).sum();
        assert!(available < 64, "{snapshot:?}");
        // Down to 4: a shard kept as resolved under 8 or 12 (the Redis
        // fallback's, which nothing resolves again) counts nothing from a
        // bucket past 4 (its key was deleted, which would read full).
        changer.set_buckets(4).await.unwrap();
        let _ = reader.store.snapshot_in_redis().await.unwrap();
        let mut buckets = [0; crate::MAX_PER_TENANT as usize];
        buckets[1] = 11;
        let wide = crate::Shard {
            len: 2,
            spill: 0,
            buckets,
        };
        let first = u64::from(changer.bucket_burst(0).unwrap());
        let fixed = Whom {
            shard: wide,
            buckets: 12,
            id: Id::Fixed,
        };
        let remaining = (reader.store.remaining_in_redis(&reader.core, fixed).await).unwrap();
        assert!(remaining <= first, "{remaining} from bucket 0 alone");
        assert!(reader.remaining("t").await.is_ok());
    });
}

/// `read`'s answer; one that ignored the deadline would hang, so the test
/// gives up on it after ten.
async fn bounded<T>(deadline: Duration, read: impl Future<Output = T>) -> T {
    let read = tokio::time::timeout(deadline * 10, read).await;
    read.expect("no answer within ten deadlines")
}

#[test]
fn a_server_that_stops_answering_is_an_error_within_the_deadline() {
    let mut server = RedisServer::start();
    let deadline = Duration::from_millis(300);
    run(async {
        let limiters = [
            limiter(&server, "stopped-one", Layout::OneSlot, deadline).await,
            limiter(&server, "stopped-spread", Layout::Spread, deadline).await,
        ];
        for limiter in &limiters {
            limiter.store.snapshot_in_redis().await.unwrap();
        }
        // Hung: no answer at all, so only the deadline ends the read.
        server.signal("-STOP");
        for limiter in &limiters {
            let layout = limiter.layout();
            let started = Instant::now();
            let read = bounded(deadline, limiter.store.snapshot_in_redis()).await;
            let took = started.elapsed();
            assert!(
                matches!(read, Err(Error::Timeout { after }) if after == deadline),
                "{layout:?}: {read:?}"
            );
            assert!(
                took >= deadline && took < deadline * 3,
                "{layout:?}: {took:?}"
            );
            let started = Instant::now();
            let read = bounded(deadline, limiter.remaining("t")).await;
            assert!(
                matches!(read, Err(Error::Timeout { .. })),
                "{layout:?}: {read:?}"
            );
            assert!(started.elapsed() < deadline * 3, "{layout:?}");
        }
        // Gone: an error, as soon as the connection knows or at the deadline.
        server.kill();
        for limiter in &limiters {
            let layout = limiter.layout();
            let started = Instant::now();
            let read = limiter.store.snapshot_in_redis().await;
            assert!(read.is_err(), "{layout:?}: {read:?}");
            assert!(started.elapsed() < deadline * 3, "{layout:?}");
            let read = limiter.remaining("t").await;
            assert!(read.is_err(), "{layout:?}: {read:?}");
        }
    });
}

#[test]
fn every_bucket_of_the_largest_n_is_read_in_one_call() {
    let server = RedisServer::start();
    run(async {
        let n = crate::MAX_BUCKETS;
        let limiter = ShardedLimiter::builder()
            .quota(Quota::new(n, Duration::from_secs(8000)).with_burst(2 * n))
            .buckets(n)
            .per_tenant(2)
            .name("largest")
            .build_redis(
                &server.url(),
                RedisOptions::new(FailurePolicy::FailClosed).deadline(GENEROUS * 5),
            )
            .await
            .unwrap();
        let grant = limiter.check("t").await.unwrap();
        let snapshot = limiter.store.snapshot_in_redis().await.unwrap();
        assert_eq!(snapshot.len(), n as usize);
        for (b, state) in snapshot.iter().enumerate() {
            let taken = u64::from(b as u32 == grant.bucket());
            assert_eq!((state.bucket(), state.burst()), (b as u32, 2), "{state:?}");
            assert_eq!(state.available(), 2 - taken, "{state:?}");
        }
    });
}
