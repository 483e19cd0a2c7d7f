//! The scene of `upstream_feedback`, shared with its tests: an upstream
//! policer whose limit moves while the run goes on, and twenty tenants
//! calling it through a limiter that listens to it.
//!
//! The policer knows nothing of the crate: a token bucket of its own (a
//! burst of [`POLICER_BURST`] calls), answering 429 with a whole-second
//! `Retry-After` when empty, optionally advertising its limit in
//! `RateLimit-Policy`, and failing every other call of one flaky account
//! with a 500.

// The example and its tests each use a part of this.
#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shuffle_limiter::Clock;
use shuffle_limiter::store::Store;
use shuffle_limiter::upstream::{Answer, CallError, Retries, Upstream};
use tokio::time::Instant;

/// `tenant-0` … `tenant-19`; `tenant-0` is the noisy one.
pub(crate) const TENANTS: usize = 20;
/// Calls the noisy tenant keeps going; every other tenant keeps one.
pub(crate) const NOISY_CALLS: usize = 8;
/// The upstream's true limit in each third of the run, per second.
pub(crate) const LIMITS: [u32; 3] = [5, 3, 8];
/// The policer's burst: above the limiter's smallest aggregate burst (N
/// buckets of one token each, which refill in step under a saturating load).
pub(crate) const POLICER_BURST: f64 = 10.0;
/// How long an answer takes.
pub(crate) const LATENCY: Duration = Duration::from_millis(20);

/// The tenant `i`'s id.
pub(crate) fn tenant(i: usize) -> String {
    format!("tenant-{i}")
}

/// What the upstream answered: a status and headers.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    /// The HTTP status.
    pub(crate) status: u16,
    /// Headers, names in lower case.
    pub(crate) headers: Vec<(&'static str, String)>,
}

impl Answer for Reply {
    fn status(&self) -> u16 {
        self.status
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        (self.headers.iter())
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_bytes())
    }
}

/// What the policer counted in one second of the run.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Second {
    /// Answered 2xx.
    pub(crate) served: u64,
    /// Answered 429.
    pub(crate) throttled: u64,
    /// Answered 500 (the flaky account).
    pub(crate) failed: u64,
}

/// The upstream's own limiter, with its counts.
#[derive(Debug)]
pub(crate) struct Policer {
    /// How long each third of the run lasts.
    third: Duration,
    advertise: bool,
    flaky: Option<String>,
    tokens: f64,
    last: Duration,
    /// Per second of the run.
    pub(crate) seconds: Vec<Second>,
    /// 2xx answers per tenant.
    pub(crate) served: HashMap<String, u64>,
    /// Calls per tenant, of the flaky account's kind: every other fails.
    calls: HashMap<String, u64>,
}

impl Policer {
    /// A policer whose limit moves through [`LIMITS`] over a run of
    /// `run`, full at the start.
    pub(crate) fn new(run: Duration, advertise: bool) -> Policer {
        Policer {
            third: run / 3,
            advertise,
            flaky: None,
            tokens: POLICER_BURST,
            last: Duration::ZERO,
            seconds: Vec::new(),
            served: HashMap::new(),
            calls: HashMap::new(),
        }
    }

    /// Every other call of `tenant`'s account fails with a 500.
    pub(crate) fn flaky(mut self, tenant: &str) -> Policer {
        self.flaky = Some(tenant.to_owned());
        self
    }

    /// The true limit per second at `at` into the run.
    pub(crate) fn limit_at(&self, at: Duration) -> u32 {
        let third = (at.as_nanos() / self.third.as_nanos().max(1)) as usize;
        LIMITS[third.min(2)]
    }

    /// Answers a call of `tenant` at `at` into the run.
    pub(crate) fn answer(&mut self, at: Duration, tenant: &str) -> Reply {
        let limit = f64::from(self.limit_at(at));
        let elapsed = at.saturating_sub(self.last).as_secs_f64();
        self.last = self.last.max(at);
        self.tokens = (self.tokens + elapsed * limit).min(POLICER_BURST);
        let second = at.as_secs() as usize;
        if self.seconds.len() <= second {
            self.seconds.resize(second + 1, Second::default());
        }
        let tally = &mut self.seconds[second];
        let mut headers = Vec::new();
        if self.advertise {
            headers.push(("ratelimit-policy", format!("{limit};w=1")));
        }
        if self.tokens < 1.0 {
            tally.throttled += 1;
            let wait = ((1.0 - self.tokens) / limit).ceil().max(1.0);
            headers.push(("retry-after", format!("{wait}")));
            return Reply {
                status: 429,
                headers,
            };
        }
        self.tokens -= 1.0;
        if self.flaky.as_deref() == Some(tenant) {
            let calls = self.calls.entry(tenant.to_owned()).or_default();
            *calls += 1;
            if calls.is_multiple_of(2) {
                tally.failed += 1;
                return Reply {
                    status: 500,
                    headers,
                };
            }
        }
        tally.served += 1;
        *self.served.entry(tenant.to_owned()).or_default() += 1;
        Reply {
            status: 200,
            headers,
        }
    }

    /// Served per second and the 429 share in third `third`, from
    /// `settle` after it began to its end.
    pub(crate) fn window(&self, third: usize, settle: Duration) -> Window {
        let from = (self.third * third as u32 + settle).as_secs() as usize;
        let to = (self.third * (third as u32 + 1)).as_secs() as usize;
        let seconds = self
            .seconds
            .get(from..to.min(self.seconds.len()))
            .unwrap_or(&[]);
        let served: u64 = seconds.iter().map(|s| s.served + s.failed).sum();
        let throttled: u64 = seconds.iter().map(|s| s.throttled).sum();
        Window {
            limit: LIMITS[third],
            per_second: served as f64 / (to - from).max(1) as f64,
            throttled_share: throttled as f64 / (served + throttled).max(1) as f64,
        }
    }
}

/// What one third of the run looked like, after it settled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    /// The true limit then.
    pub(crate) limit: u32,
    /// Calls the upstream took (served or failed) per second.
    pub(crate) per_second: f64,
    /// Answers that were 429, of all.
    pub(crate) throttled_share: f64,
}

impl Window {
    /// The calls taken per second, of the true limit.
    pub(crate) fn utilization(&self) -> f64 {
        self.per_second / f64::from(self.limit)
    }
}

/// Calls sent per tenant (retries included).
#[derive(Debug, Default)]
pub(crate) struct Sent(Mutex<HashMap<String, u64>>);

impl Sent {
    /// Calls `tenant` sent.
    pub(crate) fn of(&self, tenant: &str) -> u64 {
        self.0.lock().unwrap().get(tenant).copied().unwrap_or(0)
    }
}

/// Calls made through `upstream` (each with its retries).
#[derive(Debug, Default)]
pub(crate) struct Made {
    /// Calls made per tenant.
    pub(crate) calls: Mutex<HashMap<String, u64>>,
    /// Calls that ended in an error of the limiter.
    pub(crate) errors: AtomicU64,
}

/// Runs the tenants' load until `until`: [`NOISY_CALLS`] callers for
/// `tenant-0`, one for each other tenant, each calling back to back
/// through `upstream`; `send` sends one call of a tenant.
pub(crate) async fn drive<S, A, R, F, Fut>(
    upstream: Arc<Upstream<S, A, R>>,
    send: F,
    until: Instant,
) -> (Arc<Sent>, Arc<Made>)
where
    S: Store + Send + Sync + 'static,
    S::Error: Send,
    A: Clock + Send + Sync + 'static,
    R: Retries + 'static,
    F: Fn(String) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Reply> + Send + 'static,
{
    let sent = Arc::new(Sent::default());
    let made = Arc::new(Made::default());
    let mut callers = tokio::task::JoinSet::new();
    for i in 0..TENANTS {
        let callers_of = if i == 0 { NOISY_CALLS } else { 1 };
        for _ in 0..callers_of {
            let (upstream, send) = (Arc::clone(&upstream), send.clone());
            let (sent, made) = (Arc::clone(&sent), Arc::clone(&made));
            let id = tenant(i);
            callers.spawn(async move {
                while Instant::now() < until {
                    let call = upstream.call(id.as_str(), |_grant| {
                        *sent.0.lock().unwrap().entry(id.clone()).or_default() += 1;
                        send(id.clone())
                    });
                    // Never past the end: a wait cut short is no call.
                    let Ok(result) = tokio::time::timeout_at(until, call).await else {
                        break;
                    };
                    *made.calls.lock().unwrap().entry(id.clone()).or_default() += 1;
                    match result {
                        Ok(_) => {}
                        // Not within the wait allowed: ask again when the
                        // limiter says, as a client that bounds its waits.
                        Err(CallError::Denied(denied)) => {
                            made.errors.fetch_add(1, Ordering::Relaxed);
                            let retry = Instant::now() + denied.retry_after();
                            tokio::time::sleep_until(retry.min(until)).await;
                        }
                        Err(_) => {
                            made.errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            });
        }
    }
    while callers.join_next().await.is_some() {}
    (sent, made)
}
