//! The decision, written once: read a tenant's k buckets, pick the one with
//! the most room, take from it, or say when to retry.
//!
//! [`draw`] is a pure function over plain numbers — no atomics, no I/O, no
//! clock — so every store applies the same rules: the in-process store loads
//! its atomics and calls its two parts, [`single`] then, when that declines,
//! [`rest`], compare-and-swapping what each drew; the Redis store
//! runs `src/redis/draw.lua`, which mirrors it line by line (a differential
//! test in `src/redis/script/differential.rs` feeds both the same inputs).
//!
//! # The GCRA
//! A bucket is one number, its theoretical arrival time `tat`: the instant at
//! which it would be full again if nothing more were taken. A bucket that
//! emits one token every `interval` units of time and holds `burst` tokens
//! has a capacity of `burst · interval` units of credit. At time `now` its
//! room is `capacity − max(tat − now, 0)`, never below zero; a request of `n`
//! tokens costs `n · interval` and is granted when it fits in the room, which
//! moves `tat` to `max(tat, now) + cost`.
//!
//! Because each grant advances `tat` by its cost and `tat` never passes
//! `now + capacity`, a bucket grants at most `burst + t / interval` tokens in
//! any window of length `t`, whatever order the readings of `now` arrive in:
//! an early reading only shrinks the room.
//!
//! The unit of time is the store's: nanoseconds in process, microseconds in
//! Redis. The caller keeps `now + capacity` inside `u64` (the stores cap
//! their clock readings), so no sum here can overflow.

mod borrow;
mod pace;
mod pool;
mod rescale;

pub(crate) use borrow::ShardShape;
use borrow::borrow;
pub(crate) use pace::Pace;
pub(crate) use pool::{NoSingle, Pool};
use pool::{declined, short};
pub(crate) use rescale::{
    Step, added, charge, give_back, hold, refund, rescale, resize, turn, unheld,
};

/// What [`draw`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// One own or spill bucket pays.
    Grant(Single),
    /// No own bucket has room for the whole request, but several together
    /// hold its tokens: they pay it together.
    Pooled(Pool),
    /// No bucket has room; the one at position `index` can pay first, at
    /// `at` (always later than `now`).
    Deny {
        /// Position in the shard of the bucket that has room first.
        index: usize,
        /// When it has room.
        at: u64,
    },
}

/// A grant paid by one bucket, the draw's common outcome: small enough for
/// a store to keep in registers (see [`single`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Single {
    /// Position in the shard of the bucket that pays.
    pub(crate) index: usize,
    /// That bucket's arrival time as read, for the store's
    /// compare-and-swap.
    pub(crate) seen: u64,
    /// That bucket's new arrival time (unchanged for a request of 0
    /// tokens, which takes nothing).
    pub(crate) tat: u64,
    /// Whole tokens left over the shard's own buckets after the grant.
    pub(crate) remaining: u64,
    /// Units of time until every bucket of the shard is full again.
    pub(crate) full_in: u64,
}

/// The request as every path of the draw sees it.
#[derive(Clone, Copy)]
struct Ask {
    now: u64,
    /// Tokens asked, widened: a `u32` among `u64`s is copied with its padding
    /// by 8-byte moves, which stall store-to-load forwarding on a hot path.
    n: u64,
    cost: u64,
}

impl Ask {
    /// `n` tokens at `now`.
    #[inline(always)]
    fn of(pace: Pace, now: u64, n: u32) -> Ask {
        Ask {
            now,
            n: u64::from(n),
            // Bounded by `Split::of` for a weight checked under this pace;
            // one checked under another (a change between the two
            // readings) costs all there is rather than wrap to nothing.
            cost: u64::from(n).saturating_mul(pace.interval()),
        }
    }
}

/// Decides a request of `n` tokens against a shard: `burst(j)` and `tat(j)`
/// give the full burst and the arrival time of the bucket at shard position
/// `j`, the tenant's own buckets first and its spill buckets after them (the
/// in-process store loads its atomic there). The own positions are asked
/// once each, in order. When none can pay alone they are asked again, to
/// pool (a single token is pooled only where a store's second reading finds
/// room after all, which asks a third time), and, when they cannot pay
/// together and the tenant has spill buckets, once more to borrow, each
/// spill position once. A single token that no spill bucket could lend is
/// denied from the first reading.
///
/// - The winner is the own bucket with the most room, if that room fits the
///   cost. Where several have that much, the first of them at or after
///   position `start()` pays, wrapping around: callers pick the start at
///   random, so equally roomy buckets favour none. `start` is called only
///   then, so that the common case does not wait for a random number.
/// - When no own bucket can pay alone but their whole tokens add up to the
///   request, they pay it together ([`Pool`]): the roomiest pays all the
///   whole tokens it holds, then the next roomiest, until the request is
///   paid (equal rooms in turn from `start()`).
/// - When the own buckets cannot pay even together, a spill bucket may: the
///   one with the most room above its reserve, if that fits the cost (equal
///   room to the higher rank).
/// - Without a winner, the denial names when the request can be paid first:
///   the earliest instant at which the own buckets' whole tokens add up to
///   it (naming the bucket whose token completes them), or a spill bucket's
///   room above its reserve fits it, an equal time going to the lower
///   position.
/// - A grant counts the whole tokens of every own bucket, and the longest
///   wait until one (or a bucket that paid) is full, for its `remaining`
///   and `full_in`.
///
/// A request of 0 tokens is granted by the roomiest own bucket without
/// moving any arrival time. A request that the own buckets could never hold
/// together nor a spill bucket above its reserve is denied with
/// `at = u64::MAX`; callers refuse such weights before drawing.
///
/// Two buckets per tenant, the default, take a straight-line path with the
/// same results as the general one.
///
/// The draw is [`single`], the common case alone, and [`rest`] when that
/// finds no own bucket with room for the whole request. The in-process store
/// calls the two in turn itself, applying the first before it draws the
/// second, so that the common case never holds the larger outcome; this is
/// their composition as the Lua script runs it, which the differential and
/// property tests hold both to.
#[cfg_attr(not(test), allow(dead_code))] // called by the tests alone
#[inline]
pub(crate) fn draw(
    pace: Pace,
    shape: ShardShape,
    burst: impl Fn(usize) -> u32 + Copy,
    tat: impl Fn(usize) -> u64 + Copy,
    now: u64,
    n: u32,
    start: impl FnOnce() -> usize + Copy,
) -> Outcome {
    match single(pace, shape.own, burst, tat, now, n, start) {
        Ok(single) => Outcome::Grant(single),
        Err(short) => short
            .decided(shape.spill)
            .unwrap_or_else(|| rest(pace, shape, burst, tat, now, n, start)),
    }
}

/// The grant by the roomiest of the `k` own buckets, if its room fits the
/// request (the first rule of [`draw`]); when no own bucket can pay alone,
/// what follows from the same reading ([`NoSingle`]).
#[inline(always)]
pub(crate) fn single(
    pace: Pace,
    k: usize,
    burst: impl Fn(usize) -> u32,
    tat: impl Fn(usize) -> u64,
    now: u64,
    n: u32,
    start: impl FnOnce() -> usize,
) -> Result<Single, NoSingle> {
    let ask = Ask::of(pace, now, n);
    if k == 2 {
        pair(pace, burst, tat, ask, start)
    } else {
        any(pace, k, burst, tat, ask, start)
    }
}

/// The rest of [`draw`], where no own bucket can pay alone: the own buckets
/// together, a spill bucket, or the denial. The buckets are asked for
/// again, so that the common path hands nothing over to this one. (Inlined
/// into its callers, which are cold themselves: called, its pace and shape
/// were copied through the stack in a way that stalled the loads after.)
#[inline(always)]
pub(crate) fn rest(
    pace: Pace,
    shape: ShardShape,
    burst: impl Fn(usize) -> u32 + Copy,
    tat: impl Fn(usize) -> u64 + Copy,
    now: u64,
    n: u32,
    start: impl FnOnce() -> usize,
) -> Outcome {
    let ask = Ask::of(pace, now, n);
    let own = short(pace, shape.own, burst, tat, ask, start);
    if shape.spill > 0 && matches!(own, Outcome::Deny { .. }) {
        return borrow(pace, shape, burst, tat, ask);
    }
    own
}

/// [`single`] for two own buckets, straight-line: both loads issued at
/// once, a branch-free pick, the coin only for a tie.
#[inline(always)]
fn pair(
    pace: Pace,
    burst: impl Fn(usize) -> u32,
    tat: impl Fn(usize) -> u64,
    ask: Ask,
    start: impl FnOnce() -> usize,
) -> Result<Single, NoSingle> {
    let now = ask.now;
    let (capacity0, capacity1) = (pace.capacity(burst(0)), pace.capacity(burst(1)));
    let (tat0, tat1) = (tat(0), tat(1));
    let room0 = Pace::room(capacity0, tat0, now);
    let room1 = Pace::room(capacity1, tat1, now);
    if room0.max(room1) < ask.cost {
        let (capacities, tats) = ([capacity0, capacity1], [tat0, tat1]);
        return Err(declined(2, |j| capacities[j], |j| tats[j], ask));
    }
    let best = if room0 == room1 {
        start()
    } else {
        usize::from(room1 > room0)
    };
    let seen = if best == 0 { tat0 } else { tat1 };
    let tokens = pace.tokens(room0) + pace.tokens(room1);
    let full_in = tat0.max(tat1).saturating_sub(now);
    Ok(grant(best, seen, ask, tokens - ask.n, full_in))
}

/// [`single`] for any number of own buckets: one pass that keeps the most
/// room and which positions have it, then the coin only for a tie.
#[inline(always)]
fn any(
    pace: Pace,
    k: usize,
    burst: impl Fn(usize) -> u32,
    tat: impl Fn(usize) -> u64,
    ask: Ask,
    start: impl FnOnce() -> usize,
) -> Result<Single, NoSingle> {
    let now = ask.now;
    let mut tats = [0; MAX_K];
    // `tied` has bit j set for each position with the most room so far.
    let (mut best, mut most, mut tied) = (0, 0, 0u32);
    let (mut tokens, mut full_in) = (0, 0);
    for (j, read) in tats.iter_mut().enumerate().take(k) {
        *read = tat(j);
        let room = Pace::room(pace.capacity(burst(j)), *read, now);
        tokens += pace.tokens(room);
        full_in = full_in.max(read.saturating_sub(now));
        if j == 0 || room > most {
            (best, most, tied) = (j, room, 1 << j);
        } else if room == most {
            tied |= 1 << j;
        }
    }
    if most < ask.cost {
        return Err(declined(k, |j| pace.capacity(burst(j)), |j| tats[j], ask));
    }
    if tied != 1 << best {
        // The first tied position at or after the start, wrapping.
        let start = start();
        let after = tied >> start;
        best = if after != 0 {
            start + after.trailing_zeros() as usize
        } else {
            tied.trailing_zeros() as usize
        };
    }
    Ok(grant(best, tats[best], ask, tokens - ask.n, full_in))
}

/// The most buckets a shard may have, as the draw's arrays hold them.
pub(crate) const MAX_K: usize = crate::assign::MAX_PER_TENANT as usize;

/// The grant by the bucket at `index`, whose arrival time was `seen`, with
/// the own buckets' `remaining` tokens and `full_in` as read.
#[inline]
fn grant(index: usize, seen: u64, ask: Ask, remaining: u64, full_in: u64) -> Single {
    let tat = if ask.n == 0 {
        seen
    } else {
        seen.max(ask.now) + ask.cost
    };
    Single {
        index,
        seen,
        tat,
        remaining,
        full_in: full_in.max(tat.saturating_sub(ask.now)),
    }
}

/// When a bucket of `capacity` whose room at `now` is short of `cost` will
/// have it; `None` if it never can.
#[inline]
fn room_at(capacity: u64, tat: u64, now: u64, cost: u64) -> Option<u64> {
    // With room short of `cost` this is later than `now`; subtracting
    // first keeps the sum inside u64. (Saturating: a store that read the
    // bucket again may find the room back.)
    (capacity >= cost).then(|| tat.max(now).saturating_sub(capacity - cost))
}

#[cfg(test)]
mod pool_tests;
#[cfg(test)]
mod tests;
