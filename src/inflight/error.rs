//! Errors: a refused acquire, and a configuration that cannot work.

use std::fmt;
use std::time::Duration;

use crate::assign::{MAX_BUCKETS, MAX_CACHE_ENTRIES, MAX_PER_TENANT};

/// An acquire that got no permit, and why.
///
/// ```
/// use shuffle_limiter::inflight::{InFlight, RejectReason};
///
/// let inflight = InFlight::builder().concurrency(4).pools(2).per_tenant(1).build()?;
/// let _held = inflight.try_acquire("t")?; // its one pool of 2
/// let _also = inflight.try_acquire("t")?;
/// let busy = inflight.try_acquire("t").unwrap_err();
/// assert_eq!(busy.reason(), RejectReason::Busy);
/// assert!(busy.to_string().contains("wait with acquire"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Rejected {
    /// The reason in two whole words (see [`Rejected::new`]).
    words: [u64; 2],
}

/// Why an acquire got no permit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectReason {
    /// No pool of the tenant has the seats free now, or callers already
    /// wait for them ([`InFlight::try_acquire`](super::InFlight::try_acquire)
    /// never jumps a queue).
    Busy,
    /// The queues of the tenant's pools are full: each holds
    /// `max_queue` waiters, or those with room cannot hold the seats
    /// together.
    QueueFull {
        /// The most waiters one pool's queue holds.
        max_queue: u32,
    },
    /// The acquire waited as long as it was allowed to.
    TimedOut {
        /// The longest it could wait.
        max_wait: Duration,
    },
    /// The request asks for more seats than the tenant's pools hold
    /// together, when none is out: no wait serves it.
    NeverFits {
        /// The seats asked for.
        asked: u32,
        /// The most one request of this tenant (or user) can hold: the
        /// sum of its pools' permits.
        most: u32,
    },
    /// The request asks for no seat at all.
    ZeroSeats,
}

impl Rejected {
    /// The reason kept as two whole words, not as the enum: an acquire's
    /// `Result<Permit, Rejected>` lays the refusal over the permit's words,
    /// and the enum's 4-byte fields made the compiler move the permit in
    /// 4-byte halves, which stalled the wide loads of its release (a third
    /// of an uncontended acquire and release).
    pub(crate) fn new(reason: RejectReason) -> Rejected {
        let words = match reason {
            RejectReason::Busy => [0, 0],
            RejectReason::QueueFull { max_queue } => [1, u64::from(max_queue)],
            RejectReason::TimedOut { max_wait } => [
                2 | u64::from(max_wait.subsec_nanos()) << 32,
                max_wait.as_secs(),
            ],
            RejectReason::NeverFits { asked, most } => {
                [3 | u64::from(asked) << 32, u64::from(most)]
            }
            RejectReason::ZeroSeats => [4, 0],
        };
        Rejected { words }
    }

    /// Why the acquire got no permit.
    pub fn reason(&self) -> RejectReason {
        let [code, value] = self.words;
        let high = (code >> 32) as u32;
        match code as u8 {
            0 => RejectReason::Busy,
            1 => RejectReason::QueueFull {
                max_queue: value as u32,
            },
            2 => RejectReason::TimedOut {
                max_wait: Duration::new(value, high),
            },
            3 => RejectReason::NeverFits {
                asked: high,
                most: value as u32,
            },
            _ => RejectReason::ZeroSeats,
        }
    }
}

impl fmt::Debug for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rejected")
            .field("reason", &self.reason())
            .finish()
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason() {
            RejectReason::Busy => f.write_str(
                "no permit free in this tenant's pools: retry later, or wait with acquire(..)",
            ),
            RejectReason::QueueFull { max_queue } => write!(
                f,
                "the queues of this tenant's pools are full ({max_queue} waiters each): retry \
                 later, or raise max_queue"
            ),
            RejectReason::TimedOut { max_wait } => write!(
                f,
                "no permit came within {max_wait:?}: retry later, or wait longer with within(..)"
            ),
            RejectReason::NeverFits { asked, most } => write!(
                f,
                "a request of {asked} seats can never be served: this tenant's pools hold at \
                 most {most} together; split the request or raise the concurrency"
            ),
            RejectReason::ZeroSeats => {
                f.write_str("a request of 0 seats holds nothing: ask for at least 1 seat")
            }
        }
    }
}

impl std::error::Error for Rejected {}

/// Why [`Builder::build`](super::Builder::build) refused a configuration.
///
/// Every message names what was wrong and what to change.
///
/// ```
/// use shuffle_limiter::inflight::{BuildError, InFlight};
///
/// let err = InFlight::builder().concurrency(5).pools(8).build().unwrap_err();
/// assert_eq!(err, BuildError::ConcurrencyBelowPools { concurrency: 5, pools: 8 });
/// assert!(err.to_string().contains("use at most 5 pools"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// `.concurrency(..)` was never called.
    MissingConcurrency,
    /// A concurrency of 0 would never serve anything.
    ZeroConcurrency,
    /// Zero pools were asked for.
    ZeroPools,
    /// More pools than the assignment ranks.
    TooManyPools {
        /// The number asked for.
        pools: u32,
        /// The largest number supported.
        max: u32,
    },
    /// The concurrency cannot give every pool a permit.
    ConcurrencyBelowPools {
        /// The concurrency (C).
        concurrency: u32,
        /// Pools in all (N).
        pools: u32,
    },
    /// Zero pools per tenant were asked for.
    ZeroPerTenant,
    /// Each tenant would need more pools than there are.
    PerTenantExceedsPools {
        /// Pools per tenant asked for (k).
        per_tenant: u32,
        /// Pools in all (N).
        pools: u32,
    },
    /// More pools per tenant than a shard holds.
    TooManyPerTenant {
        /// Pools per tenant asked for (k).
        per_tenant: u32,
        /// The largest number supported.
        max: u32,
    },
    /// The pools per user are not between 1 and the pools per tenant.
    PerUser {
        /// Pools per user asked for (j).
        per_user: u32,
        /// Pools per tenant (k).
        per_tenant: u32,
    },
    /// The own and spill pools of a tenant are more than there are pools,
    /// or than a shard ranks.
    SpillExceedsPools {
        /// Pools per tenant (k).
        per_tenant: u32,
        /// Spill pools asked for (d).
        spill: u32,
        /// The most pools one tenant may rank: N, and at most 8.
        max: u32,
    },
    /// The lender's reserve is not a share in `0 ≤ r < 1`.
    LenderReserve {
        /// The value given, as text.
        reserve: String,
    },
    /// The tenant cache asked for is larger than supported.
    CacheTooLarge {
        /// Entries asked for.
        entries: usize,
        /// The largest number supported.
        max: usize,
    },
}

impl BuildError {
    /// The error for these counts, if any: the rules of a concurrency
    /// split into pools and of a shard of them.
    pub(crate) fn check(
        concurrency: u32,
        pools: u32,
        per_tenant: u32,
        per_user: Option<u32>,
        cache: usize,
    ) -> Result<(), BuildError> {
        let error = if concurrency == 0 {
            BuildError::ZeroConcurrency
        } else if pools == 0 {
            BuildError::ZeroPools
        } else if pools > MAX_BUCKETS {
            BuildError::TooManyPools {
                pools,
                max: MAX_BUCKETS,
            }
        } else if concurrency < pools {
            BuildError::ConcurrencyBelowPools { concurrency, pools }
        } else if per_tenant == 0 {
            BuildError::ZeroPerTenant
        } else if per_tenant > pools {
            BuildError::PerTenantExceedsPools { per_tenant, pools }
        } else if per_tenant > MAX_PER_TENANT {
            BuildError::TooManyPerTenant {
                per_tenant,
                max: MAX_PER_TENANT,
            }
        } else if let Some(per_user) = per_user.filter(|j| !(1..=per_tenant).contains(j)) {
            BuildError::PerUser {
                per_user,
                per_tenant,
            }
        } else if cache > MAX_CACHE_ENTRIES {
            BuildError::CacheTooLarge {
                entries: cache,
                max: MAX_CACHE_ENTRIES,
            }
        } else {
            return Ok(());
        };
        Err(error)
    }
}

impl BuildError {
    /// The error for these borrowing settings, if any.
    pub(crate) fn check_borrowing(
        pools: u32,
        per_tenant: u32,
        spill: u32,
        reserve: f64,
    ) -> Result<(), BuildError> {
        let max = pools.min(MAX_PER_TENANT);
        if spill == 0 {
            Ok(())
        } else if u64::from(per_tenant) + u64::from(spill) > u64::from(max) {
            Err(BuildError::SpillExceedsPools {
                per_tenant,
                spill,
                max,
            })
        } else if !(0.0..1.0).contains(&reserve) {
            Err(BuildError::LenderReserve {
                reserve: reserve.to_string(),
            })
        } else {
            Ok(())
        }
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            BuildError::MissingConcurrency => f.write_str(
                "no concurrency was set: call .concurrency(n) on the builder, n the most \
                 calls in flight at once",
            ),
            BuildError::ZeroConcurrency => f.write_str(
                "concurrency(0) would never let a call through: use a concurrency of at least 1",
            ),
            BuildError::ZeroPools => f.write_str("pools(0): a limit needs at least 1 pool"),
            BuildError::TooManyPools { pools, max } => write!(
                f,
                "pools({pools}) is more than the {max} supported: use at most {max} pools"
            ),
            BuildError::ConcurrencyBelowPools { concurrency, pools } => write!(
                f,
                "a concurrency of {concurrency} cannot give each of the {pools} pools a \
                 permit: raise the concurrency to at least {pools} or use at most \
                 {concurrency} pools"
            ),
            BuildError::ZeroPerTenant => {
                f.write_str("per_tenant(0): each tenant needs at least 1 pool")
            }
            BuildError::PerTenantExceedsPools { per_tenant, pools } => write!(
                f,
                "per_tenant({per_tenant}) is more than the {pools} pools: use per_tenant of \
                 at most {pools}, or more pools"
            ),
            BuildError::TooManyPerTenant { per_tenant, max } => write!(
                f,
                "per_tenant({per_tenant}) is more than the {max} supported: use per_tenant \
                 of at most {max}"
            ),
            BuildError::PerUser {
                per_user,
                per_tenant,
            } => write!(
                f,
                "per_user({per_user}) must be one of a tenant's {per_tenant} pools or more, \
                 up to all of them: use per_user from 1 to {per_tenant} (or raise per_tenant)"
            ),
            BuildError::SpillExceedsPools {
                per_tenant,
                spill,
                max,
            } => write!(
                f,
                "borrow_from({spill}) with per_tenant({per_tenant}) ranks {} pools per tenant, \
                 more than the {max} it may: use borrow_from of at most {}, or more pools",
                u64::from(per_tenant) + u64::from(spill),
                max.saturating_sub(per_tenant)
            ),
            BuildError::LenderReserve { ref reserve } => write!(
                f,
                "lender_reserve({reserve}) is not a share of a pool's permits: use a value \
                 from 0 (lend every permit) up to but not including 1, such as 0.5"
            ),
            BuildError::CacheTooLarge { entries, max } => write!(
                f,
                "tenant_cache({entries}) is more than the {max} entries supported: use at \
                 most {max}"
            ),
        }
    }
}

impl std::error::Error for BuildError {}
