//! Two replicas sharing one real redis-server: together they admit no more
//! than R·t + B, and a reload keeps the buckets (they are in Redis); with
//! Redis gone, the answer is UNAVAILABLE, for Envoy's failure mode, except
//! for a rule in shadow mode, which is only watched.

mod support;

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use redis_server::RedisServer;
use support::*;

// 1/h: over the test R·t is below one token, so B = 12 is the bound, exact.
const CONFIG: &str = r#"
domain: fleet
descriptors:
  - key: tenant
    rate_limit: {rate: "1/h"}
    shuffle: {buckets: 4, per_tenant: 4, burst: 12}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_admit_the_burst_together_not_each() {
    let redis = RedisServer::start();
    let config = ConfigFile::new(CONFIG);
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let mut options = options(&config);
        options.redis = Some(redis.url());
        replicas.push(shuffle_limiter_server::start(options).await.unwrap());
    }
    let mut a = client(&replicas[0]).await;
    let mut b = client(&replicas[1]).await;
    let asked = request("fleet", &[("tenant", "acme")], 1);
    // Both at once, 20 asks each.
    let (from_a, from_b) = tokio::join!(codes(&mut a, &asked, 20), codes(&mut b, &asked, 20));
    let granted = from_a
        .iter()
        .chain(&from_b)
        .filter(|&&c| c == Code::Ok)
        .count();
    assert_eq!(granted, 12, "a: {from_a:?}, b: {from_b:?}");

    // A reload builds again over the same keys: still nothing left.
    replicas[0].reload().await.unwrap();
    assert_eq!(code(&ask(&mut a, asked.clone()).await), Code::OverLimit);
    for replica in replicas {
        replica.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_the_answer_is_unavailable_not_ok_or_over() {
    let redis = RedisServer::start();
    let config = ConfigFile::new(CONFIG);
    let mut options = options(&config);
    options.redis = Some(redis.url());
    let server = shuffle_limiter_server::start(options).await.unwrap();
    let mut client = client(&server).await;
    let asked = request("fleet", &[("tenant", "acme")], 1);
    assert_eq!(code(&ask(&mut client, asked.clone()).await), Code::Ok);
    drop(redis);
    let status = client.should_rate_limit(asked).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    let unavailable = r#"shuffle_limiter_server_decisions_total{domain="fleet",descriptor="tenant",code="unavailable"}"#;
    assert_eq!(metric(&server, unavailable).await, Some(1.0));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_a_rule_in_shadow_mode_still_answers_ok() {
    let redis = RedisServer::start();
    let config = ConfigFile::new(
        "domain: d\ndescriptors:\n  - key: watched\n    rate_limit: {rate: \"100/s\"}\n    \
         shuffle: {buckets: 1, per_tenant: 1}\n    shadow_mode: true\n",
    );
    let mut options = options(&config);
    options.redis = Some(redis.url());
    let server = shuffle_limiter_server::start(options).await.unwrap();
    let mut client = client(&server).await;
    let asked = request("d", &[("watched", "x")], 1);
    assert_eq!(code(&ask(&mut client, asked.clone()).await), Code::Ok);
    drop(redis);
    // Envoy's failure_mode_deny must not turn a watched rule into denials.
    assert_eq!(code(&ask(&mut client, asked).await), Code::Ok);
    let unavailable = r#"shuffle_limiter_server_decisions_total{domain="d",descriptor="watched",code="unavailable"}"#;
    assert_eq!(
        metric(&server, unavailable).await,
        Some(1.0),
        "still counted"
    );
    server.shutdown().await;
}

/// Two rules, one 2/h and one 100/h, whose names both print `d.a=b.c=x`
/// (key `a` value `b.c=x`; key `a` value `b` then key `c` value `x`).
const COLLIDING: &str = r#"
domain: d
descriptors:
  - key: a
    value: "b.c=x"
    rate_limit: {rate: "2/h"}
  - key: a
    value: b
    descriptors:
      - key: c
        value: x
        rate_limit: {rate: "100/h"}
"#;

/// Promised (README, "Redis"): each rule's Redis keys are named after its
/// escaped path, so the two rules above, whose unescaped paths print
/// alike, draw on Redis buckets of their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_rules_whose_names_print_alike_do_not_share_redis_buckets() {
    let redis = RedisServer::start();
    let config = ConfigFile::new(COLLIDING);
    let mut options = options(&config);
    options.redis = Some(redis.url());
    let server = shuffle_limiter_server::start(options).await.unwrap();
    let mut client = client(&server).await;
    let oks = |codes: Vec<Code>| codes.into_iter().filter(|&c| c == Code::Ok).count();
    let small = request("d", &[("a", "b.c=x")], 1);
    let big = request("d", &[("a", "b"), ("c", "x")], 1);
    let small_oks = oks(codes(&mut client, &small, 10).await);
    let big_oks = oks(codes(&mut client, &big, 10).await);
    assert_eq!(
        (small_oks, big_oks),
        (2, 10),
        "2/h rule granted {small_oks} of 10, the 100/h rule {big_oks} of 10"
    );
    server.shutdown().await;
    drop(redis);
}

/// Promised (README, "Reloads"): a reload whose live change cannot be made
/// (a new rate while Redis is away) fails: `Running::reload` answers the
/// error, `/metrics` counts `result="error"`, and the old rules serve on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_whose_rate_change_cannot_be_applied_is_not_reported_as_done() {
    let mut redis = RedisServer::start();
    let text = |rate: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: k\n    value: v\n    rate_limit: {{rate: \"{rate}\"}}\n"
        )
    };
    let config = ConfigFile::new(&text("5/h"));
    let mut options = options(&config);
    options.redis = Some(redis.url());
    let server = shuffle_limiter_server::start(options).await.unwrap();
    let mut client = client(&server).await;
    assert_eq!(
        code(&ask(&mut client, request("d", &[("k", "v")], 1)).await),
        Code::Ok
    );

    redis.kill();
    config.write(&text("50/h"));
    let reloaded = server.reload().await;
    let errors = metric(
        &server,
        r#"shuffle_limiter_server_reloads_total{result="error"}"#,
    )
    .await
    .unwrap_or(0.0);
    assert!(
        reloaded.is_err() && errors == 1.0,
        "the new rate was not applied (Redis is away), yet reload() = {reloaded:?} and \
         reloads_total{{result=\"error\"}} = {errors}"
    );
    let ok = r#"shuffle_limiter_server_reloads_total{result="ok"}"#;
    assert_eq!(metric(&server, ok).await.unwrap_or(0.0), 0.0);
    server.shutdown().await;
}

/// Promised (README, "Bad requests and bounds"): a request over the limit
/// in one descriptor is `OVER_LIMIT` even when another descriptor's store
/// could not decide (`UNAVAILABLE` would let a fail-open Envoy pass it);
/// that descriptor's status is `UNKNOWN`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_the_limit_in_one_descriptor_wins_over_another_unavailable() {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use envoy_types::pb::google::protobuf::UInt64Value;
    let redis = RedisServer::start();
    let config = ConfigFile::new(CONFIG);
    let mut options = options(&config);
    options.redis = Some(redis.url());
    let server = shuffle_limiter_server::start(options).await.unwrap();
    let mut client = client(&server).await;
    drop(redis);
    // More than the burst (12): over the limit without asking Redis.
    let never = RateLimitRequest {
        descriptors: vec![
            descriptor(&[("tenant", "acme")]),
            RateLimitDescriptor {
                hits_addend: Some(UInt64Value { value: 100 }),
                ..descriptor(&[("tenant", "other")])
            },
        ],
        ..request("fleet", &[], 1)
    };
    let answer = ask(&mut client, never).await;
    assert_eq!(code(&answer), Code::OverLimit);
    assert_eq!(answer.statuses[0].code, Code::Unknown as i32);
    assert_eq!(answer.statuses[1].code, Code::OverLimit as i32);
    // The two header lists hold the over-limit descriptor's items only.
    assert_eq!(
        header(&answer, "ratelimit"),
        Some(r#""tenant";r=0"#),
        "{answer:?}"
    );
    server.shutdown().await;
}
