//! [`Reserve`]: a lender's reserve as a config writes it, checked when read.

use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};

use crate::DEFAULT_LENDER_RESERVE;
use crate::error::ConfigError;

/// The `lender_reserve` of a `[limiters.NAME]` table: the share r of each
/// bucket's burst, 0 ≤ r < 1, that borrowers must leave to its owners (see
/// [`Builder::lender_reserve`](crate::Builder::lender_reserve)).
///
/// Only a share in range can be made, so a config that holds one always
/// builds; unlike a bare `f64` it has `Eq` (there is no NaN to compare), and
/// it shows as it was written: `0.25` reads back as `0.25`.
///
/// ```
/// use shuffle_limiter::set::Reserve;
///
/// let reserve = Reserve::new(0.25)?;
/// assert_eq!((reserve.get(), reserve.to_string()), (0.25, "0.25".to_owned()));
/// assert_eq!(Reserve::default().get(), 0.5);
/// assert!(Reserve::new(1.0).is_err());
/// # Ok::<(), shuffle_limiter::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Reserve(f64);

impl Reserve {
    /// The share `reserve`, if it is one: 0 ≤ `reserve` < 1.
    ///
    /// # Errors
    /// [`ConfigError::LenderReserve`] for anything else (NaN included),
    /// saying which values to use.
    pub fn new(reserve: f64) -> Result<Reserve, ConfigError> {
        if !(0.0..1.0).contains(&reserve) {
            return Err(ConfigError::LenderReserve {
                reserve: reserve.to_string(),
            });
        }
        // −0 is in range and equal to 0: store one zero, so that equality
        // can compare bits.
        Ok(Reserve(reserve + 0.0))
    }

    /// The share, 0 ≤ r < 1.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Default for Reserve {
    /// The builder's default, [`DEFAULT_LENDER_RESERVE`](crate::DEFAULT_LENDER_RESERVE).
    fn default() -> Self {
        Reserve(DEFAULT_LENDER_RESERVE)
    }
}

impl PartialEq for Reserve {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

// Never NaN, and zero has one sign: bit equality is a full equivalence.
impl Eq for Reserve {}

impl std::hash::Hash for Reserve {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

impl fmt::Display for Reserve {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<Reserve> for f64 {
    fn from(reserve: Reserve) -> f64 {
        reserve.0
    }
}

impl<'de> Deserialize<'de> for Reserve {
    /// A number 0 ≤ r < 1, such as `0.5`; whole numbers (TOML's `0`) too.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Reserve, D::Error> {
        deserializer.deserialize_f64(ReserveVisitor)
    }
}

struct ReserveVisitor;

impl ReserveVisitor {
    fn share<E: de::Error>(written: &dyn fmt::Display, value: f64) -> Result<Reserve, E> {
        Reserve::new(value).map_err(|_| {
            E::custom(format_args!(
                "{written} is not a share of a bucket's burst: use a number from 0 (lend \
                 everything) up to but not including 1, such as 0.5"
            ))
        })
    }
}

impl Visitor<'_> for ReserveVisitor {
    type Value = Reserve;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a share of a bucket's burst from 0 up to but not including 1, such as 0.5")
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Reserve, E> {
        Self::share(&v, v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Reserve, E> {
        Self::share(&v, v as f64)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Reserve, E> {
        Self::share(&v, v as f64)
    }
}
