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
//! [`RedisLimiter::check`] sends one `EVALSHA` of a Lua script
//! (`src/redis/gcra.lua`) with the tenant's k bucket keys. The script reads
//! the server's clock (`TIME`), reads the k buckets, takes from the one with
//! the most room and writes it back, all atomically on the server; the reply
//! is the grant or the denial. Only when the server has lost the script
//! (a restart, a failover, `SCRIPT FLUSH`) does the `NOSCRIPT` answer cost a
//! `SCRIPT LOAD` and a second `EVALSHA`.
//!
//! # The same decision as in process
//! The script is the draw of [`ShardedLimiter`] with the GCRA of `gcra.rs`,
//! rule for rule, in integer microseconds (exact in Lua's doubles):
//!
//! | `src/gcra.rs`, `src/limiter.rs` (ns)                  | `src/redis/gcra.lua` (µs)                       |
//! |--------------------------------------------------------|-------------------------------------------------|
//! | `Split::interval`                                      | `ARGV[1]`: the interval rounded *up* to 1 µs    |
//! | `Split::burst_of(i)`                                   | `ARGV[3 + j]`: the same whole tokens            |
//! | each bucket's `tat`, one atomic load                    | one `MGET` (a `GET` tells a missing key from one of another type) |
//! | `Cell::room`: `capacity − max(tat − now, 0)`, ≥ 0      | `room`, the same                                |
//! | `Cell::tokens`: `⌊room / interval⌋`                     | `floor(room / interval)`, exact below 2^50      |
//! | `draw`: from a random start, the first bucket with `room ≥ cost` and strictly more room than the best so far | the same; `ARGV[3]` is the start |
//! | `Cell::decide`: `new_tat = max(tat, now) + cost`       | the same                                        |
//! | `compare_exchange` of the winner's `tat`               | `SET` of the winner (the script is atomic)      |
//! | `Grant::remaining`: `Cell::tokens` of each room, the winner's less the cost | the tokens of each room, less n (the same number: the cost is n whole intervals) |
//! | `denial`: in shard order, skipping buckets with `capacity < cost`, the earliest `at = new_tat − min(capacity, new_tat)`, strict `<` | the same, in the same pass: an equal `at` goes to the lower shard position |
//!
//! The differential test in `tests/redis.rs` replays 1500 random requests
//! through both and compares every grant and denial.
//!
//! Rounding the interval up keeps each bucket's rate at or below R/N, and the
//! bursts split exactly as in process, so over any window of length t all
//! processes together are granted at most R·t + B.
//!
//! # Keys
//! Bucket i of a limiter named `name` is the key `{name}:b<i>`, holding its
//! theoretical arrival time in microseconds of the server's clock. The braces
//! make the name a hash tag: in a Redis Cluster all of a limiter's keys live
//! in one slot, so every shard is in one slot and the script never crosses
//! nodes. (The flip side: one limiter is served by one node; spread load by
//! using several limiters.) A key expires one second after its bucket is
//! full again, so idle limiters leave nothing behind; a missing key reads as
//! a full bucket, which it then is.
//!
//! # When Redis fails: the [`FailurePolicy`]
//! Every decision returns within the deadline of [`RedisOptions::deadline`]
//! (5 ms unless set), whether Redis answers, errs, is unreachable or hangs
//! without a word (a stopped process, a partition). When it does not answer
//! in time, the limiter's [`FailurePolicy`] decides instead:
//! - [`FailurePolicy::FailClosed`] denies: for a hard upstream quota, where an
//!   extra request costs more than a refused one.
//! - [`FailurePolicy::FailOpen`] grants: where the limit protects nothing
//!   critical and availability comes first.
//! - [`FailurePolicy::LocalFallback`] asks an in-process [`ShardedLimiter`]
//!   with the budget divided by the number of replicas you run, with the same
//!   N, k and salt (so the same shards and the same isolation).
//!
//! After a failure the limiter stops asking Redis for
//! [`RedisOptions::retry_every`] (100 ms unless set): decisions in between go
//! straight to the policy, without waiting for the deadline, and only one
//! request at a time probes Redis again. Once Redis answers, decisions go
//! back to it, with no restart; with [`Builder::build_redis`] the connection
//! reconnects on its own within a fifth of a second of Redis coming back.
//! [`Decision::source`] tells which way each decision was made, and
//! [`RedisLimiter::stats`] counts them.
//!
//! A request that missed its deadline may still run on the server later and
//! take a token that nobody uses: a hang only ever errs towards fewer grants.
//! A server that restarts without persistence forgets its buckets, which come
//! back full: up to B grants beyond the budget, once.
//!
//! # Cached denials
//! A denial from Redis names the earliest time one of the tenant's buckets
//! could pay. Until then every bucket of the shard stays short of a token,
//! whatever other processes do — they can only move a bucket's arrival time
//! forward — so the limiter remembers it per bucket and denies requests whose
//! buckets are all still short without asking Redis ([`Source::CachedDenial`]).
//! It measures that time on the local clock from the moment the request was
//! sent, so a cached denial never outlasts the real one by more than the two
//! clocks drift apart in that time. Turn it off with
//! [`RedisOptions::cache_denials`].
//!
//! # Example
//! ```no_run
//! use shuffle_limiter::{Quota, ShardedLimiter};
//! use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
//!
//! # async fn run() -> Result<(), shuffle_limiter::redis::Error> {
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

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::{AsyncConnectionConfig, Client, ErrorKind, RedisError, Script, ServerErrorKind};
use crossbeam_utils::CachePadded;
use parking_lot::Mutex;
use tokio::time::{Instant, timeout};

use crate::Shard;
use crate::assign::{Assignment, ShardCache};
use crate::clock::{Clock, MonotonicClock};
use crate::error::{ConfigError, InsufficientCapacity};
use crate::limiter::{Builder, Denied, Grant, ShardedLimiter, Split, tie_break};
use crate::quota::Quota;

/// The decision, run on the server; see the module documentation.
const GCRA_LUA: &str = include_str!("redis/gcra.lua");

/// How long a decision may take unless [`RedisOptions::deadline`] says
/// otherwise.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(5);

/// How long the limiter leaves Redis alone after a failure unless
/// [`RedisOptions::retry_every`] says otherwise.
pub const DEFAULT_RETRY_EVERY: Duration = Duration::from_millis(100);

/// How long building may wait for Redis unless
/// [`RedisOptions::connect_timeout`] says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The largest bucket capacity, in microseconds (about 35 years): the
/// script's values stay below 2^53, where doubles are exact, until the
/// server's clock passes the year 2100.
const MAX_CAPACITY_MICROS: u64 = 1 << 50;

/// The longest the connection made by [`Builder::build_redis`] waits between
/// two attempts to reconnect.
const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(200);

/// What a limiter does when Redis does not answer in time.
///
/// See the [module documentation](self) for when to choose which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Deny, with a retry time of when Redis will be asked again: for hard
    /// upstream quotas.
    FailClosed,
    /// Grant, naming the tenant's first bucket and 0 tokens remaining.
    FailOpen,
    /// Decide in process, with the budget divided by `replicas` (each rate
    /// R / replicas, each burst ⌊B / replicas⌋) and the same N, k and salt.
    LocalFallback {
        /// How many processes share the budget: each falls back to its share.
        replicas: u32,
    },
}

/// How a [`RedisLimiter`] talks to Redis and what it does when Redis fails.
///
/// ```
/// use std::time::Duration;
/// use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
///
/// let options = RedisOptions::new(FailurePolicy::FailClosed)
///     .deadline(Duration::from_millis(10))
///     .retry_every(Duration::from_millis(250));
/// assert_eq!(options.failure_policy(), FailurePolicy::FailClosed);
/// ```
#[derive(Debug, Clone)]
#[must_use = "options do nothing until passed to build_redis"]
pub struct RedisOptions {
    policy: FailurePolicy,
    deadline: Duration,
    retry_every: Duration,
    connect_timeout: Duration,
    cache_denials: bool,
}

impl RedisOptions {
    /// Options with the given failure policy, a deadline of
    /// [`DEFAULT_DEADLINE`], a retry interval of [`DEFAULT_RETRY_EVERY`], a
    /// connect timeout of [`DEFAULT_CONNECT_TIMEOUT`] and cached denials on.
    pub fn new(policy: FailurePolicy) -> Self {
        RedisOptions {
            policy,
            deadline: DEFAULT_DEADLINE,
            retry_every: DEFAULT_RETRY_EVERY,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            cache_denials: true,
        }
    }

    /// The longest a decision may take; past it the failure policy decides.
    /// Leave room for the round trip to Redis and a slow moment of the
    /// server.
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// How long to leave Redis alone after it failed or missed the deadline,
    /// before one request tries it again. It bounds how long decisions stay
    /// with the failure policy after Redis is back.
    pub fn retry_every(mut self, retry_every: Duration) -> Self {
        self.retry_every = retry_every;
        self
    }

    /// How long building may wait for Redis to answer; with
    /// [`Builder::build_redis`] also the timeout of each connection attempt.
    pub fn connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }

    /// Whether to remember denials from Redis until their retry time (on by
    /// default; see the [module documentation](self#cached-denials)).
    pub fn cache_denials(mut self, cache: bool) -> Self {
        self.cache_denials = cache;
        self
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.policy
    }
}

/// # Redis
impl<C: Clock> Builder<C> {
    /// Connects to the Redis at `url` and builds a limiter whose buckets live
    /// there.
    ///
    /// The URL is `redis://[[user]:password@]host[:port][/db]`, or
    /// `rediss://…` for TLS if the `redis` crate's TLS feature is on. The
    /// connection is a [`ConnectionManager`] that reconnects by itself,
    /// waiting at most 200 ms between attempts. Building checks that the
    /// server answers, accepts the credentials and loads the script.
    ///
    /// ```no_run
    /// use shuffle_limiter::{Quota, ShardedLimiter};
    /// use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
    ///
    /// # async fn run() -> Result<(), shuffle_limiter::redis::Error> {
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(5))
    ///     .buckets(5)
    ///     .name("upstream")
    ///     .build_redis("redis://127.0.0.1:6379", RedisOptions::new(FailurePolicy::FailClosed))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// A configuration that cannot work ([`Error::Config`] and its
    /// neighbours), a URL that is not one ([`Error::InvalidUrl`]), a server
    /// that cannot be reached or does not answer in time
    /// ([`Error::Connection`], [`Error::Timeout`]), refused credentials
    /// ([`Error::Auth`]), or another refusal of the server.
    pub async fn build_redis(
        self,
        url: &str,
        options: RedisOptions,
    ) -> Result<RedisLimiter<ConnectionManager, C>, Error> {
        let parts = self.redis_parts(&options)?;
        let client = Client::open(url).map_err(|source| Error::InvalidUrl { source })?;
        let wait = options.connect_timeout;
        let within = |after| Error::Timeout { after };
        // A plain first connection reports a refused connection or refused
        // credentials at once; the manager would retry them in the background.
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(wait))
            .set_response_timeout(Some(wait));
        let mut first = timeout(
            wait,
            client.get_multiplexed_async_connection_with_config(&config),
        )
        .await
        .map_err(|_| within(wait))?
        .map_err(Error::from_redis)?;
        load_script(&parts.script, &mut first, wait).await?;
        // The limiter's deadline bounds every request, so the connection
        // needs no timer of its own per request.
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(wait))
            .set_response_timeout(None)
            .set_min_delay(Duration::from_millis(10))
            .set_max_delay(MAX_RECONNECT_DELAY)
            .set_number_of_retries(10);
        let connection = timeout(wait, ConnectionManager::new_with_config(client, config))
            .await
            .map_err(|_| within(wait))?
            .map_err(Error::from_redis)?;
        Ok(parts.into_limiter(connection, options))
    }

    /// Builds a limiter on a connection you made: a [`ConnectionManager`], a
    /// `MultiplexedConnection`, a cluster connection (the `redis` crate's
    /// `cluster-async` feature), or anything else that is
    /// [`ConnectionLike`] and cheap to clone.
    ///
    /// The limiter clones the connection for each decision. A connection
    /// that reconnects by itself (as a [`ConnectionManager`] does) lets the
    /// limiter go back to Redis after an outage; give it a short maximum
    /// delay between attempts.
    ///
    /// ```no_run
    /// use shuffle_limiter::{Quota, ShardedLimiter};
    /// use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379")?;
    /// let connection = client.get_connection_manager().await?;
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(100))
    ///     .name("search")
    ///     .build_redis_with(connection, RedisOptions::new(FailurePolicy::FailOpen))
    ///     .await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// As [`build_redis`](Self::build_redis), but for the URL.
    pub async fn build_redis_with<Conn>(
        self,
        connection: Conn,
        options: RedisOptions,
    ) -> Result<RedisLimiter<Conn, C>, Error>
    where
        Conn: ConnectionLike + Clone + Send + Sync,
    {
        let parts = self.redis_parts(&options)?;
        load_script(
            &parts.script,
            &mut connection.clone(),
            options.connect_timeout,
        )
        .await?;
        Ok(parts.into_limiter(connection, options))
    }

    /// Everything but the connection, checked before any network traffic.
    fn redis_parts(self, options: &RedisOptions) -> Result<Parts<C>, Error> {
        let plan = self.plan().map_err(Error::Config)?;
        if self.name.is_empty() || self.name.contains(['{', '}']) {
            return Err(Error::InvalidName { name: self.name });
        }
        for (option, value) in [
            ("deadline", options.deadline),
            ("retry_every", options.retry_every),
            ("connect_timeout", options.connect_timeout),
        ] {
            if value.is_zero() {
                return Err(Error::ZeroDuration { option });
            }
        }
        let interval_us = plan.split.interval.div_ceil(1000);
        let largest = plan.split.burst_of(0);
        let capacity = u128::from(interval_us) * u128::from(largest);
        if capacity > u128::from(MAX_CAPACITY_MICROS) {
            return Err(Error::RefillTooLong {
                refill_secs: (capacity / 1_000_000) as u64,
            });
        }
        let keys = (0..plan.assignment.buckets())
            .map(|i| format!("{{{}}}:b{i}", self.name))
            .collect();
        let cache = ShardCache::new(self.cache);
        let name = self.name.clone();
        let fallback = match options.policy {
            FailurePolicy::LocalFallback { replicas } => {
                Some(self.local_fallback(plan.quota, replicas)?)
            }
            FailurePolicy::FailClosed | FailurePolicy::FailOpen => None,
        };
        Ok(Parts {
            script: Script::new(GCRA_LUA),
            keys,
            split: plan.split,
            quota: plan.quota,
            assignment: plan.assignment,
            cache,
            name,
            interval_us,
            fallback,
        })
    }

    /// The in-process limiter with this process's share of the budget.
    fn local_fallback(self, quota: Quota, replicas: u32) -> Result<ShardedLimiter<C>, Error> {
        if replicas == 0 {
            return Err(Error::ZeroReplicas);
        }
        // The fallback must keep the shards: pin N and k as resolved for
        // the whole budget, whatever the defaults would pick for a share.
        let (buckets, per_tenant) = self.shape();
        let burst = quota.burst() / replicas;
        if burst < buckets {
            return Err(Error::FallbackBurstTooSmall {
                burst: quota.burst(),
                replicas,
                buckets,
            });
        }
        // R / replicas exactly: the same count over a period `replicas` times longer.
        let period =
            quota
                .period()
                .checked_mul(replicas)
                .ok_or(Error::Config(ConfigError::Overflow {
                    refill_secs: u128::from(u64::MAX),
                }))?;
        let share = Quota::new(quota.count(), period).with_burst(burst);
        Builder {
            quota: Some(share),
            buckets: Some(buckets),
            per_tenant: Some(per_tenant),
            ..self
        }
        .build()
        .map_err(Error::Config)
    }
}

/// Loads the script, which also proves the connection and its credentials.
async fn load_script<Conn: ConnectionLike>(
    script: &Script,
    connection: &mut Conn,
    wait: Duration,
) -> Result<(), Error> {
    timeout(wait, script.load_async(connection))
        .await
        .map_err(|_| Error::Timeout { after: wait })?
        .map_err(Error::from_redis)?;
    Ok(())
}

/// A limiter before it has a connection.
struct Parts<C> {
    script: Script,
    keys: Box<[String]>,
    split: Split,
    quota: Quota,
    assignment: Assignment,
    cache: ShardCache,
    name: String,
    interval_us: u64,
    fallback: Option<ShardedLimiter<C>>,
}

impl<C> Parts<C> {
    fn into_limiter<Conn>(self, connection: Conn, options: RedisOptions) -> RedisLimiter<Conn, C> {
        let buckets = self.keys.len();
        RedisLimiter {
            connection,
            script: self.script,
            keys: self.keys,
            split: self.split,
            quota: self.quota,
            assignment: self.assignment,
            cache: self.cache,
            name: self.name,
            interval_us: self.interval_us,
            fallback: self.fallback,
            options,
            epoch: Instant::now(),
            open_until: AtomicU64::new(0),
            last_error: Mutex::new(None),
            blocked_until: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
            counts: Default::default(),
        }
    }
}

/// A [`ShardedLimiter`] whose buckets live in Redis, shared by every process
/// that builds it with the same quota, N, k, salt and name.
///
/// Build it with [`Builder::build_redis`] or [`Builder::build_redis_with`];
/// the [module documentation](self) explains the script, the keys and the
/// failure policy. The limiter is `Send + Sync`; share it through an `Arc`.
pub struct RedisLimiter<Conn = ConnectionManager, C = MonotonicClock> {
    connection: Conn,
    script: Script,
    /// `{name}:b<i>` for every bucket i.
    keys: Box<[String]>,
    split: Split,
    quota: Quota,
    assignment: Assignment,
    cache: ShardCache,
    name: String,
    /// The bucket interval in whole microseconds, rounded up.
    interval_us: u64,
    fallback: Option<ShardedLimiter<C>>,
    options: RedisOptions,
    /// The origin of the local microsecond times below.
    epoch: Instant,
    /// Until when (µs since `epoch`) Redis is left alone after a failure; 0
    /// when it is asked.
    open_until: AtomicU64,
    last_error: Mutex<Option<Arc<Error>>>,
    /// Per bucket, until when (µs since `epoch`) it is known to lack a token.
    blocked_until: Box<[AtomicU64]>,
    /// Decisions from Redis, from the denial cache, by the policy; errors.
    counts: [CachePadded<AtomicU64>; 4],
}

const FROM_REDIS: usize = 0;
const FROM_CACHE: usize = 1;
const FROM_POLICY: usize = 2;
const ERRORS: usize = 3;

/// # Deciding
impl<Conn, C> RedisLimiter<Conn, C>
where
    Conn: ConnectionLike + Clone + Send + Sync,
    C: Clock,
{
    /// Takes one token for `tenant` from whichever of its buckets has the
    /// most room, in one round trip to Redis; the failure policy decides if
    /// Redis does not answer within the deadline.
    ///
    /// # Errors
    /// [`Denied`] when all of the tenant's buckets are empty (or the policy
    /// denies).
    pub async fn check(&self, tenant: impl AsRef<[u8]>) -> Result<Grant, Denied> {
        let tenant = tenant.as_ref();
        let shard = self.shard(tenant);
        self.decide_in(tenant, &shard, 1).await.result
    }

    /// Takes `n` tokens at once for `tenant`, all from one of its buckets.
    ///
    /// A weight of 0 is always granted (when Redis answers) and takes
    /// nothing: its [`Grant::remaining`] reads the tenant's tokens left.
    ///
    /// # Errors
    /// As [`ShardedLimiter::check_n`]: the outer [`InsufficientCapacity`]
    /// when no bucket of the tenant could ever hold `n` tokens (found without
    /// asking Redis), the inner [`Denied`] when none has them now.
    pub async fn check_n(
        &self,
        tenant: impl AsRef<[u8]>,
        n: u32,
    ) -> Result<Result<Grant, Denied>, InsufficientCapacity> {
        Ok(self.decide(tenant, n).await?.result)
    }

    /// As [`check_n`](Self::check_n), and how the decision was made: by
    /// Redis, from a cached denial, or by the failure policy, with the error
    /// that made the policy step in.
    ///
    /// ```no_run
    /// # use shuffle_limiter::redis::{RedisLimiter, Source};
    /// # async fn run(limiter: RedisLimiter) {
    /// let decision = limiter.decide("tenant-42", 1).await.unwrap();
    /// if decision.source() == Source::Policy {
    ///     eprintln!("Redis failed: {}", decision.error().unwrap());
    /// }
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`InsufficientCapacity`] as for [`check_n`](Self::check_n).
    pub async fn decide(
        &self,
        tenant: impl AsRef<[u8]>,
        n: u32,
    ) -> Result<Decision, InsufficientCapacity> {
        let tenant = tenant.as_ref();
        let shard = self.shard(tenant);
        self.split.check_weight(&shard, n)?;
        Ok(self.decide_in(tenant, &shard, n).await)
    }

    /// The decision at the server time `now` with the scan starting at the
    /// shard's `start`-th bucket, without a deadline, cache or policy: for
    /// comparing the script with the in-process limiter in tests only.
    #[doc(hidden)]
    pub async fn check_at(
        &self,
        tenant: impl AsRef<[u8]>,
        n: u32,
        now: Duration,
        start: usize,
    ) -> Result<Result<Result<Grant, Denied>, InsufficientCapacity>, Error> {
        let shard = self.shard(tenant);
        if let Err(e) = self.split.check_weight(&shard, n) {
            return Ok(Err(e));
        }
        let now = u64::try_from(now.as_micros()).unwrap_or(u64::MAX);
        let start = start % shard.buckets().len();
        Ok(Ok(self.eval(&shard, n, Some(now), start).await?))
    }

    async fn decide_in(&self, tenant: &[u8], shard: &Shard, n: u32) -> Decision {
        let sent = self.local_micros();
        // A weight of 0 is always granted, so never denied from memory.
        if n > 0
            && self.options.cache_denials
            && let Some(denied) = self.cached_denial(shard, sent)
        {
            return self.decided(Err(denied), Source::CachedDenial, None);
        }
        let open = self.open_until.load(Ordering::Relaxed);
        if open != 0 {
            // Only the first to see the pause over probes Redis; the others
            // keep to the policy until it answers.
            let probe = sent.saturating_add(self.retry_micros());
            if sent < open
                || self
                    .open_until
                    .compare_exchange(open, probe, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                let error = self.last_error.lock().clone();
                return self.by_policy(tenant, shard, n, error);
            }
        }
        let start = tie_break(shard.buckets().len());
        let error = match timeout(self.options.deadline, self.eval(shard, n, None, start)).await {
            Ok(Ok(result)) => {
                if open != 0 {
                    self.open_until.store(0, Ordering::Relaxed);
                }
                if let Err(denied) = result
                    && self.options.cache_denials
                {
                    self.remember(shard, n, sent, denied);
                }
                return self.decided(result, Source::Redis, None);
            }
            Ok(Err(error)) => error,
            Err(_) => Error::Timeout {
                after: self.options.deadline,
            },
        };
        self.counts[ERRORS].fetch_add(1, Ordering::Relaxed);
        let error = Arc::new(error);
        if error.is_outage() {
            let until = self.local_micros().saturating_add(self.retry_micros());
            self.open_until.store(until.max(1), Ordering::Relaxed);
            *self.last_error.lock() = Some(error.clone());
        }
        self.by_policy(tenant, shard, n, Some(error))
    }

    /// One round trip: the script's decision for `shard`.
    async fn eval(
        &self,
        shard: &Shard,
        n: u32,
        now_us: Option<u64>,
        start: usize,
    ) -> Result<Result<Grant, Denied>, Error> {
        let ids = shard.buckets();
        let mut invocation = self.script.prepare_invoke();
        for &b in ids {
            invocation.key(self.keys[b as usize].as_str());
        }
        invocation.arg(self.interval_us).arg(n).arg(start);
        for &b in ids {
            invocation.arg(self.split.burst_of(b));
        }
        if let Some(now) = now_us {
            invocation.arg(now);
        }
        let mut connection = self.connection.clone();
        let reply: Vec<i64> = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(Error::from_redis)?;
        let bad = || Error::Reply {
            detail: format!("{reply:?}"),
        };
        let &[granted, index, retry_us, remaining] = reply.as_slice() else {
            return Err(bad());
        };
        let bucket = usize::try_from(index)
            .ok()
            .and_then(|j| ids.get(j).copied())
            .ok_or_else(bad)?;
        match (granted, u64::try_from(retry_us), u64::try_from(remaining)) {
            (1, _, Ok(remaining)) => Ok(Ok(Grant { bucket, remaining })),
            (0, Ok(retry_us @ 1..), _) => Ok(Err(Denied {
                retry_after: Duration::from_micros(retry_us),
                bucket,
            })),
            _ => Err(bad()),
        }
    }

    /// The decision of the failure policy, with the error that called it in.
    fn by_policy(
        &self,
        tenant: &[u8],
        shard: &Shard,
        n: u32,
        error: Option<Arc<Error>>,
    ) -> Decision {
        let first = shard.buckets()[0];
        let deny = || Denied {
            retry_after: self.until_probe(),
            bucket: first,
        };
        let result = match (&self.fallback, self.options.policy) {
            (Some(local), _) => local.check_n(tenant, n).unwrap_or_else(|_| Err(deny())),
            (None, FailurePolicy::FailOpen) => Ok(Grant {
                bucket: first,
                remaining: 0,
            }),
            (None, _) => Err(deny()),
        };
        self.decided(result, Source::Policy, error)
    }

    fn decided(
        &self,
        result: Result<Grant, Denied>,
        source: Source,
        error: Option<Arc<Error>>,
    ) -> Decision {
        let count = match source {
            Source::Redis => FROM_REDIS,
            Source::CachedDenial => FROM_CACHE,
            Source::Policy => FROM_POLICY,
        };
        self.counts[count].fetch_add(1, Ordering::Relaxed);
        Decision {
            result,
            source,
            error,
        }
    }
}

/// # Time and the denial cache
impl<Conn, C> RedisLimiter<Conn, C> {
    /// Microseconds since the limiter was built, on the local clock.
    fn local_micros(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn retry_micros(&self) -> u64 {
        u64::try_from(self.options.retry_every.as_micros()).unwrap_or(u64::MAX)
    }

    /// How long until Redis is asked again (never zero).
    fn until_probe(&self) -> Duration {
        let open = self.open_until.load(Ordering::Relaxed);
        let wait = if open == 0 {
            self.retry_micros()
        } else {
            open.saturating_sub(self.local_micros())
        };
        Duration::from_micros(wait.max(1))
    }

    /// A denial from memory, when every bucket of the shard is known to lack
    /// a token at `now`.
    fn cached_denial(&self, shard: &Shard, now: u64) -> Option<Denied> {
        let mut soonest = (u64::MAX, shard.buckets()[0]);
        for &b in shard.buckets() {
            let until = self.blocked_until[b as usize].load(Ordering::Relaxed);
            if until <= now {
                return None;
            }
            if until < soonest.0 {
                soonest = (until, b);
            }
        }
        Some(Denied {
            retry_after: Duration::from_micros(soonest.0 - now),
            bucket: soonest.1,
        })
    }

    /// Remembers a denial of `n` tokens asked for at local time `sent`: no
    /// bucket of the shard can pay even one token until `n − 1` intervals
    /// before the retry time.
    fn remember(&self, shard: &Shard, n: u32, sent: u64, denied: Denied) {
        let retry = u64::try_from(denied.retry_after.as_micros()).unwrap_or(u64::MAX);
        let one = retry.saturating_sub(u64::from(n.saturating_sub(1)) * self.interval_us);
        if one == 0 {
            return;
        }
        let until = sent.saturating_add(one);
        for &b in shard.buckets() {
            self.blocked_until[b as usize].fetch_max(until, Ordering::Relaxed);
        }
    }
}

/// # Inspecting
impl<Conn, C> RedisLimiter<Conn, C> {
    /// The tenant's shard, from the cache when it was seen recently; the same
    /// as [`ShardedLimiter::shard`] for the same N, k and salt.
    pub fn shard(&self, tenant: impl AsRef<[u8]>) -> Shard {
        self.cache.get_or_assign(tenant.as_ref(), &self.assignment)
    }

    /// The assignment this limiter uses (N, k and its salt).
    pub fn assignment(&self) -> &Assignment {
        &self.assignment
    }

    /// The limiter's name, the hash tag of its keys.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The global budget.
    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// N: buckets in all.
    pub fn buckets(&self) -> u32 {
        self.assignment.buckets()
    }

    /// k: buckets per tenant.
    pub fn per_tenant(&self) -> u32 {
        self.assignment.per_tenant()
    }

    /// The time between two tokens of one bucket: the in-process interval
    /// rounded up to a whole microsecond.
    pub fn bucket_interval(&self) -> Duration {
        Duration::from_micros(self.interval_us)
    }

    /// The tokens bucket `bucket` holds when full, or `None` past the last
    /// bucket.
    pub fn bucket_burst(&self, bucket: u32) -> Option<u32> {
        (bucket < self.buckets()).then(|| self.split.burst_of(bucket))
    }

    /// The Redis key of bucket `bucket`, `{name}:b<bucket>`, or `None` past
    /// the last bucket.
    pub fn key(&self, bucket: u32) -> Option<&str> {
        self.keys.get(bucket as usize).map(String::as_str)
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.options.policy
    }

    /// The longest a decision takes.
    pub fn deadline(&self) -> Duration {
        self.options.deadline
    }

    /// The in-process limiter of [`FailurePolicy::LocalFallback`].
    pub fn fallback(&self) -> Option<&ShardedLimiter<C>> {
        self.fallback.as_ref()
    }

    /// The connection the limiter clones for each decision.
    pub fn connection(&self) -> &Conn {
        &self.connection
    }

    /// How many decisions were made which way so far, and how many times
    /// Redis failed.
    pub fn stats(&self) -> RedisStats {
        let read = |i: usize| self.counts[i].load(Ordering::Relaxed);
        RedisStats {
            from_redis: read(FROM_REDIS),
            from_cache: read(FROM_CACHE),
            from_policy: read(FROM_POLICY),
            errors: read(ERRORS),
        }
    }
}

impl<Conn, C> fmt::Debug for RedisLimiter<Conn, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLimiter")
            .field("name", &self.name)
            .field("quota", &self.quota)
            .field("buckets", &self.buckets())
            .field("per_tenant", &self.per_tenant())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// How a decision of a [`RedisLimiter`] was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// The script decided, on the server's clock.
    Redis,
    /// A denial from Redis, remembered until its retry time.
    CachedDenial,
    /// Redis failed, missed the deadline, or failed a moment ago: the
    /// [`FailurePolicy`] decided.
    Policy,
}

/// A decision of a [`RedisLimiter`], and how it was made.
#[derive(Debug, Clone)]
pub struct Decision {
    result: Result<Grant, Denied>,
    source: Source,
    error: Option<Arc<Error>>,
}

impl Decision {
    /// The grant or the denial.
    ///
    /// # Errors
    /// [`Denied`] when the request was denied.
    pub fn result(&self) -> Result<Grant, Denied> {
        self.result
    }

    /// Whether the request was granted.
    pub fn is_granted(&self) -> bool {
        self.result.is_ok()
    }

    /// Who decided.
    pub fn source(&self) -> Source {
        self.source
    }

    /// Why the policy decided: the error of this request, or of the one that
    /// made the limiter leave Redis alone for a while. `None` when Redis
    /// decided.
    pub fn error(&self) -> Option<&Error> {
        self.error.as_deref()
    }
}

/// Counts of a [`RedisLimiter`]'s decisions since it was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RedisStats {
    from_redis: u64,
    from_cache: u64,
    from_policy: u64,
    errors: u64,
}

impl RedisStats {
    /// Decisions made by the script in Redis.
    pub fn from_redis(&self) -> u64 {
        self.from_redis
    }

    /// Denials answered from the denial cache.
    pub fn from_cache(&self) -> u64 {
        self.from_cache
    }

    /// Decisions made by the failure policy.
    pub fn from_policy(&self) -> u64 {
        self.from_policy
    }

    /// Requests to Redis that failed or missed the deadline.
    pub fn errors(&self) -> u64 {
        self.errors
    }
}

/// Why a [`RedisLimiter`] could not be built, or why Redis could not decide.
///
/// Every message says what was wrong and what to change.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use shuffle_limiter::{Quota, ShardedLimiter};
/// use shuffle_limiter::redis::{Error, FailurePolicy, RedisOptions};
///
/// let err = ShardedLimiter::builder()
///     .quota(Quota::per_second(10))
///     .name("a{b}")
///     .build_redis("redis://127.0.0.1:6379", RedisOptions::new(FailurePolicy::FailClosed))
///     .await
///     .unwrap_err();
/// assert!(matches!(err, Error::InvalidName { .. }));
/// assert!(err.to_string().contains("without '{' or '}'"));
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The limiter's configuration cannot work.
    Config(ConfigError),
    /// The name cannot be a Redis hash tag.
    InvalidName {
        /// The name given.
        name: String,
    },
    /// A bucket would take longer to refill than the script can count
    /// exactly.
    RefillTooLong {
        /// The time one bucket takes to refill, in seconds.
        refill_secs: u64,
    },
    /// A [`FailurePolicy::LocalFallback`] over zero replicas.
    ZeroReplicas,
    /// A replica's share of the burst cannot give each bucket a token.
    FallbackBurstTooSmall {
        /// The quota's burst (B).
        burst: u32,
        /// Replicas sharing it.
        replicas: u32,
        /// Buckets in all (N).
        buckets: u32,
    },
    /// One of the [`RedisOptions`] durations is zero.
    ZeroDuration {
        /// The option's name.
        option: &'static str,
    },
    /// The URL is not a Redis URL.
    InvalidUrl {
        /// The `redis` crate's error.
        source: RedisError,
    },
    /// The connection could not be opened, or broke.
    Connection {
        /// The `redis` crate's error.
        source: RedisError,
    },
    /// Redis refused the credentials, or asked for some.
    Auth {
        /// The `redis` crate's error.
        source: RedisError,
    },
    /// The Redis user may not run the commands the limiter needs.
    NoPermission {
        /// The `redis` crate's error.
        source: RedisError,
    },
    /// The server is a read-only replica.
    ReadOnly {
        /// The `redis` crate's error.
        source: RedisError,
    },
    /// A bucket's key holds something else: another type, or a string that
    /// is not a time.
    NotABucket {
        /// The key.
        key: String,
        /// What the script found.
        detail: String,
    },
    /// Redis did not answer in time.
    Timeout {
        /// The time waited.
        after: Duration,
    },
    /// The script answered something this version does not understand.
    Reply {
        /// The reply.
        detail: String,
    },
    /// Any other error from Redis.
    Redis {
        /// The `redis` crate's error.
        source: RedisError,
    },
}

impl Error {
    fn from_redis(source: RedisError) -> Error {
        match (source.kind(), source.code()) {
            (ErrorKind::AuthenticationFailed, _) | (_, Some("NOAUTH" | "WRONGPASS")) => {
                Error::Auth { source }
            }
            (ErrorKind::Server(ServerErrorKind::NoPerm), _) => Error::NoPermission { source },
            (ErrorKind::Server(ServerErrorKind::ReadOnly), _) => Error::ReadOnly { source },
            (_, Some("NOTABUCKET")) => {
                let detail = source.detail().unwrap_or_default();
                let (key, detail) = detail.split_once(' ').unwrap_or((detail, ""));
                Error::NotABucket {
                    key: key.to_owned(),
                    detail: detail.to_owned(),
                }
            }
            (ErrorKind::Io, _) => Error::Connection { source },
            _ if source.is_connection_refusal() || source.is_connection_dropped() => {
                Error::Connection { source }
            }
            _ => Error::Redis { source },
        }
    }

    /// Whether the error is Redis's as a whole (leave it alone for a while),
    /// rather than one key's or one reply's.
    fn is_outage(&self) -> bool {
        !matches!(self, Error::NotABucket { .. } | Error::Reply { .. })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(e) => e.fmt(f),
            Error::InvalidName { name } => write!(
                f,
                "the limiter name {name:?} cannot be a Redis hash tag: \
                 use a non-empty .name(..) without '{{' or '}}'"
            ),
            Error::RefillTooLong { refill_secs } => write!(
                f,
                "a bucket would take {refill_secs} s to refill, beyond the 35 years Redis's \
                 Lua numbers count exactly: use a shorter period, a higher count or a \
                 smaller burst"
            ),
            Error::ZeroReplicas => f.write_str(
                "LocalFallback { replicas: 0 }: use the number of processes that share \
                 the budget, at least 1",
            ),
            Error::FallbackBurstTooSmall {
                burst,
                replicas,
                buckets,
            } => write!(
                f,
                "a burst of {burst} split over {replicas} replicas cannot give each of the \
                 {buckets} buckets a token: raise the burst to at least {} or count fewer \
                 replicas",
                u64::from(*buckets) * u64::from(*replicas)
            ),
            Error::ZeroDuration { option } => {
                write!(f, "RedisOptions::{option} is zero: use a positive duration")
            }
            Error::InvalidUrl { source } => write!(
                f,
                "not a Redis URL ({source}): use redis://[[user]:password@]host[:port][/db]"
            ),
            Error::Connection { source } => write!(
                f,
                "no connection to Redis ({source}): check that the server runs and that \
                 the URL's host and port are right"
            ),
            Error::Auth { source } => write!(
                f,
                "Redis refused the credentials ({source}): put the password the server \
                 expects in the URL, redis://:PASSWORD@host or redis://USER:PASSWORD@host"
            ),
            Error::NoPermission { source } => write!(
                f,
                "the Redis user may not run the limiter's commands ({source}): grant it \
                 EVALSHA, SCRIPT LOAD, GET, SET and TIME on the limiter's keys"
            ),
            Error::ReadOnly { source } => write!(
                f,
                "Redis is a read-only replica ({source}): connect to the primary"
            ),
            Error::NotABucket { key, detail } => write!(
                f,
                "the Redis key {key} is not a limiter bucket ({detail}): delete the key, or \
                 give the limiter a name no other data uses"
            ),
            Error::Timeout { after } => write!(
                f,
                "Redis did not answer within {after:?}: check that the server is up and not \
                 overloaded, or raise the deadline"
            ),
            Error::Reply { detail } => write!(
                f,
                "the limiter script answered {detail}, which this version does not \
                 understand: run the same version of shuffle-limiter everywhere"
            ),
            Error::Redis { source } => write!(
                f,
                "Redis could not decide ({source}): see the server's message for what to change"
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Config(e) => Some(e),
            Error::InvalidUrl { source }
            | Error::Connection { source }
            | Error::Auth { source }
            | Error::NoPermission { source }
            | Error::ReadOnly { source }
            | Error::Redis { source } => Some(source),
            _ => None,
        }
    }
}
