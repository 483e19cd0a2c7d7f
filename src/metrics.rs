//! Observability (feature `metrics`): counters and gauges through the
//! [`metrics`](https://docs.rs/metrics/0.24) facade, and `tracing` events.
//!
//! No exporter is bundled: install the recorder of your choice (Prometheus,
//! StatsD, ...) **before** building the limiter, because each limiter
//! registers its handles once, when it is built, and the hot path only
//! increments them.
//!
//! | name | kind | labels | when |
//! | --- | --- | --- | --- |
//! | [`GRANTS`] | counter | `limiter`, `bucket` | a request is granted; `bucket` paid for it ([`Grant::bucket`](crate::Grant::bucket): the one that paid most, when several paid together) |
//! | [`DENIALS`] | counter | `limiter`, `bucket` | a request is denied by its buckets ([`DenialReason::Limited`](crate::DenialReason::Limited)); `bucket` is the one that will have room first |
//! | [`AVAILABLE`] | gauge | `limiter`, `bucket` | [`ShardedLimiter::snapshot`](crate::ShardedLimiter::snapshot): tokens the bucket holds now |
//! | `REDIS_DECISIONS` (feature `redis`) | counter | `limiter`, `source` | a `RedisLimiter` decided; `source` is `redis` (the script), `cached_denial` (a denial remembered from Redis) or `policy` (the failure policy: Redis failed, missed the deadline, or the shard is paused) |
//! | `REDIS_ERRORS` (feature `redis`) | counter | `limiter` | a request to Redis failed or missed the deadline |
//!
//! A Redis limiter counts its grants and denials in [`GRANTS`] and
//! [`DENIALS`] as well, whichever way they were decided (with
//! `LocalFallback`, the fallback limiter counts the policy's under the same
//! name), except the policy's denials while the store cannot decide
//! ([`DenialReason::StoreUnavailable`](crate::DenialReason::StoreUnavailable)):
//! no bucket is short then. The two Redis counters are the same numbers as
//! its `stats()`, one per decision, so an alert on `source="policy"` sees
//! every request the policy answered, once.
//!
//! Cardinality is bounded by the configuration: three series per bucket per
//! limiter, registered at build for every bucket N may grow to
//! ([`Builder::max_buckets`](crate::Builder::max_buckets), N unless set),
//! and four more per Redis limiter. Nothing is ever labelled with a tenant id, whose values are
//! unbounded; the `bucket` label already tells which shard is hot.
//!
//! When a limiter is built with weak isolation (one bucket, or fewer than
//! [`WEAK_ISOLATION_SHARDS`](crate::WEAK_ISOLATION_SHARDS) distinct shards:
//! see [`Isolation`](crate::Isolation)), one `tracing` event at warn level
//! says so, with the numbers and what to change. Otherwise
//! `tracing` events come only at debug level (a limiter was built, with its
//! name, quota, N and k) and trace level (a denial, with its bucket and
//! `retry_after`; a wait before retrying), so they cost nothing unless a
//! subscriber asks for them. They never carry a tenant id either.
//!
//! ```
//! use metrics_util::debugging::{DebugValue, DebuggingRecorder};
//! use shuffle_limiter::{Quota, ShardedLimiter};
//!
//! let recorder = DebuggingRecorder::new();
//! let snapshotter = recorder.snapshotter();
//! metrics::with_local_recorder(&recorder, || -> Result<(), shuffle_limiter::ConfigError> {
//!     let limiter = ShardedLimiter::builder()
//!         .quota(Quota::per_second(2))
//!         .buckets(2)
//!         .per_tenant(1)
//!         .name("amazon")
//!         .build()?;
//!     let bucket = limiter.check("t").unwrap().bucket();
//!     limiter.check("t").unwrap_err();
//!     Ok(())
//! })?;
//! let grants: u64 = snapshotter
//!     .snapshot()
//!     .into_vec()
//!     .into_iter()
//!     .filter(|(key, ..)| key.key().name() == shuffle_limiter::metrics::GRANTS)
//!     .map(|(.., value)| match value {
//!         DebugValue::Counter(n) => n,
//!         _ => 0,
//!     })
//!     .sum();
//! assert_eq!(grants, 1);
//! # Ok::<(), shuffle_limiter::ConfigError>(())
//! ```

use std::time::Duration;

use ::metrics::{Counter, Gauge, Unit, counter, describe_counter, describe_gauge, gauge};

use crate::quota::Quota;
use crate::{Denied, Grant};

/// Says once, when a limiter is built, that its isolation is weak: a
/// `tracing` event at warn level carrying the whole report.
pub(crate) fn weak_isolation(name: &str, isolation: &crate::Isolation) {
    tracing::warn!(
        limiter = name,
        buckets = isolation.buckets(),
        per_tenant = isolation.per_tenant(),
        "rate limiter built with weak isolation: {isolation}"
    );
}

/// Counter of granted requests, labelled `limiter` and `bucket`.
pub const GRANTS: &str = "shuffle_limiter_grants_total";

/// Counter of denied requests, labelled `limiter` and `bucket`.
pub const DENIALS: &str = "shuffle_limiter_denials_total";

/// Gauge of the tokens a bucket holds, set by each snapshot; labelled
/// `limiter` and `bucket`.
pub const AVAILABLE: &str = "shuffle_limiter_available_tokens";

/// Counter of a Redis limiter's decisions, labelled `limiter` and `source`:
/// `redis`, `cached_denial` or `policy`.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub const REDIS_DECISIONS: &str = crate::redis::metrics::DECISIONS.0;

/// Counter of a Redis limiter's requests to Redis that failed or missed the
/// deadline, labelled `limiter`.
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub const REDIS_ERRORS: &str = crate::redis::metrics::ERRORS.0;

/// One limiter's handles, registered once at build time so that a decision
/// only increments an existing counter. Clones share the handles.
#[derive(Clone)]
pub(crate) struct Metrics {
    limiter: String,
    grants: Box<[Counter]>,
    denials: Box<[Counter]>,
    available: Box<[Gauge]>,
}

impl Metrics {
    /// Registers the series of every bucket of the limiter `name`, up to
    /// the most it may grow to (`(N, max)`).
    pub(crate) fn new(
        name: &str,
        quota: Quota,
        (buckets, max): (u32, u32),
        per_tenant: u32,
    ) -> Self {
        describe_counter!(GRANTS, Unit::Count, "Requests granted, by paying bucket");
        describe_counter!(
            DENIALS,
            Unit::Count,
            "Requests denied, by the bucket to free up first"
        );
        describe_gauge!(
            AVAILABLE,
            Unit::Count,
            "Tokens a bucket holds, as of the last snapshot"
        );
        let labels = |b: u32| [("limiter", name.to_owned()), ("bucket", b.to_string())];
        tracing::debug!(
            limiter = name,
            count = quota.count(),
            period_ms = quota.period().as_millis() as u64,
            burst = quota.burst(),
            buckets,
            per_tenant,
            "rate limiter built"
        );
        Metrics {
            limiter: name.to_owned(),
            grants: (0..max).map(|b| counter!(GRANTS, &labels(b))).collect(),
            denials: (0..max).map(|b| counter!(DENIALS, &labels(b))).collect(),
            available: (0..max).map(|b| gauge!(AVAILABLE, &labels(b))).collect(),
        }
    }

    /// Counts one decision: a grant for the bucket that paid, a denial for
    /// the bucket that will have room first.
    #[inline]
    pub(crate) fn record(&self, result: &Result<Grant, Denied>) {
        match result {
            Ok(grant) => self.granted(grant.bucket()),
            Err(denied) => self.denied(denied),
        }
    }

    /// Counts a grant `bucket` paid (as [`record`](Self::record) does), for
    /// a caller that has not built the grant yet.
    #[inline]
    pub(crate) fn granted(&self, bucket: u32) {
        self.grants[bucket as usize].increment(1);
    }

    #[cold]
    fn denied(&self, denied: &Denied) {
        // Only a bucket that is short counts: not a request that can never
        // fit, and not a store that could not decide (the Redis limiter
        // counts those once, by source).
        if denied.reason() != crate::DenialReason::Limited {
            return;
        }
        self.denials[denied.bucket() as usize].increment(1);
        tracing::trace!(
            limiter = self.limiter.as_str(),
            bucket = denied.bucket(),
            retry_after_us = denied.retry_after().as_micros() as u64,
            "request denied"
        );
    }

    #[cfg_attr(not(feature = "wait"), allow(dead_code))] // the waits'
    /// A wait before retrying, at trace level.
    pub(crate) fn waiting(&self, denied: &Denied, nap: Duration) {
        tracing::trace!(
            limiter = self.limiter.as_str(),
            bucket = denied.bucket(),
            wait_ms = nap.as_millis() as u64,
            "waiting for a grant"
        );
    }

    pub(crate) fn available(&self, bucket: u32, tokens: u64) {
        self.available[bucket as usize].set(tokens as f64);
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("limiter", &self.limiter)
            .finish_non_exhaustive()
    }
}

/// Counters of one limiter under one name, one per value of one label,
/// registered at build time: the hook a store counts its own events
/// through (the Redis store, how each decision was made and its failed
/// requests), without this module knowing the store.
#[cfg_attr(not(feature = "redis"), allow(dead_code))] // the Redis store's
#[derive(Clone)]
pub(crate) struct Tally {
    counters: Box<[Counter]>,
}

#[cfg_attr(not(feature = "redis"), allow(dead_code))] // the Redis store's
impl Tally {
    /// The counter `name` of the limiter `limiter`, once per value of
    /// `label` (or once, unlabelled, when there are none).
    pub(crate) fn new(
        (name, description): (&'static str, &'static str),
        limiter: &str,
        label: &'static str,
        values: &[&'static str],
    ) -> Self {
        describe_counter!(name, Unit::Count, description);
        let counters = match values {
            [] => vec![counter!(name, "limiter" => limiter.to_owned())],
            values => (values.iter())
                .map(|&v| counter!(name, "limiter" => limiter.to_owned(), label => v))
                .collect(),
        };
        Tally {
            counters: counters.into(),
        }
    }

    /// Counts one event of the label's value `i` (the first, unlabelled).
    #[inline]
    pub(crate) fn count(&self, i: usize) {
        self.counters[i].increment(1);
    }
}

impl std::fmt::Debug for Tally {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tally").finish_non_exhaustive()
    }
}
