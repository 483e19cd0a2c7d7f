//! The builder: the settings every limiter shares, checked once.

use std::sync::Arc;

use crate::assign::{Assignment, MAX_BUCKETS, MAX_CACHE_ENTRIES, MAX_PER_TENANT, ShardCache};
use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::metrics::Metrics;
use crate::quota::Quota;

use super::{Limiter, ShardedLimiter};
use crate::plan::isolation::warn_if_weak;
use crate::plan::live::LiveSplit;
use crate::plan::tiers::{MAX_TIERED_TENANTS, Tiered, Tiers};
use crate::plan::{Core, Shards, Split, fits_per_tenant, fits_spill, fits_tier};
use crate::store::memory::InProcess;

/// Buckets (N) unless [`Builder::buckets`] says otherwise or the burst is
/// smaller.
pub const DEFAULT_BUCKETS: u32 = 8;

/// Buckets per tenant (k) unless [`Builder::per_tenant`] says otherwise or
/// there are fewer buckets.
pub const DEFAULT_PER_TENANT: u32 = 2;

/// The share of each bucket's burst that borrowers must leave to its owners
/// unless [`Builder::lender_reserve`] says otherwise.
pub const DEFAULT_LENDER_RESERVE: f64 = 0.5;

/// Tenants the tenant cache is sized for unless [`Builder::tenant_cache`]
/// says otherwise: a working set of 100 000 active tenants.
pub const DEFAULT_TENANT_CACHE: usize = 100_000;

/// Builds a limiter; start from [`ShardedLimiter::builder`], then
/// [`build`](Builder::build) it in process or, with the `redis` feature,
/// `build_redis` it in Redis.
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
    pub(crate) max_buckets: Option<u32>,
    pub(crate) per_tenant: Option<u32>,
    pub(crate) salt: Vec<u8>,
    pub(crate) spill: u32,
    pub(crate) reserve: f64,
    pub(crate) per_user: Option<u32>,
    /// Tiers by name, with their buckets per tenant; a name defined again
    /// replaces its entry (`tier`), so that the one replaced is not checked.
    pub(crate) tiers: Vec<(String, u32)>,
    /// Tenants given a tier, by the tier's name.
    pub(crate) tenant_tiers: Vec<(Vec<u8>, String)>,
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

    /// The most buckets N may grow to while the limiter runs
    /// ([`set_buckets`](crate::ShardedLimiter::set_buckets)); N itself by
    /// default, so that N can shrink but not grow.
    ///
    /// The room costs memory whether it is used or not: one cache line (128
    /// bytes) per bucket, and the tenant cache packs bucket numbers up to
    /// this many (a larger shard may take two words per tenant instead of
    /// one; see [`tenant_cache`](Self::tenant_cache)); with the `metrics`
    /// feature, three series per bucket are registered for each.
    pub fn max_buckets(mut self, max_buckets: u32) -> Self {
        self.max_buckets = Some(max_buckets);
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

    /// d: lets each tenant borrow idle capacity from d more buckets, its
    /// *spill set*, when none of its own k can pay. 0, the default, turns
    /// borrowing off. Requires k + d ≤ min(N, 8).
    ///
    /// A tenant's spill set is the d buckets ranked right after its own in
    /// the same assignment (docs/assignment.md, "the spill set"), so it is
    /// as stable and as evenly spread as the shard, and turning borrowing on
    /// changes no shard. A request is paid by the tenant's own buckets
    /// whenever one can (the roomiest, as without borrowing); only then by
    /// the spill bucket with the most room above its
    /// [reserve](Self::lender_reserve), and
    /// [`Grant::borrowed`](crate::Grant::borrowed) says so.
    /// Borrowing never adds to the budget: every grant still comes out of a
    /// bucket, so R·t + B holds.
    ///
    /// What it trades: a tenant alone can use up to (k + d)/N of the budget
    /// instead of k/N; a flooding tenant now also drains its spill buckets
    /// down to their reserve, so its neighbours keep a reserve's share of
    /// those buckets' burst where without borrowing they kept all of it, and
    /// a tenant is cut off entirely only when its own and its spill buckets
    /// are all a flooder's (1 in C(N, k)·C(N − k, d) with equal k and d).
    ///
    /// ```
    /// use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
    ///
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(8))
    ///     .buckets(8)
    ///     .per_tenant(2)
    ///     .borrow_from(2)
    ///     .lender_reserve(0.0)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// // One token in each of 8 buckets: 2 own, then 2 borrowed.
    /// let grants: Vec<bool> = (0..4).map(|_| limiter.check("t").unwrap().borrowed()).collect();
    /// assert_eq!(grants, [false, false, true, true]);
    /// assert!(limiter.check("t").is_err());
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub fn borrow_from(mut self, spill: u32) -> Self {
        self.spill = spill;
        self
    }

    /// r: the share of each bucket's burst, 0 ≤ r < 1, that borrowers must
    /// leave to the bucket's owners ([`DEFAULT_LENDER_RESERVE`], a half,
    /// unless set). A borrower may take a spill bucket only down to r of its
    /// burst; the bucket's owners may take it to zero. 0 lends everything;
    /// values near 1 lend almost nothing. Has no effect without
    /// [`borrow_from`](Self::borrow_from).
    pub fn lender_reserve(mut self, reserve: f64) -> Self {
        self.reserve = reserve;
        self
    }

    /// j: how many of its tenant's k buckets each *user* of a tenant draws
    /// from in a request for one user ([`Request::user`](crate::Request::user)),
    /// 1 ≤ j ≤ k; k unless set, which gives every user all of its tenant's
    /// buckets.
    ///
    /// A user's j buckets are a rendezvous over its tenant's shard, keyed
    /// by the salt, the tenant and the user (docs/assignment.md, "a user's
    /// subset"): a user flooding its tenant drains only its j buckets, and
    /// the tenant's other users keep the rest. Two users of a tenant hold the
    /// same j buckets with probability 1 / C(k, j).
    ///
    /// ```
    /// use shuffle_limiter::{ManualClock, Quota, Request, ShardedLimiter};
    ///
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(8))
    ///     .buckets(8)
    ///     .per_tenant(4)
    ///     .per_user(2)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let shard = limiter.shard("acme");
    /// let user7 = Request::tenant("acme").user("user-7");
    /// let user = limiter.shard(user7.clone());
    /// assert_eq!(user.buckets().len(), 2);
    /// assert!(user.buckets().iter().all(|&b| shard.contains(b)));
    /// // Its two buckets hold one token each: the user is denied after two,
    /// // another user of the tenant may still be granted.
    /// assert!(limiter.check(user7.clone()).is_ok());
    /// assert!(limiter.check(user7.clone()).is_ok());
    /// assert!(limiter.check(user7).is_err());
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub fn per_user(mut self, per_user: u32) -> Self {
        self.per_user = Some(per_user);
        self
    }

    /// Defines a tier: tenants put in it ([`tenant_tier`](Self::tenant_tier))
    /// draw from `per_tenant` buckets instead of the limiter's k. A tier
    /// with a larger k keeps each of its tenants' buckets and adds more:
    /// the tier's shard is the top k' of the same ranking (docs/assignment.md,
    /// nesting), so a tenant moved up keeps its cached state and loses no
    /// isolation it had. Defining a name again replaces it. With
    /// [`per_user`](Self::per_user) j, a tier gives at least j (a narrower
    /// one is refused: every user would draw from the whole tier).
    ///
    /// ```
    /// use shuffle_limiter::{Quota, ShardedLimiter};
    ///
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(80))
    ///     .buckets(8)
    ///     .per_tenant(2)
    ///     .tier("gold", 4)
    ///     .tenant_tier("acme", "gold")
    ///     .build()?;
    /// let gold = limiter.shard("acme");
    /// assert_eq!(gold.buckets().len(), 4);
    /// // Its standard pair is the first two of its gold four.
    /// let standard = limiter.assignment().shard("acme");
    /// assert_eq!(&gold.buckets()[..2], standard.buckets());
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub fn tier(mut self, name: impl Into<String>, per_tenant: u32) -> Self {
        let name = name.into();
        match self.tiers.iter_mut().find(|(n, _)| *n == name) {
            Some((_, k)) => *k = per_tenant,
            None => self.tiers.push((name, per_tenant)),
        }
        self
    }

    /// Puts `tenant` in the tier named `tier` (defined with
    /// [`tier`](Self::tier)); at most [`MAX_TIERED_TENANTS`] tenants. A
    /// tenant put in a tier again moves to the last one. Each
    /// tiered tenant's shard is worked out when the limiter is built and
    /// kept beside the tenant cache, which the tenant then bypasses.
    pub fn tenant_tier(mut self, tenant: impl AsRef<[u8]>, tier: impl Into<String>) -> Self {
        self.tenant_tiers
            .push((tenant.as_ref().to_vec(), tier.into()));
        self
    }

    /// How many tenants' shards to keep, so that a recently seen tenant does
    /// not pay a SHA-256 per check. Size it to the tenants active at once: a
    /// tenant that misses pays the SHA-256 and the rendezvous over all N
    /// buckets (BENCHMARKS.md has what that costs). 0 turns the cache off.
    ///
    /// The memory is allocated once by [`build`](Self::build) and never
    /// grows, however many distinct tenants come: 12 bytes per tenant asked
    /// for (8 per cached tenant, in a cache of 1.5 entries per tenant, so
    /// that tenants seldom push each other out) when a shard, with its spill
    /// buckets, fits in 32 bits ((k + d) · ⌈log₂ M⌉ ≤ 32, M being
    /// [`max_buckets`](Self::max_buckets), N unless set: M ≤ 256 with
    /// k + d ≤ 4, or k + d ≤ 2 with any M); twice that up to 64 bits and
    /// four times beyond. So turning borrowing on may double it. The default,
    /// [`DEFAULT_TENANT_CACHE`] tenants, is 1.2 MB at N = 8 and k = 2.
    pub fn tenant_cache(mut self, entries: usize) -> Self {
        self.cache = entries;
        self
    }

    /// The time source; [`ManualClock`](crate::ManualClock) for tests.
    pub fn clock<D: Clock>(self, clock: D) -> Builder<D> {
        Builder {
            quota: self.quota,
            buckets: self.buckets,
            max_buckets: self.max_buckets,
            per_tenant: self.per_tenant,
            salt: self.salt,
            spill: self.spill,
            reserve: self.reserve,
            per_user: self.per_user,
            tiers: self.tiers,
            tenant_tiers: self.tenant_tiers,
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
    /// A limiter whose [`isolation`](Limiter::isolation) is weak is built
    /// all the same, with a warning through `tracing` (feature `metrics`).
    pub fn build(self) -> Result<ShardedLimiter<C>, ConfigError> {
        let limiter = ShardedLimiter::in_process(self.plan()?, self.clock);
        warn_if_weak(limiter.name(), &limiter.isolation());
        Ok(limiter)
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

    /// Validates everything but the storage: the core every store builds on.
    pub(crate) fn plan(&self) -> Result<Core, ConfigError> {
        let (quota, split, assignment) = self.checked()?;
        let max_buckets = self.max_buckets.unwrap_or(assignment.buckets());
        Ok(Core {
            metrics: Metrics::new(
                &self.name,
                quota,
                (assignment.buckets(), max_buckets),
                assignment.per_tenant(),
            ),
            cache: ShardCache::new(self.cache, &assignment, max_buckets),
            max_buckets,
            reserve: reserve_parts(self.reserve),
            shards: Shards {
                per_user: self.per_user.unwrap_or(assignment.per_tenant()),
                tiers: self.tier_shards(&assignment),
                assignment,
            },
            split: Arc::new(LiveSplit::new(quota, split)),
            name: self.name.clone(),
        })
    }

    /// Checks every setting as [`build`](Self::build) does, and builds
    /// nothing: no bucket, and no tenant cache, which may be sized for
    /// millions of tenants. For a config read ahead of building, or read
    /// again at a reload.
    ///
    /// ```
    /// use shuffle_limiter::{ConfigError, Quota, ShardedLimiter};
    ///
    /// let builder = ShardedLimiter::builder().quota(Quota::per_second(4)).buckets(8);
    /// assert_eq!(builder.validate(), Err(ConfigError::BurstTooSmall { burst: 4, buckets: 8 }));
    /// assert!(builder.quota(Quota::per_second(8)).validate().is_ok());
    /// ```
    ///
    /// # Errors
    /// The [`ConfigError`] that [`build`](Self::build) would return.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.checked().map(drop)
    }

    /// Checks every setting without allocating the tenant cache, whose size
    /// is one of the settings checked.
    pub(crate) fn checked(&self) -> Result<(Quota, Split, Assignment), ConfigError> {
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
        if let Some(max_buckets) = self.max_buckets {
            if max_buckets < buckets {
                return Err(ConfigError::MaxBucketsBelowBuckets {
                    max_buckets,
                    buckets,
                });
            }
            if max_buckets > MAX_BUCKETS {
                return Err(ConfigError::TooManyBuckets {
                    buckets: max_buckets,
                    max: MAX_BUCKETS,
                });
            }
        }
        if per_tenant == 0 {
            return Err(ConfigError::ZeroPerTenant);
        }
        fits_per_tenant(per_tenant, buckets)?;
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
        fits_spill(self.spill, per_tenant, buckets)?;
        for (tier, k) in &self.tiers {
            fits_tier(tier, *k, self.spill, buckets)?;
            if let Some(per_user) = self.per_user
                && *k < per_user
            {
                return Err(ConfigError::TierPerUser {
                    tier: tier.clone(),
                    per_tenant: *k,
                    per_user,
                });
            }
        }
        let tiered = self.tiered_tenants();
        if let Some((_, tier)) = (tiered.iter()).find(|(_, t)| self.tier_per_tenant(t).is_none()) {
            return Err(ConfigError::UnknownTier {
                tier: (*tier).to_owned(),
            });
        }
        if tiered.len() > MAX_TIERED_TENANTS {
            return Err(ConfigError::TooManyTieredTenants {
                tenants: tiered.len(),
                max: MAX_TIERED_TENANTS,
            });
        }
        if let Some(per_user) = self.per_user
            && !(1..=per_tenant).contains(&per_user)
        {
            return Err(ConfigError::PerUser {
                per_user,
                per_tenant,
            });
        }
        if !(0.0..1.0).contains(&self.reserve) {
            return Err(ConfigError::LenderReserve {
                reserve: self.reserve.to_string(),
            });
        }
        let split = Split::of(quota, buckets)?;
        let assignment = Assignment::new(buckets, per_tenant, &self.salt)
            .and_then(|a| a.with_spill(self.spill))
            .expect("bucket, shard and spill counts were checked above");
        Ok((quota, split, assignment))
    }
}

impl<C> Builder<C> {
    /// The buckets per tenant of the tier named `name`, the last definition
    /// winning.
    fn tier_per_tenant(&self, name: &str) -> Option<u32> {
        self.tiers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|&(_, k)| k)
    }

    /// Each tenant given a tier, with the last tier it was given.
    fn tiered_tenants(&self) -> Vec<(&[u8], &str)> {
        let mut seen = std::collections::HashSet::new();
        let mut tiered: Vec<_> = (self.tenant_tiers.iter().rev())
            .filter(|(tenant, _)| seen.insert(tenant.as_slice()))
            .map(|(tenant, tier)| (tenant.as_slice(), tier.as_str()))
            .collect();
        tiered.reverse();
        tiered
    }

    /// The shard of every tenant given a tier, worked out once: the top k'
    /// of the same ranking, so it holds the tenant's shard of k (if k' ≥ k).
    /// The tiers were validated.
    fn tier_shards(&self, assignment: &Assignment) -> Tiers {
        let tenants = self.tiered_tenants();
        let tiered = tenants.iter().filter_map(|&(tenant, tier)| {
            let k = self.tier_per_tenant(tier)?;
            let seed = assignment.seed(tenant);
            let tiered = Tiered {
                shard: assignment.top(seed, assignment.buckets(), k),
                seed,
                per_tenant: k,
            };
            Some((Box::from(tenant), tiered))
        });
        let widest = (tenants.iter())
            .filter_map(|&(_, tier)| Some((tier.to_owned(), self.tier_per_tenant(tier)?)))
            .max_by_key(|&(_, k)| k);
        Tiers::new(tiered, widest)
    }
}

/// The reserve as the draw counts it, in units of 2⁻³² of a capacity,
/// rounded up: the owners keep at least the share asked for, but for the
/// part's rounding where the share is a whole number of tokens
/// (`ShardShape::reserve_of`).
fn reserve_parts(reserve: f64) -> u32 {
    (reserve * 4_294_967_296.0).ceil().min(f64::from(u32::MAX)) as u32
}

impl ShardedLimiter<MonotonicClock> {
    /// A builder with the default clock; see [`Builder`] for the defaults.
    pub fn builder() -> Builder<MonotonicClock> {
        Builder {
            quota: None,
            buckets: None,
            max_buckets: None,
            per_tenant: None,
            salt: Vec::new(),
            spill: 0,
            reserve: DEFAULT_LENDER_RESERVE,
            per_user: None,
            tiers: Vec::new(),
            tenant_tiers: Vec::new(),
            cache: DEFAULT_TENANT_CACHE,
            name: "default".to_owned(),
            clock: MonotonicClock::new(),
        }
    }
}

impl<C: Clock> ShardedLimiter<C> {
    /// The in-process limiter over `core`, its buckets full, reading
    /// `clock`: what [`Builder::build`] makes, and a Redis limiter's local
    /// fallback.
    pub(crate) fn in_process(core: Core, clock: C) -> Self {
        let store = InProcess::new(core.buckets(), core.max_buckets, clock);
        Limiter::new(core, store)
    }
}

#[cfg(test)]
#[path = "builder_tests.rs"]
mod tests;
