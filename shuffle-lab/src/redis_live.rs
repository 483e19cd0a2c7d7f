//! `simulate --redis-url`: the live flood again, against a `RedisLimiter`
//! at that URL, in real time.
//!
//! The same scene as the manual-clock run: `tenant-0` floods, the others send
//! one request every 100 ms for 2 s; but every decision is the script's in
//! Redis (or the failure policy's), on the server's clock, and the flooder
//! loops on `check().await` from several tasks beside the light tenants on
//! one thread, as a flooding caller's request handlers would. Fewer tenants
//! take part than on the manual clock, since each of their requests is a
//! real round trip.

use std::fmt;

use serde::Serialize;

use shuffle_limiter::blast::{BlastRadius, BorrowingRadius};

use crate::SimulateArgs;
use crate::borrow::State;
use crate::common::{self, Failure, Outcome, usage};
#[cfg(feature = "redis")]
use crate::simulate;

/// At most this many tenants (the flooder included) take part.
#[cfg(feature = "redis")]
const REDIS_TENANTS: u64 = 200;

/// The flood against Redis: what was asked and what was measured.
#[derive(Debug, Serialize)]
pub(crate) struct RedisLive {
    /// The limiter's name, which prefixes its keys; new for every run.
    limiter: String,
    tenants: u64,
    seconds: f64,
    /// Wall-clock time the scene took.
    elapsed_seconds: f64,
    request_every_ms: u64,
    requests_per_tenant: u32,
    rate_per_second: u32,
    burst: u32,
    deadline_ms: u64,
    flood_tasks: u32,
    flood_checks: u64,
    flood_granted: u64,
    predicted: Outcome<f64>,
    by_overlap: Outcome<u64>,
    measured: Outcome<u64>,
    mean_share_by_overlap: Vec<Option<f64>>,
    /// The limiter's counts: decisions by the script, from the denial cache,
    /// by the failure policy, and failed requests.
    from_redis: u64,
    from_cache: u64,
    from_policy: u64,
    errors: u64,
}

/// Refuses `--redis-url` early when this build cannot run it.
pub(crate) fn check(a: &SimulateArgs) -> Result<(), Failure> {
    if a.redis_url.is_some() && !cfg!(feature = "redis") {
        return Err(usage(
            "error: --redis-url needs shuffle-lab built with the `redis` feature: build it \
             with --features redis (cargo run -p shuffle-lab --features redis), or drop \
             --redis-url",
        ));
    }
    Ok(())
}

/// Runs `simulate`'s live flood against the Redis at `url`, with up to
/// [`REDIS_TENANTS`] of its tenants; `assigned` holds each other tenant's
/// buckets shared with `tenant-0` and its state by the assignment,
/// `tenant-1` first.
#[cfg(feature = "redis")]
pub(crate) fn run(
    url: &str,
    a: &SimulateArgs,
    salt: &[u8],
    b: &BlastRadius,
    lending: Option<&BorrowingRadius>,
    assigned: &[(usize, State)],
) -> Result<RedisLive, Failure> {
    let tenants = a.tenants.min(REDIS_TENANTS);
    let scene = live::Scene {
        args: a,
        salt,
        tenants,
        quota: simulate::live_quota(a.buckets, tenants, lending)?,
        borrowing: lending.map(|l| (l.spill(), l.reserve())),
        predicted: match lending {
            Some(l) => l.tenants(tenants).into(),
            None => b.tenants(tenants).shuffle_sharded.into(),
        },
        assigned: &assigned[..tenants as usize - 1],
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure {
            message: format!("error: cannot start the runtime for --redis-url: {e}"),
            status: 1,
        })?;
    runtime.block_on(live::flood(url, &scene))
}

/// Without the `redis` feature, [`check`] has refused `--redis-url`.
#[cfg(not(feature = "redis"))]
pub(crate) fn run(
    _url: &str,
    _a: &SimulateArgs,
    _salt: &[u8],
    _b: &BlastRadius,
    _lending: Option<&BorrowingRadius>,
    _assigned: &[(usize, State)],
) -> Result<RedisLive, Failure> {
    Err(usage(
        "error: --redis-url needs shuffle-lab built with the `redis` feature",
    ))
}

#[cfg(feature = "redis")]
mod live {
    use std::sync::Arc;
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    use shuffle_limiter::redis::{BuildError, FailurePolicy, RedisOptions, Source};
    use shuffle_limiter::{Request, ShardedLimiter};

    use super::RedisLive;
    use crate::SimulateArgs;
    use crate::borrow::State;
    use crate::common::{Failure, Outcome};
    use crate::simulate::{LIVE_EVERY, LIVE_STEPS, STEP};

    /// What the run takes from `simulate`: its scene, sized for the tenants
    /// taking part, and the prediction to print beside it.
    pub(super) struct Scene<'a> {
        pub(super) args: &'a SimulateArgs,
        pub(super) salt: &'a [u8],
        pub(super) tenants: u64,
        pub(super) quota: shuffle_limiter::Quota,
        /// Spill buckets and reserve, as `--borrow-from` and
        /// `--lender-reserve` set them.
        pub(super) borrowing: Option<(u32, f64)>,
        pub(super) predicted: Outcome<f64>,
        pub(super) assigned: &'a [(usize, State)],
    }

    /// A deadline a busy client host meets: a reply later than this is
    /// decided by the failure policy (`FailClosed`, so a denial), and 5 ms
    /// (the default once) is missed on a small host that also runs the server while
    /// the flood spins (50 ms still was, now and then, on two shared cores):
    /// a late reply there would measure the host, not the isolation.
    const DEADLINE: Duration = Duration::from_millis(100);

    /// `tenant-0` floods from this many tasks, each looping on `check().await`.
    const FLOOD_TASKS: u32 = 4;

    pub(super) async fn flood(url: &str, s: &Scene<'_>) -> Result<RedisLive, Failure> {
        let (n, k) = (s.args.buckets, s.args.per_tenant);
        // A fresh name each run: the last run's flood must not have drained
        // this one's buckets.
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let name = format!(
            "shuffle-lab-simulate-{}-{}",
            std::process::id(),
            since.as_millis()
        );
        let mut builder = ShardedLimiter::builder()
            .quota(s.quota)
            .buckets(n)
            .per_tenant(k)
            .salt(s.salt)
            .name(name.clone());
        if let Some((spill, reserve)) = s.borrowing {
            builder = builder.borrow_from(spill).lender_reserve(reserve);
        }
        let options = RedisOptions::new(FailurePolicy::FailClosed).deadline(DEADLINE);
        let limiter = builder
            .build_redis(url, options)
            .await
            .map_err(|e| match e {
                BuildError::InvalidUrl { .. } => Failure {
                    message: format!("error: --redis-url: {e}"),
                    status: 2,
                },
                e => Failure {
                    message: format!(
                        "error: --redis-url: {e} (start Redis there, or point --redis-url at one)"
                    ),
                    status: 1,
                },
            })?;
        // A limiter builds while Redis is away (and decides by its policy),
        // but a measurement of Redis without Redis measures nothing: one
        // weightless decision must reach it.
        let probe = limiter
            .decide(Request::tenant("shuffle-lab-probe").tokens(0))
            .await;
        if probe.source() == Source::Policy {
            let e = probe.error().map_or_else(String::new, |e| e.to_string());
            return Err(Failure {
                message: format!(
                    "error: --redis-url: {e} (start Redis there, or point --redis-url at one)"
                ),
                status: 1,
            });
        }
        let limiter = Arc::new(limiter);

        let run = STEP * LIVE_STEPS;
        let every = STEP * LIVE_EVERY;
        let requests = LIVE_STEPS / LIVE_EVERY;
        let started = Instant::now();
        // Several loops, so that the flood has requests in flight while one
        // waits for its round trip, as a flooding tenant's many callers do:
        // one loop alone takes at most one token per round trip.
        let flooders: Vec<_> = (0..FLOOD_TASKS)
            .map(|_| {
                let limiter = limiter.clone();
                tokio::spawn(async move {
                    let tenant = limiter.handle("tenant-0");
                    let (mut checks, mut granted) = (0u64, 0u64);
                    while started.elapsed() < run && checks < 1 << 32 {
                        granted += u64::from(tenant.check().await.is_ok());
                        checks += 1;
                    }
                    (checks, granted)
                })
            })
            .collect();
        // As on the manual clock: the flood goes first, and the others are
        // spread over the steps of each period.
        let origin = tokio::time::Instant::now() + STEP;
        let light: Vec<_> = (1..s.tenants)
            .map(|i| {
                let limiter = limiter.clone();
                // tenant-i asks in the steps where (step + i − 1) % every == 0.
                let phase = ((i - 1) % u64::from(LIVE_EVERY)) as u32;
                let offset = STEP * ((LIVE_EVERY - phase) % LIVE_EVERY);
                tokio::spawn(async move {
                    let tenant = limiter.handle(Request::tenant(format!("tenant-{i}")));
                    let mut tick = tokio::time::interval_at(origin + offset, every);
                    let mut granted = 0u32;
                    for _ in 0..requests {
                        tick.tick().await;
                        granted += u32::from(tenant.check().await.is_ok());
                    }
                    granted
                })
            })
            .collect();
        let mut granted = Vec::with_capacity(light.len());
        for task in light {
            granted.push(task.await.map_err(panicked)?);
        }
        let (mut flood_checks, mut flood_granted) = (0, 0);
        for task in flooders {
            let (checks, granted) = task.await.map_err(panicked)?;
            flood_checks += checks;
            flood_granted += granted;
        }
        let elapsed = started.elapsed();

        let mut measured = Outcome::<u64>::default();
        let mut by_overlap = Outcome::<u64>::default();
        let mut share_sum = vec![0.0f64; k as usize + 1];
        let mut share_n = vec![0u64; k as usize + 1];
        for (&(j, state), &g) in s.assigned.iter().zip(&granted) {
            if s.borrowing.is_some() {
                by_overlap.count(state);
            } else {
                by_overlap.count(State::of_overlap(j, k as usize));
            }
            let share = f64::from(g) / f64::from(requests.max(1));
            measured.count(State::of_share(share));
            share_sum[j] += share;
            share_n[j] += 1;
        }
        let stats = limiter.stats();
        Ok(RedisLive {
            limiter: name,
            tenants: s.tenants,
            seconds: run.as_secs_f64(),
            elapsed_seconds: elapsed.as_secs_f64(),
            request_every_ms: every.as_millis() as u64,
            requests_per_tenant: requests,
            rate_per_second: s.quota.count(),
            burst: s.quota.burst(),
            deadline_ms: DEADLINE.as_millis() as u64,
            flood_tasks: FLOOD_TASKS,
            flood_checks,
            flood_granted,
            predicted: s.predicted,
            by_overlap,
            measured,
            mean_share_by_overlap: share_sum
                .iter()
                .zip(&share_n)
                .map(|(&sum, &c)| (c > 0).then(|| sum / c as f64))
                .collect(),
            from_redis: stats.from_redis(),
            from_cache: stats.from_cache(),
            from_policy: stats.from_policy(),
            errors: stats.errors(),
        })
    }

    fn panicked(e: tokio::task::JoinError) -> Failure {
        Failure {
            message: format!("error: a task of the Redis flood failed: {e}"),
            status: 1,
        }
    }
}

impl fmt::Display for RedisLive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "live over Redis: {} tenants for {} s in real time (took {:.2} s), limiter {:?}, \
             budget {}/s with burst {}, deadline {} ms, FailClosed",
            self.tenants,
            self.seconds,
            self.elapsed_seconds,
            self.limiter,
            self.rate_per_second,
            self.burst,
            self.deadline_ms
        )?;
        writeln!(
            f,
            "  tenant-0 loops on check().await from {} tasks ({} checks, granted {}); the others \
             send 1 request every {} ms",
            self.flood_tasks, self.flood_checks, self.flood_granted, self.request_every_ms
        )?;
        self.predicted.head(f)?;
        self.by_overlap.row(f, "by assignment")?;
        self.measured.row(f, "measured over Redis")?;
        common::shares_by_overlap(f, &self.mean_share_by_overlap)?;
        writeln!(
            f,
            "  decisions: {} by Redis, {} cached denials, {} by the failure policy; {} errors",
            self.from_redis, self.from_cache, self.from_policy, self.errors
        )
    }
}
