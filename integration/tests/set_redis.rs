//! Redis limiters in a `LimiterSet`: every key beside `redis = "..."` and
//! every mistake reported with its place; `from_config` refusing them; and,
//! against a real `redis-server` started by each test on a free 127.0.0.1
//! port, a mixed set and two sets (two processes) sharing one budget.
//!
//! The server tests decide on the server's real clock, with rates so slow
//! (1/h) that no bucket refills while a test runs, and deadlines so long
//! (2 s) that a busy machine does not make the failure policy decide.

use std::error::Error as _;
use std::time::Duration;

use shuffle_limiter::ConfigError;
use shuffle_limiter::redis::{BuildError, Error as RedisError, FailurePolicy};
use shuffle_limiter::set::{LimiterSet, Member, RedisConfig, SetConfig};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::{RedisServer, free_port};

fn toml_err(text: &str) -> String {
    toml::from_str::<SetConfig>(text).unwrap_err().to_string()
}

fn redis_of(config: &SetConfig, name: &str) -> RedisConfig {
    config.limiters[name]
        .redis
        .clone()
        .expect("a Redis limiter")
}

#[test]
fn every_redis_key_is_read() {
    let config: SetConfig = toml::from_str(
        r#"
        [limiters.walmart]
        rate = "600/m"
        redis = "redis://:s3cret@127.0.0.1:6380/2"
        failure_policy = "local_fallback"
        replicas = 4
        deadline = "5ms"
        retry_every = "250ms"
        connect_timeout = "1m 30s"
        cache_denials = false
        key_prefix = "billing:"
        "#,
    )
    .unwrap();
    let redis = redis_of(&config, "walmart");
    assert_eq!(redis.url, "redis://:s3cret@127.0.0.1:6380/2");
    assert_eq!(
        redis.failure_policy,
        FailurePolicy::LocalFallback { replicas: 4 }
    );
    assert_eq!(redis.deadline, Some(Duration::from_millis(5)));
    assert_eq!(redis.retry_every, Some(Duration::from_millis(250)));
    assert_eq!(redis.connect_timeout, Some(Duration::from_secs(90)));
    assert_eq!(redis.cache_denials, Some(false));
    assert_eq!(redis.key_prefix.as_deref(), Some("billing:"));
    assert_eq!(redis.options().prefix(), "billing:");
    assert_eq!(
        redis.options().failure_policy(),
        FailurePolicy::LocalFallback { replicas: 4 }
    );
    // Configs get logged: Debug hides the password.
    let shown = format!("{config:?}");
    assert!(!shown.contains("s3cret"), "{shown}");
    assert!(
        shown.contains(r#"url: "redis://:***@127.0.0.1:6380/2""#),
        "{shown}"
    );

    // The same from JSON.
    let json = r#"{"limiters": {"walmart": {
        "rate": "600/m", "redis": "redis://:s3cret@127.0.0.1:6380/2",
        "failure_policy": "local_fallback", "replicas": 4, "deadline": "5ms",
        "retry_every": "250ms", "connect_timeout": "90s", "cache_denials": false,
        "key_prefix": "billing:"
    }}}"#;
    assert_eq!(serde_json::from_str::<SetConfig>(json).unwrap(), config);

    // Only `redis`: fail closed, every option at RedisOptions' default.
    let config: SetConfig =
        toml::from_str("[limiters.w]\nrate = \"5/s\"\nredis = \"redis://localhost\"\n").unwrap();
    assert_eq!(
        redis_of(&config, "w"),
        RedisConfig::new("redis://localhost")
    );
    let config: SetConfig = toml::from_str(
        "[limiters.w]\nrate = \"5/s\"\nredis = \"redis://localhost\"\nfailure_policy = \"fail_open\"\n",
    )
    .unwrap();
    assert_eq!(
        redis_of(&config, "w").failure_policy,
        FailurePolicy::FailOpen
    );
    let config: SetConfig = toml::from_str(
        "[limiters.w]\nrate = \"5/s\"\nredis = \"redis://localhost\"\nfailure_policy = \"fail_closed\"\n",
    )
    .unwrap();
    assert_eq!(
        redis_of(&config, "w").failure_policy,
        FailurePolicy::FailClosed
    );

    // Without `redis`, a limiter is in process.
    let config: SetConfig = toml::from_str("[limiters.w]\nrate = \"5/s\"\n").unwrap();
    assert_eq!(config.limiters["w"].redis, None);
}

#[test]
fn a_bad_redis_value_is_named_where_it_is_written() {
    let cases = [
        (
            "redis",
            r#""""#,
            "empty: write the server's URL, such as \"redis://127.0.0.1:6379\"",
        ),
        ("redis", r#""http://127.0.0.1""#, "not a Redis URL ("),
        (
            "redis",
            r#""127.0.0.1:6379""#,
            "write redis://[[user]:password@]host[:port][/db]",
        ),
        (
            "redis",
            "6379",
            "invalid type: integer `6379`, expected a Redis URL",
        ),
        (
            "failure_policy",
            r#""failopen""#,
            r#"unknown policy "failopen": use "fail_closed" (deny while Redis is away), "fail_open" (grant) or "local_fallback""#,
        ),
        (
            "failure_policy",
            "true",
            "expected \"fail_closed\", \"fail_open\" or \"local_fallback\"",
        ),
        (
            "replicas",
            "0",
            "zero: use the number of processes that share the budget, at least 1",
        ),
        ("replicas", "-1", "invalid value: integer `-1`"),
        ("deadline", r#""5""#, "\"5\" is not a duration ("),
        (
            "deadline",
            r#""5 parsecs""#,
            "write a number and a unit, such as \"5ms\", \"250ms\" or \"1s\"",
        ),
        (
            "retry_every",
            r#""0s""#,
            "\"0s\" is zero: use a positive duration, such as \"5ms\"",
        ),
        (
            "connect_timeout",
            "5",
            "invalid type: integer `5`, expected a duration such as \"5ms\"",
        ),
        (
            "cache_denials",
            r#""yes""#,
            "invalid type: string \"yes\", expected a boolean",
        ),
        (
            "key_prefix",
            r#""a{b}:""#,
            "\"a{b}:\" holds a '{' or '}', which would change the keys' hash tag",
        ),
    ];
    for (key, value, message) in cases {
        // The value is read (and refused) as soon as it comes, before the
        // table's keys are checked against each other.
        let mut text = format!("[limiters.w]\nrate = \"5/s\"\n{key} = {value}\n");
        if key != "redis" {
            text += "redis = \"redis://localhost\"\n";
        }
        let e = toml_err(&text);
        assert!(e.contains(&format!("limiters.w.{key}: ")), "{text}\n{e}");
        assert!(e.contains(message), "{text}\n{e}");
        // TOML points at the value itself, not at the table.
        let column = key.len() + 4;
        assert!(
            e.contains(&format!("at line 3, column {column}")),
            "{text}\n{e}"
        );
    }
    // A password in a URL that does not parse is not repeated.
    let e = toml_err("[limiters.w]\nrate = \"5/s\"\nredis = \"http://:s3cret@host\"\n");
    assert!(
        !e.replace("redis = \"http://:s3cret@host\"", "")
            .contains("s3cret"),
        "{e}"
    );

    let e = serde_json::from_str::<SetConfig>(
        r#"{"limiters": {"w": {"rate": "5/s", "redis": "redis://a", "deadline": "1s", "deadline": "2s"}}}"#,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("limiters.w.deadline: given twice"), "{e}");
}

#[test]
fn keys_that_do_not_fit_together_say_what_to_add_or_remove() {
    let redis = "redis = \"redis://localhost\"";
    let cases = [
        (
            format!("{redis}\nfailure_policy = \"local_fallback\""),
            "limiters.w.replicas: missing: failure_policy = \"local_fallback\" needs the number \
             of processes that share the budget, such as replicas = 4",
        ),
        (
            format!("{redis}\nfailure_policy = \"fail_open\"\nreplicas = 4"),
            "limiters.w.replicas: only failure_policy = \"local_fallback\" takes replicas: \
             set it, or remove replicas",
        ),
        (
            format!("{redis}\nreplicas = 4"),
            "limiters.w.replicas: only failure_policy = \"local_fallback\" takes replicas",
        ),
    ];
    for (extra, message) in &cases {
        let e = toml_err(&format!("[limiters.w]\nrate = \"5/s\"\n{extra}\n"));
        assert!(e.contains(message), "{extra}\n{e}");
    }
    for (key, value) in [
        ("failure_policy", "\"fail_open\""),
        ("replicas", "4"),
        ("deadline", "\"5ms\""),
        ("retry_every", "\"1s\""),
        ("connect_timeout", "\"1s\""),
        ("cache_denials", "true"),
        ("key_prefix", "\"billing:\""),
    ] {
        let e = toml_err(&format!("[limiters.w]\nrate = \"5/s\"\n{key} = {value}\n"));
        let expected = format!(
            "limiters.w.{key}: only a Redis limiter takes {key}: add redis = \
             \"redis://HOST:PORT\" to [limiters.w], or remove {key}"
        );
        assert!(e.contains(&expected), "{e}");
    }
    // The name becomes the keys' hash tag.
    let e = toml_err(&format!("[limiters.\"a{{b}}\"]\nrate = \"5/s\"\n{redis}\n"));
    assert!(
        e.contains(r#"limiters.a{b}.redis: the name "a{b}" cannot be a Redis hash tag: name the table without '{' or '}'"#),
        "{e}"
    );
    // An unknown key's message lists the Redis keys too.
    let e = toml_err("[limiters.w]\nrate = \"5/s\"\nredis_url = \"redis://a\"\n");
    assert!(
        e.contains(
            "limiters.w.redis_url: unknown key: use rate, burst, buckets, max_buckets, per_tenant, \
             per_user, tiers, tenant_tiers, borrow_from, lender_reserve, salt or tenant_cache; \
             a Redis limiter also takes redis, failure_policy, replicas, deadline, retry_every, connect_timeout, \
             cache_denials, key_prefix"
        ),
        "{e}"
    );
}

const MIXED: &str = r#"
[limiters.amazon]
rate = "1/h"
burst = 2
buckets = 2
per_tenant = 2

[limiters.walmart]
rate = "1/h"
burst = 8
buckets = 4
per_tenant = 4
redis = "URL"
deadline = "2s"
"#;

fn mixed(url: &str) -> SetConfig {
    toml::from_str(&MIXED.replace("URL", url)).unwrap()
}

#[test]
fn from_config_refuses_a_redis_limiter_and_says_to_connect() {
    let text = MIXED.replace("URL", "redis://127.0.0.1:6379");
    let config: SetConfig = toml::from_str(&text).unwrap();
    let err = LimiterSet::from_config(&config).unwrap_err();
    assert_eq!((err.limiter(), err.field()), ("walmart", Some("redis")));
    assert_eq!(
        err.to_string(),
        "limiters.walmart.redis: a Redis limiter needs a connection: build the set with \
         `LimiterSet::connect(&config).await`"
    );
    assert!(err.source().is_none() && err.config_error().is_none());
    let e = toml::from_str::<LimiterSet>(&text).unwrap_err().to_string();
    assert!(e.contains("`LimiterSet::connect(&config).await`"), "{e}");

    // A set can be connected from any task.
    fn send<T: Send>(_: &T) {}
    send(&LimiterSet::connect(&config));
}

#[tokio::test]
async fn connect_errors_name_the_limiter_and_carry_the_redis_error() {
    // A server that refuses the credentials. (One nobody listens on is no
    // error: see tests/redis_boot.rs.)
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let url = server.url();
    let err = LimiterSet::connect(&mixed(&url)).await.unwrap_err();
    assert_eq!((err.limiter(), err.field()), ("walmart", Some("redis")));
    assert!(
        matches!(
            err.redis_error(),
            Some(BuildError::Redis(RedisError::Auth { .. }))
        ),
        "{err:?}"
    );
    let source = err.source().expect("the Redis error");
    assert!(source.downcast_ref::<BuildError>().is_some());
    assert!(
        err.to_string()
            .starts_with("limiters.walmart.redis: Redis refused the credentials ("),
        "{err}"
    );

    // Settings that cannot work are named before any connection is tried.
    let cases = [
        (
            MIXED.replace("burst = 8", "burst = 3"),
            "burst",
            "a burst of 3 cannot give each of the 4 buckets a token",
        ),
        (
            MIXED.replace(
                "deadline = \"2s\"",
                "failure_policy = \"local_fallback\"\nreplicas = 4",
            ),
            "replicas",
            "a burst of 8 split over 4 replicas cannot give each of the 4 buckets a token",
        ),
    ];
    for (text, field, message) in cases {
        let config: SetConfig = toml::from_str(&text.replace("URL", &url)).unwrap();
        let err = LimiterSet::connect(&config).await.unwrap_err();
        assert_eq!((err.limiter(), err.field()), ("walmart", Some(field)));
        assert!(
            err.to_string()
                .starts_with(&format!("limiters.walmart.{field}: {message}")),
            "{err}"
        );
    }
    let config: SetConfig =
        toml::from_str(&MIXED.replace("burst = 8", "burst = 3").replace("URL", &url)).unwrap();
    let err = LimiterSet::connect(&config).await.unwrap_err();
    assert_eq!(
        err.config_error(),
        Some(&ConfigError::BurstTooSmall {
            burst: 3,
            buckets: 4
        })
    );

    // In-process limiters are built first: their mistakes do not wait for
    // the network.
    let text = MIXED.replace("burst = 2", "burst = 1").replace("URL", &url);
    let err = LimiterSet::connect(&toml::from_str(&text).unwrap())
        .await
        .unwrap_err();
    assert_eq!((err.limiter(), err.field()), ("amazon", Some("burst")));
}

#[tokio::test]
async fn a_mixed_set_holds_both_kinds_and_each_is_found_by_its_own_lookup() {
    let server = RedisServer::start();
    let set = LimiterSet::connect(&mixed(&server.url())).await.unwrap();

    assert_eq!(set.len(), 2);
    assert_eq!(set.names().collect::<Vec<_>>(), ["amazon", "walmart"]);
    assert_eq!(format!("{set:?}"), r#"LimiterSet(["amazon", "walmart"])"#);
    assert!(set.get("amazon").is_some() && set.get_redis("amazon").is_none());
    assert!(set.get_redis("walmart").is_some() && set.get("walmart").is_none());
    assert!(set.member("ebay").is_none());
    // iter() yields the in-process limiters; members() all, sorted.
    assert_eq!(
        set.iter().map(|(name, _)| name).collect::<Vec<_>>(),
        ["amazon"]
    );
    let members: Vec<_> = set
        .members()
        .map(|m| {
            (
                m.name(),
                matches!(m, Member::Redis(_)),
                m.buckets(),
                m.per_tenant(),
            )
        })
        .collect();
    assert_eq!(members, [("amazon", false, 2, 2), ("walmart", true, 4, 4)]);
    assert_eq!(set.member("walmart").unwrap().quota().burst(), 8);

    // The in-process limiter answers at once; the Redis one over Redis.
    let amazon = set.get("amazon").unwrap();
    assert_eq!((0..5).filter(|_| amazon.check("t").is_ok()).count(), 2);
    let walmart = set.get_redis("walmart").unwrap();
    assert_eq!(walmart.name(), "walmart");
    let mut granted = 0;
    for _ in 0..12 {
        granted += usize::from(walmart.check("t").await.is_ok());
    }
    assert_eq!(granted, 8);
}

#[tokio::test]
async fn two_sets_from_one_config_share_the_redis_budget_and_keep_their_own_local_ones() {
    let server = RedisServer::start();
    let config = mixed(&server.url());
    // Two processes, each building its set from the same config.
    let (a, b) = (
        LimiterSet::connect(&config).await.unwrap(),
        LimiterSet::connect(&config).await.unwrap(),
    );

    // walmart: B = 8 in Redis, all 4 buckets the tenant's. Asked in turn,
    // the two sets get 8 together, 4 each: with a budget each it would be
    // 16.
    let (mut from_a, mut from_b) = (0, 0);
    for _ in 0..10 {
        from_a += usize::from(a.get_redis("walmart").unwrap().check("t").await.is_ok());
        from_b += usize::from(b.get_redis("walmart").unwrap().check("t").await.is_ok());
    }
    assert_eq!((from_a, from_b), (4, 4));
    // Another tenant finds the same buckets spent.
    assert!(a.get_redis("walmart").unwrap().check("u").await.is_err());
    assert!(b.get_redis("walmart").unwrap().check("u").await.is_err());

    // amazon is in process: each set has its own B = 2.
    let granted = |set: &LimiterSet| {
        let amazon = set.get("amazon").unwrap();
        (0..5).filter(|_| amazon.check("t").is_ok()).count()
    };
    assert_eq!((granted(&a), granted(&b)), (2, 2));
}

/// Borrowing over Redis, as in process (tests/set_borrow.rs): 8 buckets of 2
/// tokens, a tenant owns 2 and may borrow from 2 more.
const LENDING: &str = r#"
[limiters.lend_all]
rate = "1/h"
burst = 16
borrow_from = 2
lender_reserve = 0
redis = "URL"
deadline = "2s"

[limiters.lend_half]
rate = "1/h"
burst = 16
borrow_from = 2
redis = "URL"
deadline = "2s"

[limiters.no_borrowing]
rate = "1/h"
burst = 16
redis = "URL"
deadline = "2s"
"#;

#[tokio::test]
async fn a_redis_limiter_from_config_borrows_only_when_told_and_down_to_the_reserve() {
    let server = RedisServer::start();
    let config: SetConfig = toml::from_str(&LENDING.replace("URL", &server.url())).unwrap();
    assert_eq!(config.limiters["lend_all"].borrow_from, Some(2));
    assert_eq!(
        config.limiters["lend_all"].lender_reserve.map(|r| r.get()),
        Some(0.0)
    );
    let set = LimiterSet::connect(&config).await.unwrap();

    // Whether each grant was borrowed, until the first denial.
    let answers = |name: &'static str| {
        let limiter = set.get_redis(name).expect("a Redis limiter");
        async move {
            let mut answers = Vec::new();
            while let Ok(grant) = limiter.check("tenant-42").await {
                answers.push(grant.borrowed());
                assert!(
                    answers.len() <= 16,
                    "{name}: more than the burst: {answers:?}"
                );
            }
            answers
        }
    };
    // Own buckets first (4 tokens), then the 2 spill buckets: all of their
    // tokens with a reserve of 0, half with the default, none when off.
    assert_eq!(
        answers("lend_all").await,
        [false, false, false, false, true, true, true, true]
    );
    assert_eq!(
        answers("lend_half").await,
        [false, false, false, false, true, true]
    );
    assert_eq!(answers("no_borrowing").await, [false; 4]);
}

#[tokio::test]
async fn a_redis_spill_set_that_cannot_fit_is_named_before_connecting() {
    // Nobody listens: the settings are refused before any connection.
    let url = format!("redis://127.0.0.1:{}", free_port());
    let text = LENDING
        .replace("URL", &url)
        .replace("borrow_from = 2\nlender", "borrow_from = 7\nlender");
    let err = LimiterSet::connect(&toml::from_str(&text).unwrap())
        .await
        .unwrap_err();
    assert_eq!(
        (err.limiter(), err.field()),
        ("lend_all", Some("borrow_from"))
    );
    assert_eq!(
        err.config_error(),
        Some(&ConfigError::SpillTooLarge {
            spill: 7,
            per_tenant: 2,
            max: 6
        })
    );
    assert!(
        err.to_string()
            .starts_with("limiters.lend_all.borrow_from: borrow_from(7)"),
        "{err}"
    );
    // A bad reserve is refused where it is written, Redis limiter or not.
    let e = toml_err(&LENDING.replace("lender_reserve = 0", "lender_reserve = 1"));
    assert!(
        e.contains("limiters.lend_all.lender_reserve: 1 is not a share of a bucket's burst"),
        "{e}"
    );
}
