//! Issue 27's scene for real: the policer behind HTTP on 127.0.0.1, its
//! limit moving 5/s → 3/s → 8/s (20 s each), and two processes (child
//! processes of the test) sharing one limiter through a real
//! `redis-server`, each calling with twenty tenants (`x-tenant`), `tenant-0`
//! the noisy one, through `Upstream` with an `Adaptive` controller. From
//! 10 s after each change to the next, the policer's own counts must show
//! no more than 1 % of 429s and at least 90 % of its limit used; the noisy tenant
//! stays within its shard.

use std::future::IntoFuture;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
use shuffle_limiter::upstream::{Adaptive, Scope, Upstream};
use shuffle_limiter::{Quota, ShardedLimiter, TokioClock};
use tokio::time::Instant;

#[path = "support/child.rs"]
mod child;
#[path = "../examples/upstream_feedback/http.rs"]
mod http;
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "../examples/upstream_feedback/scene.rs"]
mod scene;
use child::wait_bounded;
use redis_server::RedisServer;
use scene::{Policer, tenant};

const RUN: Duration = Duration::from_secs(60);
const SETTLE: Duration = Duration::from_secs(10);
const MAX_WAIT: Duration = Duration::from_secs(2);
const WORKER_ENV: &str = "SHUFFLE_LIMITER_UPSTREAM_WORKER";

#[test]
fn two_processes_over_redis_follow_a_moving_limit() {
    let server = RedisServer::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let policer = Arc::new(Mutex::new(Policer::new(RUN, true)));
    let url = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new()
            .route("/", get(http::police))
            .with_state((Arc::clone(&policer), Instant::now()));
        tokio::spawn(axum::serve(listener, app).into_future());
        format!("http://{addr}/")
    });
    let exe = std::env::current_exe().unwrap();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "upstream_worker", "--ignored", "--nocapture"])
                .env(WORKER_ENV, format!("{url} {}", server.url()))
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    for worker in workers {
        wait_bounded(worker, RUN + Duration::from_secs(60));
    }
    let policer = policer.lock().unwrap();
    let windows: Vec<_> = (0..3).map(|third| policer.window(third, SETTLE)).collect();
    eprintln!("{windows:?}");
    for w in &windows {
        assert!(w.throttled_share <= 0.01, "{w:?}");
        // Issue 27's bar. Run at 0.95 of the advertised limit; measured
        // 0.96–1.07 in three runs on a loaded 2-core machine (BENCHMARKS.md).
        assert!(w.utilization() >= 0.90, "{w:?}");
    }
    let total: u64 = policer.served.values().sum();
    let noisy = policer.served[&tenant(0)];
    assert!(noisy * 100 <= total * 30, "{noisy} of {total}");
}

/// A process of the fleet: not a test of its own, run only as a child
/// process of `two_processes_over_redis_follow_a_moving_limit`.
#[test]
#[ignore = "a child process of two_processes_over_redis_follow_a_moving_limit"]
fn upstream_worker() {
    let Ok(env) = std::env::var(WORKER_ENV) else {
        return;
    };
    let (url, redis) = env.split_once(' ').unwrap();
    let (url, redis): (Arc<str>, String) = (url.into(), redis.to_owned());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async move {
        let limiter = ShardedLimiter::builder()
            .quota(Quota::per_second(scene::LIMITS[0]).with_burst(8))
            .buckets(8)
            .per_tenant(2)
            .name("upstream-fleet")
            .build_redis(&redis, RedisOptions::new(FailurePolicy::FailClosed))
            .await
            .unwrap();
        let adaptive = Adaptive::new(60, Quota::per_minute(600).with_burst(16))
            .unwrap()
            .clock(TokioClock::new());
        // Waits bounded, so that the fleet's queue books no more than
        // that far ahead: a change of the limit reaches every caller
        // within it.
        let upstream = Upstream::new(Arc::new(limiter))
            .scope(Scope::Shared)
            .max_wait(MAX_WAIT)
            .adapt(adaptive);
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let send = move |tenant: String| {
            let (client, url) = (client.clone(), Arc::clone(&url));
            async move { http::send(&client, &url, &tenant).await }
        };
        // The policer's clock started a little before this process.
        scene::drive(Arc::new(upstream), send, Instant::now() + RUN).await;
    });
}
