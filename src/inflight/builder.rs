//! The builder of an in-flight limit: its settings, checked once.

use crate::assign::{Assignment, ShardCache};
use crate::{DEFAULT_BUCKETS, DEFAULT_LENDER_RESERVE, DEFAULT_PER_TENANT, DEFAULT_TENANT_CACHE};

use super::InFlight;
use super::error::BuildError;
use super::pools::Pools;
use super::queue::Room;

/// The most callers one pool's queue holds unless
/// [`Builder::max_queue`] says otherwise: Kubernetes API Priority and
/// Fairness's default queue length.
pub const DEFAULT_MAX_QUEUE: u32 = 50;

/// Builds an [`InFlight`] limit; start from [`InFlight::builder`].
///
/// The defaults are 8 pools (fewer when the concurrency is smaller, since
/// every pool needs a permit), 2 per tenant (no more than there are pools),
/// no salt, queues of [`DEFAULT_MAX_QUEUE`] callers per pool and a cache
/// of [`DEFAULT_TENANT_CACHE`] tenants, as the rate limiter's; the
/// concurrency has no default.
///
/// ```
/// use shuffle_limiter::inflight::InFlight;
///
/// let small = InFlight::builder().concurrency(5).build()?;
/// assert_eq!((small.pools(), small.per_tenant()), (5, 2));
/// let large = InFlight::builder().concurrency(40).build()?;
/// assert_eq!((large.pools(), large.per_tenant()), (8, 2));
/// # Ok::<(), shuffle_limiter::inflight::BuildError>(())
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .build()"]
pub struct Builder {
    concurrency: Option<u32>,
    pools: Option<u32>,
    per_tenant: Option<u32>,
    per_user: Option<u32>,
    pub(super) spill: u32,
    reserve: f64,
    salt: Vec<u8>,
    max_queue: u32,
    #[cfg(feature = "wait")]
    max_wait: Option<std::time::Duration>,
    cache: usize,
}

impl Builder {
    pub(super) fn new() -> Builder {
        Builder {
            concurrency: None,
            pools: None,
            per_tenant: None,
            per_user: None,
            spill: 0,
            reserve: DEFAULT_LENDER_RESERVE,
            salt: Vec::new(),
            max_queue: DEFAULT_MAX_QUEUE,
            #[cfg(feature = "wait")]
            max_wait: None,
            cache: DEFAULT_TENANT_CACHE,
        }
    }

    /// C: the most permits out at once, over all pools together.
    pub fn concurrency(mut self, concurrency: u32) -> Self {
        self.concurrency = Some(concurrency);
        self
    }

    /// N: how many pools the concurrency is split into.
    pub fn pools(mut self, pools: u32) -> Self {
        self.pools = Some(pools);
        self
    }

    /// k: how many of the N pools each tenant may take permits from.
    pub fn per_tenant(mut self, per_tenant: u32) -> Self {
        self.per_tenant = Some(per_tenant);
        self
    }

    /// j: how many of its tenant's k pools each *user* of a tenant takes
    /// from in a request for one user ([`Request::user`](crate::Request::user)),
    /// 1 ≤ j ≤ k; k unless set. The same subset as the rate limiter's
    /// ([`Builder::per_user`](crate::Builder::per_user)).
    pub fn per_user(mut self, per_user: u32) -> Self {
        self.per_user = Some(per_user);
        self
    }

    /// d: how many *spill pools* each tenant may borrow a permit from when
    /// its own k have none free: the d pools ranked right after its own,
    /// the rate limiter's spill buckets
    /// ([`Builder::borrow_from`](crate::Builder::borrow_from)); 0 (no
    /// borrowing) unless set, k + d at most N and at most 8.
    ///
    /// A borrower takes a spill pool's permit only while more than its
    /// [reserve](Self::lender_reserve) is free, and only if nobody queues
    /// for that pool; the pool's owners take it down to zero. So the
    /// permits borrowed from a pool are never more than its share less its
    /// reserve, and its owners always keep the reserve. A request's seats
    /// come from its own pools whenever they have them free, and only then
    /// partly or wholly from its spill pools (roomiest first); a caller
    /// that waits, waits for its own pools. Borrowing never adds a permit:
    /// never more than C are out. A user's request
    /// ([`per_user`](Self::per_user)) borrows from its tenant's spill pools.
    ///
    /// ```
    /// use shuffle_limiter::inflight::InFlight;
    ///
    /// let inflight = InFlight::builder()
    ///     .concurrency(16)
    ///     .pools(8)           // 2 permits each
    ///     .per_tenant(2)
    ///     .borrow_from(2)
    ///     .lender_reserve(0.5) // 1 of each spill pool's 2 kept for its owners
    ///     .build()?;
    /// let held: Vec<_> = std::iter::from_fn(|| inflight.try_acquire("t").ok()).collect();
    /// // 4 permits of its own pools, then 1 above the reserve of each spill pool.
    /// assert_eq!(held.len(), 6);
    /// assert_eq!(held.iter().filter(|p| p.borrowed()).count(), 2);
    /// let spill = inflight.shard("t").spill().to_vec();
    /// assert!(spill.iter().all(|&pool| inflight.free(pool) == inflight.reserve(pool)));
    /// # Ok::<(), shuffle_limiter::inflight::BuildError>(())
    /// ```
    pub fn borrow_from(mut self, spill: u32) -> Self {
        self.spill = spill;
        self
    }

    /// r: the share of each pool's permits, 0 ≤ r < 1, that borrowers
    /// leave to its owners, rounded up to whole permits
    /// ([`DEFAULT_LENDER_RESERVE`], a half, unless set), as the rate
    /// limiter's [`lender_reserve`](crate::Builder::lender_reserve). Has
    /// no effect without [`borrow_from`](Self::borrow_from).
    pub fn lender_reserve(mut self, reserve: f64) -> Self {
        self.reserve = reserve;
        self
    }

    /// A deployment secret mixed into the assignment, as the rate
    /// limiter's [`salt`](crate::Builder::salt): with the same salt, N and
    /// k, a tenant's pools are the same numbers as its buckets.
    pub fn salt(mut self, salt: impl AsRef<[u8]>) -> Self {
        self.salt = salt.as_ref().to_vec();
        self
    }

    /// The most callers one pool's queue holds ([`DEFAULT_MAX_QUEUE`]
    /// unless set); 0 refuses every wait, so that
    /// [`acquire`](InFlight::acquire) waits for nothing.
    pub fn max_queue(mut self, max_queue: u32) -> Self {
        self.max_queue = max_queue;
        self
    }

    /// The longest an [`acquire`](InFlight::acquire) waits (on tokio's
    /// timer) unless its own [`within`](super::Acquire::within) says
    /// otherwise, then refused with
    /// [`RejectReason::TimedOut`](super::RejectReason::TimedOut); no bound
    /// unless set.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shuffle_limiter::inflight::{InFlight, RejectReason};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let inflight = InFlight::builder()
    ///     .concurrency(1)
    ///     .max_wait(Duration::from_millis(100))
    ///     .build()?;
    /// let _held = inflight.try_acquire("t")?;
    /// let late = inflight.acquire("t").await.unwrap_err();
    /// let max_wait = Duration::from_millis(100);
    /// assert_eq!(late.reason(), RejectReason::TimedOut { max_wait });
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "wait")]
    #[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
    pub fn max_wait(mut self, max_wait: std::time::Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    /// How many tenants' shards to keep, as the rate limiter's
    /// [`tenant_cache`](crate::Builder::tenant_cache); 0 turns it off.
    pub fn tenant_cache(mut self, entries: usize) -> Self {
        self.cache = entries;
        self
    }

    /// Checks the configuration and builds the limit.
    ///
    /// # Errors
    /// A [`BuildError`] naming the first setting that cannot work.
    pub fn build(self) -> Result<InFlight, BuildError> {
        let concurrency = self.concurrency.ok_or(BuildError::MissingConcurrency)?;
        let pools = self.pools.unwrap_or(default_pools(concurrency));
        let per_tenant = self
            .per_tenant
            .unwrap_or(DEFAULT_PER_TENANT.min(pools.max(1)));
        BuildError::check(concurrency, pools, per_tenant, self.per_user, self.cache)?;
        BuildError::check_borrowing(pools, per_tenant, self.spill, self.reserve)?;
        let assignment = Assignment::new(pools, per_tenant, &self.salt)
            .and_then(|a| a.with_spill(self.spill))
            .expect("pool, shard and spill counts were checked above");
        let reserve = if self.spill > 0 { self.reserve } else { 0.0 };
        Ok(InFlight {
            pools: Pools::split(concurrency, pools).with_reserve(reserve),
            reserve,
            room: crate::sync::Mutex::new(Room::new(pools, self.max_queue)),
            cache: ShardCache::new(self.cache, &assignment, pools),
            per_user: self.per_user.unwrap_or(per_tenant),
            assignment,
            concurrency,
            max_queue: self.max_queue,
            #[cfg(feature = "wait")]
            max_wait: self.max_wait,
        })
    }
}

/// The pools of a limit of `concurrency` that sets none: the rate
/// limiter's default N, or C when that is fewer.
pub(crate) fn default_pools(concurrency: u32) -> u32 {
    DEFAULT_BUCKETS.min(concurrency.max(1))
}

#[cfg(all(test, not(shuffle_limiter_loom)))]
mod tests {
    use super::super::{BuildError, InFlight};

    #[test]
    fn every_bad_count_is_refused_by_name() {
        let b = || InFlight::builder();
        assert_eq!(b().build().unwrap_err(), BuildError::MissingConcurrency);
        assert_eq!(
            b().concurrency(0).build().unwrap_err(),
            BuildError::ZeroConcurrency
        );
        assert_eq!(
            b().concurrency(8).pools(0).build().unwrap_err(),
            BuildError::ZeroPools
        );
        assert_eq!(
            b().concurrency(7).pools(8).build().unwrap_err(),
            BuildError::ConcurrencyBelowPools {
                concurrency: 7,
                pools: 8
            }
        );
        assert_eq!(
            b().concurrency(8)
                .pools(8)
                .per_tenant(0)
                .build()
                .unwrap_err(),
            BuildError::ZeroPerTenant
        );
        assert_eq!(
            b().concurrency(8)
                .pools(4)
                .per_tenant(5)
                .build()
                .unwrap_err(),
            BuildError::PerTenantExceedsPools {
                per_tenant: 5,
                pools: 4
            }
        );
        assert_eq!(
            b().concurrency(20)
                .pools(16)
                .per_tenant(9)
                .build()
                .unwrap_err(),
            BuildError::TooManyPerTenant {
                per_tenant: 9,
                max: 8
            }
        );
        assert_eq!(
            b().concurrency(1 << 20)
                .pools((1 << 16) + 1)
                .build()
                .unwrap_err(),
            BuildError::TooManyPools {
                pools: (1 << 16) + 1,
                max: 1 << 16
            }
        );
        assert_eq!(
            b().concurrency(8)
                .per_tenant(2)
                .per_user(3)
                .build()
                .unwrap_err(),
            BuildError::PerUser {
                per_user: 3,
                per_tenant: 2
            }
        );
        assert!(matches!(
            b().concurrency(8)
                .tenant_cache(usize::MAX)
                .build()
                .unwrap_err(),
            BuildError::CacheTooLarge { .. }
        ));
        // Each message says what to change.
        for err in [
            b().concurrency(0).build().unwrap_err(),
            b().concurrency(8)
                .pools(4)
                .per_tenant(5)
                .build()
                .unwrap_err(),
        ] {
            assert!(err.to_string().contains("use "), "{err}");
        }
    }

    #[test]
    fn the_pools_are_the_rate_limiters_buckets_for_the_same_counts_and_salt() {
        let inflight = InFlight::builder()
            .concurrency(40)
            .pools(8)
            .per_tenant(2)
            .salt("s")
            .build()
            .unwrap();
        let limiter = crate::ShardedLimiter::builder()
            .quota(crate::Quota::per_second(40))
            .buckets(8)
            .per_tenant(2)
            .salt("s")
            .build()
            .unwrap();
        for t in 0..100 {
            let tenant = format!("tenant-{t}");
            assert_eq!(inflight.shard(&tenant), limiter.shard(&tenant));
        }
    }
}
