//! Several processes, one budget: worker processes saturate one limiter in
//! Redis, and together they are admitted what the budget allows, no more.
//!
//! ```text
//! redis-server --port 6379 --save "" &
//! cargo run -p integration --example fleet
//! REDIS_URL=redis://127.0.0.1:6380 WORKERS=6 RUN_SECS=5 cargo run -p integration --example fleet
//! ```
//!
//! The program starts `WORKERS` (default 4) copies of itself, each hammering
//! the same limiter — 200 requests/s, burst 20, N = 8, k = 2 — from 16
//! tenants for `RUN_SECS` (default 3), and ends with one line:
//! `admitted=<count> budget=<R·t+B> seconds=<t>`, where t is measured on the
//! Redis server's clock from the first worker's start to the last one's end.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManager;
use shuffle_limiter::redis::{FailurePolicy, RedisLimiter, RedisOptions};
use shuffle_limiter::{Limit, Quota, ShardedLimiter};

const RATE: u32 = 200;
const BURST: u32 = 20;
const TENANTS: usize = 16;

/// Prints an error the way the library words it (`Display`), not `Debug`.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("worker") => {
            let (Some(name), Some(seconds)) = (args.get(2), args.get(3)) else {
                return Err(
                    "usage: fleet worker NAME SECONDS (the coordinator starts workers)".into(),
                );
            };
            worker(&url, name, seconds.parse()?)
        }
        _ => coordinator(),
    }
}

fn setting(name: &str, default: u64) -> Result<u64, Box<dyn std::error::Error>> {
    match std::env::var(name) {
        Ok(v) => Ok(v
            .parse()
            .map_err(|e| format!("{name}={v:?} is not a count: {e}"))?),
        Err(_) => Ok(default),
    }
}

/// Starts the workers, waits for them, and adds up.
fn coordinator() -> Result<(), Box<dyn std::error::Error>> {
    let workers = setting("WORKERS", 4)?;
    let seconds = setting("RUN_SECS", 3)?;
    // A fresh limiter name per run, so that every run starts from full buckets.
    let name = format!("fleet-example-{}", std::process::id());
    let exe = std::env::current_exe()?;
    let children = (0..workers)
        .map(|_| {
            Command::new(&exe)
                .args(["worker", &name, &seconds.to_string()])
                .stdout(Stdio::piped())
                .spawn()
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Reap every worker before judging any, so none is left running.
    let outputs: Vec<_> = children
        .into_iter()
        .map(|child| child.wait_with_output())
        .collect();
    let (mut admitted, mut first, mut last) = (0u64, u64::MAX, 0u64);
    for output in outputs {
        let output = output?;
        if !output.status.success() {
            return Err(format!("a worker failed: {}", output.status).into());
        }
        let report = String::from_utf8(output.stdout)?;
        let numbers: Vec<u64> = report
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        let &[count, start, end] = numbers.as_slice() else {
            return Err(format!("a worker said {report:?}").into());
        };
        admitted += count;
        first = first.min(start);
        last = last.max(end);
    }
    let t = last.saturating_sub(first) as f64 / 1e6;
    let budget = f64::from(RATE) * t + f64::from(BURST);
    println!("admitted={admitted} budget={budget:.0} seconds={t:.3}");
    Ok(())
}

/// One worker process: every tenant asks as fast as it is allowed to, and
/// the worker prints what it was granted and when it started and ended.
fn worker(url: &str, name: &str, seconds: u64) -> Result<(), Box<dyn std::error::Error>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let limiter = ShardedLimiter::builder()
            .quota(Quota::per_second(RATE).with_burst(BURST))
            .buckets(8)
            .per_tenant(2)
            .name(name)
            .build_redis(
                url,
                RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_millis(100)),
            )
            .await?;
        let limiter = Arc::new(limiter);
        let start = server_time(&limiter).await?;
        let stop = tokio::time::Instant::now() + Duration::from_secs(seconds);
        let tenants: Vec<_> = (0..TENANTS)
            .map(|t| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let tenant = format!("tenant-{t}");
                    let mut granted = 0u64;
                    while tokio::time::Instant::now() < stop {
                        match limiter.check(&tenant).await {
                            Ok(_) => granted += 1,
                            Err(denied) => tokio::time::sleep(denied.retry_after()).await,
                        }
                    }
                    granted
                })
            })
            .collect();
        let mut admitted = 0;
        for tenant in tenants {
            admitted += tenant.await?;
        }
        let end = server_time(&limiter).await?;
        println!("{admitted} {start} {end}");
        Ok(())
    })
}

/// The Redis server's clock in microseconds: every decision used it.
async fn server_time(limiter: &RedisLimiter<ConnectionManager>) -> redis::RedisResult<u64> {
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut limiter.connection().clone())
        .await?;
    Ok(secs * 1_000_000 + micros)
}
