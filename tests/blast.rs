//! Tests for `shuffle_limiter::blast`: known values, exactness, precision, errors.

use shuffle_limiter::blast::{BlastError, BlastRadius, Count, Fraction};

fn frac(n: u64, d: u64) -> Fraction {
    Fraction::new(n, d).unwrap()
}

fn strings(v: &[Fraction]) -> Vec<String> {
    v.iter().map(ToString::to_string).collect()
}

fn count(n: u64) -> Count {
    Count::from(n)
}

/// C(n, r) by Pascal's rule, an independent oracle for small n.
fn pascal(max: usize) -> Vec<Vec<Count>> {
    let mut rows: Vec<Vec<Count>> = vec![vec![count(1)]];
    for n in 1..=max {
        let prev = &rows[n - 1];
        let mut row = vec![count(1); n + 1];
        for r in 1..n {
            row[r] = &prev[r - 1] + &prev[r];
        }
        rows.push(row);
    }
    rows
}

/// C(n, r) = n! / (r! (n - r)!) from full factorial products, another
/// oracle: the quotient as a reduced fraction, which is `C(n, r) / 1`.
fn factorial_binomial(n: u32, r: u32) -> Fraction {
    let fact = |m: u32| (1..=m).fold(count(1), |acc, i| acc * count(i.into()));
    Fraction::new(fact(n), fact(r) * fact(n - r)).unwrap()
}

/// A count as the fraction `x / 1`, to compare with [`factorial_binomial`].
fn whole(x: &Count) -> Fraction {
    Fraction::new(x.clone(), 1u32).unwrap()
}

// ---------------------------------------------------------------- known values

#[test]
fn sixteen_buckets_two_per_tenant() {
    let b = BlastRadius::new(16, 2).unwrap();
    assert_eq!(b.buckets(), 16);
    assert_eq!(b.per_tenant(), 2);
    assert_eq!(*b.shards(), count(120));
    assert_eq!(strings(&b.overlap_pmf_exact()), ["91/120", "7/30", "1/120"]);
    assert_eq!(b.overlap_pmf(), [91.0 / 120.0, 7.0 / 30.0, 1.0 / 120.0]);
    assert_eq!(b.p_identical_exact(), frac(1, 120));
    assert_eq!(b.p_identical(), 1.0 / 120.0);
    assert_eq!(b.p_disjoint_exact(), frac(91, 120));
    assert_eq!(b.p_disjoint(), 91.0 / 120.0);
    assert_eq!(b.p_any_overlap_exact(), frac(29, 120));
    assert_eq!(b.p_any_overlap(), 29.0 / 120.0);
    assert_eq!(b.bucket_blast_radius_exact(), frac(1, 8));
    assert_eq!(b.bucket_blast_radius(), 0.125);
}

/// The names from before N was called `buckets` everywhere still answer, the same.
#[test]
#[allow(deprecated)]
fn the_old_node_names_still_work() {
    let b = BlastRadius::new(16, 2).unwrap();
    assert_eq!(b.nodes(), b.buckets());
    assert_eq!(b.node_blast_radius(), b.bucket_blast_radius());
    assert_eq!(b.node_blast_radius_exact(), b.bucket_blast_radius_exact());
}

#[test]
fn eight_buckets_two_per_tenant() {
    let b = BlastRadius::new(8, 2).unwrap();
    assert_eq!(b.shards().to_string(), "28");
    assert_eq!(strings(&b.overlap_pmf_exact()), ["15/28", "3/7", "1/28"]);
    assert_eq!(b.bucket_blast_radius(), 0.25);
}

#[test]
fn edge_shapes() {
    // k = N: one shard, everyone identical.
    let b = BlastRadius::new(5, 5).unwrap();
    assert_eq!(*b.shards(), count(1));
    assert_eq!(
        strings(&b.overlap_pmf_exact()),
        ["0/1", "0/1", "0/1", "0/1", "0/1", "1/1"]
    );
    assert_eq!(b.p_identical(), 1.0);
    assert_eq!(b.p_disjoint(), 0.0);
    assert_eq!(b.p_any_overlap(), 1.0);
    assert_eq!(b.bucket_blast_radius(), 1.0);
    // k = 1: N shards.
    let b = BlastRadius::new(7, 1).unwrap();
    assert_eq!(strings(&b.overlap_pmf_exact()), ["6/7", "1/7"]);
    // 2k > N: sharing fewer than 2k - N buckets is impossible.
    let b = BlastRadius::new(5, 3).unwrap();
    assert_eq!(
        strings(&b.overlap_pmf_exact()),
        ["0/1", "3/10", "3/5", "1/10"]
    );
    assert_eq!(b.p_disjoint_exact(), frac(0, 1));
    // N = k = 1.
    let b = BlastRadius::new(1, 1).unwrap();
    assert_eq!(strings(&b.overlap_pmf_exact()), ["0/1", "1/1"]);
}

#[test]
fn c_1000_500_is_exact() {
    let b = BlastRadius::new(1000, 500).unwrap();
    assert_eq!(whole(b.shards()), factorial_binomial(1000, 500));
    let s = b.shards().to_string();
    assert_eq!(s.len(), 300);
    assert!(s.starts_with("270288240945436"), "{s}");
}

// ---------------------------------------------------------------- exactness sweeps

#[test]
fn shards_match_independent_formulas() {
    let table = pascal(200);
    for n in 1..=200u32 {
        for k in 1..=n {
            let b = BlastRadius::new(n, k).unwrap();
            assert_eq!(*b.shards(), table[n as usize][k as usize], "C({n},{k})");
        }
    }
    for (n, k) in [(2048, 4), (1000, 3), (777, 388), (1500, 1499), (4000, 17)] {
        assert_eq!(
            whole(BlastRadius::new(n, k).unwrap().shards()),
            factorial_binomial(n, k),
            "C({n},{k})"
        );
    }
}

#[test]
fn pmf_sums_to_exactly_one_and_matches_the_formula() {
    let table = pascal(60);
    let c = |n: u32, r: u32| -> Count {
        if r > n {
            count(0)
        } else {
            table[n as usize][r as usize].clone()
        }
    };
    for n in 1..=60u32 {
        for k in 1..=n {
            let b = BlastRadius::new(n, k).unwrap();
            let pmf = b.overlap_pmf_exact();
            assert_eq!(pmf.len(), k as usize + 1);
            for (j, p) in pmf.iter().enumerate() {
                let j = j as u32;
                let want = Fraction::new(c(k, j) * c(n - k, k - j), c(n, k)).unwrap();
                assert_eq!(*p, want, "N={n} k={k} j={j}");
            }
            assert_eq!(
                pmf.iter().cloned().sum::<Fraction>(),
                frac(1, 1),
                "N={n} k={k}"
            );
            assert_eq!(pmf[k as usize], b.p_identical_exact());
            assert_eq!(pmf[0], b.p_disjoint_exact());
            let floats = b.overlap_pmf();
            let total: f64 = floats.iter().sum();
            assert!((total - 1.0).abs() < 1e-12, "N={n} k={k}: {total}");
        }
    }
}

#[test]
fn big_pmf_sums_to_one() {
    let b = BlastRadius::new(1000, 500).unwrap();
    let pmf = b.overlap_pmf_exact();
    assert_eq!(pmf.into_iter().sum::<Fraction>(), frac(1, 1));
}

// ---------------------------------------------------------------- f64 precision

/// The exact rational value of a finite, non-negative f64.
fn exact(x: f64) -> Fraction {
    assert!(x.is_finite() && x >= 0.0);
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i64;
    let frac_bits = bits & ((1 << 52) - 1);
    let (mant, e) = if exp == 0 {
        (frac_bits, -1074)
    } else {
        (frac_bits | (1 << 52), exp - 1075)
    };
    if e >= 0 {
        Fraction::new(count(mant) * two(e as u32), 1u32).unwrap()
    } else {
        Fraction::new(mant, two((-e) as u32)).unwrap()
    }
}

/// `2^e`, exactly.
fn two(e: u32) -> Count {
    count(2).pow(e)
}

/// |a - b|, exactly.
fn dist(a: &Fraction, b: &Fraction) -> Fraction {
    let x = a.numer() * b.denom();
    let y = b.numer() * a.denom();
    let d = a.denom() * b.denom();
    let diff = x.checked_sub(&y).or_else(|| y.checked_sub(&x)).unwrap();
    Fraction::new(diff, d).unwrap()
}

/// Asserts that `x` is the f64 nearest to `f` (ties to even).
fn assert_nearest(f: &Fraction, x: f64) {
    let here = dist(f, &exact(x));
    let up = x.next_up();
    if up.is_finite() {
        let there = dist(f, &exact(up));
        assert!(
            here < there || (here == there && x.to_bits().is_multiple_of(2)),
            "{f} -> {x:e}: {up:e} is nearer"
        );
    }
    if x > 0.0 {
        let down = x.next_down();
        let there = dist(f, &exact(down));
        assert!(
            here < there || (here == there && x.to_bits().is_multiple_of(2)),
            "{f} -> {x:e}: {down:e} is nearer"
        );
    }
}

#[test]
fn to_f64_matches_ieee_division_on_small_values() {
    // Both operands below 2^53 are exact in f64, and IEEE division rounds once:
    // an independent oracle.
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in 0..20_000 {
        let shift = 11 + (i % 40);
        let a = next() >> shift;
        let b = (next() >> (11 + (i / 7) % 42)).max(1);
        assert_eq!(frac(a, b).to_f64(), a as f64 / b as f64, "{a}/{b}");
    }
}

#[test]
fn tiny_probabilities_keep_full_precision() {
    // The last two are below f64's normal range: subnormal results.
    for (n, k) in [
        (2048, 4),
        (4096, 8),
        (1000, 500),
        (2048, 64),
        (60, 30),
        (1020, 510),
        (1040, 520),
    ] {
        let b = BlastRadius::new(n, k).unwrap();
        let p = b.p_identical();
        assert!(p > 0.0, "1/C({n},{k}) = {p:e}");
        assert_eq!(p.is_normal(), (n, k) != (1040, 520), "1/C({n},{k}) = {p:e}");
        assert_nearest(&b.p_identical_exact(), p);
        assert_nearest(&b.p_disjoint_exact(), b.p_disjoint());
        assert_nearest(&b.p_any_overlap_exact(), b.p_any_overlap());
        if k <= 64 {
            for (exact_p, p) in b.overlap_pmf_exact().iter().zip(b.overlap_pmf()) {
                assert_nearest(exact_p, p);
            }
        }
    }
    // 1/C(2048, 4) against a float product (at most a few ulps of error).
    let approx = 1.0 / (2048.0 * 2047.0 * 2046.0 * 2045.0 / 24.0);
    let p = BlastRadius::new(2048, 4).unwrap().p_identical();
    assert!(((p - approx) / approx).abs() < 1e-15);
    // 1/C(1000, 500) ≈ 3.7e-300: normal and correctly rounded.
    let p = BlastRadius::new(1000, 500).unwrap().p_identical();
    assert!((3.69e-300..3.71e-300).contains(&p), "{p:e}");
    // A tiny pmf entry next to ones near 1: each keeps its own precision.
    let b = BlastRadius::new(4096, 8).unwrap();
    let p_any = b.p_any_overlap();
    assert!(p_any > 0.01 && p_any < 0.02);
    assert_nearest(&b.p_any_overlap_exact(), p_any);
}

#[test]
fn below_f64_range_rounds_to_nearest() {
    // C(2000, 1000) ≈ 2e600 overflows f64, and its inverse underflows to 0.
    let b = BlastRadius::new(2000, 1000).unwrap();
    assert!(b.shards().bits() > 1076);
    assert_eq!(b.p_identical(), 0.0);
    assert!(!b.p_identical_exact().is_zero());
    assert_eq!(b.p_disjoint(), 0.0);
    assert_eq!(b.p_any_overlap(), 1.0);
    // Subnormals: exact powers of two, and rounding at the bottom of the range.
    assert_eq!(
        Fraction::new(1u32, two(1060)).unwrap().to_f64(),
        f64::from_bits(1 << 14)
    );
    assert_eq!(
        Fraction::new(1u32, two(1074)).unwrap().to_f64(),
        f64::from_bits(1)
    );
    assert_eq!(
        Fraction::new(3u32, two(1076)).unwrap().to_f64(),
        f64::from_bits(1)
    );
    assert_eq!(Fraction::new(1u32, two(1075)).unwrap().to_f64(), 0.0); // a tie: to even
    assert_eq!(
        Fraction::new(3u32, two(1075)).unwrap().to_f64(),
        f64::from_bits(2)
    ); // a tie: to even
    assert_eq!(Fraction::new(1u32, two(1076)).unwrap().to_f64(), 0.0);
    let f = Fraction::new(1u32, count(3).pow(670)).unwrap();
    assert_nearest(&f, f.to_f64());
    assert!(f.to_f64() > 0.0 && !f.to_f64().is_normal());
    // Large values: exact, and overflow to infinity.
    assert_eq!(
        Fraction::new(two(1023), 1u32).unwrap().to_f64(),
        2f64.powi(1023)
    );
    assert_eq!(exact(f64::MAX).to_f64(), f64::MAX);
    assert_eq!(
        Fraction::new(two(1024), 1u32).unwrap().to_f64(),
        f64::INFINITY
    );
    assert_eq!(
        Fraction::new(b.shards().clone(), 1u32).unwrap().to_f64(),
        f64::INFINITY
    );
    assert_eq!(frac(0, 5).to_f64(), 0.0);
}

// ---------------------------------------------------------------- tenants and failures

#[test]
fn tenant_impact_sixteen_two() {
    let t = BlastRadius::new(16, 2).unwrap().tenants(400);
    assert_eq!(t.tenants, 400);
    let s = t.shuffle_sharded;
    assert_eq!(s.fully_down, 399.0 / 120.0);
    assert_eq!(s.degraded, 399.0 * 28.0 / 120.0);
    assert_eq!(s.unaffected, 399.0 * 91.0 / 120.0);
    let f = t.fixed_shards.expect("2 divides 16");
    assert_eq!(f.fully_down, 399.0 / 8.0);
    assert_eq!(f.degraded, 0.0);
    assert_eq!(f.unaffected, 399.0 * 7.0 / 8.0);
    assert_eq!(t.shared_pool.fully_down, 399.0);
    assert_eq!(t.shared_pool.degraded, 0.0);
    assert_eq!(t.shared_pool.unaffected, 0.0);
}

#[test]
fn tenant_impact_edges() {
    let b = BlastRadius::new(10, 3).unwrap();
    assert_eq!(b.tenants(100).fixed_shards, None);
    for t in [0, 1] {
        let i = b.tenants(t);
        assert_eq!(i.shuffle_sharded.fully_down, 0.0);
        assert_eq!(i.shuffle_sharded.degraded, 0.0);
        assert_eq!(i.shuffle_sharded.unaffected, 0.0);
        assert_eq!(i.shared_pool.fully_down, 0.0);
    }
    // k = 1: nobody can be partly affected; fixed shards of 1 are the same design.
    let i = BlastRadius::new(8, 1).unwrap().tenants(9);
    assert_eq!(i.shuffle_sharded.degraded, 0.0);
    assert_eq!(i.shuffle_sharded.fully_down, 1.0);
    assert_eq!(i.fixed_shards.unwrap().fully_down, 1.0);
    // k = N: everyone is down in every design.
    let i = BlastRadius::new(4, 4).unwrap().tenants(11);
    assert_eq!(i.shuffle_sharded.fully_down, 10.0);
    assert_eq!(i.fixed_shards.unwrap().fully_down, 10.0);
    // The three numbers add up to T - 1.
    for (n, k) in [(16, 2), (50, 5), (100, 7), (2048, 4)] {
        let s = BlastRadius::new(n, k)
            .unwrap()
            .tenants(1_000_001)
            .shuffle_sharded;
        let total = s.fully_down + s.degraded + s.unaffected;
        assert!((total - 1e6).abs() < 1e-6, "{total}");
    }
    // Huge T keeps precision: (T - 1) / C(2048, 4).
    let s = BlastRadius::new(2048, 4)
        .unwrap()
        .tenants(u64::MAX)
        .shuffle_sharded;
    let c = 2048.0 * 2047.0 * 2046.0 * 2045.0 / 24.0;
    assert!((s.fully_down / (u64::MAX as f64 / c) - 1.0).abs() < 1e-14);
}

#[test]
fn failed_buckets() {
    let b = BlastRadius::new(16, 2).unwrap();
    let f = b.failed(2).unwrap();
    assert_eq!(f.failed, 2);
    assert_eq!(f.p_all_failed_exact, frac(1, 120));
    assert_eq!(f.p_touched_exact, frac(29, 120));
    assert_eq!(f.p_all_failed, 1.0 / 120.0);
    assert_eq!(f.p_touched, 29.0 / 120.0);
    // One failed bucket touches k/N of tenants and takes none down fully (k > 1).
    let f = b.failed(1).unwrap();
    assert_eq!(f.p_touched_exact, b.bucket_blast_radius_exact());
    assert_eq!(f.p_all_failed, 0.0);
    let f = b.failed(0).unwrap();
    assert_eq!((f.p_all_failed, f.p_touched), (0.0, 0.0));
    let f = b.failed(16).unwrap();
    assert_eq!((f.p_all_failed, f.p_touched), (1.0, 1.0));
    let f = b.failed(5).unwrap();
    assert_eq!(f.p_all_failed_exact, frac(10, 120));
    assert_eq!(
        f.p_touched_exact,
        Fraction::new(120u32 - 55, 120u32).unwrap()
    );
}

// ---------------------------------------------------------------- errors

#[test]
fn every_error() {
    assert_eq!(BlastRadius::new(0, 0), Err(BlastError::NoBuckets));
    assert_eq!(BlastRadius::new(0, 3), Err(BlastError::NoBuckets));
    assert_eq!(
        BlastRadius::new(5, 0),
        Err(BlastError::NoBucketsPerTenant { buckets: 5 })
    );
    assert_eq!(
        BlastRadius::new(5, 6),
        Err(BlastError::PerTenantExceedsBuckets {
            buckets: 5,
            per_tenant: 6
        })
    );
    assert_eq!(
        BlastRadius::new(16, 2).unwrap().failed(17),
        Err(BlastError::FailedExceedsBuckets {
            buckets: 16,
            failed: 17
        })
    );

    let errors: Vec<Box<dyn std::error::Error>> = vec![
        Box::new(BlastRadius::new(0, 1).unwrap_err()),
        Box::new(BlastRadius::new(5, 0).unwrap_err()),
        Box::new(BlastRadius::new(5, 6).unwrap_err()),
        Box::new(BlastRadius::new(16, 2).unwrap().failed(17).unwrap_err()),
    ];
    let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert!(messages[0].contains("buckets is 0"), "{}", messages[0]);
    assert!(messages[2].contains("buckets (5)"), "{}", messages[2]);
    assert!(messages[1].contains("per_tenant is 0") && messages[1].contains("(5)"));
    assert!(messages[2].contains("per_tenant (6)") && messages[2].contains("at most 5"));
    assert!(messages[3].contains("failed (17)") && messages[3].contains("16"));
    for m in &messages {
        assert!(!m.contains('\n'), "one line: {m}");
    }
}

// ---------------------------------------------------------------- Fraction

#[test]
fn fractions_are_reduced_and_ordered() {
    let f = Fraction::new(84u32, 360u32).unwrap();
    assert_eq!(f.to_string(), "7/30");
    assert_eq!(*f.numer(), count(7));
    assert_eq!(*f.denom(), count(30));
    assert_eq!(frac(0, 9).to_string(), "0/1");
    assert_eq!(frac(9, 9).to_string(), "1/1");
    assert!(frac(1, 3) < frac(1, 2));
    assert!(frac(2, 3) > frac(3, 5));
    assert_eq!(frac(2, 4), frac(1, 2));
    assert_eq!(frac(1, 6) + frac(1, 3), frac(1, 2));
    assert!(frac(0, 1).is_zero());
}

#[test]
fn a_zero_denominator_is_refused_not_a_panic() {
    assert_eq!(Fraction::new(1u32, 0u32), None);
    assert_eq!(Fraction::new(0u32, 0u32), None);
    assert_eq!(Fraction::new(0u32, 5u32), Some(frac(0, 1)));
}
