//! Waiting for a grant before calling a rate-limited upstream (feature
//! `tokio`).
//!
//! An upstream API that allows all of your tenants together 5 requests a
//! second answers 429 to the sixth. Instead of sending and retrying, take a
//! token from the limiter first and call only once it is granted:
//! [`Limiter::until_ready`] waits as long as it takes,
//! [`Limiter::until_ready_within`] gives up as soon as it is clear that
//! the grant would come after the caller's own deadline, and
//! [`Limiter::with_jitter`] adds a random delay to each wake-up.
//!
//! # Waits queue
//! A wait does not poll. When its tenant's buckets are empty, it reserves
//! the earliest slot they can give — the draw as it will be then, applied
//! now, so that later callers line up behind it — and sleeps exactly until
//! that slot. Callers are served in the order they asked, without a
//! thundering herd of retries, and a tenant with many callers cannot starve
//! one with a few on the same buckets: each caller has at most one slot in
//! the line. A bounded wait reserves only a slot inside its bound and
//! otherwise returns at once. Over Redis the reservation happens in the
//! same script as every decision.
//!
//! Dropping a pending wait (a `select!` that lost, a timed-out request)
//! gives its reservation back to the buckets that paid it, where nothing
//! drew on them since. Where others have queued behind it, they keep their
//! slots and the dropped one is lost to the budget: moving them up would
//! let two grants share one slot. So a dropped wait never takes more than
//! its one request's tokens, and often nothing.
//!
//! # When the quota changes
//! A caller that reserved its slot under one quota and wakes under another
//! does not take it: it reserves again under the quota in force, so the
//! change bound (see `set_quota`) holds for the grants returned to callers,
//! however early they were reserved. Over Redis the waiter first reads the
//! quota key (one `GET`), to see a change made by another process. The old
//! slot stays taken: after a cut the line resumes at the new pace once the
//! slots already booked have passed.
//!
//! # While the store is down
//! A denial by a Redis limiter's failure policy (Redis unreachable or late,
//! [`DenialReason::StoreUnavailable`](crate::DenialReason::StoreUnavailable)) is no
//! slot to queue for: the wait sleeps until its retry time, when the store
//! is next tried, and asks again from then. It never goes round without
//! sleeping and never reserves a slot further ahead on that account. A
//! bounded wait whose deadline comes first returns that denial at once,
//! with its reason and retry time.
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
//! limiter.until_ready("tenant-42").await;
//! let reply = call_upstream("tenant-42").await;
//! assert_eq!(reply, "hello, tenant-42");
//!
//! // Or give up at once when the grant would come after our own deadline.
//! match limiter.until_ready_within("tenant-42", Duration::from_millis(250)).await {
//!     Ok(_grant) => drop(call_upstream("tenant-42").await),
//!     Err(denied) => println!("busy: retry in {:?}", denied.retry_after()),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Time
//! The wait sleeps on tokio's timer until the slot the limiter reserved on
//! its own clock. With the default
//! [`MonotonicClock`](crate::MonotonicClock) both run at the rate of real
//! time. In tests that pause tokio's time
//! (`#[tokio::test(start_paused = true)]`), give the limiter a [`TokioClock`]
//! so that it sees the time the test advances.

mod clock;
mod jitter;
mod queue;

use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::error::InsufficientCapacity;
use crate::limiter::whom::Whom;
use crate::store::Store;
use crate::{Denied, Grant, Limiter};
pub use clock::TokioClock;
pub use jitter::Jitter;

/// Waits on a limiter with a [`Jitter`] on every wake-up.
///
/// Its methods are those of the limiter, with the jitter added. It reaches
/// the limiter through `L`: a borrow by default, as
/// [`Limiter::with_jitter`] makes it, or an `Arc` (a [`SharedWaiter`], made
/// by [`Waiter::shared`]) to clone into spawned tasks.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use shuffle_limiter::wait::Waiter;
/// use shuffle_limiter::{Jitter, Quota, ShardedLimiter};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Arc::new(ShardedLimiter::builder().quota(Quota::per_second(100)).build()?);
/// let waiter = Waiter::shared(
///     Arc::clone(&limiter),
///     Jitter::new(Duration::from_millis(1), Duration::from_millis(20)),
/// );
/// let tasks: Vec<_> = (0..4)
///     .map(|i| {
///         let waiter = waiter.clone(); // one Arc more, the same limiter
///         tokio::spawn(async move { waiter.until_ready(format!("tenant-{i}")).await })
///     })
///     .collect();
/// for task in tasks {
///     let grant = task.await?;
///     assert!(grant.bucket() < limiter.buckets());
/// }
/// # Ok(())
/// # }
/// ```
#[must_use = "a waiter does nothing until one of its methods is awaited"]
pub struct Waiter<'a, S, L = &'a Limiter<S>> {
    limiter: L,
    jitter: Jitter,
    /// The borrow of the default `L`, and the store it waits on.
    _limiter: Marker<'a, S>,
}

/// What `Waiter` holds of its lifetime and store without holding either.
type Marker<'a, S> = PhantomData<(&'a (), fn() -> S)>;

/// A [`Waiter`] that owns an `Arc` of its limiter: `'static`, and cheap to
/// clone into spawned tasks.
pub type SharedWaiter<S> = Waiter<'static, S, Arc<Limiter<S>>>;

impl<S, L: Deref<Target = Limiter<S>>> Waiter<'_, S, L> {
    /// Waits on the limiter behind `limiter` (a borrow, an `Arc`, ...) with
    /// `jitter` on every wake-up.
    pub fn new(limiter: L, jitter: Jitter) -> Self {
        Waiter {
            limiter,
            jitter,
            _limiter: PhantomData,
        }
    }

    /// The jitter added to every wake-up.
    pub fn jitter(&self) -> Jitter {
        self.jitter
    }
}

impl<S> SharedWaiter<S> {
    /// A waiter that owns `limiter`, for spawned tasks: clone it into each.
    pub fn shared(limiter: Arc<Limiter<S>>, jitter: Jitter) -> Self {
        Waiter::new(limiter, jitter)
    }
}

impl<S, L: Clone> Clone for Waiter<'_, S, L> {
    fn clone(&self) -> Self {
        Waiter {
            limiter: self.limiter.clone(),
            jitter: self.jitter,
            _limiter: PhantomData,
        }
    }
}

impl<S, L> fmt::Debug for Waiter<'_, S, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiter")
            .field("jitter", &self.jitter)
            .finish_non_exhaustive()
    }
}

/// # Waiting (feature `tokio`)
///
/// The same over every store: in process the checks answer at once, over
/// Redis each is one round trip. Over Redis, dropping a wait while its
/// request is in flight may still take a token that nobody uses (never one
/// too many), and a reservation is given back in a background task.
impl<S: Store> Limiter<S> {
    /// Waits until `tenant` is granted one token, and takes it: at once
    /// when it can, otherwise in turn behind the callers that asked before
    /// (see [Waits queue](crate::wait#waits-queue)).
    ///
    /// Dropping the future before it completes gives its reservation back
    /// where no one queued behind it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shuffle_limiter::{Quota, ShardedLimiter, TokioClock};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), shuffle_limiter::ConfigError> {
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(4))
    ///     .buckets(4)
    ///     .per_tenant(2)
    ///     .clock(TokioClock::new())
    ///     .build()?;
    /// let start = tokio::time::Instant::now();
    /// for _ in 0..3 {
    ///     limiter.until_ready("t").await; // two at once, the third after 1 s
    /// }
    /// assert_eq!(start.elapsed(), Duration::from_secs(1));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn until_ready(&self, tenant: impl AsRef<[u8]>) -> Grant {
        self.with_jitter(Jitter::NONE).until_ready(tenant).await
    }

    /// Waits until `tenant` is granted `n` tokens at once (from one of its
    /// buckets or several together), and takes them.
    ///
    /// # Errors
    /// [`InsufficientCapacity`], at once and without waiting, when the
    /// tenant's buckets can never hold `n` tokens together.
    pub async fn until_n_ready(
        &self,
        tenant: impl AsRef<[u8]>,
        n: u32,
    ) -> Result<Grant, InsufficientCapacity> {
        self.with_jitter(Jitter::NONE)
            .until_n_ready(tenant, n)
            .await
    }

    /// Waits until `user` of `tenant` is granted one token from the user's
    /// buckets ([`Builder::per_user`](crate::Builder::per_user),
    /// [`check_nested`](crate::ShardedLimiter::check_nested)), and takes it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shuffle_limiter::{Quota, ShardedLimiter, TokioClock};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), shuffle_limiter::ConfigError> {
    /// // 8 buckets of one token, one per second each; a user holds 2.
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(8))
    ///     .per_tenant(4)
    ///     .per_user(2)
    ///     .clock(TokioClock::new())
    ///     .build()?;
    /// let start = tokio::time::Instant::now();
    /// for _ in 0..3 {
    ///     limiter.until_ready_nested("acme", "user-7").await; // two, then 1 s
    /// }
    /// assert_eq!(start.elapsed(), Duration::from_secs(1));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn until_ready_nested(
        &self,
        tenant: impl AsRef<[u8]>,
        user: impl AsRef<[u8]>,
    ) -> Grant {
        self.with_jitter(Jitter::NONE)
            .until_ready_nested(tenant, user)
            .await
    }

    /// Waits until `user` of `tenant` is granted `n` tokens at once from the
    /// user's buckets, and takes them.
    ///
    /// # Errors
    /// [`InsufficientCapacity`], at once, when the user's buckets can never
    /// hold `n` tokens together.
    pub async fn until_n_ready_nested(
        &self,
        tenant: impl AsRef<[u8]>,
        user: impl AsRef<[u8]>,
        n: u32,
    ) -> Result<Grant, InsufficientCapacity> {
        self.with_jitter(Jitter::NONE)
            .until_n_ready_nested(tenant, user, n)
            .await
    }

    /// Waits at most `max_wait` for one token for `tenant`.
    ///
    /// When the earliest slot the tenant's buckets can give (behind the
    /// callers already queued) comes later than `max_wait` from the start,
    /// the wait ends at once with a denial saying when it would have come,
    /// rather than sleeping for nothing; the caller never waits longer than
    /// its deadline (to the timer's millisecond).
    ///
    /// ```
    /// use std::time::Duration;
    /// use shuffle_limiter::{Quota, ShardedLimiter, TokioClock};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), shuffle_limiter::ConfigError> {
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(2))
    ///     .buckets(2)
    ///     .per_tenant(1)
    ///     .clock(TokioClock::new())
    ///     .build()?;
    /// limiter.until_ready("t").await; // its one bucket's one token
    /// // The next token comes in 1 s: too late for a 250 ms budget.
    /// let denied = limiter.until_ready_within("t", Duration::from_millis(250)).await.unwrap_err();
    /// assert_eq!(denied.retry_after(), Duration::from_secs(1));
    /// // Within 2 s it is granted, after the 1 s it takes.
    /// assert!(limiter.until_ready_within("t", Duration::from_secs(2)).await.is_ok());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// The last [`Denied`] when the grant cannot come within `max_wait`:
    /// [`DenialReason::Limited`](crate::DenialReason::Limited) with when the tenant's
    /// buckets would grant it, or, when a failure policy denied,
    /// [`DenialReason::StoreUnavailable`](crate::DenialReason::StoreUnavailable) with
    /// when the store is next tried.
    pub async fn until_ready_within(
        &self,
        tenant: impl AsRef<[u8]>,
        max_wait: Duration,
    ) -> Result<Grant, Denied> {
        self.with_jitter(Jitter::NONE)
            .until_ready_within(tenant, max_wait)
            .await
    }

    /// Waits at most `max_wait` for `n` tokens at once for `tenant`.
    ///
    /// # Errors
    /// As [`until_n_ready`](Self::until_n_ready) (outer) and
    /// [`until_ready_within`](Self::until_ready_within) (inner).
    pub async fn until_n_ready_within(
        &self,
        tenant: impl AsRef<[u8]>,
        n: u32,
        max_wait: Duration,
    ) -> Result<Result<Grant, Denied>, InsufficientCapacity> {
        self.with_jitter(Jitter::NONE)
            .until_n_ready_within(tenant, n, max_wait)
            .await
    }

    /// The same waits, with `jitter` added to every wake-up.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shuffle_limiter::{Jitter, Quota, ShardedLimiter};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), shuffle_limiter::ConfigError> {
    /// let limiter = ShardedLimiter::builder().quota(Quota::per_second(100)).build()?;
    /// let jittered = limiter.with_jitter(Jitter::up_to(Duration::from_millis(50)));
    /// let grant = jittered.until_ready("tenant-42").await;
    /// assert!(limiter.shard("tenant-42").contains(grant.bucket()));
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// To hand a waiter to spawned tasks, give it the limiter's `Arc`
    /// instead: [`Waiter::shared`].
    pub fn with_jitter(&self, jitter: Jitter) -> Waiter<'_, S> {
        Waiter::new(self, jitter)
    }
}

impl<S: Store, L: Deref<Target = Limiter<S>>> Waiter<'_, S, L> {
    /// As [`Limiter::until_ready`], with jitter.
    pub async fn until_ready(&self, tenant: impl AsRef<[u8]>) -> Grant {
        let whom = self.limiter.core.tenant(tenant.as_ref());
        self.until_granted(whom, 1).await
    }

    /// As [`Limiter::until_ready_nested`], with jitter.
    pub async fn until_ready_nested(
        &self,
        tenant: impl AsRef<[u8]>,
        user: impl AsRef<[u8]>,
    ) -> Grant {
        let whom = self.limiter.core.user(tenant.as_ref(), user.as_ref());
        self.until_granted(whom, 1).await
    }

    /// As [`Limiter::until_n_ready`], with jitter.
    ///
    /// # Errors
    /// As [`Limiter::until_n_ready`].
    pub async fn until_n_ready(
        &self,
        tenant: impl AsRef<[u8]>,
        n: u32,
    ) -> Result<Grant, InsufficientCapacity> {
        let whom = self.weighed(self.limiter.core.tenant(tenant.as_ref()), n)?;
        Ok(self.until_granted(whom, n).await)
    }

    /// As [`Limiter::until_n_ready_nested`], with jitter.
    ///
    /// # Errors
    /// As [`Limiter::until_n_ready`], for the user's buckets.
    pub async fn until_n_ready_nested(
        &self,
        tenant: impl AsRef<[u8]>,
        user: impl AsRef<[u8]>,
        n: u32,
    ) -> Result<Grant, InsufficientCapacity> {
        let whom = self.limiter.core.user(tenant.as_ref(), user.as_ref());
        let whom = self.weighed(whom, n)?;
        Ok(self.until_granted(whom, n).await)
    }

    /// As [`Limiter::until_ready_within`], with jitter (a wake-up never goes
    /// past the deadline because of it).
    ///
    /// # Errors
    /// As [`Limiter::until_ready_within`].
    pub async fn until_ready_within(
        &self,
        tenant: impl AsRef<[u8]>,
        max_wait: Duration,
    ) -> Result<Grant, Denied> {
        let whom = self.limiter.core.tenant(tenant.as_ref());
        self.wait(whom, 1, Some(max_wait)).await
    }

    /// As [`Limiter::until_n_ready_within`], with jitter.
    ///
    /// # Errors
    /// As [`Limiter::until_n_ready_within`].
    pub async fn until_n_ready_within(
        &self,
        tenant: impl AsRef<[u8]>,
        n: u32,
        max_wait: Duration,
    ) -> Result<Result<Grant, Denied>, InsufficientCapacity> {
        let whom = self.weighed(self.limiter.core.tenant(tenant.as_ref()), n)?;
        Ok(self.wait(whom, n, Some(max_wait)).await)
    }

    /// Whose shard, once it is known to hold `n` tokens at all.
    fn weighed<'a>(&self, whom: Whom<'a>, n: u32) -> Result<Whom<'a>, InsufficientCapacity> {
        let limiter = &self.limiter;
        limiter.store.check_weight(&limiter.core, &whom.shard, n)?;
        Ok(whom)
    }

    /// Waits without a deadline: such a wait only ends with a grant (the
    /// loop just spares an impossible case a panic).
    async fn until_granted(&self, whom: Whom<'_>, n: u32) -> Grant {
        loop {
            if let Ok(grant) = self.wait(whom, n, None).await {
                return grant;
            }
        }
    }
}
