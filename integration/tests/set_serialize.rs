//! Config types round-trip through TOML and JSON, and nest inside an
//! application's config (feature `config`).

use std::time::Duration;

use serde::Deserialize;
use shuffle_limiter::MonotonicClock;
use shuffle_limiter::set::{InFlightConfig, LimiterConfig, LimiterSet, SetConfig};

const FULL: &str = r#"
    [limiters.amazon]
    rate = "0.5/s"
    burst = 4
    buckets = 4
    per_tenant = 2
    per_user = 1
    borrow_from = 1
    lender_reserve = 0.25
    salt = "s3cret"
    tenant_cache = 64
    tiers = { gold = 3 }
    tenant_tiers = { acme = "gold" }

    [limiters.walmart]
    rate = "100/10s"
"#;

#[test]
fn a_config_round_trips_through_toml_and_json() {
    let config: SetConfig = toml::from_str(FULL).unwrap();
    let amazon = &config.limiters["amazon"];
    assert_eq!(amazon.rate.to_string(), "0.5/s");
    assert_eq!(amazon.lender_reserve.unwrap().get(), 0.25);

    let printed = toml::to_string(&config).unwrap();
    let again: SetConfig = toml::from_str(&printed).unwrap_or_else(|e| panic!("{printed}\n{e}"));
    assert_eq!(again, config, "{printed}");
    // Unset settings are left out rather than written as defaults.
    assert!(
        !printed.contains("walmart]\nrate = \"100/10s\"\nburst"),
        "{printed}"
    );
    assert!(printed.contains("rate = \"100/10s\""), "{printed}");

    let json = serde_json::to_string(&config).unwrap();
    let again: SetConfig = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{json}\n{e}"));
    assert_eq!(again, config, "{json}");
    assert!(json.contains(r#""walmart":{"rate":"100/10s"}"#), "{json}");
    LimiterSet::from_config(&again).unwrap();
}

#[cfg(feature = "redis")]
#[test]
fn a_redis_limiter_round_trips_with_its_keys() {
    let text = r#"
        [limiters.walmart]
        rate = "600/m"
        redis = "redis://:pw@127.0.0.1:6379"
        failure_policy = "local_fallback"
        replicas = 4
        deadline = "5ms"
        retry_every = "1m 30s"
        cache_denials = false
        key_prefix = "billing:"
    "#;
    let config: SetConfig = toml::from_str(text).unwrap();
    let printed = toml::to_string(&config).unwrap();
    assert!(printed.contains("retry_every = \"1m 30s\""), "{printed}");
    assert!(
        printed.contains("failure_policy = \"local_fallback\""),
        "{printed}"
    );
    assert_eq!(toml::from_str::<SetConfig>(&printed).unwrap(), config);
    let json = serde_json::to_string(&config).unwrap();
    assert_eq!(serde_json::from_str::<SetConfig>(&json).unwrap(), config);
    let redis = config.limiters["walmart"].redis.as_ref().unwrap();
    let alone = serde_json::to_value(redis).unwrap();
    assert_eq!(alone["replicas"], 4);
    assert_eq!(alone["deadline"], "5ms");
    assert_eq!(alone["key_prefix"], "billing:");
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct App {
    name: String,
    limits: SetConfig,
}

#[derive(Debug, Deserialize)]
struct Flat {
    name: String,
    #[serde(flatten)]
    limits: SetConfig,
}

#[test]
fn a_set_config_nests_as_a_field_beside_the_application_keys() {
    let app: App =
        toml::from_str("name = \"shop\"\n[limits.limiters.amazon]\nrate = \"5/s\"\n").unwrap();
    assert_eq!(app.name, "shop");
    assert_eq!(app.limits.limiters["amazon"].rate.to_string(), "5/s");

    // Its own keys stay strict, with the position of the offending key.
    let err = toml::from_str::<App>(
        "name = \"shop\"\n[limits]\nlimiter = 1\n[limits.limiters.amazon]\nrate = \"5/s\"\n",
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("limiter: unknown key"), "{err}");
    assert!(err.contains("line 2, column 1"), "{err}"); // the [limits] table

    let app: App = serde_json::from_str(
        r#"{"name": "shop", "limits": {"limiters": {"amazon": {"rate": "1/d"}}}}"#,
    )
    .unwrap();
    assert_eq!(app.limits.limiters["amazon"].rate.to_string(), "1/d");
}

#[test]
fn a_flattened_set_config_leaves_the_application_keys_alone() {
    let flat: Flat =
        toml::from_str("name = \"shop\"\n[limiters.amazon]\nrate = \"5/s\"\n").unwrap();
    assert_eq!(flat.name, "shop");
    assert_eq!(flat.limits.limiters.len(), 1);
    // A key neither side knows is still refused.
    let err =
        toml::from_str::<Flat>("name = \"shop\"\nnmae = 1\n[limiters.amazon]\nrate = \"5/s\"\n")
            .unwrap_err()
            .to_string();
    assert!(err.contains("nmae: unknown key"), "{err}");
}

#[test]
fn a_set_read_straight_from_toml_places_its_build_errors() {
    let text =
        "[limiters.amazon]\nrate = \"5/s\"\n\n[limiters.ebay]\nrate = \"5/s\"\nbuckets = 8\n";
    let err = toml::from_str::<LimiterSet>(text).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("at line 4, column 1"), "{message}");
    assert!(
        message.contains("limiters.ebay.burst: a burst of 5 cannot give each of the 8 buckets"),
        "{message}"
    );
    assert_eq!(&text[err.span().unwrap()][..15], "[limiters.ebay]");
    // The same config read as a SetConfig holds it; building it then names
    // the key, without a position.
    let config: SetConfig = toml::from_str(text).unwrap();
    let err = LimiterSet::from_config(&config).unwrap_err();
    assert_eq!((err.limiter(), err.field()), ("ebay", Some("burst")));
    // JSON has no positions, and the same message.
    let json = r#"{"limiters": {"ebay": {"rate": "5/s", "buckets": 8}}}"#;
    let err = serde_json::from_str::<LimiterSet>(json)
        .unwrap_err()
        .to_string();
    assert!(err.contains("limiters.ebay.burst: a burst of 5"), "{err}");
}

/// Configs built in code that the reader would refuse: the set refuses
/// them too, naming the same setting, so that every config a set was built
/// from prints as one that reads back.
#[test]
fn a_config_built_in_code_is_refused_where_its_print_would_not_read_back() {
    let rate = || "5/s".parse().unwrap();
    let with = |change: fn(&mut LimiterConfig)| {
        let mut limiter = LimiterConfig::new(rate());
        change(&mut limiter);
        let mut config = SetConfig::default();
        config.limiters.insert("amazon".to_owned(), limiter);
        config
    };
    let cases = [
        // A lease_ttl puts an in-flight limit's pools in Redis; beside an
        // in-process limiter it left the limiter with no in-flight limit.
        (
            with(|l| {
                let mut inflight = InFlightConfig::new(4);
                inflight.lease_ttl = Some(Duration::from_secs(30));
                l.inflight = Some(inflight);
            }),
            "limiters.amazon.lease_ttl: only an in-flight limit in Redis takes a lease_ttl",
        ),
        (
            with(|l| {
                let mut inflight = InFlightConfig::new(4);
                inflight.max_wait = Some(Duration::ZERO);
                l.inflight = Some(inflight);
            }),
            "limiters.amazon.max_wait: ",
        ),
        (
            SetConfig::default(),
            "limiters: empty: add a table per limiter",
        ),
    ];
    for (config, message) in cases {
        let err = LimiterSet::from_config(&config).map(|_| ()).unwrap_err();
        assert!(err.to_string().starts_with(message), "{err}");
        let printed = toml::to_string(&config).unwrap();
        let read = toml::from_str::<SetConfig>(&printed)
            .unwrap_err()
            .to_string();
        assert!(read.contains(message), "{printed}\n{read}");
    }
    let zero = with(|l| {
        let mut inflight = InFlightConfig::new(4);
        inflight.max_wait = Some(Duration::ZERO);
        l.inflight = Some(inflight);
    });
    let err = LimiterSet::from_config(&zero).map(|_| ()).unwrap_err();
    assert_eq!(err.field(), Some("max_wait"), "{err}");
    assert!(err.to_string().contains("use a positive duration"), "{err}");

    // A reload to no limiters is refused as the reader refuses it, and the
    // set keeps its limiters.
    let set = LimiterSet::from_config(&with(|_| ())).unwrap();
    let err = set
        .reload(&SetConfig::default(), MonotonicClock::new())
        .map(|_| ())
        .unwrap_err();
    assert!(err.to_string().starts_with("limiters: empty"), "{err}");
    assert_eq!(set.names().collect::<Vec<_>>(), ["amazon"]);
}
