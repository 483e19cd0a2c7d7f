//! How an in-flight limit over Redis names its keys, how long its leases
//! live, and what it does when Redis fails.

use std::time::Duration;

use crate::redis::{DEFAULT_DEADLINE, DEFAULT_RETRY_EVERY, FailurePolicy};

/// The longest pause between two tries of a waiting acquire unless
/// [`LeaseOptions::max_backoff`] says otherwise: 50 ms.
pub const DEFAULT_LEASE_BACKOFF: Duration = Duration::from_millis(50);

/// How a [`RedisInFlight`](super::RedisInFlight) keeps its leases: the
/// name of the limit (shared by every process that holds its permits), the
/// leases' time to live, and the [`FailurePolicy`].
///
/// ```
/// use std::time::Duration;
/// use shuffle_limiter::inflight::LeaseOptions;
/// use shuffle_limiter::redis::FailurePolicy;
///
/// let options = LeaseOptions::new("partner-api", Duration::from_secs(9))
///     .failure_policy(FailurePolicy::LocalFallback { replicas: 4 })
///     .key_prefix("billing:");
/// assert_eq!(options.renewal_interval(), Duration::from_secs(3));
/// ```
#[derive(Debug, Clone)]
#[must_use = "options do nothing until passed to build_redis"]
pub struct LeaseOptions {
    pub(super) name: String,
    pub(super) ttl: Duration,
    pub(super) renew_every: Option<Duration>,
    pub(super) deadline: Duration,
    pub(super) policy: FailurePolicy,
    pub(super) key_prefix: String,
    pub(super) max_wait: Option<Duration>,
    pub(super) max_backoff: Duration,
    pub(super) retry_every: Duration,
}

impl LeaseOptions {
    /// Leases of the limit `name` (its keys' hash tag) living `ttl` unless
    /// renewed; renewed every third of it, each round trip bounded by
    /// [`DEFAULT_DEADLINE`], [`FailurePolicy::FailClosed`], Redis left
    /// alone for [`DEFAULT_RETRY_EVERY`] after it fails, no key prefix,
    /// waits bounded as the builder's (see [`max_wait`](LeaseOptions::max_wait))
    /// tried again at least every [`DEFAULT_LEASE_BACKOFF`].
    pub fn new(name: impl Into<String>, ttl: Duration) -> LeaseOptions {
        LeaseOptions {
            name: name.into(),
            ttl,
            renew_every: None,
            deadline: DEFAULT_DEADLINE,
            policy: FailurePolicy::FailClosed,
            key_prefix: String::new(),
            max_wait: None,
            max_backoff: DEFAULT_LEASE_BACKOFF,
            retry_every: DEFAULT_RETRY_EVERY,
        }
    }

    /// How often a held permit renews its lease: a third of the TTL unless
    /// set; less than the TTL, or it could expire between two renewals.
    pub fn renew_every(mut self, every: Duration) -> LeaseOptions {
        self.renew_every = Some(every);
        self
    }

    /// The renewal interval: as set, or a third of the TTL.
    pub fn renewal_interval(&self) -> Duration {
        self.renew_every.unwrap_or(self.ttl / 3)
    }

    /// The longest one round trip to Redis may take; past it the failure
    /// policy answers (see [`DEFAULT_DEADLINE`]).
    pub fn deadline(mut self, deadline: Duration) -> LeaseOptions {
        self.deadline = deadline;
        self
    }

    /// What an acquire does when Redis fails or misses the deadline:
    /// [`FailClosed`](FailurePolicy::FailClosed) refuses with the error,
    /// [`FailOpen`](FailurePolicy::FailOpen) gives a permit that holds no
    /// lease (for an outage only: a key holding other data still refuses),
    /// [`LocalFallback`](FailurePolicy::LocalFallback) takes a permit of
    /// an in-process limit of C / replicas with the same N, k and salt.
    pub fn failure_policy(mut self, policy: FailurePolicy) -> LeaseOptions {
        self.policy = policy;
        self
    }

    /// A prefix for every key of the limit, before the hash tag, as
    /// [`RedisOptions::key_prefix`](crate::redis::RedisOptions::key_prefix).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> LeaseOptions {
        self.key_prefix = prefix.into();
        self
    }

    /// The longest [`acquire`](super::RedisInFlight::acquire) waits
    /// unless [`acquire_within`](super::RedisInFlight::acquire_within)
    /// says otherwise. Unless set, the builder's
    /// [`max_wait`](crate::inflight::Builder::max_wait) (feature `wait`)
    /// bounds it, as in process; when neither is set, nothing does.
    pub fn max_wait(mut self, max_wait: Duration) -> LeaseOptions {
        self.max_wait = Some(max_wait);
        self
    }

    /// The longest pause between two tries of a waiting acquire
    /// ([`DEFAULT_LEASE_BACKOFF`] unless set): it tries again after 1 ms,
    /// then twice as long each time up to this, or sooner when a lease in
    /// its pools expires sooner.
    pub fn max_backoff(mut self, max_backoff: Duration) -> LeaseOptions {
        self.max_backoff = max_backoff;
        self
    }

    /// How long acquires leave Redis alone after it failed (a lost
    /// connection at once, missed deadlines after three in a row with no
    /// answer between), answering by the failure policy without a round
    /// trip, before one acquire tries it again: the rate limiter's
    /// breaker, [`RedisOptions::retry_every`](crate::redis::RedisOptions::retry_every)
    /// ([`DEFAULT_RETRY_EVERY`] unless set). Renewals are not held back:
    /// each tries in its turn.
    pub fn retry_every(mut self, retry_every: Duration) -> LeaseOptions {
        self.retry_every = retry_every;
        self
    }

    /// The leases' time to live.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The failure policy.
    pub fn policy(&self) -> FailurePolicy {
        self.policy
    }
}
