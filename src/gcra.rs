//! The pure GCRA (generic cell rate algorithm) decision, shared by every backend.
//!
//! A bucket is one number, its theoretical arrival time `tat`: the instant at
//! which it would be full again if nothing more were taken. A bucket that
//! emits one token every `interval` nanoseconds and holds `burst` tokens has a
//! capacity of `burst · interval` nanoseconds of credit. At time `now` its room
//! is `capacity − max(tat − now, 0)`; a request of cost `n · interval` is
//! granted when it fits in the room, and moves `tat` to
//! `max(tat, now) + n · interval`.
//!
//! Because each grant advances `tat` by its cost and `tat` never passes
//! `now + capacity`, a bucket grants at most `burst + t / interval` tokens in
//! any window of length `t`, whatever order the readings of `now` arrive in:
//! an early reading only shrinks the room.

/// One bucket's fixed parameters, in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Cell {
    /// Nanoseconds between two tokens (T).
    pub(crate) interval: u64,
    /// `burst · interval`: the credit of a full bucket (τ).
    pub(crate) capacity: u64,
    /// `1 / interval`, so that counting tokens needs no integer division on
    /// the hot path.
    pub(crate) per_ns: f64,
}

impl Cell {
    /// A bucket emitting a token every `interval` ns and holding `burst`.
    pub(crate) fn new(interval: u64, burst: u32) -> Cell {
        Cell {
            interval,
            capacity: u64::from(burst) * interval,
            per_ns: 1.0 / interval as f64,
        }
    }

    /// The same bucket holding `burst` tokens.
    #[inline]
    pub(crate) fn with_burst(self, burst: u32) -> Cell {
        Cell {
            capacity: u64::from(burst) * self.interval,
            ..self
        }
    }

    /// Credit left at `now`, in nanoseconds.
    #[inline]
    pub(crate) fn room(self, tat: u64, now: u64) -> u64 {
        self.capacity.saturating_sub(tat.saturating_sub(now))
    }

    /// Whole tokens that could be taken at `now`.
    #[inline]
    pub(crate) fn available(self, tat: u64, now: u64) -> u64 {
        self.tokens(self.room(tat, now))
    }

    /// `⌊room / interval⌋`, exactly. The floating-point estimate is within
    /// one of the answer (the quotient is below 2³², far inside f64's 53
    /// bits), and one integer step each way corrects it. Room never exceeds
    /// 2⁶², so the signed conversions (one instruction each) are exact enough.
    #[inline]
    pub(crate) fn tokens(self, room: u64) -> u64 {
        let q = (room as i64 as f64 * self.per_ns) as i64 as u64;
        if q * self.interval > room {
            q - 1
        } else if (q + 1) * self.interval <= room {
            q + 1
        } else {
            q
        }
    }

    /// Decides a request costing `cost` nanoseconds of credit at `now`.
    ///
    /// `Ok(new_tat)` grants it; `Err(at)` denies it, `at` being the earliest
    /// instant at which the same request would fit (always later than `now`).
    #[inline]
    pub(crate) fn decide(self, tat: u64, now: u64, cost: u64) -> Result<u64, u64> {
        let new_tat = tat.max(now).saturating_add(cost);
        let at = new_tat - self.capacity.min(new_tat);
        if at <= now { Ok(new_tat) } else { Err(at) }
    }
}

#[cfg(test)]
mod tests {
    use super::Cell;

    const CELL: Cell = Cell {
        interval: 10,
        capacity: 30,
        per_ns: 0.1,
    };

    #[test]
    fn a_fresh_bucket_grants_its_burst_then_refills_one_token_per_interval() {
        let mut tat = 0;
        for _ in 0..3 {
            tat = CELL.decide(tat, 0, 10).unwrap();
        }
        assert_eq!(CELL.decide(tat, 0, 10), Err(10));
        assert_eq!(CELL.decide(tat, 9, 10), Err(10));
        tat = CELL.decide(tat, 10, 10).unwrap();
        assert_eq!(CELL.available(tat, 10), 0);
        assert_eq!(CELL.available(tat, 35), 2);
    }

    #[test]
    fn an_earlier_reading_of_the_clock_only_shrinks_the_room() {
        let tat = CELL.decide(0, 100, 30).unwrap();
        assert_eq!(tat, 130);
        assert_eq!(CELL.decide(tat, 105, 10), Err(110));
        assert!(CELL.room(tat, 50) < CELL.room(tat, 110));
    }

    #[test]
    fn counting_tokens_is_exact_division() {
        for interval in [1, 3, 7, 10, 999_999_937, 2_142_857_143, (1 << 40) + 1] {
            let cell = Cell::new(interval, 5);
            for room in (0..=cell.capacity).step_by((interval / 3).max(1) as usize) {
                for r in [room, room.saturating_sub(1), (room + 1).min(cell.capacity)] {
                    assert_eq!(cell.tokens(r), r / interval, "{r} / {interval}");
                }
            }
        }
        let wide = Cell::new(1, u32::MAX);
        for r in [
            u64::from(u32::MAX),
            u64::from(u32::MAX) - 1,
            1 << 31,
            12_345_678_901 % (1 << 32),
        ] {
            assert_eq!(wide.tokens(r), r);
        }
    }

    #[test]
    fn a_cost_larger_than_the_capacity_is_never_granted() {
        assert!(CELL.decide(0, u64::MAX / 2, 31).is_err());
        assert_eq!(CELL.decide(0, 0, 30), Ok(30));
    }
}
