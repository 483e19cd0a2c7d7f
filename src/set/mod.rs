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

mod config;
mod error;
mod rate;
#[cfg(feature = "redis")]
mod redis;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::Deserialize;
use serde::de::{self, Deserializer};

use crate::clock::{Clock, MonotonicClock};
use crate::limiter::ShardedLimiter;

pub use config::{LimiterConfig, SetConfig};
pub use error::SetError;
use error::SetErrorKind;
pub use rate::{Rate, RateError, RateErrorKind};
#[cfg(feature = "redis")]
pub use redis::RedisConfig;

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
            if settings.is_redis() {
                return Err(SetError::new(name, SetErrorKind::NeedsConnect));
            }
            settings
                .builder(name)
                .clock(clock.clone())
                .build()
                .map_err(|e| SetError::config(name, e))
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
                return Err(SetError::new(&name, SetErrorKind::Duplicate));
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
