//! One limiter per upstream (feature `config`): named limiters, each with its
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
//! | `rate` | yes | the upstream's budget: `"N/s"`, `"N/m"`, `"N/h"`, `"N/d"`, `"N/10s"`, `"N/500ms"`; a fractional N such as `"0.5/s"` is kept exact (see [`Rate`]) |
//! | `burst` | no | how many at once (default: N of the rate) |
//! | `buckets` | no | N, buckets the budget is split into (default 8, or the burst if smaller) |
//! | `per_tenant` | no | k, buckets per tenant (default 2) |
//! | `per_user` | no | j, buckets per user of a tenant in nested checks, 1 ≤ j ≤ k (default k) |
//! | `tiers` | no | a table of tier names and their buckets per tenant, such as `{ gold = 4 }` |
//! | `tenant_tiers` | no | a table of tenants and their tier's name, such as `{ acme = "gold" }` |
//! | `borrow_from` | no | d, spill buckets each tenant may borrow from when its own are empty (default 0: no borrowing; k + d ≤ min(N, 8)) |
//! | `lender_reserve` | with `borrow_from` | r, the share of each bucket's burst that borrowers leave to its owners: 0 ≤ r < 1 (default 0.5; see [`Reserve`]) |
//! | `salt` | no | a deployment secret mixed into the assignment |
//! | `tenant_cache` | no | entries of the tenant → shard cache |
//! | `concurrency` | no | C, an in-flight limit beside the rate limiter: the most calls in flight at once, in this process (see [`InFlightConfig`]; [`inflight`](LimiterSet::inflight) finds it) |
//! | `pools` | with `concurrency` | N of the in-flight limit, pools the concurrency is split into (default 8, or C if smaller); its k, j, salt and cache are the limiter's |
//! | `max_queue` | with `concurrency` | the most callers one pool's queue holds (default 50) |
//! | `max_wait` | with `concurrency` | the longest an acquire waits, such as `"250ms"` (feature `wait`; default no bound) |
//! | `lease_ttl` | with `concurrency` and `redis` | the in-flight pools live in Redis, shared by every process that connects the config, each permit a lease of this TTL, such as `"30s"` (feature `redis`; [`redis_inflight`](LimiterSet::redis_inflight) finds it; default: in this process) |
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
//! let err = toml::from_str::<SetConfig>("[limiters.amazon]\nrate = \"5/w\"").unwrap_err();
//! assert!(err.to_string().contains("limiters.amazon.rate: "));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Limiters in Redis
//! With the `redis` feature too, a limiter whose table has a `redis` key
//! keeps its buckets in that Redis, so that every process built from the
//! same config shares its one budget (see the `redis` module). Beside `redis`, such a table takes
//!
//! | key | required | meaning |
//! | --- | --- | --- |
//! | `redis` | yes | the server: `"redis://[[user]:password@]host[:port][/db]"` |
//! | `failure_policy` | no | when Redis does not answer in time: `"fail_closed"` (default), `"fail_open"` or `"local_fallback"` (see `redis::FailurePolicy`) |
//! | `replicas` | with `local_fallback` | how many processes share the budget; each falls back to its share |
//! | `deadline` | no | the longest a decision may take, such as `"5ms"` |
//! | `retry_every` | no | how long Redis is left alone after a failure, such as `"250ms"` |
//! | `connect_timeout` | no | how long building waits for Redis before going on without it, such as `"1s"` |
//! | `cache_denials` | no | remember denials until their retry time (default `true`) |
//! | `key_prefix` | no | a prefix for the limiter's Redis keys, such as `"billing:"` (default none: the keys are `{NAME}:b0`, …; two services with the same `[limiters.NAME]` on one Redis share its budget unless their prefixes differ) |
//!
//! Durations are a number and a unit (`ns`, `us`, `ms`, `s`, `m`, `h`), or
//! several, as in `"1m 30s"`; unset options keep the defaults of
//! `redis::RedisOptions`. Build such a set with the
//! async `LimiterSet::connect`, which connects to each Redis limiter's
//! server; [`from_config`](LimiterSet::from_config) refuses it. In-process
//! limiters of the same set stay synchronous and are found with
//! [`get`](LimiterSet::get); Redis ones with
//! `get_redis`, and both with [`member`](LimiterSet::member), whose
//! [`check`](Member::check) works whichever the store.
//!
//! ```no_run
//! # #[cfg(feature = "redis")]
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use shuffle_limiter::Limit; // a Redis limiter's checks
//! use shuffle_limiter::set::{LimiterSet, SetConfig};
//!
//! let config: SetConfig = toml::from_str(r#"
//!     [limiters.amazon]                  # in this process
//!     rate = "5/s"
//!
//!     [limiters.walmart]                 # one budget for the whole fleet
//!     rate = "600/m"
//!     redis = "redis://127.0.0.1:6379"
//!     failure_policy = "local_fallback"
//!     replicas = 4
//!     deadline = "5ms"
//! "#)?;
//! let set = LimiterSet::connect(&config).await?;
//!
//! set.get("amazon").expect("in process").check("tenant-42")?;
//! set.get_redis("walmart").expect("in Redis").check("tenant-42").await?;
//! # Ok(())
//! # }
//! ```
//!
//! Each Redis limiter has its own connection, which reconnects by itself.
//! A Redis that is down while the set is built does not stop the build:
//! its limiters decide by their `failure_policy` until it answers.

mod config;
mod duration_text;
mod error;
mod inflight;
mod member;
#[cfg(not(feature = "redis"))]
mod no_redis;
mod rate;
#[cfg(feature = "redis")]
mod redis;
mod reload;
mod reserve;
mod serialize;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

#[cfg(feature = "redis")]
use ::redis::aio::ConnectionManager;
use serde::Deserialize;
use serde::de::{self, Deserializer};

use crate::clock::{Clock, MonotonicClock};
use crate::inflight::InFlight;
use crate::limiter::ShardedLimiter;
#[cfg(feature = "redis")]
use crate::redis::RedisLimiter;

pub use config::{LimiterConfig, SetConfig};
pub use error::SetError;
use error::SetErrorKind;
pub use inflight::InFlightConfig;
use member::Entry;
pub use member::Member;
pub use rate::{Rate, RateError, RateErrorKind};
#[cfg(feature = "redis")]
pub use redis::RedisConfig;
use reload::Configs;
pub use reload::Reload;
pub use reserve::Reserve;

type Map<C> = HashMap<Box<str>, Entry<C>, foldhash::fast::RandomState>;

/// The in-flight limits, by their limiter's name.
type InFlights = HashMap<Box<str>, Arc<InFlight>, foldhash::fast::RandomState>;

/// The in-flight limits whose pools live in Redis, by their limiter's name.
#[cfg(feature = "redis")]
type RedisInFlights =
    HashMap<Box<str>, crate::inflight::RedisInFlight, foldhash::fast::RandomState>;
/// Without the `redis` feature there are none.
#[cfg(not(feature = "redis"))]
#[derive(Default)]
struct RedisInFlights {
    _none: (),
}

/// Named limiters, each with its own budget, looked up by name without a
/// lock; see the [module documentation](self).
///
/// Cloning is cheap and clones share the limiters.
pub struct LimiterSet<C = MonotonicClock> {
    limiters: Arc<Map<C>>,
    /// The in-flight limits of the limiters that have one.
    inflights: Arc<InFlights>,
    /// Those whose pools live in Redis.
    redis_inflights: Arc<RedisInFlights>,
    /// The settings each limiter was built from (none for a set built from
    /// limiters in code), for [`reload`](LimiterSet::reload).
    configs: Arc<Configs>,
}

impl<C> Clone for LimiterSet<C> {
    fn clone(&self) -> Self {
        LimiterSet {
            limiters: Arc::clone(&self.limiters),
            inflights: Arc::clone(&self.inflights),
            redis_inflights: Arc::clone(&self.redis_inflights),
            configs: Arc::clone(&self.configs),
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
    /// Builds every limiter of `config`, in this process, with the default
    /// clock.
    ///
    /// # Errors
    /// A [`SetError`] for the first limiter (in name order) whose settings
    /// cannot work, or that is a Redis limiter: build a set with those with
    /// `connect` (feature `redis`).
    pub fn from_config(config: &SetConfig) -> Result<Self, SetError> {
        Self::from_config_with_clock(config, MonotonicClock::new())
    }

    /// Builds every limiter of `config`, connecting each Redis limiter to its
    /// server, with the default clock.
    ///
    /// In-process limiters are built first, so that a mistake in one is
    /// reported before any wait on the network; then the Redis ones, one
    /// after the other, each waiting at most its `connect_timeout`. A Redis
    /// limiter whose server cannot be reached is built all the same, as
    /// `Builder::build_redis` builds it: it decides by its `failure_policy`
    /// until the server answers, so that a service restarting while Redis is
    /// away comes up.
    ///
    /// # Errors
    /// A [`SetError`] for the first limiter whose settings cannot work, or
    /// whose Redis answered and refused it (the credentials, the script);
    /// its [`source`](std::error::Error::source) and
    /// [`redis_error`](SetError::redis_error) give the
    /// [`redis::BuildError`](crate::redis::BuildError).
    #[cfg(feature = "redis")]
    pub async fn connect(config: &SetConfig) -> Result<Self, SetError> {
        Self::connect_with_clock(config, MonotonicClock::new()).await
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
        config.check()?;
        let (mut map, mut inflights) = (Map::default(), InFlights::default());
        for (name, settings) in &config.limiters {
            if settings.is_redis() {
                return Err(SetError::new(name, SetErrorKind::NeedsConnect));
            }
            build_in_process(name, settings, clock.clone(), &mut map, &mut inflights)?;
        }
        Ok(LimiterSet {
            limiters: Arc::new(map),
            inflights: Arc::new(inflights),
            redis_inflights: Arc::default(),
            configs: Arc::new(config.limiters.clone()),
        })
    }

    /// Builds every limiter of `config` as [`connect`](LimiterSet::connect)
    /// does, each reading a clone of `clock`. A Redis limiter decides on the
    /// server's clock; `clock` drives its denial cache and its fallback.
    ///
    /// # Errors
    /// As [`connect`](LimiterSet::connect).
    #[cfg(feature = "redis")]
    pub async fn connect_with_clock(config: &SetConfig, clock: C) -> Result<Self, SetError>
    where
        C: Clone,
    {
        config.check()?;
        // What is built in process first, in name order: a mistake there is
        // reported before any wait on the network.
        let (mut map, mut inflights) = (Map::default(), InFlights::default());
        for (name, settings) in &config.limiters {
            if !settings.is_redis() {
                build_in_process(name, settings, clock.clone(), &mut map, &mut inflights)?;
            } else if let Some(limit) = inflight::build(name, settings)? {
                inflights.insert(name.as_str().into(), limit);
            }
        }
        let mut redis_inflights = RedisInFlights::default();
        for (name, settings) in config.limiters.iter().filter(|(_, s)| s.is_redis()) {
            let limiter = build_any(name, settings, clock.clone()).await?;
            if let Some(limit) = inflight::connect_entry(name, settings, &limiter).await? {
                redis_inflights.insert(name.as_str().into(), limit);
            }
            map.insert(name.as_str().into(), limiter);
        }
        Ok(LimiterSet {
            limiters: Arc::new(map),
            inflights: Arc::new(inflights),
            redis_inflights: Arc::new(redis_inflights),
            configs: Arc::new(config.limiters.clone()),
        })
    }

    /// A set of in-process limiters built in code, each under its
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
                return Err(SetError::new(&name, SetErrorKind::Duplicate));
            }
            map.insert(name, Entry::Local(Arc::new(limiter)));
        }
        Ok(LimiterSet {
            limiters: Arc::new(map),
            inflights: Arc::default(),
            redis_inflights: Arc::default(),
            configs: Arc::default(),
        })
    }
}

/// The limiter of `settings`, in process or connected to its Redis.
#[cfg(feature = "redis")]
async fn build_any<C: Clock>(
    name: &str,
    settings: &LimiterConfig,
    clock: C,
) -> Result<Entry<C>, SetError> {
    let Some(redis) = &settings.redis else {
        return build_local(name, settings, clock);
    };
    settings.check(name)?;
    let limiter = settings
        .builder(name)
        .clock(clock)
        .build_redis(&redis.url, redis.options())
        .await
        .map_err(|e| SetError::redis(name, e))?;
    Ok(Entry::Redis(Arc::new(limiter)))
}

/// Builds `name`'s in-process limiter, then its in-flight limit if it has
/// one, into `map` and `inflights`.
fn build_in_process<C: Clock>(
    name: &str,
    settings: &LimiterConfig,
    clock: C,
    map: &mut Map<C>,
    inflights: &mut InFlights,
) -> Result<(), SetError> {
    let limiter = build_local(name, settings, clock)?;
    if let Some(limit) = inflight::build(name, settings)? {
        inflights.insert(name.into(), limit);
    }
    map.insert(name.into(), limiter);
    Ok(())
}

fn build_local<C: Clock>(
    name: &str,
    settings: &LimiterConfig,
    clock: C,
) -> Result<Entry<C>, SetError> {
    settings.check(name)?;
    let limiter = settings
        .builder(name)
        .clock(clock)
        .build()
        .map_err(|e| SetError::config(name, e))?;
    Ok(Entry::Local(Arc::new(limiter)))
}

/// # Looking up
impl<C> LimiterSet<C> {
    /// The in-process limiter named `name`; hand the `Arc` to a task or a
    /// `RateLimitLayer` (feature `tower`) to share it.
    ///
    /// A limiter configured with `redis = "..."` is not found here (its
    /// check is async): look it up with `get_redis` (feature `redis`), or
    /// either kind with
    /// [`member`](LimiterSet::member).
    ///
    /// ```
    /// use shuffle_limiter::set::{LimiterSet, SetConfig};
    ///
    /// let config: SetConfig = toml::from_str(r#"
    ///     [limiters.amazon]
    ///     rate = "5/s"
    ///     buckets = 5
    /// "#)?;
    /// let set = LimiterSet::from_config(&config)?;
    ///
    /// let amazon = set.get("amazon").expect("configured above");
    /// // 5 buckets of 1 token; the tenant draws from its 2.
    /// let granted = (0..10).filter(|_| amazon.check("tenant-42").is_ok()).count();
    /// assert_eq!(granted, 2);
    /// assert!(set.get("ebay").is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn get(&self, name: &str) -> Option<&Arc<ShardedLimiter<C>>> {
        self.limiters.get(name)?.local()
    }

    /// The Redis limiter named `name`; in-process limiters are found with
    /// [`get`](LimiterSet::get).
    #[cfg(feature = "redis")]
    #[inline]
    pub fn get_redis(&self, name: &str) -> Option<&Arc<RedisLimiter<ConnectionManager, C>>> {
        match self.limiters.get(name)? {
            Entry::Redis(limiter) => Some(limiter),
            Entry::Local(_) => None,
        }
    }

    /// The in-flight limit of the limiter named `name`, if its table has
    /// a `concurrency` ([`InFlightConfig`]); hand the `Arc` to an
    /// `InFlightLayer` (feature `tower`) or a task to share it.
    ///
    /// ```
    /// use shuffle_limiter::set::LimiterSet;
    ///
    /// let set: LimiterSet = toml::from_str(r#"
    ///     [limiters.partner]
    ///     rate = "100/s"
    ///     concurrency = 40    # 8 pools of 5, 2 per tenant
    ///
    ///     [limiters.ebay]
    ///     rate = "5/s"
    /// "#)?;
    /// let partner = set.inflight("partner").expect("configured above");
    /// let permit = partner.try_acquire("tenant-42")?; // held while the call runs
    /// assert_eq!(partner.available(), 39);
    /// drop(permit);
    /// assert!(set.inflight("ebay").is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[inline]
    pub fn inflight(&self, name: &str) -> Option<&Arc<InFlight>> {
        self.inflights.get(name)
    }

    /// The in-flight limit of the limiter `name` whose pools live in Redis
    /// (a `concurrency` and a `lease_ttl` beside `redis = "..."`, built by
    /// [`connect`](LimiterSet::connect)), sharing the rate limiter's
    /// connection; clone it (cheap) into tasks. Its permits are leases
    /// ([`RedisInFlight`](crate::inflight::RedisInFlight)).
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn redis_inflight(&self, name: &str) -> Option<&crate::inflight::RedisInFlight> {
        self.redis_inflights.get(name)
    }

    /// The limiter named `name`, in process or in Redis.
    #[inline]
    pub fn member(&self, name: &str) -> Option<Member<'_, C>> {
        self.limiters.get(name).map(Entry::member)
    }

    /// Every limiter, in process or in Redis, sorted by name.
    pub fn members(&self) -> impl Iterator<Item = Member<'_, C>> {
        self.names().map(|name| self.limiters[name].member())
    }

    /// The names of every limiter, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        let mut names: Vec<&str> = self.limiters.keys().map(|k| &**k).collect();
        names.sort_unstable();
        names.into_iter()
    }

    /// The in-process limiters with their names, in no particular order;
    /// [`members`](LimiterSet::members) yields the Redis ones too.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Arc<ShardedLimiter<C>>)> {
        self.limiters
            .iter()
            .filter_map(|(name, entry)| Some((&**name, entry.local()?)))
    }

    /// How many limiters there are, of both kinds.
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
    /// the format's error type. Each limiter's settings are checked as its
    /// table ends, so that TOML gives the line and column of the table whose
    /// settings cannot work together. A config with a Redis limiter is
    /// refused: build that with `LimiterSet::connect` (feature `redis`).
    ///
    /// ```
    /// use shuffle_limiter::set::LimiterSet;
    ///
    /// let err = toml::from_str::<LimiterSet>(
    ///     "[limiters.amazon]\nrate = \"5/s\"\n\n[limiters.ebay]\nrate = \"5/s\"\nbuckets = 8\n",
    /// )
    /// .unwrap_err()
    /// .to_string();
    /// assert!(err.contains("line 4"), "{err}"); // [limiters.ebay]
    /// assert!(err.contains("limiters.ebay.burst: a burst of 5 cannot"), "{err}");
    /// ```
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let config = config::deserialize_checked(deserializer)?;
        LimiterSet::from_config(&config).map_err(de::Error::custom)
    }
}
