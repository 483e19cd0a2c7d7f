//! Rule identity: each rule is named by its domain and descriptor path,
//! with `.`, `=` and `\` escaped in names, so that two distinct
//! descriptors never share a limiter (across a reload), a metric series or
//! (with `--redis`) Redis keys, however their names print.

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use support::*;
use tonic::transport::Channel;

/// Key `a` value `b.c=x`, and key `a` value `b` then key `c` value `x`:
/// unescaped, both print `a=b.c=x`.
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

const SMALL: &[(&str, &str)] = &[("a", "b.c=x")];
const BIG: &[(&str, &str)] = &[("a", "b"), ("c", "x")];

async fn oks(
    client: &mut RateLimitServiceClient<Channel>,
    entries: &[(&str, &str)],
    n: usize,
) -> usize {
    let asked = request("d", entries, 1);
    let codes = codes(client, &asked, n).await;
    codes.into_iter().filter(|&c| c == Code::Ok).count()
}

/// Promised (README, "Reloads"): a rule that stays keeps its own limiter;
/// two rules are never matched to one old limiter, however they print.
#[tokio::test]
async fn descriptors_whose_paths_print_alike_keep_their_own_budgets_across_a_reload() {
    let file = ConfigFile::new(COLLIDING);
    let server = serve(&file).await;
    let mut client = client(&server).await;
    // Before any reload the two rules are apart: 2 of 10, and 10 of 10.
    assert_eq!(oks(&mut client, SMALL, 10).await, 2);
    assert_eq!(oks(&mut client, BIG, 10).await, 10);

    // The same file again: nothing changed, so nothing may change.
    server.reload().await.unwrap();
    let small_after = oks(&mut client, SMALL, 10).await;
    let big_after = oks(&mut client, BIG, 10).await;
    // The 2/h rule is spent for the hour; the 100/h rule has 90 left.
    assert_eq!(
        (small_after, big_after),
        (0, 10),
        "after reloading the same config the 2/h rule (spent) granted {small_after} more \
         and the 100/h rule (90 left) {big_after} of 10: the two rules now share one limiter"
    );
    server.shutdown().await;
}

/// Promised (README, "Metrics"): each rule has its own series, its
/// `descriptor` label the escaped path.
#[tokio::test]
async fn descriptors_whose_paths_print_alike_are_counted_apart() {
    let file = ConfigFile::new(COLLIDING);
    let server = serve(&file).await;
    let mut client = client(&server).await;
    assert_eq!(oks(&mut client, SMALL, 1).await, 1);
    assert_eq!(oks(&mut client, BIG, 1).await, 1);
    let (_, body) = http(&server, "GET", "/metrics", "").await;
    let ok_series: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with(r#"shuffle_limiter_server_decisions_total{domain="d""#))
        .filter(|l| l.contains(r#"code="ok""#))
        .collect();
    assert_eq!(ok_series.len(), 2, "two rules, one series: {ok_series:?}");
    // In Prometheus' text a `\` of a label is written `\\`.
    assert!(
        body.contains(r#"descriptor="a=b\\.c\\=x",code="ok"} 1"#),
        "{body}"
    );
    assert!(
        body.contains(r#"descriptor="a=b.c=x",code="ok"} 1"#),
        "{body}"
    );
    assert_eq!(
        metric(&server, "shuffle_limiter_server_rules").await,
        Some(2.0),
        "two rules served"
    );
    server.shutdown().await;
}

// Domains may hold dots too (`partner.api`): the rule `tenant` of domain
// `partner.api` and the rule `api.tenant` of domain `partner` share the
// name `partner.api.tenant`.
const COLLIDING_DOMAINS: &str = r#"
domain: partner.api
descriptors:
  - key: tenant
    rate_limit: {rate: "2/h"}
---
domain: partner
descriptors:
  - key: api
    descriptors:
      - key: tenant
        rate_limit: {rate: "100/h"}
"#;

/// Promised: the domain is part of a rule's identity apart from its path.
#[tokio::test]
async fn rules_of_two_domains_whose_names_print_alike_keep_their_own_budgets_across_a_reload() {
    let file = ConfigFile::new(COLLIDING_DOMAINS);
    let server = serve(&file).await;
    let mut client = client(&server).await;
    let small = request("partner.api", &[("tenant", "t")], 1);
    let big = request("partner", &[("api", "v1"), ("tenant", "t")], 1);
    let oks = |codes: Vec<Code>| codes.into_iter().filter(|&c| c == Code::Ok).count();
    assert_eq!(oks(codes(&mut client, &small, 10).await), 2);
    assert_eq!(oks(codes(&mut client, &big, 10).await), 10);
    server.reload().await.unwrap();
    let small_after = oks(codes(&mut client, &small, 10).await);
    let big_after = oks(codes(&mut client, &big, 10).await);
    assert_eq!(
        (small_after, big_after),
        (0, 10),
        "after reloading the same config: partner.api's 2/h rule (spent) granted \
         {small_after} more, partner's 100/h rule (90 left) {big_after} of 10"
    );
    server.shutdown().await;
}
