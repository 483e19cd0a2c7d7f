//! Exact counts of any size: how many shards, spill sets or user subsets
//! there are, and the two halves of a [`Fraction`](super::Fraction).

use std::fmt;
use std::ops::{Add, Mul};

use num_bigint::BigUint;
use num_traits::{One, ToPrimitive, Zero};

use super::fraction::ratio_to_f64;

/// A non-negative integer of any size, exactly: the number of distinct
/// shards `C(N, k)` ([`BlastRadius::shards`](super::BlastRadius::shards)),
/// of spill sets `C(N − k, d)`, of user subsets `C(k, j)`, or the numerator
/// or denominator of a [`Fraction`](super::Fraction).
///
/// Such counts outgrow every machine integer quickly (`C(1000, 500)` has
/// 300 digits), so they are kept whole. [`Display`](fmt::Display) prints
/// every digit in decimal; [`to_u64`](Self::to_u64) and
/// [`to_u128`](Self::to_u128) give a machine integer when the count fits,
/// [`to_f64`](Self::to_f64) the nearest `f64`, and [`log10`](Self::log10)
/// its size however large it is. Counts compare, add and multiply exactly;
/// [`checked_sub`](Self::checked_sub) subtracts without going below zero.
///
/// ```
/// use shuffle_limiter::blast::{BlastRadius, Count};
///
/// let b = BlastRadius::new(16, 2)?;
/// assert_eq!(*b.shards(), Count::from(120u32));
/// assert_eq!(b.shards().to_u128(), Some(120));
/// assert_eq!(b.shards().to_string(), "120");
///
/// let huge = BlastRadius::new(1000, 500)?;
/// assert_eq!(huge.shards().to_u128(), None); // about 2.7e299
/// assert_eq!(huge.shards().to_string().len(), 300);
/// assert_eq!(huge.shards().log10().floor(), 299.0);
/// assert!(huge.shards() > b.shards());
/// # Ok::<(), shuffle_limiter::blast::BlastError>(())
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Count(pub(super) BigUint);

impl Count {
    /// Whether the count is zero.
    pub fn is_zero(&self) -> bool {
        self.0.is_zero()
    }

    /// The count as a `u64`, or `None` when it is larger than `u64::MAX`.
    pub fn to_u64(&self) -> Option<u64> {
        self.0.to_u64()
    }

    /// The count as a `u128`, or `None` when it is larger than `u128::MAX`.
    pub fn to_u128(&self) -> Option<u128> {
        self.0.to_u128()
    }

    /// The nearest `f64` (round half to even); `f64::INFINITY` above
    /// `f64::MAX` (about `1.8e308`).
    ///
    /// ```
    /// use shuffle_limiter::blast::Count;
    ///
    /// // 2^53 + 1 is not an f64: it is a tie between 2^53 and 2^53 + 2, to even.
    /// assert_eq!(Count::from((1u64 << 53) + 1).to_f64(), 9007199254740992.0);
    /// assert_eq!(Count::from(10u32).pow(400).to_f64(), f64::INFINITY);
    /// ```
    pub fn to_f64(&self) -> f64 {
        ratio_to_f64(&self.0, &BigUint::one())
    }

    /// The decimal logarithm, to about f64 precision, however large the
    /// count is (where [`to_f64`](Self::to_f64) gives infinity);
    /// `f64::NEG_INFINITY` for zero.
    ///
    /// ```
    /// use shuffle_limiter::blast::Count;
    ///
    /// assert_eq!(Count::from(1000u32).log10(), 3.0);
    /// let googol_cubed = Count::from(10u32).pow(300).pow(3);
    /// assert!((googol_cubed.log10() - 900.0).abs() < 1e-9);
    /// ```
    pub fn log10(&self) -> f64 {
        // The top 64 bits carry all that an f64 can; the rest is a power of two.
        let drop = self.0.bits().saturating_sub(64);
        let top = (&self.0 >> drop).to_f64().unwrap_or(f64::INFINITY);
        top.log10() + drop as f64 * std::f64::consts::LOG10_2
    }

    /// How many bits the count needs: `⌊log2(self)⌋ + 1`, and 0 for zero.
    pub fn bits(&self) -> u64 {
        self.0.bits()
    }

    /// `self` to the power `exp`, exactly (`x⁰ = 1`, also for `x = 0`).
    pub fn pow(&self, exp: u32) -> Count {
        Count(self.0.pow(exp))
    }

    /// `self − other`, or `None` when `other` is larger: a count is never
    /// negative.
    pub fn checked_sub(&self, other: &Count) -> Option<Count> {
        (self.0 >= other.0).then(|| Count(&self.0 - &other.0))
    }
}

impl fmt::Display for Count {
    /// Every decimal digit; width, fill and alignment are honoured.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl fmt::Debug for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Count({})", self.0)
    }
}

macro_rules! from_unsigned {
    ($($t:ty),*) => {$(
        impl From<$t> for Count {
            fn from(n: $t) -> Count {
                Count(BigUint::from(n))
            }
        }
    )*};
}

from_unsigned!(u8, u16, u32, u64, u128, usize);

impl Add for Count {
    type Output = Count;

    fn add(self, rhs: Count) -> Count {
        Count(self.0 + rhs.0)
    }
}

impl Add<&Count> for &Count {
    type Output = Count;

    fn add(self, rhs: &Count) -> Count {
        Count(&self.0 + &rhs.0)
    }
}

impl Mul for Count {
    type Output = Count;

    fn mul(self, rhs: Count) -> Count {
        Count(self.0 * rhs.0)
    }
}

impl Mul<&Count> for &Count {
    type Output = Count;

    fn mul(self, rhs: &Count) -> Count {
        Count(&self.0 * &rhs.0)
    }
}
