//! [`Member`]: one limiter of a set, in process or in Redis.

use std::fmt;
use std::sync::Arc;

#[cfg(feature = "redis")]
use ::redis::aio::ConnectionManager;

use crate::clock::{Clock, MonotonicClock};
use crate::limiter::ShardedLimiter;
use crate::quota::Quota;
#[cfg(feature = "redis")]
use crate::redis::RedisLimiter;
use crate::{Denied, Grant, Limit, Request};

/// One limiter of a [`LimiterSet`](super::LimiterSet), whichever its store:
/// what [`member`](super::LimiterSet::member) finds and
/// [`members`](super::LimiterSet::members) yields.
///
/// ```
/// use shuffle_limiter::set::{LimiterSet, Member};
///
/// let set: LimiterSet = toml::from_str("[limiters.amazon]\nrate = \"5/s\"")?;
/// let amazon = set.member("amazon").expect("configured above");
/// assert_eq!((amazon.name(), amazon.quota().count()), ("amazon", 5));
/// match amazon {
///     Member::Local(limiter) => assert!(limiter.check("tenant-42").is_ok()),
///     // With the `redis` feature: Member::Redis(limiter) => limiter.check("tenant-42").await
///     _ => unreachable!("configured without redis = \"...\""),
/// }
/// // Or, whichever the store: `amazon.check("tenant-42").await`.
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[non_exhaustive]
pub enum Member<'a, C = MonotonicClock> {
    /// A limiter whose buckets are in this process.
    Local(&'a Arc<ShardedLimiter<C>>),
    /// A limiter whose buckets are in Redis, shared with every process that
    /// uses the same server and name.
    #[cfg(feature = "redis")]
    Redis(&'a Arc<RedisLimiter<ConnectionManager, C>>),
}

impl<C> Clone for Member<'_, C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C> Copy for Member<'_, C> {}

impl<C> fmt::Debug for Member<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Member::Local(limiter) => f.debug_tuple("Local").field(&***limiter).finish(),
            #[cfg(feature = "redis")]
            Member::Redis(limiter) => f.debug_tuple("Redis").field(&***limiter).finish(),
        }
    }
}

/// Evaluates `$body` with `$limiter` bound to whichever limiter `$member` is.
macro_rules! with_limiter {
    ($member:expr, $limiter:ident => $body:expr) => {
        match $member {
            Member::Local($limiter) => $body,
            #[cfg(feature = "redis")]
            Member::Redis($limiter) => $body,
        }
    };
}

/// # What both stores have
impl<'a, C: Clock> Member<'a, C> {
    /// The limiter's name, the table's NAME.
    pub fn name(self) -> &'a str {
        with_limiter!(self, limiter => limiter.name())
    }

    /// The budget shared by all tenants.
    pub fn quota(self) -> Quota {
        with_limiter!(self, limiter => limiter.quota())
    }

    /// N, the buckets the budget is split into.
    pub fn buckets(self) -> u32 {
        with_limiter!(self, limiter => limiter.buckets())
    }

    /// k, the buckets of each tenant.
    pub fn per_tenant(self) -> u32 {
        with_limiter!(self, limiter => limiter.per_tenant())
    }
}

/// # Deciding, whichever the store
impl<C: Clock + 'static> Member<'_, C> {
    /// As [`Limit::check`](crate::Limit::check) on whichever limiter this
    /// is: ready at once in process, a round trip to Redis otherwise.
    ///
    /// ```
    /// use shuffle_limiter::set::LimiterSet;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let set: LimiterSet = toml::from_str("[limiters.amazon]\nrate = \"5/s\"")?;
    /// let amazon = set.member("amazon").expect("configured above");
    /// assert!(amazon.check("tenant-42").await.is_ok());
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Denied`] as the limiter's check denies.
    pub async fn check<'r>(self, request: impl Into<Request<'r>>) -> Result<Grant, Denied> {
        let request = request.into();
        with_limiter!(self, limiter => Limit::check(&**limiter, request).await)
    }

    /// As [`Limiter::wait`](crate::Limiter::wait) on whichever limiter this
    /// is, within `max_wait` if one is given (feature `wait`).
    ///
    /// # Errors
    /// [`Denied`] as the limiter's wait is.
    #[cfg(feature = "wait")]
    #[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
    pub async fn wait<'r>(
        self,
        request: impl Into<Request<'r>>,
        max_wait: Option<std::time::Duration>,
    ) -> Result<Grant, Denied> {
        let request = request.into();
        with_limiter!(self, limiter => match max_wait {
            Some(max_wait) => limiter.wait(request).within(max_wait).await,
            None => limiter.wait(request).await,
        })
    }
}

/// A limiter as the set stores it.
pub(super) enum Entry<C> {
    Local(Arc<ShardedLimiter<C>>),
    #[cfg(feature = "redis")]
    Redis(Arc<RedisLimiter<ConnectionManager, C>>),
}

impl<C> Entry<C> {
    /// The limiter's N now, and the most it may grow to.
    pub(super) fn buckets(&self) -> (u32, u32) {
        match self {
            Entry::Local(limiter) => (limiter.buckets(), limiter.max_buckets()),
            #[cfg(feature = "redis")]
            Entry::Redis(limiter) => (limiter.buckets(), limiter.max_buckets()),
        }
    }

    pub(super) fn local(&self) -> Option<&Arc<ShardedLimiter<C>>> {
        match self {
            Entry::Local(limiter) => Some(limiter),
            #[cfg(feature = "redis")]
            Entry::Redis(_) => None,
        }
    }

    /// The same limiter, shared.
    pub(super) fn share(&self) -> Entry<C> {
        match self {
            Entry::Local(limiter) => Entry::Local(Arc::clone(limiter)),
            #[cfg(feature = "redis")]
            Entry::Redis(limiter) => Entry::Redis(Arc::clone(limiter)),
        }
    }

    pub(super) fn member(&self) -> Member<'_, C> {
        match self {
            Entry::Local(limiter) => Member::Local(limiter),
            #[cfg(feature = "redis")]
            Entry::Redis(limiter) => Member::Redis(limiter),
        }
    }
}
