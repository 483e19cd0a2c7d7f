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
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Pace {
    /// Units of time between two tokens of one bucket.
    interval: u64,
    /// `1 / interval`, so that counting tokens needs no integer division.
    per_unit: f64,
}

impl Pace {
    /// One token every `interval` units (at least 1). (Not called `new`:
    /// cargo-mutants leaves functions of that name alone; see TESTING.md.)
    pub(crate) fn every(interval: u64) -> Pace {
        Pace {
            interval,
            per_unit: 1.0 / interval as f64,
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

    /// `⌊room / interval⌋`, exactly. The floating-point estimate is within
    /// one of the answer (the quotient is below 2³², far inside f64's 53
    /// bits), and one integer step each way corrects it. Room never exceeds
    /// 2⁶², so the signed conversions (one instruction each) are exact enough.
    #[inline]
    pub(crate) fn tokens(self, room: u64) -> u64 {
        let q = (room as i64 as f64 * self.per_unit) as i64 as u64;
        if q * self.interval > room {
            q - 1
        } else if (q + 1) * self.interval <= room {
            q + 1
        } else {
            q
        }
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

/// Decides a request of `n` tokens against the shard's `k` buckets: `burst(j)`
/// and `tat(j)` give the full burst and the arrival time of the bucket at
/// shard position `j` (the in-process store loads its atomic there; each is
/// asked once per position).
///
/// One pass visits the buckets from position `start`, wrapping around
/// (callers pick `start` at random, so equally roomy buckets favour none),
/// and finds at once:
/// - the winner: the first bucket visited whose room fits the cost and that
///   has strictly more room than any bucket before it;
/// - for a denial, the bucket that can pay soonest among those whose
///   capacity could ever hold the cost: the earliest `at`, an equal `at`
///   going to the lower shard position;
/// - the whole tokens of every bucket, and the longest wait until one is
///   full, for the grant's `remaining` and `full_in`.
///
/// A request of 0 tokens is granted by the roomiest bucket without moving
/// any arrival time. A request that no bucket could ever hold is denied with
/// `at = u64::MAX`; callers refuse such weights before drawing.
#[inline]
pub(crate) fn draw(
    pace: Pace,
    k: usize,
    burst: impl Fn(usize) -> u32,
    tat: impl Fn(usize) -> u64,
    now: u64,
    n: u32,
    start: usize,
) -> Outcome {
    let cost = u64::from(n) * pace.interval;
    let (mut best, mut best_room, mut best_tat) = (usize::MAX, 0, 0);
    let (mut soonest, mut soonest_at) = (0, u64::MAX);
    let (mut tokens, mut full_in) = (0, 0);
    let mut j = start;
    for _ in 0..k {
        let (capacity, tat) = (pace.capacity(burst(j)), tat(j));
        let room = Pace::room(capacity, tat, now);
        tokens += pace.tokens(room);
        full_in = full_in.max(tat.saturating_sub(now));
        if room >= cost {
            if best == usize::MAX || room > best_room {
                (best, best_room, best_tat) = (j, room, tat);
            }
        } else if capacity >= cost {
            // room < cost, so `at` is later than `now` (and the subtraction
            // cannot wrap); subtracting first keeps the sum inside u64.
            let at = tat.max(now) - (capacity - cost);
            if at < soonest_at || (at == soonest_at && j < soonest) {
                (soonest, soonest_at) = (j, at);
            }
        }
        j = if j + 1 == k { 0 } else { j + 1 };
    }
    if best == usize::MAX {
        return Outcome::Deny {
            index: soonest,
            at: soonest_at,
        };
    }
    let tat = if n == 0 {
        best_tat
    } else {
        best_tat.max(now) + cost
    };
    Outcome::Grant {
        index: best,
        seen: best_tat,
        tat,
        remaining: tokens - u64::from(n),
        full_in: full_in.max(tat.saturating_sub(now)),
    }
}

#[cfg(test)]
mod tests {
    use super::{Outcome, Pace};

    const PACE: Pace = Pace {
        interval: 10,
        per_unit: 0.1,
    };

    /// The draw over slices, as the tests write it.
    fn draw(pace: Pace, bursts: &[u32], tats: &[u64], now: u64, n: u32, start: usize) -> Outcome {
        super::draw(pace, tats.len(), |j| bursts[j], |j| tats[j], now, n, start)
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

    #[test]
    fn counting_tokens_is_exact_division() {
        for interval in [1, 3, 7, 10, 999_999_937, 2_142_857_143, (1 << 40) + 1] {
            let pace = Pace::every(interval);
            let capacity = pace.capacity(5);
            for room in (0..=capacity).step_by((interval / 3).max(1) as usize) {
                for r in [room, room.saturating_sub(1), (room + 1).min(capacity)] {
                    assert_eq!(pace.tokens(r), r / interval, "{r} / {interval}");
                }
            }
        }
        // Where f64 rounds the quotient down: 49 · (1/49) < 1.
        for interval in [49, 98, 103] {
            assert_eq!(Pace::every(interval).tokens(interval), 1, "{interval}");
            assert_eq!(Pace::every(interval).tokens(interval - 1), 0, "{interval}");
        }
        // Where f64 rounds the room up: 2⁶¹ − 1 becomes 2⁶¹.
        let slow = Pace::every(1 << 61);
        assert_eq!(slow.tokens((1 << 61) - 1), 0);
        assert_eq!(slow.tokens(1 << 61), 1);
        assert_eq!(slow.tokens((1 << 62) - 1), 1);
        assert_eq!(slow.tokens(1 << 62), 2);
        let wide = Pace::every(1);
        for r in [
            u64::from(u32::MAX),
            u64::from(u32::MAX) - 1,
            1 << 31,
            12_345_678_901 % (1 << 32),
        ] {
            assert_eq!(wide.tokens(r), r);
        }
    }
}
