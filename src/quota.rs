//! The global budget: how many requests per period, and how many at once.

use std::time::Duration;

/// The global budget of a limiter: `count` requests per `period` (the rate R),
/// of which up to `burst` may arrive at once (the burst B).
///
/// A quota is only a description; [`Builder::build`](crate::Builder::build)
/// validates it and splits it over the buckets, so a quota that can never work
/// (a zero count, say) is reported there as a [`ConfigError`](crate::ConfigError).
///
/// ```
/// use std::time::Duration;
/// use shuffle_limiter::Quota;
///
/// let q = Quota::per_second(5);
/// assert_eq!((q.count(), q.period(), q.burst()), (5, Duration::from_secs(1), 5));
///
/// let q = Quota::new(90, Duration::from_secs(60)).with_burst(10);
/// assert_eq!(q.burst(), 10);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    count: u32,
    period: Duration,
    burst: u32,
}

impl Quota {
    /// `count` requests per `period`; the burst defaults to `count`.
    pub const fn new(count: u32, period: Duration) -> Self {
        Quota {
            count,
            period,
            burst: count,
        }
    }

    /// `count` requests per second; the burst defaults to `count`.
    pub const fn per_second(count: u32) -> Self {
        Self::new(count, Duration::from_secs(1))
    }

    /// `count` requests per minute; the burst defaults to `count`.
    pub const fn per_minute(count: u32) -> Self {
        Self::new(count, Duration::from_secs(60))
    }

    /// `count` requests per hour; the burst defaults to `count`.
    pub const fn per_hour(count: u32) -> Self {
        Self::new(count, Duration::from_secs(3600))
    }

    /// The same rate with a different burst: how many requests may be granted
    /// at once, over all buckets together, after a quiet spell.
    pub const fn with_burst(self, burst: u32) -> Self {
        Quota { burst, ..self }
    }

    /// Requests per period.
    pub const fn count(&self) -> u32 {
        self.count
    }

    /// The period over which `count` requests are allowed.
    pub const fn period(&self) -> Duration {
        self.period
    }

    /// Requests that may be granted at once after a quiet spell.
    pub const fn burst(&self) -> u32 {
        self.burst
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_constructor_sets_its_period_and_a_burst_of_its_count() {
        for (quota, secs) in [
            (Quota::per_second(7), 1),
            (Quota::per_minute(7), 60),
            (Quota::per_hour(7), 3_600),
            (Quota::new(7, Duration::from_secs(5)), 5),
        ] {
            let period = Duration::from_secs(secs);
            assert_eq!(
                (quota.count(), quota.period(), quota.burst()),
                (7, period, 7)
            );
            let burst = quota.with_burst(3);
            assert_eq!(
                (burst.count(), burst.period(), burst.burst()),
                (7, period, 3)
            );
        }
    }
}
