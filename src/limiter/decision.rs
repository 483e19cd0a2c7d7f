//! What a decision returns, whatever the store: a [`Grant`] or a [`Denied`];
//! and what a snapshot of the buckets shows.

use std::fmt;
use std::time::Duration;

use crate::Shard;
use crate::assign::MAX_PER_TENANT;
use crate::draw::{Outcome, Single};
use crate::error::RefundTooLarge;

/// A granted request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The buckets that paid, the first `payers` entries.
    pub(crate) payments: [Payment; MAX_PER_TENANT as usize],
    pub(crate) payers: u8,
    pub(crate) borrowed: bool,
    pub(crate) remaining: u64,
    /// Nanoseconds; turned into a `Duration` only when asked.
    pub(crate) full_in: u64,
}

impl Grant {
    /// The bucket that paid for the request; when several paid together,
    /// the roomiest of them, which paid the most ([`payments`](Self::payments)).
    pub fn bucket(&self) -> u32 {
        self.payments[0].bucket
    }

    /// Which buckets paid how many tokens, in the order they paid: one
    /// bucket for most requests, several of the tenant's own buckets for a
    /// weighted request that none of them could pay alone, none for a grant
    /// by a Redis limiter's failure policy (`FailOpen`).
    ///
    /// ```
    /// use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
    ///
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(8))
    ///     .buckets(4)
    ///     .per_tenant(2)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// // Each bucket holds 2 tokens: a weight of 3 takes both.
    /// let grant = limiter.check_n("t", 3).unwrap().unwrap();
    /// let paid: Vec<u32> = grant.payments().iter().map(|p| p.tokens()).collect();
    /// assert_eq!(paid, [2, 1]);
    /// assert_eq!(grant.payments()[0].bucket(), grant.bucket());
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub fn payments(&self) -> &[Payment] {
        &self.payments[..usize::from(self.payers)]
    }

    /// Tokens the grant took, over all the buckets that paid: the weight
    /// asked for, or 0 for a grant no bucket paid.
    pub fn tokens(&self) -> u32 {
        self.payments().iter().map(|p| p.tokens).sum()
    }

    /// What a refund of `tokens` gives back to whom: the last bucket to pay
    /// first, each up to what it paid.
    pub(crate) fn refunds(
        &self,
        tokens: u32,
    ) -> Result<impl Iterator<Item = Payment> + use<>, RefundTooLarge> {
        let granted = self.tokens();
        if tokens > granted {
            return Err(RefundTooLarge {
                requested: tokens,
                granted,
            });
        }
        let (payments, payers) = (self.payments, usize::from(self.payers));
        let mut left = tokens;
        Ok(payments
            .into_iter()
            .take(payers)
            .rev()
            .map_while(move |paid| {
                let back = paid.tokens.min(left);
                left -= back;
                (back > 0).then_some(Payment {
                    bucket: paid.bucket,
                    tokens: back,
                })
            }))
    }

    /// The grant of `n` tokens by the bucket `single` names in `shard`,
    /// whose times are in units of `unit` ns.
    #[inline(always)]
    pub(crate) fn single(single: Single, shard: &Shard, n: u32, unit: u64) -> Grant {
        let mut payments = [Payment::default(); MAX_PER_TENANT as usize];
        payments[0] = Payment {
            bucket: shard.ranked()[single.index],
            tokens: n,
        };
        Grant {
            payments,
            payers: 1,
            borrowed: single.index >= shard.buckets().len(),
            remaining: single.remaining,
            full_in: single.full_in.saturating_mul(unit),
        }
    }

    /// A grant no bucket paid for (a failure policy's), naming `bucket`.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn unpaid(bucket: u32) -> Grant {
        let mut payments = [Payment::default(); MAX_PER_TENANT as usize];
        payments[0].bucket = bucket;
        Grant {
            payments,
            payers: 0,
            borrowed: false,
            remaining: 0,
            full_in: 0,
        }
    }

    /// Whether a spill bucket paid, lending from its room above its owners'
    /// reserve because none of the tenant's own buckets could
    /// ([`Builder::borrow_from`](crate::Builder::borrow_from)).
    pub fn borrowed(&self) -> bool {
        self.borrowed
    }

    /// Tokens the tenant could still take right after this grant, over all
    /// its own buckets, as read during the decision.
    pub fn remaining(&self) -> u64 {
        self.remaining
    }

    /// How long until all of the tenant's buckets are full again if nothing
    /// more is taken, as read during the decision.
    pub fn full_in(&self) -> Duration {
        Duration::from_nanos(self.full_in)
    }
}

/// A grant made ahead of time for a waiter (`reserve` of the stores), with
/// the arrival time each paying bucket was left at, to give it back if the
/// waiter gives up.
///
/// (Nominally public, for the stores' sealed trait; no path outside the
/// crate reaches it.)
#[derive(Debug)]
#[allow(unreachable_pub)]
pub struct Reserved {
    pub(crate) grant: Grant,
    /// Per payment, in the grant's order, in the store's unit of time.
    pub(crate) written: [u64; MAX_PER_TENANT as usize],
    /// How long from when the store drew until the grant may be used.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] // the waits'
    pub(crate) ready_in: Duration,
}

impl Reserved {
    /// A grant to use at once, with nothing to give back (a failure
    /// policy's).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn now(grant: Grant) -> Reserved {
        Reserved {
            grant,
            written: [0; MAX_PER_TENANT as usize],
            ready_in: Duration::ZERO,
        }
    }

    /// The reservation of `grant`, whose arrival times `outcome` wrote,
    /// usable `ready_in` from when it was drawn.
    pub(crate) fn of(grant: Grant, outcome: &Outcome, ready_in: Duration) -> Reserved {
        let mut written = [0; MAX_PER_TENANT as usize];
        match outcome {
            Outcome::Grant(Single { tat, .. }) => written[0] = *tat,
            Outcome::Pooled(pool) => {
                for (w, (.., tat, _)) in written.iter_mut().zip(pool.payments()) {
                    *w = tat;
                }
            }
            Outcome::Deny { .. } => {}
        }
        Reserved {
            grant,
            written,
            ready_in,
        }
    }
}

/// One bucket's part of a [`Grant`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Payment {
    pub(crate) bucket: u32,
    pub(crate) tokens: u32,
}

impl Payment {
    /// The bucket that paid.
    pub fn bucket(&self) -> u32 {
        self.bucket
    }

    /// How many tokens it paid.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }
}

/// A denied request, and when to try again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Denied {
    pub(crate) retry_after: Duration,
    pub(crate) bucket: u32,
}

impl Denied {
    /// How long until one of the tenant's buckets could grant the same
    /// request; never zero.
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
}

impl fmt::Display for Denied {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rate limited: retry in {:?}", self.retry_after)
    }
}

impl std::error::Error for Denied {}

/// The draw's outcome as the public answer to a request of `n` tokens:
/// `shard` is what was drawn on (its own buckets, then its spill buckets),
/// `now` the reading it was drawn at and `unit` the nanoseconds in one unit
/// of the store's time.
#[inline(always)]
pub(crate) fn answer(
    outcome: Outcome,
    shard: &Shard,
    n: u32,
    now: u64,
    unit: u64,
) -> Result<Grant, Denied> {
    let ids = shard.ranked();
    let duration = |units: u64| Duration::from_nanos(units.saturating_mul(unit));
    let mut payments = [Payment::default(); MAX_PER_TENANT as usize];
    match outcome {
        Outcome::Grant(single) => Ok(Grant::single(single, shard, n, unit)),
        Outcome::Pooled(pool) => {
            for (payment, (index, .., tokens)) in payments.iter_mut().zip(pool.payments()) {
                *payment = Payment {
                    bucket: ids[index],
                    tokens,
                };
            }
            Ok(Grant {
                payments,
                payers: pool.payers as u8,
                borrowed: false,
                remaining: pool.remaining,
                full_in: pool.full_in.saturating_mul(unit),
            })
        }
        Outcome::Deny { index, at } => Err(Denied {
            retry_after: duration(at.saturating_sub(now).max(1)),
            bucket: ids[index],
        }),
    }
}

/// One bucket's state in a [`ShardedLimiter::snapshot`](crate::ShardedLimiter::snapshot).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketState {
    pub(crate) bucket: u32,
    pub(crate) available: u64,
    pub(crate) burst: u32,
    pub(crate) full_in: Duration,
}

impl BucketState {
    /// The bucket's index.
    pub fn bucket(&self) -> u32 {
        self.bucket
    }

    /// Tokens that could be taken now.
    pub fn available(&self) -> u64 {
        self.available
    }

    /// Tokens the bucket holds when full.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// How long until the bucket is full again if nothing is taken.
    pub fn full_in(&self) -> Duration {
        self.full_in
    }
}
