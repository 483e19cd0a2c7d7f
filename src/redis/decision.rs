//! How a Redis limiter's decision was made, and its counts of them.

use std::sync::Arc;

use super::error::Error;
use crate::{Denied, Grant};

/// How a decision of a [`RedisLimiter`](super::RedisLimiter) was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// The script decided, on the server's clock.
    Redis,
    /// A denial from Redis, remembered until its retry time.
    CachedDenial,
    /// Redis failed, missed the deadline, or failed a moment ago, or the
    /// shard's keys hold something else: the
    /// [`FailurePolicy`](super::FailurePolicy) decided.
    Policy,
    /// The limiter itself, without asking Redis: a request that can never
    /// fit ([`DenialReason::NeverFits`](crate::DenialReason::NeverFits)).
    Limiter,
}

/// A decision of a [`RedisLimiter`](super::RedisLimiter), and how it was made.
#[derive(Debug)]
pub struct Decision {
    pub(super) result: Result<Grant, Denied>,
    pub(super) source: Source,
    pub(super) error: Option<Arc<Error>>,
}

impl Decision {
    /// The grant or the denial.
    ///
    /// # Errors
    /// [`Denied`] when the request was denied.
    pub fn result(&self) -> Result<&Grant, Denied> {
        self.result.as_ref().map_err(|denied| *denied)
    }

    /// The grant or the denial, taking the grant (to
    /// [`refund`](crate::ShardedLimiter::refund) it, for one).
    ///
    /// # Errors
    /// [`Denied`] when the request was denied.
    pub fn into_result(self) -> Result<Grant, Denied> {
        self.result
    }

    /// Whether the request was granted.
    pub fn is_granted(&self) -> bool {
        self.result.is_ok()
    }

    /// Who decided.
    pub fn source(&self) -> Source {
        self.source
    }

    /// Why the policy decided: the error of this request, or of the one that
    /// made the limiter leave Redis alone for a while. `None` when Redis
    /// decided.
    pub fn error(&self) -> Option<&Error> {
        self.error.as_deref()
    }
}

/// Counts of a [`RedisLimiter`](super::RedisLimiter)'s decisions since it was built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RedisStats {
    pub(super) from_redis: u64,
    pub(super) from_cache: u64,
    pub(super) from_policy: u64,
    pub(super) errors: u64,
}

impl RedisStats {
    /// Decisions made by the script in Redis.
    pub fn from_redis(&self) -> u64 {
        self.from_redis
    }

    /// Denials answered from the denial cache.
    pub fn from_cache(&self) -> u64 {
        self.from_cache
    }

    /// Decisions made by the failure policy.
    pub fn from_policy(&self) -> u64 {
        self.from_policy
    }

    /// Requests to Redis that failed or missed the deadline.
    pub fn errors(&self) -> u64 {
        self.errors
    }
}
