//! What can go wrong: building a Redis limiter ([`BuildError`]) and asking
//! Redis for a decision ([`Error`]). Every message says what was wrong and
//! what to change.

use std::fmt;
use std::time::Duration;

use ::redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::error::ConfigError;

/// Why a [`RedisLimiter`](super::RedisLimiter) could not be built.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use shuffle_limiter::{Quota, ShardedLimiter};
/// use shuffle_limiter::redis::{BuildError, FailurePolicy, RedisOptions};
///
/// let err = ShardedLimiter::builder()
///     .quota(Quota::per_second(10))
///     .name("a{b}")
///     .build_redis("redis://127.0.0.1:6379", RedisOptions::new(FailurePolicy::FailClosed))
///     .await
///     .unwrap_err();
/// assert!(matches!(err, BuildError::InvalidName { .. }));
/// assert!(err.to_string().contains("without '{' or '}'"));
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum BuildError {
    /// The limiter's configuration cannot work.
    Config(ConfigError),
    /// The name cannot be a Redis hash tag: it is empty or holds a brace,
    /// or (in the one-slot layout) it ends in `:b` and digits, as the
    /// spread layout's bucket tags do, whose keys it would share (`api:b0`
    /// and the spread limiter `api` would both write `{api:b0}:quota`).
    InvalidName {
        /// The name given.
        name: String,
    },
    /// The [key prefix](super::RedisOptions::key_prefix) holds a `{` or a
    /// `}`, which would change the keys' hash tag.
    InvalidKeyPrefix {
        /// The prefix given.
        prefix: String,
    },
    /// A bucket would take longer to refill than the script can count
    /// exactly.
    RefillTooLong {
        /// The time one bucket takes to refill, in seconds.
        refill_secs: u64,
    },
    /// A [`FailurePolicy::LocalFallback`](super::FailurePolicy::LocalFallback)
    /// over zero replicas.
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
    /// Borrowing ([`Builder::borrow_from`](crate::Builder::borrow_from)) with
    /// the [`Layout::Spread`](super::Layout::Spread) layout, which does not
    /// offer it.
    SpreadBorrowing {
        /// The spill buckets asked for (d).
        spill: u32,
    },
    /// Room for N to grow was asked for in the
    /// [spread layout](super::Layout::Spread), where N stays as built.
    GrowingBuckets {
        /// The most buckets asked for.
        max_buckets: u32,
        /// Buckets in all (N).
        buckets: u32,
    },
    /// One of the [`RedisOptions`](super::RedisOptions) durations is zero.
    ZeroDuration {
        /// The option's name.
        option: &'static str,
    },
    /// [`RedisOptions::batch`](super::RedisOptions::batch) with no
    /// decisions per batch, or more than [`MAX_BATCH`](super::MAX_BATCH).
    BatchSize {
        /// The most decisions per batch asked for.
        max_decisions: u32,
    },
    /// [`RedisOptions::batch`](super::RedisOptions::batch) with a window of
    /// zero, or not shorter than the deadline (every decision that waited
    /// for its batch would miss it).
    BatchWindow {
        /// The window asked for.
        window: Duration,
        /// The [deadline](super::RedisOptions::deadline).
        deadline: Duration,
    },
    /// [`RedisOptions::batch`](super::RedisOptions::batch) with the
    /// [`Layout::Spread`](super::Layout::Spread) layout, whose buckets may
    /// live on different Cluster nodes, where no one script call reaches
    /// them all.
    SpreadBatching,
    /// The URL is not a Redis URL.
    InvalidUrl {
        /// The `redis` crate's error.
        source: RedisError,
    },
    /// Redis could not be reached, refused the credentials or the script,
    /// or did not answer in time.
    Redis(Error),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Config(e) => e.fmt(f),
            BuildError::InvalidName { name } => write!(
                f,
                "the limiter name {name:?} cannot be a Redis hash tag: \
                 use a non-empty .name(..) without '{{' or '}}', and not ending in ':b' and \
                 digits (in the one-slot layout: the spread layout's bucket tags end so)"
            ),
            BuildError::InvalidKeyPrefix { prefix } => write!(
                f,
                "the key prefix {prefix:?} holds a '{{' or '}}', which would change the keys' \
                 hash tag: use a prefix without braces, such as \"billing:\""
            ),
            BuildError::RefillTooLong { refill_secs } => write!(
                f,
                "a bucket would take {refill_secs} s to refill, beyond the 35 years Redis's \
                 Lua numbers count exactly: use a shorter period, a higher count or a \
                 smaller burst"
            ),
            BuildError::ZeroReplicas => f.write_str(
                "LocalFallback { replicas: 0 }: use the number of processes that share \
                 the budget, at least 1",
            ),
            BuildError::FallbackBurstTooSmall {
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
            BuildError::SpreadBorrowing { spill } => write!(
                f,
                "borrowing from {spill} spill buckets is not offered with Layout::Spread, \
                 whose buckets may live on different Redis Cluster nodes: remove \
                 .borrow_from(..), or use Layout::OneSlot"
            ),
            BuildError::GrowingBuckets {
                max_buckets,
                buckets,
            } => write!(
                f,
                "max_buckets({max_buckets}) asks for room to change N live, which the spread \
                 layout does not offer yet: remove .max_buckets(..) (or set it to {buckets}), \
                 or use Layout::OneSlot (the default)"
            ),
            BuildError::ZeroDuration { option } => {
                write!(f, "RedisOptions::{option} is zero: use a positive duration")
            }
            BuildError::BatchSize { max_decisions } => write!(
                f,
                "RedisOptions::batch({max_decisions}, ..) asks for {max_decisions} decisions \
                 per batch: use 1 to {}",
                super::MAX_BATCH
            ),
            BuildError::BatchWindow { window, deadline } => write!(
                f,
                "RedisOptions::batch(.., {window:?}) waits {window:?} for a batch, which must \
                 be more than zero and shorter than the deadline ({deadline:?}): use a window \
                 of a few hundred microseconds"
            ),
            BuildError::SpreadBatching => f.write_str(
                "RedisOptions::batch(..) is not offered with Layout::Spread, whose buckets may \
                 live on different Redis Cluster nodes: remove .batch(..), or use \
                 Layout::OneSlot",
            ),
            BuildError::InvalidUrl { source } => write!(
                f,
                "not a Redis URL ({source}): use redis://[[user]:password@]host[:port][/db]"
            ),
            BuildError::Redis(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for BuildError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BuildError::Config(e) => Some(e),
            BuildError::InvalidUrl { source } => Some(source),
            BuildError::Redis(e) => e.source(),
            _ => None,
        }
    }
}

impl From<Error> for BuildError {
    fn from(e: Error) -> Self {
        BuildError::Redis(e)
    }
}

/// Why Redis could not make a decision (the failure policy made it instead;
/// see [`Decision::error`](super::Decision::error)), or could not be reached
/// while building.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
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
    /// A bucket's key holds another type (a hash, a list, ...). A string
    /// that is not a time is repaired instead (see the
    /// [module documentation](super#keys)).
    NotABucket {
        /// The key.
        key: String,
        /// What the script found.
        detail: String,
    },
    /// A pool key of an in-flight limit over Redis
    /// ([`RedisInFlight`](crate::inflight::RedisInFlight)) holds another
    /// type, or a member that is not a lease, or its token counter is not
    /// a counter.
    NotAPool {
        /// The key.
        key: String,
        /// What the script found.
        detail: String,
    },
    /// A retry budget's key
    /// ([`RedisRetryBudget`](super::RedisRetryBudget)) holds another type,
    /// or text that is not `"<thousandths> <due>"`.
    NotARetryBudget {
        /// The key.
        key: String,
        /// What the script found.
        detail: String,
    },
    /// The limiter's hold-offs key (`{name}:held`, where a hold-off records
    /// until when each bucket is held) holds another type than a hash.
    NotAHoldOff {
        /// The key.
        key: String,
        /// What the script found.
        detail: String,
    },
    /// The limiter's quota key holds something that is not a quota: text of
    /// another shape, or a key of another type (a hash, a list, ...).
    NotAQuota {
        /// The key.
        key: String,
        /// What it holds.
        detail: String,
    },
    /// A quota set live that the limiter's buckets cannot take.
    Config(ConfigError),
    /// A quota or N cannot be set live in the spread layout yet.
    SpreadQuota,
    /// A quota or N set live whose share the local fallback
    /// ([`FailurePolicy::LocalFallback`](super::FailurePolicy::LocalFallback))
    /// cannot take: each replica's burst, B / replicas, is below N. Nothing
    /// changed.
    FallbackBurstTooSmall {
        /// The quota's burst (B).
        burst: u32,
        /// Replicas sharing it.
        replicas: u32,
        /// Buckets in all (N).
        buckets: u32,
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
    /// A hold-off in the [spread layout](super::Layout::Spread) held some of
    /// its buckets and not the others (their node did not answer in time,
    /// or failed): every bucket that answered is held, each on its own
    /// node, and so is the local fallback's copy of every bucket; holding
    /// again (all, or the buckets named) is safe.
    NotAllHeld {
        /// The buckets Redis did not hold, in order.
        unheld: Vec<u32>,
        /// Why the first of them was not.
        error: Box<Error>,
    },
    /// The request gave up without a reply to blame: the quota kept
    /// changing under it (other processes changing it faster than it could
    /// follow), or the task sending this process's batches is gone.
    GaveUp {
        /// What happened.
        detail: String,
    },
    /// Any other error from Redis.
    Redis {
        /// The `redis` crate's error.
        source: RedisError,
    },
}

impl Error {
    pub(crate) fn from_redis(source: RedisError) -> Error {
        match (source.kind(), source.code()) {
            (ErrorKind::AuthenticationFailed, _) | (_, Some("NOAUTH" | "WRONGPASS")) => {
                Error::Auth { source }
            }
            // A server that wants a password refuses a long command (a
            // script over 16 KiB) from a client without one this way,
            // before it would say NOAUTH.
            (_, Some("ERR"))
                if (source.detail())
                    .is_some_and(|d| d.starts_with("Protocol error: unauthenticated")) =>
            {
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
            (_, Some("NOTAPOOL")) => {
                let detail = source.detail().unwrap_or_default();
                let (key, detail) = detail.split_once(' ').unwrap_or((detail, ""));
                Error::NotAPool {
                    key: key.to_owned(),
                    detail: detail.to_owned(),
                }
            }
            (_, Some("NOTARETRY")) => {
                let detail = source.detail().unwrap_or_default();
                let (key, detail) = detail.split_once(' ').unwrap_or((detail, ""));
                Error::NotARetryBudget {
                    key: key.to_owned(),
                    detail: detail.to_owned(),
                }
            }
            (_, Some("NOTAHOLD")) => {
                let detail = source.detail().unwrap_or_default();
                let (key, detail) = detail.split_once(' ').unwrap_or((detail, ""));
                Error::NotAHoldOff {
                    key: key.to_owned(),
                    detail: detail.to_owned(),
                }
            }
            (_, Some("NOTAQUOTA")) => {
                let detail = source.detail().unwrap_or_default();
                let (key, detail) = detail.split_once(' ').unwrap_or((detail, ""));
                Error::NotAQuota {
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
    /// rather than one shard's keys' or one reply's.
    pub(crate) fn is_outage(&self) -> bool {
        if let Error::NotAllHeld { error, .. } = self {
            return error.is_outage();
        }
        !matches!(
            self,
            Error::NotABucket { .. }
                | Error::NotAPool { .. }
                | Error::NotARetryBudget { .. }
                | Error::NotAQuota { .. }
                | Error::NotAHoldOff { .. }
                | Error::Reply { .. }
                | Error::GaveUp { .. }
                | Error::Config(_)
                | Error::SpreadQuota
                | Error::FallbackBurstTooSmall { .. }
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
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
                 EVALSHA, SCRIPT LOAD, GET, MGET, SET, DEL, TIME, and for hold-offs TYPE, \
                 HGET, HGETALL, HSET, PTTL and PEXPIRE, on the limiter's keys (and on Redis 7, \
                 for fewer instructions per decision, FUNCTION LOAD and FCALL)"
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
            Error::NotAPool { key, detail } => write!(
                f,
                "the Redis key {key} is not an in-flight pool ({detail}): delete the key, or \
                 give the limit a name no other data uses"
            ),
            Error::NotARetryBudget { key, detail } => write!(
                f,
                "the Redis key {key} is not a retry budget ({detail}): delete the key, or \
                 give the limiter a name no other data uses"
            ),
            Error::NotAHoldOff { key, detail } => write!(
                f,
                "the Redis key {key} is not the limiter's hold-offs ({detail}): delete the key, \
                 or give the limiter a name no other data uses"
            ),
            Error::NotAQuota { key, detail } => write!(
                f,
                "the Redis key {key} is not a limiter quota (it holds {detail}): delete it to \
                 go back to the quota the limiter was built with, or set one with set_quota"
            ),
            Error::Config(e) => e.fmt(f),
            Error::SpreadQuota => f.write_str(
                "a quota or N cannot be changed live in the spread layout yet: use the \
                 one-slot layout (the default) to change them live, or restart every process \
                 with the new settings",
            ),
            &Error::FallbackBurstTooSmall {
                burst,
                replicas,
                buckets,
            } => BuildError::FallbackBurstTooSmall {
                burst,
                replicas,
                buckets,
            }
            .fmt(f),
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
            Error::NotAllHeld { unheld, error } => write!(
                f,
                "the hold-off held every bucket but {unheld:?}, which Redis did not hold \
                 ({error}): hold off again once their node answers"
            ),
            Error::GaveUp { detail } => f.write_str(detail),
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
            Error::Connection { source }
            | Error::Auth { source }
            | Error::NoPermission { source }
            | Error::ReadOnly { source }
            | Error::Redis { source } => Some(source),
            Error::Config(e) => Some(e),
            _ => None,
        }
    }
}

/// `request`'s answer, or [`Error::Timeout`] once `wait` has passed: how
/// every round trip outside a decision is bounded (the connection has no
/// timer of its own).
pub(crate) async fn within<T>(
    wait: Duration,
    request: impl std::future::Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    (tokio::time::timeout(wait, request).await).unwrap_or(Err(Error::Timeout { after: wait }))
}
