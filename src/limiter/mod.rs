//! The limiter API: one plan over one store, the same face whatever the
//! store.
//!
//! - `booking.rs`: a wait's booking, through the limiter (feature `wait`).
//! - `builder.rs`: the settings, checked once into a plan.
//! - `checks.rs`: the in-process limiter's checks, its synchronous face.
//! - `changing.rs`: the in-process limiter's live changes and refunds.
//! - `handle.rs`: a request resolved once.
//! - `limit.rs`: the face every limiter has, whatever its store.
//! - `local.rs`: the in-process limiter as a Redis store's local fallback.

#[cfg(feature = "wait")]
mod booking;
pub(crate) mod builder;
mod changing;
mod checks;
pub(crate) mod handle;
pub(crate) mod limit;
#[cfg(feature = "redis")]
mod local;

use std::fmt;
use std::time::Duration;

use crate::Shard;
use crate::assign::Assignment;
use crate::clock::MonotonicClock;
use crate::quota::Quota;

use self::handle::Handle;
use crate::plan::Core;
use crate::plan::isolation::Isolation;
use crate::request::Request;
use crate::store::memory::InProcess;

/// Many tenants, one budget: a quota split over N lock-free GCRA buckets, each
/// tenant drawing from its own k of them, in this process.
///
/// See the [crate documentation](crate) for the model. The limiter is `Send +
/// Sync`; share it through an `Arc`. It is a [`Limiter`] over the
/// [`InProcess`] store, so everything documented there applies.
///
/// # Budget
/// Bucket `i` emits one token every `interval = ⌈period · N / count⌉`
/// nanoseconds and holds `⌊B / N⌋` tokens, plus one for the first `B mod N`
/// buckets. The bursts therefore add up to exactly B, and the rates to exactly
/// R whenever `period · N` is a whole multiple of `count` nanoseconds (as for
/// any per-second count dividing 10⁹·N); otherwise the interval is rounded up
/// by less than a nanosecond, so the buckets together run at exactly
/// `N / interval` tokens per nanosecond: short of R by less than one part in
/// `interval`, never above it. (A quota faster than one token per nanosecond
/// per bucket is refused.) Over any window of length t, all tenants and
/// threads together are granted at most `R·t + B`; one tenant at most
/// `k·R/N` sustained.
pub type ShardedLimiter<C = MonotonicClock> = Limiter<InProcess<C>>;

/// A limiter over the store `S`: the budget, its split over N buckets, the
/// assignment of k buckets to each tenant, and where the buckets live.
///
/// Use it through its aliases: [`ShardedLimiter`] (buckets in this process)
/// and, with the `redis` feature, `RedisLimiter` (buckets in Redis, shared by
/// a fleet). Both have the accessors below, the waits of the `wait`
/// feature ([`wait`](Limiter::wait)) and the [`Limit`](crate::Limit)
/// trait's `async` checks, refunds, changes and reads; a [`ShardedLimiter`]
/// also has synchronous ones of the same names.
pub struct Limiter<S> {
    pub(crate) core: Core,
    pub(crate) store: S,
}

impl<S> Limiter<S> {
    pub(crate) fn new(core: Core, store: S) -> Self {
        Limiter { core, store }
    }
}

/// # Inspecting
impl<S> Limiter<S> {
    /// The buckets a request draws on: its tenant's shard, from the cache
    /// when the tenant was seen recently; for one user of the tenant, the
    /// user's j of them ([`Builder::per_user`](crate::Builder::per_user)),
    /// in the user's order, then the tenant's spill buckets (computed each
    /// time: one SHA-256; nothing per user is kept).
    #[inline]
    pub fn shard<'r>(&self, request: impl Into<Request<'r>>) -> Shard {
        self.core.whom(&request.into()).shard
    }

    /// A handle for `request`, with its buckets resolved once: for a hot
    /// tenant or a loop ([`Handle`]).
    pub fn handle<'a>(&'a self, request: impl Into<Request<'a>>) -> Handle<'a, S> {
        Handle::of(self, request.into())
    }

    /// The assignment this limiter uses now (N, k and its salt): a copy,
    /// since N may change ([`set_buckets`](ShardedLimiter::set_buckets)).
    pub fn assignment(&self) -> Assignment {
        self.core.assignment()
    }

    /// The limiter's name (see [`Builder::name`](crate::Builder::name)).
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// The global budget.
    pub fn quota(&self) -> Quota {
        self.core.quota()
    }

    /// N: buckets in all, now.
    pub fn buckets(&self) -> u32 {
        self.core.buckets()
    }

    /// The most buckets N may grow to while running
    /// ([`Builder::max_buckets`](crate::Builder::max_buckets)).
    pub fn max_buckets(&self) -> u32 {
        self.core.max_buckets
    }

    /// k: buckets per tenant.
    pub fn per_tenant(&self) -> u32 {
        self.core.shards.assignment.per_tenant()
    }

    /// j: buckets per user of a tenant, in nested checks.
    pub fn per_user(&self) -> u32 {
        self.core.shards.per_user
    }

    /// The time between two tokens of one bucket (in Redis, rounded up to a
    /// whole microsecond).
    pub fn bucket_interval(&self) -> Duration {
        Duration::from_nanos(self.core.split.get().interval())
    }

    /// The tokens bucket `bucket` holds when full, or `None` past the last
    /// bucket.
    pub fn bucket_burst(&self, bucket: u32) -> Option<u32> {
        (bucket < self.buckets()).then(|| self.core.split.get().burst_of(bucket))
    }

    /// The blast-radius report for this limiter's N and k: how likely two
    /// tenants are to share buckets, and what one noisy tenant or one failed
    /// bucket does to the others.
    ///
    /// ```
    /// use shuffle_limiter::{Quota, ShardedLimiter};
    ///
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(160))
    ///     .buckets(16)
    ///     .per_tenant(2)
    ///     .build()?;
    /// let report = limiter.blast_radius();
    /// assert_eq!(report.p_identical_exact().to_string(), "1/120");
    /// assert_eq!(report.p_disjoint_exact().to_string(), "91/120");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn blast_radius(&self) -> crate::blast::BlastRadius {
        crate::blast::BlastRadius::new(self.buckets(), self.per_tenant())
            .expect("the builder checked 1 <= k <= N")
    }

    /// How well this limiter keeps tenants apart: C(N, k), P(identical),
    /// k/N and the most one tenant can take, with a warning in its
    /// `Display` when a small quota left few buckets. The limiter's `Debug`
    /// shows it too.
    ///
    /// ```
    /// use shuffle_limiter::{Quota, ShardedLimiter};
    ///
    /// // Three a minute leave 3 buckets: 3 distinct shards of 2.
    /// let limiter = ShardedLimiter::builder().quota(Quota::per_minute(3)).build()?;
    /// let isolation = limiter.isolation();
    /// assert_eq!(isolation.shards().to_string(), "3");
    /// assert_eq!(isolation.p_identical().to_string(), "1/3");
    /// assert!(isolation.is_weak());
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub fn isolation(&self) -> Isolation {
        Isolation::of(&self.core.assignment(), self.core.quota())
    }

    /// Tenants the tenant cache can hold at once: 1.5 times the
    /// [`tenant_cache`](crate::Builder::tenant_cache) asked for, rounded up
    /// to whole sets, so that tenants seldom push each other out.
    pub fn tenant_cache_capacity(&self) -> usize {
        self.core.cache.capacity()
    }
}

impl<S: fmt::Debug> fmt::Debug for Limiter<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limiter")
            .field("name", &self.core.name)
            .field("quota", &self.core.quota())
            .field("buckets", &self.buckets())
            .field("per_tenant", &self.per_tenant())
            .field("isolation", &format_args!("{}", self.isolation()))
            .field("cache", &self.core.cache)
            .field("store", &self.store)
            .finish()
    }
}
