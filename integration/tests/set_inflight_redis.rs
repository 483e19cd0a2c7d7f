//! In-flight limits in Redis from a `LimiterSet` config: `concurrency` and
//! `lease_ttl` beside `redis = "..."` put the pools in Redis, shared by two
//! sets (two processes) connecting the same config; the mistakes are
//! typed errors naming the key. The server tests run against a real
//! `redis-server` started by each test on a free 127.0.0.1 port.

use std::time::Duration;

use shuffle_limiter::inflight::{LeaseBuildError, LeaseError, LeaseSource, RejectReason};
use shuffle_limiter::set::{LimiterSet, SetConfig};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

const PARTNER: &str = r#"
[limiters.partner]
rate = "1/h"
burst = 8
buckets = 4
per_tenant = 2
redis = "URL"
deadline = "2s"
concurrency = 4
pools = 4
lease_ttl = "30s"
"#;

fn config(url: &str) -> SetConfig {
    toml::from_str(&PARTNER.replace("URL", url)).unwrap()
}

fn toml_err(text: &str) -> String {
    toml::from_str::<SetConfig>(text).unwrap_err().to_string()
}

#[test]
fn lease_ttl_is_read_printed_and_only_taken_beside_redis() {
    let config = config("redis://127.0.0.1:6379");
    let inflight = config.limiters["partner"].inflight.as_ref().unwrap();
    assert_eq!(inflight.lease_ttl, Some(Duration::from_secs(30)));
    assert!(inflight.in_redis());
    let printed = toml::to_string(&config).unwrap();
    assert!(printed.contains("lease_ttl = \"30s\""), "{printed}");
    assert_eq!(toml::from_str::<SetConfig>(&printed).unwrap(), config);

    let local = PARTNER
        .replace("redis = \"URL\"\n", "")
        .replace("deadline = \"2s\"\n", "");
    let e = toml_err(&local);
    assert!(
        e.contains(
            "limiters.partner.lease_ttl: only an in-flight limit in Redis takes a lease_ttl"
        ) && e.contains("or remove lease_ttl"),
        "{e}"
    );
    let e = toml_err(&PARTNER.replace("URL", "redis://h").replace("30s", "0s"));
    assert!(
        e.contains("limiters.partner.lease_ttl: \"0s\" is zero: use a positive duration"),
        "{e}"
    );
    let no_limit = PARTNER
        .replace("URL", "redis://h")
        .replace("concurrency = 4\npools = 4\n", "");
    let e = toml_err(&no_limit);
    assert!(
        e.contains("limiters.partner.lease_ttl: only an in-flight limit takes lease_ttl"),
        "{e}"
    );
}

#[tokio::test]
async fn a_redis_limiter_that_lends_tokens_lends_leases_above_the_same_reserve() {
    let server = RedisServer::start();
    let text = PARTNER
        .replace("URL", &server.url())
        .replace(
            "buckets = 4",
            "buckets = 4\nborrow_from = 1\nlender_reserve = 0.5",
        )
        .replace("concurrency = 4", "concurrency = 8");
    let set = LimiterSet::connect(&toml::from_str(&text).unwrap())
        .await
        .unwrap();
    let inflight = set.redis_inflight("partner").unwrap();
    let spill = inflight.shard("tenant-7").spill().to_vec();
    assert_eq!(spill.len(), 1);
    // Its own 2 pools of 2 seats, then 1 above the spill pool's reserve.
    let mut held = Vec::new();
    while let Ok(lease) = inflight.try_acquire("tenant-7").await {
        held.push(lease);
    }
    assert_eq!(held.len(), 5, "{held:?}");
    let borrowed: Vec<_> = held.iter().filter(|l| l.borrowed()).collect();
    assert_eq!(borrowed.len(), 1, "{held:?}");
    assert_eq!(borrowed[0].pools().collect::<Vec<_>>(), [(spill[0], 1)]);
}

#[tokio::test]
async fn two_sets_share_the_pools_in_redis_and_never_hold_more_than_c() {
    let server = RedisServer::start();
    let config = config(&server.url());
    let (one, two) = (
        LimiterSet::connect(&config).await.unwrap(),
        LimiterSet::connect(&config).await.unwrap(),
    );
    assert!(one.inflight("partner").is_none(), "not in this process");
    let (a, b) = (
        one.redis_inflight("partner").unwrap(),
        two.redis_inflight("partner").unwrap(),
    );
    assert_eq!((a.concurrency(), a.pools(), a.per_tenant()), (4, 4, 2));
    assert_eq!(a.ttl(), Duration::from_secs(30));
    // The same shards as the rate limiter's buckets.
    let limiter = one.get_redis("partner").unwrap();
    assert_eq!(
        a.shard("tenant-7").buckets(),
        limiter.shard("tenant-7").buckets()
    );

    // tenant-7's two pools of one permit: one lease from each set.
    let first = a.try_acquire("tenant-7").await.unwrap();
    let second = b.try_acquire("tenant-7").await.unwrap();
    assert_eq!(first.source(), LeaseSource::Redis);
    let busy = b.try_acquire("tenant-7").await.unwrap_err();
    assert!(
        matches!(busy, LeaseError::Rejected(r) if r.reason() == RejectReason::Busy),
        "{busy:?}"
    );
    drop(first);
    // Given back in the background: the other set gets it.
    let mut again = None;
    for _ in 0..200 {
        if let Ok(lease) = b.try_acquire("tenant-7").await {
            again = Some(lease);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(again.is_some(), "the dropped lease came back");
    drop((second, again));
}

#[tokio::test]
async fn lease_mistakes_are_typed_errors_naming_the_key() {
    let server = RedisServer::start();
    let url = server.url();
    // C below N: the in-flight error, as in process.
    let text = PARTNER
        .replace("URL", &url)
        .replace("pools = 4", "pools = 8");
    let err = LimiterSet::connect(&toml::from_str(&text).unwrap())
        .await
        .unwrap_err();
    assert_eq!((err.limiter(), err.field()), ("partner", Some("pools")));
    assert!(err.inflight_error().is_some(), "{err:?}");
    // A fallback too small for the pools: the lease error, by its key.
    let text = PARTNER.replace("URL", &url).replace(
        "deadline = \"2s\"",
        "failure_policy = \"local_fallback\"\nreplicas = 2",
    );
    let text = text.replace("burst = 8", "burst = 16");
    let err = LimiterSet::connect(&toml::from_str(&text).unwrap())
        .await
        .unwrap_err();
    assert_eq!((err.limiter(), err.field()), ("partner", Some("replicas")));
    assert!(
        matches!(
            err.lease_error(),
            Some(LeaseBuildError::FallbackTooSmall { .. })
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with("limiters.partner.replicas: "),
        "{err}"
    );
}

#[tokio::test]
async fn a_reload_keeps_the_pools_in_redis_and_refuses_a_new_ttl() {
    let server = RedisServer::start();
    let config = config(&server.url());
    let set = LimiterSet::connect(&config).await.unwrap();
    let held = (set.redis_inflight("partner").unwrap())
        .try_acquire("tenant-7")
        .await
        .unwrap();
    let reload = set
        .reload_connect(&config, shuffle_limiter::MonotonicClock::new())
        .await
        .unwrap();
    let kept = reload.set().redis_inflight("partner").unwrap();
    assert_eq!(kept.key(0), set.redis_inflight("partner").unwrap().key(0));
    let changed: SetConfig = toml::from_str(
        &PARTNER
            .replace("URL", &server.url())
            .replace("\"30s\"", "\"10s\""),
    )
    .unwrap();
    let err = (set
        .reload_connect(&changed, shuffle_limiter::MonotonicClock::new())
        .await)
        .unwrap_err();
    assert_eq!(err.field(), Some("lease_ttl"), "{err}");
    drop(held);
}
