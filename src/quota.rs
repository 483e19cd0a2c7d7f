//! The global budget: how many requests per period, and how many at once.

use std::fmt;
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
/// let q = Quota::with_period(100, Duration::from_secs(10)).with_burst(10);
/// assert_eq!(q.burst(), 10);
///
/// // A quota prints its period in the largest unit that divides it.
/// assert_eq!(Quota::per_hour(3600).to_string(), "3600/h");
/// assert_eq!(q.to_string(), "100/10s, burst 10");
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

    /// `count` requests per `period`, any period: `with_period(100,
    /// Duration::from_secs(10))` is 100 requests per 10 s, `with_period(1,
    /// Duration::from_secs(86_400))` one a day. The burst defaults to
    /// `count`. The same as [`new`](Self::new), under the name a reader
    /// looks for beside [`per_second`](Self::per_second).
    ///
    /// A fractional rate is a whole count over a longer period: half a
    /// request per second is `with_period(1, Duration::from_secs(2))`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shuffle_limiter::{Quota, ShardedLimiter};
    ///
    /// let quota = Quota::with_period(250, Duration::from_millis(500));
    /// assert_eq!(quota.to_string(), "250/500ms");
    /// let limiter = ShardedLimiter::builder().quota(quota).build()?;
    /// assert_eq!(limiter.buckets(), 8);
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub const fn with_period(count: u32, period: Duration) -> Self {
        Self::new(count, period)
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

impl fmt::Display for Quota {
    /// `COUNT/PERIOD`, with the period in the largest unit (d, h, m, s, ms,
    /// us, ns) that divides it, as a config's rate is written: `3600/h`,
    /// `100/10s`; then `, burst B` when the burst is not the count.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.count, Per(self.period))?;
        if self.burst != self.count {
            write!(f, ", burst {}", self.burst)?;
        }
        Ok(())
    }
}

/// A period as the part of a rate after its `/`: `h`, `10s`, `500ms`, in
/// the largest unit that divides it.
pub(crate) struct Per(pub(crate) Duration);

impl fmt::Display for Per {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u128); 7] = [
            ("d", 86_400_000_000_000),
            ("h", 3_600_000_000_000),
            ("m", 60_000_000_000),
            ("s", 1_000_000_000),
            ("ms", 1_000_000),
            ("us", 1_000),
            ("ns", 1),
        ];
        let nanos = self.0.as_nanos();
        if nanos == 0 {
            return f.write_str("0s");
        }
        let (unit, size) = UNITS
            .into_iter()
            .find(|(_, size)| nanos.is_multiple_of(*size))
            .unwrap_or(("ns", 1));
        match nanos / size {
            1 => f.write_str(unit),
            span => write!(f, "{span}{unit}"),
        }
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

    #[test]
    fn display_uses_the_largest_unit_that_divides_the_period() {
        let cases = [
            (Quota::per_hour(3600), "3600/h"),
            (Quota::per_minute(3), "3/m"),
            (Quota::per_second(5).with_burst(1), "5/s, burst 1"),
            (Quota::with_period(1, Duration::from_secs(86_400)), "1/d"),
            (
                Quota::with_period(1, Duration::from_secs(2 * 86_400)),
                "1/2d",
            ),
            (Quota::with_period(100, Duration::from_secs(10)), "100/10s"),
            (
                Quota::with_period(250, Duration::from_millis(500)),
                "250/500ms",
            ),
            (Quota::with_period(1, Duration::from_secs(90)), "1/90s"),
            (
                Quota::with_period(1, Duration::from_nanos(1_500)),
                "1/1500ns",
            ),
            (Quota::with_period(1, Duration::ZERO), "1/0s"),
        ];
        for (quota, shown) in cases {
            assert_eq!(quota.to_string(), shown);
        }
    }
}
