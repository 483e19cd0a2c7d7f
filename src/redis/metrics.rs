//! What a Redis limiter counts beyond its grants and denials: how each
//! decision was made, and the requests to Redis that failed, through the
//! metrics module's [`Tally`] (nothing without the `metrics` feature).

use super::decision::Source;
use crate::metrics::Tally;

/// The two counters' names and descriptions (the `metrics` module
/// publishes the names, as `REDIS_DECISIONS` and `REDIS_ERRORS`).
pub(crate) const DECISIONS: (&str, &str) = (
    "shuffle_limiter_redis_decisions_total",
    "Decisions of a Redis limiter, by who made them",
);
pub(crate) const ERRORS: (&str, &str) = (
    "shuffle_limiter_redis_errors_total",
    "Requests to Redis that failed or missed the deadline",
);

/// A Redis limiter's counters, registered at build time beside the
/// limiter's own.
#[derive(Debug, Clone)]
pub(super) struct RedisMetrics {
    /// By source: Redis, a cached denial, the policy.
    decisions: Tally,
    errors: Tally,
}

impl RedisMetrics {
    /// Registers the four series of the Redis limiter `name`.
    pub(super) fn new(name: &str) -> Self {
        RedisMetrics {
            decisions: Tally::new(
                DECISIONS,
                name,
                "source",
                &["redis", "cached_denial", "policy"],
            ),
            errors: Tally::new(ERRORS, name, "", &[]),
        }
    }

    /// Counts one decision made by `source`.
    #[inline]
    pub(super) fn decided(&self, source: Source) {
        let i = match source {
            Source::Redis => 0,
            Source::CachedDenial => 1,
            Source::Policy => 2,
            // Not a decision of Redis's, nor of the policy standing in for it.
            Source::Limiter => return,
        };
        self.decisions.count(i);
    }

    /// Counts one request to Redis that failed or missed the deadline.
    pub(super) fn failed(&self) {
        self.errors.count(0);
    }
}
