//! Listening to the upstream: when the API the limiter guards answers
//! `429 Too Many Requests` (or `503`) with a time to come back, the
//! limiter grants nothing from the buckets concerned before then.
//!
//! A limit configured in the client is rarely the upstream's: the partner
//! lowers it at peak, other clients share it. Two answers to that:
//!
//! - **Hold off** when it says stop. [`Retry-After`](retry_after) and the
//!   reset fields of rate-limit headers ([`reset_in`]) say when to come
//!   back.
//! - **Adapt** the budget to what it takes: an [`Adaptive`] controller
//!   cuts the global rate on throttles, steps it up after quiet intervals,
//!   and takes an advertised limit ([`policy`]) as it is, between a floor
//!   and a ceiling, through the live quota change.
//! - **Budget the retries** per bucket ([`RetryBudget`], or a fleet's
//!   over Redis, `redis::RedisRetryBudget`), and **settle**
//!   costs known only after the call
//!   ([`Limit::settle`](crate::Limit::settle)).
//!
//! A [`HoldOff`] says where a hold-off applies, and
//! [`Limit::hold_off`](crate::Limit::hold_off) (or
//! [`ShardedLimiter::hold_off`](crate::ShardedLimiter::hold_off), at once)
//! applies it:
//!
//! - [`HoldOff::all`]: the upstream's limit is shared by every tenant
//!   (one API key for all of them): all N buckets stop.
//! - [`HoldOff::tenant`]: the upstream limits per account: only the
//!   tenant's own buckets stop, and every tenant whose shard differs goes on
//!   (the buckets it shares with the held tenant stop for it too, as they
//!   would for a flood).
//!
//! No held bucket has a whole token before the instant, not even after a
//! refund, a settlement or a booking given back meanwhile (over Redis, in
//! the one-slot layout: the spread layout keeps no record of the instant,
//! and a give-back there can bring a token back early). They come back one
//! after another over one interval of a bucket, or over the hold-off's
//! length if that is shorter (the first at the instant, each with one
//! token), then refill at their pace: together they resume
//! at their rate, not as a burst of one token each into an upstream that
//! just recovered. The hold-off only ever takes tokens, so the budget
//! `R·t + B` still holds. Checks that raced the hold-off are decided
//! again; waits that had booked a slot before the instant book again after
//! it, and those booked at or after it keep their slots. Over Redis one script holds off the buckets for every process
//! of the fleet (in the spread layout, one script per bucket), at the
//! server's clock: the first bucket comes back at most the round trip (and
//! a microsecond of rounding) after the instant asked for. A hold-off is at
//! most [`MAX_HOLD_OFF`]; a longer one is cut to it, and one of zero
//! changes nothing.
//!
//! ```
//! use std::time::{Duration, SystemTime};
//! use shuffle_limiter::upstream::{self, HoldOff};
//! use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
//!
//! let clock = ManualClock::new();
//! let limiter = ShardedLimiter::builder()
//!     .quota(Quota::per_second(5).with_burst(8))
//!     .buckets(4)
//!     .per_tenant(2)
//!     .clock(clock.clone())
//!     .build()?;
//! assert!(limiter.check("acme").is_ok());
//! // The partner answered 429 with `Retry-After: 2`, for all our tenants.
//! let wait = upstream::retry_after(b"2", SystemTime::now()).unwrap();
//! limiter.hold_off(HoldOff::all(wait));
//! assert!(limiter.check("acme").is_err());
//! assert!(limiter.check("globex").is_err());
//! clock.advance(Duration::from_secs(2));
//! assert!(limiter.check("globex").is_ok()); // back within an interval
//! # Ok::<(), shuffle_limiter::ConfigError>(())
//! ```

mod adapt;
#[cfg(feature = "wait")]
mod call;
mod headers;
mod retry;

use std::time::Duration;

pub use self::adapt::{AdaptError, Adaptive, Signal};
#[cfg(feature = "wait")]
#[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
pub use self::call::{Answer, CallError, Scope, Upstream};
pub use self::headers::{policy, reset_in, retry_after};
// The budget's steps, for the Redis budget and its differential test.
#[cfg(feature = "redis")]
pub(crate) use self::retry::{RETRY, Terms, deposited, sealed as retry_sealed};
pub use self::retry::{Retries, RetryBudget};
#[cfg(all(test, feature = "redis"))]
pub(crate) use self::retry::{floor_due, roomiest};
use crate::Request;

/// A response extension that says the response was made in place of the
/// call, by a layer of this crate ([`tower`](crate::tower)'s rate limit's
/// 429, its in-flight limit's 503): the upstream never saw the request.
/// [`Upstream`] reads it through [`Answer::sent`]: on such an answer it
/// gives the grant back and neither holds off, adapts nor retries, so that
/// an in-flight limit inside an upstream layer refusing one tenant's calls
/// does not hold off every tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NotSent;

/// On a response of [`tower::UpstreamLayer`](crate::tower::UpstreamLayer)
/// whose call was answered but whose limiter's store then failed to take in
/// what it said (a refund, a hold-off, a quota change or a settlement; see
/// [`CallError::Store`]): the store's error. The response is the
/// upstream's all the same, which the call may have had effects behind.
#[derive(Debug, Clone)]
pub struct Unheard(pub std::sync::Arc<dyn std::error::Error + Send + Sync>);

/// The longest hold-off: an hour. An upstream that asks for more (a
/// `Retry-After` of days, or a date years ahead) is held off for an hour,
/// then asked again: one bad header must not stop a service for days.
pub const MAX_HOLD_OFF: Duration = Duration::from_secs(3600);

/// Where and how long the upstream asked the limiter to stop: every
/// bucket, or one tenant's (or one user's) own buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldOff<'a> {
    who: Option<Request<'a>>,
    duration: Duration,
}

impl HoldOff<'static> {
    /// Every bucket stops for `duration` (at most [`MAX_HOLD_OFF`]): the
    /// upstream's limit is shared by all tenants.
    pub fn all(duration: Duration) -> HoldOff<'static> {
        HoldOff {
            who: None,
            duration: duration.min(MAX_HOLD_OFF),
        }
    }
}

impl<'a> HoldOff<'a> {
    /// The request's own buckets stop for `duration` (at most
    /// [`MAX_HOLD_OFF`]): its tenant's k, or its user's j when it names a
    /// user. For an upstream that limits each account on its own. The
    /// request's tokens do not matter. Its spill buckets, which other
    /// tenants own, are not held, but lend it nothing while all its own
    /// buckets are ([borrowing](crate::guide::borrowing)).
    pub fn tenant(request: impl Into<Request<'a>>, duration: Duration) -> HoldOff<'a> {
        HoldOff {
            who: Some(request.into()),
            duration: duration.min(MAX_HOLD_OFF),
        }
    }

    /// Whose buckets stop: `None` for every bucket.
    pub fn who(&self) -> Option<&Request<'a>> {
        self.who.as_ref()
    }

    /// How long they stop, from when the limiter applies it.
    pub fn duration(&self) -> Duration {
        self.duration
    }
}
