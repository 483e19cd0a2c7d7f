//! Listening to an upstream whose limit moves: twenty tenants call it over
//! HTTP through one limiter (N = 8, k = 2) that holds off on its 429s and
//! learns its limit, against the same load through a fixed limiter.
//!
//! ```text
//! cargo run --release -p integration --example upstream_feedback            # adaptive
//! cargo run --release -p integration --example upstream_feedback -- --fixed # fixed at 5/s
//! cargo run --release -p integration --example upstream_feedback -- --blind # no RateLimit-Policy
//! UPSTREAM_URL=http://host:port/path RUN_SECS=60 cargo run ... --example upstream_feedback
//! REDIS_URL=redis://127.0.0.1/ cargo run ...   # the buckets in Redis: run it twice for a fleet
//! ```
//!
//! Each call is a `GET` carrying its tenant in an `x-tenant` header
//! (`tenant-0` … `tenant-19`; `tenant-0`, the noisy one, keeps 8 calls
//! going, every other tenant one), sent to `UPSTREAM_URL` when it is set,
//! otherwise to a policer served here on 127.0.0.1 whose limit is 5/s, then
//! 3/s, then 8/s, a third of the run each (`RUN_SECS`, 30 unless set), with
//! a burst of 10, answering 429 with `Retry-After` when over it and, unless
//! `--blind`, advertising its limit in `RateLimit-Policy`. At the end it
//! prints, for each third, the calls the policer took per second and its
//! 429 share from half-way through the third on, and each tenant's calls
//! served, so that any upstream can judge the run from its own counts.

use std::error::Error;
use std::future::IntoFuture;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use shuffle_limiter::upstream::{Adaptive, Scope, Upstream};
use shuffle_limiter::{Quota, ShardedLimiter, TokioClock};
use tokio::time::Instant;

mod http;
mod scene;
use http::{police, send};
use scene::Policer;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let fixed = std::env::args().any(|a| a == "--fixed");
    let blind = std::env::args().any(|a| a == "--blind");
    let secs: u64 = match std::env::var("RUN_SECS") {
        Ok(secs) => secs
            .parse()
            .map_err(|e| format!("RUN_SECS={secs:?}: {e}"))?,
        Err(_) => 30,
    };
    let run = Duration::from_secs(secs.max(3));
    let start = Instant::now();
    let policer = Arc::new(Mutex::new(Policer::new(run, !blind)));
    let url = match std::env::var("UPSTREAM_URL") {
        Ok(url) => url,
        Err(_) => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let app = Router::new()
                .route("/", get(police))
                .with_state((Arc::clone(&policer), start));
            tokio::spawn(axum::serve(listener, app).into_future());
            format!("http://{addr}/")
        }
    };
    let builder = ShardedLimiter::builder()
        .quota(Quota::per_second(scene::LIMITS[0]).with_burst(8))
        .buckets(8)
        .per_tenant(2)
        .name("upstream-feedback");
    let client = reqwest::Client::builder().no_proxy().build()?;
    let sender = {
        let url: Arc<str> = url.into();
        move |tenant: String| {
            let (client, url) = (client.clone(), Arc::clone(&url));
            async move { send(&client, &url, &tenant).await }
        }
    };
    // Between 1/s and 10/s, moving in steps of one a minute.
    let adaptive = || {
        Adaptive::new(60, Quota::per_minute(600).with_burst(16)).map(|a| a.clock(TokioClock::new()))
    };
    let until = start + run;
    let (sent, _) = match std::env::var("REDIS_URL") {
        Ok(redis) => {
            use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
            let options = RedisOptions::new(FailurePolicy::FailClosed);
            let limiter = Arc::new(builder.build_redis(&redis, options).await?);
            // A fleet's callers queue together: bounded, a wait books no
            // further ahead than this, so a change of the limit reaches
            // them within it (BENCHMARKS.md, the scene over Redis).
            let upstream =
                (Upstream::new(limiter).scope(Scope::Shared)).max_wait(Duration::from_secs(2));
            if fixed {
                scene::drive(Arc::new(upstream), sender, until).await
            } else {
                scene::drive(Arc::new(upstream.adapt(adaptive()?)), sender, until).await
            }
        }
        Err(_) => {
            let limiter = Arc::new(builder.clock(TokioClock::new()).build()?);
            let upstream = Upstream::new(limiter).scope(Scope::Shared);
            if fixed {
                scene::drive(Arc::new(upstream), sender, until).await
            } else {
                scene::drive(Arc::new(upstream.adapt(adaptive()?)), sender, until).await
            }
        }
    };
    let mode = if fixed { "fixed" } else { "adaptive" };
    println!(
        "{mode}, {}, {secs} s:",
        if blind { "blind" } else { "advertised" }
    );
    let policer = policer.lock().unwrap();
    if std::env::var("UPSTREAM_URL").is_err() {
        let settle = (run / 6).min(Duration::from_secs(10));
        for third in 0..3 {
            let w = policer.window(third, settle);
            println!(
                "  limit {}/s: took {:.2}/s ({:.0} %), 429 {:.1} % (from {} s after the change)",
                w.limit,
                w.per_second,
                w.utilization() * 100.0,
                w.throttled_share * 100.0,
                settle.as_secs()
            );
        }
    }
    let served: Vec<String> = (0..scene::TENANTS)
        .map(|i| {
            let t = scene::tenant(i);
            format!(
                "{t} {}/{}",
                policer.served.get(&t).copied().unwrap_or(0),
                sent.of(&t)
            )
        })
        .collect();
    println!("  served/sent: {}", served.join(", "));
    Ok(())
}
