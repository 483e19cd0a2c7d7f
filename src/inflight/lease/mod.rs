//! In-flight limits over Redis: permits held by a fleet, as leases.
//!
//! The same pools as in process — C split into N, each tenant's k by the
//! specified assignment — live in Redis, so that every process that builds
//! the limit with the same counts, salt and name takes its permits from
//! the same C. A permit is a lease with a time to live, renewed while it is
//! held and given back when dropped; the seats of a process that dies come
//! back when its leases expire, within the TTL.

#[cfg(test)]
mod abandon_tests;
mod build;
mod error;
#[cfg(test)]
mod model;
mod options;
mod permit;
mod script;
#[cfg(test)]
mod tests;
mod unanswered;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager};
use tokio::time::{Instant, timeout};

pub use error::{LeaseBuildError, LeaseError};
pub use options::{DEFAULT_LEASE_BACKOFF, LeaseOptions};
pub use permit::{Lease, LeaseSource};

use self::permit::Held;
use self::script::{Acquired, Scripts};
use self::unanswered::Unanswered;
use super::{InFlight, OwnedPermit, RejectReason, Rejected};
use crate::redis::breaker::Breaker;
use crate::redis::{Error, FailurePolicy};
use crate::{Request, Shard};

/// The shortest pause between two tries of a waiting acquire.
const MIN_PAUSE: Duration = Duration::from_millis(1);

/// An in-flight limit whose pools live in Redis, shared by every process
/// that builds it with the same concurrency, N, k, salt and name; see the
/// [Over Redis](crate::inflight#over-redis) section of the guide.
///
/// Built with [`Builder::build_redis`](super::Builder::build_redis).
/// `Send + Sync`, cheap to clone (the clones share everything). Its
/// acquires and the leases' renewals run on tokio: acquire within a tokio
/// runtime with its timer enabled.
///
/// ```no_run
/// use std::time::Duration;
/// use shuffle_limiter::inflight::{InFlight, LeaseOptions, RejectReason};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let connection = redis::Client::open("redis://127.0.0.1:6379")?
///     .get_multiplexed_async_connection()
///     .await?;
/// let options = LeaseOptions::new("search", Duration::from_secs(5));
/// let inflight = InFlight::builder().concurrency(2).pools(1).build_redis(connection, options).await?;
/// let (one, two) = (inflight.try_acquire("t").await?, inflight.try_acquire("t").await?);
/// // Two seats out, in this process or any other: the third waits, then
/// // is refused.
/// let late = inflight.acquire_within("t", Duration::from_millis(50)).await.unwrap_err();
/// let max_wait = Duration::from_millis(50);
/// assert_eq!(late.rejected().map(|r| r.reason()), Some(RejectReason::TimedOut { max_wait }));
/// assert!(one.token() < two.token());
/// # Ok(())
/// # }
/// ```
pub struct RedisInFlight<Conn = ConnectionManager> {
    shared: Arc<Shared<Conn>>,
}

impl<Conn> Clone for RedisInFlight<Conn> {
    fn clone(&self) -> Self {
        RedisInFlight {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// What the limit, its acquires and its leases' tasks share.
struct Shared<Conn> {
    connection: Conn,
    scripts: Scripts,
    /// The counts, the shards and the shares, as in process (its own pools
    /// are never taken from).
    limit: InFlight,
    fallback: Option<Arc<InFlight>>,
    policy: FailurePolicy,
    ttl: Duration,
    ttl_micros: u64,
    renew_every: Duration,
    deadline: Duration,
    /// The bound of `acquire`: the options', else the builder's; `None`:
    /// no bound.
    max_wait: Option<Duration>,
    max_backoff: Duration,
    /// How long an acquire's record lives, in ms: `RECORD_DEADLINES`
    /// deadlines.
    record_ms: u64,
    /// Leaves Redis alone after it failed, as for rates: the pools are
    /// its buckets, all in one slot.
    breaker: Breaker,
    /// This process's callers waiting for each pool.
    waiting: Box<[AtomicU32]>,
}

/// What one try answered, before the failure policy.
enum Tried {
    Leased(Lease),
    /// Not free now; µs until a lease in the pools expires, if known.
    Busy(Option<u64>),
}

impl<Conn> RedisInFlight<Conn>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Takes the request's seats now, in one round trip, or refuses:
    /// [`RejectReason::Busy`] when the tenant's pools do not have them free
    /// in Redis, [`RejectReason::NeverFits`] and
    /// [`RejectReason::ZeroSeats`] at once, as in process. When Redis fails
    /// or misses the deadline the failure policy answers.
    ///
    /// The future borrows nothing: it may be spawned.
    ///
    /// # Errors
    /// [`LeaseError`], as above.
    pub fn try_acquire<'r>(
        &self,
        request: impl Into<Request<'r>>,
    ) -> impl Future<Output = Result<Lease, LeaseError>> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        let resolved = shared.limit.resolve(&request.into());
        async move {
            let (shard, seats) = resolved?;
            match shared.try_once(&shard, seats).await? {
                Tried::Leased(lease) => Ok(lease),
                Tried::Busy(_) => Err(Rejected::new(RejectReason::Busy).into()),
            }
        }
    }

    /// Waits for the request's seats, up to the options'
    /// [`max_wait`](LeaseOptions::max_wait) if set, else the builder's
    /// `max_wait` (feature `wait`), else for as long as it takes; see
    /// [`acquire_within`](RedisInFlight::acquire_within).
    ///
    /// # Errors
    /// As [`acquire_within`](RedisInFlight::acquire_within).
    pub fn acquire<'r>(
        &self,
        request: impl Into<Request<'r>>,
    ) -> impl Future<Output = Result<Lease, LeaseError>> + Send + 'static {
        // A bound past what the clock counts is no bound.
        let max_wait = self.shared.max_wait.unwrap_or(Duration::MAX);
        self.acquire_within(request, max_wait)
    }

    /// Waits at most `max_wait` for the request's seats. Each round trip
    /// counts against the bound, so a bound shorter than a round trip is
    /// refused every time; `Duration::ZERO` is one try, bounded by the
    /// [deadline](LeaseOptions::deadline) as
    /// [`try_acquire`](RedisInFlight::try_acquire) is.
    ///
    /// Over Redis nobody is woken by a release in another process: a
    /// waiting acquire tries again after 1 ms, then after twice as long
    /// each time up to [`max_backoff`](LeaseOptions::max_backoff), or
    /// sooner when a lease in its pools expires sooner — so at most
    /// `max_wait` / 1 ms tries. The waits are **not FIFO**, neither across
    /// processes nor within one: whoever tries first after a release takes
    /// the seats. This process's waiters are bounded per pool by the
    /// builder's [`max_queue`](super::Builder::max_queue), each counted in every
    /// pool of its shard that has room, as in process.
    ///
    /// # Errors
    /// [`LeaseError::Rejected`] with [`RejectReason::QueueFull`] when this
    /// process's queues of the tenant's pools are full,
    /// [`RejectReason::TimedOut`] when `max_wait` passes, and the reasons
    /// of [`try_acquire`](RedisInFlight::try_acquire); or the failure
    /// policy's answer.
    pub fn acquire_within<'r>(
        &self,
        request: impl Into<Request<'r>>,
        max_wait: Duration,
    ) -> impl Future<Output = Result<Lease, LeaseError>> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        let resolved = shared.limit.resolve(&request.into());
        async move {
            let (shard, seats) = resolved?;
            // A bound past what the clock counts is no bound.
            let end = Instant::now().checked_add(max_wait);
            let timed_out = || Err(Rejected::new(RejectReason::TimedOut { max_wait }).into());
            // Each attempt within what is left of the bound, not a whole
            // deadline past it (over a silent Redis an attempt lasts the
            // deadline).
            // A bound of zero waits for no seat, not for no answer: its one
            // try is bounded by the deadline, as `try_acquire`'s is.
            let cut = end.filter(|_| !max_wait.is_zero());
            let attempt = || async {
                let tried = shared.try_once(&shard, seats);
                match cut {
                    Some(end) => tokio::time::timeout_at(end, tried).await.ok(),
                    None => Some(tried.await),
                }
            };
            let Some(tried) = attempt().await else {
                return timed_out();
            };
            let mut free_in = match tried? {
                Tried::Leased(lease) => return Ok(lease),
                Tried::Busy(free_in) => free_in,
            };
            let _queued = Queued::enter(&shared, &shard)?;
            let mut pause = MIN_PAUSE;
            loop {
                let left = end.map_or(Duration::MAX, |end| {
                    end.saturating_duration_since(Instant::now())
                });
                if left.is_zero() {
                    return timed_out();
                }
                let expiry = free_in.map_or(Duration::MAX, Duration::from_micros);
                let nap = pause.min(expiry).max(MIN_PAUSE).min(left);
                tokio::time::sleep(nap).await;
                pause = pause.saturating_mul(2).min(shared.max_backoff);
                let Some(tried) = attempt().await else {
                    return timed_out();
                };
                free_in = match tried? {
                    Tried::Leased(lease) => return Ok(lease),
                    Tried::Busy(free_in) => free_in,
                };
            }
        }
    }

    /// The pools `request` takes from: its tenant's k, or its user's j of
    /// them, as in process.
    pub fn shard<'r>(&self, request: impl Into<Request<'r>>) -> Shard {
        self.shared.limit.shard(request)
    }
}

impl<Conn> RedisInFlight<Conn> {
    /// C: the most seats out at once, over the whole fleet.
    pub fn concurrency(&self) -> u32 {
        self.shared.limit.concurrency()
    }

    /// N: the pools.
    pub fn pools(&self) -> u32 {
        self.shared.limit.pools()
    }

    /// k: the pools per tenant.
    pub fn per_tenant(&self) -> u32 {
        self.shared.limit.per_tenant()
    }

    /// The seats `pool` holds when none is out: its share of C, as in
    /// process.
    ///
    /// # Panics
    /// If `pool` is not below N.
    pub fn permits(&self, pool: u32) -> u32 {
        self.shared.limit.permits(pool)
    }

    /// The Redis key of `pool` (`{name}:p<pool>`, after the key prefix),
    /// or `None` past the last pool.
    pub fn key(&self, pool: u32) -> Option<&str> {
        self.shared.scripts.key(pool)
    }

    /// The leases' time to live.
    pub fn ttl(&self) -> Duration {
        self.shared.ttl
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.shared.policy
    }

    /// The in-process limit of [`FailurePolicy::LocalFallback`].
    pub fn fallback(&self) -> Option<&Arc<InFlight>> {
        self.shared.fallback.as_ref()
    }

    /// The connection the limit clones for each round trip.
    pub fn connection(&self) -> &Conn {
        &self.shared.connection
    }
}

impl<Conn> Shared<Conn>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// One try in Redis within the deadline, the failure policy answering
    /// when it fails.
    async fn try_once(self: &Arc<Self>, shard: &Shard, seats: u32) -> Result<Tried, LeaseError> {
        // The own pools, then the spill pools (none without borrowing),
        // with their shares and the spill pools' reserves.
        const MAX: usize = crate::assign::MAX_PER_TENANT as usize;
        let (own, spill) = (shard.buckets(), shard.spill());
        let (mut all, mut shares, mut reserves) = ([0u32; MAX], [0u32; MAX], [0u32; MAX]);
        let len = own.len() + spill.len();
        for (j, &pool) in own.iter().chain(spill).enumerate() {
            all[j] = pool;
            shares[j] = self.limit.permits(pool);
        }
        for (reserve, &pool) in reserves.iter_mut().zip(spill) {
            *reserve = self.limit.reserve(pool);
        }
        let pools = &all[..len];
        if let Err(paused) = self.breaker.admit(pools) {
            // Left alone after a failure: the policy answers at once. (The
            // breaker keeps the error that opened it.)
            let error = paused.map_or(
                Error::Timeout {
                    after: self.deadline,
                },
                |e| (*e).clone(),
            );
            return self.by_policy(shard, seats, error);
        }
        let start = crate::random::tie_break(pools.len());
        let sent = Instant::now();
        let mut connection = self.connection.clone();
        // Until the reply is heard, the acquire is given back if this
        // future ends first (the deadline, a caller gone, a failure).
        let mut unanswered = Unanswered::new(self, pools);
        let acquired = self.scripts.acquire(
            &mut connection,
            (pools, &shares[..len], &reserves[..spill.len()]),
            (seats, self.ttl_micros, start),
            (unanswered.record(), self.record_ms),
        );
        let answer = timeout(self.deadline, acquired).await;
        if let Ok(Ok(acquired)) = &answer {
            // A resent acquire's reply is no answer: its first run's lease
            // is given back when `unanswered` is dropped.
            if *acquired != Acquired::Resent {
                unanswered.heard();
            }
            self.breaker.answered(pools, self.breaker.micros());
        }
        let error = match answer {
            Ok(Ok(Acquired::Leased { token, taken })) => {
                let borrowed = taken.iter().any(|&(j, _)| j >= own.len());
                let taken = taken.iter().map(|&(j, s)| (pools[j], s)).collect();
                let lease = permit::hold(self, token, (taken, borrowed), sent);
                return Ok(Tried::Leased(lease));
            }
            Ok(Ok(Acquired::Busy { free_in })) => return Ok(Tried::Busy(free_in)),
            // The client sent the acquire again after its first run (its
            // reply lost with a connection): that run's seats are given
            // back now, so a waiting acquire tries again at once.
            Ok(Ok(Acquired::Resent)) => {
                drop(unanswered);
                return Ok(Tried::Busy(Some(0)));
            }
            Ok(Err(error)) => error,
            Err(_) => Error::Timeout {
                after: self.deadline,
            },
        };
        let error = Arc::new(error);
        self.breaker.failed(pools, &error);
        self.by_policy(shard, seats, (*error).clone())
    }

    /// The failure policy's answer: only the local fallback grants for a
    /// pool key holding other data (not an outage), as for rates.
    fn by_policy(&self, shard: &Shard, seats: u32, error: Error) -> Result<Tried, LeaseError> {
        if let Some(local) = &self.fallback {
            return Ok(match local.try_take(shard, seats) {
                Some(taken) => Tried::Leased(Lease {
                    seats,
                    pools: taken.iter(local.pools.packing()).collect(),
                    borrowed: taken.borrowed(),
                    held: Held::Local(OwnedPermit {
                        inflight: Arc::clone(local),
                        taken,
                    }),
                }),
                None => Tried::Busy(None),
            });
        }
        match self.policy {
            FailurePolicy::FailOpen if error.is_outage() => Ok(Tried::Leased(Lease {
                seats,
                pools: Vec::new(),
                borrowed: false,
                held: Held::Open,
            })),
            _ => Err(LeaseError::Redis(error)),
        }
    }
}

/// A caller of this process counted in the queues of its shard's pools
/// that have room, until it is dropped.
struct Queued<'a> {
    waiting: &'a [AtomicU32],
    pools: [u32; crate::assign::MAX_PER_TENANT as usize],
    len: usize,
}

impl<'a> Queued<'a> {
    fn enter<Conn>(shared: &'a Shared<Conn>, shard: &Shard) -> Result<Queued<'a>, Rejected> {
        let max_queue = shared.limit.max_queue();
        let mut queued = Queued {
            waiting: &shared.waiting,
            pools: [0; crate::assign::MAX_PER_TENANT as usize],
            len: 0,
        };
        for &pool in shard.buckets() {
            let counted = queued.waiting[pool as usize].fetch_update(
                Ordering::AcqRel,
                Ordering::Acquire,
                |n| (n < max_queue).then_some(n + 1),
            );
            if counted.is_ok() {
                queued.pools[queued.len] = pool;
                queued.len += 1;
            }
        }
        if queued.len == 0 {
            return Err(Rejected::new(RejectReason::QueueFull { max_queue }));
        }
        Ok(queued)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        for &pool in &self.pools[..self.len] {
            self.waiting[pool as usize].fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl<Conn> fmt::Debug for RedisInFlight<Conn> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisInFlight")
            .field("concurrency", &self.concurrency())
            .field("pools", &self.pools())
            .field("per_tenant", &self.per_tenant())
            .field("ttl", &self.shared.ttl)
            .field("policy", &self.shared.policy)
            .finish_non_exhaustive()
    }
}
