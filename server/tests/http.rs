//! The HTTP face: `/json` as envoyproxy/ratelimit's, `/healthcheck`, and
//! `/metrics` counting decisions by domain, descriptor and code.

mod support;

use support::*;

fn body(tenant: &str, hits: u32) -> String {
    format!(
        r#"{{"domain":"web","descriptors":[{{"entries":[{{"key":"tenant","value":"{tenant}"}}]}}],"hits_addend":{hits}}}"#
    )
}

#[tokio::test]
async fn json_answers_200_then_429_in_proto3_json() {
    let config = ConfigFile::new(WEB);
    let server = serve(&config).await;
    // One bucket of 2 tokens, refilling at 1 per 4 h: 8 h from empty.
    let (status, first) = http(&server, "POST", "/json", &body("acme", 1)).await;
    assert_eq!(status, 200, "{first}");
    let first: serde_json::Value = serde_json::from_str(&first).unwrap();
    assert_eq!(first["overallCode"], "OK");
    assert_eq!(first["statuses"][0]["code"], "OK");
    assert_eq!(first["statuses"][0]["limitRemaining"], 1);
    assert_eq!(first["statuses"][0]["currentLimit"]["requestsPerUnit"], 1);
    assert_eq!(first["statuses"][0]["currentLimit"]["unit"], "HOUR");
    assert!(
        first["statuses"][0]["durationUntilReset"]
            .as_str()
            .unwrap()
            .ends_with('s')
    );
    let headers = &first["responseHeadersToAdd"];
    assert_eq!(headers[0]["key"], "RateLimit-Policy");
    assert_eq!(headers[0]["value"], "\"tenant\";q=2;w=28800");

    // hitsAddend, proto3's JSON name, reads too.
    let camel = body("acme", 1).replace("hits_addend", "hitsAddend");
    assert_eq!(http(&server, "POST", "/json", &camel).await.0, 200);
    let (status, denied) = http(&server, "POST", "/json", &body("acme", 1)).await;
    assert_eq!(status, 429, "{denied}");
    let denied: serde_json::Value = serde_json::from_str(&denied).unwrap();
    assert_eq!(denied["overallCode"], "OVER_LIMIT");
    assert_eq!(denied["statuses"][0]["code"], "OVER_LIMIT");
    let retry = denied["responseHeadersToAdd"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["key"] == "Retry-After")
        .expect("Retry-After when over the limit");
    assert!(retry["value"].as_str().unwrap().parse::<u64>().unwrap() >= 1);
    server.shutdown().await;
}

#[tokio::test]
async fn json_refuses_what_is_not_a_request_with_400() {
    let config = ConfigFile::new(WEB);
    let server = serve(&config).await;
    for bad in [
        "not json",
        r#"{"descriptors":[]}"#,
        r#"{"domain":"","descriptors":[{"entries":[{"key":"tenant","value":"a"}]}]}"#,
        r#"{"domain":"web","descriptors":[]}"#,
        r#"{"domain":"web","descriptors":[{"entries":[]}]}"#,
        r#"{"domain":"web","descriptors":[{"entries":[{"key":"","value":"a"}]}]}"#,
    ] {
        assert_eq!(http(&server, "POST", "/json", bad).await.0, 400, "{bad}");
    }
    // Past the body bound.
    let huge = body(&"x".repeat(100 * 1024), 1);
    assert_eq!(http(&server, "POST", "/json", &huge).await.0, 413);
    assert_eq!(
        http(&server, "GET", "/healthcheck", "").await,
        (200, "OK\n".into())
    );
    server.shutdown().await;
}

#[tokio::test]
async fn metrics_count_decisions_by_domain_descriptor_and_code() {
    let config = ConfigFile::new(WEB);
    let server = serve(&config).await;
    for _ in 0..3 {
        http(&server, "POST", "/json", &body("acme", 1)).await;
    }
    let unknown = r#"{"domain":"elsewhere","descriptors":[{"entries":[{"key":"a","value":"b"}]}]}"#;
    assert_eq!(http(&server, "POST", "/json", unknown).await.0, 200);
    let line = |code: &str| {
        format!(
            r#"shuffle_limiter_server_decisions_total{{domain="web",descriptor="tenant",code="{code}"}}"#
        )
    };
    assert_eq!(metric(&server, &line("ok")).await, Some(2.0));
    assert_eq!(metric(&server, &line("over_limit")).await, Some(1.0));
    let unknown =
        r#"shuffle_limiter_server_decisions_total{domain="",descriptor="",code="unknown_domain"}"#;
    assert_eq!(metric(&server, unknown).await, Some(1.0));
    assert_eq!(
        metric(&server, "shuffle_limiter_server_rules").await,
        Some(1.0)
    );
    server.shutdown().await;
}

/// Promised (README, `/json`): the request in proto3's JSON mapping, whose
/// integers may be numbers or strings of digits (a descriptor's
/// `hits_addend` is a `UInt64Value`, which proto3 JSON writes as a string:
/// `"hitsAddend": "2"`). Above `u32::MAX`, a descriptor's reads as
/// `u32::MAX`, as over gRPC (over the burst: never fits); the request's
/// own, a `uint32`, is refused.
#[tokio::test]
async fn json_reads_hits_addend_as_proto3_json_writes_it() {
    // One budget of 2 for each value of `k` (`a` to `f`).
    let mut text = String::from("domain: web\ndescriptors:\n");
    for value in ["a", "b", "c", "d", "e", "f"] {
        text += &format!("  - {{key: k, value: {value}, rate_limit: {{rate: \"2/h\"}}}}\n");
    }
    let config = ConfigFile::new(&text);
    let server = serve(&config).await;
    let with = |value: &str, own: &str, request: &str| {
        format!(
            r#"{{"domain":"web","descriptors":[{{"entries":[{{"key":"k","value":"{value}"}}]{own}}}]{request}}}"#
        )
    };
    for (value, own, request) in [
        ("a", r#","hitsAddend":"2""#, ""),
        ("b", r#","hits_addend":2"#, ""),
        ("c", "", r#","hitsAddend":"2""#),
        ("d", r#","hitsAddend":null"#, r#","hits_addend":2"#),
    ] {
        let (status, answer) = http(&server, "POST", "/json", &with(value, own, request)).await;
        assert_eq!(status, 200, "{value}: {answer}");
        let answer: serde_json::Value = serde_json::from_str(&answer).unwrap();
        // 2 taken, none left (0 is left out, as proto3 JSON does).
        let left = &answer["statuses"][0]["limitRemaining"];
        assert_eq!(left, &serde_json::Value::Null, "{value}");
    }
    let huge = r#","hitsAddend":"18446744073709551615""#;
    let (status, answer) = http(&server, "POST", "/json", &with("e", huge, "")).await;
    assert_eq!(status, 429, "{answer}");
    assert!(!answer.contains("Retry-After"), "never fits: {answer}");
    for bad in [
        with("f", "", r#","hitsAddend":"4294967296""#),
        with("f", r#","hitsAddend":"-1""#, ""),
        with("f", r#","hitsAddend":"two""#, ""),
        with("f", r#","hitsAddend":1.5"#, ""),
    ] {
        let (status, answer) = http(&server, "POST", "/json", &bad).await;
        assert_eq!(status, 400, "{bad}: {answer}");
    }
    server.shutdown().await;
}

/// Promised (README, "Metrics"): `invalid_argument` counts every refused
/// request, a message over 64 KiB too (gRPC `OUT_OF_RANGE`, `/json` 413).
#[tokio::test]
async fn a_refused_oversized_request_is_counted_as_invalid() {
    let config = ConfigFile::new(WEB);
    let server = serve(&config).await;
    let mut client = client(&server).await;
    let invalid = r#"shuffle_limiter_server_decisions_total{domain="",descriptor="",code="invalid_argument"}"#;
    let before = metric(&server, invalid).await.unwrap_or(0.0);

    let huge = "x".repeat(1 << 20);
    let status = client
        .should_rate_limit(request("web", &[("tenant", &huge)], 1))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::OutOfRange);
    let after_grpc = metric(&server, invalid).await.unwrap_or(0.0);

    let body = format!(
        r#"{{"domain":"web","descriptors":[{{"entries":[{{"key":"tenant","value":"{}"}}]}}]}}"#,
        "x".repeat(100 * 1024)
    );
    assert_eq!(http(&server, "POST", "/json", &body).await.0, 413);
    let after_json = metric(&server, invalid).await.unwrap_or(0.0);
    assert_eq!(
        (after_grpc - before, after_json - before),
        (1.0, 2.0),
        "refused requests counted: gRPC OUT_OF_RANGE then /json 413"
    );
    server.shutdown().await;
}
