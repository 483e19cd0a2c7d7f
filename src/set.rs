//! One limiter per upstream (feature `serde`): named limiters, each with its
//! own quota, N and k, built from a config file and looked up by name.
//!
//! A service that calls several rate-limited partners (one API per retailer,
//! say) needs one budget per partner, and within each, shuffle sharding
//! between its own tenants. A [`LimiterSet`] holds them: it is built once
//! and never changes, so a lookup by name is a plain hash-map read with no
//! lock, and clones share the same limiters.
//!
//! The config is any serde format; TOML and JSON are shown here. Each
//! `[limiters.NAME]` table takes
//!
//! | key | required | meaning |
//! | --- | --- | --- |
//! | `rate` | yes | the upstream's budget: `"N/s"`, `"N/m"` or `"N/h"` (see [`Rate`]) |
//! | `burst` | no | how many at once (default: N of the rate) |
//! | `buckets` | no | N, buckets the budget is split into (default 8, or the burst if smaller) |
//! | `per_tenant` | no | k, buckets per tenant (default 2) |
//! | `salt` | no | a deployment secret mixed into the assignment |
//! | `tenant_cache` | no | entries of the tenant → shard cache |
//!
//! Every error names the place to fix, as `limiters.NAME.FIELD: ...`; an
//! unknown key is an error too, so that a typo does not silently fall back
//! to a default.
//!
//! # One limiter per upstream
//! ```
//! use shuffle_limiter::set::{LimiterSet, SetConfig};
//!
//! let config: SetConfig = toml::from_str(r#"
//!     [limiters.amazon]
//!     rate = "5/s"
//!     burst = 5
//!     buckets = 5
//!     per_tenant = 2
//!
//!     [limiters.walmart]
//!     rate = "600/m"
//! "#)?;
//! let set = LimiterSet::from_config(&config)?;
//!
//! let amazon = set.get("amazon").expect("configured above");
//! assert_eq!((amazon.buckets(), amazon.per_tenant()), (5, 2));
//! assert!(amazon.check("tenant-42").is_ok());
//! assert!(set.get("ebay").is_none());
//!
//! // The same from JSON, straight into a set:
//! let set: LimiterSet = serde_json::from_str(
//!     r#"{ "limiters": { "amazon": { "rate": "5/s", "buckets": 5 } } }"#,
//! )?;
//! assert_eq!(set.len(), 1);
//!
//! // Mistakes are reported with their place:
//! let err = toml::from_str::<SetConfig>("[limiters.amazon]\nrate = \"5/d\"").unwrap_err();
//! assert!(err.to_string().contains("limiters.amazon.rate: "));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::clock::{Clock, MonotonicClock};
use crate::error::ConfigError;
use crate::limiter::{Builder, ShardedLimiter};
use crate::quota::Quota;

/// A rate as written in a config: a whole number of requests per second,
/// minute or hour — `"5/s"`, `"300/m"`, `"1000/h"`.
///
/// ```
/// use std::time::Duration;
/// use shuffle_limiter::set::Rate;
///
/// let rate: Rate = "300/m".parse()?;
/// assert_eq!((rate.count(), rate.period()), (300, Duration::from_secs(60)));
/// assert_eq!(rate.to_string(), "300/m");
///
/// let err = "5/d".parse::<Rate>().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "rate \"5/d\" has the unknown unit \"d\": use s (per second), m (per minute) or h (per hour)"
/// );
/// # Ok::<(), shuffle_limiter::set::RateError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u32,
    unit: Unit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Unit {
    Second,
    Minute,
    Hour,
}

impl Unit {
    fn symbol(self) -> char {
        match self {
            Unit::Second => 's',
            Unit::Minute => 'm',
            Unit::Hour => 'h',
        }
    }

    fn period(self) -> Duration {
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
        })
    }
}

impl Rate {
    /// Requests per period.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// One second, minute or hour.
    pub fn period(&self) -> Duration {
        self.unit.period()
    }

    /// The quota of this rate, with the burst equal to the count.
    pub fn quota(&self) -> Quota {
        Quota::new(self.count, self.period())
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.count, self.unit.symbol())
    }
}

impl FromStr for Rate {
    type Err = RateError;

    fn from_str(s: &str) -> Result<Rate, RateError> {
        let err = |kind| RateError {
            input: s.to_owned(),
            kind,
        };
        if s.is_empty() {
            return Err(err(RateErrorKind::Empty));
        }
        let Some((count, unit)) = s.split_once('/') else {
            return Err(err(RateErrorKind::NoUnit));
        };
        let unit = match unit {
            "s" => Unit::Second,
            "m" => Unit::Minute,
            "h" => Unit::Hour,
            _ => return Err(err(RateErrorKind::UnknownUnit)),
        };
        // Digits only: `u32::from_str` would also take a leading '+'.
        if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err(RateErrorKind::NotACount));
        }
        let count: u32 = count
            .parse()
            .map_err(|_| err(RateErrorKind::CountTooLarge))?;
        if count == 0 {
            return Err(err(RateErrorKind::ZeroCount));
        }
        Ok(Rate { count, unit })
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Rate, D::Error> {
        struct RateVisitor;
        impl Visitor<'_> for RateVisitor {
            type Value = Rate;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a rate such as \"5/s\", \"300/m\" or \"1000/h\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Rate, E> {
                s.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_str(RateVisitor)
    }
}

/// Why a rate string was refused; the message says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateError {
    input: String,
    kind: RateErrorKind,
}

/// What was wrong with a rate string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RateErrorKind {
    /// The string is empty.
    Empty,
    /// There is no `/unit`.
    NoUnit,
    /// The unit is not `s`, `m` or `h`.
    UnknownUnit,
    /// The count is not a whole number written in digits.
    NotACount,
    /// The count does not fit in 32 bits.
    CountTooLarge,
    /// The count is zero.
    ZeroCount,
}

impl RateError {
    /// What was wrong.
    pub fn kind(&self) -> RateErrorKind {
        self.kind
    }

    /// The string that was refused.
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl fmt::Display for RateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let input = &self.input;
        match self.kind {
            RateErrorKind::Empty => f.write_str(
                "the rate is empty: write COUNT/UNIT, such as \"5/s\", \"300/m\" or \"1000/h\"",
            ),
            RateErrorKind::NoUnit => write!(
                f,
                "rate {input:?} has no unit: write COUNT/UNIT with UNIT one of s, m or h, \
                 such as \"5/s\""
            ),
            RateErrorKind::UnknownUnit => {
                let unit = input.split_once('/').map_or("", |(_, u)| u);
                write!(
                    f,
                    "rate {input:?} has the unknown unit {unit:?}: use s (per second), \
                     m (per minute) or h (per hour)"
                )
            }
            RateErrorKind::NotACount => {
                let count = input.split_once('/').map_or("", |(c, _)| c);
                write!(
                    f,
                    "rate {input:?}: the count {count:?} is not a whole number: \
                     write digits only, such as \"5/s\""
                )
            }
            RateErrorKind::CountTooLarge => write!(
                f,
                "rate {input:?}: the count is more than {}: use a smaller count or a shorter unit",
                u32::MAX
            ),
            RateErrorKind::ZeroCount => write!(
                f,
                "rate {input:?} allows no requests: use a count of at least 1"
            ),
        }
    }
}

impl std::error::Error for RateError {}

/// The settings of one named limiter, as read from a config.
///
/// Unset fields keep the [`Builder`]'s defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LimiterConfig {
    /// The upstream's budget.
    pub rate: Rate,
    /// B: how many requests at once; the rate's count when unset.
    pub burst: Option<u32>,
    /// N: buckets the budget is split into.
    pub buckets: Option<u32>,
    /// k: buckets per tenant.
    pub per_tenant: Option<u32>,
    /// A deployment secret mixed into the assignment.
    pub salt: Option<String>,
    /// Entries of the tenant → shard cache.
    pub tenant_cache: Option<usize>,
}

impl LimiterConfig {
    /// A config with only a rate; every other setting at its default.
    pub fn new(rate: Rate) -> Self {
        LimiterConfig {
            rate,
            burst: None,
            buckets: None,
            per_tenant: None,
            salt: None,
            tenant_cache: None,
        }
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
        if let Some(per_tenant) = self.per_tenant {
            builder = builder.per_tenant(per_tenant);
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
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SetConfig {
    /// The limiters by name.
    pub limiters: BTreeMap<String, LimiterConfig>,
}

const FIELDS: &str = "rate, burst, buckets, per_tenant, salt or tenant_cache";

impl<'de> Deserialize<'de> for SetConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SetConfig, D::Error> {
        deserializer.deserialize_map(TopVisitor)
    }
}

struct TopVisitor;

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
                "limiters" => limiters = Some(map.next_value_seed(LimitersSeed)?),
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
        if limiters.is_empty() {
            return Err(de::Error::custom(
                "limiters: empty: add a table per limiter, such as [limiters.amazon] \
                 with rate = \"5/s\"",
            ));
        }
        Ok(SetConfig { limiters })
    }
}

struct LimitersSeed;

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
            let config = map.next_value_seed(EntrySeed { name: &name })?;
            limiters.insert(name, config);
        }
        Ok(limiters)
    }
}

/// One `[limiters.NAME]` table; knows its name so that errors can say where.
struct EntrySeed<'a> {
    name: &'a str,
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
        let mut config = LimiterConfig::new(Rate {
            count: 1,
            unit: Unit::Second,
        });
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "rate" => field(&mut map, &mut rate, name, "rate")?,
                "burst" => field(&mut map, &mut config.burst, name, "burst")?,
                "buckets" => field(&mut map, &mut config.buckets, name, "buckets")?,
                "per_tenant" => field(&mut map, &mut config.per_tenant, name, "per_tenant")?,
                "salt" => field(&mut map, &mut config.salt, name, "salt")?,
                "tenant_cache" => field(&mut map, &mut config.tenant_cache, name, "tenant_cache")?,
                other => {
                    return Err(de::Error::custom(format_args!(
                        "limiters.{name}.{other}: unknown key: use {FIELDS}"
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
        Ok(config)
    }
}

/// Reads one setting into `slot`, naming its place in any error.
fn field<'de, A, T>(
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

/// Why a [`LimiterSet`] could not be built; the message names the limiter
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetError {
    limiter: String,
    kind: SetErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum SetErrorKind {
    Config(ConfigError),
    Duplicate,
}

impl SetError {
    /// The name of the limiter at fault.
    pub fn limiter(&self) -> &str {
        &self.limiter
    }

    /// The setting to change, when one setting is at fault.
    pub fn field(&self) -> Option<&'static str> {
        let SetErrorKind::Config(e) = &self.kind else {
            return None;
        };
        use ConfigError::*;
        Some(if matches!(e, ZeroBuckets | TooManyBuckets { .. }) {
            "buckets"
        } else if matches!(
            e,
            ZeroPerTenant | PerTenantExceedsBuckets { .. } | TooManyPerTenant { .. }
        ) {
            "per_tenant"
        } else if matches!(e, BurstTooSmall { .. }) {
            "burst"
        } else if matches!(e, CacheTooLarge { .. }) {
            "tenant_cache"
        } else if matches!(e, MissingQuota | ZeroCount | ZeroPeriod | Overflow { .. }) {
            "rate"
        } else {
            return None;
        })
    }

    /// The builder's error, when the settings could not work together.
    pub fn config_error(&self) -> Option<&ConfigError> {
        match &self.kind {
            SetErrorKind::Config(e) => Some(e),
            SetErrorKind::Duplicate => None,
        }
    }
}

impl fmt::Display for SetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "limiters.{}", self.limiter)?;
        if let Some(field) = self.field() {
            write!(f, ".{field}")?;
        }
        match &self.kind {
            SetErrorKind::Config(e) => write!(f, ": {e}"),
            SetErrorKind::Duplicate => {
                f.write_str(": two limiters have this name: give each limiter its own name")
            }
        }
    }
}

impl std::error::Error for SetError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.config_error().map(|e| e as _)
    }
}

type Map<C> = HashMap<Box<str>, Arc<ShardedLimiter<C>>, foldhash::fast::RandomState>;

/// Named limiters, each with its own budget, looked up by name without a
/// lock; see the [module documentation](self).
///
/// Cloning is cheap and clones share the limiters.
pub struct LimiterSet<C = MonotonicClock> {
    limiters: Arc<Map<C>>,
}

impl<C> Clone for LimiterSet<C> {
    fn clone(&self) -> Self {
        LimiterSet {
            limiters: Arc::clone(&self.limiters),
        }
    }
}

impl<C> fmt::Debug for LimiterSet<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("LimiterSet")
            .field(&self.names().collect::<Vec<_>>())
            .finish()
    }
}

/// # Building
impl LimiterSet<MonotonicClock> {
    /// Builds every limiter of `config`, with the default clock.
    ///
    /// # Errors
    /// A [`SetError`] for the first limiter (in name order) whose settings
    /// cannot work.
    pub fn from_config(config: &SetConfig) -> Result<Self, SetError> {
        Self::from_config_with_clock(config, MonotonicClock::new())
    }
}

impl<C: Clock> LimiterSet<C> {
    /// Builds every limiter of `config`, each reading a clone of `clock`
    /// ([`ManualClock`](crate::ManualClock) clones share one time, for
    /// tests).
    ///
    /// # Errors
    /// As [`from_config`](LimiterSet::from_config).
    pub fn from_config_with_clock(config: &SetConfig, clock: C) -> Result<Self, SetError>
    where
        C: Clone,
    {
        let limiters = config.limiters.iter().map(|(name, settings)| {
            settings
                .builder(name)
                .clock(clock.clone())
                .build()
                .map_err(|e| SetError {
                    limiter: name.clone(),
                    kind: SetErrorKind::Config(e),
                })
        });
        Self::from_limiters(limiters.collect::<Result<Vec<_>, _>>()?)
    }

    /// A set of limiters built in code, each under its
    /// [`name`](ShardedLimiter::name).
    ///
    /// ```
    /// use shuffle_limiter::{Quota, ShardedLimiter, set::LimiterSet};
    ///
    /// let limiter = |name: &str, rate| {
    ///     ShardedLimiter::builder().quota(Quota::per_second(rate)).name(name).build()
    /// };
    /// let set = LimiterSet::from_limiters([limiter("amazon", 8)?, limiter("ebay", 16)?])?;
    /// assert_eq!(set.names().collect::<Vec<_>>(), ["amazon", "ebay"]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// A [`SetError`] when two limiters have the same name.
    pub fn from_limiters(
        limiters: impl IntoIterator<Item = ShardedLimiter<C>>,
    ) -> Result<Self, SetError> {
        let mut map = Map::default();
        for limiter in limiters {
            let name: Box<str> = limiter.name().into();
            if map.contains_key(&name) {
                return Err(SetError {
                    limiter: name.into(),
                    kind: SetErrorKind::Duplicate,
                });
            }
            map.insert(name, Arc::new(limiter));
        }
        Ok(LimiterSet {
            limiters: Arc::new(map),
        })
    }
}

/// # Looking up
impl<C> LimiterSet<C> {
    /// The limiter named `name`; hand the `Arc` to a task or a
    /// [`RateLimitLayer`](crate::tower::RateLimitLayer) to share it.
    #[inline]
    pub fn get(&self, name: &str) -> Option<&Arc<ShardedLimiter<C>>> {
        self.limiters.get(name)
    }

    /// The names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        let mut names: Vec<&str> = self.limiters.keys().map(|k| &**k).collect();
        names.sort_unstable();
        names.into_iter()
    }

    /// The limiters with their names, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Arc<ShardedLimiter<C>>)> {
        self.limiters.iter().map(|(k, v)| (&**k, v))
    }

    /// How many limiters there are.
    pub fn len(&self) -> usize {
        self.limiters.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.limiters.is_empty()
    }
}

impl<'de> Deserialize<'de> for LimiterSet<MonotonicClock> {
    /// Reads a [`SetConfig`] and builds it, reporting build errors through
    /// the format's error type.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let config = SetConfig::deserialize(deserializer)?;
        LimiterSet::from_config(&config).map_err(de::Error::custom)
    }
}
