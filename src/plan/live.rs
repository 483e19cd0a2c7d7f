//! The split a running limiter decides with, and how it changes while
//! checks run: a sequence lock over three atomics.
//!
//! A check never waits for a lock. It reads the version (even while the
//! split is stable), the split, and the version again, so that it never
//! draws with a split torn between two changes; then it draws,
//! compare-and-swaps its bucket, and reads the version once more; if it
//! moved, the check goes round again. (One exception: a request paid by
//! several buckets together that loses a race gives back what it took
//! holding the split still, so it waits for a change that is running;
//! see `take_pooled` in `src/store/memory/`.)
//!
//! A change, one at a time, makes the version odd, moves every bucket to
//! the new split by a compare-and-swap with `Release` ordering, writes the
//! new split and makes the version even again. Checks that read the odd
//! version wait the few microseconds this takes. A check that read the old
//! version and compare-and-swaps a bucket after it moved has, with its
//! `Acquire` ordering, read from the move, so it sees the version moved and
//! goes round again: whatever value the bucket held, a grant is never
//! decided with one split on a bucket kept in another. Such a check's
//! tokens stay taken (its new arrival time is never earlier than the one it
//! replaced), so a change can only cost the budget, never add to it.
//!
//! # Why not a swapped pointer
//! Each even version already names one immutable split, an epoch. Swapping
//! a pointer to a boxed plan (`arc-swap`, an epoch scheme) would not take
//! the protocol off the check path: a check that compare-and-swaps a bucket
//! while a change moves it must still learn that it decided under the old
//! plan, so it would load the pointer before the draw and compare it after,
//! the version's loads under another name. It would add a dependent load
//! (the plan behind the pointer, where the split's three words are read
//! here side by side from one cache line) and, for `arc-swap`, a
//! thread-local reader slot written and cleared on every check. The cost
//! that stays with a limiter that never changes is the version's loads, of a
//! line no check writes; tiers, nested users and borrowing are out of line
//! until a limiter has them (see `Core::tenant`).

use std::sync::PoisonError;

use super::Split;
use crate::draw::Pace;
use crate::quota::Quota;
use crate::sync::{AtomicU64, Mutex, Ordering, fence, pause};

/// The split, readable by checks without a lock and changeable while they
/// run.
#[derive(Debug)]
pub(crate) struct LiveSplit {
    /// Even while the split is stable, odd while a change moves the buckets.
    version: AtomicU64,
    interval: AtomicU64,
    multiplier: AtomicU64,
    /// The common burst in the high half; below it, the number of larger
    /// buckets and N − 1, 16 bits each (both below 2¹⁶).
    bursts: AtomicU64,
    /// How many changes did more than loosen the split (a cut of the rate
    /// or of a burst, a change of N): a wait keeps a booking made before a
    /// change that only loosened it (see [`tightenings`](Self::tightenings)).
    tightened: AtomicU64,
    /// The quota the split comes from; holding its lock is making a change.
    quota: Mutex<Quota>,
}

impl LiveSplit {
    pub(crate) fn new(quota: Quota, split: Split) -> LiveSplit {
        let live = LiveSplit {
            version: AtomicU64::new(0),
            interval: AtomicU64::new(0),
            multiplier: AtomicU64::new(0),
            bursts: AtomicU64::new(0),
            tightened: AtomicU64::new(0),
            quota: Mutex::new(quota),
        };
        live.write(split);
        live
    }

    /// The split, whole, with the version it was read at, for
    /// [`unchanged`](Self::unchanged) to confirm once the decision is
    /// applied.
    #[inline]
    pub(crate) fn read(&self) -> (u64, Split) {
        let mut attempt = 0;
        loop {
            let version = self.version.load(Ordering::Acquire);
            if version & 1 == 0 {
                let bursts = self.bursts.load(Ordering::Relaxed);
                let pace = Pace::from_parts(
                    self.interval.load(Ordering::Relaxed),
                    self.multiplier.load(Ordering::Relaxed),
                );
                // Confirmed before it is used: words from two changes
                // make a split no quota has (one's rate, the other's
                // bursts), whose arithmetic a draw is not bounded for.
                if self.unchanged(version) {
                    let split = Split {
                        buckets: (bursts & 0xFFFF) as u32 + 1,
                        pace,
                        burst: (bursts >> 32) as u32,
                        larger: (bursts >> 16 & 0xFFFF) as u32,
                    };
                    return (version, split);
                }
            }
            pause(attempt);
            attempt += 1;
        }
    }

    /// Whether no change began since [`read`](Self::read) returned
    /// `version`: then the split it returned is whole, and every bucket the
    /// caller read or swapped since was kept in it.
    #[inline]
    pub(crate) fn unchanged(&self, version: u64) -> bool {
        fence(Ordering::Acquire);
        self.version.load(Ordering::Relaxed) == version
    }

    /// The split now (for everything but a decision, which confirms its
    /// version with [`unchanged`](Self::unchanged) after applying it).
    pub(crate) fn get(&self) -> Split {
        self.read().1
    }

    /// N now, read without the version: for resolving a shard, which a
    /// decision checks against the N it reads with the split.
    #[inline]
    pub(crate) fn buckets(&self) -> u32 {
        (self.bursts.load(Ordering::Relaxed) & 0xFFFF) as u32 + 1
    }

    /// How many changes so far did more than loosen the split. A booking
    /// made before changes that only raised the rate and kept every
    /// bucket's burst (or more) stays good: its slot was paced by a slower
    /// rate, and a bucket owing bookings keeps them in time through a
    /// change (`rescale` of `src/draw/`), so keeping it grants no more
    /// than the new split allows. After a cut it must be made again.
    #[cfg_attr(not(feature = "wait"), allow(dead_code))] // the waits'
    pub(crate) fn tightenings(&self) -> u64 {
        self.tightened.load(Ordering::Acquire)
    }

    /// The quota the split comes from.
    pub(crate) fn quota(&self) -> Quota {
        *self.quota.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes to the quota and split `next` makes of the current ones
    /// (unless it refuses): `rescale(old, new)` must move every bucket to
    /// the new split, each by a compare-and-swap with `Release` ordering,
    /// even where the value stays the same. Checks wait while it runs;
    /// other changes wait their turn, so `next` sees the result of the one
    /// before (a change of quota keeps N, a change of N keeps the quota).
    pub(crate) fn change<E>(
        &self,
        next: impl FnOnce(Quota, Split) -> Result<(Quota, Split), E>,
        rescale: impl FnOnce(Split, Split, u64),
    ) -> Result<(), E> {
        let mut current = self.quota.lock().unwrap_or_else(PoisonError::into_inner);
        let old = self.get();
        let (quota, split) = next(*current, old)?;
        // A change to the same split (over Redis, another process setting
        // the quota in force again) tightens nothing either.
        let loosened = split.buckets == old.buckets
            && split.interval() <= old.interval()
            && (0..old.buckets).all(|b| split.burst_of(b) >= old.burst_of(b));
        if !loosened {
            self.tightened.fetch_add(1, Ordering::Release);
        }
        let version = self.version.load(Ordering::Relaxed);
        self.version.store(version + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        // Even again when this scope ends, even by a panic (of `rescale`,
        // which reads the clock): readers of an odd version wait for it,
        // and would wait for ever. A change that panics before `write`
        // leaves the old split in force, with what it moved already.
        let _done = Even {
            version: &self.version,
            at: version + 2,
        };
        rescale(old, split, version + 2);
        self.write(split);
        *current = quota;
        Ok(())
    }

    /// Runs `f` with the split held still: no change begins until it
    /// returns. For what must not be decided with one split and applied
    /// in another and is too rare to go round again (a refund, which adds
    /// room).
    pub(crate) fn steady<R>(&self, f: impl FnOnce(Split) -> R) -> R {
        let _held = self.quota.lock().unwrap_or_else(PoisonError::into_inner);
        f(self.get())
    }

    fn write(&self, split: Split) {
        // Checked before the first store: nothing below panics, so a split
        // is written whole or not at all.
        debug_assert!(split.larger < 1 << 16 && (1..=1 << 16).contains(&split.buckets));
        let pace = split.pace;
        self.interval.store(pace.interval(), Ordering::Relaxed);
        self.multiplier.store(pace.multiplier(), Ordering::Relaxed);
        let bursts = u64::from(split.burst) << 32
            | u64::from(split.larger) << 16
            | u64::from(split.buckets - 1);
        self.bursts.store(bursts, Ordering::Relaxed);
    }
}

/// Makes a change's version even when dropped: the end of a change, or its
/// panic.
struct Even<'a> {
    version: &'a AtomicU64,
    at: u64,
}

impl Drop for Even<'_> {
    fn drop(&mut self) {
        self.version.store(self.at, Ordering::Release);
    }
}

#[cfg(test)]
#[path = "live_tests.rs"]
mod tests;
