//! Where a limiter keeps its buckets.
//!
//! A [`Limiter`](crate::Limiter) is one plan — the quota and its split, the
//! assignment, the tenant cache — over one store. The store's one operation
//! is to apply [the draw](crate#the-model) atomically to a request's
//! buckets; it also gives tokens back, moves its buckets to a new quota or
//! N, and reads them. Everything built on a limiter ([`wait`], the tower
//! layer, a `LimiterSet`) goes through the limiter, so it works the same
//! over every store.
//!
//! - [`InProcess`]: atomics in this process, answering without awaiting; the
//!   store of a [`ShardedLimiter`](crate::ShardedLimiter).
//! - `RedisStore` (feature `redis`): one Lua script per decision in Redis,
//!   shared by every process; the store of a `RedisLimiter`. Its local
//!   fallback is a second store it asks while Redis cannot answer.
//!
//! The two stores never import each other: each takes the plan from below
//! and answers through the seam.
//!
//! [`wait`]: crate::Limiter::wait

use std::future::Future;

use crate::Shard;
use crate::denied::Denied;
use crate::grant::Grant;
use crate::plan::Core;

pub(crate) mod memory;

pub use self::memory::InProcess;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use crate::redis::RedisStore;

/// A place to keep a limiter's buckets: [`InProcess`] or, with the `redis`
/// feature, `RedisStore`.
///
/// The trait is sealed: its one operation works on the crate's own types.
/// Each store is one file of this crate that implements it.
pub trait Store: sealed::Apply {}

pub(crate) mod sealed {
    use std::time::Duration;

    use super::{Core, Denied, Future, Grant, Shard};
    #[cfg(feature = "redis")]
    use crate::error::ConfigError;
    use crate::grant::{Booked, BucketState, Refunded};
    use crate::plan::whom::Whom;
    use crate::quota::Quota;

    /// A change of a running limiter, as [`Apply::change`] takes it.
    #[derive(Debug, Clone, Copy)]
    #[allow(unreachable_pub)]
    pub enum Change {
        /// A new quota, over the same N.
        Quota(Quota),
        /// A new N, under the same quota.
        Buckets(u32),
        /// Both at once.
        Both(Quota, u32),
        /// No whole token before `Duration` from now (at most
        /// `MAX_HOLD_OFF`), in the shard's own buckets, or in every bucket.
        HoldOff(Option<Shard>, Duration),
    }

    /// Why a store made no booking: the denial, and whether the store
    /// drew it at the instant asked for (its retry time counts from there)
    /// or its failure policy made it now (the retry time counts from now:
    /// a wait sleeps until then and asks again, rather than booking
    /// further ahead).
    #[derive(Debug, Clone, Copy)]
    #[allow(unreachable_pub)]
    #[cfg_attr(not(feature = "wait"), allow(dead_code))] // the waits'
    pub struct NotReserved {
        pub(crate) denied: Denied,
        pub(crate) by_policy: bool,
    }

    impl NotReserved {
        /// A denial drawn at the instant asked for.
        pub(crate) fn drawn(denied: Denied) -> NotReserved {
            NotReserved {
                denied,
                by_policy: false,
            }
        }
    }

    /// A store with its own plan that decides alone while another cannot:
    /// a Redis store's local fallback, which holds this process's share of
    /// the budget. The Redis store builds it and composes with it through
    /// this trait alone; the limiter API picks the in-process limiter.
    #[cfg(feature = "redis")]
    #[allow(unreachable_pub, private_interfaces)]
    pub trait Local: Send + Sync + Sized {
        /// The clock it reads.
        type Clock;

        /// The fallback over `core`, the plan of this process's share,
        /// reading `clock`.
        fn from_plan(core: Core, clock: Self::Clock) -> Self;

        /// The decision for `n` tokens on `shard` as it is, now; `None`
        /// when its buckets here could never pay that many together.
        fn decide(&self, shard: &Shard, n: u32) -> Option<Result<Grant, Denied>>;

        /// Gives back what `grant`, one of its own, took.
        fn refund(&self, grant: Grant) -> Refunded;

        /// Charges up to `tokens` more to the buckets that paid `grant`,
        /// one of its own: the tokens taken.
        fn charge(&self, grant: Grant, tokens: u32) -> u32;

        /// Holds off the shard's own buckets, or every bucket, for
        /// `duration`, as the other store did.
        fn hold_off(&self, shard: Option<&Shard>, duration: Duration);

        /// Takes `quota` over `buckets` buckets, as the other store did.
        fn follow(&self, quota: Quota, buckets: u32) -> Result<(), ConfigError>;

        /// Whether it could [`follow`](Self::follow) to `quota` over
        /// `buckets`, changing nothing.
        fn could_follow(&self, quota: Quota, buckets: u32) -> Result<(), ConfigError>;
    }

    /// The store's one operation, out of reach of other crates: they can
    /// neither name the trait nor make the `Core` it takes.
    #[allow(unreachable_pub, private_interfaces)]
    pub trait Apply: Send + Sync + Sized {
        /// What the store's fallible operations (changes, refunds and
        /// reads) fail with.
        type Error: std::error::Error + Send + Sync + 'static;

        /// The decision in flight: ready at once in process, a round trip
        /// to Redis otherwise. It owns what it needs, so it can outlive the
        /// call.
        type Pending: Future<Output = Result<Grant, Denied>> + Send + 'static;

        /// A booking in flight, as [`Pending`](Self::Pending) is.
        type Booking: Future<Output = Result<Booked, NotReserved>> + Send + 'static;

        /// Applies the draw for `n` tokens to `whom`'s buckets, atomically
        /// (under N at that moment: see [`Whom`]).
        fn apply(&self, core: &Core, whom: Whom<'_>, n: u32) -> Self::Pending;

        /// A decision already made: `denied`, without asking the store.
        fn denied(denied: Denied) -> Self::Pending;

        /// Gives back what `grant` took, where its buckets still exist.
        fn refund(
            &self,
            core: &Core,
            grant: Grant,
        ) -> impl Future<Output = Result<Refunded, Self::Error>> + Send;

        /// Takes up to `tokens` more from the buckets that paid `grant`,
        /// in the order they paid, each down to a burst of debt: the tokens
        /// taken.
        fn charge(
            &self,
            core: &Core,
            grant: Grant,
            tokens: u32,
        ) -> impl Future<Output = Result<u32, Self::Error>> + Send;

        /// Changes the quota or N of the running limiter.
        fn change(
            &self,
            core: &Core,
            change: Change,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send;

        /// Tokens the own buckets of `whom`'s shard under the N in force
        /// could give now (resolved again where N changed since).
        fn remaining(
            &self,
            core: &Core,
            whom: Whom<'_>,
        ) -> impl Future<Output = Result<u64, Self::Error>> + Send;

        /// The state of every bucket, read now.
        fn snapshot(
            &self,
            core: &Core,
        ) -> impl Future<Output = Result<Vec<BucketState>, Self::Error>> + Send;

        /// Applies the draw as it will be `lead` from now, now: a grant the
        /// caller may use from then on, which later requests line up
        /// behind (a booking, for waits that queue).
        fn book(&self, core: &Core, whom: Whom<'_>, n: u32, lead: Duration) -> Self::Booking;

        /// Gives a booking back to the buckets that paid it, where
        /// nothing drew on them since; over a network, in the background.
        fn give_back(&self, core: &Core, booked: Booked);

        /// Whether a hold-off since `booked` was drawn covers its slot, so
        /// that the wait must book again rather than keep it (over Redis,
        /// as far as this process has heard: see `catch_up`).
        fn held_over(&self, core: &Core, booked: &Booked) -> bool;

        /// Brings the core's split up to date with the quota in force where
        /// the buckets are kept, so that a wait can tell whether the quota
        /// changed since it booked: nothing to do in process, where every
        /// change goes through the core; over Redis, another process may
        /// have changed it, or held buckets off.
        fn catch_up(&self, _core: &Core) -> impl Future<Output = ()> + Send + 'static {
            std::future::ready(())
        }

        /// Whether `shard` could ever pay `n` tokens in this store, weighed
        /// before any draw: with its own buckets together, unless the store
        /// can only take from one bucket at a time. A store whose quota
        /// another process may have raised answers `Ok` and weighs in the
        /// decision instead (over Redis in the one-slot layout, under the
        /// quota Redis holds).
        fn check_weight(&self, core: &Core, shard: &Shard, n: u32) -> Result<(), Denied> {
            core.split.get().check_weight(shard, n)
        }
    }
}
