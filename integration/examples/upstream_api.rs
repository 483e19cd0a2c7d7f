//! Many tenants calling one rate-limited upstream through one limiter.
//!
//! ```text
//! cargo run -p integration --example upstream_api
//! ```
//!
//! A fake upstream on 127.0.0.1 enforces its own hard limit: 5 requests/s,
//! 5 at once, answering 429 beyond it. Five tenants call it with reqwest,
//! one of them noisy, each waiting for the limiter first (with a deadline, so
//! nobody waits longer than it is willing to: `wait(..).within(..)`). The limiter's budget matches
//! the upstream's (5/s, burst 5, N = 5, k = 2), so the upstream sends no 429
//! at all; the noisy tenant is held to its own 2 buckets, and the others are
//! served within their deadlines. For contrast, the same traffic without the
//! limiter follows. The run takes about five seconds.

use std::error::Error;
use std::future::IntoFuture;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use shuffle_limiter::{Quota, ShardedLimiter};

/// How long the limited run lasts.
const RUN: Duration = Duration::from_secs(2);

/// The upstream's own policer, written independently of the crate: a strict
/// GCRA with one request every 200 ms and room for 5 at once. Like any real
/// policer, it allows a small delay variation (50 ms) for the time between
/// the moment a client is granted a request and the moment it arrives.
struct Policer {
    /// When the upstream would be idle again at its full rate.
    busy_until: Option<Instant>,
    every: Duration,
    slack: Duration,
}

impl Policer {
    fn new() -> Self {
        Policer {
            busy_until: None,
            every: Duration::from_millis(200),
            slack: Duration::from_millis(4 * 200 + 50),
        }
    }

    fn admit(&mut self, now: Instant) -> bool {
        let busy_until = self.busy_until.map_or(now, |t| t.max(now));
        if busy_until - now > self.slack {
            return false;
        }
        self.busy_until = Some(busy_until + self.every);
        true
    }
}

#[derive(Clone)]
struct Upstream {
    policer: Arc<Mutex<Policer>>,
    served: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
}

async fn item(State(up): State<Upstream>) -> (StatusCode, &'static str) {
    let admitted = up
        .policer
        .lock()
        .map(|mut p| p.admit(Instant::now()))
        .unwrap_or(false);
    if admitted {
        up.served.fetch_add(1, Ordering::Relaxed);
        (StatusCode::OK, "item")
    } else {
        up.refused.fetch_add(1, Ordering::Relaxed);
        (StatusCode::TOO_MANY_REQUESTS, "slow down")
    }
}

/// Starts a fresh upstream on an ephemeral port of 127.0.0.1.
async fn start_upstream() -> Result<(String, Upstream), Box<dyn Error>> {
    let up = Upstream {
        policer: Arc::new(Mutex::new(Policer::new())),
        served: Arc::default(),
        refused: Arc::default(),
    };
    let app = Router::new()
        .route("/item", get(item))
        .with_state(up.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/item", listener.local_addr()?);
    tokio::spawn(axum::serve(listener, app).into_future());
    Ok((url, up))
}

/// One tenant's traffic: how many callers at once, how far apart each one's
/// calls are, and how long it will wait for a grant.
#[derive(Clone, Copy)]
struct Load {
    callers: usize,
    gap: Duration,
    deadline: Duration,
}

#[derive(Default)]
struct Outcome {
    sent: u32,
    ok: u32,
    refused: u32,
    gave_up: u32,
    latencies: Vec<Duration>,
}

/// Calls the upstream for `RUN`, waiting for the limiter first when there is
/// one.
async fn tenant(
    name: String,
    load: Load,
    limiter: Option<Arc<ShardedLimiter>>,
    client: reqwest::Client,
    url: String,
) -> Outcome {
    let mut out = Outcome::default();
    let end = Instant::now() + RUN;
    while Instant::now() < end {
        let asked = Instant::now();
        // Wait for the limiter first; give up when the grant would come after
        // this caller's deadline.
        if let Some(limiter) = &limiter
            && limiter.wait(&name).within(load.deadline).await.is_err()
        {
            out.gave_up += 1;
            tokio::time::sleep(load.gap).await;
            continue;
        }
        out.sent += 1;
        match client.get(&url).send().await.map(|r| r.status()) {
            Ok(StatusCode::OK) => {
                out.ok += 1;
                out.latencies.push(asked.elapsed());
            }
            Ok(_) | Err(_) => out.refused += 1,
        }
        tokio::time::sleep(load.gap).await;
    }
    out
}

/// Runs every tenant against a fresh upstream, prints a table, and returns
/// how many requests the upstream refused.
async fn call_all(
    tenants: &[(String, Load)],
    limiter: Option<Arc<ShardedLimiter>>,
) -> Result<u64, Box<dyn Error>> {
    let (url, upstream) = start_upstream().await?;
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()?;
    let tasks: Vec<Vec<_>> = tenants
        .iter()
        .map(|(name, load)| {
            (0..load.callers)
                .map(|_| {
                    let (limiter, client, url) = (limiter.clone(), client.clone(), url.clone());
                    tokio::spawn(tenant(name.clone(), *load, limiter, client, url))
                })
                .collect()
        })
        .collect();
    let mut outcomes = Vec::new();
    for callers in tasks {
        let mut sum = Outcome::default();
        for caller in callers {
            let out = caller.await?;
            sum.sent += out.sent;
            sum.ok += out.ok;
            sum.refused += out.refused;
            sum.gave_up += out.gave_up;
            sum.latencies.extend(out.latencies);
        }
        outcomes.push(sum);
    }

    println!(
        "{:<10} {:>5} {:>4} {:>5} {:>8} {:>9} {:>9}",
        "tenant", "sent", "ok", "429", "gave up", "p50 wait", "max wait"
    );
    for ((name, _), out) in tenants.iter().zip(&outcomes) {
        let mut waits = out.latencies.clone();
        waits.sort();
        let ms =
            |d: Option<&Duration>| d.map_or("-".to_owned(), |d| format!("{} ms", d.as_millis()));
        println!(
            "{name:<10} {:>5} {:>4} {:>5} {:>8} {:>9} {:>9}",
            out.sent,
            out.ok,
            out.refused,
            out.gave_up,
            ms(waits.get(waits.len() / 2)),
            ms(waits.last()),
        );
    }
    let served = upstream.served.load(Ordering::Relaxed);
    let refused = upstream.refused.load(Ordering::Relaxed);
    println!("upstream: {served} served, {refused} answered 429\n");
    Ok(refused)
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
    // The upstream's budget, shared by every tenant.
    let limiter = Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(5).with_burst(5))
            .buckets(5)
            .per_tenant(2)
            .name("upstream")
            .build()?,
    );

    // The noisy tenant has 8 callers calling back to back, each willing to
    // wait 1 s. The quiet ones call every 1.5 s or so and wait at most
    // 500 ms; they are picked to show each case: two share no bucket with the
    // noisy one, one shares a bucket, one has the very same pair (the
    // 1-in-C(5,2) bad luck).
    let noisy = "noisy".to_owned();
    let quiet = Load {
        callers: 1,
        gap: Duration::from_millis(1500),
        deadline: Duration::from_millis(500),
    };
    let overlap = |t: &str| limiter.shard(t).overlap(&limiter.shard(&noisy));
    let pick = |shared: usize, count: usize| {
        (0..)
            .map(|i| format!("tenant-{i}"))
            .filter(move |t| overlap(t) == shared)
            .take(count)
    };
    let mut tenants = vec![(
        noisy.clone(),
        Load {
            callers: 8,
            gap: Duration::ZERO,
            deadline: Duration::from_secs(1),
        },
    )];
    tenants.extend(
        pick(0, 2)
            .chain(pick(1, 1))
            .chain(pick(2, 1))
            .map(|t| (t, quiet)),
    );

    println!("upstream limit 5/s, burst 5; limiter 5/s, burst 5, N = 5, k = 2");
    for (name, load) in &tenants {
        let buckets = limiter.shard(name).buckets().to_vec();
        if *name == noisy {
            println!("  {name:<10} buckets {buckets:?}, {} callers", load.callers);
        } else {
            println!(
                "  {name:<10} buckets {buckets:?}, {} shared with noisy",
                overlap(name)
            );
        }
    }
    println!("\nthrough the limiter ({} s):", RUN.as_secs());
    let refused_with = call_all(&tenants, Some(limiter.clone())).await?;

    println!(
        "without the limiter, the same callers ({} s):",
        RUN.as_secs()
    );
    let refused_without = call_all(&tenants, None).await?;

    println!("429s from the upstream: {refused_with} with the limiter, {refused_without} without");
    if refused_with > 0 {
        return Err("the upstream refused requests the limiter had granted".into());
    }
    Ok(())
}
