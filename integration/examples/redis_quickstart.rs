//! Everything a fleet does with one Redis budget, as the README shows it:
//! wait for a grant, bound the wait, rate-limit an axum server, and load a
//! set of limiters some of which live in Redis.
//!
//! ```sh
//! redis-server --save "" &
//! cargo run -p integration --example redis_quickstart
//! ```
//!
//! `REDIS_URL` names another server (default `redis://127.0.0.1:6379`).

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::Duration;

use axum::{Router, http::HeaderName, routing::get};
use shuffle_limiter::redis::{FailurePolicy, RedisLimiter, RedisOptions};
use shuffle_limiter::set::{LimiterSet, SetConfig};
use shuffle_limiter::tower::{RateLimitLayer, TenantKey};
use shuffle_limiter::{Quota, ShardedLimiter};

/// The README's walk through, against the Redis at `url`.
pub(crate) async fn run(url: &str) -> Result<(), Box<dyn std::error::Error>> {
    // One budget for every process that builds the same limiter.
    let limiter: Arc<RedisLimiter> = Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(50).with_burst(10))
            .buckets(5)
            .per_tenant(2)
            .name("quickstart")
            .build_redis(url, RedisOptions::new(FailurePolicy::FailClosed))
            .await?,
    );

    // Wait for a grant before calling the upstream, as in process.
    limiter.wait("tenant-42").await?;
    match limiter
        .wait("tenant-42")
        .within(Duration::from_millis(250))
        .await
    {
        Ok(grant) => println!("granted by bucket {}", grant.bucket()),
        Err(denied) => println!("busy: retry in {:?}", denied.retry_after()),
    }

    // The same layer as in process, in front of an axum server.
    let tenant_key = TenantKey::header(HeaderName::from_static("x-tenant-id"));
    let app: Router = Router::new()
        .route("/", get(|| async { "hello" }))
        .layer(RateLimitLayer::new(limiter.clone(), tenant_key));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(axum::serve(listener, app).into_future());
    let reply = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .get(format!("http://{addr}/"))
        .header("x-tenant-id", "acme")
        .send()
        .await?;
    println!("GET / as acme: {}", reply.status());

    // A set of limiters, one per upstream: some in process, some in Redis.
    let config: SetConfig = toml::from_str(&format!(
        r#"
        [limiters.amazon]          # in this process
        rate = "5/s"

        [limiters.walmart]         # one budget for the whole fleet
        rate = "600/m"
        burst = 20
        redis = "{url}"
        failure_policy = "fail_closed"
        deadline = "50ms"
        "#
    ))?;
    let set = LimiterSet::connect(&config).await?;
    let amazon = set.get("amazon").expect("configured");
    println!(
        "amazon: {:?}",
        amazon.check("tenant-42").map(|g| g.remaining())
    );
    let walmart = set.get_redis("walmart").expect("configured");
    walmart.wait("tenant-42").await?;
    println!("walmart: granted through Redis");
    Ok(())
}

#[tokio::main]
async fn main() {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    if let Err(e) = run(&url).await {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
