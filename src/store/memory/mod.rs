//! The in-process store: one `AtomicU64` arrival time per bucket, each on
//! its own cache line, and the draw applied to them (the limiter's face over
//! it is in `checks.rs`).

mod change;

use std::fmt;
use std::time::Duration;

use crossbeam_utils::CachePadded;

use crate::Shard;
use crate::clock::{Clock, MonotonicClock};
use crate::draw::{self, NoSingle, Outcome, Pool, Single};
use crate::random::tie_break;
use crate::sync::{AtomicU64, Ordering};

use crate::denied::Denied;
use crate::grant::{Booked, Grant, answer};
use crate::plan::whom::{Resolved, Whom};
use crate::plan::{Core, MAX_NOW};

/// Buckets kept in this process's memory: lock-free, with the time read from
/// a [`Clock`]. The store of a [`ShardedLimiter`](crate::ShardedLimiter).
pub struct InProcess<C = MonotonicClock> {
    tats: Box<[CachePadded<AtomicU64>]>,
    /// Per bucket, the version of the split that added it last (0: built
    /// with it): a grant decided under an earlier version was paid by a
    /// bucket of that number that a change of N has removed since. Written
    /// only by changes, read only by refunds, both under the split's lock.
    born: Box<[AtomicU64]>,
    /// Per bucket, the instant the last hold-off held it until (0: never
    /// held): a wait that booked a slot before it may keep its slot only
    /// if the slot is not before that instant.
    held: Box<[AtomicU64]>,
    pub(crate) clock: C,
}

/// The arrival time of a bucket past the last, which the limiter may grow
/// into ([`Builder::max_buckets`](crate::Builder::max_buckets)) or shrank
/// out of: later than any clock reading plus any capacity, so it never has
/// room, and a refund or a give-back leaves it as it is. A check holding a
/// shard from before a change of N may draw on one: it is denied there,
/// and the budget gains nothing.
const SEALED: u64 = u64::MAX;

impl<C: Clock> InProcess<C> {
    /// `buckets` full buckets, and room for `max` in all.
    pub(crate) fn new(buckets: u32, max: u32, clock: C) -> Self {
        let all = max.max(buckets);
        InProcess {
            tats: (0..all)
                .map(|b| CachePadded::new(AtomicU64::new(if b < buckets { 0 } else { SEALED })))
                .collect(),
            born: (0..all).map(|_| AtomicU64::new(0)).collect(),
            held: (0..all).map(|_| AtomicU64::new(0)).collect(),
            clock,
        }
    }

    /// The clock's reading, capped so that no arrival time can overflow.
    #[inline]
    pub(crate) fn now(&self) -> u64 {
        self.clock.now_nanos().min(MAX_NOW)
    }

    #[inline]
    pub(crate) fn tat(&self, bucket: u32) -> u64 {
        self.tats[bucket as usize].load(Ordering::Relaxed)
    }

    /// The draw applied to the atomics, as the caller's answer: the common
    /// case by [`single`](Self::single), the rest of the draw by
    /// [`take_rest`](Self::take_rest). Always inlined, so that the grant is
    /// built where the caller keeps it instead of being copied there, and a
    /// caller that reads only part of it (`is_ok()`) lets the compiler drop
    /// the rest. That pays because every part of a grant is a whole word
    /// (see `Paid`): were a copy to stall on narrower fields, inlining would
    /// only move the stall into the caller's loop.
    #[inline(always)]
    pub(crate) fn take(&self, core: &Core, whom: &impl Resolved, n: u32) -> Result<Grant, Denied> {
        let (shard, now) = (whom.shard(), self.now());
        match self.single(core, shard, whom.buckets(), n, now) {
            Ok((single, version)) => {
                // Counted before the grant is built, not by a borrow of
                // it: a borrowed grant had a place of its own, from which
                // it was copied into the caller's with loads that stalled.
                core.granted(shard.ranked()[single.index]);
                Ok(Grant::single(single, shard, n, 1, version))
            }
            Err(declined) => self.take_rest(core, whom, n, now, declined),
        }
    }

    /// [`take`](Self::take) where no own bucket could pay alone: the denial
    /// the common case found, or the rest of the draw ([`draw::rest`]),
    /// under the split the common case read, at the same instant
    /// ([`after`](Self::after)), so that a denial (a flood's common case)
    /// reads the clock and the buckets once; anything else, or a change
    /// meanwhile, by [`take_again`](Self::take_again).
    #[cold]
    #[inline(never)]
    fn take_rest(
        &self,
        core: &Core,
        whom: &impl Resolved,
        n: u32,
        now: u64,
        declined: Declined,
    ) -> Result<Grant, Denied> {
        if let Declined::NoSingle(version, no_single) = declined
            && let Some(outcome) =
                self.after(core, whom.shard(), n, (now, true), (version, no_single))
        {
            let result = answered(core, outcome, whom.shard(), n, (now, version));
            core.record(&result);
            return result;
        }
        self.take_again(core, whom.whom(), n, now)
    }

    /// What follows when no own bucket could pay alone under the split of
    /// `version` (the common case's [`NoSingle`]): what that reading settles
    /// ([`NoSingle::decided`]), once the split is confirmed unchanged;
    /// otherwise the rest of the draw. `None` as for [`rest`](Self::rest).
    #[inline(always)]
    fn after(
        &self,
        core: &Core,
        shard: &Shard,
        n: u32,
        (now, lend): (u64, bool),
        (version, no_single): (u64, NoSingle),
    ) -> Option<Outcome> {
        match no_single.decided(shard.spill().len()) {
            Some(outcome) => core.split.unchanged(version).then_some(outcome),
            None => self.rest(core, shard, n, (now, lend), version),
        }
    }

    /// The rest of the draw ([`draw::rest`]) at `now`, applied under the
    /// split of `version`, which the common case declined under: the
    /// outcome, or `None` when the split moved on since or another thread
    /// took first (the caller decides again). The split is read again
    /// rather than handed over: copied through the stack, it cost more.
    ///
    /// The spill buckets lend only where `lend` (not to a booking ahead,
    /// see [`take_ahead`](Self::take_ahead)) and while some own bucket is
    /// not held off past `now` ([`held_off`](Self::held_off)).
    #[inline(always)]
    fn rest(
        &self,
        core: &Core,
        shard: &Shard,
        n: u32,
        (now, lend): (u64, bool),
        version: u64,
    ) -> Option<Outcome> {
        let (seen, split) = core.split.read();
        if seen != version {
            return None;
        }
        let shape = (core.shape(shard)).lending(lend, || self.held_off(shard, now));
        let ids = shard.ranked();
        let burst = |j: usize| split.burst_of(ids[j]);
        let tat = |j: usize| self.tat(ids[j]);
        let start = || tie_break(shape.own);
        let outcome = draw::rest(split.pace, shape, burst, tat, now, n, start);
        (self.apply(core, &outcome, ids, version) && core.split.unchanged(version))
            .then_some(outcome)
    }

    /// The common case of [`decide`](Self::decide), in registers: the
    /// roomiest own bucket pays alone ([`draw::single`]). Nothing is drawn
    /// when none can, or when N is no longer `buckets` ([`Declined`]).
    /// (Two own buckets, the default, get a loop of their own, where the
    /// draw's straight-line path is all there is: merged with the general
    /// one, the decision went through the stack.)
    #[inline(always)]
    fn single(
        &self,
        core: &Core,
        shard: &Shard,
        buckets: u32,
        n: u32,
        now: u64,
    ) -> Result<(Single, u64), Declined> {
        match shard.buckets().len() {
            2 => self.single_of(core, shard, 2, buckets, n, now),
            own => self.single_of(core, shard, own, buckets, n, now),
        }
    }

    /// [`single`](Self::single) over the first `own` buckets of `shard`.
    #[inline(always)]
    fn single_of(
        &self,
        core: &Core,
        shard: &Shard,
        own: usize,
        buckets: u32,
        n: u32,
        now: u64,
    ) -> Result<(Single, u64), Declined> {
        let ids = shard.ranked();
        loop {
            let (version, split) = core.split.read();
            if split.buckets != buckets {
                return Err(Declined::StaleShard);
            }
            let burst = |j: usize| split.burst_of(ids[j]);
            let tat = |j: usize| self.tat(ids[j]);
            let start = || tie_break(own);
            let single = match draw::single(split.pace, own, burst, tat, now, n, start) {
                Ok(single) => single,
                Err(no_single) => return Err(Declined::NoSingle(version, no_single)),
            };
            if self.take_single(&single, ids) && core.split.unchanged(version) {
                return Ok((single, version));
            }
        }
    }

    /// Applies a grant paid by one bucket: its compare-and-swap (none for a
    /// request of 0 tokens, which moves nothing).
    #[inline(always)]
    fn take_single(&self, single: &Single, ids: &[u32]) -> bool {
        single.tat == single.seen
            || self.tats[ids[single.index] as usize]
                .compare_exchange_weak(
                    single.seen,
                    single.tat,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                )
                .is_ok()
    }

    /// [`take`](Self::take) beyond the common case: the whole draw at the
    /// same reading of the clock (a denial, a flood's common case, reads it
    /// once), with the caller's shard resolved again while it was resolved
    /// under another N than the one in force.
    #[cold]
    #[inline(never)]
    fn take_again(
        &self,
        core: &Core,
        mut whom: Whom<'_>,
        n: u32,
        now: u64,
    ) -> Result<Grant, Denied> {
        loop {
            let buckets = core.buckets();
            whom.shard = core.resolve_again(&whom, buckets);
            whom.buckets = buckets;
            let decided = self.decide(core, &whom.shard, buckets, n, (now, true));
            if let Some((outcome, version)) = decided {
                let result = answered(core, outcome, &whom.shard, n, (now, version));
                core.record(&result);
                return result;
            }
        }
    }

    /// A grant for `lead` ns from now, taken now: the draw at that instant,
    /// so that requests after it line up behind it (see `book` of
    /// [`Apply`]).
    ///
    /// A spill bucket lends to no booking ahead: the token it would book
    /// comes out of what it holds from now on, which would leave its
    /// owners below their reserve until the slot. A borrower's wait
    /// sleeps until a spill bucket has room above its reserve, and draws
    /// then (`src/wait/queue.rs`).
    fn take_ahead(
        &self,
        core: &Core,
        whom: &Whom<'_>,
        n: u32,
        lead: u64,
    ) -> Result<Booked, Denied> {
        let mut whom = *whom;
        let now = self.now().saturating_add(lead).min(MAX_NOW);
        let (outcome, version) = loop {
            if let Some(decided) = self.decide(core, &whom.shard, whom.buckets, n, (now, lead == 0))
            {
                break decided;
            }
            let buckets = core.buckets();
            whom.shard = core.resolve_again(&whom, buckets);
            whom.buckets = buckets;
        };
        let result = answered(core, outcome, &whom.shard, n, (now, version));
        core.record(&result);
        Ok(Booked::of(result?, &outcome, Duration::from_nanos(lead)))
    }

    /// The whole draw ([`draw`](crate::draw::draw): its common case, then
    /// the rest) applied to the atomics at the instant `now`, drawn again
    /// until it applies with no other thread or change of the split in
    /// between (see `live.rs`), with the split's version it applied under.
    /// `None`, with nothing drawn, when N is no longer `buckets`, the N the
    /// shard was resolved under. Spill buckets lend only where `lend`
    /// (see [`rest`](Self::rest)).
    fn decide(
        &self,
        core: &Core,
        shard: &Shard,
        buckets: u32,
        n: u32,
        (now, lend): (u64, bool),
    ) -> Option<(Outcome, u64)> {
        loop {
            match self.single(core, shard, buckets, n, now) {
                Ok((single, version)) => return Some((Outcome::Grant(single), version)),
                Err(Declined::StaleShard) => return None,
                Err(Declined::NoSingle(version, no_single)) => {
                    let at = (now, lend);
                    if let Some(outcome) = self.after(core, shard, n, at, (version, no_single)) {
                        return Some((outcome, version));
                    }
                }
            }
        }
    }

    /// Applies `outcome`, drawn under the split of `version`, to the
    /// atomics of `ids`: whether it took (a denial takes nothing and always
    /// does).
    #[inline]
    fn apply(&self, core: &Core, outcome: &Outcome, ids: &[u32], version: u64) -> bool {
        match outcome {
            Outcome::Grant(single) => self.take_single(single, ids),
            Outcome::Pooled(pool) => self.take_pooled(core, pool, ids, version),
            Outcome::Deny { .. } => true,
        }
    }

    /// Applies a grant paid by several buckets, all or nothing: each
    /// bucket's compare-and-swap in turn; if one fails, the buckets already
    /// taken from are given back, and the caller draws again.
    ///
    /// A bucket is given back exactly, by a compare-and-swap from the value
    /// written to the value read. If another request has drawn on it in
    /// between (a window of nanoseconds), the tokens stay taken: what that
    /// request did depended on them, and no arithmetic on the bucket alone
    /// can undo them safely once the clock has moved (a refill in between
    /// would be counted twice). The budget can only lose by it, never gain.
    ///
    /// Nor is anything given back once a change has begun since `version`,
    /// the split the pool was drawn under: a change may move a bucket to
    /// the very value the pool wrote (an emptied bucket whose capacity
    /// stays is empty at the same arrival time), and the value read before,
    /// which means full under the old split, would then fill it under the
    /// new one. The give-back holds the split still to know (a lock taken
    /// only when a pooled take lost its race, and waited on only while a
    /// change runs).
    #[cold]
    fn take_pooled(&self, core: &Core, pool: &Pool, ids: &[u32], version: u64) -> bool {
        let bucket = |j: usize| &self.tats[ids[j] as usize];
        for (i, (j, seen, tat, _)) in pool.payments().enumerate() {
            let taken = bucket(j).compare_exchange(seen, tat, Ordering::Acquire, Ordering::Relaxed);
            if taken.is_err() {
                core.split.steady(|_| {
                    if !core.split.unchanged(version) {
                        return;
                    }
                    for (j, seen, tat, _) in pool.payments().take(i) {
                        let _ = (bucket(j)).compare_exchange(
                            tat,
                            seen,
                            Ordering::Relaxed,
                            Ordering::Relaxed,
                        );
                    }
                });
                return false;
            }
        }
        true
    }
}

/// The public answer to a request of `n` tokens drawn at `now` under the
/// split of `version` ([`answer`]). A request is weighed before it is drawn
/// (`check_weight`); a cut of the burst in between leaves a weight no
/// bucket can ever pay, which the draw denies at the end of time: it is
/// denied as never fitting, with the most the split now in force holds.
/// When the split in force holds the weight again (a change back since
/// the draw), the request may be paid soon: it is denied with the
/// shortest retry, never with one at the end of time.
fn answered(
    core: &Core,
    mut outcome: Outcome,
    shard: &Shard,
    n: u32,
    (now, version): (u64, u64),
) -> Result<Grant, Denied> {
    if let Outcome::Deny {
        index,
        at: u64::MAX,
    } = outcome
    {
        core.split.get().check_weight(shard, n)?;
        outcome = Outcome::Deny { index, at: now };
    }
    answer(outcome, shard, n, (now, 1), version)
}

impl<C> fmt::Debug for InProcess<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InProcess")
            .field("buckets", &self.tats.len())
            .finish_non_exhaustive()
    }
}

/// Why the common case of a decision drew nothing.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Declined {
    /// N is no longer the one the shard was resolved under.
    StaleShard,
    /// No own bucket can pay alone under the split read at this version,
    /// and what follows.
    NoSingle(u64, NoSingle),
}

#[cfg(test)]
mod tests;
