//! Building an in-flight limit over Redis: every option checked before
//! any traffic, then the scripts loaded.

use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use tokio::time::timeout;

use super::script::Scripts;
use super::unanswered::RECORD_DEADLINES;
use super::{LeaseBuildError, LeaseOptions, RedisInFlight, Shared};
use crate::inflight::{Builder, InFlight};
use crate::redis::breaker::Breaker;
use crate::redis::{DEFAULT_CONNECT_TIMEOUT, Error, FailurePolicy, Layout};

/// The largest TTL, in microseconds (about 35 years): an expiry stays an
/// integer that the scripts' doubles hold exactly.
const MAX_TTL_MICROS: u64 = 1 << 50;

/// # Over Redis
impl Builder {
    /// Builds the limit in Redis over `connection` (a
    /// [`ConnectionManager`](::redis::aio::ConnectionManager), a `MultiplexedConnection`, or anything
    /// [`ConnectionLike`] and cheap to clone), after checking the
    /// configuration and loading the scripts.
    ///
    /// Every process that shares the limit builds it with the same
    /// concurrency, pools, per-tenant count, salt and
    /// [name](LeaseOptions::new); per-user counts, queue lengths and waits
    /// are each process's own. An acquire waits at most
    /// [`LeaseOptions::max_wait`] if set, else the builder's `max_wait`
    /// (feature `wait`), else without a bound.
    ///
    /// # Errors
    /// [`LeaseBuildError`]: the counts as in process
    /// ([`LeaseBuildError::Config`]), a zero TTL, a name or prefix that
    /// cannot be a hash tag, a fallback too small, or a server that
    /// refuses the scripts or does not answer within a second.
    pub async fn build_redis<Conn>(
        self,
        connection: Conn,
        options: LeaseOptions,
    ) -> Result<RedisInFlight<Conn>, LeaseBuildError>
    where
        Conn: ConnectionLike + Clone + Send + Sync + 'static,
    {
        let limit = self.clone().build()?;
        let ttl_micros = check(&options)?;
        let fallback = match options.policy {
            FailurePolicy::LocalFallback { replicas } => {
                Some(Arc::new(fallback(self, &limit, replicas)?))
            }
            _ => None,
        };
        // The options' bound, else the builder's (else none), as in process.
        #[cfg(feature = "wait")]
        let max_wait = options.max_wait.or(limit.max_wait());
        #[cfg(not(feature = "wait"))]
        let max_wait = options.max_wait;
        let pools = limit.pools();
        let scripts = Scripts::new(&options.key_prefix, &options.name, pools);
        let mut loading = connection.clone();
        for script in scripts.all() {
            let load = script.load_async(&mut loading);
            timeout(DEFAULT_CONNECT_TIMEOUT, load)
                .await
                .map_err(|_| Error::Timeout {
                    after: DEFAULT_CONNECT_TIMEOUT,
                })
                .and_then(|loaded| loaded.map_err(Error::from_redis))
                .map_err(LeaseBuildError::Redis)?;
        }
        let shared = Shared {
            connection,
            scripts,
            waiting: (0..limit.pools()).map(|_| AtomicU32::new(0)).collect(),
            limit,
            fallback,
            policy: options.policy,
            ttl: options.ttl,
            ttl_micros,
            renew_every: options.renewal_interval(),
            deadline: options.deadline,
            max_wait,
            max_backoff: options.max_backoff,
            record_ms: record_ms(options.deadline),
            breaker: Breaker::new(pools, options.retry_every, Layout::OneSlot),
        };
        Ok(RedisInFlight {
            shared: Arc::new(shared),
        })
    }
}

/// The options' TTL in µs, if every option can work.
fn check(options: &LeaseOptions) -> Result<u64, LeaseBuildError> {
    if options.ttl.is_zero() {
        return Err(LeaseBuildError::ZeroTtl);
    }
    let micros = u64::try_from(options.ttl.as_micros()).unwrap_or(u64::MAX);
    if micros > MAX_TTL_MICROS {
        return Err(LeaseBuildError::TtlTooLong { ttl: options.ttl });
    }
    for (option, value) in [
        ("renew_every", options.renewal_interval()),
        ("deadline", options.deadline),
        ("max_backoff", options.max_backoff),
        ("retry_every", options.retry_every),
    ] {
        if value.is_zero() {
            return Err(LeaseBuildError::ZeroDuration { option });
        }
    }
    if options.renewal_interval() >= options.ttl {
        return Err(LeaseBuildError::RenewTooSlow {
            renew_every: options.renewal_interval(),
            ttl: options.ttl,
        });
    }
    if options.name.is_empty() || options.name.contains(['{', '}']) {
        return Err(LeaseBuildError::InvalidName {
            name: options.name.clone(),
        });
    }
    if options.key_prefix.contains(['{', '}']) {
        return Err(LeaseBuildError::InvalidKeyPrefix {
            prefix: options.key_prefix.clone(),
        });
    }
    Ok(micros.max(1))
}

/// How long an acquire's record lives, in ms: `RECORD_DEADLINES`
/// deadlines, at least 1 ms, at most the longest TTL.
fn record_ms(deadline: Duration) -> u64 {
    let ms = deadline.saturating_mul(RECORD_DEADLINES).as_millis();
    u64::try_from(ms)
        .unwrap_or(u64::MAX)
        .clamp(1, MAX_TTL_MICROS / 1000)
}

/// The in-process limit of one replica: C / replicas, with the same N, k
/// and salt (so the same shards).
fn fallback(
    builder: Builder,
    limit: &InFlight,
    replicas: u32,
) -> Result<InFlight, LeaseBuildError> {
    if replicas == 0 {
        return Err(LeaseBuildError::ZeroReplicas);
    }
    let (concurrency, pools) = (limit.concurrency(), limit.pools());
    let share = concurrency / replicas;
    if share < pools {
        return Err(LeaseBuildError::FallbackTooSmall {
            concurrency,
            replicas,
            pools,
        });
    }
    let builder = builder
        .concurrency(share)
        .pools(pools)
        .per_tenant(limit.per_tenant());
    Ok(builder.build()?)
}
