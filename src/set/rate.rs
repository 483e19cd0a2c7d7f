//! [`Rate`]: a budget as written in a config, `"5/s"`, `"100/10s"`,
//! `"0.5/s"` or `"1/d"`.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::quota::Quota;

/// A rate as written in a config: `COUNT/[SPAN]UNIT`, a count of requests
/// per a span of milliseconds, seconds, minutes, hours or days.
///
/// | written | means |
/// | --- | --- |
/// | `"5/s"`, `"300/m"`, `"1000/h"`, `"1/d"` | per second, minute, hour, day |
/// | `"100/10s"`, `"250/500ms"` | per a span of several units |
/// | `"0.5/s"`, `"1.5/m"` | a fractional count, kept exact as a whole count over a longer span: 1 per 2 s, 3 per 2 min |
///
/// The burst a rate gives when none is set ([`quota`](Rate::quota)) is its
/// count as written, rounded up: 5 for `"5/s"`, 100 for `"100/10s"`, 2 for
/// `"1.5/m"` (not the 3 of the whole count it stands for).
///
/// A rate prints in its own unit, as written, and reads back as the same
/// rate: `"3600/h"` prints as `3600/h`, `"0.50/s"` as `0.5/s`.
///
/// ```
/// use std::time::Duration;
/// use shuffle_limiter::set::Rate;
///
/// let rate: Rate = "300/m".parse()?;
/// assert_eq!((rate.count(), rate.period()), (300, Duration::from_secs(60)));
/// assert_eq!(rate.to_string(), "300/m");
///
/// let rate: Rate = "100/10s".parse()?;
/// assert_eq!((rate.count(), rate.period()), (100, Duration::from_secs(10)));
///
/// let rate: Rate = "0.5/s".parse()?;
/// assert_eq!((rate.count(), rate.period()), (1, Duration::from_secs(2)));
/// assert_eq!(rate.to_string(), "0.5/s");
///
/// let rate: Rate = "99.99/s".parse()?;
/// assert_eq!((rate.count(), rate.period()), (9999, Duration::from_secs(100)));
/// assert_eq!(rate.quota().burst(), 100); // 99.99 at once, rounded up
///
/// let err = "5/w".parse::<Rate>().unwrap_err();
/// assert_eq!(
///     err.to_string(),
///     "rate \"5/w\" has the unknown unit \"w\": use ms, s (per second), m (per minute), \
///      h (per hour) or d (per day), optionally after a number, such as \"100/10s\""
/// );
/// # Ok::<(), shuffle_limiter::set::RateError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    count: u32,
    /// How many units make the period: 10 in `"100/10s"`, 100 in
    /// `"99.99/s"` (9999 per 100 s).
    span: u32,
    unit: Unit,
    /// How many times a fractional count lengthened the span: 100 in
    /// `"99.99/s"`, 1 for a whole count. The count as written is `count /
    /// scale` per `span / scale` units.
    scale: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Unit {
    Milli,
    Second,
    Minute,
    Hour,
    Day,
}

impl Unit {
    const ALL: [Unit; 5] = [
        Unit::Milli,
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
    ];

    fn symbol(self) -> &'static str {
        match self {
            Unit::Milli => "ms",
            Unit::Second => "s",
            Unit::Minute => "m",
            Unit::Hour => "h",
            Unit::Day => "d",
        }
    }

    fn period(self) -> Duration {
        match self {
            Unit::Milli => Duration::from_millis(1),
            Unit::Second => Duration::from_secs(1),
            Unit::Minute => Duration::from_secs(60),
            Unit::Hour => Duration::from_secs(3600),
            Unit::Day => Duration::from_secs(86_400),
        }
    }
}

impl Rate {
    /// A stand-in until a table's `rate` has been read.
    pub(super) const PLACEHOLDER: Rate = Rate {
        count: 1,
        span: 1,
        unit: Unit::Second,
        scale: 1,
    };

    /// Requests per period.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The period: the span times its unit, such as 10 s for `"100/10s"`.
    pub fn period(&self) -> Duration {
        // At most u32::MAX days: well within a Duration.
        self.unit.period() * self.span
    }

    /// The quota of this rate, with the burst its count as written,
    /// rounded up (see [`Rate`]).
    pub fn quota(&self) -> Quota {
        let burst = self.count.div_ceil(self.scale).max(1);
        Quota::with_period(self.count, self.period()).with_burst(burst)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.count / self.scale)?;
        let fraction = self.count % self.scale;
        if fraction > 0 {
            // `scale` divides a power of ten (it came from one): the
            // fraction has that many decimal places, or fewer.
            let mut places = 0;
            let mut ten = 1u64;
            while !ten.is_multiple_of(u64::from(self.scale)) {
                (places, ten) = (places + 1, ten * 10);
            }
            let digits = u64::from(fraction) * (ten / u64::from(self.scale));
            let digits = format!("{digits:0places$}");
            write!(f, ".{}", digits.trim_end_matches('0'))?;
        }
        f.write_str("/")?;
        let span = self.span / self.scale;
        if span != 1 {
            write!(f, "{span}")?;
        }
        f.write_str(self.unit.symbol())
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
        let Some((count, per)) = s.split_once('/') else {
            return Err(err(RateErrorKind::NoUnit));
        };
        let digits = per.bytes().take_while(u8::is_ascii_digit).count();
        let (span, unit) = per.split_at(digits);
        let Some(unit) = Unit::ALL.into_iter().find(|u| u.symbol() == unit) else {
            return Err(err(RateErrorKind::UnknownUnit));
        };
        let span: u64 = match span {
            "" => 1,
            span => span.parse().map_err(|_| err(RateErrorKind::SpanTooLarge))?,
        };
        if span == 0 {
            return Err(err(RateErrorKind::ZeroSpan));
        }
        // COUNT is digits with at most one '.' among them: `u32::from_str`
        // would also take a leading '+', and f64 would round.
        let (whole, fraction) = count.split_once('.').unwrap_or((count, ""));
        let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
        if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) || count.ends_with('.') {
            return Err(err(RateErrorKind::NotACount));
        }
        // COUNT = numer / 10^places exactly; numer and the span are scaled
        // by the same power of ten, then reduced.
        let fraction = fraction.trim_end_matches('0');
        let places = u32::try_from(fraction.len()).unwrap_or(u32::MAX);
        let too_fine = || err(RateErrorKind::TooFine);
        let scale = 10u64.checked_pow(places).ok_or_else(too_fine)?;
        let numer: u64 = format!("{whole}{fraction}").parse().map_err(|_| {
            err(if places == 0 {
                RateErrorKind::CountTooLarge
            } else {
                RateErrorKind::TooFine
            })
        })?;
        if numer == 0 {
            return Err(err(RateErrorKind::ZeroCount));
        }
        let g = gcd(numer, scale);
        let count = u32::try_from(numer / g).map_err(|_| {
            err(if places == 0 {
                RateErrorKind::CountTooLarge
            } else {
                RateErrorKind::TooFine
            })
        })?;
        let lengthened = u32::try_from(scale / g).map_err(|_| too_fine())?;
        let span = (scale / g)
            .checked_mul(span)
            .and_then(|s| u32::try_from(s).ok())
            .ok_or_else(|| {
                err(if places == 0 {
                    RateErrorKind::SpanTooLarge
                } else {
                    RateErrorKind::TooFine
                })
            })?;
        Ok(Rate {
            count,
            span,
            unit,
            scale: lengthened,
        })
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Serialize for Rate {
    /// The rate as it prints, which reads back as the same rate.
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
                f.write_str("a rate such as \"5/s\", \"300/m\", \"100/10s\" or \"1/d\"")
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
    /// The unit is not `ms`, `s`, `m`, `h` or `d`, after an optional span.
    UnknownUnit,
    /// The count is not a number written in digits, with at most one `.`.
    NotACount,
    /// The count does not fit in 32 bits.
    CountTooLarge,
    /// The count is zero.
    ZeroCount,
    /// The span before the unit is zero, as in `"5/0s"`.
    ZeroSpan,
    /// The span before the unit does not fit in 32 bits.
    SpanTooLarge,
    /// A fractional count that cannot be kept exact as a 32-bit whole count
    /// over a 32-bit span of the unit, such as `"0.0000000001/s"`.
    TooFine,
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
        let (count, per) = input.split_once('/').unwrap_or((input, ""));
        match self.kind {
            RateErrorKind::Empty => f.write_str(
                "the rate is empty: write COUNT/UNIT, such as \"5/s\", \"300/m\" or \"100/10s\"",
            ),
            RateErrorKind::NoUnit => write!(
                f,
                "rate {input:?} has no unit: write COUNT/UNIT with UNIT one of ms, s, m, h \
                 or d, such as \"5/s\""
            ),
            RateErrorKind::UnknownUnit => {
                let unit = per.trim_start_matches(|c: char| c.is_ascii_digit());
                write!(
                    f,
                    "rate {input:?} has the unknown unit {unit:?}: use ms, s (per second), \
                     m (per minute), h (per hour) or d (per day), optionally after a number, \
                     such as \"100/10s\""
                )
            }
            RateErrorKind::NotACount => write!(
                f,
                "rate {input:?}: the count {count:?} is not a number: write digits, with \
                 at most one '.', such as \"5/s\" or \"0.5/s\""
            ),
            RateErrorKind::CountTooLarge => write!(
                f,
                "rate {input:?}: the count is more than {}: use a smaller count or a shorter \
                 period",
                u32::MAX
            ),
            RateErrorKind::ZeroCount => {
                write!(f, "rate {input:?} allows no requests: use a count above 0")
            }
            RateErrorKind::ZeroSpan => write!(
                f,
                "rate {input:?} has a period of zero: write a span of at least 1 before the \
                 unit, such as \"100/10s\", or the unit alone"
            ),
            RateErrorKind::SpanTooLarge => write!(
                f,
                "rate {input:?}: the span before the unit is more than {}: use a longer unit, \
                 such as d for days",
                u32::MAX
            ),
            RateErrorKind::TooFine => write!(
                f,
                "rate {input:?}: the count {count:?} cannot be kept exact as a whole count \
                 per period: write a whole count over a longer span with fewer decimals, such \
                 as \"1/30d\""
            ),
        }
    }
}

impl std::error::Error for RateError {}
