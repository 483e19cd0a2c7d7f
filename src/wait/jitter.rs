//! [`Jitter`]: the random extra delay of each wake-up.

use std::time::Duration;

/// A random extra delay added to each wake-up of a waiting task, uniform
/// between a minimum (zero with [`up_to`](Jitter::up_to)) and a maximum, so
/// that tasks denied together do not all retry at the same instant.
///
/// Jitter only ever delays: a task never wakes before its `retry_after`. A
/// bounded wait never sleeps past its deadline because of jitter; it wakes at
/// the deadline instead.
///
/// ```
/// use std::time::Duration;
/// use shuffle_limiter::Jitter;
///
/// let jitter = Jitter::up_to(Duration::from_millis(20));
/// for _ in 0..100 {
///     assert!(jitter.sample() <= Duration::from_millis(20));
/// }
/// assert_eq!(Jitter::NONE.sample(), Duration::ZERO);
///
/// let jitter = Jitter::new(Duration::from_millis(5), Duration::from_millis(20));
/// for _ in 0..100 {
///     let extra = jitter.sample();
///     assert!(Duration::from_millis(5) <= extra && extra <= Duration::from_millis(20));
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Jitter {
    min: Duration,
    max: Duration,
}

impl Jitter {
    /// No jitter: wake exactly when the grant is due.
    pub const NONE: Jitter = Jitter {
        min: Duration::ZERO,
        max: Duration::ZERO,
    };

    /// An extra delay drawn uniformly from `0..=max` at each wake-up.
    pub const fn up_to(max: Duration) -> Self {
        Jitter {
            min: Duration::ZERO,
            max,
        }
    }

    /// An extra delay drawn uniformly from `min..=max` at each wake-up: at
    /// least `min` after every denial, so that a task backs off even when
    /// its token is due at once. The two may come in either order; the
    /// smaller is the minimum.
    pub const fn new(min: Duration, max: Duration) -> Self {
        if min.as_nanos() <= max.as_nanos() {
            Jitter { min, max }
        } else {
            Jitter { min: max, max: min }
        }
    }

    /// The smallest extra delay.
    pub const fn min(&self) -> Duration {
        self.min
    }

    /// The largest extra delay.
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// One extra delay, uniform in `min..=max` (at nanosecond resolution).
    pub fn sample(&self) -> Duration {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let width = nanos(self.max) - nanos(self.min);
        if width == 0 {
            return self.min;
        }
        let extra = crate::random::below(width.saturating_add(1));
        self.min.saturating_add(Duration::from_nanos(extra))
    }
}
