//! A denied request: when to try again, and why.

use std::fmt;
use std::time::Duration;

/// A denied request, and when to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denied {
    pub(crate) retry_after: Duration,
    pub(crate) bucket: u32,
    pub(crate) reason: DenialReason,
    /// For [`DenialReason::NeverFits`]: whether `most` is one bucket's
    /// burst, in a store whose buckets cannot pay one request together (a
    /// Redis limiter's spread layout), which the message says.
    pub(crate) alone: bool,
}

/// Why a request was denied: the tenant's buckets are short, or the store
/// could not decide and its failure policy denied.
///
/// A service answering its clients tells the two apart: `429 Too Many
/// Requests` is the client's to fix by slowing down, an unavailable store is
/// the service's own fault (the tower layer answers `503 Service
/// Unavailable` for it by default).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DenialReason {
    /// The tenant's buckets hold too little; [`Denied::retry_after`] is
    /// when they will hold enough.
    Limited,
    /// The store could not decide (Redis unreachable, too slow, or holding
    /// a value that is not the limiter's) and the failure policy denied;
    /// [`Denied::retry_after`] is when the store is next tried.
    StoreUnavailable,
    /// The request asks for more tokens than the tenant's buckets can ever
    /// hold together: no wait grants it. [`Denied::retry_after`] is
    /// [`Duration::MAX`]; split the request, or raise the burst. Found
    /// without drawing (and, over Redis, without asking Redis).
    NeverFits {
        /// The tokens asked for.
        asked: u32,
        /// The most one request of this tenant (or user) can ever be
        /// granted: the sum of its own buckets' bursts; over Redis in the
        /// spread layout, whose buckets cannot pay one request together,
        /// the largest of them.
        most: u32,
    },
}

impl Denied {
    /// How long until one of the tenant's buckets could grant the same
    /// request; never zero, and [`Duration::MAX`] for a request that never
    /// fits ([`DenialReason::NeverFits`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(2))
    ///     .buckets(2)
    ///     .per_tenant(1)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// limiter.check("t").unwrap(); // its one bucket: 1 token, 1 per second
    /// let denied = limiter.check("t").unwrap_err();
    /// assert_eq!(denied.retry_after(), Duration::from_secs(1));
    /// clock.advance(denied.retry_after());
    /// assert!(limiter.check("t").is_ok());
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub fn retry_after(&self) -> Duration {
        self.retry_after
    }

    /// The bucket that will have room first.
    pub fn bucket(&self) -> u32 {
        self.bucket
    }

    /// Why the request was denied: [`DenialReason::Limited`] when the tenant's
    /// buckets are short, [`DenialReason::StoreUnavailable`] when the failure
    /// policy denied because the store could not decide.
    pub fn reason(&self) -> DenialReason {
        self.reason
    }

    /// A denial by the tenant's buckets.
    /// A request of `asked` tokens where at most `most` can ever fit, as
    /// though denied by `bucket`.
    pub(crate) fn never_fits(asked: u32, most: u32, bucket: u32, alone: bool) -> Denied {
        Denied {
            retry_after: Duration::MAX,
            bucket,
            reason: DenialReason::NeverFits { asked, most },
            alone,
        }
    }

    pub(crate) fn limited(retry_after: Duration, bucket: u32) -> Denied {
        Denied {
            retry_after,
            bucket,
            reason: DenialReason::Limited,
            alone: false,
        }
    }
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.reason {
            DenialReason::Limited => write!(f, "rate limited: retry in {:?}", self.retry_after),
            DenialReason::StoreUnavailable => write!(
                f,
                "the limiter's store could not decide and its failure policy denied: retry in {:?}",
                self.retry_after
            ),
            DenialReason::NeverFits { asked, most } if self.alone => write!(
                f,
                "a request of {asked} tokens can never be granted: in Layout::Spread one \
                 bucket pays each request, and this tenant's largest holds {most} when full; \
                 split the request, raise the burst, or use Layout::OneSlot, whose buckets \
                 can pay together"
            ),
            DenialReason::NeverFits { asked, most } => write!(
                f,
                "a request of {asked} tokens can never be granted: this tenant's buckets \
                 grant at most {most} at once; split the request or raise the burst"
            ),
        }
    }
}

impl std::error::Error for Denied {}
