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
/// the upstream answers, as TCP's CUBIC moves a window:
///
/// - a **throttle** cuts the rate by a factor (0.7), at most once per
///   cooldown, and remembers the rate it was throttled at (the peak);
/// - while **served**, the rate climbs back along a cubic curve: fast at
///   first, flattening as it nears the peak (reached after
///   [`recover`](Self::recover), 6 s by default), then probing past it,
///   slowly at first and faster the longer no throttle comes, up to the
///   ceiling. Before any throttle it steps up by a fixed step after each
///   quiet interval instead;
/// - an **advertised** limit (`RateLimit-Policy`) is taken, less a
///   headroom (run at 0.95 of it by default), and while it keeps being
///   advertised (each served call since the last advertised it, or one
///   came within a quiet interval) no probe goes past it and a
///   throttle cuts nothing: below a known limit, a throttle is a burst the
///   upstream did not take, which the hold-off waits out.
///
/// The rate is the count per the ceiling's period (so a ceiling per minute
/// moves in steps of one a minute); the burst follows it in proportion
/// (never below N).
///
/// What a controller that only hears throttles can do has a bound: it
/// learns of a raised limit only by probing past the old one, and each
/// probe past a limit that has not moved costs at least one throttled
/// call. An upstream that advertises its limit is followed at once, with
/// no throttle at all.
///
/// Each change is a live quota change, so its budget bound is that of
/// [`Limit::set_quota`]; the split over N buckets, and with it the
/// isolation, stays as it is. Over Redis every process's controller moves
/// the one shared quota: a controller counts a change another process made,
/// once its limiter has seen it, as a change (its cooldown starts again;
/// a cut also becomes its peak), and one whose limiter has not seen it
/// yet cuts from the same quota to the same one; so a fleet throttled at
/// once cuts once, not once per process. A served call only ever raises
/// the rate, so processes climbing together take the highest of their
/// curves. (A change is timed from when the controller sees it.)
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
/// clock.advance(Duration::from_secs(2));
/// adaptive.observe_now(&limiter, Signal::Served);
/// assert_eq!(limiter.quota().count(), 9); // most of the way back in 2 s
/// clock.advance(Duration::from_secs(4));
/// adaptive.observe_now(&limiter, Signal::Served);
/// assert_eq!(limiter.quota().count(), 10); // at the peak after 6 s
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
    recover: Duration,
    /// The share of an advertised limit run at, in thousandths.
    headroom: u32,
    clock: C,
    state: Mutex<State>,
}

/// The part of [`State`] a decision replaces.
#[derive(Debug, Clone, Copy)]
struct Undo {
    seen: Option<Quota>,
    since: Option<u64>,
    cut: Option<(u64, f64)>,
}

/// What the controller last saw: the quota in force and since when, the
/// last throttle, the last cut and the rate it cut from, and the last
/// advertised limit.
#[derive(Debug, Clone, Copy, Default)]
struct State {
    seen: Option<Quota>,
    since: Option<u64>,
    throttled: Option<u64>,
    /// When the rate was last cut, and the rate (per the ceiling's
    /// period) it was cut from: where the cubic curve starts.
    cut: Option<(u64, f64)>,
    advertised: Option<u64>,
    /// The last served call.
    served: Option<u64>,
}

impl Adaptive {
    /// A controller between `floor` requests and `ceiling` (its count per
    /// its period, and its burst at the top), cutting by 0.7 at most once a
    /// second, back at the rate it cut from 6 s after a cut; before any
    /// throttle, stepping up by a twentieth of the ceiling (at least 1)
    /// after 5 s without one.
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
            recover: Duration::from_secs(6),
            headroom: 950,
            clock: MonotonicClock::default(),
            state: Mutex::new(State::default()),
        })
    }
}

/// `duration` in nanoseconds, saturating.
fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl<C: Clock> Adaptive<C> {
    /// The clock the controller times its quiet interval and cooldown by
    /// (the limiter's, in tests a `ManualClock`).
    pub fn clock<D: Clock>(self, clock: D) -> Adaptive<D> {
        // Times of another clock mean nothing on this one: forgotten.
        let seen = (self.state.into_inner())
            .unwrap_or_else(PoisonError::into_inner)
            .seen;
        let state = State {
            seen,
            ..State::default()
        };
        Adaptive {
            floor: self.floor,
            ceiling: self.ceiling,
            decrease: self.decrease,
            step: self.step,
            quiet: self.quiet,
            cooldown: self.cooldown,
            recover: self.recover,
            headroom: self.headroom,
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

    /// The requests per period a quiet interval adds (at least 1), before
    /// the first throttle.
    pub fn step(mut self, step: u32) -> Self {
        self.step = step.max(1);
        self
    }

    /// How long without a throttle (or a change) before a step up, before
    /// the first throttle; and how long an advertised limit holds the
    /// rate from probing past it.
    pub fn quiet(mut self, quiet: Duration) -> Self {
        self.quiet = quiet;
        self
    }

    /// The least time between two cuts, here or in another process.
    pub fn cooldown(mut self, cooldown: Duration) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// The share of an advertised limit to run at (0.95 by default; cut to
    /// 0.5–1, thousandths kept): at the limit exactly, calls that bunch
    /// are throttled whenever the upstream's own bucket runs dry.
    pub fn headroom(mut self, share: f64) -> Self {
        self.headroom = (share.clamp(0.5, 1.0) * 1000.0) as u32;
        self
    }

    /// How long after a cut the rate is back at the rate it was cut from
    /// (6 s by default; at least 1 ms): shorter finds a raised limit
    /// sooner, and probes a limit that stays put more often, each probe
    /// costing a throttled call or more.
    pub fn recover(mut self, recover: Duration) -> Self {
        self.recover = recover.max(Duration::from_millis(1));
        self
    }

    /// The quota to move to from `current` (over `buckets` buckets) on
    /// `signal`, now; `None` to stay. Records the decision as made: set the
    /// quota returned.
    pub fn next(&self, current: Quota, buckets: u32, signal: Signal) -> Option<Quota> {
        self.decide(current, buckets, signal)
            .map(|(quota, _)| quota)
    }

    /// [`next`](Self::next), with what the decision replaced, for
    /// [`undo`](Self::undo).
    fn decide(&self, current: Quota, buckets: u32, signal: Signal) -> Option<(Quota, Undo)> {
        let now = self.clock.now_nanos();
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(seen) = state.seen.filter(|&seen| seen != current) {
            // Changed since: by hand, or by another process; in every
            // case a change just happened, and a cut starts a curve.
            state.since = Some(now);
            let rate = self.rate_of(current);
            if rate < self.rate_of(seen) {
                // The curve through the rate cut to: the same as the
                // cutting process's, whose peak was `seen`.
                state.cut = Some((now, f64::from(rate) / self.decrease));
            }
        }
        state.seen = Some(current);
        // What was heard is kept whatever the store does with the decision
        // (the timestamps below); what was decided is undone if it fails.
        let undo = Undo {
            seen: state.seen,
            since: state.since,
            cut: state.cut,
        };
        let count = self.rate_of(current);
        // Whether `wait` has passed since `at` (always, when never).
        let after = |at: Option<u64>, wait: Duration| {
            at.is_none_or(|at| now.saturating_sub(at) >= nanos(wait))
        };
        // An advertised limit holds while the upstream keeps advertising
        // it: within a quiet interval, or since the last served call
        // (however long ago that was).
        let fresh = state.advertised.is_some_and(|at| {
            !after(Some(at), self.quiet) || state.served.is_none_or(|served| at >= served)
        });
        if signal == Signal::Served {
            state.served = Some(now);
        }
        let wanted = match signal {
            Signal::Throttled => {
                state.throttled = Some(now);
                // Below a limit the upstream advertises, a throttle is a
                // burst it did not take, which the hold-off waits out: the
                // rate is known.
                if fresh || !after(state.cut.map(|(at, _)| at), self.cooldown) {
                    return None;
                }
                state.cut = Some((now, f64::from(count)));
                (f64::from(count) * self.decrease) as u32
            }
            Signal::Served if fresh => return None,
            Signal::Served => match state.cut {
                Some((at, peak)) => {
                    let wanted = self.cubic(peak, now.saturating_sub(at));
                    if wanted <= count {
                        // Served only ever raises: a process below
                        // another's curve keeps the higher rate.
                        return None;
                    }
                    wanted
                }
                None => {
                    if !after(state.since.max(state.throttled), self.quiet) {
                        return None;
                    }
                    count.saturating_add(self.step)
                }
            },
            Signal::Advertised { limit, window } if !window.is_zero() => {
                let per = u128::from(limit) * self.ceiling.period().as_nanos() / window.as_nanos();
                // Thousandths: a rate at the limit exactly is throttled
                // whenever calls bunch; the headroom keeps the upstream's
                // own bucket from running dry.
                let per = per * u128::from(self.headroom) / 1000;
                state.advertised = Some(now);
                let per = u32::try_from(per).unwrap_or(u32::MAX);
                // Should it stop advertising, probing goes on from here.
                let recovered = now.saturating_sub(nanos(self.recover));
                state.cut = Some((
                    recovered,
                    f64::from(per.clamp(self.floor, self.ceiling.count())),
                ));
                per
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
        Some((quota, undo))
    }

    /// Puts back what deciding `made` replaced, when the store did not set
    /// it, unless another decision came since: a cut that failed must not
    /// count for the cooldown, nor start a curve.
    fn undo(&self, made: Quota, undo: Undo) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.seen == Some(made) {
            state.seen = undo.seen;
            state.since = undo.since;
            state.cut = undo.cut;
        }
    }

    /// The rate `elapsed` nanoseconds after a cut from `peak`, on CUBIC's
    /// curve `peak · (1 + c·(t − K)³)`: `decrease · peak` at the cut, the
    /// peak at `K` (the recovery time), and past it beyond. Rounded down
    /// and within `u32`; the caller clamps it to the bounds.
    fn cubic(&self, peak: f64, elapsed: u64) -> u32 {
        let k = self.recover.as_secs_f64();
        let t = elapsed as f64 / 1e9 - k;
        let c = (1.0 - self.decrease) / (k * k * k);
        let rate = peak * (1.0 + c * t * t * t);
        // Saturating, as `as` is for floats: NaN is 0, too large is MAX.
        rate as u32
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
        let Some((quota, undo)) = self.decide(limiter.quota(), limiter.buckets(), signal) else {
            return Ok(None);
        };
        if let Err(error) = limiter.set_quota(quota).await {
            self.undo(quota, undo);
            return Err(error);
        }
        Ok(Some(quota))
    }

    /// [`observe`](Self::observe) for the in-process limiter, at once.
    pub fn observe_now<D: Clock>(
        &self,
        limiter: &crate::ShardedLimiter<D>,
        signal: Signal,
    ) -> Option<Quota> {
        let (quota, undo) = self.decide(limiter.quota(), limiter.buckets(), signal)?;
        // The controller keeps within the ceiling's period and N's burst:
        // a refusal here leaves the quota, and the controller, as they are.
        match limiter.set_quota(quota) {
            Ok(()) => Some(quota),
            Err(_) => {
                self.undo(quota, undo);
                None
            }
        }
    }
}
