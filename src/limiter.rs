//! The limiter: its builder, the decision, the tenant handle, and what a
//! decision returns.

use std::fmt;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::Shard;
use crate::assign::{Assignment, MAX_BUCKETS, MAX_CACHE_ENTRIES, MAX_PER_TENANT, ShardCache};
use crate::clock::{Clock, MonotonicClock};
use crate::error::{ConfigError, InsufficientCapacity};
use crate::gcra::Cell;
use crate::quota::Quota;
use crate::sync::{AtomicU64, Ordering};

/// Buckets (N) unless [`Builder::buckets`] says otherwise or the burst is
/// smaller.
pub const DEFAULT_BUCKETS: u32 = 8;

/// Buckets per tenant (k) unless [`Builder::per_tenant`] says otherwise or
/// there are fewer buckets.
pub const DEFAULT_PER_TENANT: u32 = 2;

/// Entries in the tenant cache unless [`Builder::tenant_cache`] says otherwise.
pub const DEFAULT_TENANT_CACHE: usize = 4096;

/// The longest a bucket may take to refill: 2^62 ns, about 146 years, which
/// leaves room for the clock itself in 64-bit nanoseconds.
const MAX_SPAN: u128 = 1 << 62;

/// How a quota is divided over the buckets: every bucket gets the same rate,
/// and the burst is split in whole tokens, the first `B mod N` buckets holding
/// one more than the rest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Split {
    /// Nanoseconds between two tokens of one bucket: ⌈period · N / count⌉.
    pub(crate) interval: u64,
    /// Every bucket holds at least this many tokens (⌊B / N⌋).
    pub(crate) burst: u32,
    /// This many buckets, the lowest-numbered, hold one token more.
    pub(crate) larger: u32,
    /// A bucket of `burst` tokens, with the reciprocal of the interval
    /// computed once.
    cell: Cell,
}

impl Split {
    pub(crate) fn new(quota: Quota, buckets: u32) -> Result<Split, ConfigError> {
        if quota.count() == 0 {
            return Err(ConfigError::ZeroCount);
        }
        if quota.period().is_zero() {
            return Err(ConfigError::ZeroPeriod);
        }
        if quota.burst() < buckets {
            return Err(ConfigError::BurstTooSmall {
                burst: quota.burst(),
                buckets,
            });
        }
        let interval =
            (quota.period().as_nanos() * u128::from(buckets)).div_ceil(u128::from(quota.count()));
        let burst = quota.burst() / buckets;
        let larger = quota.burst() % buckets;
        let span = interval * u128::from(burst + u32::from(larger > 0));
        if span > MAX_SPAN {
            return Err(ConfigError::Overflow {
                refill_secs: span / 1_000_000_000,
            });
        }
        Ok(Split {
            interval: interval as u64,
            burst,
            larger,
            cell: Cell::new(interval as u64, burst),
        })
    }

    /// The tokens bucket `i` holds when full.
    #[inline]
    pub(crate) fn burst_of(&self, bucket: u32) -> u32 {
        self.burst + u32::from(bucket < self.larger)
    }

    /// Whether one of the shard's buckets could ever pay for `n` tokens.
    pub(crate) fn check_weight(&self, shard: &Shard, n: u32) -> Result<(), InsufficientCapacity> {
        let max = shard
            .buckets()
            .iter()
            .map(|&b| self.burst_of(b))
            .max()
            .unwrap_or(0);
        if n > max {
            return Err(InsufficientCapacity { requested: n, max });
        }
        Ok(())
    }

    /// The GCRA parameters of bucket `i`.
    #[inline]
    pub(crate) fn cell(&self, bucket: u32) -> Cell {
        self.cell.with_burst(self.burst_of(bucket))
    }
}

/// Builds a [`ShardedLimiter`]; start from [`ShardedLimiter::builder`].
///
/// The defaults are [`DEFAULT_BUCKETS`] buckets (fewer when the burst has
/// fewer tokens, since every bucket needs one), [`DEFAULT_PER_TENANT`] per
/// tenant (no more than there are buckets), no salt, the [`MonotonicClock`]
/// and a cache of [`DEFAULT_TENANT_CACHE`] tenants; the quota has no default.
///
/// ```
/// use shuffle_limiter::{Quota, ShardedLimiter};
///
/// let small = ShardedLimiter::builder().quota(Quota::per_second(5)).build()?;
/// assert_eq!((small.buckets(), small.per_tenant()), (5, 2));
/// let large = ShardedLimiter::builder().quota(Quota::per_second(100)).build()?;
/// assert_eq!((large.buckets(), large.per_tenant()), (8, 2));
/// # Ok::<(), shuffle_limiter::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .build()"]
pub struct Builder<C = MonotonicClock> {
    pub(crate) quota: Option<Quota>,
    pub(crate) buckets: Option<u32>,
    pub(crate) per_tenant: Option<u32>,
    pub(crate) salt: Vec<u8>,
    pub(crate) cache: usize,
    pub(crate) name: String,
    pub(crate) clock: C,
}

impl<C: Clock> Builder<C> {
    /// The global budget, over all buckets together.
    pub fn quota(mut self, quota: Quota) -> Self {
        self.quota = Some(quota);
        self
    }

    /// N: how many buckets the budget is split into.
    pub fn buckets(mut self, buckets: u32) -> Self {
        self.buckets = Some(buckets);
        self
    }

    /// k: how many of the N buckets each tenant may draw from.
    pub fn per_tenant(mut self, per_tenant: u32) -> Self {
        self.per_tenant = Some(per_tenant);
        self
    }

    /// A deployment secret mixed into the assignment, so that nobody without
    /// it can tell which tenants share buckets. Every process that shares
    /// bucket state must use the same salt.
    pub fn salt(mut self, salt: impl AsRef<[u8]>) -> Self {
        self.salt = salt.as_ref().to_vec();
        self
    }

    /// How many tenants' shards to keep, so that a recently seen tenant does
    /// not pay a SHA-256 per check. The memory is allocated once by
    /// [`build`](Self::build) (128 bytes per 5 entries, the number of sets
    /// rounded up to a power of two) and never grows; 0 turns the cache off.
    /// Size it to the tenants active at once: a tenant that misses pays the
    /// SHA-256 and the rendezvous over all N buckets.
    pub fn tenant_cache(mut self, entries: usize) -> Self {
        self.cache = entries;
        self
    }

    /// The time source; [`ManualClock`](crate::ManualClock) for tests.
    pub fn clock<D: Clock>(self, clock: D) -> Builder<D> {
        Builder {
            quota: self.quota,
            buckets: self.buckets,
            per_tenant: self.per_tenant,
            salt: self.salt,
            cache: self.cache,
            name: self.name,
            clock,
        }
    }

    /// A name for the limiter, used where several limiters meet: metric
    /// labels, shared storage keys, an entry of a set of limiters. Defaults to
    /// `"default"`.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Checks the configuration and builds the limiter.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the first setting that cannot work.
    pub fn build(self) -> Result<ShardedLimiter<C>, ConfigError> {
        let Plan {
            quota,
            split,
            assignment,
        } = self.plan()?;
        Ok(ShardedLimiter {
            buckets: (0..assignment.buckets())
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect(),
            #[cfg(feature = "metrics")]
            metrics: crate::metrics::Metrics::new(
                &self.name,
                quota,
                assignment.buckets(),
                assignment.per_tenant(),
            ),
            split,
            quota,
            assignment,
            cache: ShardCache::new(self.cache),
            name: self.name,
            clock: self.clock,
        })
    }

    /// N and k as set, or their defaults: 8 buckets, but no more than the
    /// burst has tokens (each bucket needs one), and 2 per tenant, but no
    /// more than there are buckets. Values set explicitly are kept as they
    /// are, and checked by [`build`](Self::build).
    pub(crate) fn shape(&self) -> (u32, u32) {
        let burst = self.quota.map_or(u32::MAX, |q| q.burst());
        let buckets = self.buckets.unwrap_or(DEFAULT_BUCKETS.min(burst.max(1)));
        let per_tenant = self
            .per_tenant
            .unwrap_or(DEFAULT_PER_TENANT.min(buckets.max(1)));
        (buckets, per_tenant)
    }

    /// Validates everything but the storage: what every backend builds on.
    pub(crate) fn plan(&self) -> Result<Plan, ConfigError> {
        let quota = self.quota.ok_or(ConfigError::MissingQuota)?;
        let (buckets, per_tenant) = self.shape();
        if buckets == 0 {
            return Err(ConfigError::ZeroBuckets);
        }
        if buckets > MAX_BUCKETS {
            return Err(ConfigError::TooManyBuckets {
                buckets,
                max: MAX_BUCKETS,
            });
        }
        if per_tenant == 0 {
            return Err(ConfigError::ZeroPerTenant);
        }
        if per_tenant > buckets {
            return Err(ConfigError::PerTenantExceedsBuckets {
                per_tenant,
                buckets,
            });
        }
        if per_tenant > MAX_PER_TENANT {
            return Err(ConfigError::TooManyPerTenant {
                per_tenant,
                max: MAX_PER_TENANT,
            });
        }
        if self.cache > MAX_CACHE_ENTRIES {
            return Err(ConfigError::CacheTooLarge {
                entries: self.cache,
                max: MAX_CACHE_ENTRIES,
            });
        }
        let split = Split::new(quota, buckets)?;
        let assignment = Assignment::new(buckets, per_tenant, &self.salt)
            .expect("bucket and shard counts were checked above");
        Ok(Plan {
            quota,
            split,
            assignment,
        })
    }
}

/// A validated configuration, before any bucket storage exists.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) quota: Quota,
    pub(crate) split: Split,
    pub(crate) assignment: Assignment,
}

/// Many tenants, one budget: a quota split over N lock-free GCRA buckets, each
/// tenant drawing from its own k of them.
///
/// See the [crate documentation](crate) for the model. The limiter is `Send +
/// Sync`; share it through an `Arc`.
///
/// # Budget
/// Bucket `i` emits one token every `interval = ⌈period · N / count⌉`
/// nanoseconds and holds `⌊B / N⌋` tokens, plus one for the first `B mod N`
/// buckets. The bursts therefore add up to exactly B, and the rates to exactly
/// R whenever `period · N` is a whole multiple of `count` nanoseconds (as for
/// any per-second count dividing 10⁹·N); otherwise the interval is rounded up
/// by less than a nanosecond, so the buckets together fall short of R by less
/// than one part in `interval` and never exceed it. Over any window of length
/// t, all tenants and threads together are granted at most `R·t + B`; one
/// tenant at most `k·R/N` sustained.
pub struct ShardedLimiter<C = MonotonicClock> {
    buckets: Box<[CachePadded<AtomicU64>]>,
    split: Split,
    quota: Quota,
    assignment: Assignment,
    cache: ShardCache,
    name: String,
    clock: C,
    #[cfg(feature = "metrics")]
    metrics: crate::metrics::Metrics,
}

impl ShardedLimiter<MonotonicClock> {
    /// A builder with the default clock; see [`Builder`] for the defaults.
    pub fn builder() -> Builder<MonotonicClock> {
        Builder {
            quota: None,
            buckets: None,
            per_tenant: None,
            salt: Vec::new(),
            cache: DEFAULT_TENANT_CACHE,
            name: "default".to_owned(),
            clock: MonotonicClock::new(),
        }
    }
}

/// # Deciding
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
        let shard = self.shard(tenant);
        self.draw(&shard, 1)
    }

    /// Takes `n` tokens at once for `tenant`, all from one of its buckets.
    ///
    /// A weight of 0 is always granted and takes nothing.
    ///
    /// # Errors
    /// The outer error, [`InsufficientCapacity`], when no bucket of the tenant
    /// could ever hold `n` tokens; the inner one, [`Denied`], when one could
    /// but none has them now.
    pub fn check_n(
        &self,
        tenant: impl AsRef<[u8]>,
        n: u32,
    ) -> Result<Result<Grant, Denied>, InsufficientCapacity> {
        let shard = self.shard(tenant);
        self.draw_n(&shard, n)
    }

    /// Tokens `tenant` could take now, over all its buckets, without taking
    /// any.
    pub fn remaining(&self, tenant: impl AsRef<[u8]>) -> u64 {
        self.remaining_in(&self.shard(tenant), self.clock.now_nanos())
    }

    /// How long until all of `tenant`'s buckets are full again if nothing
    /// more is taken from them; zero when they are full.
    pub fn full_in(&self, tenant: impl AsRef<[u8]>) -> Duration {
        let shard = self.shard(tenant);
        let now = self.clock.now_nanos();
        let waits = shard.buckets().iter().map(|&b| {
            self.buckets[b as usize]
                .load(Ordering::Relaxed)
                .saturating_sub(now)
        });
        Duration::from_nanos(waits.max().unwrap_or(0))
    }

    /// A handle for one tenant with its shard resolved once, for a hot tenant
    /// or a loop.
    pub fn tenant(&self, tenant: impl AsRef<[u8]>) -> Tenant<'_, C> {
        Tenant {
            limiter: self,
            shard: self.shard(tenant),
        }
    }

    fn draw_n(&self, shard: &Shard, n: u32) -> Result<Result<Grant, Denied>, InsufficientCapacity> {
        self.split.check_weight(shard, n)?;
        Ok(self.draw(shard, n))
    }

    /// The decision: read the shard's buckets, pick the one with most room,
    /// and take from it with one compare-and-swap; start again if another
    /// thread changed that bucket in between.
    #[inline]
    fn draw(&self, shard: &Shard, n: u32) -> Result<Grant, Denied> {
        let now = self.clock.now_nanos();
        let cost = u64::from(n) * self.split.interval;
        let ids = shard.buckets();
        let start = tie_break(ids.len());
        let mut rooms = [0u64; MAX_PER_TENANT as usize];
        loop {
            // The roomiest bucket that fits the cost, visiting the shard from
            // `start` and wrapping around.
            let (mut best, mut best_room, mut best_tat) = (usize::MAX, 0, 0);
            let mut i = start;
            for _ in 0..ids.len() {
                let tat = self.buckets[ids[i] as usize].load(Ordering::Relaxed);
                let room = self.split.cell(ids[i]).room(tat, now);
                rooms[i] = room;
                if room >= cost && (best == usize::MAX || room > best_room) {
                    (best, best_room, best_tat) = (i, room, tat);
                }
                i = if i + 1 == ids.len() { 0 } else { i + 1 };
            }
            if best == usize::MAX {
                return Err(self.denial(ids, now, cost));
            }
            let bucket = ids[best];
            let cell = self.split.cell(bucket);
            let Ok(new_tat) = cell.decide(best_tat, now, cost) else {
                // `room >= cost` is exactly when `decide` grants, so this
                // never happens; if it did, a denial is the safe answer.
                return Err(self.denial(ids, now, cost));
            };
            if self.buckets[bucket as usize]
                .compare_exchange_weak(best_tat, new_tat, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                #[cfg(feature = "metrics")]
                self.metrics.granted(bucket);
                rooms[best] -= cost;
                let remaining = ids
                    .iter()
                    .zip(&rooms)
                    .map(|(&b, &room)| self.split.cell(b).tokens(room))
                    .sum();
                return Ok(Grant { bucket, remaining });
            }
        }
    }

    /// Why nothing fits: the earliest instant one of the buckets that could
    /// ever pay for `cost` will have room for it.
    #[cold]
    fn denial(&self, ids: &[u32], now: u64, cost: u64) -> Denied {
        let mut soonest = (u64::MAX, ids[0]);
        for &bucket in ids {
            let cell = self.split.cell(bucket);
            if cell.capacity < cost {
                continue; // this bucket can never pay for the request
            }
            let tat = self.buckets[bucket as usize].load(Ordering::Relaxed);
            // A bucket that refilled since the first read gives a retry of
            // at least a nanosecond, so a denial never says "retry now".
            let at = match cell.decide(tat, now, cost) {
                Err(at) => at,
                Ok(_) => now + 1,
            };
            if at < soonest.0 {
                soonest = (at, bucket);
            }
        }
        let retry_after = Duration::from_nanos(soonest.0.saturating_sub(now).max(1));
        #[cfg(feature = "metrics")]
        self.metrics.denied(soonest.1, retry_after);
        Denied {
            retry_after,
            bucket: soonest.1,
        }
    }

    fn remaining_in(&self, shard: &Shard, now: u64) -> u64 {
        shard
            .buckets()
            .iter()
            .map(|&b| {
                let tat = self.buckets[b as usize].load(Ordering::Relaxed);
                self.split.cell(b).available(tat, now)
            })
            .sum()
    }
}

/// # Inspecting
impl<C: Clock> ShardedLimiter<C> {
    /// The tenant's shard, from the cache when it was seen recently.
    #[inline]
    pub fn shard(&self, tenant: impl AsRef<[u8]>) -> Shard {
        self.cache.get_or_assign(tenant.as_ref(), &self.assignment)
    }

    /// The assignment this limiter uses (N, k and its salt).
    pub fn assignment(&self) -> &Assignment {
        &self.assignment
    }

    /// The limiter's name (see [`Builder::name`]).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The global budget.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// N: buckets in all.
    pub fn buckets(&self) -> u32 {
        self.buckets.len() as u32
    }

    /// k: buckets per tenant.
    pub fn per_tenant(&self) -> u32 {
        self.assignment.per_tenant()
    }

    /// The time between two tokens of one bucket.
    pub fn bucket_interval(&self) -> Duration {
        Duration::from_nanos(self.split.interval)
    }

    /// The tokens bucket `bucket` holds when full, or `None` past the last
    /// bucket.
    pub fn bucket_burst(&self, bucket: u32) -> Option<u32> {
        (bucket < self.buckets()).then(|| self.split.burst_of(bucket))
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
    /// assert_eq!(report.bucket_blast_radius(), 0.125);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn blast_radius(&self) -> crate::blast::BlastRadius {
        crate::blast::BlastRadius::new(self.buckets(), self.per_tenant())
            .expect("the builder checked 1 <= k <= N")
    }

    /// Entries the tenant cache holds.
    pub fn tenant_cache_capacity(&self) -> usize {
        self.cache.capacity()
    }

    /// The clock the limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
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
        let now = self.clock.now_nanos();
        (0..self.buckets())
            .map(|b| {
                let tat = self.buckets[b as usize].load(Ordering::Relaxed);
                let available = self.split.cell(b).available(tat, now);
                #[cfg(feature = "metrics")]
                self.metrics.available(b, available);
                BucketState {
                    bucket: b,
                    available,
                    burst: self.split.burst_of(b),
                    full_in: Duration::from_nanos(tat.saturating_sub(now)),
                }
            })
            .collect()
    }
}

impl<C> fmt::Debug for ShardedLimiter<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShardedLimiter")
            .field("name", &self.name)
            .field("quota", &self.quota)
            .field("buckets", &self.buckets.len())
            .field("per_tenant", &self.assignment.per_tenant())
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

/// Where two or more buckets have equal room, a per-thread pseudo-random
/// starting point keeps any one of them from being favoured.
#[inline]
pub(crate) fn tie_break(k: usize) -> usize {
    if k == 1 {
        return 0;
    }
    crate::random::below(k as u64) as usize
}

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
pub struct Tenant<'a, C = MonotonicClock> {
    limiter: &'a ShardedLimiter<C>,
    shard: Shard,
}

impl<C: Clock> Tenant<'_, C> {
    /// As [`ShardedLimiter::check`], without resolving the shard again.
    ///
    /// # Errors
    /// [`Denied`] when all of the tenant's buckets are empty.
    #[inline]
    pub fn check(&self) -> Result<Grant, Denied> {
        self.limiter.draw(&self.shard, 1)
    }

    /// As [`ShardedLimiter::check_n`].
    ///
    /// # Errors
    /// As [`ShardedLimiter::check_n`].
    pub fn check_n(&self, n: u32) -> Result<Result<Grant, Denied>, InsufficientCapacity> {
        self.limiter.draw_n(&self.shard, n)
    }

    /// As [`ShardedLimiter::remaining`].
    pub fn remaining(&self) -> u64 {
        self.limiter
            .remaining_in(&self.shard, self.limiter.clock.now_nanos())
    }

    /// The tenant's buckets.
    pub fn shard(&self) -> Shard {
        self.shard
    }
}

impl<C> fmt::Debug for Tenant<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tenant")
            .field("shard", &self.shard)
            .finish()
    }
}

/// A granted request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    pub(crate) bucket: u32,
    pub(crate) remaining: u64,
}

impl Grant {
    /// The bucket that paid for the request.
    pub fn bucket(&self) -> u32 {
        self.bucket
    }

    /// Tokens the tenant could still take right after this grant, over all
    /// its buckets, as read during the decision.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }
}

/// A denied request, and when to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denied {
    pub(crate) retry_after: Duration,
    pub(crate) bucket: u32,
}

impl Denied {
    /// How long until one of the tenant's buckets could grant the same
    /// request; never zero.
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// The bucket that will have room first.
    pub fn bucket(&self) -> u32 {
        self.bucket
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate limited: retry in {:?}", self.retry_after)
    }
}

impl std::error::Error for Denied {}

/// One bucket's state in a [`ShardedLimiter::snapshot`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketState {
    bucket: u32,
    available: u64,
    burst: u32,
    full_in: Duration,
}

impl BucketState {
    /// The bucket's index.
    pub fn bucket(&self) -> u32 {
        self.bucket
    }

    /// Tokens that could be taken now.
    pub fn available(&self) -> u64 {
        self.available
    }

    /// Tokens the bucket holds when full.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// How long until the bucket is full again if nothing is taken.
    pub fn full_in(&self) -> Duration {
        self.full_in
    }
}
