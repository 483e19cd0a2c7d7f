//! The decision, written once: read a tenant's k buckets, pick the one with
//! the most room, take from it, or say when to retry.
//!
//! [`draw`] is a pure function over plain numbers — no atomics, no I/O, no
//! clock — so every store applies the same rules: the in-process store loads
//! its atomics, calls it and compare-and-swaps the winner; the Redis store
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

/// The pace every bucket of a limiter shares: one token per `interval` units
/// of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pace {
    /// Units of time between two tokens of one bucket.
    interval: u64,
    /// `⌊2^(63+shift) / interval⌋ + 1`, so that counting tokens is a
    /// multiply and a shift instead of a division (see [`Pace::tokens`]).
    magic: u64,
    /// `⌈log₂ interval⌉`.
    shift: u32,
}

impl Pace {
    /// One token every `interval` units (at least 1, at most 2⁶²). (Not
    /// called `new`: cargo-mutants leaves functions of that name alone; see
    /// TESTING.md.)
    pub(crate) const fn every(interval: u64) -> Pace {
        let shift = u64::BITS - (interval - 1).leading_zeros();
        Pace {
            interval,
            magic: ((1u128 << (63 + shift)) / interval as u128 + 1) as u64,
            shift,
        }
    }

    /// Units of time between two tokens.
    #[inline]
    pub(crate) fn interval(self) -> u64 {
        self.interval
    }

    /// The credit of a full bucket holding `burst` tokens.
    #[inline]
    pub(crate) fn capacity(self, burst: u32) -> u64 {
        u64::from(burst) * self.interval
    }

    /// Credit left at `now` in a bucket of `capacity`: `capacity − max(tat −
    /// now, 0)`, never below zero.
    #[inline]
    pub(crate) fn room(capacity: u64, tat: u64, now: u64) -> u64 {
        capacity.saturating_sub(tat.saturating_sub(now))
    }

    /// `⌊room / interval⌋`, exactly, for any room below 2⁶³ (room never
    /// exceeds 2⁶²), by one multiply and two shifts.
    ///
    /// With `l = ⌈log₂ interval⌉` and `magic = ⌊2^(63+l) / interval⌋ + 1`,
    /// `magic · interval` lies in `(2^(63+l), 2^(63+l) + 2^l]`, which makes
    /// `⌊room · magic / 2^(63+l)⌋` the exact quotient of every room below
    /// 2⁶³ (Granlund and Montgomery, "Division by invariant integers using
    /// multiplication", 1994, theorem 4.2). `magic` is below 2⁶⁴ because
    /// `interval > 2^(l−1)`. Doubling the room first turns the shift by
    /// `63 + l` into taking the high word and shifting it by `l`.
    #[inline]
    pub(crate) fn tokens(self, room: u64) -> u64 {
        let high = ((u128::from(room << 1) * u128::from(self.magic)) >> 64) as u64;
        high >> self.shift
    }
}

/// What [`draw`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The bucket at shard position `index` pays; its arrival time becomes
    /// `tat` (unchanged for a request of 0 tokens, which takes nothing).
    Grant {
        /// Position in the shard of the bucket that pays.
        index: usize,
        /// That bucket's arrival time as read, for the store's
        /// compare-and-swap.
        seen: u64,
        /// That bucket's new arrival time.
        tat: u64,
        /// Whole tokens left over the shard's buckets after the grant.
        remaining: u64,
        /// Units of time until every bucket of the shard is full again.
        full_in: u64,
    },
    /// No bucket has room; the one at position `index` can pay first, at
    /// `at` (always later than `now`).
    Deny {
        /// Position in the shard of the bucket that has room first.
        index: usize,
        /// When it has room.
        at: u64,
    },
}

/// Which positions of a draw are the tenant's own buckets and which are
/// spill buckets it may borrow from, and how much of a spill bucket its
/// owners keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// k: positions `0..own` are the tenant's own buckets.
    pub(crate) own: usize,
    /// d: positions `own..own + spill` are its spill buckets.
    pub(crate) spill: usize,
    /// The lender's reserve as a fraction of a bucket's capacity, in units
    /// of 2⁻³²: a borrower may take a spill bucket's room above
    /// ⌈capacity · reserve / 2³²⌉ only.
    pub(crate) reserve: u32,
}

impl Span {
    /// k own buckets and no borrowing.
    #[cfg(test)]
    pub(crate) fn own(k: usize) -> Span {
        Span {
            own: k,
            spill: 0,
            reserve: 0,
        }
    }

    /// The credit a borrower must leave in a spill bucket of `capacity`.
    #[inline]
    pub(crate) fn reserve_of(self, capacity: u64) -> u64 {
        ((u128::from(capacity) * u128::from(self.reserve)).div_ceil(1 << 32)) as u64
    }
}

/// The request as every path of the draw sees it.
#[derive(Clone, Copy)]
struct Ask {
    now: u64,
    n: u32,
    cost: u64,
}

/// Decides a request of `n` tokens against a shard: `burst(j)` and `tat(j)`
/// give the full burst and the arrival time of the bucket at shard position
/// `j`, the tenant's own buckets first and its spill buckets after them (the
/// in-process store loads its atomic there). The own positions are asked
/// once each, in order; only when none of them can pay are they asked again,
/// and the spill positions once.
///
/// - The winner is the own bucket with the most room, if that room fits the
///   cost. Where several have that much, the first of them at or after
///   position `start()` pays, wrapping around: callers pick the start at
///   random, so equally roomy buckets favour none. `start` is called only
///   then, so that the common case does not wait for a random number.
/// - When no own bucket can pay, a spill bucket may: the one with the most
///   room above its reserve, if that fits the cost (equal room to the
///   higher rank).
/// - Without a winner, the denial names the bucket that can pay soonest
///   among those whose capacity (above the reserve, for a spill bucket)
///   could ever hold the cost: the earliest `at`, an equal `at` going to
///   the lower position.
/// - A grant counts the whole tokens of every own bucket, and the longest
///   wait until one (or the spill bucket that paid) is full, for its
///   `remaining` and `full_in`.
///
/// A request of 0 tokens is granted by the roomiest own bucket without
/// moving any arrival time. A request that no bucket could ever hold is
/// denied with `at = u64::MAX`; callers refuse such weights before drawing.
///
/// Two buckets per tenant, the default, take a straight-line path with the
/// same results as the general one.
#[inline]
pub(crate) fn draw(
    pace: Pace,
    span: Span,
    burst: impl Fn(usize) -> u32 + Copy,
    tat: impl Fn(usize) -> u64 + Copy,
    now: u64,
    n: u32,
    start: impl FnOnce() -> usize,
) -> Outcome {
    let ask = Ask {
        now,
        n,
        cost: u64::from(n) * pace.interval,
    };
    let own = if span.own == 2 {
        pair(pace, burst, tat, ask, start)
    } else {
        any(pace, span.own, burst, tat, ask, start)
    };
    if span.spill > 0 && matches!(own, Outcome::Deny { .. }) {
        return borrow(pace, span, burst, tat, ask);
    }
    own
}

/// [`draw`] for two own buckets, straight-line: both loads issued at once,
/// a branch-free pick, the coin only for a tie.
#[inline]
fn pair(
    pace: Pace,
    burst: impl Fn(usize) -> u32,
    tat: impl Fn(usize) -> u64,
    ask: Ask,
    start: impl FnOnce() -> usize,
) -> Outcome {
    let now = ask.now;
    let (capacity0, capacity1) = (pace.capacity(burst(0)), pace.capacity(burst(1)));
    let (tat0, tat1) = (tat(0), tat(1));
    let room0 = Pace::room(capacity0, tat0, now);
    let room1 = Pace::room(capacity1, tat1, now);
    let best = if room0 == room1 {
        start()
    } else {
        usize::from(room1 > room0)
    };
    let (room, seen) = if best == 0 {
        (room0, tat0)
    } else {
        (room1, tat1)
    };
    if room < ask.cost {
        return deny(&[capacity0, capacity1], &[tat0, tat1], now, ask.cost);
    }
    let tokens = pace.tokens(room0) + pace.tokens(room1);
    let full_in = tat0.max(tat1).saturating_sub(now);
    grant(best, seen, ask, tokens - u64::from(ask.n), full_in)
}

/// [`draw`] for any number of own buckets.
#[inline(never)]
fn any(
    pace: Pace,
    k: usize,
    burst: impl Fn(usize) -> u32,
    tat: impl Fn(usize) -> u64,
    ask: Ask,
    start: impl FnOnce() -> usize,
) -> Outcome {
    let now = ask.now;
    let mut capacities = [0; MAX_K];
    let mut tats = [0; MAX_K];
    let mut rooms = [0; MAX_K];
    let (mut best, mut ties) = (0, 0);
    let (mut tokens, mut full_in) = (0, 0);
    for j in 0..k {
        capacities[j] = pace.capacity(burst(j));
        tats[j] = tat(j);
        rooms[j] = Pace::room(capacities[j], tats[j], now);
        tokens += pace.tokens(rooms[j]);
        full_in = full_in.max(tats[j].saturating_sub(now));
        if j == 0 || rooms[j] > rooms[best] {
            (best, ties) = (j, 1);
        } else if rooms[j] == rooms[best] {
            ties += 1;
        }
    }
    if rooms[best] < ask.cost {
        return deny(&capacities[..k], &tats[..k], now, ask.cost);
    }
    if ties > 1 {
        let most = rooms[best];
        let start = start();
        best = (start..k)
            .chain(0..start)
            .find(|&j| rooms[j] == most)
            .unwrap_or(best);
    }
    grant(best, tats[best], ask, tokens - u64::from(ask.n), full_in)
}

/// The most buckets a shard may have, as the draw's arrays hold them.
const MAX_K: usize = crate::assign::MAX_PER_TENANT as usize;

/// The grant by the bucket at `index`, whose arrival time was `seen`, with
/// the own buckets' `remaining` tokens and `full_in` as read.
#[inline]
fn grant(index: usize, seen: u64, ask: Ask, remaining: u64, full_in: u64) -> Outcome {
    let tat = if ask.n == 0 {
        seen
    } else {
        seen.max(ask.now) + ask.cost
    };
    Outcome::Grant {
        index,
        seen,
        tat,
        remaining,
        full_in: full_in.max(tat.saturating_sub(ask.now)),
    }
}

/// The denial when no own bucket has room for `cost`: the bucket that could
/// ever pay and has room first, an equal time to the lower position.
#[cold]
fn deny(capacities: &[u64], tats: &[u64], now: u64, cost: u64) -> Outcome {
    let (mut index, mut at) = (0, u64::MAX);
    for (j, (&capacity, &tat)) in capacities.iter().zip(tats).enumerate() {
        if capacity >= cost {
            // room < cost, so this is later than `now` (and the subtraction
            // cannot wrap); subtracting first keeps the sum inside u64.
            let at_j = tat.max(now) - (capacity - cost);
            if at_j < at {
                (index, at) = (j, at_j);
            }
        }
    }
    Outcome::Deny { index, at }
}

/// When no own bucket has room for the cost and the tenant may borrow: a
/// spill bucket pays from its room above the reserve, or the denial names
/// the bucket, own or spill, that has room first. Own buckets come first in
/// both, so an equal time goes to an own bucket. (The own buckets are asked
/// for again here, so that the common path hands nothing over to this one.)
#[cold]
#[inline(never)]
fn borrow(
    pace: Pace,
    span: Span,
    burst: impl Fn(usize) -> u32,
    tat: impl Fn(usize) -> u64,
    ask: Ask,
) -> Outcome {
    let (now, cost) = (ask.now, ask.cost);
    let (mut index, mut at) = (0, u64::MAX);
    let mut soonest = |j: usize, capacity: u64, tat: u64| {
        if capacity >= cost {
            // room < cost, so this is later than `now` (and the subtraction
            // cannot wrap); subtracting first keeps the sum inside u64.
            let at_j = tat.max(now) - (capacity - cost);
            if at_j < at {
                (index, at) = (j, at_j);
            }
        }
    };
    let (mut tokens, mut full_in) = (0, 0);
    for j in 0..span.own {
        let (capacity, tat) = (pace.capacity(burst(j)), tat(j));
        tokens += pace.tokens(Pace::room(capacity, tat, now));
        full_in = full_in.max(tat.saturating_sub(now));
        soonest(j, capacity, tat);
    }
    let (mut best, mut best_above, mut best_tat) = (usize::MAX, 0, 0);
    for j in span.own..span.own + span.spill {
        let capacity = pace.capacity(burst(j));
        let tat = tat(j);
        // A borrower sees the bucket as if it were `reserve` smaller.
        let lendable = capacity - span.reserve_of(capacity);
        let above = Pace::room(lendable, tat, now);
        if above >= cost {
            if best == usize::MAX || above > best_above {
                (best, best_above, best_tat) = (j, above, tat);
            }
        } else {
            soonest(j, lendable, tat);
        }
    }
    if best == usize::MAX {
        return Outcome::Deny { index, at };
    }
    // Nothing was taken from the own buckets.
    grant(best, best_tat, ask, tokens, full_in)
}

#[cfg(test)]
mod tests {
    use super::{Outcome, Pace};

    const PACE: Pace = Pace::every(10);

    /// The draw over slices, as the tests write it.
    fn draw(pace: Pace, bursts: &[u32], tats: &[u64], now: u64, n: u32, start: usize) -> Outcome {
        super::draw(
            pace,
            super::Span::own(tats.len()),
            |j| bursts[j],
            |j| tats[j],
            now,
            n,
            || start,
        )
    }

    fn grant_tat(outcome: Outcome) -> u64 {
        match outcome {
            Outcome::Grant { tat, .. } => tat,
            Outcome::Deny { .. } => panic!("denied: {outcome:?}"),
        }
    }

    #[test]
    fn a_fresh_bucket_grants_its_burst_then_refills_one_token_per_interval() {
        let mut tat = 0;
        for _ in 0..3 {
            tat = grant_tat(draw(PACE, &[3], &[tat], 0, 1, 0));
        }
        assert_eq!(tat, 30);
        assert_eq!(
            draw(PACE, &[3], &[tat], 0, 1, 0),
            Outcome::Deny { index: 0, at: 10 }
        );
        assert_eq!(
            draw(PACE, &[3], &[tat], 9, 1, 0),
            Outcome::Deny { index: 0, at: 10 }
        );
        assert_eq!(
            draw(PACE, &[3], &[tat], 10, 1, 0),
            Outcome::Grant {
                index: 0,
                seen: 30,
                tat: 40,
                remaining: 0,
                full_in: 30
            }
        );
    }

    #[test]
    fn an_earlier_reading_of_the_clock_only_shrinks_the_room() {
        let tat = grant_tat(draw(PACE, &[3], &[0], 100, 3, 0));
        assert_eq!(tat, 130);
        assert_eq!(
            draw(PACE, &[3], &[tat], 105, 1, 0),
            Outcome::Deny { index: 0, at: 110 }
        );
        assert!(Pace::room(30, tat, 50) < Pace::room(30, tat, 110));
    }

    #[test]
    fn the_roomiest_bucket_pays_and_ties_go_to_the_first_visited() {
        // Rooms at now = 100: 10, 30, 30 (capacities 30, 30, 30).
        let tats = [120, 0, 50];
        let index = |start| match draw(PACE, &[3, 3, 3], &tats, 100, 1, start) {
            Outcome::Grant { index, .. } => index,
            denied => panic!("{denied:?}"),
        };
        assert_eq!(index(0), 1);
        assert_eq!(index(1), 1);
        assert_eq!(index(2), 2);
        match draw(PACE, &[3, 3, 3], &tats, 100, 1, 0) {
            Outcome::Grant {
                tat,
                remaining,
                full_in,
                ..
            } => assert_eq!((tat, remaining, full_in), (110, 1 + 3 + 3 - 1, 20)),
            denied => panic!("{denied:?}"),
        }
    }

    #[test]
    fn a_denial_names_the_soonest_bucket_that_could_ever_pay() {
        // Bursts 1, 3, 3: a request of 2 can never fit the first bucket, so
        // it is skipped even though it is the emptiest.
        let tats = [100, 125, 125];
        for start in 0..3 {
            assert_eq!(
                draw(PACE, &[1, 3, 3], &tats, 100, 2, start),
                Outcome::Deny { index: 1, at: 115 },
                "start {start}"
            );
        }
    }

    #[test]
    fn a_denial_prefers_the_sooner_bucket_wherever_the_pass_starts() {
        // Rooms at now = 100: 0 and 10; a request of 2 costs 20. Bucket 1 can
        // pay at 110, bucket 0 only at 120, even when bucket 0 is visited
        // last.
        for start in 0..2 {
            assert_eq!(
                draw(PACE, &[3, 3], &[130, 120], 100, 2, start),
                Outcome::Deny { index: 1, at: 110 },
                "start {start}"
            );
        }
    }

    #[test]
    fn every_bucket_is_visited_once_from_any_start() {
        // Rooms 10, 20, 30, 0: the third pays whatever the start, and the
        // remaining tokens count every bucket once.
        for start in 0..4 {
            assert_eq!(
                draw(PACE, &[3; 4], &[120, 110, 100, 130], 100, 1, start),
                Outcome::Grant {
                    index: 2,
                    seen: 100,
                    tat: 110,
                    remaining: 1 + 2 + 3 - 1,
                    full_in: 30
                },
                "start {start}"
            );
        }
    }

    /// The draw over slices with `spill` of the buckets lending above a
    /// reserve of half their capacity.
    fn lend(bursts: &[u32], tats: &[u64], spill: usize, now: u64, n: u32) -> Outcome {
        let own = tats.len() - spill;
        let span = super::Span {
            own,
            spill,
            reserve: 1 << 31,
        };
        super::draw(PACE, span, |j| bursts[j], |j| tats[j], now, n, || 0)
    }

    #[test]
    fn a_tenant_borrows_from_a_spill_bucket_only_above_its_reserve() {
        // Own buckets empty at now = 100; the spill bucket full: 40 of
        // credit, 20 of them above the reserve.
        let (bursts, mut tats) = ([2, 2, 4], [120, 120, 0]);
        for want in [110, 120] {
            assert_eq!(
                lend(&bursts, &tats, 1, 100, 1),
                Outcome::Grant {
                    index: 2,
                    seen: tats[2],
                    tat: want,
                    remaining: 0,
                    full_in: 20
                }
            );
            tats[2] = want;
        }
        // 20 of credit left: the reserve. An own bucket and the spill
        // bucket have room for one more token at 110; the own one is named.
        assert_eq!(
            lend(&bursts, &tats, 1, 100, 1),
            Outcome::Deny { index: 0, at: 110 }
        );
        // Two tokens never fit above a reserve of 20 in the spill bucket,
        // nor in the first own bucket: the second pays when it is full.
        assert_eq!(
            lend(&[2, 3, 4], &[120, 130, 0], 1, 100, 3),
            Outcome::Deny { index: 1, at: 130 }
        );
    }

    #[test]
    fn own_buckets_pay_before_any_spill_bucket_however_roomy() {
        // One own token left; the spill buckets are full.
        let outcome = lend(&[2, 2, 4, 4], &[110, 120, 0, 0], 2, 100, 1);
        assert_eq!(
            outcome,
            Outcome::Grant {
                index: 0,
                seen: 110,
                tat: 120,
                remaining: 0,
                full_in: 20
            }
        );
        // Once both are empty, the roomier spill bucket above its reserve
        // pays, and the own tokens left are reported as they are.
        let outcome = lend(&[2, 2, 4, 4], &[120, 115, 0, 105], 2, 100, 1);
        assert!(
            matches!(
                outcome,
                Outcome::Grant {
                    index: 2,
                    tat: 110,
                    remaining: 0,
                    ..
                }
            ),
            "{outcome:?}"
        );
        let outcome = lend(&[2, 2, 4, 4], &[120, 115, 115, 0], 2, 100, 1);
        assert!(
            matches!(
                outcome,
                Outcome::Grant {
                    index: 3,
                    tat: 110,
                    remaining: 0,
                    ..
                }
            ),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_reserve_of_nothing_lends_the_whole_bucket_and_one_of_everything_lends_none() {
        let span = |reserve| super::Span {
            own: 1,
            spill: 1,
            reserve,
        };
        assert_eq!(span(0).reserve_of(40), 0);
        assert_eq!(span(1 << 31).reserve_of(40), 20);
        assert_eq!(span(1 << 31).reserve_of(41), 21); // rounded up: owners keep more
        assert_eq!(span(u32::MAX).reserve_of(40), 40);
        assert_eq!(span(u32::MAX).reserve_of(1 << 62), (1 << 62) - (1 << 30));
        let full = |reserve| super::draw(PACE, span(reserve), |_| 4, |j| [200, 0][j], 100, 4, || 0);
        assert!(matches!(
            full(0),
            Outcome::Grant {
                index: 1,
                tat: 140,
                ..
            }
        ));
        assert!(matches!(full(1 << 31), Outcome::Deny { index: 0, at: 200 }));
    }

    #[test]
    fn a_request_of_zero_tokens_moves_nothing_even_after_a_clock_jump_back() {
        // tat far beyond now + capacity: the clock went backwards.
        let outcome = draw(PACE, &[3, 3], &[500, 0], 10, 0, 0);
        assert_eq!(
            outcome,
            Outcome::Grant {
                index: 1,
                seen: 0,
                tat: 0,
                remaining: 3,
                full_in: 490
            }
        );
        assert_eq!(
            draw(PACE, &[3], &[500], 10, 0, 0),
            Outcome::Grant {
                index: 0,
                seen: 500,
                tat: 500,
                remaining: 0,
                full_in: 490
            }
        );
    }

    #[test]
    fn a_cost_larger_than_every_capacity_is_never_granted() {
        assert_eq!(
            draw(PACE, &[3, 2], &[0, 0], u64::MAX / 2, 4, 1),
            Outcome::Deny {
                index: 0,
                at: u64::MAX
            }
        );
        assert!(matches!(
            draw(PACE, &[3], &[0], 0, 3, 0),
            Outcome::Grant { tat: 30, .. }
        ));
    }

    /// Intervals where a multiply-by-reciprocal is most likely to be off:
    /// the smallest, powers of two and their neighbours (where `⌈log₂⌉`
    /// steps), the limiter's real ones and the largest.
    fn awkward_intervals() -> Vec<u64> {
        let mut intervals = vec![1, 3, 7, 10, 49, 98, 103, 999_999_937, 2_142_857_143];
        for bit in 1..=62 {
            let p = 1u64 << bit;
            intervals.extend([p - 1, p, p + 1]);
        }
        intervals.retain(|&d| d <= 1 << 62);
        intervals
    }

    #[test]
    fn counting_tokens_is_exact_division_at_every_edge() {
        for interval in awkward_intervals() {
            let pace = Pace::every(interval);
            // Rooms on both sides of a whole number of tokens, for token
            // counts from 0 to the largest room of all, 2⁶³ − 1.
            let most = (u64::MAX >> 1) / interval;
            let mut counts = vec![0, 1, 2, 3, most - 1, most];
            counts.extend((0..64).map(|b| 1u64 << b).filter(|&c| c <= most));
            for q in counts {
                let whole = q * interval;
                let rooms = [whole.saturating_sub(1), whole, whole + (interval - 1)];
                for room in rooms.into_iter().filter(|&room| room <= u64::MAX >> 1) {
                    assert_eq!(pace.tokens(room), room / interval, "{room} / {interval}");
                }
            }
            assert_eq!(pace.tokens(u64::MAX >> 1), (u64::MAX >> 1) / interval);
        }
    }

    proptest::proptest! {
        /// The straight-line path for two buckets decides as the general
        /// one: same winner, tie, denial and counts, on nearby times so that
        /// ties, empty and full buckets all come up.
        #[test]
        fn two_buckets_draw_as_any_number_do(
            bursts in proptest::array::uniform2(1..=4u32),
            tats in proptest::array::uniform2(0..=80u64),
            now in 0..=60u64,
            n in 0..=5u32,
            start in 0..2usize,
        ) {
            let ask = super::Ask { now, n, cost: u64::from(n) * PACE.interval };
            let (burst, tat) = (|j: usize| bursts[j], |j: usize| tats[j]);
            proptest::prop_assert_eq!(
                super::pair(PACE, burst, tat, ask, || start),
                super::any(PACE, 2, burst, tat, ask, || start)
            );
        }

        #[test]
        fn counting_tokens_is_exact_division(
            interval in 1..=1u64 << 62,
            room in 0..=u64::MAX >> 1,
            small in 0..=1u64 << 20,
        ) {
            let pace = Pace::every(interval);
            proptest::prop_assert_eq!(pace.tokens(room), room / interval);
            proptest::prop_assert_eq!(pace.tokens(small), small / interval);
            let near = (room / interval) * interval;
            proptest::prop_assert_eq!(pace.tokens(near), room / interval);
            proptest::prop_assert_eq!(pace.tokens(near.saturating_sub(1)), near.saturating_sub(1) / interval);
        }
    }
}
