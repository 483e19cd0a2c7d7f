//! Rate strings: seconds, minutes and hours, spans, days, milliseconds and
//! fractional counts, every malformed one with its own error; `Quota`'s
//! display (feature `config`).

use std::time::Duration;

use shuffle_limiter::set::{LimiterSet, Rate, RateErrorKind, SetConfig};
use shuffle_limiter::{ManualClock, Quota};

#[test]
fn rates_in_seconds_minutes_and_hours_parse() {
    for (text, count, secs) in [
        ("5/s", 5, 1),
        ("300/m", 300, 60),
        ("1000/h", 1000, 3600),
        ("1/h", 1, 3600),
        ("4294967295/s", u32::MAX, 1),
        ("007/s", 7, 1),
    ] {
        let rate: Rate = text.parse().unwrap();
        assert_eq!(rate.count(), count, "{text}");
        assert_eq!(rate.period(), Duration::from_secs(secs), "{text}");
        assert_eq!(rate.quota(), Quota::new(count, Duration::from_secs(secs)));
    }
    assert_eq!("300/m".parse::<Rate>().unwrap().to_string(), "300/m");
    assert_eq!("007/s".parse::<Rate>().unwrap().to_string(), "7/s");
}

#[test]
fn every_malformed_rate_gets_its_own_error_saying_what_to_write() {
    use RateErrorKind::*;
    let cases = [
        ("", Empty, "the rate is empty: write COUNT/UNIT"),
        ("5", NoUnit, "rate \"5\" has no unit"),
        ("five", NoUnit, "has no unit"),
        ("5/", UnknownUnit, "the unknown unit \"\""),
        (
            "5/w",
            UnknownUnit,
            "the unknown unit \"w\": use ms, s (per second)",
        ),
        ("5/sec", UnknownUnit, "the unknown unit \"sec\""),
        ("5/S", UnknownUnit, "the unknown unit \"S\""),
        ("5/ s", UnknownUnit, "the unknown unit \" s\""),
        ("5/s ", UnknownUnit, "the unknown unit \"s \""),
        ("5/s/", UnknownUnit, "the unknown unit \"s/\""),
        ("5//s", UnknownUnit, "the unknown unit \"/s\""),
        ("/s", NotACount, "the count \"\" is not a number"),
        ("five/s", NotACount, "the count \"five\" is not a number"),
        ("5.5.5/s", NotACount, "the count \"5.5.5\""),
        ("-5/s", NotACount, "the count \"-5\""),
        ("+5/s", NotACount, "the count \"+5\""),
        (" 5/s", NotACount, "the count \" 5\""),
        ("5 /s", NotACount, "the count \"5 \""),
        ("1e3/s", NotACount, "the count \"1e3\""),
        (
            "4294967296/s",
            CountTooLarge,
            "the count is more than 4294967295",
        ),
        (
            "0/s",
            ZeroCount,
            "rate \"0/s\" allows no requests: use a count above 0",
        ),
        ("000/m", ZeroCount, "allows no requests"),
    ];
    for (text, kind, message) in cases {
        let err = text.parse::<Rate>().unwrap_err();
        assert_eq!(err.kind(), kind, "{text:?}");
        assert_eq!(err.input(), text);
        assert!(
            err.to_string().contains(message),
            "{text:?}: {err} should contain {message:?}"
        );
    }
}

#[test]
fn spans_days_and_milliseconds_read_as_their_period() {
    for (text, count, period, shown) in [
        ("100/10s", 100, Duration::from_secs(10), "100/10s"),
        ("1/d", 1, Duration::from_secs(86_400), "1/d"),
        ("250/500ms", 250, Duration::from_millis(500), "250/500ms"),
        ("3600/h", 3600, Duration::from_secs(3600), "3600/h"),
        ("5/1s", 5, Duration::from_secs(1), "5/s"),
        ("7/90m", 7, Duration::from_secs(90 * 60), "7/90m"),
        ("0.5/s", 1, Duration::from_secs(2), "0.5/s"),
        ("1.5/m", 3, Duration::from_secs(120), "1.5/m"),
        ("2.50/s", 5, Duration::from_secs(2), "2.5/s"),
        ("0.25/10ms", 1, Duration::from_millis(40), "0.25/10ms"),
        ("3.0/s", 3, Duration::from_secs(1), "3/s"),
        ("0.001/ms", 1, Duration::from_secs(1), "0.001/ms"),
        ("99.99/s", 9999, Duration::from_secs(100), "99.99/s"),
        ("1/2s", 1, Duration::from_secs(2), "1/2s"),
    ] {
        let rate: Rate = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!((rate.count(), rate.period()), (count, period), "{text}");
        assert_eq!(rate.to_string(), shown, "{text}");
        // What prints reads back as the same rate.
        assert_eq!(shown.parse::<Rate>().unwrap(), rate, "{text}");
    }
}

#[test]
fn the_default_burst_is_the_count_as_written_rounded_up() {
    for (text, burst) in [
        ("5/s", 5),
        ("100/10s", 100),
        ("0.5/s", 1),
        ("1.5/m", 2),
        ("3/2m", 3),
        ("99.99/s", 100),
        ("0.001/ms", 1),
    ] {
        let rate: Rate = text.parse().unwrap();
        let quota = rate.quota();
        assert_eq!(quota.burst(), burst, "{text}");
        assert_eq!(
            (quota.count(), quota.period()),
            (rate.count(), rate.period())
        );
    }
    // A limiter of "99.99/s" grants about 100 at once, not the 9999 of the
    // whole count it stands for (over 100 s).
    let config: SetConfig =
        toml::from_str("[limiters.a]\nrate = \"99.99/s\"\nbuckets = 1\nper_tenant = 1").unwrap();
    let set = LimiterSet::from_config_with_clock(&config, ManualClock::new()).unwrap();
    let a = set.get("a").unwrap();
    let granted = (0..20_000).filter(|_| a.check("t").is_ok()).count();
    assert_eq!(granted, 100);
}

#[test]
fn rates_that_cannot_be_kept_exact_say_what_to_write() {
    use RateErrorKind::*;
    for (text, kind, message) in [
        ("5/0s", ZeroSpan, "has a period of zero"),
        ("5/99999999999s", SpanTooLarge, "use a longer unit"),
        (
            "0.0000000001/s",
            TooFine,
            "write a whole count over a longer span",
        ),
        (
            "0.00000000000000000000001/s",
            TooFine,
            "cannot be kept exact",
        ),
        ("0.0/s", ZeroCount, "allows no requests"),
        ("5./s", NotACount, "is not a number"),
        (".5/s", NotACount, "is not a number"),
        ("5/1.5s", UnknownUnit, "the unknown unit \".5s\""),
        ("5/10", UnknownUnit, "the unknown unit \"\""),
        ("5/w", UnknownUnit, "d (per day)"),
    ] {
        let err = text.parse::<Rate>().unwrap_err();
        assert_eq!(err.kind(), kind, "{text}: {err}");
        assert!(err.to_string().contains(message), "{text}: {err}");
    }
}

#[test]
fn a_limiter_built_from_a_fractional_rate_grants_at_that_rate() {
    let rate: Rate = "0.5/s".parse().unwrap();
    let clock = shuffle_limiter::ManualClock::new();
    let limiter = shuffle_limiter::ShardedLimiter::builder()
        .quota(rate.quota())
        .clock(clock.clone())
        .build()
        .unwrap();
    assert!(limiter.check("t").is_ok());
    let denied = limiter.check("t").unwrap_err();
    assert_eq!(denied.retry_after(), Duration::from_secs(2));
}
