//! Errors: a bad configuration, and a request that can never be granted.

use std::fmt;

/// Why [`Builder::build`](crate::Builder::build) refused a configuration.
///
/// Every message names what was wrong and what to change.
///
/// ```
/// use shuffle_limiter::{ConfigError, Quota, ShardedLimiter};
///
/// let err = ShardedLimiter::builder()
///     .quota(Quota::per_second(5))
///     .buckets(8)
///     .build()
///     .unwrap_err();
/// assert_eq!(err, ConfigError::BurstTooSmall { burst: 5, buckets: 8 });
/// assert!(err.to_string().contains("raise the burst to at least 8"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// `.quota(..)` was never called.
    MissingQuota,
    /// The quota allows zero requests per period.
    ZeroCount,
    /// The quota's period is zero.
    ZeroPeriod,
    /// Zero buckets were asked for.
    ZeroBuckets,
    /// More buckets than the limiter supports.
    TooManyBuckets {
        /// The number asked for.
        buckets: u32,
        /// The largest number supported.
        max: u32,
    },
    /// Zero buckets per tenant were asked for.
    ZeroPerTenant,
    /// Each tenant would need more buckets than there are.
    PerTenantExceedsBuckets {
        /// Buckets per tenant asked for (k).
        per_tenant: u32,
        /// Buckets in all (N).
        buckets: u32,
    },
    /// More buckets per tenant than the limiter supports.
    TooManyPerTenant {
        /// Buckets per tenant asked for (k).
        per_tenant: u32,
        /// The largest number supported.
        max: u32,
    },
    /// The quota's burst is zero: it could never grant anything.
    ZeroBurst {
        /// Buckets in all (N).
        buckets: u32,
    },
    /// The burst cannot give every bucket at least one token.
    BurstTooSmall {
        /// The quota's burst (B).
        burst: u32,
        /// Buckets in all (N).
        buckets: u32,
    },
    /// Each bucket would have to emit more than one token per nanosecond,
    /// which its clock cannot time: the real rate would fall short of R.
    RateTooHigh {
        /// Buckets in all (N).
        buckets: u32,
        /// The fewest buckets that keep each at one token per nanosecond or
        /// slower.
        min_buckets: u32,
    },
    /// The period is so long (or the rate so low) that the cost of a request
    /// as heavy as the burst would overflow 64-bit nanoseconds.
    Overflow {
        /// The time the whole burst takes to come back at one bucket's
        /// pace (the cost of the heaviest request), in seconds.
        refill_secs: u128,
    },
    /// The spill set asked for would give a tenant more buckets, own and
    /// spill together, than there are or than a shard holds.
    SpillTooLarge {
        /// Spill buckets asked for (d).
        spill: u32,
        /// Own buckets per tenant (k).
        per_tenant: u32,
        /// The largest d: min(N, 8) − k.
        max: u32,
    },
    /// The buckets per user are not between 1 and the buckets per tenant.
    PerUser {
        /// Buckets per user asked for (j).
        per_user: u32,
        /// Buckets per tenant (k).
        per_tenant: u32,
    },
    /// A tier would give its tenants no buckets, or more than there are (with
    /// the spill set) or than a shard holds.
    TierPerTenant {
        /// The tier's name.
        tier: String,
        /// Buckets per tenant asked for the tier.
        per_tenant: u32,
        /// The largest number possible: min(N, 8) − d.
        max: u32,
    },
    /// A tier would give its tenants fewer buckets than each of their users
    /// draws from ([`Builder::per_user`](crate::Builder::per_user)): every
    /// user would have the whole tier.
    TierPerUser {
        /// The tier's name.
        tier: String,
        /// Buckets per tenant of the tier (k').
        per_tenant: u32,
        /// Buckets per user (j).
        per_user: u32,
    },
    /// A tenant was put in a tier that was never defined.
    UnknownTier {
        /// The tier's name as given.
        tier: String,
    },
    /// More tenants were given a tier than a limiter keeps.
    TooManyTieredTenants {
        /// Tenants given a tier.
        tenants: usize,
        /// The largest number supported.
        max: usize,
    },
    /// The lender's reserve is not a share in 0 ≤ r < 1.
    LenderReserve {
        /// The value given, as written.
        reserve: String,
    },
    /// The room to grow N asked for is less than N itself.
    MaxBucketsBelowBuckets {
        /// The most buckets asked for.
        max_buckets: u32,
        /// Buckets in all (N).
        buckets: u32,
    },
    /// A running limiter was asked for more buckets than it was built with
    /// room for.
    BucketsAboveMax {
        /// Buckets asked for (N).
        buckets: u32,
        /// The most the limiter has room for.
        max_buckets: u32,
    },
    /// The tenant cache asked for is larger than supported.
    CacheTooLarge {
        /// Entries asked for.
        entries: usize,
        /// The largest number supported.
        max: usize,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ConfigError::MissingQuota => {
                f.write_str("no quota was set: call .quota(Quota::per_second(..)) on the builder")
            }
            ConfigError::ZeroCount => {
                f.write_str("the quota allows 0 requests per period: use a count of at least 1")
            }
            ConfigError::ZeroPeriod => {
                f.write_str("the quota's period is zero: use a period of at least 1 ns")
            }
            ConfigError::ZeroBuckets => {
                f.write_str("buckets(0): a limiter needs at least 1 bucket")
            }
            ConfigError::TooManyBuckets { buckets, max } => write!(
                f,
                "buckets({buckets}) is more than the {max} supported: use at most {max} buckets"
            ),
            ConfigError::ZeroPerTenant => {
                f.write_str("per_tenant(0): each tenant needs at least 1 bucket")
            }
            ConfigError::PerTenantExceedsBuckets {
                per_tenant,
                buckets,
            } => write!(
                f,
                "per_tenant({per_tenant}) is more than the {buckets} buckets: \
                 use per_tenant of at most {buckets}, or more buckets"
            ),
            ConfigError::TooManyPerTenant { per_tenant, max } => write!(
                f,
                "per_tenant({per_tenant}) is more than the {max} supported: \
                 use per_tenant of at most {max}"
            ),
            ConfigError::ZeroBurst { buckets } => write!(
                f,
                "a burst of 0 could never grant a request: use .with_burst(n) with n of at \
                 least {buckets}, one token for each of the {buckets} buckets"
            ),
            ConfigError::RateTooHigh {
                buckets,
                min_buckets,
            } => write!(
                f,
                "the quota gives each of the {buckets} buckets more than one token per \
                 nanosecond, faster than a bucket can be timed: use at least {min_buckets} \
                 buckets (with a burst at least as large), or a lower count per period"
            ),
            ConfigError::BurstTooSmall { burst, buckets } => write!(
                f,
                "a burst of {burst} cannot give each of the {buckets} buckets a token: \
                 raise the burst to at least {buckets} or use at most {burst} buckets"
            ),
            ConfigError::Overflow { refill_secs } => write!(
                f,
                "the whole burst would take {refill_secs} s to come back at one bucket's pace, \
                 beyond 64-bit nanoseconds (about 146 years): use a shorter period, a higher \
                 count or a smaller burst"
            ),
            ConfigError::SpillTooLarge {
                spill,
                per_tenant,
                max,
            } => write!(
                f,
                "borrow_from({spill}) with per_tenant({per_tenant}) gives each tenant {} buckets, \
                 more than the buckets there are or the 8 a shard holds: use borrow_from of \
                 at most {max}",
                // In 64 bits: a config may give any two u32s.
                u64::from(spill) + u64::from(per_tenant)
            ),
            ConfigError::PerUser {
                per_user,
                per_tenant,
            } => write!(
                f,
                "per_user({per_user}) must be one of a tenant's {per_tenant} buckets or more, \
                 up to all of them: use per_user from 1 to {per_tenant} (or raise per_tenant)"
            ),
            ConfigError::TierPerTenant {
                ref tier,
                per_tenant,
                max,
            } => write!(
                f,
                "tier({tier:?}, {per_tenant}) cannot give its tenants {per_tenant} buckets: \
                 use from 1 to {max} (at most the buckets there are and the 8 a shard \
                 holds, less the spill set)"
            ),
            ConfigError::TierPerUser {
                ref tier,
                per_tenant,
                per_user,
            } => write!(
                f,
                "tier({tier:?}, {per_tenant}) is narrower than per_user({per_user}): each \
                 user of its tenants would draw from the whole tier; give the tier at least \
                 {per_user} buckets (or lower per_user)"
            ),
            ConfigError::UnknownTier { ref tier } => write!(
                f,
                "tenant_tier(.., {tier:?}) names a tier that was never defined: define it \
                 with tier({tier:?}, k) or fix the name"
            ),
            ConfigError::TooManyTieredTenants { tenants, max } => write!(
                f,
                "{tenants} tenants were given a tier, more than the {max} a limiter keeps: \
                 give tiers to at most {max} tenants"
            ),
            ConfigError::LenderReserve { ref reserve } => write!(
                f,
                "lender_reserve({reserve}) is not a share of a bucket's burst: use a value \
                 from 0 (lend everything) up to but not including 1, such as 0.5"
            ),
            ConfigError::MaxBucketsBelowBuckets {
                max_buckets,
                buckets,
            } => write!(
                f,
                "max_buckets({max_buckets}) is fewer than the {buckets} buckets: \
                 raise it to at least {buckets}, or leave it unset to keep N as built"
            ),
            ConfigError::BucketsAboveMax {
                buckets,
                max_buckets,
            } => write!(
                f,
                "{buckets} buckets are more than the {max_buckets} this limiter has room for: \
                 build it with .max_buckets({buckets}) (`max_buckets` in a LimiterSet config) \
                 to grow it to {buckets} while running"
            ),
            ConfigError::CacheTooLarge { entries, max } => write!(
                f,
                "tenant_cache({entries}) is more than the {max} entries supported: \
                 use at most {max}"
            ),
        }
    }
}

impl std::error::Error for ConfigError {}

/// A refund of more tokens than the grant took.
///
/// ```
/// use shuffle_limiter::{Quota, Request, ShardedLimiter};
///
/// let limiter = ShardedLimiter::builder().quota(Quota::per_second(10)).build()?;
/// let mut grant = limiter.check(Request::tenant("t").tokens(2)).unwrap();
/// let err = grant.part(3).unwrap_err();
/// assert_eq!((err.requested(), err.granted()), (3, 2));
/// # Ok::<(), shuffle_limiter::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefundTooLarge {
    pub(crate) requested: u32,
    pub(crate) granted: u32,
}

impl RefundTooLarge {
    /// The tokens asked to be given back.
    pub fn requested(&self) -> u32 {
        self.requested
    }

    /// The tokens the grant took.
    pub fn granted(&self) -> u32 {
        self.granted
    }
}

impl fmt::Display for RefundTooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot refund {} tokens: the grant took {}; refund at most what it took",
            self.requested, self.granted
        )
    }
}

impl std::error::Error for RefundTooLarge {}
