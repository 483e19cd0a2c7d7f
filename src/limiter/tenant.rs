//! A handle for one tenant (or one user of a tenant), with its shard
//! resolved once and its id kept to follow a change of N.

use std::fmt;

use crate::Shard;
use crate::clock::{Clock, MonotonicClock};
use crate::error::InsufficientCapacity;

use super::Limiter;
use super::decision::Grant;
use super::denied::Denied;
use super::memory::InProcess;
use super::whom::{Id, Owned, Resolved, Whom};

/// One tenant of a limiter, with its shard resolved once.
///
/// ```
/// use shuffle_limiter::{Quota, ShardedLimiter};
///
/// let limiter = ShardedLimiter::builder().quota(Quota::per_second(100)).build()?;
/// let tenant = limiter.tenant("tenant-42");
/// assert_eq!(tenant.shard(), limiter.shard("tenant-42"));
/// assert!(tenant.check().is_ok());
/// # Ok::<(), shuffle_limiter::ConfigError>(())
/// ```
///
/// A handle keeps its tenant's id, so that after a change of N
/// ([`set_buckets`](crate::ShardedLimiter::set_buckets)) its checks draw on the
/// tenant's shard under the new N (resolved again on each check, as
/// [`check`](crate::ShardedLimiter::check) does; take a new handle to resolve it
/// once again).
pub struct Tenant<'a, S = InProcess<MonotonicClock>> {
    pub(crate) limiter: &'a Limiter<S>,
    pub(crate) shard: Shard,
    /// The N `shard` was resolved under.
    pub(crate) buckets: u32,
    pub(crate) id: Owned,
}

impl<'a, S> Tenant<'a, S> {
    /// A handle for `id`, with its shard under N now.
    pub(crate) fn of(limiter: &'a Limiter<S>, id: Owned) -> Self {
        let Whom { shard, buckets, .. } = match &id {
            Owned::Tenant(tenant) => limiter.core.tenant(tenant),
            Owned::User(tenant, user) => limiter.core.user(tenant, user),
        };
        Tenant {
            limiter,
            shard,
            buckets,
            id,
        }
    }

    /// The tenant's buckets, as resolved when the handle was made.
    pub fn shard(&self) -> Shard {
        self.shard
    }
}

impl<C: Clock> Tenant<'_, InProcess<C>> {
    /// As [`ShardedLimiter::check`](crate::ShardedLimiter::check), without resolving the shard again.
    ///
    /// # Errors
    /// [`Denied`] when all of the tenant's buckets are empty.
    #[inline]
    pub fn check(&self) -> Result<Grant, Denied> {
        self.limiter.store.take(&self.limiter.core, self, 1)
    }

    /// As [`ShardedLimiter::check_n`](crate::ShardedLimiter::check_n).
    ///
    /// # Errors
    /// As [`ShardedLimiter::check_n`](crate::ShardedLimiter::check_n).
    pub fn check_n(&self, n: u32) -> Result<Result<Grant, Denied>, InsufficientCapacity> {
        self.limiter.check_n_of(self, n)
    }

    /// As [`ShardedLimiter::remaining`](crate::ShardedLimiter::remaining).
    pub fn remaining(&self) -> u64 {
        let (core, whom) = (&self.limiter.core, self.whom());
        let shard = core.resolve_again(&whom, core.buckets());
        self.limiter.store.remaining(core, &shard)
    }
}

impl<S> Resolved for Tenant<'_, S> {
    #[inline]
    fn shard(&self) -> &Shard {
        &self.shard
    }

    #[inline]
    fn buckets(&self) -> u32 {
        self.buckets
    }

    fn id(&self) -> Id<'_> {
        self.id.id()
    }
}

impl<S> fmt::Debug for Tenant<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tenant")
            .field("limiter", &self.limiter.core.name)
            .field("shard", &self.shard)
            .finish()
    }
}
