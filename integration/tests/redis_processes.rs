//! The budget of one Redis limiter across several processes, each a child
//! process of the test, against a real `redis-server` on 127.0.0.1.

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use shuffle_limiter::redis::FailurePolicy;
use shuffle_limiter::{Assignment, Limit, Quota, ShardedLimiter};

#[path = "support/batch.rs"]
mod batch;
#[path = "support/child.rs"]
mod child;
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use child::wait_bounded;
#[path = "support/serial.rs"]
mod serial;
use redis_server::RedisServer;
use serial::{one_at_a_time, options, server_micros};

const FLEET_ENV: &str = "SHUFFLE_LIMITER_REDIS_WORKER";
const FLEET_SECS: u64 = 3;
const FLEET_WORKERS: usize = 4;
const FLEET_TENANTS: usize = 32;

fn fleet_builder() -> shuffle_limiter::Builder {
    ShardedLimiter::builder()
        .quota(Quota::per_second(200).with_burst(20))
        .buckets(8)
        .per_tenant(2)
        .name("fleet-test")
}

#[test]
fn the_budget_holds_across_processes() {
    budget_across_processes(false);
}

#[test]
fn the_budget_holds_across_processes_that_batch() {
    budget_across_processes(true);
}

/// Workers in processes of their own saturate the budget, and never pass it.
fn budget_across_processes(batched: bool) {
    let server = RedisServer::start();
    let _guard = one_at_a_time();
    // Every worker cycles over the same tenants; together they cover every
    // bucket, so that saturating them saturates the budget.
    let assignment = Assignment::new(8, 2, b"").unwrap();
    let mut covered = [false; 8];
    for t in 0..FLEET_TENANTS {
        for &b in assignment.shard(format!("tenant-{t}")).buckets() {
            covered[b as usize] = true;
        }
    }
    assert!(covered.iter().all(|&c| c));

    let exe = std::env::current_exe().unwrap();
    let workers: Vec<Child> = (0..FLEET_WORKERS)
        .map(|_| {
            batch::tell(&mut Command::new(&exe), batched)
                .args(["--exact", "fleet_worker", "--ignored", "--nocapture"])
                .args(["--test-threads", "1"])
                .env(FLEET_ENV, server.url())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    let (mut admitted, mut first, mut last) = (0u64, u64::MAX, 0u64);
    for worker in workers {
        let stdout = wait_bounded(worker, Duration::from_secs(FLEET_SECS + 30));
        let line = stdout
            .lines()
            .find_map(|l| Some(l.split_once("fleet-worker ")?.1))
            .unwrap_or_else(|| panic!("no result from a worker: {stdout}"));
        let field = |name: &str| -> u64 {
            line.split(' ')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {line:?}"))
        };
        eprintln!("worker: {line}");
        admitted += field("admitted");
        first = first.min(field("first_us"));
        last = last.max(field("last_us"));
    }
    // Server time from before the first decision of any worker to after the
    // last: every grant happened inside it.
    let seconds = (last - first) as f64 / 1e6;
    let budget = 200.0 * seconds + 20.0;
    assert!(
        seconds >= FLEET_SECS as f64,
        "the workers ran {seconds} s of server time"
    );
    assert!(
        admitted as f64 <= budget,
        "{admitted} admitted over {seconds} s, budget {budget}"
    );
    assert!(
        admitted as f64 >= 0.95 * budget,
        "{admitted} admitted over {seconds} s: the workers did not saturate {budget}"
    );
}

/// The worker processes of `budget_across_processes`: not a test of its
/// own, run only as a child process of its tests.
#[test]
#[ignore = "a child process of the_budget_holds_across_processes"]
fn fleet_worker() {
    let Ok(url) = std::env::var(FLEET_ENV) else {
        return;
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let limiter = fleet_builder()
            .build_redis(&url, batch::as_asked(options(FailurePolicy::FailClosed)))
            .await
            .unwrap();
        let limiter = Arc::new(limiter);
        let first = server_micros(&limiter).await;
        let until = tokio::time::Instant::now() + Duration::from_secs(FLEET_SECS);
        let tasks: Vec<_> = (0..8)
            .map(|task| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let tenants: Vec<String> = (task..FLEET_TENANTS)
                        .step_by(8)
                        .map(|t| format!("tenant-{t}"))
                        .collect();
                    let mut admitted = 0u64;
                    while tokio::time::Instant::now() < until {
                        let mut wait = Duration::from_millis(20);
                        for tenant in &tenants {
                            match limiter.check(tenant).await {
                                Ok(_) => admitted += 1,
                                Err(denied) => wait = wait.min(denied.retry_after()),
                            }
                        }
                        tokio::time::sleep(wait).await;
                    }
                    admitted
                })
            })
            .collect();
        let mut admitted = 0;
        for task in tasks {
            admitted += task.await.unwrap();
        }
        let last = server_micros(&limiter).await;
        let stats = limiter.stats();
        assert_eq!(stats.from_policy(), 0, "Redis failed: {stats:?}");
        println!("fleet-worker admitted={admitted} first_us={first} last_us={last}");
    });
}
