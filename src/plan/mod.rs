//! The plan: what every limiter is apart from where its buckets live,
//! validated once. The quota and its split over the buckets (changed live:
//! `live.rs`), how shards are found (the assignment, tiers: `tiers.rs`, the
//! users' j), one type for who draws (`whom.rs`), the tenant cache, the name
//! and the metrics handles; and what a plan promises about isolation
//! (`isolation.rs`). Both stores take a plan; neither defines one.

use std::sync::Arc;

pub(crate) mod isolation;
pub(crate) mod live;
pub(crate) mod tiers;
pub(crate) mod whom;

use self::live::LiveSplit;
use self::tiers::Tiers;
use self::whom::{Id, Whom};
use crate::assign::{Assignment, MAX_PER_TENANT, ShardCache};
use crate::draw::{Pace, ShardShape};
use crate::error::ConfigError;
use crate::metrics::Metrics;
use crate::quota::Quota;
use crate::request::Request;
use crate::{Denied, Grant, Shard};

/// The longest a bucket may take to refill: 2^62 ns, about 146 years, which
/// leaves room for the clock itself in 64-bit nanoseconds.
pub(crate) const MAX_SPAN: u64 = 1 << 62;

/// The latest clock reading a store uses, in nanoseconds: later readings
/// count as this one, so that an arrival time (at most a reading plus one
/// bucket's capacity, itself at most [`MAX_SPAN`]) never overflows 64 bits.
/// A clock stuck there is a stopped clock: it grants a burst, then nothing.
pub(crate) const MAX_NOW: u64 = u64::MAX - MAX_SPAN;

/// How a quota is divided over the buckets: every bucket gets the same pace,
/// and the burst is split in whole tokens, the first `B mod N` buckets holding
/// one more than the rest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Split {
    /// N: the buckets the quota is split over (live: see `set_buckets`).
    pub(crate) buckets: u32,
    /// One token per ⌈period · N / count⌉ ns, per bucket.
    pub(crate) pace: Pace,
    /// Every bucket holds at least this many tokens (⌊B / N⌋).
    pub(crate) burst: u32,
    /// This many buckets, the lowest-numbered, hold one token more.
    pub(crate) larger: u32,
}

impl Split {
    /// The quota split over `buckets`, or the first reason it cannot be.
    /// (Not called `new`: cargo-mutants leaves functions of that name alone,
    /// and this one holds the arithmetic; see TESTING.md.)
    pub(crate) fn of(quota: Quota, buckets: u32) -> Result<Split, ConfigError> {
        if quota.count() == 0 {
            return Err(ConfigError::ZeroCount);
        }
        if quota.period().is_zero() {
            return Err(ConfigError::ZeroPeriod);
        }
        if quota.burst() == 0 {
            return Err(ConfigError::ZeroBurst { buckets });
        }
        if quota.burst() < buckets {
            return Err(ConfigError::BurstTooSmall {
                burst: quota.burst(),
                buckets,
            });
        }
        let period = quota.period().as_nanos();
        let count = u128::from(quota.count());
        let exact = period * u128::from(buckets);
        // Below one token per nanosecond per bucket, rounding the interval
        // up to 1 ns would silently cut the rate (to 23 % of R for
        // u32::MAX per second on one bucket).
        if exact < count {
            return Err(ConfigError::RateTooHigh {
                buckets,
                min_buckets: u32::try_from(count.div_ceil(period)).unwrap_or(u32::MAX),
            });
        }
        let interval = exact.div_ceil(count);
        let burst = quota.burst() / buckets;
        let larger = quota.burst() % buckets;
        // The most a request can weigh is the whole burst (more never
        // fits), and its cost is its tokens at one bucket's pace: within
        // MAX_SPAN, so is every bucket's capacity and every cost.
        let heaviest = interval * u128::from(quota.burst());
        if heaviest > u128::from(MAX_SPAN) {
            return Err(ConfigError::Overflow {
                refill_secs: heaviest / 1_000_000_000,
            });
        }
        Ok(Split {
            buckets,
            pace: Pace::every(interval as u64),
            burst,
            larger,
        })
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // the Redis store's
    /// The same split with the interval rounded up to a whole multiple of
    /// `unit` nanoseconds, for a store that counts time in coarser units:
    /// each bucket's rate can only go down.
    pub(crate) fn coarsened(self, unit: u64) -> Split {
        Split {
            pace: Pace::every(self.interval().div_ceil(unit) * unit),
            ..self
        }
    }

    /// Nanoseconds between two tokens of one bucket.
    #[inline]
    pub(crate) fn interval(&self) -> u64 {
        self.pace.interval()
    }

    /// The tokens bucket `i` holds when full.
    #[inline]
    pub(crate) fn burst_of(&self, bucket: u32) -> u32 {
        self.burst + u32::from(bucket < self.larger)
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // the Redis store's
    /// The full bursts of the shard's buckets, own then spill, in shard
    /// order (the first k + d entries).
    #[inline]
    pub(crate) fn bursts(&self, shard: &Shard) -> [u32; MAX_PER_TENANT as usize] {
        let mut bursts = [0; MAX_PER_TENANT as usize];
        for (burst, &b) in bursts.iter_mut().zip(shard.ranked()) {
            *burst = self.burst_of(b);
        }
        bursts
    }

    /// Whether the shard's own buckets together could ever pay for `n`
    /// tokens.
    pub(crate) fn check_weight(&self, shard: &Shard, n: u32) -> Result<(), Denied> {
        let most = shard
            .buckets()
            .iter()
            .fold(0u32, |sum, &b| sum.saturating_add(self.burst_of(b)));
        never_fits(shard, n, most, false)
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // the Redis store's
    /// Whether one of the shard's own buckets alone could ever pay for `n`
    /// tokens, for a store that cannot take from several at once.
    pub(crate) fn check_weight_alone(&self, shard: &Shard, n: u32) -> Result<(), Denied> {
        let most = shard.buckets().iter().map(|&b| self.burst_of(b)).max();
        never_fits(shard, n, most.unwrap_or(0), true)
    }
}

/// The denial of `n` tokens on `shard` when at most `most` fit.
fn never_fits(shard: &Shard, n: u32, most: u32, alone: bool) -> Result<(), Denied> {
    if n > most {
        let bucket = shard.buckets().first().copied().unwrap_or(0);
        return Err(Denied::never_fits(n, most, bucket, alone));
    }
    Ok(())
}

/// k buckets per tenant fit in `buckets`, or the error saying so. (With
/// [`fits_spill`] and [`fits_tier`], the rules a shard's sizes obey, checked
/// when a limiter is built and when its N changes.)
pub(crate) fn fits_per_tenant(per_tenant: u32, buckets: u32) -> Result<(), ConfigError> {
    if per_tenant > buckets {
        return Err(ConfigError::PerTenantExceedsBuckets {
            per_tenant,
            buckets,
        });
    }
    Ok(())
}

/// k own and d spill buckets fit in `buckets` and in a shard, for a k that
/// does ([`fits_per_tenant`], at most [`MAX_PER_TENANT`]).
pub(crate) fn fits_spill(spill: u32, per_tenant: u32, buckets: u32) -> Result<(), ConfigError> {
    let most = buckets.min(MAX_PER_TENANT).saturating_sub(per_tenant);
    if spill > most {
        return Err(ConfigError::SpillTooLarge {
            spill,
            per_tenant,
            max: most,
        });
    }
    Ok(())
}

/// A tier of k' buckets per tenant, at least one, fits in `buckets` and in
/// a shard beside the d spill buckets.
pub(crate) fn fits_tier(
    tier: &str,
    per_tenant: u32,
    spill: u32,
    buckets: u32,
) -> Result<(), ConfigError> {
    let most = buckets.min(MAX_PER_TENANT).saturating_sub(spill);
    if !(1..=most).contains(&per_tenant) {
        return Err(ConfigError::TierPerTenant {
            tier: tier.to_owned(),
            per_tenant,
            max: most,
        });
    }
    Ok(())
}

/// Everything a limiter is apart from where its buckets live.
#[derive(Debug)]
pub(crate) struct Core {
    /// The quota, N and their split over the buckets, changeable while
    /// checks run.
    /// (Shared with a Redis store, which learns of changes from Redis.)
    pub(crate) split: Arc<LiveSplit>,
    /// How a tenant's or a user's shard is found under any N.
    pub(crate) shards: Shards,
    /// The most buckets N may grow to while running.
    pub(crate) max_buckets: u32,
    pub(crate) cache: ShardCache,
    /// The lender's reserve, in units of 2⁻³² of a bucket's capacity
    /// (meaningful only when tenants have spill buckets).
    pub(crate) reserve: u32,
    pub(crate) name: String,
    pub(crate) metrics: Metrics,
}

/// How shards are found: the assignment, the tiers and the users' j, for
/// any N. (A Redis store keeps a copy, to resolve a shard again when another
/// process changed N.)
#[derive(Debug, Clone)]
pub(crate) struct Shards {
    /// The assignment under the N the limiter was built with; shards under
    /// the N of the moment come from [`Assignment::shard_in`].
    pub(crate) assignment: Assignment,
    /// The shards of tenants given a tier.
    pub(crate) tiers: Tiers,
    /// j: buckets per user of a tenant, in nested checks.
    pub(crate) per_user: u32,
}

impl Shards {
    /// The tenant's shard among `buckets` buckets, from `cache` when it was
    /// seen recently.
    #[inline]
    pub(crate) fn tenant(&self, tenant: &[u8], buckets: u32, cache: &ShardCache) -> Shard {
        if let Some(shard) = self.tiers.get(tenant, buckets, &self.assignment) {
            return shard;
        }
        cache.get_or_assign(tenant, &self.assignment, buckets)
    }

    /// The buckets `user` of `tenant` draws from among `buckets` buckets:
    /// its j of the tenant's shard, then the tenant's spill buckets.
    pub(crate) fn user(
        &self,
        tenant: &[u8],
        user: &[u8],
        buckets: u32,
        cache: &ShardCache,
    ) -> Shard {
        let seed = self.assignment.user_seed(tenant, user);
        self.tenant(tenant, buckets, cache)
            .subset(seed, self.per_user)
    }

    /// The split of `quota` over `buckets` buckets if a limiter with room
    /// for `max_buckets` can have that many: no more than its room, enough
    /// for every shard.
    pub(crate) fn split_over(
        &self,
        quota: Quota,
        buckets: u32,
        max_buckets: u32,
    ) -> Result<Split, ConfigError> {
        if buckets == 0 {
            return Err(ConfigError::ZeroBuckets);
        }
        if buckets > max_buckets {
            return Err(ConfigError::BucketsAboveMax {
                buckets,
                max_buckets,
            });
        }
        let assignment = &self.assignment;
        let (per_tenant, spill) = (assignment.per_tenant(), assignment.spill());
        fits_per_tenant(per_tenant, buckets)?;
        fits_spill(spill, per_tenant, buckets)?;
        if let Some((tier, k)) = self.tiers.widest() {
            fits_tier(tier, k, spill, buckets)?;
        }
        Split::of(quota, buckets)
    }

    /// `id`'s shard among `buckets` buckets; `None` for a fixed shard.
    pub(crate) fn of(&self, id: Id<'_>, buckets: u32, cache: &ShardCache) -> Option<Shard> {
        match id {
            Id::Tenant(tenant) => Some(self.tenant(tenant, buckets, cache)),
            Id::User(tenant, user) => Some(self.user(tenant, user, buckets, cache)),
            Id::Fixed => None,
        }
    }
}

impl Core {
    /// The quota now.
    pub(crate) fn quota(&self) -> Quota {
        self.split.quota()
    }

    /// N now.
    #[inline]
    pub(crate) fn buckets(&self) -> u32 {
        self.split.buckets()
    }

    /// The assignment under N now.
    pub(crate) fn assignment(&self) -> Assignment {
        self.shards.assignment.resized(self.buckets())
    }

    /// The split of `quota` over `buckets` buckets if this limiter can have
    /// that many: no more than its room, enough for every shard.
    pub(crate) fn split_over(&self, quota: Quota, buckets: u32) -> Result<Split, ConfigError> {
        self.shards.split_over(quota, buckets, self.max_buckets)
    }

    /// The tenant's shard under N now, with what resolves it again under
    /// another.
    #[inline]
    pub(crate) fn tenant<'a>(&self, tenant: &'a [u8]) -> Whom<'a> {
        let buckets = self.buckets();
        // Tiers out of line, and a whole `Whom` from each path: a shard
        // merged from two paths and then moved into the `Whom` was copied
        // by loads wider than the stores that had just built it, a stall.
        if self.shards.tiers.any() {
            return self.tiered(tenant, buckets);
        }
        Whom {
            shard: (self.cache).get_or_assign(tenant, &self.shards.assignment, buckets),
            buckets,
            id: Id::Tenant(tenant),
        }
    }

    /// [`tenant`](Self::tenant) for a limiter with tiers.
    #[inline(never)]
    fn tiered<'a>(&self, tenant: &'a [u8], buckets: u32) -> Whom<'a> {
        Whom {
            shard: self.shards.tenant(tenant, buckets, &self.cache),
            buckets,
            id: Id::Tenant(tenant),
        }
    }

    /// Whose buckets `request` draws on: its tenant's, or its user's.
    #[inline]
    pub(crate) fn whom<'a>(&self, request: &'a Request<'_>) -> Whom<'a> {
        match Id::of(request) {
            Id::User(tenant, user) => self.user(tenant, user),
            _ => self.tenant(request.tenant_id()),
        }
    }

    /// The user's shard under N now, with what resolves it again.
    pub(crate) fn user<'a>(&self, tenant: &'a [u8], user: &'a [u8]) -> Whom<'a> {
        let buckets = self.buckets();
        let shard = self.shards.user(tenant, user, buckets, &self.cache);
        Whom {
            shard,
            buckets,
            id: Id::User(tenant, user),
        }
    }

    /// `whom`'s shard among `buckets` buckets: the one it holds if it was
    /// resolved under that N, else resolved again (a fixed shard stays as
    /// it is).
    #[cold]
    pub(crate) fn resolve_again(&self, whom: &Whom<'_>, buckets: u32) -> Shard {
        if whom.buckets == buckets {
            return whom.shard;
        }
        (self.shards.of(whom.id, buckets, &self.cache)).unwrap_or(whom.shard)
    }

    /// `whom`'s shard under the N in force: the one it holds, unless N
    /// changed since it was resolved (a handle made before the change).
    #[inline]
    pub(crate) fn shard_now(&self, whom: &Whom<'_>) -> Shard {
        match self.buckets() {
            buckets if buckets == whom.buckets => whom.shard,
            buckets => self.resolve_again(whom, buckets),
        }
    }

    /// How the draw sees the shard: its own and spill buckets, and the
    /// reserve lenders keep.
    #[inline]
    pub(crate) fn shape(&self, shard: &Shard) -> ShardShape {
        ShardShape {
            own: shard.buckets().len(),
            spill: shard.spill().len(),
            reserve: u64::from(self.reserve),
        }
    }

    /// Counts a decision in the metrics (nothing without the feature).
    #[inline]
    pub(crate) fn record(&self, result: &Result<Grant, Denied>) {
        self.metrics.record(result);
    }

    /// Counts a grant that `bucket` paid, as [`record`](Self::record).
    #[inline]
    pub(crate) fn granted(&self, bucket: u32) {
        self.metrics.granted(bucket);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::Assignment;

    #[test]
    fn a_coarser_store_rounds_the_interval_up_to_its_unit() {
        // 7 per 3 s over 5 buckets: 2 142 857 143 ns, not whole microseconds.
        let split = Split::of(Quota::new(7, Duration::from_secs(3)).with_burst(15), 5).unwrap();
        assert_eq!(split.interval(), 2_142_857_143);
        let micros = split.coarsened(1_000);
        assert_eq!(micros.interval(), 2_142_858_000);
        assert_eq!((micros.burst, micros.larger), (split.burst, split.larger));
        // A whole number of units is kept as it is.
        assert_eq!(micros.coarsened(1_000), micros);
        assert_eq!(split.coarsened(1), split);
    }

    #[test]
    fn a_shard_reads_the_bursts_of_its_own_buckets_in_order() {
        // 10 over 4 buckets: 3, 3, 2, 2.
        let split = Split::of(Quota::per_second(10), 4).unwrap();
        let assignment = Assignment::new(4, 4, b"").unwrap();
        let shard = assignment.shard("t");
        let bursts = split.bursts(&shard);
        for (j, &b) in shard.buckets().iter().enumerate() {
            assert_eq!(bursts[j], if b < 2 { 3 } else { 2 }, "{shard:?}");
        }
        assert_eq!(bursts[4..], [0; 4]);
        // Together they pay up to the sum of their bursts.
        assert_eq!(split.check_weight(&shard, 10), Ok(()));
        let err = split.check_weight(&shard, 11).unwrap_err();
        let reason = crate::DenialReason::NeverFits {
            asked: 11,
            most: 10,
        };
        assert_eq!((err.reason(), err.retry_after()), (reason, Duration::MAX));
        // A store that takes from one bucket at a time: the largest alone.
        assert_eq!(split.check_weight_alone(&shard, 3), Ok(()));
        let err = split.check_weight_alone(&shard, 4).unwrap_err();
        let reason = crate::DenialReason::NeverFits { asked: 4, most: 3 };
        assert_eq!((err.reason(), err.retry_after()), (reason, Duration::MAX));
        assert_eq!(err.bucket(), shard.buckets()[0]);
        assert!(err.to_string().contains("one bucket"), "{err}");
    }
}
