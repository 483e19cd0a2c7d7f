//! What a decision returns, whatever the store: a [`Grant`] (or a
//! [`Denied`], in `denied.rs`) and what a snapshot of the buckets shows;
//! what a refund or a settlement does after it is in `settle.rs`.

use std::fmt;
use std::time::Duration;

use crate::Shard;
use crate::draw::{MAX_K, Outcome, Single};
use crate::error::RefundTooLarge;

use crate::denied::Denied;

mod settle;

pub(crate) use settle::Settle;
pub use settle::{Refunded, Settled};

/// A granted request.
///
/// A grant is not `Clone`: [refunding](crate::Limit::refund) or
/// [settling](crate::Limit::settle) it takes it, so that no token is given
/// back twice. To read it from more than one place, borrow it; the tower
/// layer hands it to the inner service as a `tower::Granted`, which any
/// number of clones read and one takes.
///
/// ```compile_fail
/// # use shuffle_limiter::{Quota, ShardedLimiter};
/// # let limiter = ShardedLimiter::builder().quota(Quota::per_second(1)).build().unwrap();
/// let grant = limiter.check("t").unwrap();
/// let twice = grant.clone(); // refunded as well, it would give back twice
/// ```
#[derive(PartialEq, Eq)]
pub struct Grant {
    pub(crate) paid: Paid,
    pub(crate) remaining: u64,
    /// Nanoseconds; turned into a `Duration` only when asked.
    pub(crate) full_in: u64,
    /// The version of the split the store decided under: a bucket that a
    /// change of N added after it is another bucket than the one that paid,
    /// and a refund gives it nothing.
    pub(crate) generation: u64,
}

impl Grant {
    /// The bucket that paid for the request; when several paid together,
    /// the roomiest of them, which paid the most ([`payments`](Self::payments)).
    pub fn bucket(&self) -> u32 {
        match &self.paid {
            Paid::Own(payment) | Paid::Lent(payment) => payment.bucket(),
            Paid::Pooled(payments, _) => payments[0].bucket(),
        }
    }

    /// Which buckets paid how many tokens, in the order they paid: one
    /// bucket for most requests, several of the tenant's own buckets for a
    /// weighted request that none of them could pay alone, none for a grant
    /// by a Redis limiter's failure policy (`FailOpen`).
    ///
    /// ```
    /// use shuffle_limiter::{ManualClock, Quota, Request, ShardedLimiter};
    ///
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(8))
    ///     .buckets(4)
    ///     .per_tenant(2)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// // Each bucket holds 2 tokens: a weight of 3 takes both.
    /// let grant = limiter.check(Request::tenant("t").tokens(3)).unwrap();
    /// let paid: Vec<u32> = grant.payments().iter().map(|p| p.tokens()).collect();
    /// assert_eq!(paid, [2, 1]);
    /// assert_eq!(grant.payments()[0].bucket(), grant.bucket());
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub fn payments(&self) -> &[Payment] {
        match &self.paid {
            Paid::Own(payment) | Paid::Lent(payment) => std::slice::from_ref(payment),
            Paid::Pooled(payments, payers) => &payments[..*payers as usize],
        }
    }

    /// Tokens the grant took, over all the buckets that paid: the weight
    /// asked for, or 0 for a grant no bucket paid.
    pub fn tokens(&self) -> u32 {
        self.payments().iter().map(Payment::tokens).sum()
    }

    /// Splits off the part of this grant that `tokens` of its tokens are,
    /// to [refund](crate::Limit::refund): the last bucket to pay first,
    /// each up to what it paid. This grant keeps the rest (the first
    /// buckets' tokens), so no token is in both and none is given back
    /// twice. For a weighted request that took its worst case and used
    /// less.
    ///
    /// ```
    /// use shuffle_limiter::{ManualClock, Quota, Request, ShardedLimiter};
    ///
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(10))
    ///     .buckets(1)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let mut grant = limiter.check(Request::tenant("t").tokens(8))?; // the worst case
    /// limiter.refund(grant.part(5)?); // it used 3
    /// assert_eq!((grant.tokens(), limiter.remaining("t")), (3, 7));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`RefundTooLarge`] when `tokens` is more than the grant holds; the
    /// grant is then unchanged.
    pub fn part(&mut self, tokens: u32) -> Result<Grant, RefundTooLarge> {
        let mut payments = [Payment::default(); MAX_K];
        // A part of no tokens still names the grant's bucket.
        payments[0] = Payment::new(self.bucket(), 0);
        let mut payers = 0;
        for payment in self.refunds(tokens)? {
            payments[payers] = payment;
            payers += 1;
        }
        // `refunds` runs from the last payer back: keep the order they paid in.
        payments[..payers].reverse();
        let part = Grant {
            paid: Paid::Pooled(payments, payers as u64),
            ..self.duplicate()
        };
        *self = self.kept(self.tokens() - tokens);
        Ok(part)
    }

    /// What stays of this grant once all but `tokens` of it are refunded
    /// ([`part`](Self::part) takes from the last bucket to pay back, so this
    /// keeps the first ones'); the whole grant when `tokens` is more. A
    /// grant one bucket paid stays its own or lent.
    pub(crate) fn kept(&self, tokens: u32) -> Grant {
        let cut = |payment: &Payment| Payment::new(payment.bucket(), payment.tokens().min(tokens));
        let paid = match &self.paid {
            Paid::Own(payment) => Paid::Own(cut(payment)),
            Paid::Lent(payment) => Paid::Lent(cut(payment)),
            Paid::Pooled(..) => {
                let mut payments = [Payment::default(); MAX_K];
                // Kept of no tokens still names the grant's bucket.
                payments[0] = Payment::new(self.bucket(), 0);
                let (mut payers, mut left) = (0, tokens);
                for payment in self.payments() {
                    if left == 0 {
                        break;
                    }
                    let paid = payment.tokens().min(left);
                    payments[payers] = Payment::new(payment.bucket(), paid);
                    payers += 1;
                    left -= paid;
                }
                Paid::Pooled(payments, payers as u64)
            }
        };
        Grant {
            paid,
            ..self.duplicate()
        }
    }

    /// A copy, for the crate alone: one that holds a grant it hands out
    /// once ([`kept`](Self::kept), the tower layer's `Granted`).
    pub(crate) fn duplicate(&self) -> Grant {
        Grant {
            paid: self.paid.clone(),
            remaining: self.remaining,
            full_in: self.full_in,
            generation: self.generation,
        }
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
        let (mut payments, payers) = ([Payment::default(); MAX_K], self.payments().len());
        payments[..payers].copy_from_slice(self.payments());
        let mut left = tokens;
        Ok(payments
            .into_iter()
            .take(payers)
            .rev()
            .map_while(move |paid| {
                let back = paid.tokens().min(left);
                left -= back;
                (back > 0).then(|| Payment::new(paid.bucket(), back))
            }))
    }

    /// The grant of `n` tokens by the bucket `single` names in `shard`,
    /// whose times are in units of `unit` ns.
    #[inline(always)]
    pub(crate) fn single(
        single: Single,
        shard: &Shard,
        n: u32,
        unit: u64,
        generation: u64,
    ) -> Grant {
        let payment = Payment::new(shard.ranked()[single.index], n);
        Grant {
            paid: if single.index < shard.buckets().len() {
                Paid::Own(payment)
            } else {
                Paid::Lent(payment)
            },
            remaining: single.remaining,
            full_in: single.full_in.saturating_mul(unit),
            generation,
        }
    }

    /// The grant as one a Redis limiter's local fallback made: its buckets
    /// are the fallback's, and a refund to the Redis limiter goes there.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn by_fallback(mut self) -> Grant {
        self.generation |= BY_FALLBACK;
        self
    }

    /// Whether a Redis limiter's local fallback made the grant, and the
    /// version of the split it was decided under.
    pub(crate) fn generation(&self) -> (bool, u64) {
        (
            self.generation & BY_FALLBACK != 0,
            self.generation & !BY_FALLBACK,
        )
    }

    /// A grant no bucket paid for (a failure policy's), naming `bucket`.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn unpaid(bucket: u32) -> Grant {
        let mut payments = [Payment::default(); MAX_K];
        payments[0] = Payment::new(bucket, 0);
        Grant {
            paid: Paid::Pooled(payments, 0),
            remaining: 0,
            full_in: 0,
            generation: 0,
        }
    }

    /// Whether a spill bucket paid, lending from its room above its owners'
    /// reserve because none of the tenant's own buckets could
    /// ([`Builder::borrow_from`](crate::Builder::borrow_from)).
    pub fn borrowed(&self) -> bool {
        matches!(self.paid, Paid::Lent(_))
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

impl fmt::Debug for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grant")
            .field("payments", &self.payments())
            .field("borrowed", &self.borrowed())
            .field("remaining", &self.remaining)
            .field("full_in", &self.full_in())
            .finish()
    }
}

/// The bit of [`Grant::generation`] that says a Redis limiter's local
/// fallback made the grant (versions stay far below it).
const BY_FALLBACK: u64 = 1 << 63;

/// Who paid for a [`Grant`].
///
/// Every part of a grant is a whole word, written by one store. A grant is
/// often copied as soon as it is made (into the caller's slot, or a
/// benchmark's `black_box`), with 8- and 16-byte moves; a field written by
/// a narrower store and read back inside a wider move stalls the copy
/// (store-to-load forwarding fails), on the hot path of every check that
/// keeps its grant. Hence the word-sized tag, which `Result<Grant, Denied>`
/// also uses for its own.
#[derive(Debug, Clone, PartialEq, Eq)]
#[repr(u64)]
pub(crate) enum Paid {
    /// One of the tenant's own buckets.
    Own(Payment),
    /// A spill bucket, lending above its owners' reserve.
    Lent(Payment),
    /// The first entries, as many as the count, in the order they paid:
    /// several own buckets together, or none (a failure policy's grant,
    /// which names its bucket in the first entry).
    Pooled([Payment; MAX_K], u64),
}

/// A grant made ahead of time for a waiter (`book` of the stores), with
/// the arrival time each paying bucket was left at, to give it back if the
/// waiter gives up.
///
/// (Nominally public, for the stores' sealed trait; no path outside the
/// crate reaches it.)
#[derive(Debug)]
#[allow(unreachable_pub)]
pub struct Booked {
    pub(crate) grant: Grant,
    /// Per payment, in the grant's order, in the store's unit of time.
    pub(crate) written: [u64; MAX_K],
    /// How long from when the store drew until the grant may be used.
    #[cfg_attr(not(feature = "wait"), allow(dead_code))] // the waits'
    pub(crate) ready_in: Duration,
}

impl Booked {
    /// A grant to use at once, with nothing to give back (a failure
    /// policy's).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn now(grant: Grant) -> Booked {
        Booked {
            grant,
            written: [0; MAX_K],
            ready_in: Duration::ZERO,
        }
    }

    /// The booking of `grant`, whose arrival times `outcome` wrote,
    /// usable `ready_in` from when it was drawn.
    pub(crate) fn of(grant: Grant, outcome: &Outcome, ready_in: Duration) -> Booked {
        let mut written = [0; MAX_K];
        match outcome {
            Outcome::Grant(Single { tat, .. }) => written[0] = *tat,
            Outcome::Pooled(pool) => {
                for (w, (.., tat, _)) in written.iter_mut().zip(pool.payments()) {
                    *w = tat;
                }
            }
            Outcome::Deny { .. } => {}
        }
        Booked {
            grant,
            written,
            ready_in,
        }
    }
}

/// One bucket's part of a [`Grant`].
///
/// (One word, the bucket in its low half and the tokens in its high half,
/// written by one store, so that a copy of a grant never stalls on it.)
#[derive(Clone, Copy, PartialEq, Eq, Default)]
pub struct Payment(u64);

impl Payment {
    #[inline(always)]
    pub(crate) fn new(bucket: u32, tokens: u32) -> Payment {
        Payment(u64::from(bucket) | u64::from(tokens) << 32)
    }

    /// The bucket that paid.
    pub fn bucket(&self) -> u32 {
        self.0 as u32
    }

    /// How many tokens it paid.
    pub fn tokens(&self) -> u32 {
        (self.0 >> 32) as u32
    }
}

impl fmt::Debug for Payment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Payment")
            .field("bucket", &self.bucket())
            .field("tokens", &self.tokens())
            .finish()
    }
}

/// The draw's outcome as the public answer to a request of `n` tokens:
/// `shard` is what was drawn on (its own buckets, then its spill buckets),
/// `now` the reading it was drawn at, `unit` the nanoseconds in one unit
/// of the store's time and `generation` the split's version it was drawn
/// under.
#[inline(always)]
pub(crate) fn answer(
    outcome: Outcome,
    shard: &Shard,
    n: u32,
    (now, unit): (u64, u64),
    generation: u64,
) -> Result<Grant, Denied> {
    let ids = shard.ranked();
    let duration = |units: u64| Duration::from_nanos(units.saturating_mul(unit));
    let mut payments = [Payment::default(); MAX_K];
    match outcome {
        Outcome::Grant(single) => Ok(Grant::single(single, shard, n, unit, generation)),
        Outcome::Pooled(pool) => {
            for (payment, (index, .., tokens)) in payments.iter_mut().zip(pool.payments()) {
                *payment = Payment::new(ids[index], tokens);
            }
            Ok(Grant {
                paid: Paid::Pooled(payments, pool.payers as u64),
                remaining: pool.remaining,
                full_in: pool.full_in.saturating_mul(unit),
                generation,
            })
        }
        Outcome::Deny { index, at } => Err(Denied::limited(
            duration(at.saturating_sub(now).max(1)),
            ids[index],
        )),
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

#[cfg(test)]
mod tests {
    use super::{Grant, Paid, Payment};

    #[test]
    fn a_payment_keeps_its_bucket_and_tokens_apart_in_one_word() {
        let payment = Payment::new(u32::MAX, 7);
        assert_eq!((payment.bucket(), payment.tokens()), (u32::MAX, 7));
        let payment = Payment::new(3, u32::MAX);
        assert_eq!((payment.bucket(), payment.tokens()), (3, u32::MAX));
        assert_eq!(
            format!("{payment:?}"),
            "Payment { bucket: 3, tokens: 4294967295 }"
        );
    }

    #[test]
    fn a_grant_shows_its_payments_and_who_lent() {
        let lent = Grant {
            paid: Paid::Lent(Payment::new(5, 1)),
            remaining: 2,
            full_in: 1_000,
            generation: 0,
        };
        assert_eq!(
            (lent.bucket(), lent.tokens(), lent.borrowed()),
            (5, 1, true)
        );
        assert_eq!(
            format!("{lent:?}"),
            "Grant { payments: [Payment { bucket: 5, tokens: 1 }], borrowed: true, \
             remaining: 2, full_in: 1µs }"
        );
        let unpaid = Grant::unpaid(4);
        assert_eq!(
            (unpaid.bucket(), unpaid.payments(), unpaid.tokens()),
            (4, &[][..], 0)
        );
    }

    #[test]
    fn what_a_grant_keeps_is_what_a_refund_of_the_rest_leaves() {
        let mut payments = [Payment::default(); super::MAX_K];
        payments[..3].copy_from_slice(&[
            Payment::new(2, 4),
            Payment::new(6, 3),
            Payment::new(1, 2),
        ]);
        let grant = Grant {
            paid: Paid::Pooled(payments, 3),
            remaining: 0,
            full_in: 0,
            generation: 0,
        };
        for kept in 0..=10 {
            let refund = grant.duplicate().part(9 - kept.min(9)).unwrap();
            let left = grant.kept(kept);
            assert_eq!(left.tokens(), kept.min(9), "{kept}");
            for bucket in [2, 6, 1] {
                let of = |g: &Grant| {
                    g.payments()
                        .iter()
                        .filter(|p| p.bucket() == bucket)
                        .map(|p| p.tokens())
                        .sum::<u32>()
                };
                let paid = of(&grant);
                assert_eq!(of(&left) + of(&refund), paid, "{kept}: bucket {bucket}");
            }
        }
    }
}
