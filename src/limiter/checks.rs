//! The in-process limiter's checks: [`ShardedLimiter`]'s synchronous face
//! over the [`InProcess`] store.

use std::time::Duration;

use crate::clock::Clock;

use super::ShardedLimiter;
use crate::denied::Denied;
use crate::grant::{BucketState, Grant};
use crate::plan::whom::Resolved;
use crate::request::Request;

/// # Deciding, in process
impl<C: Clock> ShardedLimiter<C> {
    /// Takes the request's tokens from whichever of its buckets has the most
    /// room: a tenant's id alone asks for one token of the tenant's k
    /// buckets; a [`Request`] may name one of its users and a weight.
    ///
    /// ```
    /// use shuffle_limiter::{DenialReason, ManualClock, Quota, Request, ShardedLimiter};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(4))
    ///     .buckets(4)
    ///     .per_tenant(2)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// // Two buckets of one token each: two grants, then a wait of 1 s.
    /// assert!(limiter.check("a").is_ok());
    /// assert!(limiter.check("a").is_ok());
    /// let denied = limiter.check("a").unwrap_err();
    /// assert_eq!(denied.retry_after(), std::time::Duration::from_secs(1));
    /// // Three tokens never fit in two buckets of one.
    /// let never = limiter.check(Request::tenant("b").tokens(3)).unwrap_err();
    /// assert_eq!(never.reason(), DenialReason::NeverFits { asked: 3, most: 2 });
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    ///
    /// A weighted request is paid by its roomiest bucket when that one
    /// holds it, otherwise by several of its buckets together, all or
    /// nothing ([`Grant::payments`]); a weight of 0 is always granted and
    /// moves nothing.
    ///
    /// # Errors
    /// [`Denied`] when the buckets are short (with when to retry), or when
    /// the request asks for more than they can ever hold together
    /// ([`DenialReason::NeverFits`](crate::DenialReason::NeverFits)).
    #[inline]
    pub fn check<'r>(&self, request: impl Into<Request<'r>>) -> Result<Grant, Denied> {
        let request = request.into();
        // One token for a tenant, the common case, inlined with its weight
        // known; a user's request or a weighted one out of line.
        if let (None, 1) = (request.user_id(), request.weight()) {
            let whom = self.core.tenant(request.tenant_id());
            return self.store.take(&self.core, &whom, 1);
        }
        self.check_rest(&request)
    }

    /// [`check`](Self::check) of a request for a user, or of a weight
    /// other than one.
    #[inline(never)]
    fn check_rest(&self, request: &Request<'_>) -> Result<Grant, Denied> {
        let whom = self.core.whom(request);
        match request.weight() {
            1 => self.store.take(&self.core, &whom, 1),
            n => self.weighted(&whom, n),
        }
    }

    /// `n` tokens for `whom`, once its buckets are known to hold them.
    #[inline(never)]
    pub(super) fn weighted(&self, whom: &impl Resolved, n: u32) -> Result<Grant, Denied> {
        // A handle made before a change of N draws on its shard under the
        // N in force, which may hold less: weighed on that one.
        let shard = self.core.shard_now(&whom.whom());
        self.core.split.get().check_weight(&shard, n)?;
        self.store.take(&self.core, whom, n)
    }

    /// Tokens the request's buckets (its tenant's, or its user's) could
    /// give now, over all of them, without taking any.
    pub fn remaining<'r>(&self, request: impl Into<Request<'r>>) -> u64 {
        let request = request.into();
        self.store.remaining(&self.core, &self.core.whom(&request))
    }

    /// How long until all of the request's buckets (its tenant's, or its
    /// user's) are full again if nothing more is taken from them; zero when
    /// they are full.
    pub fn full_in<'r>(&self, request: impl Into<Request<'r>>) -> Duration {
        let now = self.store.now();
        let shard = self.core.whom(&request.into()).shard;
        let waits = shard
            .buckets()
            .iter()
            .map(|&b| self.store.tat(b).saturating_sub(now));
        Duration::from_nanos(waits.max().unwrap_or(0))
    }

    /// The clock the limiter reads.
    pub fn clock(&self) -> &C {
        &self.store.clock
    }

    /// The state of every bucket, read now (each bucket read once, not all
    /// at one instant).
    ///
    /// ```
    /// use shuffle_limiter::{Quota, ShardedLimiter};
    ///
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(10))
    ///     .buckets(4)
    ///     .build()?;
    /// let bursts: Vec<u32> = limiter.snapshot().iter().map(|b| b.burst()).collect();
    /// assert_eq!(bursts, [3, 3, 2, 2]); // 10 split over 4, exactly
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub fn snapshot(&self) -> Vec<BucketState> {
        self.store.snapshot(&self.core)
    }
}
