//! `Serialize` for the config types: each writes the keys its deserializer
//! reads, and only those that are set, so the output reads back as the same
//! config in any self-describing format (TOML, JSON, ...).

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::config::{LimiterConfig, SetConfig};
use super::reserve::Reserve;

impl Serialize for SetConfig {
    /// `{ limiters = { NAME = { ... } } }`, the limiters in name order.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("limiters", &self.limiters)?;
        map.end()
    }
}

impl Serialize for LimiterConfig {
    /// The table of one limiter: `rate`, each setting that is set, and for a
    /// Redis limiter its keys (`redis`, `failure_policy`, ...) beside them.
    /// A Redis URL is written whole, password included.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        map.serialize_entry("rate", &self.rate)?;
        entry(&mut map, "burst", &self.burst)?;
        entry(&mut map, "buckets", &self.buckets)?;
        entry(&mut map, "max_buckets", &self.max_buckets)?;
        entry(&mut map, "per_tenant", &self.per_tenant)?;
        entry(&mut map, "per_user", &self.per_user)?;
        entry(&mut map, "borrow_from", &self.borrow_from)?;
        entry(&mut map, "lender_reserve", &self.lender_reserve)?;
        entry(&mut map, "salt", &self.salt)?;
        entry(&mut map, "tenant_cache", &self.tenant_cache)?;
        if let Some(inflight) = &self.inflight {
            map.serialize_entry("concurrency", &inflight.concurrency)?;
            entry(&mut map, "pools", &inflight.pools)?;
            entry(&mut map, "max_queue", &inflight.max_queue)?;
            let span = |d: Option<std::time::Duration>| {
                d.map(|d| humantime::format_duration(d).to_string())
            };
            entry(&mut map, "max_wait", &span(inflight.max_wait))?;
            entry(&mut map, "lease_ttl", &span(inflight.lease_ttl))?;
        }
        #[cfg(feature = "redis")]
        if let Some(redis) = &self.redis {
            redis.entries(&mut map)?;
        }
        // Tables last: TOML wants a table's plain keys before its subtables.
        entry(&mut map, "tiers", &self.tiers)?;
        entry(&mut map, "tenant_tiers", &self.tenant_tiers)?;
        map.end()
    }
}

/// Writes `key = value` when `value` is set.
fn entry<M: SerializeMap, T: Serialize>(
    map: &mut M,
    key: &'static str,
    value: &Option<T>,
) -> Result<(), M::Error> {
    match value {
        Some(value) => map.serialize_entry(key, value),
        None => Ok(()),
    }
}

impl Serialize for Reserve {
    /// The share as a number, such as `0.25`.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.get())
    }
}

#[cfg(feature = "redis")]
mod redis {
    use serde::ser::{Serialize, SerializeMap, Serializer};

    use super::entry;
    use crate::redis::FailurePolicy;
    use crate::set::RedisConfig;

    impl RedisConfig {
        /// The keys of a Redis limiter, written into its table.
        pub(super) fn entries<M: SerializeMap>(&self, map: &mut M) -> Result<(), M::Error> {
            map.serialize_entry("redis", &self.url)?;
            let (policy, replicas) = match self.failure_policy {
                FailurePolicy::FailClosed => ("fail_closed", None),
                FailurePolicy::FailOpen => ("fail_open", None),
                FailurePolicy::LocalFallback { replicas } => ("local_fallback", Some(replicas)),
            };
            map.serialize_entry("failure_policy", policy)?;
            entry(map, "replicas", &replicas)?;
            let span = |d: &Option<std::time::Duration>| {
                d.map(|d| humantime::format_duration(d).to_string())
            };
            entry(map, "deadline", &span(&self.deadline))?;
            entry(map, "retry_every", &span(&self.retry_every))?;
            entry(map, "connect_timeout", &span(&self.connect_timeout))?;
            entry(map, "cache_denials", &self.cache_denials)?;
            entry(map, "key_prefix", &self.key_prefix)
        }
    }

    impl Serialize for RedisConfig {
        /// The keys a Redis limiter's table holds beside its other
        /// settings: `redis`, `failure_policy`, and each option that is set,
        /// durations written as `"5ms"`. The URL is written whole, password
        /// included.
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(None)?;
            self.entries(&mut map)?;
            map.end()
        }
    }
}
