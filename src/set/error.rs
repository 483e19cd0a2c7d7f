//! [`SetError`]: why a [`LimiterSet`](super::LimiterSet) could not be built.

use std::fmt;

use crate::error::ConfigError;

/// Why a [`LimiterSet`](super::LimiterSet) could not be built; the message names the limiter
/// and, where there is one, the setting to change.
///
/// ```
/// use shuffle_limiter::set::{LimiterSet, SetConfig};
///
/// let config: SetConfig = toml::from_str("[limiters.amazon]\nrate = \"5/s\"\nbuckets = 8")?;
/// let err = LimiterSet::from_config(&config).unwrap_err();
/// assert_eq!((err.limiter(), err.field()), ("amazon", Some("burst")));
/// assert!(err.to_string().starts_with("limiters.amazon.burst: a burst of 5 cannot"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A Redis limiter that could not be built (feature `redis`) reports the
/// same way, `limiters.NAME.redis: no connection to Redis (...)` say, with
/// the Redis error as its `source` and `redis_error`. Two errors of that
/// kind are equal when they read the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetError {
    pub(super) limiter: String,
    pub(super) kind: SetErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum SetErrorKind {
    Config(ConfigError),
    Duplicate,
    /// `from_config` met a Redis limiter, which needs `connect`.
    NeedsConnect,
    /// A reload changes a setting a running limiter cannot change.
    FixedSetting {
        field: &'static str,
    },
    /// A reload of a set built from limiters in code, with no config to
    /// compare with.
    NoConfig,
    /// A reload could not change a Redis limiter's quota.
    #[cfg(feature = "redis")]
    RedisChange(ByText<crate::redis::Error>),
    #[cfg(feature = "redis")]
    Redis(ByText<crate::redis::BuildError>),
    #[cfg(feature = "redis")]
    Lease(ByText<crate::inflight::LeaseBuildError>),
    /// The in-flight limit's settings cannot work.
    InFlight {
        field: &'static str,
        error: crate::inflight::BuildError,
    },
    /// A `max_wait` set in code, in a build without the `wait` feature.
    #[cfg(not(feature = "wait"))]
    NeedsWait,
    /// A `lender_reserve` on a limiter that does not lend, which would be
    /// accepted and do nothing.
    ReserveWithoutLending,
    /// A `lease_ttl` on an in-process limiter: the in-flight limit would
    /// look for pools in a Redis the limiter has none of.
    LeaseTtlInProcess,
    /// A duration of zero where the config takes only positive ones.
    ZeroDuration {
        field: &'static str,
    },
    /// A config with no limiters (the limiter's name is empty).
    Empty,
}

/// What to do about a `max_wait` without the `wait` feature.
#[cfg(not(feature = "wait"))]
pub(super) const NEEDS_WAIT: &str = "a bounded wait needs the `wait` feature of \
     shuffle-limiter: enable it in Cargo.toml (features = [\"config\", \"wait\"]), or \
     remove max_wait";

/// What to do about a `lease_ttl` on an in-process limiter.
pub(super) const LEASE_TTL_IN_PROCESS: &str = ": only an in-flight limit in Redis takes a \
     lease_ttl: add redis = \"redis://host:6379\" to the limiter's table (feature `redis`), \
     or remove lease_ttl to keep the limit in this process";

/// What to do about a config without limiters.
pub(super) const EMPTY: &str = "limiters: empty: add a table per limiter, such as \
     [limiters.amazon] with rate = \"5/s\"";

impl SetError {
    pub(super) fn config(limiter: &str, error: ConfigError) -> SetError {
        SetError::new(limiter, SetErrorKind::Config(error))
    }

    pub(super) fn new(limiter: &str, kind: SetErrorKind) -> SetError {
        SetError {
            limiter: limiter.to_owned(),
            kind,
        }
    }

    #[cfg(feature = "redis")]
    pub(super) fn redis(limiter: &str, error: crate::redis::BuildError) -> SetError {
        SetError::new(limiter, SetErrorKind::Redis(ByText(error)))
    }

    #[cfg(feature = "redis")]
    pub(super) fn lease(limiter: &str, error: crate::inflight::LeaseBuildError) -> SetError {
        SetError::new(limiter, SetErrorKind::Lease(ByText(error)))
    }

    #[cfg(feature = "redis")]
    pub(super) fn redis_change(limiter: &str, error: crate::redis::Error) -> SetError {
        SetError::new(limiter, SetErrorKind::RedisChange(ByText(error)))
    }
}

/// # Inspecting
impl SetError {
    /// The name of the limiter at fault (empty for a config with no
    /// limiters).
    pub fn limiter(&self) -> &str {
        &self.limiter
    }

    /// The setting to change, when one setting is at fault.
    pub fn field(&self) -> Option<&'static str> {
        match &self.kind {
            SetErrorKind::Config(e) => config_field(e),
            SetErrorKind::Duplicate => None,
            SetErrorKind::NeedsConnect => Some("redis"),
            SetErrorKind::FixedSetting { field } => Some(field),
            SetErrorKind::NoConfig => None,
            SetErrorKind::InFlight { field, .. } => Some(field),
            #[cfg(not(feature = "wait"))]
            SetErrorKind::NeedsWait => Some("max_wait"),
            SetErrorKind::ReserveWithoutLending => Some("lender_reserve"),
            SetErrorKind::LeaseTtlInProcess => Some("lease_ttl"),
            SetErrorKind::ZeroDuration { field } => Some(field),
            SetErrorKind::Empty => None,
            #[cfg(feature = "redis")]
            SetErrorKind::RedisChange(e) => match &e.0 {
                crate::redis::Error::Config(e) => config_field(e),
                _ => Some("redis"),
            },
            #[cfg(feature = "redis")]
            SetErrorKind::Redis(e) => redis_field(&e.0),
            #[cfg(feature = "redis")]
            SetErrorKind::Lease(e) => lease_field(&e.0),
        }
    }

    /// The builder's error, when the settings could not work together.
    pub fn config_error(&self) -> Option<&ConfigError> {
        match &self.kind {
            SetErrorKind::Config(e) => Some(e),
            #[cfg(feature = "redis")]
            SetErrorKind::Redis(ByText(crate::redis::BuildError::Config(e))) => Some(e),
            _ => None,
        }
    }

    /// The in-flight limit's error, when its settings could not work
    /// together.
    pub fn inflight_error(&self) -> Option<&crate::inflight::BuildError> {
        match &self.kind {
            SetErrorKind::InFlight { error, .. } => Some(error),
            _ => None,
        }
    }

    /// The error of building an in-flight limit in Redis (`lease_ttl`):
    /// its lease options, or a server that refused its scripts or did not
    /// answer.
    #[cfg(feature = "redis")]
    pub fn lease_error(&self) -> Option<&crate::inflight::LeaseBuildError> {
        match &self.kind {
            SetErrorKind::Lease(e) => Some(&e.0),
            _ => None,
        }
    }

    /// The error of building a Redis limiter: it could not connect, or its
    /// settings could not work.
    #[cfg(feature = "redis")]
    pub fn redis_error(&self) -> Option<&crate::redis::BuildError> {
        match &self.kind {
            SetErrorKind::Redis(e) => Some(&e.0),
            _ => None,
        }
    }
}

fn config_field(e: &ConfigError) -> Option<&'static str> {
    use ConfigError::*;
    Some(if matches!(e, ZeroBuckets | TooManyBuckets { .. }) {
        "buckets"
    } else if matches!(
        e,
        ZeroPerTenant | PerTenantExceedsBuckets { .. } | TooManyPerTenant { .. }
    ) {
        "per_tenant"
    } else if matches!(e, BurstTooSmall { .. } | ZeroBurst { .. }) {
        "burst"
    } else if matches!(e, MaxBucketsBelowBuckets { .. } | BucketsAboveMax { .. }) {
        "max_buckets"
    } else if matches!(e, CacheTooLarge { .. }) {
        "tenant_cache"
    } else if matches!(e, SpillTooLarge { .. }) {
        "borrow_from"
    } else if matches!(e, LenderReserve { .. }) {
        "lender_reserve"
    } else if matches!(e, PerUser { .. }) {
        "per_user"
    } else if matches!(e, TierPerTenant { .. }) {
        "tiers"
    } else if matches!(e, UnknownTier { .. } | TooManyTieredTenants { .. }) {
        "tenant_tiers"
    } else if matches!(
        e,
        MissingQuota | ZeroCount | ZeroPeriod | Overflow { .. } | RateTooHigh { .. }
    ) {
        "rate"
    } else {
        return None;
    })
}

/// The config key behind an error of `build_redis`.
#[cfg(feature = "redis")]
fn redis_field(e: &crate::redis::BuildError) -> Option<&'static str> {
    use crate::redis::BuildError::*;
    match e {
        Config(e) => config_field(e),
        ZeroReplicas | FallbackBurstTooSmall { .. } => Some("replicas"),
        ZeroDuration { option } => Some(option),
        RefillTooLong { .. } => Some("rate"),
        GrowingBuckets { .. } => Some("max_buckets"),
        InvalidName { .. } => None,
        InvalidKeyPrefix { .. } => Some("key_prefix"),
        _ => Some("redis"),
    }
}

/// The config key behind an error of an in-flight limit's `build_redis`.
#[cfg(feature = "redis")]
fn lease_field(e: &crate::inflight::LeaseBuildError) -> Option<&'static str> {
    use crate::inflight::LeaseBuildError::*;
    match e {
        ZeroTtl | TtlTooLong { .. } | RenewTooSlow { .. } => Some("lease_ttl"),
        ZeroReplicas | FallbackTooSmall { .. } => Some("replicas"),
        ZeroDuration { option } => Some(option),
        InvalidKeyPrefix { .. } => Some("key_prefix"),
        InvalidName { .. } => None,
        _ => Some("redis"),
    }
}

/// An error of Redis in a [`SetError`] (building a limiter, a lease, or a
/// change), equal to another when it reads the same, as the `redis`
/// crate's errors have no equality of their own.
#[cfg(feature = "redis")]
#[derive(Debug, Clone)]
pub(super) struct ByText<E>(E);

#[cfg(feature = "redis")]
impl<E: fmt::Display> PartialEq for ByText<E> {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_string() == other.0.to_string()
    }
}

#[cfg(feature = "redis")]
impl<E: fmt::Display> Eq for ByText<E> {}

impl fmt::Display for SetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.kind == SetErrorKind::Empty {
            return f.write_str(EMPTY);
        }
        write!(f, "limiters.{}", self.limiter)?;
        if let Some(field) = self.field() {
            write!(f, ".{field}")?;
        }
        match &self.kind {
            SetErrorKind::Config(e) => write!(f, ": {e}"),
            SetErrorKind::Duplicate => {
                f.write_str(": two limiters have this name: give each limiter its own name")
            }
            SetErrorKind::NeedsConnect => f.write_str(
                ": a Redis limiter needs a connection: build the set with \
                 `LimiterSet::connect(&config).await`",
            ),
            SetErrorKind::FixedSetting { .. } => f.write_str(
                ": a running limiter keeps this setting (only the rate, the burst and N \
                 change live): put back the old value, or restart with the new one",
            ),
            SetErrorKind::NoConfig => f.write_str(
                ": the set was built from limiters in code, with no config to compare: \
                 build it with `LimiterSet::from_config` to reload it",
            ),
            SetErrorKind::InFlight { error, .. } => write!(f, ": {error}"),
            #[cfg(not(feature = "wait"))]
            SetErrorKind::NeedsWait => write!(f, ": {NEEDS_WAIT}"),
            SetErrorKind::ReserveWithoutLending => f.write_str(
                ": only a limiter that lends takes a reserve: set borrow_from to 1 or \
                 more, such as borrow_from = 2, or remove lender_reserve",
            ),
            SetErrorKind::LeaseTtlInProcess => f.write_str(LEASE_TTL_IN_PROCESS),
            SetErrorKind::ZeroDuration { .. } => {
                f.write_str(": zero: use a positive duration, such as \"5ms\"")
            }
            SetErrorKind::Empty => f.write_str(EMPTY),
            #[cfg(feature = "redis")]
            SetErrorKind::Redis(e) => write!(f, ": {}", e.0),
            #[cfg(feature = "redis")]
            SetErrorKind::Lease(e) => write!(f, ": {}", e.0),
            #[cfg(feature = "redis")]
            SetErrorKind::RedisChange(e) => write!(f, ": {}", e.0),
        }
    }
}

impl std::error::Error for SetError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            SetErrorKind::Config(e) => Some(e),
            SetErrorKind::InFlight { error, .. } => Some(error),
            #[cfg(feature = "redis")]
            SetErrorKind::Redis(e) => Some(&e.0),
            #[cfg(feature = "redis")]
            SetErrorKind::Lease(e) => Some(&e.0),
            #[cfg(feature = "redis")]
            SetErrorKind::RedisChange(e) => Some(&e.0),
            _ => None,
        }
    }
}
