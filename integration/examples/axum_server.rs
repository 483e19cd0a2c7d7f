//! An axum server that rate-limits by tenant: 10 requests/s with a burst of
//! 10 for everyone together, split over 8 buckets, 2 per tenant.
//!
//! ```text
//! cargo run -p integration --example axum_server
//! PORT=8080 cargo run -p integration --example axum_server
//! ```
//!
//! The tenant comes from the `x-tenant-id` header. A quick loop of requests
//! for one tenant shows 200s until its share (2 to 4 tokens) is spent, then
//! 429s with `Retry-After`, `RateLimit` and `RateLimit-Policy`, while a
//! tenant on other buckets is still served. Stop it with Ctrl-C.

use std::error::Error;
use std::sync::Arc;

use axum::Router;
use axum::extract::Extension;
use axum::http::HeaderName;
use axum::routing::get;
use shuffle_limiter::tower::{Granted, RateLimitLayer, TenantKey};
use shuffle_limiter::{Quota, ShardedLimiter};

/// The handler sees which bucket paid, through the request extensions.
async fn hello(Extension(granted): Extension<Granted>) -> String {
    let grant = granted.grant();
    format!(
        "hello: paid by bucket {}, tokens left for you: {}\n",
        grant.bucket(),
        grant.remaining()
    )
}

/// Prints an error the way the library words it (`Display`), not `Debug`.
#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn Error>> {
    let port: u16 = match std::env::var("PORT") {
        Ok(text) => text
            .parse()
            .map_err(|_| format!("PORT={text:?} is not a port number: use 1 to 65535"))?,
        Err(_) => 3000,
    };
    let limiter = Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(10).with_burst(10)) // burst must be >= N
            .buckets(8)
            .per_tenant(2)
            .build()?,
    );

    // Two tenants whose shards share no bucket, for the demonstration.
    let noisy = "acme";
    let quiet = [
        "globex", "initech", "umbrella", "hooli", "wonka", "stark", "wayne",
    ]
    .into_iter()
    .find(|t| limiter.shard(t).overlap(&limiter.shard(noisy)) == 0)
    .unwrap_or("globex");

    let tenant = TenantKey::header(HeaderName::from_static("x-tenant-id"));
    let app = Router::new()
        .route("/", get(hello))
        .layer(RateLimitLayer::new(Arc::clone(&limiter), tenant));

    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
    let url = format!("http://{}/", listener.local_addr()?);
    println!("listening on {url} (10 requests/s for all tenants, burst 10, N = 8, k = 2)");
    println!(
        "{noisy} draws from buckets {:?}, {quiet} from {:?}",
        limiter.shard(noisy).buckets(),
        limiter.shard(quiet).buckets()
    );
    println!("\nspend {noisy}'s share; 429s follow once it is gone:");
    println!(
        "  for i in $(seq 1 8); do curl -s -o /dev/null -w '%{{http_code}} ' \
         -H 'x-tenant-id: {noisy}' {url}; done; echo"
    );
    println!("right after, {quiet} is still served:");
    println!("  curl -i -H 'x-tenant-id: {quiet}' {url}");
    println!("see the 429 fields:");
    println!("  curl -i -H 'x-tenant-id: {noisy}' {url}");
    println!("no tenant header: 400");
    println!("  curl -i {url}\n");

    axum::serve(listener, app)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
