//! The hung-tenant scene as a client: 40 tenants calling one upstream
//! through an in-flight limit of 40 split into 8 pools, 2 per tenant, while
//! one tenant's calls hang.
//!
//! ```text
//! cargo run --release -p integration --example hung_tenant             # InFlight
//! cargo run --release -p integration --example hung_tenant -- --shared # one Semaphore
//! UPSTREAM_URL=http://host:port/path RUN_SECS=60 cargo run ... --example hung_tenant
//! ```
//!
//! `tenant-0` … `tenant-39` (header `x-tenant`) call the upstream named by
//! `UPSTREAM_URL`, or, when it is not set, one served here on 127.0.0.1
//! where `tenant-0`'s calls hang for 10 s and every other call takes
//! 10 ms. `tenant-0` keeps up to 40 calls going, every other tenant up to
//! 4; each call first takes a permit, waiting at most 100 ms for one (then
//! it tries again), and holds it until its answer comes. The permits come
//! from an `InFlight` limit (C = 40, N = 8, k = 2), or with `--shared` from
//! one `tokio::sync::Semaphore` of 40. After `RUN_SECS` seconds (20 unless
//! set) it prints, per tenant, the calls completed (answered 2xx) and how
//! many of `tenant-0`'s pools it shares, then the totals, so that an
//! upstream can judge both runs from its own counts.

use std::error::Error;
use std::future::IntoFuture;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::get;
use shuffle_limiter::inflight::InFlight;
use tokio::sync::Semaphore;
use tokio::time::Instant;

const TENANTS: usize = 40;
const CONCURRENCY: u32 = 40;
/// Calls `tenant-0` keeps going; every other tenant keeps `OTHERS`.
const HUNG_CALLS: usize = 40;
const OTHERS: usize = 4;
const MAX_WAIT: Duration = Duration::from_millis(100);
/// How long the local upstream takes: `tenant-0`'s calls, and the others'.
const HANG: Duration = Duration::from_secs(10);
const CALL: Duration = Duration::from_millis(10);

/// Where the permits come from.
#[derive(Clone)]
enum Limit {
    Pools(Arc<InFlight>),
    Shared(Arc<Semaphore>),
}

/// A permit of either kind, held for the call.
enum Held {
    Pools(#[allow(dead_code)] shuffle_limiter::inflight::OwnedPermit),
    Shared(#[allow(dead_code)] tokio::sync::OwnedSemaphorePermit),
}

impl Limit {
    /// A permit within `MAX_WAIT`, or `None`.
    async fn take(&self, tenant: &str) -> Option<Held> {
        match self {
            Limit::Pools(inflight) => {
                let acquire = inflight.acquire_owned(tenant).within(MAX_WAIT);
                acquire.await.ok().map(Held::Pools)
            }
            Limit::Shared(semaphore) => {
                let acquire = Arc::clone(semaphore).acquire_owned();
                let permit = tokio::time::timeout(MAX_WAIT, acquire).await.ok()?;
                Some(Held::Shared(permit.expect("never closed")))
            }
        }
    }
}

/// The local upstream: `tenant-0`'s calls hang, the others' are quick.
async fn upstream(headers: HeaderMap) -> &'static str {
    let hung = headers.get("x-tenant").is_some_and(|t| t == "tenant-0");
    tokio::time::sleep(if hung { HANG } else { CALL }).await;
    "ok"
}

/// One of a tenant's callers: a permit, a call, until the run ends.
async fn caller(
    client: reqwest::Client,
    url: Arc<str>,
    limit: Limit,
    tenant: Arc<str>,
    done: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
) {
    loop {
        let Some(permit) = limit.take(&tenant).await else {
            refused.fetch_add(1, Ordering::Relaxed);
            // A full queue answers at once: do not spin on it.
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        };
        let answer = client.get(&*url).header("x-tenant", &*tenant).send().await;
        drop(permit);
        if answer.is_ok_and(|a| a.status().is_success()) {
            done.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let shared = std::env::args().any(|a| a == "--shared");
    let secs: u64 = match std::env::var("RUN_SECS") {
        Ok(secs) => secs
            .parse()
            .map_err(|e| format!("RUN_SECS={secs:?}: {e}"))?,
        Err(_) => 20,
    };
    let url: Arc<str> = match std::env::var("UPSTREAM_URL") {
        Ok(url) => url.into(),
        Err(_) => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let addr = listener.local_addr()?;
            let app = Router::new().route("/", get(upstream));
            tokio::spawn(axum::serve(listener, app).into_future());
            format!("http://{addr}/").into()
        }
    };
    let inflight = Arc::new(
        InFlight::builder()
            .concurrency(CONCURRENCY)
            .pools(8)
            .per_tenant(2)
            .build()?,
    );
    let limit = if shared {
        Limit::Shared(Arc::new(Semaphore::new(CONCURRENCY as usize)))
    } else {
        Limit::Pools(Arc::clone(&inflight))
    };
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(CONCURRENCY as usize)
        .timeout(HANG * 3)
        .build()?;
    let refused = Arc::new(AtomicU64::new(0));
    let tenants: Vec<(Arc<str>, Arc<AtomicU64>)> = (0..TENANTS)
        .map(|t| (format!("tenant-{t}").into(), Arc::default()))
        .collect();
    let mode = if shared {
        "shared Semaphore(40)"
    } else {
        "InFlight C=40 N=8 k=2"
    };
    println!("{mode}: 40 tenants calling {url} for {secs} s ...");
    let mut callers = tokio::task::JoinSet::new();
    for (t, (tenant, done)) in tenants.iter().enumerate() {
        for _ in 0..if t == 0 { HUNG_CALLS } else { OTHERS } {
            callers.spawn(caller(
                client.clone(),
                Arc::clone(&url),
                limit.clone(),
                Arc::clone(tenant),
                Arc::clone(done),
                Arc::clone(&refused),
            ));
        }
    }
    tokio::time::sleep_until(Instant::now() + Duration::from_secs(secs)).await;
    // Calls still out at the end are not counted.
    callers.abort_all();
    let counts: Vec<u64> = tenants
        .iter()
        .map(|(_, d)| d.load(Ordering::Relaxed))
        .collect();

    let hung = inflight.shard("tenant-0");
    println!("{:<10} {:>12} {:>10}", "tenant", "pools", "completed");
    for ((tenant, _), &count) in tenants.iter().zip(&counts) {
        let shard = inflight.shard(&**tenant);
        let shares = shard.overlap(&hung);
        let pools = format!("{:?}", shard.buckets());
        println!("{tenant:<10} {pools:>12} {count:>10}   shares {shares} of tenant-0's pools");
    }
    let others = &counts[1..];
    let mut sorted = others.to_vec();
    sorted.sort_unstable();
    let (least, median, most) = (
        sorted[0],
        sorted[sorted.len() / 2],
        sorted[sorted.len() - 1],
    );
    let starved = others.iter().filter(|&&c| c == 0).count();
    println!(
        "result: {mode}, {secs} s: tenant-0 completed {}, the 39 others {} (each: least \
         {least}, median {median}, most {most}; {starved} completed none); {} waits refused",
        counts[0],
        others.iter().sum::<u64>(),
        refused.load(Ordering::Relaxed),
    );
    Ok(())
}
