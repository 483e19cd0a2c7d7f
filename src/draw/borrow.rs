//! Borrowing: when none of a tenant's own buckets can pay, one of its spill
//! buckets may, from its room above the reserve its owners keep.

use super::pool::soonest;
use super::{Ask, MAX_K, Outcome, Pace, grant, room_at};

/// Which positions of a draw are the tenant's own buckets and which are
/// spill buckets it may borrow from, and how much of a spill bucket its
/// owners keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShardShape {
    /// k: positions `0..own` are the tenant's own buckets.
    pub(crate) own: usize,
    /// d: positions `own..own + spill` are its spill buckets.
    pub(crate) spill: usize,
    /// The lender's reserve as a fraction of a bucket's capacity, in units
    /// of 2⁻³²: a borrower may take a spill bucket's room above
    /// ⌈capacity · reserve / 2³²⌉ only. (Below 2³², but a `u64`: see the
    /// draw's `Ask`.)
    pub(crate) reserve: u64,
}

impl ShardShape {
    /// k own buckets and no borrowing.
    #[cfg(test)]
    pub(crate) fn own(k: usize) -> ShardShape {
        ShardShape {
            own: k,
            spill: 0,
            reserve: 0,
        }
    }

    /// The shape a draw borrows with: none of the spill buckets lends to a
    /// booking ahead (`now` false: the token it booked would come out of
    /// what the bucket holds from now on, below its owners' reserve until
    /// the slot), nor while a hold-off holds every own bucket (`held_off`,
    /// asked only of a shard with spill buckets). `lenders` in draw.lua
    /// mirrors the hold-off; over Redis a booking ahead sends no spill key.
    #[inline]
    pub(crate) fn lending(self, now: bool, held_off: impl FnOnce() -> bool) -> ShardShape {
        if self.spill > 0 && (!now || held_off()) {
            ShardShape { spill: 0, ..self }
        } else {
            self
        }
    }

    /// The credit a borrower must leave in a spill bucket of `capacity`
    /// whose tokens come every `interval`: the reserve's share of it,
    /// rounded up, unless that is within the share's rounding (2⁻³² of the
    /// capacity, and a unit) above a whole number of tokens, which it then
    /// is. So a reserve of 0.9 of 10 tokens is 9 tokens, not 9 and a
    /// sliver that would keep the tenth from ever being lent.
    #[inline]
    pub(crate) fn reserve_of(self, capacity: u64, interval: u64) -> u64 {
        if self.reserve >= u64::from(u32::MAX) {
            return capacity; // all of it
        }
        // In 2⁻³² units: the share's rounding is at most one part of the
        // capacity, `capacity` of these units.
        let exact = u128::from(capacity) * u128::from(self.reserve);
        let token = u128::from(interval.max(1)) << 32;
        let whole = exact - exact % token;
        if exact - whole <= u128::from(capacity) {
            (whole >> 32) as u64
        } else {
            exact.div_ceil(1 << 32) as u64
        }
    }
}

/// When the own buckets cannot pay even together and the tenant may
/// borrow: a spill bucket pays from its room above the reserve, or the
/// denial names when the request can first be paid, by the own buckets
/// together or by a spill bucket. Own buckets come first, so an equal time
/// goes to them. (The own buckets are asked for again here, so that the
/// common path hands nothing over to this one.)
#[cold]
#[inline(never)]
pub(super) fn borrow(
    pace: Pace,
    shape: ShardShape,
    burst: impl Fn(usize) -> u32,
    tat: impl Fn(usize) -> u64,
    ask: Ask,
) -> Outcome {
    let (now, cost) = (ask.now, ask.cost);
    let (mut capacities, mut tats) = ([0; MAX_K], [0; MAX_K]);
    let (mut tokens, mut full_in) = (0, 0);
    for j in 0..shape.own {
        (capacities[j], tats[j]) = (pace.capacity(burst(j)), tat(j));
        tokens += pace.tokens(Pace::room(capacities[j], tats[j], now));
        full_in = full_in.max(tats[j].saturating_sub(now));
    }
    let (mut index, mut at) = soonest(pace, &capacities[..shape.own], &tats[..shape.own], ask);
    let (mut best, mut best_above, mut best_tat) = (usize::MAX, 0, 0);
    for j in shape.own..shape.own + shape.spill {
        let capacity = pace.capacity(burst(j));
        let tat = tat(j);
        // A borrower sees the bucket as if it were `reserve` smaller.
        let lendable = capacity - shape.reserve_of(capacity, pace.interval());
        let above = Pace::room(lendable, tat, now);
        if above >= cost {
            if best == usize::MAX || above > best_above {
                (best, best_above, best_tat) = (j, above, tat);
            }
        } else if let Some(at_j) = room_at(lendable, tat, now, cost)
            && at_j < at
        {
            (index, at) = (j, at_j);
        }
    }
    if best == usize::MAX {
        return Outcome::Deny { index, at };
    }
    // Nothing was taken from the own buckets.
    Outcome::Grant(grant(best, best_tat, ask, tokens, full_in))
}

#[cfg(test)]
mod tests {
    use super::super::tests::PACE;
    use super::{Outcome, ShardShape};
    use crate::draw::Single;

    /// The draw over slices with `spill` of the buckets lending above a
    /// reserve of half their capacity.
    fn lend(bursts: &[u32], tats: &[u64], spill: usize, now: u64, n: u32) -> Outcome {
        let own = tats.len() - spill;
        let shape = ShardShape {
            own,
            spill,
            reserve: 1 << 31,
        };
        super::super::draw(PACE, shape, |j| bursts[j], |j| tats[j], now, n, || 0)
    }

    #[test]
    fn a_tenant_borrows_from_a_spill_bucket_only_above_its_reserve() {
        // Own buckets empty at now = 100; the spill bucket full: 40 of
        // credit, 20 of them above the reserve.
        let (bursts, mut tats) = ([2, 2, 4], [120, 120, 0]);
        for want in [110, 120] {
            assert_eq!(
                lend(&bursts, &tats, 1, 100, 1),
                Outcome::Grant(Single {
                    index: 2,
                    seen: tats[2],
                    tat: want,
                    remaining: 0,
                    full_in: 20
                })
            );
            tats[2] = want;
        }
        // 20 of credit left: the reserve. An own bucket and the spill
        // bucket have room for one more token at 110; the own one is named.
        assert_eq!(
            lend(&bursts, &tats, 1, 100, 1),
            Outcome::Deny { index: 0, at: 110 }
        );
        // Three tokens never fit above a reserve of 20 in the spill bucket;
        // the own buckets hold them together at 120, when each completes
        // its second token (the lower position is named).
        assert_eq!(
            lend(&[2, 3, 4], &[120, 130, 0], 1, 100, 3),
            Outcome::Deny { index: 0, at: 120 }
        );
    }

    #[test]
    fn own_buckets_pay_before_any_spill_bucket_however_roomy() {
        // One own token left; the spill buckets are full.
        let outcome = lend(&[2, 2, 4, 4], &[110, 120, 0, 0], 2, 100, 1);
        assert_eq!(
            outcome,
            Outcome::Grant(Single {
                index: 0,
                seen: 110,
                tat: 120,
                remaining: 0,
                full_in: 20
            })
        );
        // Once both are empty, the roomier spill bucket above its reserve
        // pays, and the own tokens left are reported as they are.
        let outcome = lend(&[2, 2, 4, 4], &[120, 115, 0, 105], 2, 100, 1);
        assert!(
            matches!(
                outcome,
                Outcome::Grant(Single {
                    index: 2,
                    tat: 110,
                    remaining: 0,
                    ..
                })
            ),
            "{outcome:?}"
        );
        let outcome = lend(&[2, 2, 4, 4], &[120, 115, 115, 0], 2, 100, 1);
        assert!(
            matches!(
                outcome,
                Outcome::Grant(Single {
                    index: 3,
                    tat: 110,
                    remaining: 0,
                    ..
                })
            ),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_borrowed_grant_counts_the_own_tokens_left_too_few_to_pay() {
        // Two tokens asked; the own buckets hold one (rooms 10 and 0 at
        // now = 100), so a spill bucket pays them both, above its reserve
        // of 20, and the own token is still there.
        assert_eq!(
            lend(&[2, 2, 4], &[110, 120, 0], 1, 100, 2),
            Outcome::Grant(Single {
                index: 2,
                seen: 0,
                tat: 120,
                remaining: 1,
                full_in: 20
            })
        );
    }

    #[test]
    fn the_spill_bucket_with_most_room_above_its_reserve_lends_and_a_tie_goes_to_the_first() {
        // Own buckets empty at now = 100; spill rooms above the reserve of
        // 20: 10 and 20 (the second pays), then 20 and 20 (the first does).
        let index = |tats: [u64; 4]| match lend(&[2, 2, 4, 4], &tats, 2, 100, 1) {
            Outcome::Grant(Single { index, .. }) => index,
            denied => panic!("{denied:?}"),
        };
        assert_eq!(index([120, 120, 110, 0]), 3);
        assert_eq!(index([120, 120, 0, 0]), 2);
    }

    #[test]
    fn a_denial_names_a_spill_bucket_that_can_lend_before_the_own_ones_pay() {
        // At now = 100 the own buckets each have a token at 110; the spill
        // bucket has 5 of credit above its reserve of 20, a token's worth
        // at 105.
        let (bursts, tats) = ([2, 2, 4], [120, 120, 115]);
        assert_eq!(
            lend(&bursts, &tats, 1, 100, 1),
            Outcome::Deny { index: 2, at: 105 }
        );
        assert!(matches!(
            lend(&bursts, &tats, 1, 105, 1),
            Outcome::Grant(Single { index: 2, .. })
        ));
    }

    #[test]
    fn no_spill_bucket_lends_ahead_or_while_every_own_bucket_is_held() {
        let shape = ShardShape {
            own: 2,
            spill: 2,
            reserve: 1 << 31,
        };
        let none = ShardShape { spill: 0, ..shape };
        assert_eq!(shape.lending(true, || false), shape);
        assert_eq!(shape.lending(false, || false), none);
        assert_eq!(shape.lending(true, || true), none);
        // A shard without spill buckets is not asked about hold-offs.
        assert_eq!(none.lending(true, || panic!("asked")), none);
    }

    #[test]
    fn a_reserve_of_nothing_lends_the_whole_bucket_and_one_of_everything_lends_none() {
        let shape = |reserve| ShardShape {
            own: 1,
            spill: 1,
            reserve,
        };
        assert_eq!(shape(0).reserve_of(40, 10), 0);
        assert_eq!(shape(1 << 31).reserve_of(40, 10), 20);
        assert_eq!(shape(1 << 31).reserve_of(41, 1), 21); // rounded up: owners keep more
        assert_eq!(shape(1 << 31).reserve_of(50, 10), 25); // half a token is kept
        assert_eq!(shape(u64::from(u32::MAX)).reserve_of(40, 10), 40);
        assert_eq!(
            shape(u64::from(u32::MAX)).reserve_of(1 << 62, 1 << 20),
            1 << 62
        );
        // A share that a float cannot hold exactly (0.9, 0.1) lands a
        // sliver above a whole number of tokens: that number, whatever the
        // interval.
        let parts = |r: f64| (r * 4_294_967_296.0).ceil() as u64;
        for interval in [1, 7, 1_000, 100_000_000, 10_000_000_000, 1 << 58] {
            let capacity = 10 * interval;
            assert_eq!(
                shape(parts(0.9)).reserve_of(capacity, interval),
                9 * interval
            );
            assert_eq!(shape(parts(0.1)).reserve_of(capacity, interval), interval);
            assert_eq!(
                shape(parts(0.25)).reserve_of(capacity, interval),
                capacity / 4 + u64::from(capacity % 4 != 0)
            );
        }
        let full = |reserve| {
            super::super::draw(PACE, shape(reserve), |_| 4, |j| [200, 0][j], 100, 4, || 0)
        };
        assert!(matches!(
            full(0),
            Outcome::Grant(Single {
                index: 1,
                tat: 140,
                ..
            })
        ));
        assert!(matches!(full(1 << 31), Outcome::Deny { index: 0, at: 200 }));
    }
}
