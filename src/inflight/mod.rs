//! In-flight limits: a concurrency limit C split into N pools, each tenant
//! taking permits from its own k of them, with bounded FIFO queues.
//!
//! A rate limit does nothing against calls that are slow. When one
//! tenant's calls hang, each holds a connection, a worker or a partner's
//! slot for seconds, and with one shared concurrency limit (a semaphore)
//! that tenant soon holds all of them. Here the C permits are split into N
//! pools (⌊C/N⌋ each, one more for the first C mod N, as a rate limit's
//! burst is split over its buckets), and each tenant takes permits only
//! from its k pools, assigned by the same specified assignment as the rate
//! limiter's buckets (`docs/assignment.md`; with the same N, k and salt, a
//! tenant's pools are the numbers of its buckets). A tenant whose calls
//! hang holds its k pools and nothing else: only the tenants holding those
//! exact k pools — 1 in C(N, k) of them, [`blast`](crate::blast) gives the
//! numbers — wait with it; the others keep their throughput. The
//! [in-flight guide](crate::guide::inflight) runs that scene.
//!
//! ```
//! use shuffle_limiter::Request;
//! use shuffle_limiter::inflight::{InFlight, RejectReason};
//!
//! let inflight = InFlight::builder()
//!     .concurrency(40) // C: calls in flight at once, for all tenants together
//!     .pools(8)        // N: 5 permits each
//!     .per_tenant(2)   // k
//!     .build()?;
//! let shard = inflight.shard("tenant-0");
//! // tenant-0's calls hang: it holds its two pools' 10 permits ...
//! let hung: Vec<_> = (0..10).map(|_| inflight.try_acquire("tenant-0").unwrap()).collect();
//! assert_eq!(inflight.try_acquire("tenant-0").unwrap_err().reason(), RejectReason::Busy);
//! // ... and nothing more: every tenant with another pool still gets one.
//! for t in 1..40 {
//!     let tenant = format!("tenant-{t}");
//!     if !inflight.shard(&tenant).same_set(&shard) {
//!         let permit = inflight.try_acquire(&tenant)?;
//!         assert!(!shard.contains(permit.pools().next().unwrap().0));
//!     }
//! }
//! // A permit is given back when it is dropped; seats are all or nothing.
//! drop(hung);
//! let three = inflight.try_acquire(Request::tenant("tenant-0").tokens(3))?;
//! assert_eq!(three.seats(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Taking permits
//! Every acquire takes a [`Request`]: a tenant, perhaps one of its users
//! ([`Builder::per_user`]), and a number of seats (its tokens, 1 unless
//! set). [`InFlight::try_acquire`] answers at once and allocates nothing
//! (but for wide permits of large limits, as it says);
//! [`InFlight::acquire`] returns a future that waits its turn (bounded
//! with `.within(max_wait)`, or by the limit's `Builder::max_wait`,
//! feature `wait`). One seat comes from the
//! tenant's pool with the most free permits (ties broken at random, as
//! the rate limiter breaks them); several seats, all or nothing, from its
//! pools together, the roomiest first. The [`Permit`] holds them until it
//! is dropped. On an `Arc<InFlight>`,
//! [`try_acquire_owned`](InFlight::try_acquire_owned) and
//! [`acquire_owned`](InFlight::acquire_owned) give an [`OwnedPermit`]
//! instead, which borrows nothing: it moves into a spawned task or a
//! response future. Never more than C permits are out, nor more than a pool's
//! share from any pool, even for an instant.
//!
//! # Queues
//! Each pool has a FIFO queue of at most `max_queue` callers
//! ([`Builder::max_queue`], [`DEFAULT_MAX_QUEUE`] unless set). A caller
//! that finds no room waits in the queue of *every* pool of its shard that
//! has room — refused with [`RejectReason::QueueFull`] when none has, or
//! when those that have cannot hold its seats together — joins the others
//! as soon as they have room, in the order such callers came, and is woken,
//! never by polling, when a permit of one of them is released and it heads
//! that pool's queue: a pool's released permits go to its queue in order,
//! and a caller takes its seats, all at once, from the pools whose queue
//! it heads and those nobody queues for. While callers wait for a pool, its
//! free permits are theirs: [`try_acquire`](InFlight::try_acquire) never
//! takes one ([`RejectReason::Busy`]). So a waiter is never passed by a
//! later caller in a pool it waits for, never holds a permit while it
//! waits (two waiters can never each hold what the other needs), and the
//! first waiter of all is always served next by its pools.
//!
//! Waiting in all its queues at once, a tenant that shares one pool with
//! a hung tenant is served by its other pools as soon as they free a
//! permit; it is never stuck behind the hung tenant's callers. Within one
//! pool, the queue is first come, first served: a tenant holding the very
//! same pools as a flooding one shares their permits in proportion to
//! what each asks (no fair queuing between the tenants of a pool).
//!
//! # Borrowing and users
//! With [`Builder::borrow_from`] (d) each tenant may also borrow a permit
//! from d *spill pools*, the pools ranked right after its own (the rate
//! limiter's spill buckets), when its own have none free, and only above
//! each spill pool's reserve ([`Builder::lender_reserve`], ⌈r · share⌉
//! permits kept for the pool's owners, [`InFlight::reserve`]) and only if
//! nobody queues for it. The permits lent from a pool are so never more
//! than its share less its reserve; [`Permit::borrowed`] says whether a
//! permit borrowed. Borrowing lends what is free now: a waiter waits for
//! its own pools, and a request's seats must fit in its own pools'
//! permits. With [`Builder::per_user`] (j), a request for one user of a
//! tenant takes from j of the tenant's k pools, its *subset* by the rate
//! limiter's assignment, and borrows from the tenant's spill pools.
//!
//! Memory is fixed whatever the number of tenants: N pools of one cache
//! line each, a tenant cache sized at build, and at most N · `max_queue`
//! waiters.
//!
//! The pools can live in Redis too, for a fleet of processes (feature
//! `redis`: the section below).
#![cfg_attr(feature = "redis", doc = "")]
#![cfg_attr(feature = "redis", doc = include_str!("lease/guide.md"))]

mod acquire;
mod builder;
mod error;
mod handle;
#[cfg(feature = "redis")]
mod lease;
mod permit;
mod pools;
mod queue;
mod taken;

use std::fmt;
use std::sync::Arc;

pub use acquire::{Acquire, AcquireOwned};
#[cfg(feature = "config")]
pub(crate) use builder::default_pools;
pub use builder::{Builder, DEFAULT_MAX_QUEUE};
pub use error::{BuildError, RejectReason, Rejected};
pub use handle::Handle;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use lease::{
    DEFAULT_LEASE_BACKOFF, Lease, LeaseBuildError, LeaseError, LeaseOptions, LeaseSource,
    RedisInFlight,
};
pub use permit::{OwnedPermit, Permit};

use self::pools::Pools;
use self::queue::Room;
use self::taken::Taken;
use crate::assign::{Assignment, ShardCache};
use crate::sync::Mutex;
use crate::{Request, Shard};

/// A concurrency limit C split into N pools, each tenant taking permits
/// from its own k; see the [module documentation](self). `Send + Sync`:
/// share it through an `Arc`.
pub struct InFlight {
    pools: Pools,
    room: Mutex<Room>,
    cache: ShardCache,
    assignment: Assignment,
    per_user: u32,
    /// r, the lender's reserve (0 without borrowing).
    reserve: f64,
    concurrency: u32,
    max_queue: u32,
    #[cfg(feature = "wait")]
    max_wait: Option<std::time::Duration>,
}

impl InFlight {
    /// A builder; see [`Builder`] for the defaults.
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// Takes the request's seats now, or refuses at once: with
    /// [`RejectReason::Busy`] when the tenant's pools do not have them free
    /// (or callers queue for them), [`RejectReason::NeverFits`] when they
    /// could never hold them, [`RejectReason::ZeroSeats`] for none.
    ///
    /// Allocates nothing, but for a permit of several seats taken from
    /// more pools than its two words pack: each pool it takes from packs
    /// in ⌈log₂ N⌉ + ⌊log₂ S⌋ + 1 bits, S the permits of the largest pool,
    /// and 120 bits hold them. Every permit fits for a limit of up to 8
    /// pools of up to 4 000 permits each; past that, a permit of, say, 8 of
    /// 64 pools of 512 permits or more keeps its pools in one small
    /// allocation.
    ///
    /// # Errors
    /// [`Rejected`], as above.
    #[inline]
    pub fn try_acquire<'r>(&self, request: impl Into<Request<'r>>) -> Result<Permit<'_>, Rejected> {
        // Not `resolve`: a shard moved on after it is built (through a
        // `Result`, or out of a branch for users) was copied by loads wider
        // than the stores that had just built it, a stall. So the tenant's
        // shard is used where the cache leaves it, and a user's apart.
        let request = request.into();
        let tenant = request.tenant_id();
        let shard = (self.cache).get_or_assign(tenant, &self.assignment, self.pools.len());
        if let Some(user) = request.user_id() {
            return self.try_acquire_user(&shard, tenant, user, request.weight());
        }
        let seats = self.fits(&shard, request.weight())?;
        self.try_permit(&shard, seats)
    }

    /// [`try_acquire`](Self::try_acquire) for one user of a tenant of
    /// `shard`.
    #[inline(never)]
    fn try_acquire_user(
        &self,
        shard: &Shard,
        tenant: &[u8],
        user: &[u8],
        seats: u32,
    ) -> Result<Permit<'_>, Rejected> {
        let shard = shard.subset(self.assignment.user_seed(tenant, user), self.per_user);
        let seats = self.fits(&shard, seats)?;
        self.try_permit(&shard, seats)
    }

    /// A permit of `seats` of `shard`'s pools now, or [`RejectReason::Busy`]:
    /// what a keyed acquire and a [`Handle`]'s share.
    ///
    /// One seat of an own pool, the common case, is built here, inlined
    /// where the caller keeps the permit; anything else out of line, into
    /// the same place. (Merged into one `Taken` first and then moved, the
    /// permit was copied by wide loads over the narrower stores that had
    /// just built it, a stall on every acquire.)
    #[inline(always)]
    fn try_permit(&self, shard: &Shard, seats: u32) -> Result<Permit<'_>, Rejected> {
        if let Some(taken) = self.take_one_own(shard, seats) {
            return Ok(Permit {
                inflight: self,
                taken,
            });
        }
        self.try_permit_rest(shard, seats)
    }

    /// [`try_permit`](Self::try_permit) beyond one seat of an own pool.
    #[inline(never)]
    fn try_permit_rest(&self, shard: &Shard, seats: u32) -> Result<Permit<'_>, Rejected> {
        match self.try_take_rest(shard, seats) {
            Some(taken) => Ok(Permit {
                inflight: self,
                taken,
            }),
            None => Err(Rejected::new(RejectReason::Busy)),
        }
    }

    /// Waits for the request's seats, in turn behind the callers already
    /// waiting for the tenant's pools: a future to `.await`, bounded with
    /// `within` (feature `wait`); see [`Acquire`].
    ///
    /// The future runs on any executor, unless it is bounded (`within`, or
    /// the builder's `max_wait` above zero), which needs tokio's timer;
    /// here a thread parks until it is woken:
    ///
    /// ```
    /// use std::sync::Arc;
    /// use shuffle_limiter::inflight::InFlight;
    /// # use std::future::Future;
    /// # use std::task::{Context, Poll, Wake, Waker};
    /// # struct Unpark(std::thread::Thread);
    /// # impl Wake for Unpark {
    /// #     fn wake(self: Arc<Self>) { self.0.unpark() }
    /// # }
    /// # fn block_on<F: Future>(f: F) -> F::Output {
    /// #     let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    /// #     let mut f = std::pin::pin!(f);
    /// #     loop {
    /// #         if let Poll::Ready(out) = f.as_mut().poll(&mut Context::from_waker(&waker)) {
    /// #             return out;
    /// #         }
    /// #         std::thread::park();
    /// #     }
    /// # }
    ///
    /// let inflight = Arc::new(InFlight::builder().concurrency(1).build()?);
    /// let held = inflight.try_acquire("t")?;
    /// let waiter = std::thread::spawn({
    ///     let inflight = inflight.clone();
    ///     move || block_on(inflight.acquire("t")).map(|permit| permit.seats())
    /// });
    /// while inflight.waiting(0) == 0 {
    ///     std::thread::yield_now(); // until it queues
    /// }
    /// drop(held); // it is served by the release
    /// assert_eq!(waiter.join().unwrap(), Ok(1));
    /// assert_eq!(inflight.available(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn acquire<'r>(&self, request: impl Into<Request<'r>>) -> Acquire<'_> {
        Acquire::new(self, self.resolve(&request.into()))
    }

    /// [`try_acquire`](InFlight::try_acquire) on a shared limit: the same
    /// answer, as an [`OwnedPermit`] that borrows nothing (for a spawned
    /// task, or a response future).
    ///
    /// # Errors
    /// [`Rejected`], as [`try_acquire`](InFlight::try_acquire).
    #[inline]
    pub fn try_acquire_owned<'r>(
        self: &Arc<Self>,
        request: impl Into<Request<'r>>,
    ) -> Result<OwnedPermit, Rejected> {
        let (shard, seats) = self.resolve(&request.into())?;
        match self.try_take(&shard, seats) {
            Some(taken) => Ok(OwnedPermit {
                inflight: Arc::clone(self),
                taken,
            }),
            None => Err(Rejected::new(RejectReason::Busy)),
        }
    }

    /// [`acquire`](InFlight::acquire) on a shared limit: a `'static`
    /// future ([`AcquireOwned`]) giving an [`OwnedPermit`], with the same
    /// queues, bound and cancellation.
    pub fn acquire_owned<'r>(self: &Arc<Self>, request: impl Into<Request<'r>>) -> AcquireOwned {
        let start = self.resolve(&request.into());
        AcquireOwned::new(Arc::clone(self), start)
    }

    /// A handle for `request`, with its pools resolved once: for a hot
    /// tenant or a loop ([`Handle`]).
    pub fn handle<'r>(&self, request: impl Into<Request<'r>>) -> Handle<'_> {
        let request = request.into();
        let shard = self.shard_of(&request);
        let seats = self.fits(&shard, request.weight());
        Handle::new(self, shard, seats)
    }

    /// The pools `request` takes from: its tenant's k, or its user's j of
    /// them, by the specified assignment; with borrowing, its tenant's d
    /// spill pools too ([`Shard::spill`]).
    pub fn shard<'r>(&self, request: impl Into<Request<'r>>) -> Shard {
        self.shard_of(&request.into())
    }

    /// C: the most permits out at once.
    pub fn concurrency(&self) -> u32 {
        self.concurrency
    }

    /// N: the pools.
    pub fn pools(&self) -> u32 {
        self.pools.len()
    }

    /// k: the pools per tenant.
    pub fn per_tenant(&self) -> u32 {
        self.assignment.per_tenant()
    }

    /// d: the spill pools each tenant may borrow from
    /// ([`Builder::borrow_from`]); 0 without borrowing.
    pub fn spill(&self) -> u32 {
        self.assignment.spill()
    }

    /// r: the share of each pool borrowers leave to its owners
    /// ([`Builder::lender_reserve`]); 0 without borrowing.
    pub fn lender_reserve(&self) -> f64 {
        self.reserve
    }

    /// The permits of `pool` a borrower leaves free for its owners:
    /// ⌈r · its share⌉ (0 without borrowing).
    ///
    /// # Panics
    /// If `pool` is not below N.
    pub fn reserve(&self, pool: u32) -> u32 {
        assert!(pool < self.pools(), "pool {pool} of {}", self.pools());
        self.pools.reserve(pool)
    }

    /// The most callers one pool's queue holds.
    pub fn max_queue(&self) -> u32 {
        self.max_queue
    }

    /// The longest an acquire waits unless its own `within` says otherwise
    /// ([`Builder::max_wait`]); `None`: no bound.
    #[cfg(feature = "wait")]
    #[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
    pub fn max_wait(&self) -> Option<std::time::Duration> {
        self.max_wait
    }

    /// The assignment of tenants to pools: the rate limiter's, with this
    /// limit's N, k and salt.
    pub fn assignment(&self) -> &Assignment {
        &self.assignment
    }

    /// The permits `pool` holds when none is out: its share of C.
    ///
    /// # Panics
    /// If `pool` is not below N.
    pub fn permits(&self, pool: u32) -> u32 {
        assert!(pool < self.pools(), "pool {pool} of {}", self.pools());
        self.pools.share(pool)
    }

    /// The permits of `pool` not out now (those kept for its queue
    /// included).
    ///
    /// # Panics
    /// If `pool` is not below N.
    pub fn free(&self, pool: u32) -> u32 {
        assert!(pool < self.pools(), "pool {pool} of {}", self.pools());
        self.pools.free(pool)
    }

    /// The permits not out now, over all pools: C when none is.
    pub fn available(&self) -> u32 {
        (0..self.pools()).map(|p| self.pools.free(p)).sum()
    }

    /// The callers waiting in `pool`'s queue.
    ///
    /// # Panics
    /// If `pool` is not below N.
    pub fn waiting(&self, pool: u32) -> usize {
        assert!(pool < self.pools(), "pool {pool} of {}", self.pools());
        self.with_room(|room| room.waiting(pool))
    }

    #[inline]
    fn shard_of(&self, request: &Request<'_>) -> Shard {
        let tenant = request.tenant_id();
        let shard = (self.cache).get_or_assign(tenant, &self.assignment, self.pools.len());
        match request.user_id() {
            None => shard,
            Some(user) => shard.subset(self.assignment.user_seed(tenant, user), self.per_user),
        }
    }

    /// The request's pools and seats, or why it can never be served.
    #[inline]
    fn resolve(&self, request: &Request<'_>) -> Result<(Shard, u32), Rejected> {
        let shard = self.shard_of(request);
        let seats = self.fits(&shard, request.weight())?;
        Ok((shard, seats))
    }

    /// `seats`, or why `shard` can never serve them.
    #[inline]
    fn fits(&self, shard: &Shard, seats: u32) -> Result<u32, Rejected> {
        // Every pool holds a permit, so one seat always fits.
        if seats != 1 {
            if seats == 0 {
                return Err(Rejected::new(RejectReason::ZeroSeats));
            }
            let most = shard.buckets().iter().map(|&p| self.pools.share(p)).sum();
            if seats > most {
                let reason = RejectReason::NeverFits { asked: seats, most };
                return Err(Rejected::new(reason));
            }
        }
        Ok(seats)
    }

    /// Takes `seats` of `shard`'s pools without the queues' lock, if the
    /// pools nobody queues for have them: its own, and then, with
    /// borrowing, its spill pools above their reserve.
    #[inline]
    fn try_take(&self, shard: &Shard, seats: u32) -> Option<Taken> {
        self.take_one_own(shard, seats)
            .or_else(|| self.try_take_rest(shard, seats))
    }

    /// The common case of [`try_take`](Self::try_take): one seat of an own
    /// pool.
    #[inline(always)]
    fn take_one_own(&self, shard: &Shard, seats: u32) -> Option<Taken> {
        if seats != 1 {
            return None;
        }
        let pool = self.pools.take_one(shard.buckets())?;
        Some(Taken::one(pool, self.pools.packing()))
    }

    /// [`try_take`](Self::try_take) beyond one seat of an own pool.
    #[inline(never)]
    fn try_take_rest(&self, shard: &Shard, seats: u32) -> Option<Taken> {
        let (own, spill) = (shard.buckets(), shard.spill());
        if seats == 1 {
            return match spill {
                [] => None,
                _ => (self.pools.borrow_one(spill))
                    .map(|pool| Taken::borrowed_one(pool, self.pools.packing())),
            };
        }
        let taken = match spill {
            [] => self.pools.take(own, seats),
            _ => self.pools.take_borrowing(own, spill, seats),
        };
        match taken {
            Ok(taken) => Some(taken),
            Err(partial) => {
                self.release(&partial);
                None
            }
        }
    }

    /// A permit's `Debug`: its type's name and the (pool, seats) it holds.
    fn debug_taken(
        &self,
        name: &str,
        taken: &Taken,
        f: &mut std::fmt::Formatter<'_>,
    ) -> std::fmt::Result {
        let pools: Vec<_> = taken.iter(self.pools.packing()).collect();
        f.debug_struct(name).field("pools", &pools).finish()
    }

    /// Gives back what a permit took; the pools callers queue for hand
    /// their seats on under the lock.
    #[inline]
    fn release(&self, taken: &Taken) {
        let packing = self.pools.packing();
        if let Some(pool) = taken.single(packing) {
            if self.pools.put(pool, 1) {
                self.handed_on(&[pool]);
            }
            return;
        }
        let mut queued = [0u32; crate::assign::MAX_PER_TENANT as usize];
        let mut len = 0;
        for (pool, seats) in taken.iter(packing) {
            if self.pools.put(pool, seats) {
                queued[len] = pool;
                len += 1;
            }
        }
        if len > 0 {
            self.handed_on(&queued[..len]);
        }
    }

    #[cold]
    fn handed_on(&self, pools: &[u32]) {
        self.with_room(|room| room.serve(&self.pools, pools));
    }

    /// Runs `f` under the queues' lock, then wakes the callers it served.
    fn with_room<R>(&self, f: impl FnOnce(&mut Room) -> R) -> R {
        let (out, woken) = {
            let mut room = self.room.lock().unwrap_or_else(|e| e.into_inner());
            let out = f(&mut room);
            (out, std::mem::take(&mut room.woken))
        };
        woken.into_iter().for_each(std::task::Waker::wake);
        out
    }
}

impl fmt::Debug for InFlight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlight")
            .field("concurrency", &self.concurrency)
            .field("pools", &self.pools())
            .field("per_tenant", &self.per_tenant())
            .field("available", &self.available())
            .field("max_queue", &self.max_queue)
            .finish_non_exhaustive()
    }
}

#[cfg(all(test, not(shuffle_limiter_loom)))]
mod borrow_tests;
#[cfg(all(test, not(shuffle_limiter_loom)))]
mod tests;
