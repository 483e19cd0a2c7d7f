//! The in-process limiter's checks: [`ShardedLimiter`]'s synchronous face
//! over the [`InProcess`] store.

use std::time::Duration;

use crate::clock::Clock;
use crate::draw::Pace;
use crate::error::InsufficientCapacity;

use super::ShardedLimiter;
use super::decision::{BucketState, Grant};
use super::denied::Denied;
use super::memory::InProcess;
use super::tenant::Tenant;
use super::whom::Owned;
use super::whom::Resolved;

/// # Deciding, in process
impl<C: Clock> ShardedLimiter<C> {
    /// Takes one token for `tenant` from whichever of its buckets has the most
    /// room.
    ///
    /// ```
    /// use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
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
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// [`Denied`] when all of the tenant's buckets are empty.
    #[inline]
    pub fn check(&self, tenant: impl AsRef<[u8]>) -> Result<Grant, Denied> {
        let whom = self.core.tenant(tenant.as_ref());
        self.store.take(&self.core, &whom, 1)
    }

    /// Takes `n` tokens at once for `tenant`: from its roomiest bucket when
    /// that one holds them, otherwise from several of its buckets together,
    /// all or nothing ([`Grant::payments`]).
    ///
    /// A weight of 0 is always granted: it takes nothing and moves no
    /// bucket's state, and its [`Grant::remaining`] reads the tenant's tokens.
    ///
    /// ```
    /// use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
    ///
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(8))
    ///     .buckets(4)
    ///     .per_tenant(2)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// // Each bucket holds 2: a weight of 2 fits one, 3 takes both, and 5
    /// // never fits.
    /// let grant = limiter.check_n("t", 2).unwrap().unwrap();
    /// assert_eq!((grant.payments().len(), grant.remaining()), (1, 2));
    /// assert_eq!(limiter.check_n("t", 0).unwrap().unwrap().remaining(), 2);
    /// assert!(limiter.check_n("t", 3).unwrap().is_err()); // 2 left: wait
    /// assert!(limiter.check_n("t", 5).is_err());
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// The outer error, [`InsufficientCapacity`], when the tenant's buckets
    /// could never hold `n` tokens together; the inner one, [`Denied`], when
    /// they could but do not now.
    pub fn check_n(
        &self,
        tenant: impl AsRef<[u8]>,
        n: u32,
    ) -> Result<Result<Grant, Denied>, InsufficientCapacity> {
        self.check_n_of(&self.core.tenant(tenant.as_ref()), n)
    }

    /// `n` tokens for `whom`, once its buckets are known to hold them.
    pub(super) fn check_n_of(
        &self,
        whom: &impl Resolved,
        n: u32,
    ) -> Result<Result<Grant, Denied>, InsufficientCapacity> {
        self.core.split.get().check_weight(whom.shard(), n)?;
        Ok(self.store.take(&self.core, whom, n))
    }

    /// Takes one token for `user` of `tenant` from the roomiest of the
    /// user's j buckets ([`Builder::per_user`](crate::Builder::per_user)):
    /// a user flooding its tenant drains its own j only, and the tenant's
    /// other users keep the rest. See the example of
    /// [`per_user`](crate::Builder::per_user).
    ///
    /// # Errors
    /// [`Denied`] when all of the user's buckets are empty.
    pub fn check_nested(
        &self,
        tenant: impl AsRef<[u8]>,
        user: impl AsRef<[u8]>,
    ) -> Result<Grant, Denied> {
        let whom = self.core.user(tenant.as_ref(), user.as_ref());
        self.store.take(&self.core, &whom, 1)
    }

    /// Takes `n` tokens at once for `user` of `tenant`, as
    /// [`check_n`](Self::check_n) does over the user's j buckets.
    ///
    /// # Errors
    /// As [`check_n`](Self::check_n), for the user's buckets.
    pub fn check_n_nested(
        &self,
        tenant: impl AsRef<[u8]>,
        user: impl AsRef<[u8]>,
        n: u32,
    ) -> Result<Result<Grant, Denied>, InsufficientCapacity> {
        self.check_n_of(&self.core.user(tenant.as_ref(), user.as_ref()), n)
    }

    /// A handle for one user of one tenant, with the user's buckets
    /// resolved once: the same methods as a tenant's handle, over the
    /// user's j buckets.
    pub fn user(
        &self,
        tenant: impl AsRef<[u8]>,
        user: impl AsRef<[u8]>,
    ) -> Tenant<'_, InProcess<C>> {
        Tenant::of(self, Owned::user(tenant.as_ref(), user.as_ref()))
    }

    /// Tokens `tenant` could take now, over all its buckets, without taking
    /// any.
    pub fn remaining(&self, tenant: impl AsRef<[u8]>) -> u64 {
        self.store
            .remaining(&self.core, &self.core.shard(tenant.as_ref()))
    }

    /// How long until all of `tenant`'s buckets are full again if nothing
    /// more is taken from them; zero when they are full.
    pub fn full_in(&self, tenant: impl AsRef<[u8]>) -> Duration {
        let now = self.store.now();
        let shard = self.core.shard(tenant.as_ref());
        let waits = shard
            .buckets()
            .iter()
            .map(|&b| self.store.tat(b).saturating_sub(now));
        Duration::from_nanos(waits.max().unwrap_or(0))
    }

    /// A handle for one tenant with its shard resolved once, for a hot tenant
    /// or a loop. It keeps a copy of the tenant's id (one allocation), to
    /// follow a change of N ([`Tenant`]).
    pub fn tenant(&self, tenant: impl AsRef<[u8]>) -> Tenant<'_, InProcess<C>> {
        Tenant::of(self, Owned::tenant(tenant.as_ref()))
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
        let now = self.store.now();
        let split = self.core.split.get();
        (0..self.buckets())
            .map(|b| {
                let tat = self.store.tat(b);
                let burst = split.burst_of(b);
                let room = Pace::room(split.pace.capacity(burst), tat, now);
                let available = split.pace.tokens(room);
                self.core.metrics.available(b, available);
                BucketState {
                    bucket: b,
                    available,
                    burst,
                    full_in: Duration::from_nanos(tat.saturating_sub(now)),
                }
            })
            .collect()
    }
}
