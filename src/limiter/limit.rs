//! The limiter's face over any store: [`Limit`].

use std::future::Future;

use crate::Shard;
use crate::quota::Quota;
use crate::store::Store;
use crate::store::sealed::Change;
use crate::upstream::HoldOff;

use super::Limiter;
use crate::denied::Denied;
use crate::grant::{BucketState, Grant, Refunded, Settle, Settled};
use crate::plan::whom::Whom;
use crate::request::Request;

/// What every limiter does, whatever its store: check, refund, change the
/// quota or N, and read what is left. In process each answers at once; over
/// Redis each is a round trip.
///
/// Code written against `Limit` (or against `Limiter<S>` for any
/// [`Store`] `S`) runs unchanged over both stores:
///
/// ```
/// use shuffle_limiter::store::Store;
/// use shuffle_limiter::{Limit, Limiter, ManualClock, Quota, Request, ShardedLimiter};
///
/// /// Takes the worst case of a batch, and gives back what it did not use.
/// async fn send_batch<S: Store>(limiter: &Limiter<S>, tenant: &str, used: u32) -> u64 {
///     let mut grant = limiter.check(Request::tenant(tenant).tokens(4)).await.unwrap();
///     let unused = grant.part(4 - used).unwrap();
///     limiter.refund(unused).await.unwrap();
///     limiter.remaining(tenant).await.unwrap()
/// }
///
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let mut f = std::pin::pin!(f);
/// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// #     match f.as_mut().poll(&mut cx) { std::task::Poll::Ready(v) => v, _ => unreachable!() }
/// # }
/// let limiter = ShardedLimiter::builder()
///     .quota(Quota::per_second(10))
///     .buckets(1)
///     .clock(ManualClock::new())
///     .build()?;
/// // In process, the futures are ready at once.
/// assert_eq!(block_on(send_batch(&limiter, "t", 3)), 7);
/// # Ok::<(), shuffle_limiter::ConfigError>(())
/// ```
///
/// The same function takes a `RedisLimiter` (see the
/// [Redis guide](crate::guide::redis)). A [`ShardedLimiter`] also has
/// synchronous methods of the same names, which its callers reach first;
/// generic code reaches these.
///
/// [`ShardedLimiter`]: crate::ShardedLimiter
pub trait Limit: Send + Sync {
    /// What the store's fallible operations fail with:
    /// [`ConfigError`](crate::ConfigError) in process (only a change can
    /// fail there), the Redis store's `Error` over Redis.
    type Error: std::error::Error + Send + Sync + 'static;

    /// A decision in flight: ready at once in process, a round trip to
    /// Redis otherwise. It owns what it needs (`'static`).
    type Checking: Future<Output = Result<Grant, Denied>> + Send + 'static;

    /// Takes the request's tokens from the roomiest of its buckets (or
    /// several together, for a weighted request none can pay alone).
    ///
    /// The future's output is [`Denied`] when the buckets are short (with
    /// when to retry), when the request can never fit
    /// ([`DenialReason::NeverFits`](crate::DenialReason::NeverFits)), or when
    /// the store could not decide and its failure policy denied.
    fn check<'r>(&self, request: impl Into<Request<'r>>) -> Self::Checking;

    /// Gives back what `grant` took (or [`part`](Grant::part) of it), to
    /// the buckets that paid, where they still exist.
    fn refund(&self, grant: Grant) -> impl Future<Output = Result<Refunded, Self::Error>> + Send;

    /// Changes the budget, at once, for every tenant (and, over Redis,
    /// every process), keeping what each bucket has used.
    fn set_quota(&self, quota: Quota) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Changes N, the number of buckets: each tenant's shard moves to the
    /// new N, buckets that stay keep their tokens.
    fn set_buckets(&self, buckets: u32) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Changes the quota and N together, in one step.
    fn set_quota_and_buckets(
        &self,
        quota: Quota,
        buckets: u32,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Tokens the request's buckets could give now, over all of them,
    /// without taking any (its weight is not read).
    fn remaining<'r>(
        &self,
        request: impl Into<Request<'r>>,
    ) -> impl Future<Output = Result<u64, Self::Error>> + Send;

    /// The state of every bucket, read now (each bucket read once, not all
    /// at one instant).
    fn snapshot(&self) -> impl Future<Output = Result<Vec<BucketState>, Self::Error>> + Send;

    /// Settles `grant` at its real cost of `actual` tokens, known only after
    /// the call (tokens of an LLM answer, pages of a report): the
    /// difference goes back to the buckets that paid it when `actual` is
    /// less, as [`refund`](Self::refund) gives back, or is charged to them
    /// as debt when it is more, each bucket down to a burst of debt at
    /// most (what none can take is forgiven, never charged to another; so
    /// is all of it for a [borrowed](Grant::borrowed) grant, whose bucket
    /// is another tenant's).
    ///
    /// So admit with an estimate, and settle:
    /// `check(Request::tenant(t).tokens(estimate))`, then
    /// `settle(grant, actual)`.
    ///
    /// # Errors
    /// What the store fails with: over Redis, the errors of a round trip
    /// (nothing may then be settled).
    fn settle(
        &self,
        grant: Grant,
        actual: u32,
    ) -> impl Future<Output = Result<Settled, Self::Error>> + Send;

    /// Grants nothing from the buckets `hold` names before its duration is
    /// over: the upstream answered 429 with a time to come back (see
    /// [`upstream`](crate::upstream)). Only ever takes tokens.
    ///
    /// # Errors
    /// What the store fails with: over Redis, the errors of a round trip
    /// (nothing may then be held off; in the spread layout, where each
    /// bucket is held by a script of its own, `Error::NotAllHeld` names the
    /// buckets that were not, every other one being held).
    fn hold_off(&self, hold: HoldOff<'_>) -> impl Future<Output = Result<(), Self::Error>> + Send;
}

impl<S: Store> Limit for Limiter<S> {
    type Error = S::Error;
    type Checking = S::Pending;

    #[inline]
    fn check<'r>(&self, request: impl Into<Request<'r>>) -> Self::Checking {
        let request = request.into();
        self.pending(self.core.whom(&request), request.weight())
    }

    fn refund(&self, grant: Grant) -> impl Future<Output = Result<Refunded, Self::Error>> + Send {
        self.store.refund(&self.core, grant)
    }

    fn set_quota(&self, quota: Quota) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.store.change(&self.core, Change::Quota(quota))
    }

    fn set_buckets(&self, buckets: u32) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.store.change(&self.core, Change::Buckets(buckets))
    }

    fn set_quota_and_buckets(
        &self,
        quota: Quota,
        buckets: u32,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.store.change(&self.core, Change::Both(quota, buckets))
    }

    fn remaining<'r>(
        &self,
        request: impl Into<Request<'r>>,
    ) -> impl Future<Output = Result<u64, Self::Error>> + Send {
        let request = request.into();
        async move {
            let whom = self.core.whom(&request);
            self.store.remaining(&self.core, whom).await
        }
    }

    fn snapshot(&self) -> impl Future<Output = Result<Vec<BucketState>, Self::Error>> + Send {
        self.store.snapshot(&self.core)
    }

    async fn settle(&self, grant: Grant, actual: u32) -> Result<Settled, Self::Error> {
        Ok(match Settle::of(grant, actual) {
            Settle::Refund(part) => Settled {
                refunded: self.store.refund(&self.core, part).await?,
                ..Settled::default()
            },
            Settle::Even => Settled::default(),
            Settle::Forgive(extra) => Settled::charge(extra, 0),
            Settle::Charge(grant, extra) => {
                Settled::charge(extra, self.store.charge(&self.core, grant, extra).await?)
            }
        })
    }

    fn hold_off(&self, hold: HoldOff<'_>) -> impl Future<Output = Result<(), Self::Error>> + Send {
        let change = Change::HoldOff(self.held(&hold), hold.duration());
        self.store.change(&self.core, change)
    }
}

impl<S: Store> Limiter<S> {
    /// The shard whose own buckets `hold` stops, or `None` for all.
    pub(crate) fn held(&self, hold: &HoldOff<'_>) -> Option<Shard> {
        hold.who().map(|request| self.core.whom(request).shard)
    }

    /// The decision of `n` tokens for `whom` in flight, through the store
    /// seam: denied at once when the shard can never hold them. What
    /// [`Limit::check`] and a handle's check over any store send.
    #[inline]
    pub(crate) fn pending(&self, whom: Whom<'_>, n: u32) -> S::Pending {
        match (self.store).check_weight(&self.core, &self.core.shard_now(&whom), n) {
            Ok(()) => self.store.apply(&self.core, whom, n),
            Err(denied) => S::denied(denied),
        }
    }
}
