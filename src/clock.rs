//! Time sources: the fast default clock, a manual clock for tests, and the
//! [`Clock`] trait to bring your own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A source of monotonic time in nanoseconds since an arbitrary origin.
///
/// The limiter reads the clock once per decision. A reading that goes
/// backwards is safe for a decision: it can only cause a denial, never an
/// extra grant. A live change of N made at such a reading starts the
/// buckets it adds no fuller than the fullest that stays, so no burst comes
/// of it; one that keeps a bucket counts that bucket's room at the reading
/// it is given, so a change that cuts a bucket's burst at a reading behind
/// the last decision's may leave it up to that lag's refill (at its new
/// pace) more than a change at the latest reading would.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use shuffle_limiter::Clock;
///
/// /// A clock that ticks one millisecond each time it is read.
/// #[derive(Default)]
/// struct Ticking(AtomicU64);
///
/// impl Clock for Ticking {
///     fn now_nanos(&self) -> u64 {
///         self.0.fetch_add(1_000_000, Ordering::Relaxed)
///     }
/// }
/// let c = Ticking::default();
/// assert_eq!(c.now_nanos(), 0);
/// assert_eq!(c.now_nanos(), 1_000_000);
/// ```
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's origin.
    fn now_nanos(&self) -> u64;
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now_nanos(&self) -> u64 {
        (**self).now_nanos()
    }
}

/// The default clock: the CPU's monotonic counter read through `quanta`,
/// scaled to nanoseconds since the clock was created.
#[derive(Debug, Clone)]
pub struct MonotonicClock {
    clock: quanta::Clock,
    origin: u64,
}

impl MonotonicClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        MonotonicClock { clock, origin }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.clock.delta_as_nanos(self.origin, self.clock.raw())
    }
}

/// A clock that moves only when told to: for tests and simulations.
///
/// Clones share the same time, so a test keeps one clone and hands the other
/// to the limiter.
///
/// ```
/// use std::time::Duration;
/// use shuffle_limiter::{Clock, ManualClock};
///
/// let clock = ManualClock::new();
/// let shared = clock.clone();
/// clock.advance(Duration::from_millis(10));
/// assert_eq!(shared.now_nanos(), 10_000_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock reading zero.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock forward by `by` (saturating at `u64::MAX` nanoseconds).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // fetch_update never fails with a closure that always returns Some.
        let _ = self
            .nanos
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                Some(t.saturating_add(by))
            });
    }

    /// Sets the clock to `nanos` since its origin; may move it backwards.
    pub fn set_nanos(&self, nanos: u64) {
        self.nanos.store(nanos, Ordering::Relaxed);
    }

    /// The time since the origin.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.now_nanos())
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        self.nanos.load(Ordering::Relaxed)
    }
}
