//! Decisions per second and latency through Redis: the k-bucket script of
//! `RedisLimiter` beside a plain one-key GCRA script, the usual Redis rate
//! limiter, on one `redis-server` started here.
//!
//! ```text
//! cargo bench -p integration --bench redis
//! ```
//!
//! The limiter talks through the one multiplexed connection that
//! `build_redis` makes (a `ConnectionManager`); the two scripts called
//! directly share one `MultiplexedConnection` with the `redis` crate's
//! defaults. For each: the throughput of 64 concurrent tasks through its
//! connection, the p50/p99 latency of a single caller, and the `EVALSHA`
//! calls the server counted per decision (one round trip each). The rounds
//! alternate the three, and the summary gives the median of each.
//! `BENCH_SECS` sets the length of each throughput run (default 3),
//! `BENCH_ROUNDS` the number of rounds (default 5).

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Script;
use redis::aio::MultiplexedConnection;
use redis_server::RedisServer;
use shuffle_limiter::redis::{FailurePolicy, RedisOptions, Source};
use shuffle_limiter::{Quota, ShardedLimiter};

/// The usual one-key limiter: GCRA on one string key, in microseconds of
/// the server's clock.
const ONE_KEY_GCRA: &str = r#"
local interval = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2]) * interval
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
local new_tat = math.max(tat, now) + interval
if new_tat - capacity > now then
  return { 0, new_tat - capacity - now }
end
redis.call('SET', KEYS[1], string.format('%d', new_tat), 'PX',
  string.format('%d', math.ceil((new_tat - now) / 1000) + 1000))
return { 1, 0 }
"#;

/// The limiter's script, for calling it without the limiter.
const K_BUCKET_DRAW: &str = include_str!("../../src/redis/draw.lua");

const OURS: &str = "RedisLimiter::decide, k = 2 of N = 8";
const SCRIPT_ONLY: &str = "its script alone (EVALSHA)";
const BASELINE: &str = "one-key GCRA script (baseline)";
const TASKS: usize = 64;
const TENANTS: usize = 1000;
const LATENCY_SAMPLES: usize = 10_000;

fn main() {
    let setting = |name: &str, default: u64| -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default)
    };
    let (seconds, rounds) = (setting("BENCH_SECS", 3), setting("BENCH_ROUNDS", 5));
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let connection = server.connection().await;
        // A budget no run can reach: every decision reads and writes.
        let limiter = ShardedLimiter::builder()
            .quota(Quota::per_second(1_000_000_000))
            .buckets(8)
            .per_tenant(2)
            .name("bench")
            .build_redis(
                &server.url(),
                RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(1)),
            )
            .await
            .unwrap();
        let limiter = Arc::new(limiter);
        let one_key = Arc::new(Script::new(ONE_KEY_GCRA));
        let tenants: Arc<Vec<String>> = Arc::new((0..TENANTS).map(|t| format!("t{t}")).collect());

        let ours = {
            let (limiter, tenants) = (limiter.clone(), tenants.clone());
            move |i: usize| {
                let (limiter, tenants) = (limiter.clone(), tenants.clone());
                async move {
                    let decision = limiter.decide(&tenants[i % TENANTS], 1).await.unwrap();
                    assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
                    assert!(decision.is_granted());
                }
            }
        };
        let baseline = {
            let (script, connection) = (one_key.clone(), connection.clone());
            move |i: usize| {
                let (script, mut connection) = (script.clone(), connection.clone());
                async move {
                    let reply: Vec<i64> = script
                        .key(format!("{{bench-one-key}}:t{}", i % TENANTS))
                        .arg(1u64)
                        .arg(1_000_000u64)
                        .invoke_async(&mut connection)
                        .await
                        .unwrap();
                    assert_eq!(reply[0], 1);
                }
            }
        };

        // The same script called directly: what the limiter's own work
        // (deadline timer, shard cache, denial cache, policy) adds.
        let script_only = {
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
            let connection = connection.clone();
            move |i: usize| {
                let (script, shards, mut connection) =
                    (script.clone(), shards.clone(), connection.clone());
                async move {
                    let (keys, bursts) = &shards[i % TENANTS];
                    let mut invocation = script.prepare_invoke();
                    invocation.key(keys).arg(interval).arg(1).arg(0).arg(bursts);
                    let reply: Vec<i64> = invocation.invoke_async(&mut connection).await.unwrap();
                    assert_eq!(reply[0], 1);
                }
            }
        };

        println!(
            "{:<40} {:>12} {:>8} {:>8} {:>13}",
            "decision", "decisions/s", "p50 µs", "p99 µs", "EVALSHA/dec."
        );
        let mut admin = server.connection().await;
        let mut per_second: [Vec<f64>; 3] = Default::default();
        // Rounds alternate the three, so that none gets the quieter machine.
        for round in 1..=rounds {
            let row = measure(&mut admin, seconds, ours.clone()).await;
            row.print(OURS, round);
            per_second[0].push(row.per_second);
            let row = measure(&mut admin, seconds, script_only.clone()).await;
            row.print(SCRIPT_ONLY, round);
            per_second[1].push(row.per_second);
            let row = measure(&mut admin, seconds, baseline.clone()).await;
            row.print(BASELINE, round);
            per_second[2].push(row.per_second);
        }
        let [ours, script_only, baseline] = per_second.map(median);
        println!("median decisions/s over {rounds} rounds:");
        println!(
            "  {OURS:<38} {ours:>10.0}  ({:.3} of the baseline)",
            ours / baseline
        );
        println!(
            "  {SCRIPT_ONLY:<38} {script_only:>10.0}  ({:.3} of the baseline)",
            script_only / baseline
        );
        println!("  {BASELINE:<38} {baseline:>10.0}");
    });
}

/// Throughput of 64 tasks, latency of one caller, and EVALSHA calls per
/// decision counted by the server.
async fn measure<F, Fut>(admin: &mut MultiplexedConnection, seconds: u64, decide: F) -> Row
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    // Warm up: the script is loaded and the connection busy.
    for i in 0..2_000 {
        decide(i).await;
    }
    let calls_before = evalsha_calls(admin).await;
    let started = Instant::now();
    let stop = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let decide = decide.clone();
            tokio::spawn(async move {
                let mut decisions = 0u64;
                let mut i = task;
                while Instant::now() < stop {
                    decide(i).await;
                    decisions += 1;
                    i += TASKS;
                }
                decisions
            })
        })
        .collect();
    let mut decisions = 0;
    for task in tasks {
        decisions += task.await.unwrap();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let calls = evalsha_calls(admin).await - calls_before;

    let mut latencies = Vec::with_capacity(LATENCY_SAMPLES);
    for i in 0..LATENCY_SAMPLES {
        let t = Instant::now();
        decide(i).await;
        latencies.push(t.elapsed());
    }
    latencies.sort();
    let micros =
        |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6;
    Row {
        per_second: decisions as f64 / elapsed,
        p50: micros(0.50),
        p99: micros(0.99),
        evalsha_per_decision: calls as f64 / decisions as f64,
    }
}

/// One line of the table.
struct Row {
    per_second: f64,
    p50: f64,
    p99: f64,
    evalsha_per_decision: f64,
}

impl Row {
    fn print(&self, label: &str, round: u64) {
        println!(
            "{label:<40} {:>12.0} {:>8.1} {:>8.1} {:>13.3}   (round {round})",
            self.per_second, self.p50, self.p99, self.evalsha_per_decision
        );
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `EVALSHA` calls the server has counted so far.
async fn evalsha_calls(admin: &mut MultiplexedConnection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(admin)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}
