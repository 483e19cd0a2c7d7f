//! Waiting for a grant before calling a rate-limited upstream (feature
//! `wait`).
//!
//! An upstream API that allows all of your tenants together 5 requests a
//! second answers 429 to the sixth. Instead of sending and retrying, take a
//! token from the limiter first and call only once it is granted:
//! [`Limiter::wait`] waits as long as it takes; [`Wait::within`] gives up as
//! soon as it is clear that the grant would come after the caller's own
//! deadline, and [`Wait::jitter`] adds a random delay to each wake-up. A
//! [`Handle`] waits the same way, with its shard resolved
//! once.
//!
//! # Waits queue
//! A wait does not poll. When its tenant's buckets are empty, it books
//! the earliest slot they can give — the draw as it will be then, applied
//! now, so that later callers line up behind it — and sleeps exactly until
//! that slot. Callers are served in the order they asked, without a
//! thundering herd of retries, and a tenant with many callers cannot starve
//! one with a few on the same buckets: each caller has at most one slot in
//! the line. A bounded wait books only a slot inside its bound and
//! otherwise returns at once. Over Redis the booking happens in the
//! same script as every decision. Only the tenant's own buckets are
//! booked: where a spill bucket lends first
//! ([borrowing](crate::guide::borrowing)), the wait sleeps until then and
//! draws again, since a token booked ahead there would come out of its
//! owners' reserve.
//!
//! Dropping a pending wait (a `select!` that lost, a timed-out request)
//! gives its booking back to the buckets that paid it, where nothing
//! drew on them since. Where others have queued behind it, they keep their
//! slots and the dropped one is lost to the budget: moving them up would
//! let two grants share one slot. So a dropped wait never takes more than
//! its one request's tokens, and often nothing.
//!
//! # When the quota changes
//! A caller that booked its slot under one quota and wakes under another
//! does not take it: it books again under the quota in force, so the
//! change bound (see `set_quota`) holds for the grants returned to callers,
//! however early they were booked. Over Redis the waiter first reads the
//! quota key (one `GET`), to see a change made by another process. The old
//! slot stays taken: after a cut the line resumes at the new pace once the
//! slots already booked have passed.
//!
//! # While the store is down
//! A denial by a Redis limiter's failure policy (Redis unreachable or late,
//! [`DenialReason::StoreUnavailable`](crate::DenialReason::StoreUnavailable)) is no
//! slot to queue for: the wait sleeps until its retry time, when the store
//! is next tried, and asks again from then. It never goes round without
//! sleeping and never books a slot further ahead on that account; its
//! [jitter](Wait::jitter) is added to that sleep too, so that the waiters
//! an outage denied together do not all come back at once. A bounded wait
//! whose deadline comes first returns that denial at once, with its reason
//! and retry time. A bounded wait also cuts each round trip at its bound,
//! when the store's own deadline is longer: a booking unanswered then is
//! a `StoreUnavailable` denial, and a slot that came due is kept with the
//! quota last heard of. So over Redis a bound shorter than a round trip is
//! denied every time, whatever the buckets hold; a bound of zero is a
//! check (its round trip bounded by the store's deadline).
//!
//! # Calling a rate-limited upstream
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use shuffle_limiter::{Quota, ShardedLimiter};
//!
//! # async fn call_upstream(tenant: &str) -> String { format!("hello, {tenant}") }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // The upstream's own limit, shared by all tenants: 5 requests/s, 5 at once.
//! let limiter = Arc::new(
//!     ShardedLimiter::builder()
//!         .quota(Quota::per_second(5).with_burst(5))
//!         .buckets(5)
//!         .per_tenant(2)
//!         .build()?,
//! );
//!
//! // Wait as long as it takes, then call.
//! limiter.wait("tenant-42").await?;
//! let reply = call_upstream("tenant-42").await;
//! assert_eq!(reply, "hello, tenant-42");
//!
//! // Or give up at once when the grant would come after our own deadline.
//! match limiter.wait("tenant-42").within(Duration::from_millis(250)).await {
//!     Ok(_grant) => drop(call_upstream("tenant-42").await),
//!     Err(denied) => println!("busy: retry in {:?}", denied.retry_after()),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Time
//! The wait sleeps on tokio's timer until the slot the limiter booked on
//! its own clock. With the default
//! [`MonotonicClock`](crate::MonotonicClock) both run at the rate of real
//! time. In tests that pause tokio's time
//! (`#[tokio::test(start_paused = true)]`), give the limiter a [`TokioClock`]
//! so that it sees the time the test advances.

mod clock;
mod jitter;
mod queue;

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use crate::plan::whom::{Resolved, Whom};
use crate::store::Store;
use crate::{Denied, Grant, Handle, Limiter, Request};
pub use clock::TokioClock;
pub use jitter::Jitter;

/// A wait for a grant, to `.await`: made by [`Limiter::wait`] or
/// [`Handle::wait`], bounded by [`within`](Self::within), jittered by
/// [`jitter`](Self::jitter).
///
/// Awaited, it takes the request's tokens at once when it can, otherwise in
/// turn behind the callers that asked before (see
/// [Waits queue](crate::wait#waits-queue)), and returns the [`Grant`].
/// Dropping it before it completes gives its booking back where no one
/// queued behind it.
///
/// # Errors
/// The future's output is [`Denied`] at once when the request can never
/// fit ([`DenialReason::NeverFits`](crate::DenialReason::NeverFits)), and,
/// for a wait [`within`](Self::within) a bound, when the grant cannot come
/// in time: [`DenialReason::Limited`](crate::DenialReason::Limited) with
/// when the buckets would grant it, or, when a failure policy denied,
/// [`DenialReason::StoreUnavailable`](crate::DenialReason::StoreUnavailable)
/// with when the store is next tried. A wait without a bound ends only
/// with a grant otherwise.
#[must_use = "a wait does nothing until it is awaited"]
pub struct Wait<'a, S> {
    limiter: &'a Limiter<S>,
    who: Who<'a>,
    max_wait: Option<Duration>,
    jitter: Jitter,
}

/// Whom a wait is for: a request to resolve when it starts, or a handle's
/// buckets, resolved already.
enum Who<'a> {
    Request(Request<'a>),
    Resolved(Whom<'a>, u32),
}

impl<S> Wait<'_, S> {
    /// Waits at most `max_wait`: when the earliest slot the buckets can give
    /// (behind the callers already queued) comes later than `max_wait` from
    /// the start, the wait ends at once with a denial saying when it would
    /// have come, rather than sleeping for nothing; the caller never waits
    /// longer than its deadline (to the timer's millisecond).
    ///
    /// ```
    /// use std::time::Duration;
    /// use shuffle_limiter::{Quota, ShardedLimiter, TokioClock};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(2))
    ///     .buckets(2)
    ///     .per_tenant(1)
    ///     .clock(TokioClock::new())
    ///     .build()?;
    /// limiter.wait("t").await?; // its one bucket's one token
    /// // The next token comes in 1 s: too late for a 250 ms budget.
    /// let denied = limiter.wait("t").within(Duration::from_millis(250)).await.unwrap_err();
    /// assert_eq!(denied.retry_after(), Duration::from_secs(1));
    /// // Within 2 s it is granted, after the 1 s it takes.
    /// assert!(limiter.wait("t").within(Duration::from_secs(2)).await.is_ok());
    /// # Ok(())
    /// # }
    /// ```
    pub fn within(self, max_wait: Duration) -> Self {
        Wait {
            max_wait: Some(max_wait),
            ..self
        }
    }

    /// Adds `jitter` to every wake-up (never past the deadline of
    /// [`within`](Self::within)), so that callers woken for the same slot
    /// do not reach the upstream at one instant.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shuffle_limiter::{Jitter, Quota, ShardedLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ShardedLimiter::builder().quota(Quota::per_second(100)).build()?;
    /// let jitter = Jitter::up_to(Duration::from_millis(50));
    /// let grant = limiter.wait("tenant-42").jitter(jitter).await?;
    /// assert!(limiter.shard("tenant-42").contains(grant.bucket()));
    /// # Ok(())
    /// # }
    /// ```
    pub fn jitter(self, jitter: Jitter) -> Self {
        Wait { jitter, ..self }
    }
}

impl<'a, S: Store> IntoFuture for Wait<'a, S> {
    type Output = Result<Grant, Denied>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Grant, Denied>> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        let Wait {
            limiter,
            who,
            max_wait,
            jitter,
        } = self;
        Box::pin(async move {
            match who {
                Who::Request(request) => {
                    let whom = limiter.whom(&request);
                    (limiter.wait_for(whom, request.weight(), max_wait, jitter)).await
                }
                Who::Resolved(whom, n) => limiter.wait_for(whom, n, max_wait, jitter).await,
            }
        })
    }
}

impl<S> fmt::Debug for Wait<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Wait")
            .field("max_wait", &self.max_wait)
            .field("jitter", &self.jitter)
            .finish_non_exhaustive()
    }
}

/// # Waiting (feature `wait`)
///
/// The same over every store: in process the checks answer at once, over
/// Redis each is one round trip. Over Redis, dropping a wait while its
/// request is in flight may still take a token that nobody uses (never one
/// too many), and a booking is given back in a background task.
impl<S: Store> Limiter<S> {
    /// Waits until the request is granted, and takes its tokens: at once
    /// when it can, otherwise in turn behind the callers that asked before
    /// ([`Wait`]: bound it with [`within`](Wait::within), jitter it with
    /// [`jitter`](Wait::jitter)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use shuffle_limiter::{Quota, Request, ShardedLimiter, TokioClock};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(8))
    ///     .per_tenant(4)
    ///     .per_user(2)
    ///     .clock(TokioClock::new())
    ///     .build()?;
    /// // 8 buckets of one token, one a second each; a tenant holds 4.
    /// let start = tokio::time::Instant::now();
    /// for _ in 0..5 {
    ///     limiter.wait("t").await?; // four at once, the fifth after 1 s
    /// }
    /// assert_eq!(start.elapsed(), Duration::from_secs(1));
    /// // One user of a tenant holds 2 of its 4.
    /// let alice = Request::tenant("acme").user("alice");
    /// for _ in 0..3 {
    ///     limiter.wait(alice.clone()).await?; // two, then 1 s more
    /// }
    /// assert_eq!(start.elapsed(), Duration::from_secs(2));
    /// # Ok(())
    /// # }
    /// ```
    pub fn wait<'a>(&'a self, request: impl Into<Request<'a>>) -> Wait<'a, S> {
        Wait {
            limiter: self,
            who: Who::Request(request.into()),
            max_wait: None,
            jitter: Jitter::NONE,
        }
    }
}

impl<S: Store> Handle<'_, S> {
    /// As [`Limiter::wait`], without resolving the shard again.
    pub fn wait(&self) -> Wait<'_, S> {
        Wait {
            limiter: self.limiter,
            who: Who::Resolved(self.whom(), self.weight()),
            max_wait: None,
            jitter: Jitter::NONE,
        }
    }
}
