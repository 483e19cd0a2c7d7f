//! The pools: C permits split over N pools, one atomic word each, and the
//! lock-free take and release of the uncontended path.
//!
//! A pool's word holds its free permits in the low 32 bits and, in bit 32,
//! whether callers wait in its queue. While they do, its free permits are
//! theirs: a take without the queue's lock skips the pool (no caller jumps
//! the queue), and only the lock's holder takes from it. A release adds to
//! the word whatever its flag; one that finds the flag set hands the
//! permits on under the lock (`queue.rs`).

use crossbeam_utils::CachePadded;

use super::taken::{Packing, Taken};
use crate::assign::MAX_PER_TENANT;
use crate::sync::{AtomicU64, Ordering};

/// Bit 32 of a pool's word: callers wait in its queue.
pub(super) const QUEUED: u64 = 1 << 32;

/// The low 32 bits of a pool's word: its free permits.
const FREE: u64 = QUEUED - 1;

/// The most pools one permit can come from: a shard's own and spill pools.
pub(super) const MAX: usize = MAX_PER_TENANT as usize;

/// C permits over N pools: ⌊C/N⌋ each, one more for the first C mod N.
pub(crate) struct Pools {
    words: Box<[CachePadded<AtomicU64>]>,
    /// Every pool holds at least this many permits.
    base: u32,
    /// This many pools, the lowest-numbered, hold one more.
    larger: u32,
    /// The permits a borrower leaves free in a pool of `base`, and in one
    /// of `base + 1`: ⌈r · share⌉ for the lender's reserve r.
    reserve: [u32; 2],
    /// How a permit of these pools packs what it took.
    packing: Packing,
}

impl Pools {
    /// `concurrency` permits over `pools` pools, all free; the caller
    /// checked `1 <= pools <= concurrency`.
    pub(crate) fn split(concurrency: u32, pools: u32) -> Pools {
        let (base, larger) = (concurrency / pools, concurrency % pools);
        Pools {
            words: (0..pools)
                .map(|p| CachePadded::new(AtomicU64::new(u64::from(base + u32::from(p < larger)))))
                .collect(),
            base,
            larger,
            reserve: [0, 0],
            packing: Packing::of(pools, base + u32::from(larger > 0)),
        }
    }

    /// The same pools, lending above a reserve of `reserve` (0 ≤ r < 1) of
    /// each pool's share, rounded up to whole permits.
    pub(crate) fn with_reserve(mut self, reserve: f64) -> Pools {
        // Rounded up, but a product a float rounding put a sliver above a
        // whole number of permits (0.3 · 10 = 3.0000000000000004) is that
        // number: the owners keep 3 of 10 there, not 4.
        let keep = |share: u32| {
            let exact = reserve * f64::from(share);
            let near = exact.round();
            let kept = if (exact - near).abs() <= 1e-9 {
                near
            } else {
                exact.ceil()
            };
            (kept as u32).min(share)
        };
        self.reserve = [keep(self.base), keep(self.base + 1)];
        self
    }

    /// The permits of `pool` a borrower leaves to its owners.
    #[inline]
    pub(crate) fn reserve(&self, pool: u32) -> u32 {
        self.reserve[usize::from(pool < self.larger)]
    }

    /// How a permit of these pools packs what it took.
    #[inline]
    pub(crate) fn packing(&self) -> Packing {
        self.packing
    }

    /// N.
    pub(crate) fn len(&self) -> u32 {
        self.words.len() as u32
    }

    /// The permits pool `pool` holds when none is out: its share of C.
    #[inline]
    pub(crate) fn share(&self, pool: u32) -> u32 {
        self.base + u32::from(pool < self.larger)
    }

    /// The free permits of `pool`, its queue's included.
    pub(crate) fn free(&self, pool: u32) -> u32 {
        (self.word(pool).load(Ordering::Acquire) & FREE) as u32
    }

    #[inline]
    pub(super) fn word(&self, pool: u32) -> &AtomicU64 {
        &self.words[pool as usize]
    }

    /// Takes one permit from the pool of `shard` with the most free
    /// permits, among those nobody queues for; ties broken as the rate
    /// limiter breaks them. `None` when none of them has a free permit.
    #[inline]
    pub(crate) fn take_one(&self, shard: &[u32]) -> Option<u32> {
        self.take_one_above(shard, |_| 0)
    }

    /// Borrows one permit from the spill pool of `spill` with the most
    /// free permits above its reserve, among those nobody queues for.
    #[inline]
    pub(crate) fn borrow_one(&self, spill: &[u32]) -> Option<u32> {
        self.take_one_above(spill, |pool| self.reserve(pool))
    }

    /// [`take_one`](Self::take_one), leaving `floor(pool)` permits free in
    /// each pool: the compare-and-swap is on the very word whose room was
    /// read, so a pool never goes below its floor.
    #[inline]
    fn take_one_above(&self, shard: &[u32], floor: impl Fn(u32) -> u32) -> Option<u32> {
        loop {
            let mut words = [0u64; MAX];
            // `tied` has bit j set for each position with the most so far.
            let (mut best, mut most, mut tied) = (0, 0, 0u32);
            for (j, (word, &pool)) in words.iter_mut().zip(shard).enumerate() {
                *word = self.word(pool).load(Ordering::Acquire);
                let free = if *word & QUEUED == 0 {
                    word.saturating_sub(u64::from(floor(pool)))
                } else {
                    0
                };
                if free > most {
                    (best, most, tied) = (j, free, 1 << j);
                } else if free == most {
                    tied |= 1 << j;
                }
            }
            if most == 0 {
                return None;
            }
            if tied != 1 << best {
                best = first_tied(tied, crate::random::tie_break(shard.len()));
            }
            let word = words[best];
            let pool = shard[best];
            if self
                .word(pool)
                .compare_exchange_weak(word, word - 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                return Some(pool);
            }
        }
    }

    /// Takes `seats` permits, all or nothing, from the pools of `shard`
    /// nobody queues for, the roomiest first. When they do not hold that
    /// many together, `Err` with what it took before it found out (often
    /// nothing), for the caller to give back.
    pub(crate) fn take(&self, shard: &[u32], seats: u32) -> Result<Taken, Taken> {
        let mut taken = Taken::default();
        let mut need = seats;
        let mut tried = 0u32; // a bit per position already drained
        while need > 0 {
            let mut best = None;
            let mut most = 0;
            let mut sum = 0u64;
            for (j, &pool) in shard.iter().enumerate() {
                let word = self.word(pool).load(Ordering::Acquire);
                if word & QUEUED != 0 || tried & (1 << j) != 0 {
                    continue;
                }
                sum += word;
                if word > most {
                    (best, most) = (Some(j), word);
                }
            }
            let Some(j) = best.filter(|_| sum >= u64::from(need)) else {
                return Err(taken);
            };
            tried |= 1 << j;
            let got = self.take_up_to(shard[j], need);
            taken.add(shard[j], got, self.packing);
            need -= got;
        }
        Ok(taken)
    }

    /// Takes `seats` permits, all or nothing, from the pools of `own`
    /// first and then from those of `spill` above their reserve, each
    /// group the roomiest first, skipping the pools callers queue for.
    /// When they do not hold that many, `Err` with what it took, for the
    /// caller to give back.
    pub(crate) fn take_borrowing(
        &self,
        own: &[u32],
        spill: &[u32],
        seats: u32,
    ) -> Result<Taken, Taken> {
        let room = |pool: u32, floor: u32| {
            let word = self.word(pool).load(Ordering::Acquire);
            if word & QUEUED != 0 {
                0
            } else {
                (word as u32).saturating_sub(floor)
            }
        };
        // (room, pool, floor, borrowed), own pools first.
        let mut order = [(0u32, 0u32, 0u32, false); MAX];
        let mut len = 0;
        let mut sum = 0u64;
        for (group, pools) in [own, spill].into_iter().enumerate() {
            let start = len;
            for &pool in pools {
                let floor = if group == 0 { 0 } else { self.reserve(pool) };
                let free = room(pool, floor);
                sum += u64::from(free);
                order[len] = (free, pool, floor, group == 1);
                len += 1;
            }
            order[start..len].sort_unstable_by_key(|o| std::cmp::Reverse(o.0));
        }
        let mut taken = Taken::default();
        if sum < u64::from(seats) {
            return Err(taken);
        }
        let mut need = seats;
        for &(_, pool, floor, borrowed) in &order[..len] {
            if need == 0 {
                break;
            }
            let got = self.take_up_to_above(pool, need, floor);
            if borrowed && got > 0 {
                taken.mark_borrowed();
            }
            taken.add(pool, got, self.packing);
            need -= got;
        }
        if need > 0 { Err(taken) } else { Ok(taken) }
    }

    /// Takes up to `most` of `pool`'s free permits if nobody queues for
    /// it; how many it took.
    fn take_up_to(&self, pool: u32, most: u32) -> u32 {
        self.take_up_to_above(pool, most, 0)
    }

    /// [`take_up_to`](Self::take_up_to), leaving `floor` permits free.
    fn take_up_to_above(&self, pool: u32, most: u32, floor: u32) -> u32 {
        let word = self.word(pool);
        let mut seen = word.load(Ordering::Acquire);
        loop {
            if seen & QUEUED != 0 || seen <= u64::from(floor) {
                return 0;
            }
            let got = (seen as u32 - floor).min(most);
            match word.compare_exchange_weak(
                seen,
                seen - u64::from(got),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return got,
                Err(now) => seen = now,
            }
        }
    }

    /// Takes `seats` of `pool`'s free permits for the head of its queue:
    /// only under the queue's lock, which alone takes from a queued pool,
    /// from one that holds them (its free permits can only grow meanwhile).
    pub(super) fn take_queued(&self, pool: u32, seats: u32) {
        let old = self
            .word(pool)
            .fetch_sub(u64::from(seats), Ordering::AcqRel);
        debug_assert!(old & QUEUED != 0 && old & FREE >= u64::from(seats));
    }

    /// Gives `seats` back to `pool`; `true` when callers queue for it, so
    /// that the caller hands them on under the queue's lock.
    #[inline]
    #[must_use]
    pub(crate) fn put(&self, pool: u32, seats: u32) -> bool {
        let old = self
            .word(pool)
            .fetch_add(u64::from(seats), Ordering::AcqRel);
        debug_assert!((old & FREE) + u64::from(seats) <= u64::from(self.share(pool)));
        old & QUEUED != 0
    }

    /// Whether callers queue for `pool`.
    pub(super) fn queued(&self, pool: u32) -> bool {
        self.word(pool).load(Ordering::Acquire) & QUEUED != 0
    }

    /// Marks `pool` as queued for, or not.
    pub(super) fn set_queued(&self, pool: u32, queued: bool) {
        if queued {
            self.word(pool).fetch_or(QUEUED, Ordering::AcqRel);
        } else {
            self.word(pool).fetch_and(!QUEUED, Ordering::AcqRel);
        }
    }
}

/// The first position set in `tied` at or after `start`, wrapping: the
/// rate limiter's tie rule.
#[inline]
fn first_tied(tied: u32, start: usize) -> usize {
    let after = tied >> start;
    if after != 0 {
        start + after.trailing_zeros() as usize
    } else {
        tied.trailing_zeros() as usize
    }
}

#[cfg(all(test, not(shuffle_limiter_loom)))]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up_to_the_concurrency_the_first_pools_one_more() {
        let pools = Pools::split(42, 8);
        let shares: Vec<u32> = (0..8).map(|p| pools.share(p)).collect();
        assert_eq!(shares, [6, 6, 5, 5, 5, 5, 5, 5]);
        assert_eq!(shares.iter().sum::<u32>(), 42);
        assert!((0..8).all(|p| pools.free(p) == pools.share(p)));
    }

    #[test]
    fn a_reserve_a_float_puts_a_sliver_above_whole_permits_keeps_those() {
        // 0.07 · 100 is 7.000000000000001 as a float: 7 kept, not 8; and
        // 0.57 · 100, 56.99999999999999: 57.
        assert_eq!(Pools::split(800, 8).with_reserve(0.07).reserve(0), 7);
        assert_eq!(Pools::split(800, 8).with_reserve(0.57).reserve(0), 57);
        // A true fraction is rounded up: the owners keep more.
        assert_eq!(Pools::split(80, 8).with_reserve(0.25).reserve(0), 3);
    }

    #[test]
    fn one_seat_comes_from_the_roomiest_pool() {
        let pools = Pools::split(6, 2); // 3 and 3
        assert_eq!(pools.take_up_to(0, 2), 2);
        assert_eq!(pools.take_one(&[0, 1]), Some(1));
        assert_eq!(pools.take_one(&[0, 1]), Some(1)); // 1 and 2 free: pool 1
        assert_eq!(pools.free(1), 1);
        // A queued pool is skipped whatever it holds.
        pools.set_queued(1, true);
        assert_eq!(pools.take_one(&[0, 1]), Some(0));
        assert_eq!(pools.take_one(&[0, 1]), None);
        assert!(pools.put(1, 2), "a release to a queued pool says so");
    }

    #[test]
    fn ties_go_either_way() {
        let mut seen = [0; 2];
        for _ in 0..40 {
            let pools = Pools::split(4, 2);
            seen[pools.take_one(&[0, 1]).unwrap() as usize] += 1;
        }
        assert!(seen[0] > 0 && seen[1] > 0, "{seen:?}");
    }

    #[test]
    fn a_weighted_take_is_all_or_nothing_roomiest_first() {
        let pools = Pools::split(5, 2); // 3 and 2
        assert_eq!(pools.take(&[1, 0], 6), Err(Taken::default()));
        assert_eq!((pools.free(0), pools.free(1)), (3, 2));
        let taken = pools.take(&[1, 0], 4).unwrap();
        let packing = pools.packing();
        assert_eq!(taken.iter(packing).collect::<Vec<_>>(), [(0, 3), (1, 1)]);
        assert_eq!(taken.seats(packing), 4);
        let partial = pools.take(&[1, 0], 2).unwrap_err();
        assert_eq!(
            partial.seats(packing),
            0,
            "1 free: it finds out before taking"
        );
        assert_eq!((pools.free(0), pools.free(1)), (0, 1));
    }
}
