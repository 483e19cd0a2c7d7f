//! Redis limiters in a `LimiterSet`: `from_config` refusing them; and,
//! against a real `redis-server` started by each test on a free 127.0.0.1
//! port, a mixed set and two sets (two processes) sharing one budget. (The
//! config's keys and mistakes: `set_redis_config.rs`.)
//!
//! The server tests decide on the server's real clock, with rates so slow
//! (1/h) that no bucket refills while a test runs, and deadlines so long
//! (2 s) that a busy machine does not make the failure policy decide.

use std::error::Error as _;

use shuffle_limiter::redis::{BuildError, Error as RedisError};
use shuffle_limiter::set::{LimiterSet, Member, SetConfig};
use shuffle_limiter::{ConfigError, Limit};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::{RedisServer, free_port};

fn toml_err(text: &str) -> String {
    toml::from_str::<SetConfig>(text).unwrap_err().to_string()
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
