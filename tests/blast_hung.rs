//! Tests for `shuffle_limiter::blast::HungTenant` with borrowing
//! (`BorrowingRadius::hung`): the README's scene, the reduction to no
//! borrowing, and a count over every pair of (shard, spill set) pairs that
//! fills the pools as the in-flight limit does.

use shuffle_limiter::blast::{BlastRadius, Fraction, HungTenant};
use shuffle_limiter::inflight::InFlight;

fn frac(n: u64, d: u64) -> Fraction {
    Fraction::new(n, d).unwrap()
}

fn hung(n: u32, k: u32, d: u32, r: f64, c: u32, h: u32) -> HungTenant {
    let b = BlastRadius::new(n, k).unwrap().borrowing(d, r).unwrap();
    b.hung(c, h).unwrap()
}

#[test]
fn the_readme_scene_with_two_spill_pools_and_half_reserve() {
    // C = 40 over 8 pools of 5, k = 2, d = 2, r = 0.5: each pool keeps
    // ⌈2.5⌉ = 3, lends 2. 40 hung calls hold 10 + 2 · 2 = 14.
    let h = hung(8, 2, 2, 0.5, 40, 40);
    assert_eq!((h.spill(), h.pool_permits()), (2, (14, 14)));
    assert_eq!(*h.p_fills_exact(), frac(1, 1));
    assert_eq!(*h.held_exact(), frac(14, 1));
    assert_eq!(*h.borrowed_exact(), frac(4, 1));
    assert_eq!(h.capacity_left_exact(), frac(26, 40));
    assert_eq!(*h.p_starved_exact(), frac(1, 28 * 15));
    // When the pools the others would borrow from are busy, its twins on
    // its own pools are starved as without borrowing.
    assert_eq!(*h.p_starved_busy_exact(), frac(1, 28));
    assert_eq!(h.tenants_busy(40).fully_down, 39.0 * (1.0 / 28.0));
    assert_eq!(h.tenants_busy(40).unaffected, h.tenants(40).unaffected);
    let t = h.tenants(40);
    assert_eq!(t.fully_down, 39.0 * (1.0 / 420.0));
    assert_eq!(t.unaffected, 39.0 * (6.0 / 28.0));
    let sum = t.fully_down + t.degraded + t.unaffected;
    assert!((sum - 39.0).abs() < 1e-9, "{t:?}");
    // Between its own pools' 10 and the 14 it can hold, a spill pool keeps
    // a permit above its reserve for the others: nobody is starved.
    for calls in 10..14 {
        let h = hung(8, 2, 2, 0.5, 40, calls);
        assert!(h.p_starved_exact().is_zero(), "H = {calls}");
        assert_eq!(*h.borrowed_exact(), frac(u64::from(calls) - 10, 1));
    }
    // Without a reserve it drains its spill pools: 20 held, and a tenant
    // is starved when its 4 pools are its 4, 1 in C(8, 4) = 70.
    let bare = hung(8, 2, 2, 0.0, 40, 40);
    assert_eq!((bare.pool_permits(), bare.capacity_left()), ((20, 20), 0.5));
    assert_eq!(*bare.p_starved_exact(), frac(1, 70));
    // And when busy, every tenant whose own pools are 2 of its 4: 6 of 28.
    assert_eq!(*bare.p_starved_busy_exact(), frac(6, 28));
    assert!(hung(8, 2, 2, 0.0, 40, 19).p_starved_exact().is_zero());
}

#[test]
fn without_spill_pools_it_is_the_report_without_borrowing() {
    for (n, k) in [(8, 2), (7, 3), (5, 1), (6, 6), (12, 4)] {
        let b = BlastRadius::new(n, k).unwrap();
        for r in [0.0, 0.3, 0.5, 0.99] {
            let lending = b.borrowing(0, r).unwrap();
            for c in [n, n + 1, 2 * n - 1, 3 * n + 2, 40] {
                for calls in 0..=c + 1 {
                    let without = b.hung(c, calls).unwrap();
                    assert_eq!(lending.hung(c, calls).unwrap(), without, "{n} {k} {r} {c}");
                    assert!(without.borrowed_exact().is_zero());
                }
            }
        }
    }
}

#[test]
fn pools_that_lend_nothing_leave_tenants_nothing_to_borrow() {
    // C = 6 over N = 4: pools 0 and 1 hold 2, pools 2 and 3 hold 1. With
    // r = 0.5 each keeps 1: a pool of 1 never lends, one of 2 lends 1.
    // k = d = 1 and 2 hung calls: the hung tenant fills its own pool, and a
    // tenant on it is starved when its spill pool has nothing above the
    // reserve. Of the 4 · 3 = 12 pairs of the hung tenant,
    // * own of 2 (2 ways), spill of 2 (1): it holds 2 of its 3, the spill
    //   pool keeps 1 to lend; the two pools of 1 lend nothing: 2 starved;
    // * own of 2 (2), spill of 1 (2): it holds 2, its spill pool and the
    //   other pool of 1 lend nothing: 2;
    // * own of 1 (2), spill of 2 (2): holds 1 + 1, its spill pool is at the
    //   reserve, the other pool of 1 lends nothing: 2;
    // * own of 1 (2), spill of 1 (1): holds 1, only its spill pool: 1.
    // 2 · 2 + 2 · 2 · 2 + 2 · 2 · 2 + 2 · 1 = 22 of 144 pairs of pairs.
    let h = hung(4, 1, 1, 0.5, 6, 2);
    assert_eq!(*h.p_starved_exact(), frac(22, 144));
    assert_eq!(h.pool_permits(), (1, 3));
    // Its held permits: (2 · 2 + 4 · 2 + 4 · 2 + 2 · 1) / 12.
    assert_eq!(*h.held_exact(), frac(22, 12));
    // As high a reserve in pools of 1 and 2 (⌈0.75 · 2⌉ = 2): nobody lends,
    // and a tenant with the hung tenant's pool is starved once it is full.
    let none = hung(4, 1, 1, 0.75, 6, 2);
    assert_eq!(none.pool_permits(), (1, 2));
    assert_eq!(*none.p_starved_exact(), frac(1, 4));
    assert_eq!(
        *none.p_starved_exact(),
        *hung(4, 1, 0, 0.5, 6, 2).p_starved_exact()
    );
    assert!(none.borrowed_exact().is_zero());
}

#[test]
fn the_reserve_is_rounded_as_the_limit_rounds_it() {
    // 0.1 · 10 is 1.0 in f64, though the binary 0.1 is a little above a
    // tenth: the limit keeps 1 permit of each pool of 10 and lends 9.
    let (_, reserves) = split(8, 2, 2, 0.1, 80);
    assert_eq!(reserves, [1; 8]);
    let h = hung(8, 2, 2, 0.1, 80, 80);
    assert_eq!(h.pool_permits(), (38, 38));
    assert_eq!(*h.borrowed_exact(), frac(18, 1));
}

/// The pools of `c` permits over `n`, and what a borrower leaves in each,
/// as a real in-flight limit splits them and rounds the reserve.
fn split(n: u32, k: u32, d: u32, r: f64, c: u32) -> (Vec<u32>, Vec<u32>) {
    let mut builder = InFlight::builder().concurrency(c).pools(n).per_tenant(k);
    if d > 0 {
        builder = builder.borrow_from(d).lender_reserve(r);
    }
    let limit = builder.build().unwrap();
    (0..n).map(|p| (limit.permits(p), limit.reserve(p))).unzip()
}

/// Every (own, spill) pair of pool sets, as bit masks.
fn pairs(n: u32, k: u32, d: u32) -> Vec<(u32, u32)> {
    let sets = |size: u32| (0u32..1 << n).filter(move |m| m.count_ones() == size);
    let mut all = Vec::new();
    for own in sets(k) {
        all.extend(sets(d).filter(|s| s & own == 0).map(|s| (own, s)));
    }
    all
}

/// The pools in `set`, lowest first.
fn members(set: u32) -> impl Iterator<Item = usize> {
    (0..32).filter(move |p| set & (1 << p) != 0)
}

/// The pool of `set` with the most free above `floor`, if any has some.
fn roomiest(set: u32, free: &[u32], floor: &[u32]) -> Option<usize> {
    let room = |p: usize| free[p].saturating_sub(floor[p]);
    members(set)
        .filter(|&p| room(p) > 0)
        .fold(None, |best, p| match best {
            Some(b) if room(b) >= room(p) => Some(b),
            _ => Some(p),
        })
}

#[test]
fn a_count_over_every_pair_of_pairs_agrees_with_the_fractions() {
    // (N, k, d, r, C): uneven splits, pools that lend nothing, r = 0,
    // d = 0 and d = N − k.
    let scenes = [
        (8, 2, 2, 0.5, 40),
        (6, 2, 2, 0.5, 15),
        (6, 2, 2, 0.5, 23),
        (7, 2, 3, 0.5, 10),
        (7, 1, 2, 0.75, 12),
        (6, 2, 2, 0.0, 14),
        (7, 3, 2, 0.1, 17),
        (6, 2, 0, 0.5, 9),
        (5, 1, 4, 0.3, 7),
        (6, 1, 2, 0.0, 8),
        (5, 2, 1, 0.9, 13),
    ];
    for (n, k, d, r, c) in scenes {
        let (shares, reserves) = split(n, k, d, r, c);
        let none = vec![0; n as usize];
        let all = pairs(n, k, d);
        let total = all.len() as u64;
        for calls in 0..=c + 1 {
            let (mut fills, mut starved, mut held, mut borrowed) = (0, 0, 0, 0);
            let mut starved_busy = 0;
            let (mut least, mut most) = (u32::MAX, 0);
            let mut untouched = 0;
            for &(own, spill) in &all {
                // The hung calls take one permit each: an own pool first,
                // the roomiest, then a spill pool, the roomiest above its
                // reserve; once neither has one, the rest wait.
                let mut free = shares.clone();
                let can: u32 = members(own).map(|p| shares[p]).sum::<u32>()
                    + members(spill).map(|p| shares[p] - reserves[p]).sum::<u32>();
                (least, most) = (least.min(can), most.max(can));
                for _ in 0..calls {
                    if let Some(p) = roomiest(own, &free, &none) {
                        free[p] -= 1;
                    } else if let Some(p) = roomiest(spill, &free, &reserves) {
                        free[p] -= 1;
                        borrowed += 1;
                    } else {
                        break;
                    }
                    held += 1;
                }
                let full = roomiest(own, &free, &none).is_none()
                    && roomiest(spill, &free, &reserves).is_none();
                fills += u64::from(full);
                // Another tenant is starved when its own pools are all
                // empty and its spill pools have nothing above the reserve.
                let empty = members(u32::MAX >> (32 - n)).filter(|&p| free[p] == 0);
                let empty: u32 = empty.map(|p| 1 << p).sum();
                let closed: u32 = (0..n as usize)
                    .filter(|&p| free[p] <= reserves[p])
                    .map(|p| 1 << p)
                    .sum();
                for &(x_own, x_spill) in &all {
                    let own_empty = x_own & !empty == 0;
                    starved += u64::from(own_empty && x_spill & !closed == 0);
                    // With every pool it would borrow from busy.
                    starved_busy += u64::from(own_empty);
                    if calls == 0 {
                        untouched += u64::from(x_own & (own | spill) == 0);
                    }
                }
            }
            let h = hung(n, k, d, r, c, calls);
            let scene = format!("N {n} k {k} d {d} r {r} C {c} H {calls}");
            assert_eq!(
                *h.p_starved_exact(),
                frac(starved, total * total),
                "{scene}"
            );
            assert_eq!(*h.p_fills_exact(), frac(fills, total), "{scene}");
            let busy = frac(starved_busy, total * total);
            assert_eq!(*h.p_starved_busy_exact(), busy, "{scene}");
            assert_eq!(*h.held_exact(), frac(held, total), "{scene}");
            assert_eq!(*h.borrowed_exact(), frac(borrowed, total), "{scene}");
            assert_eq!(h.pool_permits(), (least, most), "{scene}");
            if calls == 0 {
                let expected = 9.0 * frac(untouched, total * total).to_f64();
                assert_eq!(h.tenants(10).unaffected, expected, "{scene}");
            }
            if d == 0 {
                let without = BlastRadius::new(n, k).unwrap().hung(c, calls).unwrap();
                assert_eq!(h, without, "{scene}");
            }
        }
    }
}
