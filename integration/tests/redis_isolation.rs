//! Isolation over Redis: a tenant flooding from several tasks in a tight
//! loop must not slow or trip anything that the other tenants pass through
//! — not the executor, not the circuit breaker — and, with the default
//! options on a host whose CPU is busy with other work, a late reply must
//! not become a denial for a tenant whose buckets hold plenty. Against a
//! real `redis-server` on 127.0.0.1.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use shuffle_limiter::redis::{FailurePolicy, RedisLimiter, RedisOptions};
use shuffle_limiter::{Limit, Quota, Request, ShardedLimiter};
use tokio::time::MissedTickBehavior;

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

const RUN: Duration = Duration::from_secs(4);
const TICK: Duration = Duration::from_millis(500);
const LIGHT: u64 = 99;
/// A deadline the light tenants meet without the flood on a busy two-core
/// host that also runs the server; see the note on the default below.
const DEADLINE: Duration = Duration::from_millis(50);

/// What the light tenants saw: requests sent, granted, and sent by the
/// tenants whose shard shares no bucket with the flooder's.
#[derive(Default)]
struct Light {
    /// How long each light check took, from its tick to its answer.
    waits: std::sync::Mutex<Vec<Duration>>,
    sent: AtomicU64,
    untouched_sent: AtomicU64,
    untouched_granted: AtomicU64,
}

/// N = 8, k = 2, 400/s with a burst of 400, on the server at `url`.
async fn build(url: &str, name: &str, options: RedisOptions) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(Quota::per_second(400).with_burst(400))
        .buckets(8)
        .per_tenant(2)
        .name(name)
        .build_redis(url, options)
        .await
        .unwrap()
}

/// The light tenants for `run`, beside `flooders` tasks flooding one tenant.
async fn scene(limiter: Arc<RedisLimiter>, flooders: usize, run: Duration) -> Arc<Light> {
    let flooder = "flooder";
    let flood_shard = limiter.shard(flooder);
    let light = Arc::new(Light::default());
    let mut tasks = Vec::new();
    // Four tasks in a tight loop, each asking for a whole bucket (50
    // tokens): after the first moments every answer is a cached denial,
    // made without a round trip, for up to the second a bucket takes to
    // refill.
    for _ in 0..flooders {
        let limiter = limiter.clone();
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            let mut checks = 0u64;
            while started.elapsed() < run && checks < 50_000_000 {
                let _ = limiter.check(Request::tenant(flooder).tokens(50)).await;
                checks += 1;
            }
        }));
    }
    // 99 light tenants, one request every 500 ms each: 198/s together,
    // half the budget.
    for t in 0..LIGHT {
        let (limiter, light) = (limiter.clone(), light.clone());
        let tenant = format!("light-{t}");
        let untouched = limiter.shard(&tenant).overlap(&flood_shard) == 0;
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(TICK);
            tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
            let started = Instant::now();
            while started.elapsed() < run {
                tick.tick().await;
                let asked = Instant::now();
                let granted = limiter.check(&tenant).await.is_ok();
                light.waits.lock().unwrap().push(asked.elapsed());
                light.sent.fetch_add(1, Ordering::Relaxed);
                if untouched {
                    light.untouched_sent.fetch_add(1, Ordering::Relaxed);
                    light
                        .untouched_granted
                        .fetch_add(u64::from(granted), Ordering::Relaxed);
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    light
}

#[test]
fn a_flooding_tenant_starves_no_task_and_trips_nobody_else() {
    let server = RedisServer::start();
    let url = server.url();
    // The scene runs on its own two-worker runtime in its own thread, so
    // that a starved runtime fails the test instead of hanging it.
    let (done, report) = mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let options = || RedisOptions::new(FailurePolicy::FailClosed).deadline(DEADLINE);
            let limiter = |name: &'static str| build(&url, name, options());
            // First the light tenants alone, for what this host's round
            // trips cost without a flood; then with it.
            let quiet = Arc::new(limiter("isolation-quiet").await);
            let alone = p99(&*scene(quiet, 0, RUN / 2).await);
            let limiter = Arc::new(limiter("isolation").await);
            let light = scene(limiter.clone(), 4, RUN).await;
            let _ = done.send((light, limiter.stats(), alone));
        });
    });
    let (light, stats, alone) = report
        .recv_timeout(RUN * 5)
        .expect("the flood starved the runtime: the scene never finished");
    let expected = LIGHT * (RUN.as_millis() / TICK.as_millis()) as u64;
    let sent = light.sent.load(Ordering::Relaxed);
    assert!(
        sent * 10 >= expected * 9,
        "light tenants sent {sent} of {expected} requests: the flood starved them"
    );
    let (untouched_sent, untouched_granted) = (
        light.untouched_sent.load(Ordering::Relaxed),
        light.untouched_granted.load(Ordering::Relaxed),
    );
    assert!(untouched_sent > 200, "{untouched_sent}");
    assert!(
        untouched_granted * 100 >= untouched_sent * 99,
        "tenants sharing no bucket with the flooder got {untouched_granted} of \
         {untouched_sent}: {stats:?}"
    );
    let p99 = p99(&light);
    eprintln!(
        "light: {sent} sent, p99 {p99:?} ({alone:?} without the flood); untouched \
         {untouched_granted}/{untouched_sent} granted; {stats:?}"
    );
    // A light check waits for its round trip, not for the flood: without
    // the cooperative budget a flooding task held its worker until its own
    // cached denial ran out. On a host busy with other work the round trips
    // themselves are slower, so the bound is the larger of half the
    // deadline and three times the p99 of the same light load alone.
    let bound = (DEADLINE / 2).max(alone * 3);
    assert!(
        p99 < bound,
        "p99 of light checks {p99:?} (alone {alone:?}): the flood held the workers"
    );
}

/// The 99th percentile of the light checks' waits.
fn p99(light: &Light) -> Duration {
    let mut waits = light.waits.lock().unwrap().clone();
    waits.sort_unstable();
    waits[waits.len() * 99 / 100]
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

/// The same flood with every option at its default (the 100 ms deadline)
/// and two threads spinning beside it on the cores the client and the
/// server share, as a compile on the same host does: with the 5 ms
/// deadline of before, the untouched tenants got 287 of 513.
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
            let options = RedisOptions::new(FailurePolicy::FailClosed);
            let limiter = Arc::new(build(&url, "isolation-loaded", options).await);
            let light = scene(limiter.clone(), 4, RUN).await;
            let _ = done.send((light, limiter.stats()));
        });
    });
    let result = report.recv_timeout(RUN * 5);
    stop.store(true, Ordering::Relaxed);
    for hog in hogs {
        hog.join().unwrap();
    }
    let (light, stats) = result.expect("the scene never finished");
    let (sent, granted) = (
        light.untouched_sent.load(Ordering::Relaxed),
        light.untouched_granted.load(Ordering::Relaxed),
    );
    eprintln!("untouched tenants: {granted} of {sent} granted; {stats:?}");
    assert!(sent > 100, "{sent}");
    assert_eq!(
        granted, sent,
        "tenants sharing no bucket with the flooder got {granted} of {sent}: {stats:?}"
    );
}
