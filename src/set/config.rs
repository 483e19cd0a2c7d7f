//! [`LimiterConfig`] and [`SetConfig`], and their hand-written deserializers:
//! every error is made inside the failing value's deserializer and names its
//! place, `limiters.NAME.FIELD: what to change`.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};

use super::SetError;
use super::error::SetErrorKind;
use super::inflight::{INFLIGHT_KEYS, InFlightConfig, InFlightKeys};
#[cfg(not(feature = "redis"))]
use super::no_redis::RedisKeys;
use super::rate::Rate;
#[cfg(feature = "redis")]
use super::redis::{RedisConfig, RedisKeys};
use super::reserve::Reserve;
use crate::clock::MonotonicClock;
use crate::{Builder, ShardedLimiter};

/// The settings of one named limiter, as read from a config.
///
/// Unset fields keep the [`Builder`]'s defaults. With `redis` set (feature
/// `redis`), the buckets live in Redis and `LimiterSet::connect` builds the
/// limiter.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimiterConfig {
    /// The upstream's budget.
    pub rate: Rate,
    /// B: how many requests at once; the rate's count when unset.
    pub burst: Option<u32>,
    /// N: buckets the budget is split into.
    pub buckets: Option<u32>,
    /// The most buckets a reload may grow N to while running; N when unset
    /// ([`Builder::max_buckets`]).
    pub max_buckets: Option<u32>,
    /// k: buckets per tenant.
    pub per_tenant: Option<u32>,
    /// j: buckets per user of a tenant in nested checks; k when unset
    /// ([`Builder::per_user`]).
    pub per_user: Option<u32>,
    /// Tiers by name, with their buckets per tenant ([`Builder::tier`]).
    pub tiers: Option<BTreeMap<String, u32>>,
    /// Tenants given a tier, by the tier's name ([`Builder::tenant_tier`]).
    pub tenant_tiers: Option<BTreeMap<String, String>>,
    /// d: spill buckets each tenant may borrow from when its own are empty;
    /// unset or 0 is no borrowing ([`Builder::borrow_from`]).
    pub borrow_from: Option<u32>,
    /// r: the share of each bucket's burst that borrowers leave to its
    /// owners; a half when unset ([`Builder::lender_reserve`]).
    pub lender_reserve: Option<Reserve>,
    /// A deployment secret mixed into the assignment.
    pub salt: Option<String>,
    /// Entries of the tenant → shard cache.
    pub tenant_cache: Option<usize>,
    /// An in-flight limit beside the rate limiter (`concurrency = 40`),
    /// in this process; `None` for none.
    pub inflight: Option<InFlightConfig>,
    /// Where the buckets live when they are in Redis; `None` for an
    /// in-process limiter.
    #[cfg(feature = "redis")]
    pub redis: Option<RedisConfig>,
}

impl LimiterConfig {
    /// A config with only a rate; every other setting at its default.
    pub fn new(rate: Rate) -> Self {
        LimiterConfig {
            rate,
            burst: None,
            buckets: None,
            max_buckets: None,
            per_tenant: None,
            per_user: None,
            tiers: None,
            tenant_tiers: None,
            borrow_from: None,
            lender_reserve: None,
            salt: None,
            tenant_cache: None,
            inflight: None,
            #[cfg(feature = "redis")]
            redis: None,
        }
    }

    /// What the reader refuses of a limiter's table that the builders would
    /// take, so that a config the set builds is one that reads back: a
    /// reserve without lending (which would do nothing), a `lease_ttl`
    /// without Redis (which would leave the limiter with no in-flight
    /// limit) and a duration of zero.
    pub(super) fn check(&self, name: &str) -> Result<(), SetError> {
        let refuse = |kind| Err(SetError::new(name, kind));
        if self.lender_reserve.is_some() && self.borrow_from.unwrap_or(0) == 0 {
            return refuse(SetErrorKind::ReserveWithoutLending);
        }
        let inflight = self.inflight.as_ref();
        if inflight.is_some_and(InFlightConfig::in_redis) && !self.is_redis() {
            return refuse(SetErrorKind::LeaseTtlInProcess);
        }
        #[cfg(feature = "redis")]
        let redis = self.redis.as_ref();
        let durations = [
            ("max_wait", inflight.and_then(|i| i.max_wait)),
            ("lease_ttl", inflight.and_then(|i| i.lease_ttl)),
            #[cfg(feature = "redis")]
            ("deadline", redis.and_then(|r| r.deadline)),
            #[cfg(feature = "redis")]
            ("retry_every", redis.and_then(|r| r.retry_every)),
            #[cfg(feature = "redis")]
            ("connect_timeout", redis.and_then(|r| r.connect_timeout)),
        ];
        match durations
            .into_iter()
            .find(|(_, d)| d.is_some_and(|d| d.is_zero()))
        {
            Some((field, _)) => refuse(SetErrorKind::ZeroDuration { field }),
            None => Ok(()),
        }
    }

    /// Whether the buckets live in Redis.
    pub(super) fn is_redis(&self) -> bool {
        #[cfg(feature = "redis")]
        return self.redis.is_some();
        #[cfg(not(feature = "redis"))]
        return false;
    }

    /// A limiter builder with these settings and the name `name`, for a
    /// caller that wants to change more (the clock, say) before building.
    pub fn builder(&self, name: &str) -> Builder<MonotonicClock> {
        let mut quota = self.rate.quota();
        if let Some(burst) = self.burst {
            quota = quota.with_burst(burst);
        }
        let mut builder = ShardedLimiter::builder().quota(quota).name(name);
        if let Some(buckets) = self.buckets {
            builder = builder.buckets(buckets);
        }
        if let Some(max_buckets) = self.max_buckets {
            builder = builder.max_buckets(max_buckets);
        }
        if let Some(per_tenant) = self.per_tenant {
            builder = builder.per_tenant(per_tenant);
        }
        if let Some(per_user) = self.per_user {
            builder = builder.per_user(per_user);
        }
        for (tier, &per_tenant) in self.tiers.iter().flatten() {
            builder = builder.tier(tier, per_tenant);
        }
        for (tenant, tier) in self.tenant_tiers.iter().flatten() {
            builder = builder.tenant_tier(tenant, tier);
        }
        if let Some(spill) = self.borrow_from {
            builder = builder.borrow_from(spill);
        }
        if let Some(reserve) = self.lender_reserve {
            builder = builder.lender_reserve(reserve.get());
        }
        if let Some(salt) = &self.salt {
            builder = builder.salt(salt);
        }
        if let Some(entries) = self.tenant_cache {
            builder = builder.tenant_cache(entries);
        }
        builder
    }
}

/// A whole config: `[limiters.NAME]` tables, in name order.
///
/// Its own keys are strict: `limiters` is the only top-level key, and every
/// unknown key inside is an error, so that a typo never falls back to a
/// default quietly.
///
/// # In an application's own config
/// `SetConfig` is a field type like any other: give your config a field
/// `limits: SetConfig` and its limiters are the `[limits.limiters.NAME]`
/// tables, beside your other keys, which it never sees. Errors name the place
/// inside the limits (`limiters.amazon.rate: ...`), and TOML adds the line
/// and column of the offending value.
///
/// ```
/// use serde::Deserialize;
/// use shuffle_limiter::set::{LimiterSet, SetConfig};
///
/// #[derive(Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct AppConfig {
///     listen: String,
///     workers: u32,
///     limits: SetConfig,
/// }
///
/// let app: AppConfig = toml::from_str(r#"
///     listen = "0.0.0.0:8080"
///     workers = 4
///
///     [limits.limiters.amazon]
///     rate = "5/s"
///
///     [limits.limiters.walmart]
///     rate = "100/10s"
/// "#)?;
/// assert_eq!((app.listen.as_str(), app.workers), ("0.0.0.0:8080", 4));
/// let set = LimiterSet::from_config(&app.limits)?;
/// assert_eq!(set.names().collect::<Vec<_>>(), ["amazon", "walmart"]);
///
/// // A mistake inside the limits says where, down to the line and column.
/// let err = toml::from_str::<AppConfig>(
///     "listen = \"x\"\nworkers = 1\n[limits.limiters.amazon]\nrate = \"5/w\"\n",
/// )
/// .err()
/// .expect("an unknown unit");
/// let err = err.to_string();
/// assert!(err.contains("line 4, column 8"), "{err}");
/// assert!(err.contains("limiters.amazon.rate: rate \"5/w\" has the unknown unit"), "{err}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// To keep `[limiters.NAME]` at the top of your file instead, put
/// `#[serde(flatten)]` on the field: your other keys are read by your struct
/// and `SetConfig` sees only the rest, refusing those it does not know. TOML
/// reports flattened errors without a line and column (serde buffers the
/// values first), so prefer the plain field where positions matter.
///
/// # Printing the effective config
/// Every config type is `Serialize`, writing the keys that are set, so a
/// config reads back as itself; fill in what was left to the defaults from
/// the built limiter ([`ShardedLimiter::buckets`], ...) before printing if
/// those are wanted too.
///
/// ```
/// use shuffle_limiter::set::SetConfig;
///
/// let config: SetConfig = toml::from_str(r#"
///     [limiters.amazon]
///     rate = "0.5/s"
///     buckets = 1
/// "#)?;
/// let printed = toml::to_string(&config)?;
/// assert_eq!(printed, "[limiters.amazon]\nrate = \"0.5/s\"\nbuckets = 1\n");
/// assert_eq!(toml::from_str::<SetConfig>(&printed)?, config);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Where line and column are known
/// TOML positions the errors found while reading: a malformed value (at the
/// value), an unknown or missing key, settings that contradict each other
/// within one table (at the table). Settings that cannot work together (a
/// burst too small for the buckets, say) are found when the limiter is
/// built:
/// - read straight into a [`LimiterSet`](super::LimiterSet)
///   (`toml::from_str::<LimiterSet>`), each table is checked as it ends, so
///   TOML gives the line and column of that `[limiters.NAME]` table;
/// - built from a `SetConfig` with
///   [`LimiterSet::from_config`](super::LimiterSet::from_config), the values
///   have no positions left: the [`SetError`](super::SetError) names the key
///   (`limiters.amazon.burst`) instead.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SetConfig {
    /// The limiters by name.
    pub limiters: BTreeMap<String, LimiterConfig>,
}

impl SetConfig {
    /// What the reader refuses of a whole config that the set would take:
    /// no limiters at all.
    pub(super) fn check(&self) -> Result<(), SetError> {
        if self.limiters.is_empty() {
            return Err(SetError::new("", SetErrorKind::Empty));
        }
        Ok(())
    }
}

const FIELDS: &str = "rate, burst, buckets, max_buckets, per_tenant, per_user, tiers, tenant_tiers, borrow_from, \
     lender_reserve, salt or tenant_cache";

/// The keys of a Redis limiter, known with or without the `redis` feature so
/// that a build without it can say what to enable.
pub(super) const REDIS_KEYS: [&str; 8] = [
    "redis",
    "failure_policy",
    "replicas",
    "deadline",
    "retry_every",
    "connect_timeout",
    "cache_denials",
    "key_prefix",
];

impl<'de> Deserialize<'de> for SetConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SetConfig, D::Error> {
        deserializer.deserialize_map(TopVisitor { check: false })
    }
}

/// Reads a config and checks, as each `[limiters.NAME]` table ends, that its
/// in-process limiter can be built: the error is then made inside the
/// table's deserializer, so TOML gives its line and column.
pub(super) fn deserialize_checked<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<SetConfig, D::Error> {
    deserializer.deserialize_map(TopVisitor { check: true })
}

/// `check`: whether each table is checked against the builder as it ends.
struct TopVisitor {
    check: bool,
}

impl<'de> Visitor<'de> for TopVisitor {
    type Value = SetConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a config with a `limiters` table")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<SetConfig, A::Error> {
        let mut limiters = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "limiters" if limiters.is_some() => {
                    return Err(de::Error::custom("limiters: given twice"));
                }
                "limiters" => {
                    let seed = LimitersSeed { check: self.check };
                    limiters = Some(map.next_value_seed(seed)?);
                }
                other => {
                    return Err(de::Error::custom(format_args!(
                        "{other}: unknown key: the config holds only `limiters` tables, \
                         such as [limiters.amazon]"
                    )));
                }
            }
        }
        let limiters: BTreeMap<_, _> = limiters.ok_or_else(|| {
            de::Error::custom(
                "limiters: missing: add a table per limiter, such as [limiters.amazon] \
                 with rate = \"5/s\"",
            )
        })?;
        let config = SetConfig { limiters };
        config.check().map_err(de::Error::custom)?;
        Ok(config)
    }
}

struct LimitersSeed {
    check: bool,
}

impl<'de> DeserializeSeed<'de> for LimitersSeed {
    type Value = BTreeMap<String, LimiterConfig>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for LimitersSeed {
    type Value = BTreeMap<String, LimiterConfig>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a table of named limiters, such as [limiters.amazon]")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut limiters = BTreeMap::new();
        while let Some(name) = map.next_key::<String>()? {
            if limiters.contains_key(&name) {
                return Err(de::Error::custom(format_args!(
                    "limiters.{name}: given twice"
                )));
            }
            let seed = EntrySeed {
                name: &name,
                check: self.check,
            };
            let config = map.next_value_seed(seed)?;
            limiters.insert(name, config);
        }
        Ok(limiters)
    }
}

/// One `[limiters.NAME]` table; knows its name so that errors can say where.
struct EntrySeed<'a> {
    name: &'a str,
    check: bool,
}

impl<'de> DeserializeSeed<'de> for EntrySeed<'_> {
    type Value = LimiterConfig;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<LimiterConfig, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for EntrySeed<'_> {
    type Value = LimiterConfig;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a table of settings for limiters.{} ({FIELDS})",
            self.name
        )
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<LimiterConfig, A::Error> {
        let name = self.name;
        let mut rate = None;
        let mut config = LimiterConfig::new(Rate::PLACEHOLDER);
        let mut redis = RedisKeys::default();
        let mut inflight = InFlightKeys::default();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "rate" => field(&mut map, &mut rate, name, "rate")?,
                "burst" => field(&mut map, &mut config.burst, name, "burst")?,
                "buckets" => field(&mut map, &mut config.buckets, name, "buckets")?,
                "max_buckets" => field(&mut map, &mut config.max_buckets, name, "max_buckets")?,
                "per_tenant" => field(&mut map, &mut config.per_tenant, name, "per_tenant")?,
                "per_user" => field(&mut map, &mut config.per_user, name, "per_user")?,
                "tiers" => field(&mut map, &mut config.tiers, name, "tiers")?,
                "tenant_tiers" => field(&mut map, &mut config.tenant_tiers, name, "tenant_tiers")?,
                "borrow_from" => field(&mut map, &mut config.borrow_from, name, "borrow_from")?,
                "lender_reserve" => {
                    field(&mut map, &mut config.lender_reserve, name, "lender_reserve")?;
                }
                "salt" => field(&mut map, &mut config.salt, name, "salt")?,
                "tenant_cache" => field(&mut map, &mut config.tenant_cache, name, "tenant_cache")?,
                other if redis.read(&mut map, name, other)? => {}
                other if inflight.read(&mut map, name, other)? => {}
                other => {
                    return Err(de::Error::custom(format_args!(
                        "limiters.{name}.{other}: unknown key: use {FIELDS}; an in-flight \
                         limit takes {}; a Redis limiter also takes {}",
                        INFLIGHT_KEYS.join(", "),
                        REDIS_KEYS.join(", ")
                    )));
                }
            }
        }
        config.rate = rate.ok_or_else(|| {
            de::Error::custom(format_args!(
                "limiters.{name}.rate: missing: every limiter needs a rate, such as \
                 rate = \"5/s\""
            ))
        })?;
        redis.finish(name, &mut config)?;
        inflight.finish(name, &mut config)?;
        config.check(name).map_err(de::Error::custom)?;
        if self.check && !config.is_redis() {
            config
                .builder(name)
                .validate()
                .map_err(|e| de::Error::custom(SetError::config(name, e)))?;
        }
        if self.check {
            super::inflight::build(name, &config).map_err(de::Error::custom)?;
        }
        Ok(config)
    }
}

/// Reads one setting into `slot`, naming its place in any error.
pub(super) fn field<'de, A, T>(
    map: &mut A,
    slot: &mut Option<T>,
    limiter: &str,
    field: &str,
) -> Result<(), A::Error>
where
    A: MapAccess<'de>,
    T: Deserialize<'de>,
{
    if slot.is_some() {
        return Err(de::Error::custom(format_args!(
            "limiters.{limiter}.{field}: given twice"
        )));
    }
    let value = map.next_value_seed(Placed {
        limiter,
        field,
        value: std::marker::PhantomData,
    })?;
    *slot = Some(value);
    Ok(())
}

/// Deserializes one setting and prefixes any error with its place. The error
/// is made inside the value's own deserializer, so a format that knows
/// positions (TOML) points at the value, not at the table around it.
struct Placed<'a, T> {
    limiter: &'a str,
    field: &'a str,
    value: std::marker::PhantomData<T>,
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for Placed<'_, T> {
    type Value = T;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<T, D::Error> {
        let (limiter, field) = (self.limiter, self.field);
        T::deserialize(deserializer)
            .map_err(|e| de::Error::custom(format_args!("limiters.{limiter}.{field}: {e}")))
    }
}
