//! Tests for `shuffle_limiter::blast::BorrowingRadius`: exact values with
//! spill buckets and a reserve, the reduction to no borrowing, and errors.

use shuffle_limiter::blast::{BlastError, BlastRadius, Count, Fraction};

fn frac(n: u64, d: u64) -> Fraction {
    Fraction::new(n, d).unwrap()
}

/// C(n, r) from full factorial products, an oracle independent of the
/// crate; zero when r > n.
fn c(n: u64, r: u64) -> u64 {
    if r > n {
        return 0;
    }
    let fact = |m: u64| (1..=m).fold(Count::from(1u32), |acc, i| acc * Count::from(i));
    // n! / (r! (n - r)!) as a reduced fraction: a whole number.
    let x = Fraction::new(fact(n), fact(r) * fact(n - r)).unwrap();
    assert_eq!(*x.denom(), Count::from(1u32));
    x.numer().to_u64().unwrap()
}

#[test]
fn eight_buckets_two_own_two_spill_half_reserve() {
    let b = BlastRadius::new(8, 2).unwrap().borrowing(2, 0.5).unwrap();
    assert_eq!((b.spill(), b.reserve()), (2, 0.5));
    assert_eq!(*b.reserve_exact(), frac(1, 2));
    assert_eq!(*b.spill_sets(), Count::from(15u32));
    assert_eq!(b.p_fully_down_exact(), frac(1, 420));
    assert_eq!(b.p_fully_down(), 1.0 / 420.0);
    assert_eq!(b.p_unaffected_exact(), frac(6, 28));
    assert_eq!(b.p_degraded_exact(), frac(420 - 1 - 90, 420));
    assert_eq!(b.p_degraded(), 329.0 / 420.0);
    let t = b.tenants(400);
    assert_eq!(t.fully_down, 399.0 / 420.0);
    assert_eq!(t.unaffected, 399.0 * 3.0 / 14.0);
    assert_eq!(t.degraded, 399.0 * 329.0 / 420.0);
    assert_eq!(b.sustained_share_exact(), frac(1, 2));
    assert_eq!(b.sustained_share(), 0.5);
    // 2/8 of B from its own buckets, 2 · (1 − 1/2) / 8 from the spill set.
    assert_eq!(b.burst_share_exact(), frac(3, 8));
    assert_eq!(b.burst_share(), 0.375);
    assert_eq!(*b.owners_keep_exact(), frac(1, 2));
    assert_eq!(b.owners_keep(), 0.5);
    assert_eq!(b.radius(), &BlastRadius::new(8, 2).unwrap());
}

#[test]
fn borrowing_from_every_other_bucket() {
    // d = N − k: every tenant with the flooder's shard has its spill set
    // too, so as many are down as without borrowing, but no tenant's own
    // buckets are out of the flooder's reach.
    let b = BlastRadius::new(8, 2).unwrap().borrowing(6, 0.5).unwrap();
    assert_eq!(b.p_fully_down_exact(), frac(1, 28));
    assert_eq!(b.p_unaffected_exact(), frac(0, 1));
    assert_eq!(b.p_degraded_exact(), frac(27, 28));
    assert_eq!(b.sustained_share_exact(), frac(1, 1));
    assert_eq!(b.burst_share_exact(), frac(5, 8));
    let t = b.tenants(400);
    assert_eq!((t.fully_down, t.unaffected), (399.0 / 28.0, 0.0));
}

#[test]
fn no_reserve_lets_a_flooder_drain_its_spill_set_to_zero() {
    for (n, k, d) in [(8, 2, 2), (8, 2, 6), (16, 3, 4), (10, 1, 1)] {
        let b = BlastRadius::new(n, k).unwrap().borrowing(d, 0.0).unwrap();
        let (n, k, d) = (u64::from(n), u64::from(k), u64::from(d));
        assert_eq!(b.p_fully_down_exact(), frac(1, c(n, k + d)), "{n} {k} {d}");
        assert_eq!(b.burst_share_exact(), frac(k + d, n));
        assert!(b.owners_keep_exact().is_zero());
        // Unaffected does not depend on the reserve.
        assert_eq!(b.p_unaffected_exact(), frac(c(n - k - d, k), c(n, k)));
    }
}

#[test]
fn the_three_states_add_up_and_match_a_count_over_all_pairs() {
    // Enumerate every (shard, spill set) pair of N = 7 against a fixed
    // flooder and classify it by the definitions, independently of the
    // crate's formulas.
    let n = 7u32;
    let subsets = |size: u32, from: u32| -> Vec<u32> {
        (0u32..1 << n)
            .filter(|m| m.count_ones() == size && m & !from == 0)
            .collect()
    };
    for k in 1..n {
        for d in 0..=n - k {
            for reserve in [0.0, 0.25] {
                let (own_f, spill_f) = ((1u32 << k) - 1, ((1u32 << d) - 1) << k);
                let (mut down, mut untouched, mut all) = (0u64, 0u64, 0u64);
                for own in subsets(k, (1 << n) - 1) {
                    for spill in subsets(d, ((1 << n) - 1) & !own) {
                        all += 1;
                        let reach = own_f | spill_f;
                        let is_down = if reserve == 0.0 {
                            (own | spill) & !reach == 0
                        } else {
                            own == own_f && spill == spill_f
                        };
                        down += u64::from(is_down);
                        untouched += u64::from(own & reach == 0);
                    }
                }
                let b = BlastRadius::new(n, k)
                    .unwrap()
                    .borrowing(d, reserve)
                    .unwrap();
                let what = format!("N {n} k {k} d {d} r {reserve}");
                assert_eq!(b.p_fully_down_exact(), frac(down, all), "{what}");
                assert_eq!(b.p_unaffected_exact(), frac(untouched, all), "{what}");
                assert_eq!(
                    b.p_degraded_exact(),
                    frac(all - down - untouched, all),
                    "{what}"
                );
                let sum = b.p_fully_down_exact() + b.p_unaffected_exact() + b.p_degraded_exact();
                assert_eq!(sum, frac(1, 1), "{what}");
            }
        }
    }
}

#[test]
fn no_spill_is_the_report_without_borrowing() {
    for (n, k) in [(8, 2), (16, 2), (50, 5), (7, 7)] {
        let plain = BlastRadius::new(n, k).unwrap();
        for reserve in [0.0, 0.5, 0.99] {
            let b = plain.borrowing(0, reserve).unwrap();
            assert_eq!(b.p_fully_down_exact(), plain.p_identical_exact());
            assert_eq!(b.p_unaffected_exact(), plain.p_disjoint_exact());
            assert_eq!(b.sustained_share_exact(), plain.bucket_blast_radius_exact());
            assert_eq!(b.burst_share_exact(), plain.bucket_blast_radius_exact());
            assert_eq!(b.tenants(1000), plain.tenants(1000).shuffle_sharded);
        }
    }
}

#[test]
fn reserves_are_taken_exactly_and_huge_sizes_stay_exact() {
    let b = BlastRadius::new(8, 2).unwrap();
    // 0.1 is not a tenth in binary; the report keeps the double's exact value.
    let tenth = b.borrowing(2, 0.1).unwrap();
    assert_eq!(
        *tenth.reserve_exact(),
        Fraction::new(3_602_879_701_896_397u64, 1u64 << 55).unwrap()
    );
    assert_eq!(tenth.reserve(), 0.1);
    // (2 + 2 · (1 − 0.1)) / 8 = 0.475, up to the double's error in 0.1.
    assert!((tenth.burst_share() - 0.475).abs() < 1e-16);
    let tiny = b.borrowing(1, 5e-324).unwrap();
    assert_eq!(tiny.p_fully_down_exact(), frac(1, 28 * 6));
    // C(1000, 500) · C(500, 8): far below f64's range, still exact.
    let huge = BlastRadius::new(1000, 500)
        .unwrap()
        .borrowing(8, 0.5)
        .unwrap();
    assert_eq!(
        *huge.p_fully_down_exact().denom(),
        BlastRadius::new(1000, 500).unwrap().shards() * &Count::from(c(500, 8))
    );
    // About 4.0e-317: a subnormal, the nearest double all the same.
    let p = huge.p_fully_down();
    assert!(p > 3.9e-317 && p < 4.1e-317 && !p.is_normal(), "{p}");
    let t = huge.tenants(400).fully_down;
    assert!((t / p - 399.0).abs() < 1e-3, "{t}");
}

#[test]
fn spill_beyond_the_buckets_and_reserves_outside_0_to_1_are_refused() {
    let b = BlastRadius::new(8, 2).unwrap();
    let err = b.borrowing(7, 0.5).unwrap_err();
    assert_eq!(
        err,
        BlastError::SpillExceedsBuckets {
            buckets: 8,
            per_tenant: 2,
            spill: 7
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("spill (7)") && message.contains("at most 6"),
        "{message}"
    );
    assert!(b.borrowing(6, 0.5).is_ok());
    for reserve in [-0.1, -f64::MIN_POSITIVE, 1.0, 1.5, f64::NAN, f64::INFINITY] {
        let err = b.borrowing(2, reserve).unwrap_err();
        assert_eq!(err, BlastError::ReserveOutOfRange, "{reserve}");
        assert!(err.to_string().contains("up to but not including 1"));
    }
    // -0.0 is zero.
    assert!(b.borrowing(2, -0.0).unwrap().owners_keep_exact().is_zero());
    assert!(b.borrowing(2, 0.999_999).is_ok());
}
