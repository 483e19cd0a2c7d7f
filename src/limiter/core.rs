//! The validated plan every limiter embeds, whatever its store: the quota and
//! how it is split over the buckets, the assignment, the tenant cache, the
//! name and the metrics handles.

use std::sync::Arc;

use super::live::LiveSplit;
use super::tiers::Tiers;
use crate::assign::{Assignment, MAX_PER_TENANT, ShardCache};
use crate::draw::{Pace, Span};
use crate::error::{ConfigError, InsufficientCapacity};
use crate::metrics::Metrics;
use crate::quota::Quota;
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
        let span = interval * u128::from(burst + u32::from(larger > 0));
        if span > u128::from(MAX_SPAN) {
            return Err(ConfigError::Overflow {
                refill_secs: span / 1_000_000_000,
            });
        }
        Ok(Split {
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
    pub(crate) fn check_weight(&self, shard: &Shard, n: u32) -> Result<(), InsufficientCapacity> {
        let max = shard
            .buckets()
            .iter()
            .fold(0u32, |sum, &b| sum.saturating_add(self.burst_of(b)));
        if n > max {
            return Err(InsufficientCapacity {
                requested: n,
                max,
                alone: false,
            });
        }
        Ok(())
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // the Redis store's
    /// Whether one of the shard's own buckets alone could ever pay for `n`
    /// tokens, for a store that cannot take from several at once.
    pub(crate) fn check_weight_alone(
        &self,
        shard: &Shard,
        n: u32,
    ) -> Result<(), InsufficientCapacity> {
        let max = shard
            .buckets()
            .iter()
            .map(|&b| self.burst_of(b))
            .max()
            .unwrap_or(0);
        if n > max {
            return Err(InsufficientCapacity {
                requested: n,
                max,
                alone: true,
            });
        }
        Ok(())
    }
}

/// Everything a limiter is apart from where its buckets live.
#[derive(Debug)]
pub(crate) struct Core {
    /// The quota and its split over the buckets, changeable while checks
    /// run.
    /// (Shared with a Redis store, which learns of changes from Redis.)
    pub(crate) split: Arc<LiveSplit>,
    pub(crate) assignment: Assignment,
    pub(crate) cache: ShardCache,
    /// The lender's reserve, in units of 2⁻³² of a bucket's capacity
    /// (meaningful only when tenants have spill buckets).
    pub(crate) reserve: u32,
    /// j: buckets per user of a tenant, in nested checks.
    pub(crate) per_user: u32,
    /// The shards of tenants given a tier.
    pub(crate) tiers: Tiers,
    pub(crate) name: String,
    pub(crate) metrics: Metrics,
}

impl Core {
    /// The quota now.
    pub(crate) fn quota(&self) -> Quota {
        self.split.quota()
    }

    /// The tenant's shard, from the cache when it was seen recently.
    #[inline]
    pub(crate) fn shard(&self, tenant: &[u8]) -> Shard {
        if let Some(shard) = self.tiers.get(tenant) {
            return shard;
        }
        self.cache.get_or_assign(tenant, &self.assignment)
    }

    /// The buckets `user` of `tenant` draws from in a nested check: its
    /// `per_user` of the tenant's shard (from the cache), then the tenant's
    /// spill buckets. Nothing per user is kept.
    pub(crate) fn user_shard(&self, tenant: &[u8], user: &[u8]) -> Shard {
        let seed = self.assignment.user_seed(tenant, user);
        self.shard(tenant).subset(seed, self.per_user)
    }

    /// How the draw sees the shard: its own and spill buckets, and the
    /// reserve lenders keep.
    #[inline]
    pub(crate) fn span(&self, shard: &Shard) -> Span {
        Span {
            own: shard.buckets().len(),
            spill: shard.spill().len(),
            reserve: self.reserve,
        }
    }

    /// Counts a decision in the metrics (nothing without the feature).
    #[inline]
    pub(crate) fn record(&self, result: &Result<Grant, Denied>) {
        self.metrics.record(result);
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
        assert_eq!((err.requested(), err.max()), (11, 10));
    }
}
