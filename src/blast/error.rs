//! Why a blast-radius question was rejected, in words that say what to change.

use std::fmt;

/// Why a [`BlastRadius`](super::BlastRadius) (or a question asked of one) was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum BlastError {
    /// `buckets` (`N`) was zero.
    NoBuckets,
    /// `per_tenant` (`k`) was zero.
    NoBucketsPerTenant {
        /// The number of buckets that was given.
        buckets: u32,
    },
    /// `per_tenant` (`k`) was larger than `buckets` (`N`).
    PerTenantExceedsBuckets {
        /// The number of buckets that was given.
        buckets: u32,
        /// The shard size that was given.
        per_tenant: u32,
    },
    /// More buckets were said to have failed than exist.
    FailedExceedsBuckets {
        /// The number of buckets.
        buckets: u32,
        /// The number of failed buckets that was given.
        failed: u32,
    },
    /// `per_tenant + spill` (`k + d`) was larger than `buckets` (`N`).
    SpillExceedsBuckets {
        /// The number of buckets.
        buckets: u32,
        /// The shard size.
        per_tenant: u32,
        /// The number of spill buckets that was given.
        spill: u32,
    },
    /// The lender's reserve was not a share in `0 ≤ r < 1`.
    ReserveOutOfRange,
    /// `per_user` (`j`) was 0 or larger than `per_tenant` (`k`).
    PerUserOutOfRange {
        /// The shard size.
        per_tenant: u32,
        /// The buckets per user that was given.
        per_user: u32,
    },
    /// A change of `N` to `to` buckets leaves fewer than the `k + d` each
    /// tenant ranks (`d = 0` without borrowing).
    ResizeTooSmall {
        /// The number of buckets after the change that was given.
        to: u32,
        /// The shard size.
        per_tenant: u32,
        /// The spill buckets per tenant.
        spill: u32,
    },
    /// The concurrency (`C`) of an in-flight limit was zero.
    NoConcurrency,
    /// The concurrency (`C`) was below the number of pools (`N`): every
    /// pool needs a permit.
    ConcurrencyBelowBuckets {
        /// The number of pools.
        buckets: u32,
        /// The concurrency that was given.
        concurrency: u32,
    },
}

impl fmt::Display for BlastError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BlastError::NoBuckets => {
                write!(
                    f,
                    "buckets is 0: a limiter needs at least 1 bucket, set buckets to 1 or more"
                )
            }
            BlastError::NoBucketsPerTenant { buckets } => write!(
                f,
                "per_tenant is 0: every tenant needs at least 1 bucket, \
                 set per_tenant between 1 and buckets ({buckets})"
            ),
            BlastError::PerTenantExceedsBuckets {
                buckets,
                per_tenant,
            } => write!(
                f,
                "per_tenant ({per_tenant}) is larger than buckets ({buckets}): \
                 a shard cannot hold more buckets than exist, \
                 lower per_tenant to at most {buckets} or raise buckets to at least {per_tenant}"
            ),
            BlastError::FailedExceedsBuckets { buckets, failed } => write!(
                f,
                "failed ({failed}) is larger than buckets ({buckets}): \
                 at most {buckets} buckets can fail, lower failed"
            ),
            BlastError::SpillExceedsBuckets {
                buckets,
                per_tenant,
                spill,
            } => write!(
                f,
                "spill ({spill}) with per_tenant ({per_tenant}) gives each tenant {} buckets, \
                 more than buckets ({buckets}): lower spill to at most {}",
                u64::from(spill) + u64::from(per_tenant),
                buckets - per_tenant
            ),
            BlastError::ReserveOutOfRange => write!(
                f,
                "the reserve is not a share of a bucket's burst: use a value from 0 \
                 (lend everything) up to but not including 1, such as 0.5"
            ),
            BlastError::PerUserOutOfRange {
                per_tenant,
                per_user,
            } => write!(
                f,
                "per_user is {per_user}: a user draws from 1 to per_tenant ({per_tenant}) of \
                 its tenant's buckets, set per_user between 1 and {per_tenant}"
            ),
            BlastError::ResizeTooSmall {
                to,
                per_tenant,
                spill: 0,
            } => write!(
                f,
                "resizing to {to} buckets leaves fewer than per_tenant ({per_tenant}), the \
                 shard size every tenant keeps: resize to at least {per_tenant} buckets"
            ),
            BlastError::ResizeTooSmall {
                to,
                per_tenant,
                spill,
            } => write!(
                f,
                "resizing to {to} buckets leaves fewer than the {} every tenant draws on \
                 (per_tenant {per_tenant} + spill {spill}): resize to at least {} buckets, \
                 or lower spill",
                u64::from(per_tenant) + u64::from(spill),
                u64::from(per_tenant) + u64::from(spill)
            ),
            BlastError::NoConcurrency => write!(
                f,
                "concurrency is 0: an in-flight limit needs at least 1 permit, set \
                 concurrency to 1 or more"
            ),
            BlastError::ConcurrencyBelowBuckets {
                buckets,
                concurrency,
            } => write!(
                f,
                "concurrency ({concurrency}) is below the {buckets} pools it is split into: \
                 every pool needs a permit, set concurrency to at least {buckets} or lower \
                 the pools to at most {concurrency}"
            ),
        }
    }
}

impl std::error::Error for BlastError {}
