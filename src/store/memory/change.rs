//! The in-process store's changes: a new quota or N moving every bucket,
//! tokens given back (refunds, bookings a wait gives up), the state read;
//! and the store seam, [`Apply`], over the atomics.

use std::cell::Cell;
use std::future::{Future, Ready, ready};
use std::time::Duration;

use super::{InProcess, SEALED};
use crate::Shard;
use crate::clock::Clock;
use crate::denied::Denied;
use crate::draw::{
    Pace, Step, added, charge, give_back, hold, refund, rescale, resize, turn, unheld,
};
use crate::error::ConfigError;
use crate::grant::{Booked, BucketState, Grant, Refunded};
use crate::plan::whom::Whom;
use crate::plan::{Core, MAX_NOW, Split};
use crate::store::Store;
use crate::store::sealed::{Apply, Change, NotReserved};
use crate::sync::Ordering;

impl<C: Clock> InProcess<C> {
    /// Whole tokens in the own buckets of `whom`'s shard now, under the N
    /// they are read under.
    pub(crate) fn remaining(&self, core: &Core, whom: &Whom<'_>) -> u64 {
        self.steady_read(core, |split, now| {
            let shard = core.resolve_again(whom, split.buckets);
            (shard.buckets().iter())
                .map(|&b| {
                    let capacity = split.pace.capacity(split.burst_of(b));
                    split.pace.tokens(Pace::room(capacity, self.tat(b), now))
                })
                .sum()
        })
    }

    /// `f` of the split and the clock now, over buckets read under that
    /// split: read again while a change moved them meanwhile (a bucket
    /// moved to one split and read against the other holds tokens
    /// neither gives it).
    fn steady_read<R>(&self, core: &Core, f: impl Fn(&Split, u64) -> R) -> R {
        loop {
            let (version, split) = core.split.read();
            let read = f(&split, self.now());
            if core.split.unchanged(version) {
                return read;
            }
        }
    }

    /// Moves every bucket from the split `from` to `to` at the same
    /// instant, keeping the share of its burst it holds (for
    /// `LiveSplit::change`, which makes `to` the split of `version`).
    pub(crate) fn rescale(&self, from: Split, to: Split, version: u64) {
        self.move_buckets(from, to, version, rescale);
    }

    /// Moves every bucket from the split `from` to `to`, which differ in N,
    /// at the same instant: a bucket that stays keeps its tokens (up to its
    /// new burst), one that is added starts empty, one that goes is sealed
    /// (`resize` of `src/draw/`; for `LiveSplit::change`, which makes `to`
    /// the split of `version`).
    pub(crate) fn resize(&self, from: Split, to: Split, version: u64) {
        self.move_buckets(from, to, version, resize);
    }

    /// Moves each bucket below the larger N of `from` and `to` to `step` of
    /// its arrival time, or to empty or sealed where it is added or goes;
    /// an added one is born at `version`.
    fn move_buckets(&self, from: Split, to: Split, version: u64, step: Step) {
        let now = self.now();
        let (kept, all) = (from.buckets.min(to.buckets), from.buckets.max(to.buckets));
        for born in &self.born[kept as usize..to.buckets.max(kept) as usize] {
            born.store(version, Ordering::Relaxed);
        }
        // The buckets that stay come first: an added one is no fuller than
        // the fullest of them (`added`).
        let mut fullest = u64::MAX;
        for (b, tat) in (0..all).zip(self.tats.iter()) {
            let (old, new) = ((from.pace, from.burst_of(b)), (to.pace, to.burst_of(b)));
            let capacity = new.0.capacity(new.1);
            let mut seen = tat.load(Ordering::Relaxed);
            let next = |seen| match b {
                _ if b < kept => step(old, new, seen, now),
                _ if b < to.buckets => added(fullest, capacity, now),
                _ => SEALED,
            };
            // Swapped even when the value stays: see `LiveSplit::change`.
            let mut moved = next(seen);
            while let Err(actual) =
                tat.compare_exchange_weak(seen, moved, Ordering::Release, Ordering::Relaxed)
            {
                seen = actual;
                moved = next(seen);
            }
            if b < kept {
                fullest = fullest.min(moved.saturating_sub(capacity));
            }
        }
    }

    /// Gives back `cost` units of credit to `bucket` of `split`, never
    /// beyond its burst: the whole cost, less where the bucket refilled
    /// meanwhile (`refund` of `src/draw/`), and no token before the instant
    /// of a hold-off on it (`unheld`). Nothing, and `false`, when the
    /// bucket is not among the split's buckets, or was added after the
    /// split's version `generation` (it is not the bucket that paid).
    /// (Under `LiveSplit::steady`, as a hold-off is: the two do not cross.)
    pub(crate) fn refund(
        &self,
        (bucket, generation): (u32, u64),
        cost: u64,
        split: &Split,
    ) -> bool {
        let here = self.paid_by(bucket, generation, split.buckets);
        if here {
            let now = self.now();
            let capacity = split.pace.capacity(split.burst_of(bucket));
            let held = self.held_until(bucket);
            self.swap(bucket, |tat| {
                let back = refund(tat, cost, capacity, now);
                unheld(tat, back, held, capacity, split.interval(), now)
            });
        }
        here
    }

    /// The instant of the last hold-off on `bucket` (0: never held).
    fn held_until(&self, bucket: u32) -> u64 {
        (self.held.get(bucket as usize)).map_or(0, |held| held.load(Ordering::Acquire))
    }

    /// Whether `bucket` is among `buckets` and no younger than the split's
    /// version `generation`: the bucket that paid a grant drawn then.
    fn paid_by(&self, bucket: u32, generation: u64, buckets: u32) -> bool {
        bucket < buckets
            && (self.born.get(bucket as usize))
                .is_some_and(|born| born.load(Ordering::Relaxed) <= generation)
    }

    /// Gives a booking back to the buckets that paid it, where nothing
    /// drew on them since (`give_back` of `src/draw/`).
    fn return_booked(&self, core: &Core, booked: &Booked) {
        let now = self.now();
        core.split.steady(|split| {
            for (payment, &written) in booked.grant.payments().iter().zip(&booked.written) {
                let (b, cost) = (
                    payment.bucket(),
                    u64::from(payment.tokens()).saturating_mul(split.interval()),
                );
                let (capacity, held) = (split.pace.capacity(split.burst_of(b)), self.held_until(b));
                self.swap(b, |tat| {
                    let back = give_back(tat, written, cost, now);
                    unheld(tat, back, held, capacity, split.interval(), now)
                });
            }
        });
    }

    /// Moves `bucket` to `f` of its arrival time, by compare-and-swap.
    fn swap(&self, bucket: u32, f: impl Fn(u64) -> u64) {
        let tat = &self.tats[bucket as usize];
        let mut seen = tat.load(Ordering::Relaxed);
        loop {
            let new = f(seen);
            if new == seen {
                return;
            }
            match tat.compare_exchange_weak(seen, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(actual) => seen = actual,
            }
        }
    }

    /// Applies a change of the quota, N or both (see the `set_*` methods
    /// of [`ShardedLimiter`](crate::ShardedLimiter) for what each keeps).
    pub(crate) fn change(&self, core: &Core, change: Change) -> Result<(), ConfigError> {
        match change {
            Change::HoldOff(shard, duration) => {
                self.hold_off(core, shard.as_ref(), duration);
                Ok(())
            }
            Change::Quota(quota) => core.split.change(
                |_, split| Ok((quota, Split::of(quota, split.buckets)?)),
                |from, to, version| self.rescale(from, to, version),
            ),
            Change::Buckets(buckets) => core.split.change(
                |quota, _| Ok((quota, core.split_over(quota, buckets)?)),
                |from, to, version| self.resize(from, to, version),
            ),
            Change::Both(quota, buckets) => {
                let same_n = Cell::new(false);
                core.split.change(
                    |_, split| {
                        same_n.set(split.buckets == buckets);
                        Ok((quota, core.split_over(quota, buckets)?))
                    },
                    // The whole move is made while checks wait, so none sees
                    // a pair between the two; a new N keeps tokens
                    // (`resize`), which is also the move that can only cost
                    // the budget when the quota changes with it.
                    |from, to, version| {
                        if same_n.get() {
                            self.rescale(from, to, version);
                        } else {
                            self.resize(from, to, version);
                        }
                    },
                )
            }
        }
    }

    /// Holds off the shard's own buckets (or every bucket) until
    /// `duration` from now (`hold` of `src/draw/`). A check that raced it
    /// loses its compare-and-swap and draws again; a wait that booked a
    /// slot before the instant books again (see
    /// [`held_over`](Self::held_over)), one whose slot is at or after it
    /// keeps it. The quota and N stay, so no version of the split is spent.
    pub(crate) fn hold_off(&self, core: &Core, shard: Option<&Shard>, duration: Duration) {
        if duration.is_zero() {
            return; // nothing to wait for: every token stays
        }
        // At most MAX_HOLD_OFF (a `HoldOff` is cut to it): no overflow.
        let lead = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        // Held still: a change of N or of the quota waits for it.
        core.split.steady(|split| {
            let until = self.now().saturating_add(lead).min(MAX_NOW);
            let buckets: Vec<u32> = match shard {
                None => (0..split.buckets).collect(),
                Some(shard) => (shard.buckets().iter().copied())
                    .filter(|&b| b < split.buckets)
                    .collect(),
            };
            // The held buckets come back one after another, the first at
            // the instant, so that together they resume at their rate
            // rather than as a burst of one token each.
            let stagger = split.interval() / buckets.len().max(1) as u64;
            for (i, &b) in buckets.iter().enumerate() {
                let until = until
                    .saturating_add(turn(stagger, i as u64, lead))
                    .min(MAX_NOW);
                // The instant first, so that a wait waking on a slot the
                // hold takes sees it.
                self.held[b as usize].fetch_max(until, Ordering::AcqRel);
                let capacity = split.pace.capacity(split.burst_of(b));
                self.swap(b, |tat| hold(tat, until, capacity, split.interval()));
            }
        });
    }

    /// Whether a hold-off holds every own bucket of `shard` past `now`:
    /// the upstream said stop for this tenant (or for all), and its spill
    /// buckets, which the hold-off leaves to their owners, lend it
    /// nothing until then.
    pub(crate) fn held_off(&self, shard: &Shard, now: u64) -> bool {
        (shard.buckets().iter()).all(|&b| {
            self.held
                .get(b as usize)
                .is_some_and(|held| held.load(Ordering::Acquire) > now)
        })
    }

    /// Whether a hold-off came after `booked` was drawn and holds one of
    /// its buckets past the slot it booked there: its slot there is the
    /// arrival time it wrote less the bucket's capacity (when that
    /// bucket's last token of it conforms), and no grant may come before
    /// the hold-off's instant.
    pub(crate) fn held_over(&self, core: &Core, booked: &Booked) -> bool {
        core.split.steady(|split| {
            let payments = booked.grant.payments().iter().zip(booked.written);
            payments.into_iter().any(|(payment, written)| {
                let b = payment.bucket();
                let Some(held) = self.held.get(b as usize) else {
                    return false;
                };
                let capacity = split.pace.capacity(split.burst_of(b));
                written.saturating_sub(capacity) < held.load(Ordering::Acquire)
            })
        })
    }

    /// Gives back every token `grant` took, to the buckets that paid them
    /// and still exist (see [`ShardedLimiter::refund`](crate::ShardedLimiter::refund)).
    pub(crate) fn refund_grant(&self, core: &Core, grant: Grant) -> Refunded {
        let refunds = grant.refunds(grant.tokens()).expect("a grant's own tokens");
        core.split.steady(|split| {
            let mut refunded = Refunded::default();
            for payment in refunds {
                let (bucket, tokens) = (payment.bucket(), payment.tokens());
                // Drawn under an earlier quota, the tokens may outweigh
                // what this one's pace can count; a refund is capped at a
                // full bucket anyway.
                let cost = u64::from(tokens).saturating_mul(split.interval());
                let here = (bucket, grant.generation().1);
                refunded.add(tokens, self.refund(here, cost, &split));
            }
            refunded
        })
    }

    /// Takes up to `tokens` more from the buckets that paid `grant` (and
    /// still exist), in the order they paid, each down to a burst of debt
    /// (`charge` of `src/draw/`): the tokens taken.
    pub(crate) fn charge_grant(&self, core: &Core, grant: &Grant, tokens: u32) -> u32 {
        core.split.steady(|split| {
            let mut left = tokens;
            for payment in grant.payments() {
                let bucket = payment.bucket();
                let paid = payment.tokens() > 0
                    && self.paid_by(bucket, grant.generation().1, split.buckets);
                if left == 0 || !paid {
                    continue;
                }
                let capacity = split.pace.capacity(split.burst_of(bucket));
                let tat = &self.tats[bucket as usize];
                let mut seen = tat.load(Ordering::Relaxed);
                loop {
                    let now = self.now();
                    let (next, taken) = charge(seen, left, split.interval(), capacity, now);
                    if taken == 0 {
                        break;
                    }
                    match tat.compare_exchange_weak(
                        seen,
                        next,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => {
                            left -= taken;
                            break;
                        }
                        Err(actual) => seen = actual,
                    }
                }
            }
            tokens - left
        })
    }

    /// The state of every bucket 0..N now.
    pub(crate) fn snapshot(&self, core: &Core) -> Vec<BucketState> {
        let states = self.steady_read(core, |split, now| {
            (0..split.buckets)
                .map(|b| {
                    let tat = self.tat(b);
                    let burst = split.burst_of(b);
                    let room = Pace::room(split.pace.capacity(burst), tat, now);
                    BucketState {
                        bucket: b,
                        available: split.pace.tokens(room),
                        burst,
                        full_in: Duration::from_nanos(tat.saturating_sub(now)),
                    }
                })
                .collect::<Vec<_>>()
        });
        for state in &states {
            core.metrics.available(state.bucket, state.available);
        }
        states
    }
}

#[allow(private_interfaces)] // see `Apply`
impl<C: Clock> Apply for InProcess<C> {
    type Error = ConfigError;
    type Pending = Ready<Result<Grant, Denied>>;
    type Booking = Ready<Result<Booked, NotReserved>>;

    #[inline]
    fn apply(&self, core: &Core, whom: Whom<'_>, n: u32) -> Self::Pending {
        ready(self.take(core, &whom, n))
    }

    fn denied(denied: Denied) -> Self::Pending {
        ready(Err(denied))
    }

    fn refund(
        &self,
        core: &Core,
        grant: Grant,
    ) -> impl Future<Output = Result<Refunded, ConfigError>> + Send {
        ready(Ok(self.refund_grant(core, grant)))
    }

    fn charge(
        &self,
        core: &Core,
        grant: Grant,
        tokens: u32,
    ) -> impl Future<Output = Result<u32, ConfigError>> + Send {
        ready(Ok(self.charge_grant(core, &grant, tokens)))
    }

    fn change(
        &self,
        core: &Core,
        change: Change,
    ) -> impl Future<Output = Result<(), ConfigError>> + Send {
        ready(InProcess::change(self, core, change))
    }

    fn remaining(
        &self,
        core: &Core,
        whom: Whom<'_>,
    ) -> impl Future<Output = Result<u64, ConfigError>> + Send {
        ready(Ok(InProcess::remaining(self, core, &whom)))
    }

    fn snapshot(
        &self,
        core: &Core,
    ) -> impl Future<Output = Result<Vec<BucketState>, ConfigError>> + Send {
        ready(Ok(InProcess::snapshot(self, core)))
    }

    fn book(&self, core: &Core, whom: Whom<'_>, n: u32, lead: Duration) -> Self::Booking {
        // Beyond 584 years the clock is capped anyway.
        let lead = u64::try_from(lead.as_nanos()).unwrap_or(u64::MAX);
        ready(
            self.take_ahead(core, &whom, n, lead)
                .map_err(NotReserved::drawn),
        )
    }

    fn give_back(&self, core: &Core, booked: Booked) {
        self.return_booked(core, &booked);
    }

    fn held_over(&self, core: &Core, booked: &Booked) -> bool {
        InProcess::held_over(self, core, booked)
    }
}

impl<C: Clock> Store for InProcess<C> {}
