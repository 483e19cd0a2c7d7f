//! The arithmetic of one bucket: the pace all buckets share, a bucket's room
//! at a given time, and its whole tokens, counted exactly without a division.

/// The pace every bucket of a limiter shares: one token per `interval` units
/// of time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pace {
    /// Units of time between two tokens of one bucket.
    interval: u64,
    /// `⌊2^(63+l) / interval⌋ + 1` with `l = ⌈log₂ interval⌉`, so that
    /// counting tokens is a multiply and a shift instead of a division (see
    /// [`Pace::tokens`]).
    multiplier: u64,
    // No third field, not even `l`: at 16 bytes a pace is passed in two
    // registers; at 24 it was copied through the stack on every call, by
    // moves that stalled the loads after them.
}

impl Pace {
    /// One token every `interval` units (at least 1, at most 2⁶²). (Not
    /// called `new`: cargo-mutants leaves functions of that name alone; see
    /// TESTING.md.)
    pub(crate) const fn every(interval: u64) -> Pace {
        let shift = u64::BITS - (interval - 1).leading_zeros();
        Pace {
            interval,
            multiplier: ((1u128 << (63 + shift)) / interval as u128 + 1) as u64,
        }
    }

    /// The pace whose [`interval`](Self::interval) and [`multiplier`](Self::multiplier)
    /// these are, as a store that keeps them in atomics reads them back.
    #[inline]
    pub(crate) fn from_parts(interval: u64, multiplier: u64) -> Pace {
        Pace {
            interval,
            multiplier,
        }
    }

    /// The multiplier of [`tokens`](Self::tokens), kept so that a pace read
    /// back with [`from_parts`](Self::from_parts) needs no division.
    #[inline]
    pub(crate) fn multiplier(self) -> u64 {
        self.multiplier
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
    /// With `l = ⌈log₂ interval⌉` and `multiplier = ⌊2^(63+l) / interval⌋ + 1`,
    /// `multiplier · interval` lies in `(2^(63+l), 2^(63+l) + 2^l]`, which makes
    /// `⌊room · multiplier / 2^(63+l)⌋` the exact quotient of every room below
    /// 2⁶³ (Granlund and Montgomery, "Division by invariant integers using
    /// multiplication", 1994, theorem 4.2). `multiplier` is below 2⁶⁴ because
    /// `interval > 2^(l−1)`. Doubling the room first turns the shift by
    /// `63 + l` into taking the high word and shifting it by `l` (worked
    /// out here from the interval: a count of leading zeros).
    #[inline]
    pub(crate) fn tokens(self, room: u64) -> u64 {
        let high = ((u128::from(room << 1) * u128::from(self.multiplier)) >> 64) as u64;
        high >> (u64::BITS - (self.interval - 1).leading_zeros())
    }
}

#[cfg(test)]
mod tests {
    use super::Pace;

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
