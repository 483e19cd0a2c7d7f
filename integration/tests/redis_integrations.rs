//! The integrations over Redis: the waits and the tower layer work on a
//! `RedisLimiter` exactly as on a `ShardedLimiter`, against a real
//! `redis-server` and real HTTP on 127.0.0.1.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::HeaderName;
use axum::routing::get;
use shuffle_limiter::redis::{FailurePolicy, RedisLimiter, RedisOptions};
use shuffle_limiter::tower::{RateLimitLayer, TenantKey};
use shuffle_limiter::{Quota, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

async fn limiter(server: &RedisServer, quota: Quota, name: &str) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(quota)
        .buckets(4)
        .per_tenant(4) // the tenant holds the whole budget
        .name(name)
        .build_redis(
            &server.url(),
            RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(1)),
        )
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn until_ready_over_redis_keeps_to_the_rate() {
    let server = RedisServer::start();
    // 20/s, 4 at once: 24 grants take at least (24 − 4) / 20 s = 1 s.
    let limiter = Arc::new(limiter(&server, Quota::per_second(20).with_burst(4), "wait").await);
    let start = Instant::now();
    for _ in 0..24 {
        limiter.wait("tenant-42").await.unwrap();
    }
    let elapsed = start.elapsed();
    assert!(
        elapsed >= Duration::from_millis(990),
        "{elapsed:?}: faster than the budget"
    );
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
    // A bounded wait gives up at once when the grant is too far off.
    let denied = limiter
        .wait("tenant-42")
        .within(Duration::from_millis(1))
        .await
        .unwrap_err();
    assert!(denied.retry_after() > Duration::from_millis(1));
    assert_eq!(limiter.stats().errors(), 0);
}

async fn serve(limiter: RedisLimiter) -> SocketAddr {
    let key = TenantKey::header(HeaderName::from_static("x-tenant"));
    let app: Router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(Arc::new(limiter), key));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(axum::serve(listener, app).into_future());
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_behind_one_redis_budget_admit_it_once_over_http() {
    let server = RedisServer::start();
    // 10 at once, then one token per 6 minutes per bucket: nothing refills
    // during the test, so the two servers together may admit exactly 10.
    let quota = Quota::per_hour(40).with_burst(10);
    let a = serve(limiter(&server, quota, "shared-http").await).await;
    let b = serve(limiter(&server, quota, "shared-http").await).await;
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let (mut ok, mut limited) = ([0; 2], [0; 2]);
    for i in 0..30 {
        let (addr, side) = if i % 2 == 0 { (a, 0) } else { (b, 1) };
        let reply = client
            .get(format!("http://{addr}/"))
            .header("x-tenant", "acme")
            .send()
            .await
            .unwrap();
        match reply.status().as_u16() {
            200 => {
                ok[side] += 1;
                assert!(reply.headers().contains_key("ratelimit"));
            }
            429 => {
                limited[side] += 1;
                let retry: u64 = reply.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!((1..=360).contains(&retry), "{retry}");
            }
            other => panic!("status {other}"),
        }
    }
    assert_eq!(ok[0] + ok[1], 10, "{ok:?} admitted, {limited:?} limited");
    assert!(
        ok[0] > 0 && ok[1] > 0,
        "both servers drew from the budget: {ok:?}"
    );
    assert_eq!(limited[0] + limited[1], 20);
}

#[path = "../examples/redis_quickstart.rs"]
#[allow(dead_code)] // its `main` is for `cargo run --example`
mod quickstart;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_walk_through_runs_as_written() {
    let server = RedisServer::start();
    quickstart::run(&server.url()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_outage_is_a_503_with_retry_after_not_a_rate_limit() {
    let mut server = RedisServer::start();
    let addr = serve(limiter(&server, Quota::per_second(10), "outage-http").await).await;
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let get = || {
        client
            .get(format!("http://{addr}/"))
            .header("x-tenant", "acme")
            .send()
    };
    assert_eq!(get().await.unwrap().status(), 200);
    server.kill();
    for _ in 0..3 {
        let reply = get().await.unwrap();
        assert_eq!(reply.status(), 503, "{:?}", reply.headers());
        let retry: u64 = reply.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=60).contains(&retry), "{retry}");
        // Nothing is known of the tenant's share while Redis is gone.
        assert!(!reply.headers().contains_key("ratelimit"));
    }
}
