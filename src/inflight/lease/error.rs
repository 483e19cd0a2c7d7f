//! What can go wrong over Redis: building the limit, and an acquire.

use std::fmt;
use std::time::Duration;

use crate::inflight::{BuildError, Rejected};
use crate::redis::Error;

/// Why an acquire over Redis got no permit: refused as in process, or
/// Redis failed and the failure policy refuses.
///
/// ```
/// use shuffle_limiter::inflight::{LeaseError, RejectReason};
/// # fn busy(error: LeaseError) {
/// match error {
///     LeaseError::Rejected(rejected) => assert_eq!(rejected.reason(), RejectReason::Busy),
///     LeaseError::Redis(error) => eprintln!("Redis failed: {error}"),
///     _ => {}
/// }
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LeaseError {
    /// The limit refused, with the reasons of the in-process limit.
    Rejected(Rejected),
    /// Redis failed, missed the deadline, or a pool key holds other data
    /// ([`Error::NotAPool`]), and the failure policy does not grant.
    Redis(Error),
}

impl LeaseError {
    /// The refusal, when the limit refused (rather than Redis failing).
    pub fn rejected(&self) -> Option<Rejected> {
        match self {
            LeaseError::Rejected(rejected) => Some(*rejected),
            LeaseError::Redis(_) => None,
        }
    }
}

impl From<Rejected> for LeaseError {
    fn from(rejected: Rejected) -> Self {
        LeaseError::Rejected(rejected)
    }
}

impl fmt::Display for LeaseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseError::Rejected(rejected) => rejected.fmt(f),
            LeaseError::Redis(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for LeaseError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LeaseError::Rejected(rejected) => Some(rejected),
            LeaseError::Redis(error) => Some(error),
        }
    }
}

/// Why [`Builder::build_redis`](crate::inflight::Builder::build_redis)
/// refused. Every message says what to change.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use redis::aio::{ConnectionManager, ConnectionManagerConfig};
/// use shuffle_limiter::inflight::{InFlight, LeaseBuildError, LeaseOptions};
///
/// // Checked before any traffic: a connection that never connects will do.
/// let client = redis::Client::open("redis://127.0.0.1:6379")?;
/// let connection = ConnectionManager::new_lazy_with_config(client, ConnectionManagerConfig::new())?;
/// let options = LeaseOptions::new("api", Duration::ZERO);
/// let err = InFlight::builder().concurrency(8).build_redis(connection, options).await;
/// let err = err.unwrap_err();
/// assert!(matches!(err, LeaseBuildError::ZeroTtl));
/// assert!(err.to_string().contains("use a TTL"));
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum LeaseBuildError {
    /// The limit's counts cannot work, as in process.
    Config(BuildError),
    /// A lease of no time would expire as it is taken.
    ZeroTtl,
    /// Renewals no more often than the TTL would let a held lease expire.
    RenewTooSlow {
        /// The renewal interval asked for.
        renew_every: Duration,
        /// The TTL.
        ttl: Duration,
    },
    /// A TTL the server's microsecond clock cannot add exactly.
    TtlTooLong {
        /// The TTL asked for.
        ttl: Duration,
    },
    /// One of the other durations is zero.
    ZeroDuration {
        /// The option's name.
        option: &'static str,
    },
    /// The name cannot be a Redis hash tag.
    InvalidName {
        /// The name given.
        name: String,
    },
    /// The key prefix holds a `{` or a `}`.
    InvalidKeyPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// A local fallback over zero replicas.
    ZeroReplicas,
    /// A replica's share of the concurrency cannot give each pool a permit.
    FallbackTooSmall {
        /// The concurrency (C).
        concurrency: u32,
        /// Replicas sharing it.
        replicas: u32,
        /// Pools in all (N).
        pools: u32,
    },
    /// Redis refused the scripts or did not answer in time.
    Redis(Error),
}

impl fmt::Display for LeaseBuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseBuildError::Config(e) => e.fmt(f),
            LeaseBuildError::ZeroTtl => f.write_str(
                "a lease TTL of zero would expire as it is taken: use a TTL longer than the \
                 longest pause a holder may have (seconds, typically)",
            ),
            LeaseBuildError::RenewTooSlow { renew_every, ttl } => write!(
                f,
                "renewing every {renew_every:?} lets a lease of {ttl:?} expire while held: \
                 renew at most every third of the TTL, or leave renew_every unset"
            ),
            LeaseBuildError::TtlTooLong { ttl } => write!(
                f,
                "a lease TTL of {ttl:?} is beyond the 35 years the scripts count exactly: \
                 use a shorter TTL"
            ),
            LeaseBuildError::ZeroDuration { option } => {
                write!(f, "LeaseOptions::{option} is zero: use a positive duration")
            }
            LeaseBuildError::InvalidName { name } => write!(
                f,
                "the limit name {name:?} cannot be a Redis hash tag: use a non-empty name \
                 without '{{' or '}}'"
            ),
            LeaseBuildError::InvalidKeyPrefix { prefix } => write!(
                f,
                "the key prefix {prefix:?} holds a '{{' or '}}', which would change the keys' \
                 hash tag: use a prefix without braces"
            ),
            LeaseBuildError::ZeroReplicas => f.write_str(
                "LocalFallback { replicas: 0 }: use the number of processes that share the \
                 limit, at least 1",
            ),
            LeaseBuildError::FallbackTooSmall {
                concurrency,
                replicas,
                pools,
            } => write!(
                f,
                "a concurrency of {concurrency} split over {replicas} replicas cannot give \
                 each of the {pools} pools a permit: raise the concurrency to at least {} or \
                 count fewer replicas",
                u64::from(*pools) * u64::from(*replicas)
            ),
            LeaseBuildError::Redis(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LeaseBuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LeaseBuildError::Config(e) => Some(e),
            LeaseBuildError::Redis(e) => Some(e),
            _ => None,
        }
    }
}

impl From<BuildError> for LeaseBuildError {
    fn from(e: BuildError) -> Self {
        LeaseBuildError::Config(e)
    }
}
