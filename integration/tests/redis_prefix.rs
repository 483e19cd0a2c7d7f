//! Key prefixes (issue 24, item 9): two services that keep a limiter of
//! the same name on one Redis share its budget unless their key prefixes
//! differ, in both layouts and from a set's config. Against a real
//! `redis-server` started by each test.

use std::time::Duration;

use redis::AsyncCommands;
use shuffle_limiter::redis::{BuildError, FailurePolicy, Layout, RedisLimiter, RedisOptions};
use shuffle_limiter::set::{LimiterSet, SetConfig};
use shuffle_limiter::{Limit, Quota, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

/// `api`: 8 an hour over 4 buckets of 2; a tenant's 2 hold 4.
async fn api(server: &RedisServer, layout: Layout, prefix: Option<&str>) -> RedisLimiter {
    let mut options = RedisOptions::new(FailurePolicy::FailClosed)
        .deadline(Duration::from_secs(2))
        .layout(layout);
    if let Some(prefix) = prefix {
        options = options.key_prefix(prefix);
    }
    ShardedLimiter::builder()
        .quota(Quota::per_hour(8))
        .buckets(4)
        .per_tenant(2)
        .name("api")
        .build_redis(&server.url(), options)
        .await
        .unwrap()
}

async fn granted(limiter: &RedisLimiter) -> u32 {
    let mut granted = 0;
    for _ in 0..8 {
        granted += u32::from(limiter.check("t").await.is_ok());
    }
    granted
}

#[tokio::test]
async fn limiters_of_one_name_share_a_budget_only_under_one_prefix() {
    let server = RedisServer::start();
    for layout in [Layout::OneSlot, Layout::Spread] {
        let _ = redis::cmd("FLUSHALL")
            .query_async::<()>(&mut server.connection().await)
            .await;
        let billing = api(&server, layout, Some("billing:")).await;
        let search = api(&server, layout, Some("search:")).await;
        let (plain, also_plain) = (
            api(&server, layout, None).await,
            api(&server, layout, None).await,
        );
        assert_eq!(granted(&billing).await, 4, "{layout:?}");
        assert_eq!(granted(&search).await, 4, "{layout:?}");
        assert_eq!(granted(&plain).await, 4, "{layout:?}");
        // No prefix, the default: the same keys, one budget.
        assert_eq!(granted(&also_plain).await, 0, "{layout:?}");
        // The prefix comes before the hash tag, which stays the name's.
        let (key, expected) = match layout {
            Layout::OneSlot => (billing.key(3), "billing:{api}:b3"),
            _ => (billing.key(3), "billing:{api:b3}"),
        };
        assert_eq!(key, Some(expected));
        let mut keys: Vec<String> = server.connection().await.keys("billing:*").await.unwrap();
        keys.sort();
        assert!(!keys.is_empty() && keys.iter().all(|k| k.starts_with("billing:{api")));
    }
}

#[tokio::test]
async fn two_configs_with_the_same_limiter_keep_apart_by_their_prefixes() {
    let server = RedisServer::start();
    let config = |prefix: &str| -> SetConfig {
        toml::from_str(&format!(
            "[limiters.api]\nrate = \"8/h\"\nbuckets = 4\nredis = \"{}\"\n\
             deadline = \"2s\"\n{prefix}",
            server.url()
        ))
        .unwrap()
    };
    let billing = LimiterSet::connect(&config("key_prefix = \"billing:\""))
        .await
        .unwrap();
    let search = LimiterSet::connect(&config("key_prefix = \"search:\""))
        .await
        .unwrap();
    assert_eq!(granted(billing.get_redis("api").unwrap()).await, 4);
    assert_eq!(granted(search.get_redis("api").unwrap()).await, 4);
    // A reload cannot move a running limiter to other keys.
    let err = billing
        .reload_connect(&config("key_prefix = \"other:\""), Default::default())
        .await
        .unwrap_err();
    assert_eq!(err.field(), Some("key_prefix"), "{err}");
    // Each option refused names itself; the URL is `redis`.
    for (changed, field) in [
        ("connect_timeout = \"9s\"", "connect_timeout"),
        ("failure_policy = \"fail_open\"", "failure_policy"),
        ("retry_every = \"9s\"", "retry_every"),
        ("cache_denials = false", "cache_denials"),
    ] {
        let err = billing
            .reload_connect(
                &config(&format!("key_prefix = \"billing:\"\n{changed}")),
                Default::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(err.field(), Some(field), "{err}");
    }
}

#[tokio::test]
async fn a_prefix_with_a_brace_is_refused_before_connecting() {
    let err = ShardedLimiter::builder()
        .quota(Quota::per_hour(8))
        .name("api")
        .build_redis(
            "redis://127.0.0.1:1",
            RedisOptions::new(FailurePolicy::FailClosed).key_prefix("a{b}"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, BuildError::InvalidKeyPrefix { .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("without braces"), "{err}");
}

/// Names that differ keep apart: a one-slot name ending as a spread bucket's
/// hash tag (`api:b0`) would share the spread limiter `api`'s quota key
/// `{api:b0}:quota`, so it is refused; names that merely look alike are not.
#[tokio::test]
async fn a_one_slot_name_cannot_take_a_spread_buckets_tag() {
    let server = RedisServer::start();
    let url = server.url();
    let build = |name: &'static str, layout| {
        ShardedLimiter::builder()
            .quota(Quota::per_hour(8))
            .buckets(4)
            .name(name)
            .build_redis(
                &url,
                RedisOptions::new(FailurePolicy::FailClosed).layout(layout),
            )
    };
    let spread = api(&server, Layout::Spread, None).await;
    for name in ["api:b0", "api:b12", "x:b1:b2"] {
        let err = build(name, Layout::OneSlot).await.map(|_| ()).unwrap_err();
        assert!(
            matches!(err, BuildError::InvalidName { .. }),
            "{name}: {err:?}"
        );
        assert!(
            err.to_string().contains("not ending in ':b' and digits"),
            "{err}"
        );
    }
    for (name, layout) in [
        ("api:b", Layout::OneSlot),
        ("api:b0x", Layout::OneSlot),
        ("api:bb0", Layout::OneSlot),
        ("api:b0", Layout::Spread),
    ] {
        build(name, layout)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert_eq!(granted(&spread).await, 4);
}
