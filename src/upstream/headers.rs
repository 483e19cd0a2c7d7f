//! When an upstream says to come back, read from its headers by stated
//! rules: a value that is not one of the forms below is ignored (`None`),
//! never a panic and never a hold-off longer than [`MAX_HOLD_OFF`].

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::MAX_HOLD_OFF;

/// How long a `Retry-After` value asks to wait, at `now`.
///
/// - Delta-seconds (`120`: ASCII digits only, RFC 9110): that many seconds,
///   cut to [`MAX_HOLD_OFF`] (so are digits beyond what 64 bits hold).
/// - An HTTP-date (`Wed, 21 Oct 2026 07:28:00 GMT`, or the two obsolete
///   forms): the time until then, cut to [`MAX_HOLD_OFF`]; zero for a date
///   at or before `now`. A date before 1970 is not read (`None`).
/// - Anything else (empty, negative, fractional, not text): `None`.
///
/// Surrounding spaces and tabs are ignored.
///
/// ```
/// use std::time::{Duration, SystemTime};
/// use shuffle_limiter::upstream::{MAX_HOLD_OFF, retry_after};
///
/// let now = SystemTime::now();
/// assert_eq!(retry_after(b"5", now), Some(Duration::from_secs(5)));
/// assert_eq!(retry_after(b"99999999999999999999", now), Some(MAX_HOLD_OFF));
/// assert_eq!(retry_after(b"Thu, 01 Jan 1970 00:00:00 GMT", now), Some(Duration::ZERO));
/// assert_eq!(retry_after(b"-1", now), None);
/// assert_eq!(retry_after(b"soon", now), None);
/// ```
pub fn retry_after(value: &[u8], now: SystemTime) -> Option<Duration> {
    let text = trimmed(value)?;
    if let Some(seconds) = delta_seconds(text) {
        return Some(seconds);
    }
    let date = httpdate::parse_http_date(text).ok()?;
    Some(until(date, now))
}

/// How long until a rate-limit window resets, from a `RateLimit-Reset` or
/// `X-RateLimit-Reset` value, or the `t` parameter of a `RateLimit` field
/// (`"default";r=0;t=30`), at `now`.
///
/// - Digits below 10⁹: seconds from now (cut to [`MAX_HOLD_OFF`]).
/// - Digits at or above 10⁹: a Unix time in seconds (as GitHub and others
///   send), the time until then (zero when past, cut to [`MAX_HOLD_OFF`]).
///   No delta of 31 years is meant, so the two never mix.
/// - A structured `RateLimit` field: the first `t=` parameter, as seconds.
/// - Anything else: `None`.
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use shuffle_limiter::upstream::reset_in;
///
/// let now = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
/// assert_eq!(reset_in(b"30", now), Some(Duration::from_secs(30)));
/// assert_eq!(reset_in(b"1800000012", now), Some(Duration::from_secs(12)));
/// assert_eq!(reset_in(b"\"default\";r=0;t=7", now), Some(Duration::from_secs(7)));
/// assert_eq!(reset_in(b"later", now), None);
/// ```
pub fn reset_in(value: &[u8], now: SystemTime) -> Option<Duration> {
    let text = trimmed(value)?;
    if text.bytes().all(|b| b.is_ascii_digit()) && !text.is_empty() {
        return match text.parse::<u64>() {
            Ok(seconds) if seconds < UNIX_TIME_FROM => Some(cut(seconds)),
            // A time no `SystemTime` holds (from 2^63 s on, here) is very
            // far ahead: cut, as any.
            Ok(seconds) => Some(
                UNIX_EPOCH
                    .checked_add(Duration::from_secs(seconds))
                    .map_or(MAX_HOLD_OFF, |then| until(then, now)),
            ),
            Err(_) => Some(MAX_HOLD_OFF), // beyond 64 bits: a time very far ahead
        };
    }
    // A structured field: items by ',', parameters by ';'.
    let parameter = text
        .split([',', ';'])
        .map(str::trim)
        .find_map(|parameter| parameter.strip_prefix("t="))?;
    delta_seconds(parameter)
}

/// The limit a `RateLimit-Policy` value advertises: its first policy's
/// requests and window, as `(limit, window)`, for
/// [`Signal::Advertised`](super::Signal::Advertised).
///
/// Both drafts' forms are read: `10;w=1` (the limit first) and
/// `"default";q=100;w=60` (named, the limit as `q`). A policy without a
/// whole limit and a whole, non-zero window is `None`.
///
/// ```
/// use std::time::Duration;
/// use shuffle_limiter::upstream::policy;
///
/// assert_eq!(policy(b"10;w=1, 1000;w=3600"), Some((10, Duration::from_secs(1))));
/// assert_eq!(policy(b"\"default\";q=100;w=60"), Some((100, Duration::from_secs(60))));
/// assert_eq!(policy(b"100"), None);
/// ```
pub fn policy(value: &[u8]) -> Option<(u32, Duration)> {
    let text = trimmed(value)?;
    let first = text.split(',').next()?;
    let mut parts = first.split(';').map(str::trim);
    let head = parts.next()?;
    let mut limit = head
        .parse::<u32>()
        .ok()
        .filter(|_| head.bytes().all(|b| b.is_ascii_digit()));
    let mut window = None;
    for part in parts {
        let digits = |value: &str| {
            (value.bytes().all(|b| b.is_ascii_digit())).then(|| value.parse::<u64>().ok())?
        };
        if let Some(q) = part.strip_prefix("q=") {
            limit = digits(q).and_then(|q| u32::try_from(q).ok());
        } else if let Some(w) = part.strip_prefix("w=") {
            window = digits(w).filter(|&w| w > 0).map(Duration::from_secs);
        }
    }
    Some((limit?, window?))
}

/// A reset value from this many seconds on is a Unix time (2001-09-09).
const UNIX_TIME_FROM: u64 = 1_000_000_000;

/// The value as text without surrounding spaces and tabs, if it is text.
fn trimmed(value: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(value).ok()?;
    Some(text.trim_matches([' ', '\t']))
}

/// `1*DIGIT` as seconds, cut to [`MAX_HOLD_OFF`].
fn delta_seconds(text: &str) -> Option<Duration> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Digits that do not fit 64 bits are a very long time: cut, as any.
    Some(text.parse::<u64>().map_or(MAX_HOLD_OFF, cut))
}

fn cut(seconds: u64) -> Duration {
    Duration::from_secs(seconds).min(MAX_HOLD_OFF)
}

/// From `now` until `then`: zero when past, cut to [`MAX_HOLD_OFF`].
fn until(then: SystemTime, now: SystemTime) -> Duration {
    then.duration_since(now)
        .unwrap_or(Duration::ZERO)
        .min(MAX_HOLD_OFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(NOW)
    }

    #[test]
    fn retry_after_reads_seconds_and_dates_and_ignores_the_rest() {
        let secs = Duration::from_secs;
        assert_eq!(retry_after(b"0", now()), Some(Duration::ZERO));
        assert_eq!(retry_after(b" \t120 ", now()), Some(secs(120)));
        assert_eq!(retry_after(b"3600", now()), Some(MAX_HOLD_OFF));
        assert_eq!(retry_after(b"3601", now()), Some(MAX_HOLD_OFF));
        assert_eq!(
            retry_after(b"18446744073709551616", now()),
            Some(MAX_HOLD_OFF)
        );
        // NOW is 2027-01-15 08:00:00 UTC: a date ten seconds after it, one before.
        let date = httpdate::fmt_http_date(now() + secs(10));
        assert_eq!(retry_after(date.as_bytes(), now()), Some(secs(10)));
        let past = httpdate::fmt_http_date(now() - secs(10));
        assert_eq!(retry_after(past.as_bytes(), now()), Some(Duration::ZERO));
        let years = httpdate::fmt_http_date(now() + secs(86_400 * 3650));
        assert_eq!(retry_after(years.as_bytes(), now()), Some(MAX_HOLD_OFF));
        for bad in [
            &b""[..],
            b" ",
            b"-5",
            b"+5",
            b"1.5",
            b"1e3",
            b"5s",
            b"\xff\xfe",
            b"Someday",
            b"Wed, 31 Dec 1969 23:59:59 GMT", // httpdate reads no date before 1970
        ] {
            assert_eq!(retry_after(bad, now()), None, "{bad:?}");
        }
    }

    #[test]
    fn a_policy_needs_a_whole_limit_and_window() {
        let secs = Duration::from_secs;
        assert_eq!(policy(b" 5;w=1 "), Some((5, secs(1))));
        assert_eq!(policy(b"\"a\";w=10;q=7"), Some((7, secs(10))));
        for bad in [
            &b""[..],
            b"5",
            b"5;w=0",
            b"5;w=-1",
            b"-5;w=1",
            b"5.5;w=1",
            b"x;q=1",
            b"99999999999;w=1",
            b"\xff",
        ] {
            assert_eq!(policy(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reset_reads_deltas_unix_times_and_the_structured_field() {
        let secs = Duration::from_secs;
        assert_eq!(reset_in(b"999999999", now()), Some(MAX_HOLD_OFF));
        assert_eq!(reset_in(b"59", now()), Some(secs(59)));
        assert_eq!(reset_in(b"1800000030", now()), Some(secs(30)));
        assert_eq!(reset_in(b"1799999999", now()), Some(Duration::ZERO));
        assert_eq!(reset_in(b"1900000000", now()), Some(MAX_HOLD_OFF));
        assert_eq!(
            reset_in(b"99999999999999999999999", now()),
            Some(MAX_HOLD_OFF)
        );
        // Within 64 bits, past what a SystemTime holds: cut, not a panic.
        for far in [&b"9223372036854775808"[..], b"18446744073709551615"] {
            assert_eq!(reset_in(far, now()), Some(MAX_HOLD_OFF), "{far:?}");
        }
        assert_eq!(
            reset_in(b"\"burst\";r=0;t=4, \"day\";r=9;t=80000", now()),
            Some(secs(4))
        );
        assert_eq!(reset_in(b"limit=10, remaining=0, reset=5", now()), None);
        for bad in [&b""[..], b"-3", b"t=", b"t=-1", b"t=2.5", b"\xc3\x28"] {
            assert_eq!(reset_in(bad, now()), None, "{bad:?}");
        }
    }
}
