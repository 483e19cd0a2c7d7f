//! What one permit took: seats from at most k + d pools, packed into two
//! words, so that a permit is a few words a caller moves for free.
//!
//! Each part of a permit is a pool's number and the seats taken from it.
//! A limit of N pools whose largest share is S packs a part in
//! ⌈log₂ N⌉ + ⌊log₂ S⌋ + 1 bits ([`Packing`]), up to 120 bits in all: 6
//! bits for 40 permits over 8 pools, so every permit of such a limit fits.
//! Only a permit of more parts than that — k + d pools of a limit with both
//! many pools and large shares (eight parts of more than 15 bits, four of
//! more than 30) — keeps its parts in a box instead.
//!
//! Why it matters: an 80-byte permit, built by narrow stores and moved by
//! wide loads, stalled the move on every acquire, and made an uncontended
//! acquire and release cost twice a semaphore's.

use super::pools::MAX;

/// How a limit's permits pack a part: its pool's number in the low
/// `pool_bits` bits, its seats in the bits above, `width` bits in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Packing {
    pool_bits: u32,
    width: u32,
    /// Parts that fit in the packed bits: at least 2 (a width is at most
    /// 16 + 33 bits).
    fits: usize,
}

impl Packing {
    /// For `pools` pools (N ≥ 1) of which the largest holds `most` permits
    /// (≥ 1): no part's seats exceed its pool's share.
    pub(crate) fn of(pools: u32, most: u32) -> Packing {
        let bits = |x: u32| u32::BITS - x.leading_zeros();
        let pool_bits = bits(pools - 1);
        let width = pool_bits + bits(most);
        Packing {
            pool_bits,
            width,
            fits: (PART_BITS / width) as usize,
        }
    }

    #[inline]
    fn part(self, pool: u32, seats: u32) -> u128 {
        u128::from(pool) | u128::from(seats) << self.pool_bits
    }
}

/// The bits of a permit's 128 that hold parts; the top byte holds how many
/// parts there are (bits 120–123) and whether some were borrowed (bit 124).
const PART_BITS: u32 = 120;
const LEN_SHIFT: u32 = 120 - 64;
const BORROWED: u64 = 1 << (124 - 64);

/// What one permit took; see the module documentation.
///
/// Two words of packed parts and a box only for parts past them: every
/// field a whole word, so that moving a permit never stalls on the stores
/// that built it (a one-byte enum tag did).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct Taken {
    /// The parts of [`Packing::width`] bits each, the first in the low
    /// bits of `packed[0]`, zero past the last; the top byte of `packed[1]`
    /// as [`PART_BITS`] says.
    packed: [u64; 2],
    /// Every part, when they are more than the packed bits hold.
    wide: Option<Box<[(u32, u32); MAX]>>,
}

impl Taken {
    /// One seat of `pool`.
    #[inline]
    pub(crate) fn one(pool: u32, packing: Packing) -> Taken {
        Taken {
            // A part is at most 48 bits: it lies in the low word.
            packed: [packing.part(pool, 1) as u64, 1 << LEN_SHIFT],
            wide: None,
        }
    }

    /// One seat borrowed from the spill pool `pool`.
    #[inline]
    pub(crate) fn borrowed_one(pool: u32, packing: Packing) -> Taken {
        let mut taken = Taken::one(pool, packing);
        taken.mark_borrowed();
        taken
    }

    /// How many parts it holds.
    #[inline]
    fn len(&self) -> usize {
        (self.packed[1] >> LEN_SHIFT & 0xF) as usize
    }

    /// The pool of its one seat, if it holds one seat.
    #[inline]
    pub(crate) fn single(&self, packing: Packing) -> Option<u32> {
        let [low, high] = self.packed;
        // One part, alone in the low word, of one seat.
        (high & !BORROWED == 1 << LEN_SHIFT && low >> packing.pool_bits == 1)
            .then_some((low & ((1 << packing.pool_bits) - 1)) as u32)
    }

    /// Whether some of its seats were borrowed from spill pools.
    pub(crate) fn borrowed(&self) -> bool {
        self.packed[1] & BORROWED != 0
    }

    /// Records that some of its seats were borrowed.
    pub(crate) fn mark_borrowed(&mut self) {
        self.packed[1] |= BORROWED;
    }

    /// Adds `seats` of `pool` (nothing for 0); a pool already held gets
    /// them added to its part, so no part holds more than its pool's share.
    pub(crate) fn add(&mut self, pool: u32, seats: u32, packing: Packing) {
        if seats == 0 {
            return;
        }
        let (mut all, len) = self.parts(packing);
        let len = match all[..len].iter().position(|&(p, _)| p == pool) {
            Some(j) => {
                all[j].1 += seats;
                len
            }
            None => {
                all[len] = (pool, seats);
                len + 1
            }
        };
        let mut packed = (len as u128) << PART_BITS | u128::from(self.borrowed()) << 124;
        if len <= packing.fits {
            for (j, &(p, s)) in all[..len].iter().enumerate() {
                packed |= packing.part(p, s) << (j as u32 * packing.width);
            }
            self.wide = None;
        } else {
            self.wide = Some(Box::new(all));
        }
        self.packed = [packed as u64, (packed >> 64) as u64];
    }

    /// Its parts, in the order they were taken, and how many.
    pub(crate) fn parts(&self, packing: Packing) -> ([(u32, u32); MAX], usize) {
        let len = self.len();
        if let Some(wide) = &self.wide {
            return (**wide, len);
        }
        let packed = u128::from(self.packed[0]) | u128::from(self.packed[1]) << 64;
        let pool_mask = (1u128 << packing.pool_bits) - 1;
        let part_mask = (1u128 << packing.width) - 1;
        let mut all = [(0, 0); MAX];
        for (j, part) in all.iter_mut().enumerate().take(len) {
            let bits = packed >> (j as u32 * packing.width) & part_mask;
            *part = (
                (bits & pool_mask) as u32,
                (bits >> packing.pool_bits) as u32,
            );
        }
        (all, len)
    }

    /// Each pool with the seats taken from it.
    pub(crate) fn iter(&self, packing: Packing) -> impl Iterator<Item = (u32, u32)> + use<> {
        let (all, len) = self.parts(packing);
        all.into_iter().take(len)
    }

    /// Seats in all.
    pub(crate) fn seats(&self, packing: Packing) -> u32 {
        self.iter(packing).map(|(_, seats)| seats).sum()
    }
}

#[cfg(all(test, not(shuffle_limiter_loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_part_takes_the_bits_of_a_pool_number_and_of_the_largest_share() {
        // 8 pools (3 bits), shares up to 5 (3 bits): 20 parts fit in
        // the 120 bits.
        assert_eq!(
            Packing::of(8, 5),
            Packing {
                pool_bits: 3,
                width: 6,
                fits: 20
            }
        );
        // One pool needs no bits for its number.
        assert_eq!(
            Packing::of(1, 1),
            Packing {
                pool_bits: 0,
                width: 1,
                fits: 120
            }
        );
        // The widest: 2^16 pools, a share of u32::MAX.
        assert_eq!(Packing::of(1 << 16, u32::MAX).fits, 2);
    }

    #[test]
    fn parts_come_back_as_they_were_added_with_a_pool_held_twice_merged() {
        let packing = Packing::of(8, 5);
        let mut taken = Taken::one(6, packing);
        assert_eq!(taken.single(packing), Some(6));
        taken.add(2, 5, packing);
        taken.add(6, 3, packing);
        taken.add(7, 0, packing);
        assert_eq!(taken.iter(packing).collect::<Vec<_>>(), [(6, 4), (2, 5)]);
        assert_eq!((taken.seats(packing), taken.single(packing)), (9, None));
        assert!(taken.wide.is_none());
        assert!(!taken.borrowed());
        taken.mark_borrowed();
        assert!(taken.borrowed());
        // Two seats of one pool are not a single seat.
        let mut two = Taken::one(3, packing);
        two.add(3, 1, packing);
        assert_eq!((two.single(packing), two.seats(packing)), (None, 2));
        assert!(Taken::borrowed_one(0, packing).borrowed());
    }

    #[test]
    fn parts_past_the_packed_bits_go_in_a_box_and_read_the_same() {
        // 2^16 pools of up to 2^20 permits: 37 bits a part, 3 fit in 120.
        let packing = Packing::of(1 << 16, 1 << 20);
        assert_eq!(packing.fits, 3);
        let mut taken = Taken::default();
        let parts = [(65_535, 1 << 20), (0, 1), (40_000, 77), (12, (1 << 20) - 1)];
        for (j, &(pool, seats)) in parts.iter().enumerate() {
            taken.add(pool, seats, packing);
            assert_eq!(taken.wide.is_some(), j >= 3, "after part {j}");
            assert_eq!(taken.iter(packing).collect::<Vec<_>>(), parts[..=j]);
        }
        taken.mark_borrowed();
        taken.add(0, 2, packing);
        assert_eq!(taken.iter(packing).nth(1), Some((0, 3)));
        assert!(taken.borrowed(), "kept across the move to a box");
    }
}
