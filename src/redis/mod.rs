//! Many processes, one budget: the bucket state in Redis.
//!
//! An in-process [`ShardedLimiter`] in each of M replicas admits M times the
//! budget. A [`RedisLimiter`] keeps the same N buckets in Redis (or Valkey, or
//! a Redis Cluster) instead, so every process that builds it with the same
//! quota, N, k, salt and name draws from the same buckets. The assignment
//! needs no coordination — every process computes the same shard — so only
//! the N bucket states live in Redis, one small string key each.
//!
//! # One round trip per decision
//! [`RedisLimiter::check`] sends one call of a Lua script with the tenant's
//! k bucket keys: an `FCALL` of the draw's function on Redis 7 and later
//! (the limiter loads the library at build), an `EVALSHA` before. The
//! script reads the server's clock (`TIME`), reads the k buckets, takes
//! from the one with the most room and writes it back, all atomically on
//! the server; the reply is the grant or the denial. Only when the server
//! has lost the function (a restart without persistence, `FUNCTION
//! FLUSH`) does a decision cost a second call, the script by `EVALSHA`,
//! which the limiter calls until it has loaded the library again (in a task
//! of its own, once Redis answered); and a third, the script sent whole
//! (`EVAL`), when it has lost the script too (`SCRIPT FLUSH`).
//!
//! Where a process has more than a few decisions out at once, those that
//! wait together share one call instead ([batching](RedisOptions::batch),
//! on by default in the one-slot layout), applied in arrival order, each
//! as it would be alone (see the [Redis guide](crate::guide::redis#batching)).
//!
//! # The same decision as in process
//! The script is the same draw as the in-process limiter's — the same
//! roomiest-bucket choice, the same GCRA arithmetic, the same denial — in
//! integer microseconds (exact in Lua's numbers), written once in Rust and
//! mirrored line by line in Lua; a differential test runs both on thousands
//! of generated inputs against a real `redis-server` and compares every
//! outcome and every value written.
//!
//! Each bucket's interval is rounded up to a whole microsecond
//! ([`bucket_interval`](crate::Limiter::bucket_interval) shows it), which
//! keeps its rate at or below R/N, and the bursts split exactly as in
//! process, so over any window of length t all processes together are
//! granted at most R·t + B.
//!
//! # Everything else is the same too
//! A [`RedisLimiter`] is a [`Limiter`] over the
//! [`RedisStore`]: it has the same accessors as a [`ShardedLimiter`], the
//! same waits (`limiter.wait(request)` with the `wait` feature), works in
//! the same [`RateLimitLayer`] (feature `tower`) and in a `LimiterSet`
//! (feature `config`); it checks, refunds, changes and reads through the
//! [`Limit`](crate::Limit) trait (`use shuffle_limiter::Limit`), each a
//! round trip.
//!
//! [`RateLimitLayer`]: https://docs.rs/shuffle-limiter/latest/shuffle_limiter/tower/struct.RateLimitLayer.html
//!
//! # Keys, and the layout
//! Bucket i of a limiter named `name` is the key `{name}:b<i>`, holding its
//! theoretical arrival time in microseconds of the server's clock. The braces
//! make the name a hash tag: in a Redis Cluster all of a limiter's keys live
//! in one slot, so every shard is in one slot and the script never crosses
//! nodes. (The flip side: one limiter is served by one node, and a failed
//! node stops every tenant of the limiter.) A key expires one second after
//! its bucket is full again by the server's clock, however far ahead waits
//! have booked it, so idle limiters leave nothing behind but the keys a live
//! change writes (the quota key, and the `:born` key of each bucket a change
//! of N added, while it exists); a missing key reads as a full bucket, which
//! it then is.
//!
//! With [`RedisOptions::key_prefix`] every key starts with that prefix, before
//! the hash tag (`billing:{name}:b<i>`); there is none by default. Two
//! limiters of the same name and prefix on one Redis share their buckets and
//! budget, whichever service builds them: give each service its own prefix,
//! or its own names.
//!
//! That is the default [`Layout::OneSlot`]. With [`Layout::Spread`]
//! ([`RedisOptions::layout`]) bucket i is `{name:b<i>}` instead, a hash tag
//! per bucket, so the buckets spread over the nodes of a Cluster and a
//! failed node touches only the tenants whose shards hold one of its
//! buckets. A decision then takes from one bucket at a time with the same
//! script over that one key — the bucket this process last saw with the
//! most room first, the next on a denial — so every grant is still one
//! atomic step on one bucket and the budget holds as exactly; weights one
//! bucket cannot hold and borrowing are refused, since buckets on different
//! nodes cannot pay together atomically.
//!
//! A [`RedisRetryBudget`] keeps bucket i's retries beside it, in
//! `<bucket key>:retry` (so in the bucket's slot in either layout).
//!
//! A quota set live ([`RedisLimiter::set_quota`]) lives beside the buckets,
//! in `{name}:quota`, with a version that every decision sends: a process
//! deciding with another quota's numbers draws nothing, reads the key and
//! asks again, so no two processes decide with different quotas. The key
//! is missing until then; deleting it brings every process back to the
//! quota it was built with, as the buckets stand (without moving them to
//! it, as a change does). A quota key holding anything else (text that is
//! not a quota, or a key of another type: a hash, a list) is refused with
//! [`Error::NotAQuota`]: it is data, not an outage, so every failure policy
//! but [`FailurePolicy::LocalFallback`] denies, as for a bucket key below.
//!
//! A bucket key holding a string that is not a time (`nan`, `inf`, `1e300`,
//! a negative or fractional number, text) is repaired: the script reads it,
//! and writes it back, as an empty bucket, which then refills at its rate —
//! a stray value can only ever cost grants, never add any. A key of another
//! type (a hash, a list) cannot be repaired without destroying someone
//! else's data: the decision fails with [`Error::NotABucket`] for the
//! tenants of that bucket only (the breaker stays closed for everyone else),
//! and the failure policy answers it — with a denial, unless it is
//! [`FailurePolicy::LocalFallback`].
//!
//! # When Redis fails: the [`FailurePolicy`]
//! Every decision returns within the deadline of [`RedisOptions::deadline`]
//! (100 ms unless set, see [`DEFAULT_DEADLINE`]), whether Redis answers,
//! errs, is unreachable or hangs without a word (a stopped process, a
//! partition). When it does not answer in time, the limiter's
//! [`FailurePolicy`] decides instead:
//! - [`FailurePolicy::FailClosed`] denies: for a hard upstream quota, where an
//!   extra request costs more than a refused one.
//! - [`FailurePolicy::FailOpen`] grants: where the limit protects nothing
//!   critical and availability comes first.
//! - [`FailurePolicy::LocalFallback`] asks an in-process [`ShardedLimiter`]
//!   with the budget divided by the number of replicas you run, with the same
//!   N, k and salt (so the same shards and the same isolation).
//!
//! The limiter leaves Redis alone after a failure, but only where it
//! failed: the circuit breaker is kept per bucket, like the buckets. A lost
//! connection (or any error of Redis as a whole) pauses every bucket; a
//! missed deadline counts only against the buckets of that request's shard,
//! and pauses one after three in a row with no answer in between — one slow
//! reply on a busy host costs one request, not every tenant's. A paused
//! bucket is left alone for [`RedisOptions::retry_every`] (100 ms unless
//! set): decisions of the shards that hold it go straight to the policy,
//! without waiting for the deadline, and only one request at a time probes
//! Redis again. Once Redis answers, decisions go back to it, with no
//! restart; with [`Builder::build_redis`](crate::Builder::build_redis) the
//! connection reconnects on its own within a fifth of a second of Redis
//! coming back, and a limiter built while Redis was unreachable connects
//! the same way. [`Decision::source`] tells which way each decision was made,
//! and [`RedisLimiter::stats`] counts them.
//!
//! Decisions answered without a round trip (a cached denial, a paused
//! shard's policy answer) spend the task's cooperative budget in tokio, so a
//! caller looping on `check().await` yields in turn like any other I/O and
//! cannot starve the other tasks of its worker.
//!
//! A request that missed its deadline may still run on the server later and
//! take a token that nobody uses: a hang only ever errs towards fewer grants.
//! A server that restarts without persistence forgets its buckets, which come
//! back full: up to B grants beyond the budget, once.
//!
//! # Cached denials
//! A denial of `n` tokens from Redis names the earliest time the tenant's
//! buckets could pay them, and the script answers with it what each of the
//! tenant's own buckets will hold just before then if nothing is taken.
//! Other processes can only take more (move a bucket's arrival time
//! forward), so until then each bucket holds no more than that, whatever
//! they do. The limiter remembers that bound per bucket, and denies without
//! asking Redis ([`Source::CachedDenial`]) a request whose own buckets can
//! hold too little by those bounds (a bucket without one counts with its
//! burst) and, for a tenant that may borrow, whose spill buckets are known
//! to be short as well. A lighter request, or one whose buckets may have
//! room, still goes to Redis.
//! It measures that time on the local clock from the moment the request was
//! sent, so a cached denial never outlasts the real one by more than the two
//! clocks drift apart in that time. Turn it off with
//! [`RedisOptions::cache_denials`].
//!
//! # Example
//! ```no_run
//! use shuffle_limiter::{Limit, Quota, ShardedLimiter};
//! use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
//!
//! # async fn run() -> Result<(), shuffle_limiter::redis::BuildError> {
//! let limiter = ShardedLimiter::builder()
//!     .quota(Quota::per_second(200).with_burst(20))
//!     .buckets(8)
//!     .per_tenant(2)
//!     .name("payments-api")
//!     .build_redis(
//!         "redis://127.0.0.1:6379",
//!         RedisOptions::new(FailurePolicy::LocalFallback { replicas: 4 }),
//!     )
//!     .await?;
//! match limiter.check("tenant-42").await {
//!     Ok(grant) => println!("paid by bucket {}", grant.bucket()),
//!     Err(denied) => println!("retry in {:?}", denied.retry_after()),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! The decision needs a tokio runtime with its timer enabled, and Redis 5 or
//! later (or Valkey): the script writes after reading `TIME`, which needs
//! the effects replication that Redis 5 made the default.

use std::sync::atomic::Ordering;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager};

use crate::clock::MonotonicClock;
use crate::plan::whom::Resolved as _;
use crate::store::sealed::{Apply as _, Local};
use crate::{Denied, Grant, Handle, Limiter, Request, ShardedLimiter};

// Also the in-flight leases' (`src/inflight/lease/`).
mod batch;
pub(crate) mod breaker;
mod build;
mod charge;
mod decision;
mod denial_cache;
mod error;
mod heard;
mod holdoff;
mod layout;
pub(crate) mod lua;
pub(crate) mod metrics;
mod options;
mod quota;
mod refund;
mod retry;
pub(crate) mod script;
mod spread;
mod state;
mod store;

// The test server, for the lease scripts' tests too (a file is one module).
#[cfg(test)]
pub(crate) use script::redis_server;

pub use decision::{Decision, RedisStats, Source};
pub use error::{BuildError, Error};
pub use layout::Layout;
pub use options::{
    DEFAULT_BATCH_DECISIONS, DEFAULT_BATCH_WINDOW, DEFAULT_CONNECT_TIMEOUT, DEFAULT_DEADLINE,
    DEFAULT_RETRY_EVERY, FailurePolicy, MAX_BATCH, RedisOptions,
};
pub use retry::{FLUSH_EVERY, RedisRetryBudget};
pub use store::RedisStore;

use store::{ERRORS, FROM_CACHE, FROM_POLICY, FROM_REDIS};

/// `by` after `at`, or thirty years after it when no instant is that far:
/// a deadline or a batch window may be as long as a `Duration` holds.
fn after(at: tokio::time::Instant, by: Duration) -> tokio::time::Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);
    at.checked_add(by).unwrap_or(at + FAR)
}

/// A limiter whose buckets live in Redis, shared by every process that
/// builds it with the same quota, N, k, salt and name: a [`Limiter`] over
/// the [`RedisStore`].
///
/// Build it with [`Builder::build_redis`](crate::Builder::build_redis) or
/// [`Builder::build_redis_with`](crate::Builder::build_redis_with); the
/// [module documentation](self) explains the script, the keys and the
/// failure policy. The limiter is `Send + Sync`; share it through an `Arc`.
pub type RedisLimiter<Conn = ConnectionManager, C = MonotonicClock> =
    Limiter<RedisStore<Conn, ShardedLimiter<C>>>;

/// # Deciding, over Redis
///
/// A Redis limiter checks through [`Limit::check`](crate::Limit::check)
/// (`use shuffle_limiter::Limit`), one round trip per decision; its failure
/// policy decides if Redis does not answer within the deadline.
impl<Conn, L> Limiter<RedisStore<Conn, L>>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local + 'static,
{
    /// As [`Limit::check`](crate::Limit::check), and how the decision was
    /// made: by Redis, from a cached denial, or by the failure policy, with
    /// the error that made the policy step in.
    ///
    /// ```no_run
    /// # use shuffle_limiter::redis::{RedisLimiter, Source};
    /// # async fn run(limiter: RedisLimiter) {
    /// let decision = limiter.decide("tenant-42").await;
    /// if decision.source() == Source::Policy {
    ///     eprintln!("Redis failed: {}", decision.error().unwrap());
    /// }
    /// # }
    /// ```
    pub async fn decide<'r>(&self, request: impl Into<Request<'r>>) -> Decision {
        let request = request.into();
        let whom = self.core.whom(&request);
        let n = request.weight();
        if let Err(denied) = self.store.check_weight(&self.core, &whom.shard, n) {
            let shared = &self.store.shared;
            return shared.decided(Err(denied), Source::Limiter, None);
        }
        self.store.shared.decide(whom, n).await
    }
}

impl<Conn, L> Handle<'_, RedisStore<Conn, L>>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local + 'static,
{
    /// As [`Limit::check`](crate::Limit::check), without resolving the
    /// shard again.
    ///
    /// # Errors
    /// [`Denied`] when the buckets are short, the request never fits, or
    /// the policy denies.
    pub async fn check(&self) -> Result<Grant, Denied> {
        self.pending().await
    }

    /// As [`Limit::remaining`](crate::Limit::remaining), on the handle's
    /// buckets (resolved again after a change of N, as in process).
    ///
    /// # Errors
    /// The errors of a round trip to Redis.
    pub async fn remaining(&self) -> Result<u64, Error> {
        let (core, whom) = (&self.limiter.core, self.whom());
        self.limiter.store.remaining_in_redis(core, whom).await
    }
}

/// # Inspecting, over Redis
impl<Conn, L> Limiter<RedisStore<Conn, L>> {
    /// The Redis key of bucket `bucket` — `{name}:b<bucket>` in the
    /// [`Layout::OneSlot`] layout, `{name:b<bucket>}` in [`Layout::Spread`],
    /// each after the [key prefix](RedisOptions::key_prefix) if one is set —
    /// or `None` past the last bucket.
    pub fn key(&self, bucket: u32) -> Option<&str> {
        self.store.shared.script.key(bucket)
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.store.shared.options.policy
    }

    /// Where the buckets live: in one Cluster slot, or spread.
    pub fn layout(&self) -> Layout {
        self.store.shared.options.layout
    }

    /// The longest a decision takes.
    pub fn deadline(&self) -> Duration {
        self.store.shared.options.deadline
    }

    /// The in-process limiter of [`FailurePolicy::LocalFallback`]: for a
    /// [`RedisLimiter`], a [`ShardedLimiter`] with this process's share of
    /// the budget.
    pub fn fallback(&self) -> Option<&L> {
        self.store.shared.fallback.as_ref()
    }

    /// The connection the limiter clones for each decision.
    pub fn connection(&self) -> &Conn {
        &self.store.shared.connection
    }

    /// How many decisions were made which way so far, and how many times
    /// Redis failed.
    pub fn stats(&self) -> RedisStats {
        let read = |i: usize| self.store.shared.counts[i].load(Ordering::Relaxed);
        RedisStats {
            from_redis: read(FROM_REDIS),
            from_cache: read(FROM_CACHE),
            from_policy: read(FROM_POLICY),
            errors: read(ERRORS),
        }
    }
}
