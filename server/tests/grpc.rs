//! The server over real gRPC on 127.0.0.1, with the client generated from
//! Envoy's protos: decisions as the config says, isolation between tenant
//! values, and bad requests answered with a status.

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use shuffle_limiter::{Quota, ShardedLimiter};
use shuffle_limiter_server::MAX_DESCRIPTORS;
use support::*;

// A rate of 1 an hour: over a test, only the burst counts, exactly.
const CONFIG: &str = r#"
domain: partner_api
descriptors:
  - key: generic_key
    value: fixed
    rate_limit: {rate: "5/h"}
  - key: tenant
    rate_limit: {rate: "1/h"}
    shuffle: {buckets: 8, per_tenant: 2, burst: 16}
    descriptors:
      - key: user
        shuffle: {per_user: 1}
  - key: open
    rate_limit: {unlimited: true}
  - key: watched
    rate_limit: {rate: "1/h"}
    shuffle: {buckets: 1, per_tenant: 1}
    shadow_mode: true
"#;

#[tokio::test]
async fn a_fixed_descriptor_grants_its_burst_then_is_over_the_limit() {
    let config = ConfigFile::new(CONFIG);
    let server = serve(&config).await;
    let mut client = client(&server).await;
    let asked = request("partner_api", &[("generic_key", "fixed")], 0);
    let codes = codes(&mut client, &asked, 7).await;
    assert_eq!(codes, [&[Code::Ok; 5][..], &[Code::OverLimit; 2]].concat());

    let denied = ask(&mut client, asked).await;
    let status = &denied.statuses[0];
    assert_eq!(status.code, Code::OverLimit as i32);
    assert_eq!(status.limit_remaining, 0);
    let limit = status.current_limit.as_ref().unwrap();
    assert_eq!(limit.requests_per_unit, 5);
    // At 5/h, the next token is up to 12 minutes away.
    let retry: u64 = header(&denied, "retry-after").unwrap().parse().unwrap();
    assert!((1..=720).contains(&retry), "{retry}");
    assert_eq!(
        header(&denied, "ratelimit").unwrap(),
        format!("\"generic_key=fixed\";r=0;t={retry}")
    );
    assert_eq!(
        header(&denied, "ratelimit-policy").unwrap(),
        "\"generic_key=fixed\";q=5;w=3600"
    );
    server.shutdown().await;
}

#[tokio::test]
async fn a_flooding_tenant_is_over_the_limit_while_one_on_other_buckets_is_served() {
    let config = ConfigFile::new(CONFIG);
    let server = serve(&config).await;
    let mut client = client(&server).await;
    // The same N, k and salt as the config: the same shards.
    let same = ShardedLimiter::builder()
        .quota(Quota::per_hour(1).with_burst(16))
        .buckets(8)
        .per_tenant(2)
        .build()
        .unwrap();
    let flood = "tenant-0";
    let flooded = same.shard(flood);
    let calm = (1..1000)
        .map(|i| format!("tenant-{i}"))
        .find(|t| {
            let theirs = same.shard(t.as_str());
            theirs
                .buckets()
                .iter()
                .all(|b| !flooded.buckets().contains(b))
        })
        .expect("some tenant's shard is disjoint");

    // Its 2 buckets of 2 tokens: 4 grants, then nothing, however hard it asks.
    let flood_codes = codes(
        &mut client,
        &request("partner_api", &[("tenant", flood)], 1),
        50,
    )
    .await;
    assert_eq!(flood_codes.iter().filter(|&&c| c == Code::Ok).count(), 4);
    assert_eq!(flood_codes[4..], [Code::OverLimit; 46]);
    let calm_codes = codes(
        &mut client,
        &request("partner_api", &[("tenant", &calm)], 1),
        4,
    )
    .await;
    assert_eq!(calm_codes, [Code::Ok; 4]);
    server.shutdown().await;
}

#[tokio::test]
async fn a_user_draws_from_one_of_its_tenants_buckets() {
    let config = ConfigFile::new(CONFIG);
    let server = serve(&config).await;
    let mut client = client(&server).await;
    let asked = request("partner_api", &[("tenant", "acme"), ("user", "bob")], 1);
    // j = 1: one bucket of 2 tokens.
    let codes = codes(&mut client, &asked, 4).await;
    assert_eq!(
        codes,
        [Code::Ok, Code::Ok, Code::OverLimit, Code::OverLimit]
    );
    // The tenant itself still has its other bucket.
    let tenant = ask(
        &mut client,
        request("partner_api", &[("tenant", "acme")], 1),
    )
    .await;
    assert_eq!(code(&tenant), Code::Ok);
    server.shutdown().await;
}

#[tokio::test]
async fn unknown_domains_descriptors_and_unlimited_answer_ok_without_a_limit() {
    let config = ConfigFile::new(CONFIG);
    let server = serve(&config).await;
    let mut client = client(&server).await;
    for asked in [
        request("nobody", &[("tenant", "acme")], 1),
        request("partner_api", &[("nothing", "here")], 1),
        request("partner_api", &[("generic_key", "other")], 1),
        // Deeper than the config: envoyproxy/ratelimit applies no limit.
        request("partner_api", &[("generic_key", "fixed"), ("more", "x")], 1),
        request("partner_api", &[("open", "x")], 1_000_000),
    ] {
        for _ in 0..10 {
            let answer = ask(&mut client, asked.clone()).await;
            assert_eq!(code(&answer), Code::Ok, "{asked:?}");
            assert!(answer.statuses[0].current_limit.is_none());
        }
    }
    server.shutdown().await;
}

#[tokio::test]
async fn several_descriptors_are_over_the_limit_together_and_take_nothing_when_denied() {
    let config = ConfigFile::new(CONFIG);
    let server = serve(&config).await;
    let mut client = client(&server).await;
    let both = RateLimitRequest {
        domain: "partner_api".into(),
        descriptors: vec![
            descriptor(&[("generic_key", "fixed")]),
            descriptor(&[("tenant", "acme"), ("user", "ann")]),
        ],
        hits_addend: 1,
    };
    // ann's one bucket holds 2: the third ask is over, and so must not take
    // from generic_key's 5.
    assert_eq!(
        codes(&mut client, &both, 3).await,
        [Code::Ok, Code::Ok, Code::OverLimit]
    );
    let only = request("partner_api", &[("generic_key", "fixed")], 1);
    assert_eq!(
        codes(&mut client, &only, 4).await,
        [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]
    );
    server.shutdown().await;
}

#[tokio::test]
async fn bad_requests_get_a_status_and_the_server_keeps_serving() {
    let config = ConfigFile::new(CONFIG);
    let server = serve(&config).await;
    let mut client = client(&server).await;
    let long = "x".repeat(shuffle_limiter_server::MAX_VALUE_LEN + 1);
    let no_entries = RateLimitRequest {
        domain: "partner_api".into(),
        descriptors: vec![descriptor(&[])],
        hits_addend: 1,
    };
    for (asked, why) in [
        (request("", &[("tenant", "a")], 1), "empty domain"),
        (
            RateLimitRequest {
                descriptors: vec![],
                ..request("partner_api", &[], 1)
            },
            "no descriptors",
        ),
        (no_entries, "no entries"),
        (request("partner_api", &[("", "a")], 1), "empty key"),
        (
            request("partner_api", &[("tenant", &long)], 1),
            "long value",
        ),
        (
            RateLimitRequest {
                descriptors: vec![descriptor(&[("tenant", "a")]); MAX_DESCRIPTORS + 1],
                ..request("partner_api", &[], 1)
            },
            "too many descriptors",
        ),
    ] {
        let status = client.should_rate_limit(asked).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{why}");
    }
    // A megabyte value: past the message bound, refused before decoding.
    let huge = "x".repeat(1 << 20);
    let status = client
        .should_rate_limit(request("partner_api", &[("tenant", &huge)], 1))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange, "{status:?}");
    // More than the burst at once: never fits, over the limit (typed).
    let answer = ask(
        &mut client,
        request("partner_api", &[("generic_key", "fixed")], 6),
    )
    .await;
    assert_eq!(code(&answer), Code::OverLimit);
    assert!(header(&answer, "retry-after").is_none());
    let answer = ask(
        &mut client,
        request("partner_api", &[("generic_key", "fixed")], u32::MAX),
    )
    .await;
    assert_eq!(code(&answer), Code::OverLimit);

    // A message that is not a RateLimitRequest (field 1, the domain, as a
    // varint): gRPC's INTERNAL from tonic, counted as invalid.
    let invalid = r#"shuffle_limiter_server_decisions_total{domain="",descriptor="",code="invalid_argument"}"#;
    let before = metric(&server, invalid).await.unwrap_or(0.0);
    let status = undecodable(&server).await;
    assert_eq!(status.code(), tonic::Code::Internal, "{status:?}");
    assert_eq!(metric(&server, invalid).await, Some(before + 1.0));

    // Garbage on the socket: that connection fails, the server does not.
    {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut raw = tokio::net::TcpStream::connect(server.grpc_addr())
            .await
            .unwrap();
        raw.write_all(&[0xff; 4096]).await.unwrap();
        let mut sink = Vec::new();
        let _ = raw.read_to_end(&mut sink).await;
    }
    let answer = ask(
        &mut client,
        request("partner_api", &[("generic_key", "fixed")], 1),
    )
    .await;
    assert_eq!(code(&answer), Code::Ok);
    server.shutdown().await;
}

#[tokio::test]
async fn shadow_mode_decides_and_counts_but_answers_ok() {
    let config = ConfigFile::new(CONFIG);
    let server = serve(&config).await;
    let mut client = client(&server).await;
    let asked = request("partner_api", &[("watched", "x")], 1);
    for _ in 0..3 {
        let answer = ask(&mut client, asked.clone()).await;
        assert_eq!(code(&answer), Code::Ok);
        assert_eq!(answer.statuses[0].code, Code::Ok as i32);
        assert!(header(&answer, "retry-after").is_none());
    }
    let line = |code: &str| {
        format!(
            r#"shuffle_limiter_server_decisions_total{{domain="partner_api",descriptor="watched",code="{code}"}}"#
        )
    };
    assert_eq!(metric(&server, &line("ok")).await, Some(1.0));
    assert_eq!(metric(&server, &line("shadow_over_limit")).await, Some(2.0));
    assert_eq!(metric(&server, &line("over_limit")).await, Some(0.0));
    server.shutdown().await;
}

/// Calls ShouldRateLimit with a `UInt64Value` where a `RateLimitRequest`
/// belongs, over the same tonic client stack: a message the server cannot
/// decode.
async fn undecodable(server: &shuffle_limiter_server::Running) -> tonic::Status {
    use envoy_types::pb::google::protobuf::UInt64Value;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc_addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    );
    let codec = tonic_prost::ProstCodec::<UInt64Value, UInt64Value>::default();
    grpc.unary(tonic::Request::new(UInt64Value { value: 7 }), path, codec)
        .await
        .unwrap_err()
}

/// `RateLimitRequest` with its strings as bytes (the same wire format), to
/// send what Envoy may send: a header's bytes that are not UTF-8.
#[derive(Clone, PartialEq, prost::Message)]
struct BytesRequest {
    #[prost(bytes = "vec", tag = "1")]
    domain: Vec<u8>,
    #[prost(message, repeated, tag = "2")]
    descriptors: Vec<BytesDescriptor>,
    #[prost(uint32, tag = "3")]
    hits_addend: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
struct BytesDescriptor {
    #[prost(message, repeated, tag = "1")]
    entries: Vec<BytesEntry>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct BytesEntry {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// Promised: a descriptor value that is not UTF-8 is decided and limited
/// like any other, never answered with an error (which an Envoy with
/// `failure_mode_deny: false` lets through). Envoy copies a header's bytes
/// into the value (HTTP allows obs-text, 0x80..=0xFF); such values are
/// matched as bytes, and two of them are two tenants.
#[tokio::test]
async fn a_tenant_value_that_is_not_utf8_is_limited_like_any_other() {
    use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
    let config = ConfigFile::new(WEB);
    let server = serve(&config).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc_addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    );
    let asked = |value: &[u8]| BytesRequest {
        domain: b"web".to_vec(),
        descriptors: vec![BytesDescriptor {
            entries: vec![BytesEntry {
                key: b"tenant".to_vec(),
                value: value.to_vec(),
            }],
        }],
        hits_addend: 1,
    };
    let mut ask = async |asked: &BytesRequest| {
        grpc.ready().await.unwrap();
        let codec = tonic_prost::ProstCodec::<BytesRequest, RateLimitResponse>::default();
        grpc.unary(tonic::Request::new(asked.clone()), path.clone(), codec)
            .await
            .map(|answer| answer.into_inner())
    };
    // WEB: a burst of 8 for everyone at 1 an hour, 2 per tenant (k = 1 of
    // N = 4). Any error is let through by a fail-open Envoy.
    let mut let_through = 0;
    for _ in 0..20 {
        match ask(&asked(b"acme\xff")).await {
            Ok(answer) if answer.overall_code == Code::OverLimit as i32 => {}
            Ok(_) => let_through += 1,
            Err(status) => panic!("a non-UTF-8 value answered {status:?}"),
        }
    }
    assert_eq!(let_through, 2, "the value's own bucket holds 2");
    // Another non-UTF-8 value (that a lossy conversion would merge with
    // the first) has its own share: within the burst, it is served.
    let other = ask(&asked(b"acme\xfe")).await.unwrap();
    assert_eq!(other.overall_code, Code::Ok as i32);
    server.shutdown().await;
}

const SHADOW_AND_TENANT: &str = r#"
domain: d
descriptors:
  - key: watched
    rate_limit: {rate: "1/h"}
    shuffle: {buckets: 1, per_tenant: 1}
    shadow_mode: true
  - key: tenant
    rate_limit: {rate: "1/h"}
    shuffle: {buckets: 4, per_tenant: 1, burst: 8}
"#;

/// The items of a structured-field list header.
fn items(value: Option<&str>) -> usize {
    value.map_or(0, |v| v.split(", ").filter(|i| !i.is_empty()).count())
}

/// Promised (README, "The answer"): `response_headers_to_add` holds one
/// list item per descriptor with a limit in `RateLimit-Policy` and in
/// `RateLimit`, the two lists in step, also for a rule in shadow mode over
/// its limit (whose answer is OK, without `Retry-After`).
#[tokio::test]
async fn a_shadow_rule_over_its_limit_keeps_the_two_header_lists_in_step() {
    let config = ConfigFile::new(SHADOW_AND_TENANT);
    let server = serve(&config).await;
    let mut client = client(&server).await;
    let alone = request("d", &[("watched", "x")], 1);
    let with_tenant = RateLimitRequest {
        domain: "d".into(),
        descriptors: vec![
            descriptor(&[("watched", "x")]),
            descriptor(&[("tenant", "t")]),
        ],
        hits_addend: 1,
    };
    // The first takes the shadow rule's one token; from then on it is over.
    assert_eq!(code(&ask(&mut client, alone.clone()).await), Code::Ok);
    for asked in [alone, with_tenant] {
        let answer = ask(&mut client, asked.clone()).await;
        assert_eq!(code(&answer), Code::Ok, "shadow mode answers OK");
        let policy = header(&answer, "ratelimit-policy");
        let fields = header(&answer, "ratelimit");
        assert_eq!(
            items(policy),
            items(fields),
            "RateLimit-Policy: {policy:?} but RateLimit: {fields:?} ({} descriptors)",
            asked.descriptors.len()
        );
        assert_ne!(fields, Some(""), "an empty RateLimit header");
        assert!(
            fields.is_some_and(|f| f.starts_with(r#""watched";r=0;t="#)),
            "{fields:?}"
        );
        assert!(header(&answer, "retry-after").is_none());
    }
    server.shutdown().await;
}
