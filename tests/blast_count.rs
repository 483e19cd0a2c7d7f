//! Tests for `shuffle_limiter::blast::Count`: the exact counts that blast's
//! reports and fractions are made of, and what a caller can do with them.

use shuffle_limiter::blast::{BlastRadius, Count, Fraction};

#[test]
fn counts_convert_where_they_fit_and_say_so_where_they_do_not() {
    let shards = BlastRadius::new(16, 2).unwrap().shards().clone();
    assert_eq!(shards, Count::from(120u8));
    assert_eq!(shards.to_string(), "120");
    assert_eq!(format!("{shards:>6}|{shards:<5}|"), "   120|120  |");
    assert_eq!(format!("{shards:?}"), "Count(120)");
    assert_eq!((shards.to_u64(), shards.to_u128()), (Some(120), Some(120)));
    assert_eq!(shards.to_f64(), 120.0);
    assert!(!shards.is_zero() && Count::from(0u32).is_zero());

    let top = Count::from(u64::MAX);
    assert_eq!(top.to_u64(), Some(u64::MAX));
    let above = &top + &Count::from(1u32);
    assert_eq!(above.to_u64(), None);
    assert_eq!(above.to_u128(), Some(1 << 64));
    assert_eq!(Count::from(u128::MAX).to_u128(), Some(u128::MAX));
    assert_eq!((Count::from(u128::MAX) + Count::from(1u8)).to_u128(), None);
    assert_eq!(Count::from(usize::MAX).to_u64(), Some(usize::MAX as u64));

    // C(1000, 500): 300 digits, no machine integer, no f64; its size all the same.
    let huge = BlastRadius::new(1000, 500).unwrap().shards().clone();
    assert_eq!(huge.to_u128(), None);
    // Rust's decimal parser rounds correctly: an independent oracle.
    let digits = huge.to_string();
    assert_eq!(huge.to_f64(), digits.parse::<f64>().unwrap());
    assert!((huge.log10() - huge.to_f64().log10()).abs() < 1e-12);
    let beyond = BlastRadius::new(2000, 1000).unwrap().shards().clone();
    assert_eq!(beyond.to_f64(), f64::INFINITY);
    let digits = beyond.to_string();
    assert_eq!(beyond.log10().floor() as usize + 1, digits.len());
    // log10 of the leading 17 digits, plus the decimal places after them.
    let lead: f64 = digits[..17].parse().unwrap();
    let want = lead.log10() + (digits.len() - 17) as f64;
    assert!((beyond.log10() - want).abs() < 1e-12, "{}", beyond.log10());
    assert_eq!(Count::from(0u32).log10(), f64::NEG_INFINITY);
    assert_eq!(Count::from(1u32).log10(), 0.0);
}

#[test]
fn counts_order_add_multiply_and_never_go_negative() {
    let (a, b) = (Count::from(28u32), Count::from(120u32));
    assert_eq!(a.cmp(&b), std::cmp::Ordering::Less);
    assert!(a < b);
    assert_eq!(a, Count::from(28u64));
    assert_eq!(&a + &b, Count::from(148u32));
    assert_eq!(a.clone() * b.clone(), Count::from(3360u32));
    assert_eq!(&a * &b, Count::from(3360u32));
    assert_eq!(b.checked_sub(&a), Some(Count::from(92u32)));
    assert_eq!(a.checked_sub(&a), Some(Count::from(0u32)));
    assert_eq!(a.checked_sub(&b), None);
    assert_eq!(Count::from(2u32).pow(10), Count::from(1024u32));
    assert_eq!(Count::from(0u32).pow(0), Count::from(1u32));
    assert_eq!(Count::from(2u32).pow(1076).bits(), 1077);
    assert_eq!(Count::from(0u32).bits(), 0);
    // The pairs of a tenant's shard and spill set: C(8, 2) · C(6, 2).
    let lending = BlastRadius::new(8, 2).unwrap().borrowing(2, 0.5).unwrap();
    let pairs = lending.radius().shards() * lending.spill_sets();
    assert_eq!(pairs, Count::from(420u32));
    assert_eq!(*lending.p_fully_down_exact().denom(), pairs);
}

#[test]
fn fractions_are_made_of_counts() {
    let f = Fraction::new(Count::from(84u32), Count::from(360u32)).unwrap();
    assert_eq!(
        (f.numer(), f.denom()),
        (&Count::from(7u32), &Count::from(30u32))
    );
    assert_eq!(f, Fraction::new(84u32, 360u64).unwrap());
    let p = BlastRadius::new(16, 2).unwrap().p_identical_exact();
    assert_eq!(p.denom(), BlastRadius::new(16, 2).unwrap().shards());
    assert_eq!(Fraction::new(1u32, Count::from(0u32)), None);
}
