//! [`Rate`]: a budget as written in a config, `"5/s"`, `"300/m"` or `"1000/h"`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::quota::Quota;

/// A rate as written in a config: a whole number of requests per second,
/// minute or hour — `"5/s"`, `"300/m"`, `"1000/h"`.
///
/// ```
/// use std::time::Duration;
/// use shuffle_limiter::set::Rate;
///
/// let rate: Rate = "300/m".parse()?;
/// assert_eq!((rate.count(), rate.period()), (300, Duration::from_secs(60)));
/// assert_eq!(rate.to_string(), "300/m");
///
/// let err = "5/d".parse::<Rate>().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "rate \"5/d\" has the unknown unit \"d\": use s (per second), m (per minute) or h (per hour)"
/// );
/// # Ok::<(), shuffle_limiter::set::RateError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u32,
    unit: Unit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Unit {
    Second,
    Minute,
    Hour,
}

impl Unit {
    fn symbol(self) -> char {
        match self {
            Unit::Second => 's',
            Unit::Minute => 'm',
            Unit::Hour => 'h',
        }
    }

    fn period(self) -> Duration {
        Duration::from_secs(match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3600,
        })
    }
}

impl Rate {
    /// A stand-in until a table's `rate` has been read.
    pub(super) const PLACEHOLDER: Rate = Rate {
        count: 1,
        unit: Unit::Second,
    };

    /// Requests per period.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// One second, minute or hour.
    pub fn period(&self) -> Duration {
        self.unit.period()
    }

    /// The quota of this rate, with the burst equal to the count.
    pub fn quota(&self) -> Quota {
        Quota::new(self.count, self.period())
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.count, self.unit.symbol())
    }
}

impl FromStr for Rate {
    type Err = RateError;

    fn from_str(s: &str) -> Result<Rate, RateError> {
        let err = |kind| RateError {
            input: s.to_owned(),
            kind,
        };
        if s.is_empty() {
            return Err(err(RateErrorKind::Empty));
        }
        let Some((count, unit)) = s.split_once('/') else {
            return Err(err(RateErrorKind::NoUnit));
        };
        let unit = match unit {
            "s" => Unit::Second,
            "m" => Unit::Minute,
            "h" => Unit::Hour,
            _ => return Err(err(RateErrorKind::UnknownUnit)),
        };
        // Digits only: `u32::from_str` would also take a leading '+'.
        if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err(RateErrorKind::NotACount));
        }
        let count: u32 = count
            .parse()
            .map_err(|_| err(RateErrorKind::CountTooLarge))?;
        if count == 0 {
            return Err(err(RateErrorKind::ZeroCount));
        }
        Ok(Rate { count, unit })
    }
}

impl Serialize for Rate {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Rate, D::Error> {
        struct RateVisitor;
        impl Visitor<'_> for RateVisitor {
            type Value = Rate;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a rate such as \"5/s\", \"300/m\" or \"1000/h\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Rate, E> {
                s.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_str(RateVisitor)
    }
}

/// Why a rate string was refused; the message says what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateError {
    input: String,
    kind: RateErrorKind,
}

/// What was wrong with a rate string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RateErrorKind {
    /// The string is empty.
    Empty,
    /// There is no `/unit`.
    NoUnit,
    /// The unit is not `s`, `m` or `h`.
    UnknownUnit,
    /// The count is not a whole number written in digits.
    NotACount,
    /// The count does not fit in 32 bits.
    CountTooLarge,
    /// The count is zero.
    ZeroCount,
}

impl RateError {
    /// What was wrong.
    pub fn kind(&self) -> RateErrorKind {
        self.kind
    }

    /// The string that was refused.
    pub fn input(&self) -> &str {
        &self.input
    }
}

impl fmt::Display for RateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let input = &self.input;
        match self.kind {
            RateErrorKind::Empty => f.write_str(
                "the rate is empty: write COUNT/UNIT, such as \"5/s\", \"300/m\" or \"1000/h\"",
            ),
            RateErrorKind::NoUnit => write!(
                f,
                "rate {input:?} has no unit: write COUNT/UNIT with UNIT one of s, m or h, \
                 such as \"5/s\""
            ),
            RateErrorKind::UnknownUnit => {
                let unit = input.split_once('/').map_or("", |(_, u)| u);
                write!(
                    f,
                    "rate {input:?} has the unknown unit {unit:?}: use s (per second), \
                     m (per minute) or h (per hour)"
                )
            }
            RateErrorKind::NotACount => {
                let count = input.split_once('/').map_or("", |(c, _)| c);
                write!(
                    f,
                    "rate {input:?}: the count {count:?} is not a whole number: \
                     write digits only, such as \"5/s\""
                )
            }
            RateErrorKind::CountTooLarge => write!(
                f,
                "rate {input:?}: the count is more than {}: use a smaller count or a shorter unit",
                u32::MAX
            ),
            RateErrorKind::ZeroCount => write!(
                f,
                "rate {input:?} allows no requests: use a count of at least 1"
            ),
        }
    }
}

impl std::error::Error for RateError {}
