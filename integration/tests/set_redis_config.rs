//! Redis limiters in a `LimiterSet`'s config: every key beside `redis =
//! "..."` read, every mistake reported with its place, and `from_config`
//! refusing them with what to call instead. No server is needed.

use std::time::Duration;

use shuffle_limiter::redis::FailurePolicy;
use shuffle_limiter::set::{RedisConfig, SetConfig};

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
    // And a password the query holds, as a unix socket's URL does.
    for (url, hidden) in [
        (
            "redis+unix:///tmp/redis.sock?db=1&pass=s3cret",
            "redis+unix:///tmp/redis.sock?db=1&pass=***",
        ),
        (
            "unix:///tmp/redis.sock?password=s3cret",
            "unix:///tmp/redis.sock?password=***",
        ),
    ] {
        let text = format!("[limiters.a]\nrate = \"5/s\"\nredis = \"{url}\"");
        let config: SetConfig = toml::from_str(&text).unwrap_or_else(|e| panic!("{url}: {e}"));
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains(hidden), "{shown}");
    }

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
             an in-flight limit takes concurrency, pools, max_queue, max_wait, lease_ttl; \
             a Redis limiter also takes redis, failure_policy, replicas, deadline, retry_every, connect_timeout, \
             cache_denials, key_prefix"
        ),
        "{e}"
    );
}
