//! Per-upstream limiter sets from TOML and JSON configs: every malformed
//! input reported with its place, and lookups (rate strings alone are in
//! set_rates.rs).

use std::time::Duration;

use shuffle_limiter::set::{LimiterConfig, LimiterSet, Member, SetConfig};
use shuffle_limiter::{ConfigError, ManualClock, Quota, Request, ShardedLimiter};

const EXAMPLE: &str = r#"
[limiters.amazon]
rate = "5/s"
burst = 5
buckets = 5
per_tenant = 2

[limiters.walmart]
rate = "600/m"
burst = 40
buckets = 16
per_tenant = 3
salt = "s3cret"
tenant_cache = 128

[limiters.etsy]
rate = "1000/h"
"#;

fn toml_err(text: &str) -> String {
    toml::from_str::<SetConfig>(text).unwrap_err().to_string()
}

fn json_err(text: &str) -> String {
    serde_json::from_str::<SetConfig>(text)
        .unwrap_err()
        .to_string()
}

#[test]
fn the_issue_example_builds_from_toml() {
    let config: SetConfig = toml::from_str(EXAMPLE).unwrap();
    let amazon = &config.limiters["amazon"];
    assert_eq!(amazon.rate, "5/s".parse().unwrap());
    assert_eq!(
        (amazon.burst, amazon.buckets, amazon.per_tenant),
        (Some(5), Some(5), Some(2))
    );
    let etsy = &config.limiters["etsy"];
    let mut expected = LimiterConfig::new("1000/h".parse().unwrap());
    expected.burst = None;
    assert_eq!(etsy, &expected);

    let set = LimiterSet::from_config(&config).unwrap();
    assert_eq!(set.len(), 3);
    assert_eq!(
        set.names().collect::<Vec<_>>(),
        ["amazon", "etsy", "walmart"]
    );
    let amazon = set.get("amazon").unwrap();
    assert_eq!(amazon.name(), "amazon");
    assert_eq!(amazon.quota(), Quota::per_second(5).with_burst(5));
    assert_eq!((amazon.buckets(), amazon.per_tenant()), (5, 2));

    let walmart = set.get("walmart").unwrap();
    assert_eq!(walmart.quota(), Quota::per_minute(600).with_burst(40));
    assert_eq!((walmart.buckets(), walmart.per_tenant()), (16, 3));
    // The salt reached the assignment: the same tenant lands elsewhere
    // than without it (checked over many tenants, as one may coincide).
    let unsalted = ShardedLimiter::builder()
        .quota(Quota::per_minute(600).with_burst(40))
        .buckets(16)
        .per_tenant(3)
        .tenant_cache(128)
        .build()
        .unwrap();
    // The cache size reached the builder too (it rounds it up its own way).
    assert_eq!(
        walmart.tenant_cache_capacity(),
        unsalted.tenant_cache_capacity()
    );
    assert!(walmart.tenant_cache_capacity() >= 128);
    assert_ne!(
        walmart.tenant_cache_capacity(),
        set.get("etsy").unwrap().tenant_cache_capacity()
    );
    assert!((0..50).any(|t| {
        let key = format!("tenant-{t}");
        !walmart.shard(&key).same_set(&unsalted.shard(&key))
    }));

    // Unset settings keep the builder's defaults: 8 buckets, 2 per tenant,
    // burst = count.
    let etsy = set.get("etsy").unwrap();
    assert_eq!(etsy.quota(), Quota::per_hour(1000));
    assert_eq!((etsy.buckets(), etsy.per_tenant()), (8, 2));
    assert!(set.get("ebay").is_none());
}

#[test]
fn json_gives_the_same_set_as_toml() {
    let json = r#"{
        "limiters": {
            "amazon": { "rate": "5/s", "burst": 5, "buckets": 5, "per_tenant": 2 },
            "walmart": { "rate": "600/m", "burst": 40, "buckets": 16, "per_tenant": 3,
                         "salt": "s3cret", "tenant_cache": 128 },
            "etsy": { "rate": "1000/h" }
        }
    }"#;
    let from_json: SetConfig = serde_json::from_str(json).unwrap();
    let from_toml: SetConfig = toml::from_str(EXAMPLE).unwrap();
    assert_eq!(from_json, from_toml);

    let set: LimiterSet = serde_json::from_str(json).unwrap();
    assert_eq!(set.len(), 3);
    assert_eq!(set.get("amazon").unwrap().buckets(), 5);
}

#[test]
fn a_missing_rate_or_limiters_table_is_named() {
    let e = toml_err("[limiters.amazon]\nburst = 5\n");
    assert!(
        e.contains("limiters.amazon.rate: missing: every limiter needs a rate"),
        "{e}"
    );
    let e = json_err(r#"{"limiters": {"amazon": {"burst": 5}}}"#);
    assert!(e.contains("limiters.amazon.rate: missing"), "{e}");

    for e in [toml_err(""), json_err("{}")] {
        assert!(
            e.contains("limiters: missing: add a table per limiter"),
            "{e}"
        );
    }
    for e in [toml_err("[limiters]\n"), json_err(r#"{"limiters": {}}"#)] {
        assert!(e.contains("limiters: empty"), "{e}");
    }
}

#[test]
fn a_malformed_rate_in_a_config_names_limiter_field_and_fix() {
    for (rate, message) in [
        ("5/w", "has the unknown unit \"w\""),
        ("5", "has no unit"),
        ("", "the rate is empty"),
        ("0/s", "allows no requests"),
        ("x/s", "is not a number"),
        ("99999999999/s", "the count is more than"),
    ] {
        let e = toml_err(&format!(
            "[limiters.amazon]\nburst = 5\nrate = \"{rate}\"\n"
        ));
        assert!(e.contains("limiters.amazon.rate: "), "{e}");
        assert!(e.contains(message), "{rate}: {e}");
        // TOML points at the bad value itself, not at the table header.
        assert!(e.contains("at line 3, column 8"), "{e}");
        let e = json_err(&format!(
            r#"{{"limiters": {{"amazon": {{"rate": "{rate}"}}}}}}"#
        ));
        assert!(e.contains("limiters.amazon.rate: "), "{e}");
        assert!(e.contains(message), "{rate}: {e}");
    }
    let e = toml_err("[limiters.amazon]\nrate = 5\n");
    assert!(
        e.contains("limiters.amazon.rate: invalid type: integer `5`, expected a rate such as"),
        "{e}"
    );
}

#[test]
fn wrong_types_unknown_keys_and_duplicates_are_named() {
    let cases = [
        (
            "[limiters.amazon]\nrate = \"5/s\"\nburst = \"five\"\n",
            "limiters.amazon.burst: invalid type: string \"five\"",
        ),
        (
            "[limiters.amazon]\nrate = \"5/s\"\nbuckets = -1\n",
            "limiters.amazon.buckets: invalid value: integer `-1`",
        ),
        (
            "[limiters.amazon]\nrate = \"5/s\"\nper_tenant = 2.5\n",
            "limiters.amazon.per_tenant: invalid type: floating point `2.5`",
        ),
        (
            "[limiters.amazon]\nrate = \"5/s\"\nsalt = 7\n",
            "limiters.amazon.salt: invalid type: integer `7`",
        ),
        (
            "[limiters.amazon]\nrate = \"5/s\"\nbukets = 5\n",
            "limiters.amazon.bukets: unknown key: use rate, burst, buckets, max_buckets, per_tenant, \
             per_user, tiers, tenant_tiers, borrow_from, lender_reserve, salt or tenant_cache",
        ),
        (
            "[limiter.amazon]\nrate = \"5/s\"\n",
            "limiter: unknown key: the config holds only `limiters` tables",
        ),
        (
            "[limiters]\namazon = 5\n",
            "expected a table of settings for limiters.amazon",
        ),
    ];
    for (text, message) in cases {
        let e = toml_err(text);
        assert!(e.contains(message), "{text}\n{e}");
    }
    let e = json_err(r#"{"limiters": {"amazon": {"rate": "5/s", "rate": "6/s"}}}"#);
    assert!(e.contains("limiters.amazon.rate: given twice"), "{e}");
    let e = json_err(r#"{"limiters": {"a": {"rate": "5/s"}, "a": {"rate": "6/s"}}}"#);
    assert!(e.contains("limiters.a: given twice"), "{e}");
}

#[test]
fn settings_that_cannot_work_together_name_the_setting_to_change() {
    let cases = [
        (
            "buckets = 8",
            "burst",
            "a burst of 5 cannot give each of the 8 buckets a token",
        ),
        (
            "buckets = 0",
            "buckets",
            "a limiter needs at least 1 bucket",
        ),
        (
            "buckets = 5\nper_tenant = 6",
            "per_tenant",
            "per_tenant(6) is more than the 5 buckets",
        ),
        (
            "buckets = 5\nper_tenant = 0",
            "per_tenant",
            "each tenant needs at least 1 bucket",
        ),
        (
            "buckets = 5\ntenant_cache = 1000000000",
            "tenant_cache",
            "tenant_cache(1000000000)",
        ),
    ];
    for (extra, field, message) in cases {
        let text = format!("[limiters.amazon]\nrate = \"5/s\"\n{extra}\n");
        let config: SetConfig = toml::from_str(&text).unwrap();
        let err = LimiterSet::from_config(&config).unwrap_err();
        assert_eq!(err.limiter(), "amazon");
        assert_eq!(err.field(), Some(field), "{extra}");
        let shown = err.to_string();
        assert!(
            shown.starts_with(&format!("limiters.amazon.{field}: ")),
            "{shown}"
        );
        assert!(shown.contains(message), "{shown}");
        assert!(err.config_error().is_some());

        // Straight into a set, the same message comes through the format's
        // error.
        let e = toml::from_str::<LimiterSet>(&text).unwrap_err().to_string();
        assert!(e.contains(&format!("limiters.amazon.{field}: ")), "{e}");
    }
    let config: SetConfig = toml::from_str("[limiters.x]\nrate = \"5/s\"\nbuckets = 8\n").unwrap();
    assert_eq!(
        LimiterSet::from_config(&config)
            .unwrap_err()
            .config_error()
            .cloned(),
        Some(ConfigError::BurstTooSmall {
            burst: 5,
            buckets: 8
        })
    );
}

#[test]
fn limiters_built_in_code_need_distinct_names() {
    let build = |name: &str| {
        ShardedLimiter::builder()
            .quota(Quota::per_second(8))
            .name(name)
            .build()
            .unwrap()
    };
    let set = LimiterSet::from_limiters([build("a"), build("b")]).unwrap();
    assert_eq!(set.len(), 2);
    assert!(!set.is_empty());
    let err = LimiterSet::from_limiters([build("a"), build("a")]).unwrap_err();
    assert_eq!((err.limiter(), err.field()), ("a", None));
    assert_eq!(
        err.to_string(),
        "limiters.a: two limiters have this name: give each limiter its own name"
    );
}

#[test]
fn each_limiter_keeps_its_own_budget_and_clones_share_them() {
    let clock = ManualClock::new();
    let config: SetConfig = toml::from_str(EXAMPLE).unwrap();
    let set = LimiterSet::from_config_with_clock(&config, clock.clone()).unwrap();
    let copy = set.clone();

    // amazon: 5 buckets of 1 token; a tenant holds 2.
    let amazon = set.get("amazon").unwrap();
    assert!(amazon.check("t").is_ok());
    assert!(copy.get("amazon").unwrap().check("t").is_ok());
    let denied = amazon.check("t").unwrap_err();
    assert_eq!(denied.retry_after(), Duration::from_secs(1));

    // Draining amazon leaves the same tenant untouched at walmart.
    let walmart = copy.get("walmart").unwrap();
    assert_eq!(walmart.remaining("t"), walmart.remaining("someone-else"));
    assert!(walmart.check("t").is_ok());

    // The clock handed to the set drives every limiter in it.
    clock.advance(Duration::from_secs(1));
    assert_eq!(amazon.remaining("t"), 2);

    // Lookups from many threads at once need no lock and see one set.
    std::thread::scope(|s| {
        for _ in 0..4 {
            let set = set.clone();
            s.spawn(move || {
                for _ in 0..1000 {
                    assert!(set.get("etsy").is_some());
                    assert!(set.get("nope").is_none());
                }
            });
        }
    });
    assert_eq!(
        format!("{set:?}"),
        r#"LimiterSet(["amazon", "etsy", "walmart"])"#
    );
}

/// Without the `redis` feature the Redis keys are known, and each is refused
/// at its value with the feature to enable.
#[cfg(not(feature = "redis"))]
#[test]
fn without_the_redis_feature_a_redis_key_says_which_feature_to_enable() {
    for (key, value) in [
        ("redis", "\"redis://127.0.0.1:6379\""),
        ("failure_policy", "\"fail_open\""),
        ("replicas", "4"),
        ("deadline", "\"5ms\""),
        ("retry_every", "\"1s\""),
        ("connect_timeout", "\"1s\""),
        ("cache_denials", "true"),
        ("key_prefix", "\"billing:\""),
    ] {
        let e = toml_err(&format!(
            "[limiters.amazon]\nrate = \"5/s\"\n{key} = {value}\n"
        ));
        assert!(
            e.contains(&format!(
                "limiters.amazon.{key}: a Redis limiter needs the `redis` feature of \
                 shuffle-limiter: enable it in Cargo.toml (features = [\"config\", \"redis\"])"
            )),
            "{e}"
        );
        assert!(
            e.contains(&format!("at line 3, column {}", key.len() + 4)),
            "{e}"
        );
    }
}

#[test]
fn members_view_every_limiter_and_iter_the_in_process_ones() {
    let set: LimiterSet = toml::from_str(EXAMPLE).unwrap();
    let members: Vec<_> = set
        .members()
        .map(|m| (m.name(), m.quota().burst(), m.buckets(), m.per_tenant()))
        .collect();
    assert_eq!(
        members,
        [
            ("amazon", 5, 5, 2),
            ("etsy", 1000, 8, 2),
            ("walmart", 40, 16, 3)
        ]
    );
    let Some(Member::Local(amazon)) = set.member("amazon") else {
        panic!("amazon is in process");
    };
    assert!(std::sync::Arc::ptr_eq(amazon, set.get("amazon").unwrap()));
    assert!(set.member("ebay").is_none());
    assert_eq!(
        format!("{:?}", set.member("amazon").unwrap()).get(..6),
        Some("Local(")
    );
    let mut names: Vec<_> = set.iter().map(|(name, _)| name).collect();
    names.sort_unstable();
    assert_eq!(names, ["amazon", "etsy", "walmart"]);
}

#[test]
fn tiers_are_read_from_tables_and_checked_at_their_place() {
    let config: SetConfig = toml::from_str(
        "[limiters.api]\nrate = \"8/s\"\ntiers = { gold = 4 }\ntenant_tiers = { acme = \"gold\" }\n",
    )
    .unwrap();
    let api = LimiterSet::from_config(&config)
        .unwrap()
        .get("api")
        .unwrap()
        .clone();
    assert_eq!(api.shard("acme").buckets().len(), 4);
    assert_eq!(api.shard("other").buckets().len(), 2);
    let config: SetConfig =
        toml::from_str("[limiters.api]\nrate = \"8/s\"\ntenant_tiers = { acme = \"gold\" }\n")
            .unwrap();
    let err = LimiterSet::from_config(&config).unwrap_err().to_string();
    assert!(
        err.contains("limiters.api.tenant_tiers: tenant_tier(.., \"gold\")"),
        "{err}"
    );
}

#[test]
fn per_user_is_read_passed_to_the_builder_and_checked_at_its_place() {
    let config: SetConfig =
        toml::from_str("[limiters.api]\nrate = \"8/s\"\nper_tenant = 4\nper_user = 2\n").unwrap();
    let set = LimiterSet::from_config(&config).unwrap();
    let api = set.get("api").unwrap();
    assert_eq!(api.per_user(), 2);
    let user = api.shard(Request::tenant("acme").user("user-7"));
    assert_eq!(
        user,
        api.assignment().user_subset("acme", "user-7", 2).unwrap()
    );
    let config: SetConfig =
        toml::from_str("[limiters.api]\nrate = \"8/s\"\nper_tenant = 4\nper_user = 5\n").unwrap();
    let err = LimiterSet::from_config(&config).unwrap_err().to_string();
    assert!(
        err.contains("limiters.api.per_user: per_user(5)") && err.contains("from 1 to 4"),
        "{err}"
    );
}

/// The errors the per-upstream guide quotes are the ones a reader gets,
/// word for word.
#[test]
fn the_guide_quotes_the_errors_as_they_are() {
    let guide = include_str!("../../src/guide/per_upstream.md");
    for (line, text) in [
        ("rate = \"5/sec\"", "[limiters.amazon]\nrate = \"5/sec\"\n"),
        ("", "[limiters.amazon]\nburst = 5\n"),
        (
            "bukets = 5",
            "[limiters.amazon]\nrate = \"5/s\"\nbukets = 5\n",
        ),
        (
            "lender_reserve = 1",
            "[limiters.amazon]\nrate = \"5/s\"\nborrow_from = 2\nlender_reserve = 1\n",
        ),
    ] {
        let error = toml_err(text);
        let message = (error.lines())
            .find(|l| l.starts_with("limiters.amazon."))
            .unwrap_or_else(|| panic!("{line}: {error}"));
        assert!(
            guide.contains(message),
            "{line}: the guide lacks\n{message}"
        );
    }
    // Found when the limiter is built.
    let config: SetConfig =
        toml::from_str("[limiters.amazon]\nrate = \"5/s\"\nbuckets = 8\n").unwrap();
    let error = LimiterSet::from_config(&config)
        .map(|_| ())
        .unwrap_err()
        .to_string();
    assert!(guide.contains(&error), "the guide lacks\n{error}");
}
