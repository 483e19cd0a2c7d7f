//! Learning the upstream's real limit: a controller that moves the global
//! rate between a floor and a ceiling from what the upstream answers.

use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::clock::{Clock, MonotonicClock};
use crate::quota::Quota;
use crate::store::Store;
use crate::{Limit, Limiter};

/// What the upstream's answer says about its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Signal {
    /// Throttled: a 429 or a 503.
    Throttled,
    /// Served without a throttle.
    Served,
    /// The upstream's own limit: `limit` requests per `window`
    /// (`RateLimit-Policy`, or `X-RateLimit-Limit` with a known window).
    Advertised {
        /// Requests allowed per window.
        limit: u32,
        /// The window.
        window: Duration,
    },
}

impl Signal {
    /// The signal of an HTTP status: 429 and 503 throttle, any other
    /// 1xx–3xx serves, and the rest (4xx, 5xx) say nothing of the limit.
    pub fn of_status(status: u16) -> Option<Signal> {
        match status {
            429 | 503 => Some(Signal::Throttled),
            100..=399 => Some(Signal::Served),
            _ => None,
        }
    }
}

/// Why an [`Adaptive`] controller was refused.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AdaptError {
    /// The floor is 0: a controller at it would stop every call for good.
    ZeroFloor,
    /// The floor is above the ceiling's count.
    FloorAboveCeiling {
        /// The floor asked for.
        floor: u32,
        /// The ceiling's count per period.
        ceiling: u32,
    },
    /// The decrease factor is not between 0 and 1 (exclusive).
    Decrease {
        /// The factor asked for.
        factor: f64,
    },
}

impl fmt::Display for AdaptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdaptError::ZeroFloor => {
                write!(f, "the floor is 0: use at least 1 request per period")
            }
            AdaptError::FloorAboveCeiling { floor, ceiling } => write!(
                f,
                "the floor ({floor}) is above the ceiling ({ceiling} per period): \
                 lower the floor or raise the ceiling"
            ),
            AdaptError::Decrease { factor } => write!(
                f,
                "a decrease factor of {factor} does not cut the rate: use a factor \
                 above 0 and below 1, such as 0.7"
            ),
        }
    }
}

impl std::error::Error for AdaptError {}

/// Moves a limiter's global rate between a floor and a ceiling from what
/// the upstream answers: a cut by a factor on a throttle (at most once per
/// cooldown), a step up after a quiet interval without one, and the
/// upstream's advertised limit taken as it is. The rate is the count per
/// the ceiling's period; the burst follows it in proportion (never below N).
///
/// Each change is a live quota change, so its budget bound is that of
/// [`Limit::set_quota`]; the split over N buckets, and with it the
/// isolation, stays as it is. Over Redis every process's controller moves
/// the one shared quota: a controller counts a change another process made,
/// once its limiter has seen it, as a change (its cooldown and quiet
/// interval start again), and one whose limiter has not seen it yet cuts
/// from the same quota to the same one; so a fleet throttled at once cuts
/// once, not once per process. (A change is timed from when the
/// controller sees it.)
///
/// ```
/// use std::time::Duration;
/// use shuffle_limiter::upstream::{Adaptive, Signal};
/// use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
///
/// let clock = ManualClock::new();
/// let limiter = ShardedLimiter::builder()
///     .quota(Quota::per_second(10))
///     .buckets(2)
///     .clock(clock.clone())
///     .build()?;
/// let adaptive = Adaptive::new(2, Quota::per_second(10))?.clock(clock.clone());
/// adaptive.observe_now(&limiter, Signal::Throttled);
/// assert_eq!(limiter.quota().count(), 7); // cut by 0.7
/// clock.advance(Duration::from_secs(5));
/// adaptive.observe_now(&limiter, Signal::Served);
/// assert_eq!(limiter.quota().count(), 8); // quiet for 5 s: one step up
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct Adaptive<C = MonotonicClock> {
    floor: u32,
    ceiling: Quota,
    decrease: f64,
    step: u32,
    quiet: Duration,
    cooldown: Duration,
    clock: C,
    state: Mutex<State>,
}

/// What the controller last saw: the quota in force and since when, and
/// the last throttle.
#[derive(Debug, Clone, Copy)]
struct State {
    seen: Option<Quota>,
    since: Option<u64>,
    throttled: Option<u64>,
}

impl Adaptive {
    /// A controller between `floor` requests and `ceiling` (its count per
    /// its period, and its burst at the top), cutting by 0.7 at most once a
    /// second and stepping up by a twentieth of the ceiling (at least 1)
    /// after 5 s without a throttle.
    ///
    /// # Errors
    /// [`AdaptError::ZeroFloor`], or [`AdaptError::FloorAboveCeiling`].
    pub fn new(floor: u32, ceiling: Quota) -> Result<Adaptive, AdaptError> {
        if floor == 0 {
            return Err(AdaptError::ZeroFloor);
        }
        if floor > ceiling.count() {
            return Err(AdaptError::FloorAboveCeiling {
                floor,
                ceiling: ceiling.count(),
            });
        }
        Ok(Adaptive {
            floor,
            ceiling,
            decrease: 0.7,
            step: (ceiling.count() / 20).max(1),
            quiet: Duration::from_secs(5),
            cooldown: Duration::from_secs(1),
            clock: MonotonicClock::default(),
            state: Mutex::new(State {
                seen: None,
                since: None,
                throttled: None,
            }),
        })
    }
}

impl<C: Clock> Adaptive<C> {
    /// The clock the controller times its quiet interval and cooldown by
    /// (the limiter's, in tests a `ManualClock`).
    pub fn clock<D: Clock>(self, clock: D) -> Adaptive<D> {
        // Times of another clock mean nothing on this one: forgotten.
        let state = State {
            since: None,
            throttled: None,
            ..self
                .state
                .into_inner()
                .unwrap_or_else(PoisonError::into_inner)
        };
        Adaptive {
            floor: self.floor,
            ceiling: self.ceiling,
            decrease: self.decrease,
            step: self.step,
            quiet: self.quiet,
            cooldown: self.cooldown,
            clock,
            state: Mutex::new(state),
        }
    }

    /// The factor a throttle cuts the rate by (0.7 by default).
    ///
    /// # Errors
    /// [`AdaptError::Decrease`] unless `0 < factor < 1`.
    pub fn decrease(mut self, factor: f64) -> Result<Self, AdaptError> {
        if !(factor > 0.0 && factor < 1.0) {
            return Err(AdaptError::Decrease { factor });
        }
        self.decrease = factor;
        Ok(self)
    }

    /// The requests per period a quiet interval adds (at least 1).
    pub fn step(mut self, step: u32) -> Self {
        self.step = step.max(1);
        self
    }

    /// How long without a throttle (or a change) before a step up.
    pub fn quiet(mut self, quiet: Duration) -> Self {
        self.quiet = quiet;
        self
    }

    /// The least time between two cuts, here or in another process.
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// The quota to move to from `current` (over `buckets` buckets) on
    /// `signal`, now; `None` to stay. Records the decision as made: set the
    /// quota returned.
    pub fn next(&self, current: Quota, buckets: u32, signal: Signal) -> Option<Quota> {
        let now = self.clock.now_nanos();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.seen.is_some_and(|seen| seen != current) {
            // Changed since: by hand, or by another process; in every
            // case a change just happened.
            state.since = Some(now);
        }
        state.seen = Some(current);
        let count = self.rate_of(current);
        // Whether `wait` has passed since `at` (always, when never).
        let after = |at: Option<u64>, wait: Duration| {
            at.is_none_or(|at| {
                now.saturating_sub(at) >= u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX)
            })
        };
        let wanted = match signal {
            Signal::Throttled => {
                state.throttled = Some(now);
                if !after(state.since, self.cooldown) {
                    return None;
                }
                (f64::from(count) * self.decrease) as u32
            }
            Signal::Served => {
                if !after(state.since.max(state.throttled), self.quiet) {
                    return None;
                }
                count.saturating_add(self.step)
            }
            Signal::Advertised { limit, window } if !window.is_zero() => {
                let per = u128::from(limit) * self.ceiling.period().as_nanos() / window.as_nanos();
                u32::try_from(per).unwrap_or(u32::MAX)
            }
            Signal::Advertised { .. } => return None,
        };
        let wanted = wanted.clamp(self.floor, self.ceiling.count());
        let top = self.ceiling.burst();
        let burst = u64::from(top) * u64::from(wanted) / u64::from(self.ceiling.count());
        let burst = u32::try_from(burst).unwrap_or(top).max(buckets).max(1);
        let quota = Quota::new(wanted, self.ceiling.period()).with_burst(burst);
        if quota == current {
            return None;
        }
        *state = State {
            seen: Some(quota),
            since: Some(now),
            ..*state
        };
        Some(quota)
    }

    /// `current`'s count per the ceiling's period, rounded down.
    fn rate_of(&self, current: Quota) -> u32 {
        let per = u128::from(current.count()) * self.ceiling.period().as_nanos()
            / current.period().as_nanos().max(1);
        u32::try_from(per).unwrap_or(u32::MAX)
    }

    /// Moves `limiter`'s quota on `signal` ([`next`](Self::next), then
    /// [`Limit::set_quota`]): the quota set, or `None` when it stays.
    ///
    /// # Errors
    /// What the store fails with: over Redis, the errors of a round trip
    /// (the quota then stays, and the next signal decides again).
    pub async fn observe<S: Store>(
        &self,
        limiter: &Limiter<S>,
        signal: Signal,
    ) -> Result<Option<Quota>, S::Error> {
        let Some(quota) = self.next(limiter.quota(), limiter.buckets(), signal) else {
            return Ok(None);
        };
        limiter.set_quota(quota).await?;
        Ok(Some(quota))
    }

    /// [`observe`](Self::observe) for the in-process limiter, at once.
    pub fn observe_now<D: Clock>(
        &self,
        limiter: &crate::ShardedLimiter<D>,
        signal: Signal,
    ) -> Option<Quota> {
        let quota = self.next(limiter.quota(), limiter.buckets(), signal)?;
        // The controller keeps within the ceiling's period and N's burst:
        // a refusal here leaves the quota as it is.
        limiter.set_quota(quota).ok().map(|()| quota)
    }
}
