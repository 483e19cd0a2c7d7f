//! A handle for one request's buckets, resolved once.

use std::fmt;

use crate::Shard;
use crate::clock::{Clock, MonotonicClock};

use super::Limiter;
use crate::denied::Denied;
use crate::grant::Grant;
use crate::plan::whom::{Id, Resolved, Whom};
use crate::request::Request;
use crate::store::Store;
use crate::store::memory::InProcess;

/// A request with its shard resolved once: for a hot tenant, or a loop.
///
/// Made by [`Limiter::handle`]; it checks (and, with the `wait` feature,
/// waits) for the same request again and again without hashing its ids or
/// probing the tenant cache. Making one never allocates: it borrows the
/// request's ids, or owns those the request owned.
///
/// ```
/// use shuffle_limiter::{Quota, Request, ShardedLimiter};
///
/// let limiter = ShardedLimiter::builder().quota(Quota::per_second(100)).build()?;
/// let tenant = limiter.handle("tenant-42");
/// assert_eq!(tenant.shard(), limiter.shard("tenant-42"));
/// assert!(tenant.check().is_ok());
/// // Three tokens a check, for one user of the tenant.
/// let user = limiter.handle(Request::tenant("tenant-42").user("alice").tokens(3));
/// assert_eq!(user.check()?.tokens(), 3);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// After a change of N ([`set_buckets`](crate::ShardedLimiter::set_buckets))
/// its checks draw on the shard under the new N, resolved again on each
/// check; take a new handle to resolve it once again.
pub struct Handle<'a, S = InProcess<MonotonicClock>> {
    pub(crate) limiter: &'a Limiter<S>,
    pub(crate) shard: Shard,
    /// The N `shard` was resolved under.
    pub(crate) buckets: u32,
    pub(crate) request: Request<'a>,
}

impl<'a, S> Handle<'a, S> {
    /// A handle for `request`, with its shard under N now.
    pub(crate) fn of(limiter: &'a Limiter<S>, request: Request<'a>) -> Self {
        let Whom { shard, buckets, .. } = limiter.core.whom(&request);
        Handle {
            limiter,
            shard,
            buckets,
            request,
        }
    }

    /// The buckets the request draws on, as resolved when the handle was
    /// made.
    pub fn shard(&self) -> Shard {
        self.shard
    }

    /// The request the handle makes.
    pub fn request(&self) -> &Request<'a> {
        &self.request
    }

    /// The tokens the request asks for.
    #[inline]
    pub(crate) fn weight(&self) -> u32 {
        self.request.weight()
    }
}

impl<S: Store> Handle<'_, S> {
    /// The handle's decision in flight, whichever the store (what its
    /// check over Redis awaits, and what the tower layer sends).
    #[cfg_attr(not(any(feature = "redis", feature = "tower")), allow(dead_code))]
    pub(crate) fn pending(&self) -> S::Pending {
        self.limiter.pending(self.whom(), self.weight())
    }
}

impl<C: Clock> Handle<'_, InProcess<C>> {
    /// As [`ShardedLimiter::check`](crate::ShardedLimiter::check), without
    /// resolving the shard again.
    ///
    /// # Errors
    /// [`Denied`] when the buckets are short, or the request never fits.
    #[inline]
    pub fn check(&self) -> Result<Grant, Denied> {
        let limiter = self.limiter;
        match self.weight() {
            // One token, the common case, with its weight known here.
            1 => limiter.store.take(&limiter.core, self, 1),
            n => limiter.weighted(self, n),
        }
    }

    /// As [`ShardedLimiter::remaining`](crate::ShardedLimiter::remaining).
    pub fn remaining(&self) -> u64 {
        self.limiter
            .store
            .remaining(&self.limiter.core, &self.whom())
    }
}

impl<S> Resolved for Handle<'_, S> {
    #[inline]
    fn shard(&self) -> &Shard {
        &self.shard
    }

    #[inline]
    fn buckets(&self) -> u32 {
        self.buckets
    }

    fn id(&self) -> Id<'_> {
        Id::of(&self.request)
    }
}

impl<S> fmt::Debug for Handle<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("limiter", &self.limiter.core.name)
            .field("request", &self.request)
            .field("shard", &self.shard)
            .finish()
    }
}
