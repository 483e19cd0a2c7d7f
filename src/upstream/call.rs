//! One call to a rate-limited upstream, listened to (feature `wait`):
//! wait for the tenant's grant, send, then hold off, adapt, retry within
//! the budget and settle, from what the upstream answered.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

#[cfg(feature = "tower")]
use super::NotSent;
use super::{Adaptive, HoldOff, Retries, RetryBudget, Signal, policy, reset_in, retry_after};
use crate::clock::{Clock, MonotonicClock};
use crate::store::Store;
use crate::{Denied, Grant, Limit, Limiter, Request};

/// What an upstream answered, as much of it as [`Upstream`] reads: the
/// status and the headers (names in lower case).
///
/// Implemented for `http::Response` (feature `tower`); implement it for
/// your client's response type (a `reqwest::Response`, say) in two lines.
pub trait Answer {
    /// The HTTP status code.
    fn status(&self) -> u16;
    /// The value of header `name` (lower case), if present.
    fn header(&self, name: &str) -> Option<&[u8]>;
    /// Whether the call reached the upstream: `false` for an answer made
    /// in its place (an `http::Response` carrying [`NotSent`]), which
    /// [`Upstream`] does not listen to. `true` unless implemented.
    fn sent(&self) -> bool {
        true
    }
}

#[cfg(feature = "tower")]
impl<B> Answer for http::Response<B> {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers().get(name).map(http::HeaderValue::as_bytes)
    }

    fn sent(&self) -> bool {
        self.extensions().get::<NotSent>().is_none()
    }
}

/// Where a throttle holds off: the upstream's limit is shared by every
/// tenant, or it limits each account on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// One limit for all tenants (one API key): a throttle stops every bucket.
    Shared,
    /// A limit per account: a throttle stops the tenant's own buckets.
    PerTenant,
}

/// Why a call gave no answer back, or an answer with an error beside it.
#[non_exhaustive]
pub enum CallError<E, A> {
    /// The limiter denied it: it can never fit, or it could not be granted
    /// within the wait allowed. Nothing was sent.
    Denied(Denied),
    /// The call was answered, but the store then failed to take in what the
    /// answer said (a refund of a call a layer below refused, a hold-off, a
    /// quota change or a settlement; over Redis, a round trip): the answer,
    /// which the call may have had effects behind, and the store's error.
    Store {
        /// What the store failed with.
        error: E,
        /// What the upstream (or the layer below) answered.
        answer: A,
    },
}

/// The answer is left out (it need not be `Debug`), so that `unwrap` works
/// on a call of any answer type.
impl<E: fmt::Debug, A> fmt::Debug for CallError<E, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Denied(denied) => f.debug_tuple("Denied").field(denied).finish(),
            CallError::Store { error, .. } => f
                .debug_struct("Store")
                .field("error", error)
                .finish_non_exhaustive(),
        }
    }
}

impl<E: fmt::Display, A> fmt::Display for CallError<E, A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Denied(denied) => write!(f, "not sent: {denied}"),
            CallError::Store { error, .. } => {
                write!(f, "answered, but the limiter's store failed: {error}")
            }
        }
    }
}

impl<E: std::error::Error + 'static, A> std::error::Error for CallError<E, A> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::Denied(denied) => Some(denied),
            CallError::Store { error, .. } => Some(error),
        }
    }
}

/// Calls to one rate-limited upstream through a limiter, listening to what
/// it answers: "wrap an upstream API call" in one place.
///
/// Each [`call`](Self::call) waits for the tenant's grant, sends, and then:
/// - on a throttle (429, or 503), holds off for its `Retry-After` (or the
///   reset of `RateLimit` / `X-RateLimit-Reset`; 1 s when it says nothing),
///   where the [`Scope`] says;
/// - with an [`Adaptive`] controller, moves the quota on the signal, and on
///   an advertised `RateLimit-Policy`;
/// - with a cost header, [settles](crate::Limit::settle) the grant at the
///   cost it names;
/// - with a retry budget ([`Retries`]: a [`RetryBudget`] in process, or a
///   fleet's over Redis), deposits each grant, and retries a throttle or a
///   5xx while the tenant's budget allows (at most 2 retries a call), each
///   retry waiting for its own grant, so after any hold-off.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use shuffle_limiter::upstream::{Answer, Scope, Upstream};
/// use shuffle_limiter::{Quota, ShardedLimiter, TokioClock};
///
/// struct Reply(u16, Option<&'static [u8]>);
/// impl Answer for Reply {
///     fn status(&self) -> u16 { self.0 }
///     fn header(&self, name: &str) -> Option<&[u8]> { (name == "retry-after").then_some(self.1?) }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Arc::new(
///     ShardedLimiter::builder()
///         .quota(Quota::per_second(5))
///         .buckets(4)
///         .clock(TokioClock::new())
///         .build()?,
/// );
/// let upstream = Upstream::new(Arc::clone(&limiter)).scope(Scope::Shared);
/// // The partner throttles us for 2 s.
/// let reply = upstream.call("acme", |_grant| async { Reply(429, Some(b"2")) }).await?;
/// assert_eq!(reply.status(), 429);
/// let start = tokio::time::Instant::now();
/// upstream.call("globex", |_grant| async { Reply(200, None) }).await?;
/// assert!(start.elapsed() >= Duration::from_secs(2)); // waited out the hold-off
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Upstream<S, A = MonotonicClock, R = RetryBudget> {
    limiter: Arc<Limiter<S>>,
    scope: Scope,
    adaptive: Option<Adaptive<A>>,
    retries: Option<R>,
    max_wait: Option<Duration>,
    attempts: u32,
    cost: Option<String>,
}

impl<S: Store> Upstream<S> {
    /// Calls through `limiter`, holding off every bucket on a throttle
    /// ([`Scope::Shared`]), without adapting, retrying or settling.
    pub fn new(limiter: Arc<Limiter<S>>) -> Upstream<S> {
        Upstream {
            limiter,
            scope: Scope::Shared,
            adaptive: None,
            retries: None,
            max_wait: None,
            attempts: 2,
            cost: None,
        }
    }
}

impl<S: Store, P: Clock, R: Retries> Upstream<S, P, R> {
    /// Where a throttle holds off.
    pub fn scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    /// Moves the quota from what the upstream answers.
    pub fn adapt<D: Clock>(self, adaptive: Adaptive<D>) -> Upstream<S, D, R> {
        Upstream {
            limiter: self.limiter,
            scope: self.scope,
            adaptive: Some(adaptive),
            retries: self.retries,
            max_wait: self.max_wait,
            attempts: self.attempts,
            cost: self.cost,
        }
    }

    /// Retries throttles and 5xx within `budget`: a [`RetryBudget`] of
    /// this process, or a fleet's over Redis (`RedisRetryBudget`, feature
    /// `redis`).
    pub fn retries<B: Retries>(self, budget: B) -> Upstream<S, P, B> {
        Upstream {
            limiter: self.limiter,
            scope: self.scope,
            adaptive: self.adaptive,
            retries: Some(budget),
            max_wait: self.max_wait,
            attempts: self.attempts,
            cost: self.cost,
        }
    }

    /// The most retries of one call (2 by default).
    pub fn attempts(mut self, retries: u32) -> Self {
        self.attempts = retries;
        self
    }

    /// The longest a call waits for its grant before
    /// [`CallError::Denied`].
    pub fn max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// The response header naming what the call really cost, in tokens
    /// (an LLM's `x-usage-tokens`, say): the grant is settled at it.
    pub fn cost_header(mut self, name: &str) -> Self {
        self.cost = Some(name.to_ascii_lowercase());
        self
    }

    /// The limiter the calls go through.
    pub fn limiter(&self) -> &Arc<Limiter<S>> {
        &self.limiter
    }

    /// The retry budget, if the calls retry.
    pub fn retry_budget(&self) -> Option<&R> {
        self.retries.as_ref()
    }

    /// Sends `request`'s call with `send` once its grant comes, and listens
    /// to the answer (see [`Upstream`]): the last answer, which may be a
    /// throttle the budget did not retry, or one whose retry got no grant
    /// within [`max_wait`](Self::max_wait) (the retry then is not sent,
    /// and its withdrawal from the budget is spent).
    ///
    /// # Errors
    /// [`CallError::Denied`] when no grant came for the call (the request
    /// never fits, or not within [`max_wait`](Self::max_wait)): nothing was
    /// sent. [`CallError::Store`], with the answer, when the store failed a
    /// refund, a hold-off, a change or a settlement after it.
    pub async fn call<'r, A, F, Fut>(
        &self,
        request: impl Into<Request<'r>>,
        mut send: F,
    ) -> Result<A, CallError<S::Error, A>>
    where
        A: Answer,
        F: FnMut(&Grant) -> Fut,
        Fut: Future<Output = A>,
    {
        let request = request.into();
        let mut attempt = 0;
        // The answer a retry is for: what the caller gets if the retry
        // gets no grant, since the call was sent.
        let mut retried: Option<A> = None;
        loop {
            let wait = self.limiter.wait(request.clone());
            let wait = match self.max_wait {
                Some(max_wait) => wait.within(max_wait),
                None => wait,
            };
            let grant = match (wait.await, retried.take()) {
                (Ok(grant), _) => grant,
                (Err(_), Some(answer)) => return Ok(answer),
                (Err(denied), None) => return Err(CallError::Denied(denied)),
            };
            let answer = send(&grant).await;
            if !answer.sent() {
                // Refused before it left (a layer below answered): the
                // tokens go back, and there is nothing to listen to.
                return match self.limiter.refund(grant).await {
                    Ok(_) => Ok(answer),
                    Err(error) => Err(CallError::Store { error, answer }),
                };
            }
            // Read before any await: the answer need not be `Sync`.
            let heard = self.hear(&answer);
            if let Err(error) = self.listen(&request, &heard).await {
                return Err(CallError::Store { error, answer });
            }
            if let Some(retries) = &self.retries {
                // What the call cost, not its estimate: the tokens a
                // settlement gives back are drawn again, and bank again.
                match heard.cost {
                    Some(cost) if cost < grant.tokens() => retries.deposit(&grant.kept(cost)),
                    _ => retries.deposit(&grant),
                }
            }
            if let Some(cost) = heard.cost
                && let Err(error) = self.limiter.settle(grant, cost).await
            {
                return Err(CallError::Store { error, answer });
            }
            let throttled = heard.signal == Some(Signal::Throttled);
            let retryable = throttled || (500..600).contains(&answer.status());
            let retry = match &self.retries {
                Some(budget) if retryable && attempt < self.attempts => {
                    budget.withdraw(&self.limiter.shard(request.clone())).await
                }
                _ => false,
            };
            if !retry {
                return Ok(answer);
            }
            retried = Some(answer);
            attempt += 1;
        }
    }

    /// What the limiter reads of `answer`.
    fn hear(&self, answer: &impl Answer) -> Heard {
        let signal = Signal::of_status(answer.status());
        let header = |name| answer.header(name);
        let now = SystemTime::now();
        let wait = (signal == Some(Signal::Throttled)).then(|| {
            (header("retry-after").and_then(|v| retry_after(v, now)))
                .or_else(|| header("ratelimit-reset").and_then(|v| reset_in(v, now)))
                .or_else(|| header("x-ratelimit-reset").and_then(|v| reset_in(v, now)))
                .or_else(|| header("ratelimit").and_then(|v| reset_in(v, now)))
                .unwrap_or(Duration::from_secs(1))
        });
        let cost = (self.cost.as_deref())
            .and_then(header)
            .and_then(|value| std::str::from_utf8(value).ok()?.trim().parse::<u32>().ok());
        Heard {
            signal,
            wait,
            policy: header("ratelimit-policy").and_then(policy),
            cost,
        }
    }

    /// Holds off on a throttle and tells the controller.
    async fn listen(&self, request: &Request<'_>, heard: &Heard) -> Result<(), S::Error> {
        if let Some(wait) = heard.wait {
            let hold = match self.scope {
                Scope::Shared => HoldOff::all(wait),
                // The account is the tenant's, whichever user called.
                Scope::PerTenant => HoldOff::tenant(request.tenant_id(), wait),
            };
            self.limiter.hold_off(hold).await?;
        }
        let Some(adaptive) = &self.adaptive else {
            return Ok(());
        };
        // The advertised limit first: the answer that carries it was served
        // (or throttled) under it, so the controller must not probe past
        // it (a probe, then the cut back to it, each a change).
        if let Some((limit, window)) = heard.policy {
            let advertised = Signal::Advertised { limit, window };
            adaptive.observe(&self.limiter, advertised).await?;
        }
        if let Some(signal) = heard.signal {
            adaptive.observe(&self.limiter, signal).await?;
        }
        Ok(())
    }
}

/// What a call's answer said, read at once.
struct Heard {
    signal: Option<Signal>,
    /// How long to hold off, on a throttle.
    wait: Option<Duration>,
    policy: Option<(u32, Duration)>,
    cost: Option<u32>,
}
