//! Exact probabilities: reduced fractions of big integers, and their
//! correctly rounded `f64` values.

use std::cmp::Ordering;
use std::fmt;
use std::iter::Sum;
use std::ops::Add;

use num_bigint::BigUint;
use num_integer::Integer;
use num_traits::{One, ToPrimitive, Zero};

use super::Count;

/// A non-negative rational number `numer / denom`, always stored in lowest terms.
///
/// Two equal values therefore have equal numerators and denominators, and
/// [`Display`](fmt::Display) prints `"a/b"` (also for whole numbers: `"0/1"`, `"1/1"`).
///
/// ```
/// use shuffle_limiter::blast::Fraction;
///
/// let f = Fraction::new(14u32, 60u32).unwrap();
/// assert_eq!(f.to_string(), "7/30");
/// assert_eq!(f.clone() + Fraction::new(23u32, 30u32).unwrap(), Fraction::new(1u32, 1u32).unwrap());
/// assert_eq!(f.to_f64(), 7.0 / 30.0);
/// assert_eq!(Fraction::new(1u32, 0u32), None);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fraction {
    numer: Count,
    denom: Count,
}

impl Fraction {
    /// `numer / denom` in lowest terms, or `None` when `denom` is zero.
    ///
    /// Either may be a machine integer (`u8` to `u128`, `usize`) or a
    /// [`Count`].
    pub fn new(numer: impl Into<Count>, denom: impl Into<Count>) -> Option<Fraction> {
        let denom = denom.into();
        (!denom.is_zero()).then(|| Fraction::reduced(numer.into().0, denom.0))
    }

    /// `numer / denom` in lowest terms; `denom` is never zero here (every
    /// caller divides by a count of shards, groups or buckets, all at least 1).
    pub(super) fn reduced(numer: BigUint, denom: BigUint) -> Fraction {
        debug_assert!(!denom.is_zero());
        let g = numer.gcd(&denom);
        let (numer, denom) = if g.is_one() {
            (numer, denom)
        } else {
            (numer / &g, denom / &g)
        };
        Fraction {
            numer: Count(numer),
            denom: Count(denom),
        }
    }

    /// The numerator, in lowest terms.
    pub fn numer(&self) -> &Count {
        &self.numer
    }

    /// The denominator, in lowest terms (never zero).
    pub fn denom(&self) -> &Count {
        &self.denom
    }

    /// Whether the value is exactly zero.
    pub fn is_zero(&self) -> bool {
        self.numer.is_zero()
    }

    /// The nearest `f64` (round half to even), however large the numerator and
    /// denominator are.
    ///
    /// The quotient is formed in integers, scaled so that it carries every bit
    /// the result can hold (53 for a normal number), and rounded once. A value
    /// below f64's normal range (about `2.2e-308`) gives the nearest
    /// representable value all the same: a subnormal, which has fewer
    /// significant bits, or `0.0` below about `2.5e-324`. A value above
    /// `f64::MAX` gives `f64::INFINITY`.
    ///
    /// ```
    /// use shuffle_limiter::blast::{Count, Fraction};
    ///
    /// // 1 / 10^400 is below f64's range: it comes out as 0.0, not NaN.
    /// let tiny = Fraction::new(1u32, Count::from(10u32).pow(400)).unwrap();
    /// assert_eq!(tiny.to_f64(), 0.0);
    /// // 1 / 10^300 keeps full precision, although 10^300 is near f64::MAX.
    /// let small = Fraction::new(1u32, Count::from(10u32).pow(300)).unwrap();
    /// assert_eq!(small.to_f64(), 1e-300);
    /// ```
    pub fn to_f64(&self) -> f64 {
        ratio_to_f64(&self.numer.0, &self.denom.0)
    }

    /// `x` exactly, for a finite `x ≥ 0`: every such `f64` is an integer
    /// times a power of two. `None` for a negative, infinite or NaN `x`.
    pub(super) fn from_f64(x: f64) -> Option<Fraction> {
        if !x.is_finite() || x.is_sign_negative() && x != 0.0 {
            return None;
        }
        // abs() turns -0.0 into 0.0.
        let bits = x.abs().to_bits();
        let (exponent, fraction) = ((bits >> 52) as i64, bits & ((1 << 52) - 1));
        // Subnormals have no implicit bit and the exponent of the smallest normal.
        let (mantissa, exponent) = if exponent == 0 {
            (fraction, -1074)
        } else {
            (fraction | (1 << 52), exponent - 1075)
        };
        let mantissa = BigUint::from(mantissa);
        Some(if exponent >= 0 {
            Fraction::reduced(mantissa << exponent as u64, BigUint::one())
        } else {
            Fraction::reduced(mantissa, BigUint::one() << (-exponent) as u64)
        })
    }

    /// `1 - self` for a value in `[0, 1]`.
    pub(super) fn one_minus(&self) -> Fraction {
        Fraction::reduced(&self.denom.0 - &self.numer.0, self.denom.0.clone())
    }
}

/// `n / d` as the nearest `f64`, for `d > 0`; see [`Fraction::to_f64`].
pub(super) fn ratio_to_f64(n: &BigUint, d: &BigUint) -> f64 {
    if n.is_zero() {
        return 0.0;
    }
    // Binary exponent e with 2^e <= n/d < 2^(e+1).
    let diff = n.bits() as i64 - d.bits() as i64;
    let at_least_2_pow_diff = if diff >= 0 {
        *n >= d << diff as u64
    } else {
        n << (-diff) as u64 >= *d
    };
    let e = if at_least_2_pow_diff { diff } else { diff - 1 };
    if e > 1023 {
        return f64::INFINITY;
    }
    if e < -1076 {
        // Below half of the smallest subnormal: rounds to zero.
        return 0.0;
    }
    // Weight of the last bit the result can keep: 53 significant bits for a
    // normal number, a fixed 2^-1074 for a subnormal one.
    let lsb = (e - 52).max(-1074);
    // q = floor(n / d / 2^lsb), r the remainder, both exact.
    let (q, r, divisor) = if lsb <= 0 {
        let (q, r) = (n << (-lsb) as u64).div_rem(d);
        (q, r, d.clone())
    } else {
        let dd = d << lsb as u64;
        let (q, r) = n.div_rem(&dd);
        (q, r, dd)
    };
    let mut m = q.to_u64().expect("quotient has at most 53 bits");
    // Round half to even on the remainder.
    match (r << 1u32).cmp(&divisor) {
        Ordering::Greater => m += 1,
        Ordering::Equal if m & 1 == 1 => m += 1,
        _ => {}
    }
    // m <= 2^53 is exact in f64; scaling by powers of two in steps that stay
    // normal is exact, except for the final overflow to infinity.
    let mut x = m as f64;
    let mut shift = lsb;
    while shift != 0 {
        let step = shift.clamp(-1000, 1000);
        x *= pow2(step);
        shift -= step;
    }
    x
}

/// `2^e` for `-1022 <= e <= 1023`, exactly.
fn pow2(e: i64) -> f64 {
    debug_assert!((-1022..=1023).contains(&e));
    f64::from_bits(((e + 1023) as u64) << 52)
}

impl fmt::Display for Fraction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.numer, self.denom)
    }
}

impl PartialOrd for Fraction {
    fn partial_cmp(&self, other: &Fraction) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Fraction {
    fn cmp(&self, other: &Fraction) -> Ordering {
        (&self.numer * &other.denom).cmp(&(&other.numer * &self.denom))
    }
}

impl Add for Fraction {
    type Output = Fraction;

    fn add(self, rhs: Fraction) -> Fraction {
        Fraction::reduced(
            self.numer.0 * &rhs.denom.0 + rhs.numer.0 * &self.denom.0,
            self.denom.0 * rhs.denom.0,
        )
    }
}

impl Sum for Fraction {
    fn sum<I: Iterator<Item = Fraction>>(iter: I) -> Fraction {
        iter.fold(Fraction::reduced(BigUint::zero(), BigUint::one()), Add::add)
    }
}
