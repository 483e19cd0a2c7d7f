//! Building a Redis limiter: everything is checked before any traffic, then
//! the connection is made and the script loaded.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::{AsyncConnectionConfig, Client};
use tokio::time::timeout;

use super::RedisLimiter;
use super::batch::Batcher;
use super::breaker::Breaker;
use super::denial_cache::DenialCache;
use super::error::{BuildError, Error};
use super::layout::Layout;
use super::metrics::RedisMetrics;
use super::options::{Batching, FailurePolicy, RedisOptions};
use super::quota::ChangeScripts;
use super::script::{DrawScript, MICROS};
use super::spread::Rooms;
use super::store::{RedisStore, Shared};
use crate::assign::ShardCache;
use crate::clock::Clock;
use crate::error::ConfigError;
use crate::plan::isolation::{Isolation, warn_if_weak};
use crate::plan::live::LiveSplit;
use crate::plan::{Core, Split};
use crate::quota::Quota;
use crate::store::sealed::Local;
use crate::{Builder, Limiter};

/// The largest bucket capacity, in microseconds (about 35 years): the
/// script's values stay below 2^53, where doubles are exact.
pub(super) const MAX_CAPACITY_MICROS: u64 = 1 << 50;

/// The longest the connection made by [`Builder::build_redis`] waits between
/// two attempts to reconnect.
const MAX_RECONNECT_DELAY: Duration = Duration::from_millis(200);

/// # Redis
impl<C: Clock> Builder<C> {
    /// Connects to the Redis at `url` and builds a limiter whose buckets live
    /// there.
    ///
    /// The URL is `redis://[[user]:password@]host[:port][/db]`, or
    /// `rediss://…` for TLS if the `redis` crate's TLS feature is on. The
    /// connection is a [`ConnectionManager`] that reconnects by itself,
    /// waiting at most 200 ms between attempts. Building waits up to the
    /// [`connect_timeout`](RedisOptions::connect_timeout) for the server to
    /// answer, accept the credentials and load the script.
    ///
    /// A server that cannot be reached then (refused, not answering, still
    /// loading its data) does not stop the build, so that a service
    /// restarting during a Redis outage comes up: the limiter decides by
    /// its [`FailurePolicy`] (a [`FailClosed`](FailurePolicy::FailClosed)
    /// denial says [`DenialReason::StoreUnavailable`](crate::DenialReason::StoreUnavailable)),
    /// connects in the background, and decides in Redis once the server
    /// answers. [`Decision::source`](super::Decision::source) and
    /// [`RedisLimiter::stats`] show which.
    ///
    /// ```no_run
    /// use shuffle_limiter::{Quota, ShardedLimiter};
    /// use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
    ///
    /// # async fn run() -> Result<(), shuffle_limiter::redis::BuildError> {
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
    /// A configuration that cannot work ([`BuildError::Config`] and its
    /// neighbours), a URL that is not one ([`BuildError::InvalidUrl`]), or
    /// a server that answers and refuses the credentials, the commands or
    /// the script ([`BuildError::Redis`]).
    pub async fn build_redis(
        self,
        url: &str,
        options: RedisOptions,
    ) -> Result<RedisLimiter<ConnectionManager, C>, BuildError> {
        let parts = self.redis_parts(&options)?;
        let client = Client::open(url).map_err(|source| BuildError::InvalidUrl { source })?;
        let connection = connect(client, &parts.script, options.connect_timeout).await?;
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
    /// As [`build_redis`](Self::build_redis), but for the URL; and here a
    /// server that cannot be reached within the
    /// [`connect_timeout`](RedisOptions::connect_timeout) is an error too
    /// (the connection is yours: build it lazily, as
    /// `ConnectionManager::new_lazy_with_config` does, to build while
    /// Redis is away).
    pub async fn build_redis_with<Conn>(
        self,
        connection: Conn,
        options: RedisOptions,
    ) -> Result<RedisLimiter<Conn, C>, BuildError>
    where
        Conn: ConnectionLike + Clone + Send + Sync + 'static,
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
    fn redis_parts<L: Local<Clock = C>>(
        self,
        options: &RedisOptions,
    ) -> Result<Parts<L>, BuildError> {
        let mut core = self.plan().map_err(BuildError::Config)?;
        // A one-slot name that ends as a spread bucket's tag (`api:b0`)
        // would share keys (`{api:b0}:quota`) with the spread limiter `api`.
        let spread_tag = (self.name.rsplit_once(":b"))
            .is_some_and(|(_, i)| !i.is_empty() && i.bytes().all(|b| b.is_ascii_digit()));
        if self.name.is_empty()
            || self.name.contains(['{', '}'])
            || (options.layout == Layout::OneSlot && spread_tag)
        {
            return Err(BuildError::InvalidName { name: self.name });
        }
        // Redis hashes the first `{...}` of a key: a brace in the prefix
        // would move the hash tag off the name.
        if options.key_prefix.contains(['{', '}']) {
            return Err(BuildError::InvalidKeyPrefix {
                prefix: options.key_prefix.clone(),
            });
        }
        for (option, value) in [
            ("deadline", options.deadline),
            ("retry_every", options.retry_every),
            ("connect_timeout", options.connect_timeout),
        ] {
            if value.is_zero() {
                return Err(BuildError::ZeroDuration { option });
            }
        }
        if let Batching::On(max_decisions, window) = options.batch {
            if max_decisions == 0 || max_decisions > super::MAX_BATCH {
                return Err(BuildError::BatchSize { max_decisions });
            }
            if window.is_zero() || window >= options.deadline {
                return Err(BuildError::BatchWindow {
                    window,
                    deadline: options.deadline,
                });
            }
            if options.layout == Layout::Spread {
                return Err(BuildError::SpreadBatching);
            }
        }
        // The script counts whole microseconds: round each bucket's interval
        // up to one, which can only slow it down.
        let quota = core.quota();
        let split = in_micros(core.split.get())
            .map_err(|refill_secs| BuildError::RefillTooLong { refill_secs })?;
        core.split = Arc::new(LiveSplit::new(quota, split));
        let assignment = &core.shards.assignment;
        if options.layout == Layout::Spread && core.max_buckets > assignment.buckets() {
            return Err(BuildError::GrowingBuckets {
                max_buckets: core.max_buckets,
                buckets: assignment.buckets(),
            });
        }
        if options.layout == Layout::Spread && assignment.spill() > 0 {
            return Err(BuildError::SpreadBorrowing {
                spill: assignment.spill(),
            });
        }
        // Keys for every bucket N may grow to.
        let script = DrawScript::with_prefix(
            &options.key_prefix,
            &self.name,
            core.max_buckets,
            options.layout,
        );
        let isolation = Isolation::of(assignment, quota);
        warn_if_weak(&self.name, &isolation);
        let fallback = match options.policy {
            FailurePolicy::LocalFallback { replicas } => {
                Some(self.local_fallback(quota, replicas)?)
            }
            FailurePolicy::FailClosed | FailurePolicy::FailOpen => None,
        };
        Ok(Parts {
            core,
            script,
            fallback,
        })
    }

    /// The local fallback, with this process's share of the budget
    /// (without the isolation warning: the limiter it stands in for gave
    /// it).
    fn local_fallback<L: Local<Clock = C>>(
        self,
        quota: Quota,
        replicas: u32,
    ) -> Result<L, BuildError> {
        if replicas == 0 {
            return Err(BuildError::ZeroReplicas);
        }
        // The fallback must keep the shards: pin N and k as resolved for
        // the whole budget, whatever the defaults would pick for a share.
        let (buckets, per_tenant) = self.shape();
        let share = replica_share(quota, replicas, buckets)?;
        let settings = self.quota(share).buckets(buckets).per_tenant(per_tenant);
        let core = settings.plan().map_err(BuildError::Config)?;
        Ok(L::from_plan(core, settings.clock))
    }
}

/// `split` as the script counts it: each bucket's interval rounded up to a
/// whole microsecond (which can only slow it down), or the seconds a bucket
/// would take to refill when that is beyond what Lua's numbers count
/// exactly.
pub(super) fn in_micros(split: Split) -> Result<Split, u64> {
    let split = split.coarsened(MICROS);
    let capacity = split.interval() / MICROS * u64::from(split.burst_of(0));
    if capacity > MAX_CAPACITY_MICROS {
        return Err(capacity / 1_000_000);
    }
    Ok(split)
}

/// One process's share of `quota` among `replicas`: the rate R / replicas
/// exactly (the same count over a period `replicas` times longer), and
/// ⌊B / replicas⌋ of the burst, which must give each of the `buckets` a
/// token.
pub(super) fn replica_share(
    quota: Quota,
    replicas: u32,
    buckets: u32,
) -> Result<Quota, BuildError> {
    let burst = quota.burst() / replicas.max(1);
    if burst < buckets {
        return Err(BuildError::FallbackBurstTooSmall {
            burst: quota.burst(),
            replicas,
            buckets,
        });
    }
    let period = quota
        .period()
        .checked_mul(replicas)
        .ok_or(BuildError::Config(ConfigError::Overflow {
            refill_secs: u128::from(u64::MAX),
        }))?;
    Ok(Quota::new(quota.count(), period).with_burst(burst))
}

/// A connection to `client` that reconnects by itself, having loaded
/// `script` when the server answers within `wait`. A server that cannot be
/// reached (refused, timed out, still loading its data) is no error: the
/// connection is made when it answers, and the failure policy decides
/// meanwhile; a server that answers and refuses (the credentials, the
/// script) is.
async fn connect(
    client: Client,
    script: &DrawScript,
    wait: Duration,
) -> Result<ConnectionManager, Error> {
    // The limiter bounds every request (a decision, a refund, a read by
    // the deadline; a change of the quota or N by the connect timeout), so
    // the connection needs no timer of its own per request.
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(wait))
        .set_response_timeout(None)
        .set_min_delay(Duration::from_millis(10))
        .set_max_delay(MAX_RECONNECT_DELAY)
        .set_number_of_retries(10);
    // A plain first connection reports a refused connection or refused
    // credentials at once; the manager would retry them in the background.
    let first = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(wait))
        .set_response_timeout(Some(wait));
    let within = |_| Error::Timeout { after: wait };
    let proven = async {
        let mut first = timeout(
            wait,
            client.get_multiplexed_async_connection_with_config(&first),
        )
        .await
        .map_err(within)?
        .map_err(Error::from_redis)?;
        load_script(script, &mut first, wait).await?;
        timeout(
            wait,
            ConnectionManager::new_with_config(client.clone(), config.clone()),
        )
        .await
        .map_err(within)?
        .map_err(Error::from_redis)
    };
    match proven.await {
        Ok(connection) => Ok(connection),
        Err(e) if unreachable(&e) => {
            let connection = ConnectionManager::new_lazy_with_config(client, config)
                .map_err(Error::from_redis)?;
            // Nor the draw's library: loaded once Redis answers a decision.
            script.load_later();
            // Drive the first connection in the background, as the manager
            // drives a reconnection, rather than only while a decision waits
            // on it; the script is loaded by the first decision (NOSCRIPT).
            let mut driver = connection.clone();
            tokio::spawn(async move {
                let _: Result<(), _> = ::redis::cmd("PING").query_async(&mut driver).await;
            });
            Ok(connection)
        }
        Err(e) => Err(e),
    }
}

/// Whether a failure to connect says only that the server is not there
/// yet, rather than that it refuses what the limiter needs.
fn unreachable(e: &Error) -> bool {
    match e {
        Error::Connection { .. } | Error::Timeout { .. } => true,
        Error::Redis { source } => matches!(source.code(), Some("LOADING" | "MASTERDOWN")),
        _ => false,
    }
}

/// Loads the script, which also proves the connection and its
/// credentials, then the draw's functions where the server has them (see
/// [`DrawScript::load_functions`]), each within `wait`.
async fn load_script<Conn: ConnectionLike>(
    script: &DrawScript,
    connection: &mut Conn,
    wait: Duration,
) -> Result<(), Error> {
    timeout(wait, script.load_script(connection))
        .await
        .map_err(|_| Error::Timeout { after: wait })?
        .map_err(Error::from_redis)?;
    script.load_functions(connection, wait).await;
    Ok(())
}

/// A limiter before it has a connection, with its local fallback `L`.
struct Parts<L> {
    core: Core,
    script: DrawScript,
    fallback: Option<L>,
}

impl<L> Parts<L> {
    fn into_limiter<Conn>(
        self,
        connection: Conn,
        options: RedisOptions,
    ) -> Limiter<RedisStore<Conn, L>>
    where
        Conn: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let buckets = self.core.max_buckets;
        let shared = Shared {
            batcher: options.batching().map(|(max, window)| {
                let times = (window, options.deadline);
                Batcher::start(connection.clone(), &self.script, max, times)
            }),
            connection,
            script: self.script,
            changes: ChangeScripts::default(),
            split: Arc::clone(&self.core.split),
            version: AtomicU64::new(0),
            built: self.core.quota(),
            built_buckets: self.core.buckets(),
            reserve: self.core.reserve,
            breaker: Breaker::new(buckets, options.retry_every, options.layout),
            denials: DenialCache::new(buckets),
            rooms: Rooms::new(buckets),
            held: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
            fallback: self.fallback,
            fallback_behind: AtomicBool::new(false),
            weighed_at: AtomicU64::new(0),
            shards: self.core.shards.clone(),
            no_cache: ShardCache::new(0, &self.core.shards.assignment, self.core.max_buckets),
            metrics: self.core.metrics.clone(),
            redis_metrics: RedisMetrics::new(&self.core.name),
            options,
            counts: Default::default(),
        };
        let store = RedisStore {
            shared: Arc::new(shared),
        };
        Limiter::new(self.core, store)
    }
}
