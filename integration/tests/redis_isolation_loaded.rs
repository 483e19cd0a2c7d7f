//! The Redis isolation scene with the default options on a loaded host: a
//! tenant flooding from four tasks, 99 light tenants, and two threads
//! beside them that spin on the CPU the client and the server share (as a
//! compile on the same host does). A late reply must not become a denial
//! for a tenant whose buckets hold plenty: every tenant that shares no
//! bucket with the flooder is granted every request. Against a real
//! `redis-server` on 127.0.0.1.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use shuffle_limiter::redis::{FailurePolicy, RedisLimiter, RedisOptions};
use shuffle_limiter::{Quota, ShardedLimiter};
use tokio::time::MissedTickBehavior;

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

const RUN: Duration = Duration::from_secs(4);
const TICK: Duration = Duration::from_millis(500);
const LIGHT: u64 = 99;

/// Requests and grants of the light tenants that share no bucket with the
/// flooder.
#[derive(Default)]
struct Untouched {
    sent: AtomicU64,
    granted: AtomicU64,
}

async fn scene(limiter: Arc<RedisLimiter>) -> Arc<Untouched> {
    let flood_shard = limiter.shard("flooder");
    let untouched = Arc::new(Untouched::default());
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let limiter = limiter.clone();
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            while started.elapsed() < RUN {
                let _ = limiter.check_n("flooder", 50).await;
            }
        }));
    }
    for t in 0..LIGHT {
        let tenant = format!("light-{t}");
        if limiter.shard(&tenant).overlap(&flood_shard) != 0 {
            continue;
        }
        let (limiter, untouched) = (limiter.clone(), untouched.clone());
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
            let started = Instant::now();
            while started.elapsed() < RUN {
                tick.tick().await;
                let granted = limiter.check(&tenant).await.is_ok();
                untouched.sent.fetch_add(1, Ordering::Relaxed);
                untouched
                    .granted
                    .fetch_add(u64::from(granted), Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    untouched
}

/// Two threads that spin on the CPU until the flag is set.
fn hog(stop: &Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<u64>> {
    (0..2)
        .map(|_| {
            let stop = Arc::clone(stop);
            std::thread::spawn(move || {
                let mut spins = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    spins = std::hint::black_box(spins.wrapping_add(1));
                }
                spins
            })
        })
        .collect()
}

#[test]
fn a_late_reply_on_a_loaded_host_denies_no_tenant_with_tokens() {
    let server = RedisServer::start();
    let url = server.url();
    let stop = Arc::new(AtomicBool::new(false));
    let hogs = hog(&stop);
    let (done, report) = mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            // N = 8, k = 2, 400/s with a burst of 400, every option the
            // default.
            let limiter = ShardedLimiter::builder()
                .quota(Quota::per_second(400).with_burst(400))
                .buckets(8)
                .per_tenant(2)
                .name("isolation-loaded")
                .build_redis(&url, RedisOptions::new(FailurePolicy::FailClosed))
                .await
                .unwrap();
            let limiter = Arc::new(limiter);
            let untouched = scene(limiter.clone()).await;
            let _ = done.send((untouched, limiter.stats()));
        });
    });
    let result = report.recv_timeout(RUN * 5);
    stop.store(true, Ordering::Relaxed);
    for hog in hogs {
        hog.join().unwrap();
    }
    let (untouched, stats) = result.expect("the scene never finished");
    let (sent, granted) = (
        untouched.sent.load(Ordering::Relaxed),
        untouched.granted.load(Ordering::Relaxed),
    );
    eprintln!("untouched tenants: {granted} of {sent} granted; {stats:?}");
    assert!(sent > 100, "{sent}");
    assert_eq!(
        granted, sent,
        "tenants sharing no bucket with the flooder got {granted} of {sent}: {stats:?}"
    );
}
