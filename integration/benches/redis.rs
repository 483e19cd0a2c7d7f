//! Decisions per second and latency through Redis: the k-bucket script of
//! `RedisLimiter`, in both layouts and unbatched, beside a plain one-key GCRA
//! script, the usual Redis rate limiter, on one `redis-server` started here
//! and on a three-master Redis Cluster started here.
//!
//! ```text
//! cargo bench -p integration --bench redis
//! ```
//!
//! On the single server the limiter talks through the one multiplexed
//! connection that `build_redis` makes (a `ConnectionManager`); the scripts
//! called directly share one `MultiplexedConnection` with the `redis`
//! crate's defaults. On the cluster, all share one connection of the
//! `redis` crate's async cluster client. For each, at 1, 16 and 64
//! concurrent tasks (`BENCH_TASKS`, the cluster's rows at the largest only):
//! the decisions per second, the p50/p99 latency of those decisions, the
//! script calls (`EVALSHA`, or `FCALL` of the draw's functions) the servers
//! counted per decision, and the server's microseconds per call (`INFO
//! commandstats`). The rounds alternate the
//! rows, and the summary gives the median and range of each, and the ratio
//! of medians to the one-key script at the same number of tasks.
//! `BENCH_SECS` sets the length of each run (default 3), `BENCH_ROUNDS` the
//! number of rounds (default 5), `BENCH_BATCH` the one-slot row's batches
//! (`most,window µs`; unset, the defaults: `RedisOptions::batch`), `BENCH_ONLY` the rows (substrings
//! of their labels, separated by `;`).

#[path = "../tests/support/redis_cluster.rs"]
mod redis_cluster;
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/redis_table.rs"]
mod table;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::Script;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis_cluster::RedisCluster;
use redis_server::RedisServer;
use shuffle_limiter::redis::{FailurePolicy, Layout, RedisLimiter, RedisOptions, Source};
use shuffle_limiter::{Quota, ShardedLimiter};
use table::{Row, evalsha_stats, only, task_counts};

/// The usual one-key limiter: GCRA on one string key, in microseconds of
/// the server's clock.
const ONE_KEY_GCRA: &str = include_str!("../../tests/support/one_key_gcra.lua");

/// The limiter's script, for calling it without the limiter.
/// The draw as the limiter loads it: the shared prelude, then the draw.
const K_BUCKET_DRAW: &str = concat!(
    include_str!("../../src/redis/prelude.lua"),
    include_str!("../../src/redis/held.lua"),
    include_str!("../../src/redis/draw.lua"),
    include_str!("../../src/redis/draw_one.lua")
);

const OURS: &str = "RedisLimiter::decide, one slot";
const SPREAD: &str = "RedisLimiter::decide, spread";
const UNBATCHED: &str = "decide, one slot, unbatched";
const SCRIPT_ONLY: &str = "its script alone (EVALSHA)";
const BASELINE: &str = "one-key GCRA script (baseline)";
const CLUSTER_OURS: &str = "cluster: decide, one slot";
const CLUSTER_SPREAD: &str = "cluster: decide, spread";
const CLUSTER_BASELINE: &str = "cluster: one-key GCRA (baseline)";
const TENANTS: usize = 1000;

/// The limiter's decisions made by the failure policy so far, and the
/// scripts' replies that timed out.
static BY_POLICY: AtomicU64 = AtomicU64::new(0);

/// One way of making a decision, for the `i`-th request.
type Decide = Arc<dyn Fn(usize) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A row of the table: its label, how it decides, and the servers that
/// count its script calls.
struct Setup {
    label: &'static str,
    decide: Decide,
    admins: Vec<MultiplexedConnection>,
}

fn main() {
    let setting = |name: &str, default: u64| -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let (seconds, rounds) = (setting("BENCH_SECS", 3), setting("BENCH_ROUNDS", 5));
    let server = RedisServer::start();
    let cluster = RedisCluster::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let tenants: Arc<Vec<String>> = Arc::new((0..TENANTS).map(|t| format!("t{t}")).collect());
        let connection = server.connection().await;
        let single = || async { vec![server.connection().await] };
        let one_slot = Arc::new(on_server(&server, "bench", options(Layout::OneSlot)).await);
        let spread = on_server(&server, "bench-spread", options(Layout::Spread));
        let spread = Arc::new(spread.await);
        let unbatched = options(Layout::OneSlot).unbatched();
        let unbatched = Arc::new(on_server(&server, "bench-unbatched", unbatched).await);
        let script_only = script_only(&one_slot, &tenants, connection.clone());
        let clustered = cluster.connect().await;
        let mut nodes = Vec::new();
        for node in &cluster.nodes {
            nodes.push(node.connection().await);
        }
        let on_cluster = |name, layout| {
            ShardedLimiter::builder()
                .quota(Quota::per_second(1_000_000_000))
                .buckets(8)
                .per_tenant(2)
                .name(name)
                .build_redis_with(clustered.clone(), options(layout))
        };
        let cluster_one_slot = Arc::new(on_cluster("bench", Layout::OneSlot).await.unwrap());
        let cluster_spread = Arc::new(on_cluster("bench-spread", Layout::Spread).await.unwrap());
        let setups = [
            Setup {
                label: OURS,
                decide: decide(one_slot, &tenants),
                admins: single().await,
            },
            Setup {
                label: SPREAD,
                decide: decide(spread, &tenants),
                admins: single().await,
            },
            Setup {
                label: UNBATCHED,
                decide: decide(unbatched, &tenants),
                admins: single().await,
            },
            Setup {
                label: SCRIPT_ONLY,
                decide: script_only,
                admins: single().await,
            },
            // One hash tag: one key per tenant, all on one server.
            Setup {
                label: BASELINE,
                decide: one_key(connection.clone(), "{bench-one-key}:t"),
                admins: single().await,
            },
            Setup {
                label: CLUSTER_OURS,
                decide: decide(cluster_one_slot, &tenants),
                admins: nodes.clone(),
            },
            Setup {
                label: CLUSTER_SPREAD,
                decide: decide(cluster_spread, &tenants),
                admins: nodes.clone(),
            },
            // No hash tag: the tenants' keys spread over the nodes.
            Setup {
                label: CLUSTER_BASELINE,
                decide: one_key(clustered.clone(), "bench-one-key:t"),
                admins: nodes,
            },
        ];

        let tasks = task_counts();
        println!(
            "{:<40} {:>5} {:>12} {:>8} {:>8} {:>13} {:>10}",
            "decision", "tasks", "decisions/s", "p50 µs", "p99 µs", "calls/dec.", "server µs"
        );
        // One row per setup and number of tasks; the cluster's at the
        // largest only (a Cluster on two shared cores buys isolation, not
        // throughput).
        let mut cells: Vec<(usize, usize)> = Vec::new();
        for &t in &tasks {
            for (s, setup) in setups.iter().enumerate() {
                if setup.label.starts_with("cluster") && t != *tasks.last().unwrap() {
                    continue;
                }
                if only(setup.label) {
                    cells.push((s, t));
                }
            }
        }
        let mut rows: Vec<Vec<Row>> = cells.iter().map(|_| Vec::new()).collect();
        // Rounds alternate the rows, so that none gets the quieter machine.
        for round in 1..=rounds {
            for (&(s, t), rows) in cells.iter().zip(&mut rows) {
                let setup = &setups[s];
                let mut admins = setup.admins.clone();
                let row = measure(&mut admins, seconds, t, setup.decide.clone()).await;
                row.print(setup.label, t, round);
                rows.push(row);
            }
        }
        println!(
            "over {rounds} rounds, median (range): decisions/s; its ratio to the baseline's \
             in the same round and tasks; p50, p99; server µs per call; decisions per \
             call:"
        );
        let labels: Vec<(&str, usize)> = cells.iter().map(|&(s, t)| (setups[s].label, t)).collect();
        let baseline_of = |label: &str| {
            if label.starts_with("cluster") {
                CLUSTER_BASELINE
            } else {
                BASELINE
            }
        };
        table::summary(&labels, &rows, baseline_of);
    });
}

/// The one-slot row's batches, `BENCH_BATCH` as `most,window µs`, if set
/// (tokio's timer counts whole milliseconds).
fn batching() -> Option<(u32, Duration)> {
    let setting = std::env::var("BENCH_BATCH").ok()?;
    let (most, window) = setting
        .split_once(',')
        .expect("BENCH_BATCH=most,window_micros");
    let window = Duration::from_micros(window.trim().parse().unwrap());
    Some((most.trim().parse().unwrap(), window))
}

/// Deadline 1 s: the bench measures decisions, not the failure policy.
/// In the one-slot layout, the batches of `BENCH_BATCH` if set, else the
/// defaults.
fn options(layout: Layout) -> RedisOptions {
    let options = RedisOptions::new(FailurePolicy::FailClosed)
        .deadline(Duration::from_secs(1))
        .layout(layout);
    match batching() {
        Some((most, window)) if layout == Layout::OneSlot => options.batch(most, window),
        _ => options,
    }
}

/// A limiter on the single server, through the connection `build_redis`
/// makes, with a budget no run can reach: every decision reads and writes.
async fn on_server(server: &RedisServer, name: &str, options: RedisOptions) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(Quota::per_second(1_000_000_000))
        .buckets(8)
        .per_tenant(2)
        .name(name)
        .build_redis(&server.url(), options)
        .await
        .unwrap()
}

/// The limiter's whole path, one grant per call.
fn decide<Conn>(limiter: Arc<RedisLimiter<Conn>>, tenants: &Arc<Vec<String>>) -> Decide
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    let tenants = Arc::clone(tenants);
    Arc::new(move |i: usize| {
        let (limiter, tenants) = (limiter.clone(), tenants.clone());
        Box::pin(async move {
            let decision = limiter.decide(&tenants[i % TENANTS]).await;
            // A reply later than the 1 s deadline (a stalled host) is the
            // policy's: counted and shown, rather than ending the run.
            if decision.source() == Source::Redis {
                assert!(decision.is_granted());
            } else {
                BY_POLICY.fetch_add(1, Ordering::Relaxed);
            }
        })
    })
}

/// The usual one-key limiter, a key per tenant: `prefix` and its number.
fn one_key<Conn>(connection: Conn, prefix: &'static str) -> Decide
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    let script = Arc::new(Script::new(ONE_KEY_GCRA));
    Arc::new(move |i: usize| {
        let (script, mut connection) = (script.clone(), connection.clone());
        Box::pin(async move {
            let reply: Result<Vec<i64>, _> = script
                .key(format!("{prefix}{}", i % TENANTS))
                .arg(1u64)
                .arg(1_000_000u64)
                .invoke_async(&mut connection)
                .await;
            late_or_granted(reply);
        })
    })
}

/// A script's grant; a reply that timed out (the connection's own response
/// timeout, on a stalled host) is counted and shown, as the limiter's late
/// decisions are, rather than ending the run.
fn late_or_granted(reply: redis::RedisResult<Vec<i64>>) {
    match reply {
        Ok(reply) => assert_eq!(reply[0], 1),
        Err(e) if e.is_timeout() => {
            BY_POLICY.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => panic!("{e}"),
    }
}

/// The one-slot limiter's script called directly: what the limiter's own
/// work (deadline timer, shard cache, denial cache, policy) adds.
fn script_only(
    limiter: &RedisLimiter,
    tenants: &[String],
    connection: MultiplexedConnection,
) -> Decide {
    let script = Arc::new(Script::new(K_BUCKET_DRAW));
    let interval = limiter.bucket_interval().as_micros() as u64;
    let shards: Arc<Vec<(Vec<String>, Vec<u32>)>> = Arc::new(
        tenants
            .iter()
            .map(|t| {
                let buckets = limiter.shard(t).buckets().to_vec();
                let keys = buckets
                    .iter()
                    .map(|&b| limiter.key(b).unwrap().to_owned())
                    .collect();
                let bursts = buckets
                    .iter()
                    .map(|&b| limiter.bucket_burst(b).unwrap())
                    .collect();
                (keys, bursts)
            })
            .collect(),
    );
    // The one-slot layout's quota key sits beside its buckets: `{name}:quota`.
    let first = limiter.key(0).unwrap();
    let quota_key: Arc<str> = format!("{}:quota", &first[..first.rfind(":b").unwrap()]).into();
    Arc::new(move |i: usize| {
        let (script, shards, mut connection) = (script.clone(), shards.clone(), connection.clone());
        let quota_key = Arc::clone(&quota_key);
        Box::pin(async move {
            let (keys, bursts) = &shards[i % TENANTS];
            let mut invocation = script.prepare_invoke();
            // draw.lua's contract: the k keys then the quota key; packed
            // as little-endian doubles in one argument, the interval, n,
            // the tie's start, k, the bursts, the quota version (0: as
            // built, no quota set live) and the lead (0: now).
            let numbers = [interval, 1, 0, keys.len() as u64].into_iter();
            let numbers = numbers
                .chain(bursts.iter().map(|&b| u64::from(b)))
                .chain([0, 0]);
            let packed: Vec<u8> = numbers.flat_map(|n| (n as f64).to_le_bytes()).collect();
            invocation.key(keys).key(&*quota_key).arg(packed);
            // Its reply packed the same way: granted first.
            let reply: Result<Vec<u8>, _> = invocation.invoke_async(&mut connection).await;
            let granted =
                |packed: Vec<u8>| vec![f64::from_le_bytes(packed[..8].try_into().unwrap()) as i64];
            late_or_granted(reply.map(granted));
        })
    })
}

/// Throughput of `tasks` concurrent tasks, the latency of their
/// decisions, and the script calls and server time per call counted by the
/// servers.
async fn measure(
    admins: &mut [MultiplexedConnection],
    seconds: u64,
    tasks: usize,
    decide: Decide,
) -> Row {
    // Warm up: the script is loaded and the connection busy.
    for i in 0..2_000 {
        decide(i).await;
    }
    let before = evalsha_stats(admins).await;
    let policy_before = BY_POLICY.load(Ordering::Relaxed);
    let started = Instant::now();
    let stop = started + Duration::from_secs(seconds);
    let stride = tasks;
    let tasks: Vec<_> = (0..tasks)
        .map(|task| {
            let decide = decide.clone();
            tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(1 << 16);
                let mut i = task;
                while Instant::now() < stop {
                    let t = Instant::now();
                    decide(i).await;
                    latencies.push(t.elapsed());
                    i += stride;
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed().as_secs_f64();
    let after = evalsha_stats(admins).await;
    let (calls, usec) = (after.0 - before.0, after.1 - before.1);
    let decisions = latencies.len();
    latencies.sort();
    let micros =
        |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    Row {
        per_second: decisions as f64 / elapsed,
        p50: micros(0.50),
        p99: micros(0.99),
        evalsha_per_decision: calls as f64 / decisions as f64,
        server_micros: usec as f64 / calls.max(1) as f64,
        by_policy: BY_POLICY.load(Ordering::Relaxed) - policy_before,
    }
}
