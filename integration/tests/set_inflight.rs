//! In-flight limits in a limiter set: `concurrency = 40` and its options
//! build an `InFlight` beside the rate limiter of that name; bad values are
//! typed errors naming the field; a reload keeps the limit and its permits.

use std::time::Duration;

use shuffle_limiter::inflight::{BuildError, DEFAULT_MAX_QUEUE, RejectReason};
use shuffle_limiter::set::{InFlightConfig, LimiterSet, SetConfig};
use shuffle_limiter::{ManualClock, Request};

fn config(text: &str) -> SetConfig {
    toml::from_str(text).unwrap()
}

fn toml_err(text: &str) -> String {
    toml::from_str::<SetConfig>(text).unwrap_err().to_string()
}

const PARTNER: &str = r#"
[limiters.partner]
rate = "100/s"
buckets = 8
per_tenant = 2
salt = "s"
concurrency = 40
pools = 8
max_queue = 20

[limiters.ebay]
rate = "5/s"
"#;

#[test]
fn concurrency_builds_an_inflight_limit_beside_the_rate_limiter() {
    let config = config(PARTNER);
    let mut expected = InFlightConfig::new(40);
    expected.pools = Some(8);
    expected.max_queue = Some(20);
    assert_eq!(config.limiters["partner"].inflight, Some(expected));
    assert_eq!(config.limiters["ebay"].inflight, None);

    let set = LimiterSet::from_config(&config).unwrap();
    let inflight = set.inflight("partner").expect("configured");
    assert_eq!(
        (
            inflight.concurrency(),
            inflight.pools(),
            inflight.per_tenant()
        ),
        (40, 8, 2)
    );
    assert_eq!(inflight.max_queue(), 20);
    // The limiter's k and salt, with as many pools as buckets: a tenant's
    // pools are its buckets.
    let limiter = set.get("partner").unwrap();
    for t in 0..50 {
        let tenant = format!("tenant-{t}");
        assert_eq!(inflight.shard(&tenant), limiter.shard(&tenant));
    }
    assert!(set.inflight("ebay").is_none());
    assert!(set.inflight("nobody").is_none());
    // Clones share it.
    let clone = set.clone();
    let _permit = inflight.try_acquire("tenant-0").unwrap();
    assert_eq!(clone.inflight("partner").unwrap().available(), 39);
}

#[test]
fn unset_options_take_the_defaults_and_the_limiters_counts() {
    let set: LimiterSet = toml::from_str(
        "[limiters.a]\nrate = \"5/s\"\nconcurrency = 6\n\
         [limiters.b]\nrate = \"5/s\"\nper_tenant = 3\nper_user = 1\nconcurrency = 40\n",
    )
    .unwrap();
    let a = set.inflight("a").unwrap();
    assert_eq!((a.pools(), a.per_tenant()), (6, 2), "C pools when C < 8");
    assert_eq!(a.max_queue(), DEFAULT_MAX_QUEUE);
    #[cfg(feature = "wait")]
    assert_eq!(a.max_wait(), None);
    let b = set.inflight("b").unwrap();
    assert_eq!((b.pools(), b.per_tenant()), (8, 3));
    let user = Request::tenant("acme").user("alice");
    assert_eq!(b.shard(user).buckets().len(), 1, "the limiter's per_user");
}

#[test]
fn bad_values_are_typed_errors_naming_the_field() {
    let cases = [
        (
            "concurrency = 0",
            "concurrency",
            BuildError::ZeroConcurrency,
        ),
        ("concurrency = 5\npools = 0", "pools", BuildError::ZeroPools),
        (
            "concurrency = 5\npools = 8",
            "pools",
            BuildError::ConcurrencyBelowPools {
                concurrency: 5,
                pools: 8,
            },
        ),
        (
            "concurrency = 3\nper_tenant = 4\nbuckets = 5",
            "per_tenant",
            BuildError::PerTenantExceedsPools {
                per_tenant: 4,
                pools: 3,
            },
        ),
    ];
    for (keys, field, error) in cases {
        let text = format!("[limiters.x]\nrate = \"5/s\"\nburst = 5\n{keys}\n");
        let err = LimiterSet::from_config(&config(&text)).unwrap_err();
        assert_eq!((err.limiter(), err.field()), ("x", Some(field)), "{keys}");
        assert_eq!(err.inflight_error(), Some(&error));
        let message = err.to_string();
        assert!(
            message.starts_with(&format!("limiters.x.{field}: ")),
            "{message}"
        );
        assert!(message.contains(&error.to_string()), "{message}");
        // Read straight into a set, TOML says which table.
        let direct = toml::from_str::<LimiterSet>(&text).unwrap_err().to_string();
        assert!(direct.contains("line 1"), "{direct}");
        assert!(
            direct.contains(&format!("limiters.x.{field}: ")),
            "{direct}"
        );
    }
    // Values that are no count or duration, at the value.
    let err = toml_err("[limiters.x]\nrate = \"5/s\"\nconcurrency = -1\n");
    assert!(
        err.contains("line 3") && err.contains("limiters.x.concurrency: "),
        "{err}"
    );
    // An option without a concurrency does nothing: refused.
    for key in ["pools = 4", "max_queue = 4", "max_wait = \"1s\""] {
        let err = toml_err(&format!("[limiters.x]\nrate = \"5/s\"\n{key}\n"));
        let name = key.split(' ').next().unwrap();
        assert!(
            err.contains(&format!(
                "limiters.x.{name}: only an in-flight limit takes {name}"
            )),
            "{err}"
        );
        assert!(err.contains("add concurrency = N"), "{err}");
    }
    let err = toml_err("[limiters.x]\nrate = \"5/s\"\nconcurency = 4\n");
    assert!(
        err.contains("an in-flight limit takes concurrency, pools"),
        "{err}"
    );
    let err = toml_err("[limiters.x]\nrate = \"5/s\"\nconcurrency = 4\nconcurrency = 5\n");
    assert!(err.contains("concurrency"), "{err}");
}

#[test]
fn a_limiter_that_lends_tokens_lends_permits_above_the_same_reserve() {
    let text = r#"
        [limiters.x]
        rate = "100/s"
        buckets = 8
        per_tenant = 2
        borrow_from = 2
        lender_reserve = 0.5
        concurrency = 16
        pools = 8
    "#;
    let set = LimiterSet::from_config(&config(text)).unwrap();
    let (limiter, inflight) = (set.get("x").unwrap(), set.inflight("x").unwrap());
    // The spill pools are the spill buckets.
    assert_eq!(inflight.shard("t"), limiter.shard("t"));
    assert_eq!(inflight.shard("t").spill().len(), 2);
    // Its own 2 pools of 2, then 1 above the reserve of each spill pool.
    let held: Vec<_> = std::iter::from_fn(|| inflight.try_acquire("t").ok()).collect();
    assert_eq!(held.len(), 6);
    assert_eq!(held.iter().filter(|p| p.borrowed()).count(), 2);
    for &pool in inflight.shard("t").spill() {
        assert_eq!(inflight.free(pool), inflight.reserve(pool));
    }
    // Fewer pools than the shard and spill ranks: refused at borrow_from,
    // though the rate limiter's 8 buckets would take it.
    let text = text.replace("pools = 8", "pools = 3");
    let err = LimiterSet::from_config(&config(&text)).unwrap_err();
    assert_eq!((err.limiter(), err.field()), ("x", Some("borrow_from")));
    assert!(
        matches!(
            err.inflight_error(),
            Some(BuildError::SpillExceedsPools { .. })
        ),
        "{err}"
    );
}

#[test]
fn a_config_with_concurrency_prints_as_it_reads() {
    let config = config(PARTNER);
    let printed = toml::to_string(&config).unwrap();
    assert!(
        printed.contains("concurrency = 40\npools = 8\nmax_queue = 20\n"),
        "{printed}"
    );
    assert_eq!(toml::from_str::<SetConfig>(&printed).unwrap(), config);
}

#[test]
fn a_reload_keeps_the_limit_and_its_permits_and_refuses_a_change() {
    let clock = ManualClock::new();
    let set = LimiterSet::from_config_with_clock(&config(PARTNER), clock.clone()).unwrap();
    let inflight = set.inflight("partner").unwrap().clone();
    let held = inflight.try_acquire("tenant-0").unwrap();
    // The rate changes live; the in-flight limit is the same one.
    let faster = PARTNER.replace("\"100/s\"", "\"200/s\"");
    let reload = set.reload(&config(&faster), clock.clone()).unwrap();
    assert_eq!(reload.changed(), ["partner".to_owned()]);
    let kept = reload.set().inflight("partner").unwrap();
    assert!(std::sync::Arc::ptr_eq(kept, &inflight));
    assert_eq!(kept.available(), 39, "the permit out is still out");
    // A limiter added with a concurrency gets its limit.
    let added = format!("{faster}\n[limiters.etsy]\nrate = \"1/s\"\nconcurrency = 2\n");
    let reload = reload.set().reload(&config(&added), clock.clone()).unwrap();
    assert_eq!(reload.set().inflight("etsy").unwrap().concurrency(), 2);
    // Its settings are fixed while it runs.
    for (from, to, field) in [
        ("concurrency = 40", "concurrency = 80", "concurrency"),
        ("pools = 8", "pools = 4", "pools"),
        ("max_queue = 20", "max_queue = 10", "max_queue"),
        (
            "concurrency = 40\npools = 8\nmax_queue = 20",
            "",
            "concurrency",
        ),
    ] {
        let err = set
            .reload(&config(&PARTNER.replace(from, to)), clock.clone())
            .unwrap_err();
        assert_eq!(err.field(), Some(field), "{from} -> {to}");
        assert!(
            err.to_string()
                .contains("a running limiter keeps this setting")
        );
    }
    drop(held);
    let late = inflight
        .try_acquire(Request::tenant("t").tokens(11))
        .unwrap_err();
    assert!(matches!(
        late.reason(),
        RejectReason::NeverFits { most: 10, .. }
    ));
}

#[cfg(feature = "wait")]
#[test]
fn max_wait_bounds_every_acquire_and_is_read_printed_and_fixed() {
    let text = PARTNER.replace("max_queue = 20", "max_queue = 20\nmax_wait = \"250ms\"");
    let config = config(&text);
    let max_wait = Some(Duration::from_millis(250));
    assert_eq!(
        config.limiters["partner"]
            .inflight
            .as_ref()
            .unwrap()
            .max_wait,
        max_wait
    );
    let printed = toml::to_string(&config).unwrap();
    assert!(
        printed.contains("max_queue = 20\nmax_wait = \"250ms\"\n"),
        "{printed}"
    );
    assert_eq!(toml::from_str::<SetConfig>(&printed).unwrap(), config);
    let clock = ManualClock::new();
    let set = LimiterSet::from_config_with_clock(&config, clock.clone()).unwrap();
    assert_eq!(set.inflight("partner").unwrap().max_wait(), max_wait);
    let longer = text.replace("\"250ms\"", "\"1s\"");
    let err = set.reload(&self::config(&longer), clock).unwrap_err();
    assert_eq!(err.field(), Some("max_wait"));

    let err = toml_err("[limiters.x]\nrate = \"5/s\"\nconcurrency = 4\nmax_wait = \"soon\"\n");
    assert!(
        err.contains("line 4") && err.contains("limiters.x.max_wait: \"soon\""),
        "{err}"
    );
    let err = toml_err("[limiters.x]\nrate = \"5/s\"\nconcurrency = 4\nmax_wait = \"0s\"\n");
    assert!(err.contains("is zero"), "{err}");
}

#[cfg(feature = "wait")]
#[tokio::test(start_paused = true)]
async fn a_configured_max_wait_bounds_an_acquire() {
    let set: LimiterSet =
        toml::from_str("[limiters.x]\nrate = \"5/s\"\nconcurrency = 1\nmax_wait = \"100ms\"\n")
            .unwrap();
    let inflight = set.inflight("x").unwrap();
    let _held = inflight.try_acquire("t").unwrap();
    let start = tokio::time::Instant::now();
    let late = inflight.acquire("t").await.unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    let max_wait = Duration::from_millis(100);
    assert_eq!(late.reason(), RejectReason::TimedOut { max_wait });
}

#[cfg(not(feature = "wait"))]
#[test]
fn without_the_wait_feature_max_wait_is_refused_with_what_to_enable() {
    let err = toml_err("[limiters.x]\nrate = \"5/s\"\nconcurrency = 4\nmax_wait = \"1s\"\n");
    assert!(
        err.contains("limiters.x.max_wait: a bounded wait needs the `wait` feature"),
        "{err}"
    );
    let mut config = config("[limiters.x]\nrate = \"5/s\"\nconcurrency = 4\n");
    let inflight = config
        .limiters
        .get_mut("x")
        .unwrap()
        .inflight
        .as_mut()
        .unwrap();
    inflight.max_wait = Some(Duration::from_secs(1));
    let err = LimiterSet::from_config(&config).unwrap_err();
    assert_eq!(err.field(), Some("max_wait"));
}

#[test]
fn the_error_is_the_first_limiters_in_name_order_whichever_limit_it_is_in() {
    // `a`'s in-flight limit cannot work, and so cannot `b`'s rate limiter:
    // the error is `a`'s, as `from_config` says.
    let text = "[limiters.a]\nrate = \"8/s\"\nconcurrency = 4\npools = 0\n\
                [limiters.b]\nrate = \"8/s\"\nbuckets = 0\n";
    let err = LimiterSet::from_config(&config(text)).unwrap_err();
    assert_eq!(err.limiter(), "a", "{err}");
}

/// A reload refuses to change a running in-flight limit's settings, but a
/// default written out is no change (as for the limiter's own settings):
/// `max_queue = 50` or `pools = 8` beside `concurrency = 40` that left
/// them unset builds the very same limit, which the reload keeps; a real
/// change of either is still refused by name.
#[test]
fn a_reload_writing_out_the_in_flight_defaults_keeps_the_limit() {
    const BASE: &str = "[limiters.p]\nrate = \"100/s\"\nconcurrency = 40\n";
    let clock = ManualClock::new();
    let set = LimiterSet::from_config_with_clock(&config(BASE), clock.clone()).unwrap();
    let running = std::sync::Arc::clone(set.inflight("p").unwrap());
    assert_eq!(
        (running.pools(), running.max_queue()),
        (8, DEFAULT_MAX_QUEUE)
    );
    for extra in [
        format!("max_queue = {DEFAULT_MAX_QUEUE}"),
        "pools = 8".to_owned(),
    ] {
        let reload = set.reload(&config(&format!("{BASE}{extra}\n")), clock.clone());
        let reload = reload.unwrap_or_else(|err| panic!("{extra} written out: {err}"));
        let kept = reload.set().inflight("p").unwrap();
        assert!(
            std::sync::Arc::ptr_eq(kept, &running),
            "{extra}: a new limit"
        );
    }
    for (extra, key) in [("max_queue = 49", "max_queue"), ("pools = 4", "pools")] {
        let err = set
            .reload(&config(&format!("{BASE}{extra}\n")), clock.clone())
            .err()
            .unwrap_or_else(|| panic!("{extra}: a change of a running limit taken"));
        assert!(err.to_string().contains(key), "{extra}: {err}");
    }
}
