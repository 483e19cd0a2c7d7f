//! Without the `metrics` feature: the same hooks, doing nothing, so that the
//! decision code never needs a `#[cfg]`.

use std::time::Duration;

use crate::quota::Quota;
use crate::{Denied, Grant};

/// No handles: every hook is empty and compiles away.
#[derive(Debug, Clone)]
pub(crate) struct Metrics;

impl Metrics {
    pub(crate) fn new(_name: &str, _quota: Quota, _buckets: (u32, u32), _per_tenant: u32) -> Self {
        Metrics
    }

    #[inline(always)]
    pub(crate) fn record(&self, _result: &Result<Grant, Denied>) {}

    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // the waits'
    #[inline(always)]
    pub(crate) fn waiting(&self, _denied: &Denied, _nap: Duration) {}

    #[inline(always)]
    pub(crate) fn available(&self, _bucket: u32, _tokens: u64) {}
}

/// Nothing to say a limiter's isolation is weak through.
#[inline(always)]
pub(crate) fn weak_isolation(_name: &str, _isolation: &crate::Isolation) {}

/// No handles for a Redis limiter either.
#[cfg(feature = "redis")]
#[derive(Debug, Clone)]
pub(crate) struct RedisMetrics;

#[cfg(feature = "redis")]
impl RedisMetrics {
    pub(crate) fn new(_name: &str) -> Self {
        RedisMetrics
    }

    #[inline(always)]
    pub(crate) fn decided(&self, _source: crate::redis::Source) {}

    #[inline(always)]
    pub(crate) fn failed(&self) {}
}
