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

use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use shuffle_limiter::blast::BlastRadius;
use shuffle_limiter::redis::{
    BuildError, Error, FailurePolicy, Layout, RedisLimiter, RedisOptions, Source,
};
use shuffle_limiter::{Builder, Quota, ShardedLimiter};

#[path = "support/redis_cluster.rs"]
mod redis_cluster;
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_cluster::{RedisCluster, one_at_a_time};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// FailClosed, spread, and a deadline a busy machine cannot miss where the
/// test is about decisions, not latency.
fn spread() -> RedisOptions {
    RedisOptions::new(FailurePolicy::FailClosed)
        .layout(Layout::Spread)
        .deadline(Duration::from_secs(2))
}

async fn build(
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
async fn bucket_nodes(
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

/// Resumes a stopped node however the test ends.
struct Resume<'a>(&'a redis_server::RedisServer);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.signal("-CONT");
    }
}

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
        let decision = b.decide("alone", 1).await.unwrap();
        assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
        let retry = decision.result().unwrap_err().retry_after();
        assert!(
            retry <= hour && retry > hour - Duration::from_secs(60),
            "{retry:?}"
        );
        let cached = a.decide("alone", 1).await.unwrap();
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
        let err = a.check_n("weighted", 11).await.unwrap_err();
        assert_eq!((err.requested(), err.max()), (11, 10));
        assert!(err.to_string().contains("Layout::OneSlot"), "{err}");
        let grant = a.check_n("weighted", 10).await.unwrap().unwrap();
        assert_eq!(grant.payments().len(), 1);
        let read = a
            .decide("weighted", 0)
            .await
            .unwrap()
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
                        let decision = limiter.decide(format!("tenant-{t}"), 1).await.unwrap();
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

/// What one tenant got from each limiter while a node was stopped.
#[derive(Debug, Default, Clone, Copy)]
struct Served {
    sent: u64,
    spread: u64,
    spread_by_policy: u64,
    one_slot: u64,
}

/// Tenants, their requests, and the pause between two of one tenant's.
const TENANTS: usize = 120;
const REQUESTS: u64 = 100;
const PACE: Duration = Duration::from_millis(15);

#[test]
fn a_stopped_node_touches_only_the_tenants_of_its_buckets_in_the_spread_layout() {
    let _serial = one_at_a_time();
    let cluster = RedisCluster::start();
    runtime().block_on(async {
        // The cluster client must not give up on the stopped node (and then
        // rebuild its slot map, which holds every node's requests) while it
        // is stopped: the limiter's deadline is what bounds a decision.
        let connection = cluster.connect_with(Duration::from_secs(60)).await;
        // A budget no test can reach: every answered request is granted.
        let builder = |name: &str| {
            ShardedLimiter::builder()
                .quota(Quota::per_second(1_000_000).with_burst(100_000))
                .buckets(8)
                .per_tenant(2)
                .name(name)
        };
        // A 100 ms deadline that a healthy node meets even on a busy host.
        let options = |layout| {
            RedisOptions::new(FailurePolicy::FailClosed)
                .layout(layout)
                .deadline(Duration::from_millis(100))
        };
        let spread = build(builder("stop-spread"), &connection, options(Layout::Spread)).await;
        let nodes = bucket_nodes(&cluster, &spread).await;
        // Stop the node holding the most buckets: m of N = 8.
        let stopped = (0..3)
            .max_by_key(|&n| nodes.iter().filter(|&&x| x == n).count())
            .unwrap();
        let on_stopped: Vec<u32> = (0..8).filter(|&b| nodes[b as usize] == stopped).collect();
        let m = on_stopped.len() as u32;
        assert!((2..=6).contains(&m), "buckets per node: {nodes:?}");

        // A one-slot limiter whose slot lives on that same node.
        let mut admin = cluster.nodes[(stopped + 1) % 3].connection().await;
        let mut one_slot_name = None;
        for i in 0..200 {
            let name = format!("stop-one-slot-{i}");
            let slot: u16 = redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(&name)
                .query_async(&mut admin)
                .await
                .unwrap();
            if cluster.owner(slot).port == cluster.nodes[stopped].port {
                one_slot_name = Some(name);
                break;
            }
        }
        let one_slot_name = one_slot_name.expect("a name on the stopped node");
        let one_slot = build(
            builder(&one_slot_name),
            &connection,
            options(Layout::OneSlot),
        )
        .await;

        // Which tenants the stop touches, from the real assignment.
        let tenants: Vec<String> = (0..TENANTS).map(|t| format!("tenant-{t}")).collect();
        let assignment = spread.assignment().clone();
        let stopped_in = |t: &str| {
            let shard = assignment.shard(t);
            shard
                .buckets()
                .iter()
                .filter(|b| on_stopped.contains(b))
                .count()
        };
        let touched = tenants.iter().filter(|t| stopped_in(t) > 0).count();
        let all_stopped = tenants.iter().filter(|t| stopped_in(t) == 2).count();
        // ... and what the math predicts for m of 8 buckets failed, k = 2:
        // 1 − C(8−m, 2)/C(8, 2) touched, C(m, 2)/C(8, 2) with both failed.
        let failure = BlastRadius::new(8, 2).unwrap().failed(m).unwrap();
        let n = TENANTS as f64;
        for (seen, p, what) in [
            (touched, failure.p_touched, "touched"),
            (all_stopped, failure.p_all_failed, "fully down"),
        ] {
            let sd = (n * p * (1.0 - p)).sqrt();
            assert!(
                (seen as f64 - n * p).abs() <= 4.0 * sd + 1.0,
                "{what}: {seen} of {TENANTS} by the assignment, {:.1} predicted",
                n * p
            );
        }

        // Both limiters answer before the stop.
        for limiter in [&spread, &one_slot] {
            let decision = limiter.decide("before", 1).await.unwrap();
            assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
        }
        cluster.nodes[stopped].signal("-STOP");
        let resume = Resume(&cluster.nodes[stopped]);
        let limiters = Arc::new((spread, one_slot));
        let tasks: Vec<_> = tenants
            .iter()
            .map(|tenant| {
                let (limiters, tenant) = (Arc::clone(&limiters), tenant.clone());
                tokio::spawn(async move {
                    let mut served = Served::default();
                    let mut pace = tokio::time::interval(PACE);
                    for _ in 0..REQUESTS {
                        pace.tick().await;
                        served.sent += 1;
                        let decision = limiters.0.decide(&tenant, 1).await.unwrap();
                        served.spread += u64::from(decision.is_granted());
                        served.spread_by_policy += u64::from(decision.source() == Source::Policy);
                        let decision = limiters.1.decide(&tenant, 1).await.unwrap();
                        served.one_slot += u64::from(decision.is_granted());
                    }
                    served
                })
            })
            .collect();
        let mut served = Vec::new();
        for task in tasks {
            served.push(task.await.unwrap());
        }
        drop(resume);
        let (spread, one_slot) = (&limiters.0, &limiters.1);

        let share = |got: u64, s: &Served| got as f64 / s.sent as f64;
        let (mut worst_untouched, mut worst_degraded) = (1.0f64, 1.0f64);
        let mut affected = 0;
        for (tenant, s) in tenants.iter().zip(&served) {
            let spread_share = share(s.spread, s);
            affected += usize::from(s.spread_by_policy > 0);
            match stopped_in(tenant) {
                0 => {
                    // One late reply from a healthy node on a busy host
                    // is the policy's to answer: at most one here.
                    assert!(s.spread_by_policy <= 1, "{tenant} is untouched: {s:?}");
                    assert!(spread_share >= 0.99, "{tenant} is untouched: {s:?}");
                    worst_untouched = worst_untouched.min(spread_share);
                }
                1 => worst_degraded = worst_degraded.min(spread_share),
                _ => assert_eq!(s.spread, 0, "{tenant}'s buckets are all stopped: {s:?}"),
            }
            // The contrast: one slot, one node, everyone down with it.
            assert!(
                share(s.one_slot, s) <= 0.01,
                "{tenant} got {} of {} from the one-slot limiter",
                s.one_slot,
                s.sent
            );
        }
        // A tenant with one stopped bucket keeps being served by the other
        // once the stopped one's breaker opens; it loses the requests that
        // tried it before and the probes that try it again.
        assert!(
            worst_degraded >= 0.5,
            "a degraded tenant got {worst_degraded:.2}"
        );
        assert!(
            affected <= touched,
            "{affected} affected, {touched} touched"
        );
        // The breakers make a stopped node's requests fail fast: only the
        // first few and the probes wait out the deadline, not each of the
        // thousands the policy answers.
        for limiter in [spread, one_slot] {
            let stats = limiter.stats();
            assert!(
                stats.errors() * 10 < stats.from_policy(),
                "{}: {stats:?}",
                limiter.name()
            );
        }
        println!(
            "stopped node held {m} of 8 buckets {on_stopped:?}; tenants touched {touched} \
             (predicted {:.1}), fully down {all_stopped} (predicted {:.1}), affected {affected}; \
             worst untouched {worst_untouched:.3}, worst degraded {worst_degraded:.3}; \
             spread {:?}, one slot {:?}",
            n * failure.p_touched,
            n * failure.p_all_failed,
            spread.stats(),
            one_slot.stats(),
        );

        // Resumed, the node answers again within a second for everyone.
        let fully_down = tenants
            .iter()
            .find(|t| stopped_in(t) == 2)
            .unwrap_or(&tenants[0]);
        for (limiter, tenant) in [(spread, fully_down), (one_slot, &tenants[0])] {
            let started = Instant::now();
            loop {
                let decision = limiter.decide(tenant, 1).await.unwrap();
                if decision.source() == Source::Redis {
                    break;
                }
                assert!(
                    started.elapsed() < Duration::from_secs(3),
                    "{} still on the policy: {:?}",
                    limiter.name(),
                    decision.error()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
}

/// The live changes in the spread layout: refunds and reservations go one
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
                limiter.until_ready("t").await;
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
