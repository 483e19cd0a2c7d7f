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

    #[inline(always)]
    pub(crate) fn granted(&self, _bucket: u32) {}

    #[cfg_attr(not(feature = "wait"), allow(dead_code))] // the waits'
    #[inline(always)]
    pub(crate) fn waiting(&self, _denied: &Denied, _nap: Duration) {}

    #[inline(always)]
    pub(crate) fn available(&self, _bucket: u32, _tokens: u64) {}
}

/// Nothing to say a limiter's isolation is weak through.
#[inline(always)]
pub(crate) fn weak_isolation(_name: &str, _isolation: &crate::Isolation) {}

/// No counters for a store's own events either.
#[cfg_attr(not(feature = "redis"), allow(dead_code))] // the Redis store's
#[derive(Debug, Clone)]
pub(crate) struct Tally;

#[cfg_attr(not(feature = "redis"), allow(dead_code))] // the Redis store's
impl Tally {
    pub(crate) fn new(
        _name: (&'static str, &'static str),
        _limiter: &str,
        _label: &'static str,
        _values: &[&'static str],
    ) -> Self {
        Tally
    }

    #[inline(always)]
    pub(crate) fn count(&self, _i: usize) {}
}
