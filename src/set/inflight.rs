//! The in-flight keys of a `[limiters.NAME]` table: `concurrency = 40`
//! and its options build an [`InFlight`] limit beside the rate limiter.

use std::sync::Arc;
use std::time::Duration;

use serde::de::{self, MapAccess};

use super::config::{LimiterConfig, field};
use super::duration_text::DurationText;
use super::error::{SetError, SetErrorKind};
use crate::inflight::{self, BuildError, InFlight};

/// The in-flight limit of one named limiter, as read from a config: the
/// keys `concurrency`, `pools`, `max_queue` and `max_wait` of its table.
///
/// The limit takes its k (`per_tenant`), j (`per_user`), `salt`,
/// `tenant_cache` and borrowing (`borrow_from`, `lender_reserve`) from the
/// limiter's table, so that with as many pools as buckets a tenant's pools
/// are its buckets and its spill pools its spill buckets: a limiter that
/// lends tokens lends permits too, above the same reserve. It lives in this process,
/// whichever store the rate limiter uses, unless a Redis limiter's table
/// sets a [`lease_ttl`](InFlightConfig::lease_ttl): then its pools live in
/// Redis beside the buckets.
///
/// `max_wait` (such as `max_wait = "250ms"`) needs the `wait` feature.
///
/// ```
/// use shuffle_limiter::set::{LimiterSet, SetConfig};
///
/// let config: SetConfig = toml::from_str(r#"
///     [limiters.partner]
///     rate = "100/s"
///     per_tenant = 2
///     concurrency = 40
///     pools = 8
///     max_queue = 20
/// "#)?;
/// let inflight = config.limiters["partner"].inflight.as_ref().expect("set above");
/// assert_eq!((inflight.concurrency, inflight.pools), (40, Some(8)));
/// let set = LimiterSet::from_config(&config)?;
/// let partner = set.inflight("partner").expect("configured above");
/// assert_eq!((partner.concurrency(), partner.pools(), partner.per_tenant()), (40, 8, 2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InFlightConfig {
    /// C: calls in flight at once, for all tenants together.
    pub concurrency: u32,
    /// N: pools the concurrency is split into; the
    /// [`inflight::Builder`]'s default (8, or C if smaller) when unset.
    pub pools: Option<u32>,
    /// The most callers one pool's queue holds;
    /// [`inflight::DEFAULT_MAX_QUEUE`] when unset.
    pub max_queue: Option<u32>,
    /// The longest an acquire waits (feature `wait`); no bound when unset.
    pub max_wait: Option<Duration>,
    /// The TTL of each permit's lease, for a limit whose pools live in
    /// Redis (`lease_ttl = "30s"`, only beside `redis = "..."`; feature
    /// `redis`): the pools are then shared by every process that connects
    /// the same config, and [`LimiterSet::redis_inflight`](super::LimiterSet::redis_inflight)
    /// finds them. Unset: the limit lives in this process.
    pub lease_ttl: Option<Duration>,
}

impl InFlightConfig {
    /// A limit of `concurrency`, every option at its default.
    pub fn new(concurrency: u32) -> Self {
        InFlightConfig {
            concurrency,
            pools: None,
            max_queue: None,
            max_wait: None,
            lease_ttl: None,
        }
    }

    /// Whether the pools live in Redis (a `lease_ttl` is set).
    pub fn in_redis(&self) -> bool {
        self.lease_ttl.is_some()
    }
}

impl LimiterConfig {
    /// A builder of this limiter's in-flight limit, if its table has a
    /// `concurrency`: its settings, and the limiter's k, j, salt, tenant
    /// cache and borrowing. Without the `wait` feature a `max_wait` is not applied
    /// ([`LimiterSet`](super::LimiterSet) refuses it).
    pub fn inflight_builder(&self) -> Option<inflight::Builder> {
        let settings = self.inflight.as_ref()?;
        let mut builder = InFlight::builder().concurrency(settings.concurrency);
        if let Some(pools) = settings.pools {
            builder = builder.pools(pools);
        }
        if let Some(max_queue) = settings.max_queue {
            builder = builder.max_queue(max_queue);
        }
        #[cfg(feature = "wait")]
        if let Some(max_wait) = settings.max_wait {
            builder = builder.max_wait(max_wait);
        }
        if let Some(per_tenant) = self.per_tenant {
            builder = builder.per_tenant(per_tenant);
        }
        if let Some(per_user) = self.per_user {
            builder = builder.per_user(per_user);
        }
        if let Some(salt) = &self.salt {
            builder = builder.salt(salt);
        }
        if let Some(entries) = self.tenant_cache {
            builder = builder.tenant_cache(entries);
        }
        if let Some(spill) = self.borrow_from {
            builder = builder.borrow_from(spill);
        }
        if let Some(reserve) = self.lender_reserve {
            builder = builder.lender_reserve(reserve.get());
        }
        Some(builder)
    }
}

/// Builds the in-flight limit of `settings`, if it has one.
pub(super) fn build(
    name: &str,
    settings: &LimiterConfig,
) -> Result<Option<Arc<InFlight>>, SetError> {
    let Some(builder) = settings.inflight_builder() else {
        return Ok(None);
    };
    if settings
        .inflight
        .as_ref()
        .is_some_and(InFlightConfig::in_redis)
    {
        return Ok(None);
    }
    #[cfg(not(feature = "wait"))]
    if settings
        .inflight
        .as_ref()
        .is_some_and(|i| i.max_wait.is_some())
    {
        return Err(SetError::new(name, SetErrorKind::NeedsWait));
    }
    let pools_set = settings
        .inflight
        .as_ref()
        .is_some_and(|i| i.pools.is_some());
    let limit = builder.build().map_err(|error| {
        let field = field_of(&error, pools_set);
        SetError::new(name, SetErrorKind::InFlight { field, error })
    })?;
    Ok(Some(Arc::new(limit)))
}

/// The key of the table behind an in-flight build error.
fn field_of(error: &BuildError, pools_set: bool) -> &'static str {
    match error {
        BuildError::ZeroPools | BuildError::TooManyPools { .. } => "pools",
        BuildError::ConcurrencyBelowPools { .. } if pools_set => "pools",
        BuildError::ZeroPerTenant
        | BuildError::PerTenantExceedsPools { .. }
        | BuildError::TooManyPerTenant { .. } => "per_tenant",
        BuildError::PerUser { .. } => "per_user",
        BuildError::SpillExceedsPools { .. } => "borrow_from",
        BuildError::LenderReserve { .. } => "lender_reserve",
        BuildError::CacheTooLarge { .. } => "tenant_cache",
        _ => "concurrency",
    }
}

/// The in-flight keys of a table.
pub(super) const INFLIGHT_KEYS: [&str; 5] =
    ["concurrency", "pools", "max_queue", "max_wait", "lease_ttl"];

/// The in-flight keys as read, checked against each other at the table's
/// end.
#[derive(Default)]
pub(super) struct InFlightKeys {
    concurrency: Option<u32>,
    pools: Option<u32>,
    max_queue: Option<u32>,
    max_wait: Option<DurationText>,
    lease_ttl: Option<DurationText>,
}

impl InFlightKeys {
    /// Reads the value of an in-flight key; `false` for any other key.
    pub(super) fn read<'de, A: MapAccess<'de>>(
        &mut self,
        map: &mut A,
        limiter: &str,
        key: &str,
    ) -> Result<bool, A::Error> {
        match key {
            "concurrency" => field(map, &mut self.concurrency, limiter, key)?,
            "pools" => field(map, &mut self.pools, limiter, key)?,
            "max_queue" => field(map, &mut self.max_queue, limiter, key)?,
            "max_wait" => field(map, &mut self.max_wait, limiter, key)?,
            "lease_ttl" => field(map, &mut self.lease_ttl, limiter, key)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Sets `config.inflight`, refusing an option without `concurrency`.
    pub(super) fn finish<E: de::Error>(
        self,
        limiter: &str,
        config: &mut LimiterConfig,
    ) -> Result<(), E> {
        let Some(concurrency) = self.concurrency else {
            let set = [
                ("pools", self.pools.is_some()),
                ("max_queue", self.max_queue.is_some()),
                ("max_wait", self.max_wait.is_some()),
                ("lease_ttl", self.lease_ttl.is_some()),
            ];
            return match set.into_iter().find(|(_, set)| *set) {
                Some((key, _)) => Err(E::custom(format_args!(
                    "limiters.{limiter}.{key}: only an in-flight limit takes {key}: add \
                     concurrency = N (the most calls in flight at once) to \
                     [limiters.{limiter}], or remove {key}"
                ))),
                None => Ok(()),
            };
        };
        #[cfg(not(feature = "wait"))]
        if self.max_wait.is_some() {
            return Err(E::custom(format_args!(
                "limiters.{limiter}.max_wait: {}",
                super::error::NEEDS_WAIT
            )));
        }
        let lease_ttl = self.lease_ttl.map(|d| d.0);
        config.inflight = Some(InFlightConfig {
            concurrency,
            pools: self.pools,
            max_queue: self.max_queue,
            max_wait: self.max_wait.map(|d| d.0),
            lease_ttl,
        });
        Ok(())
    }
}

impl InFlightConfig {
    /// The settings as the limit is built with them, in the order of
    /// [`changed`]'s keys: a default written out (`max_queue = 50`,
    /// `pools = 8` for C = 40) is no change.
    fn resolved(&self) -> [Option<u128>; 5] {
        let pools = (self.pools).unwrap_or(inflight::default_pools(self.concurrency));
        let max_queue = self.max_queue.unwrap_or(inflight::DEFAULT_MAX_QUEUE);
        [
            Some(self.concurrency.into()),
            Some(pools.into()),
            Some(max_queue.into()),
            self.lease_ttl.map(|ttl| ttl.as_nanos()),
            self.max_wait.map(|wait| wait.as_nanos()),
        ]
    }
}

/// The first in-flight key in which `new` differs from `old` as the limit
/// is built (a limit added or removed is its `concurrency`), or `None`.
pub(super) fn changed(
    old: Option<&InFlightConfig>,
    new: Option<&InFlightConfig>,
) -> Option<&'static str> {
    const KEYS: [&str; 5] = ["concurrency", "pools", "max_queue", "lease_ttl", "max_wait"];
    match (old, new) {
        (None, None) => None,
        (Some(old), Some(new)) => {
            let (old, new) = (old.resolved(), new.resolved());
            let mut keys = KEYS.into_iter().zip(old.into_iter().zip(new));
            keys.find_map(|(key, (a, b))| (a != b).then_some(key))
        }
        _ => Some("concurrency"),
    }
}

/// Connects the in-flight limit of `settings` whose pools live in Redis,
/// if it has one, over the connection of its rate limiter.
#[cfg(feature = "redis")]
pub(super) async fn connect(
    name: &str,
    settings: &LimiterConfig,
    connection: &::redis::aio::ConnectionManager,
) -> Result<Option<inflight::RedisInFlight>, SetError> {
    let (Some(redis), Some(limit)) = (&settings.redis, &settings.inflight) else {
        return Ok(None);
    };
    let (Some(ttl), Some(builder)) = (limit.lease_ttl, settings.inflight_builder()) else {
        return Ok(None);
    };
    let mut options = inflight::LeaseOptions::new(name, ttl).failure_policy(redis.failure_policy);
    if let Some(deadline) = redis.deadline {
        options = options.deadline(deadline);
    }
    if let Some(retry_every) = redis.retry_every {
        options = options.retry_every(retry_every);
    }
    if let Some(prefix) = &redis.key_prefix {
        options = options.key_prefix(prefix.as_str());
    }
    if let Some(max_wait) = limit.max_wait {
        options = options.max_wait(max_wait);
    }
    let pools_set = limit.pools.is_some();
    builder
        .build_redis(connection.clone(), options)
        .await
        .map(Some)
        .map_err(|error| match error {
            inflight::LeaseBuildError::Config(error) => {
                let field = field_of(&error, pools_set);
                SetError::new(name, SetErrorKind::InFlight { field, error })
            }
            other => SetError::lease(name, other),
        })
}

/// The in-flight limit in Redis of the Redis limiter `entry`, if its
/// settings have a `lease_ttl`, over the limiter's connection.
#[cfg(feature = "redis")]
pub(super) async fn connect_entry<C: crate::clock::Clock>(
    name: &str,
    settings: &LimiterConfig,
    entry: &super::member::Entry<C>,
) -> Result<Option<crate::inflight::RedisInFlight>, SetError> {
    match entry {
        super::member::Entry::Redis(limiter) => connect(name, settings, limiter.connection()).await,
        super::member::Entry::Local(_) => Ok(None),
    }
}
