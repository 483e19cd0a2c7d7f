//! Keys over real HTTP on 127.0.0.1: exempt requests, borrowed keys, the
//! method filter, and two stacked layers with their own policy names.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::{HeaderName, Method, StatusCode};
use axum::routing::get;
use shuffle_limiter::tower::{ClientIp, RateLimitLayer, RequestKey, TenantKey};

#[path = "support/http.rs"]
mod http;
use http::{client, limiter, serve, serve_with_peer};

fn ratelimit_fields(response: &reqwest::Response) -> Vec<String> {
    let all = response.headers().get_all("ratelimit").iter();
    all.map(|v| v.to_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn exempt_requests_pass_unlimited_and_send_no_fields() {
    let limiter = limiter();
    let key = TenantKey::decide(|parts| {
        if parts.headers.contains_key("x-internal") {
            return RequestKey::Exempt;
        }
        match parts.headers.get("x-api-key") {
            Some(key) => RequestKey::Tenant(key.as_bytes()),
            None => RequestKey::Missing,
        }
    })
    .exempt_if(|parts| parts.uri.path() == "/health");
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .route("/health", get(|| async { "up" }))
        .layer(RateLimitLayer::new(Arc::clone(&limiter), key));
    let base = format!("http://{}", serve(app).await);
    let client = client();

    for _ in 0..10 {
        let internal = client
            .get(&base)
            .header("x-internal", "1")
            .send()
            .await
            .unwrap();
        assert_eq!(internal.status(), StatusCode::OK);
        assert!(ratelimit_fields(&internal).is_empty());
        assert!(!internal.headers().contains_key("ratelimit-policy"));
        let health = client.get(format!("{base}/health")).send().await.unwrap();
        assert_eq!(health.status(), StatusCode::OK, "exempt even without a key");
        assert!(ratelimit_fields(&health).is_empty());
    }
    // Nothing was taken from anyone.
    assert_eq!(limiter.remaining("acme"), 4);
    for _ in 0..4 {
        let reply = client
            .get(&base)
            .header("x-api-key", "acme")
            .send()
            .await
            .unwrap();
        assert_eq!(reply.status(), StatusCode::OK);
        assert_eq!(ratelimit_fields(&reply).len(), 1);
    }
    let denied = client
        .get(&base)
        .header("x-api-key", "acme")
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let anonymous = client.get(&base).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn a_bearer_token_is_the_key_without_a_copy() {
    let limiter = limiter();
    let bearer = TenantKey::borrowed(|parts| {
        parts
            .headers
            .get("authorization")?
            .as_bytes()
            .strip_prefix(b"Bearer ")
    });
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(RateLimitLayer::new(Arc::clone(&limiter), bearer));
    let url = format!("http://{}/", serve(app).await);
    let client = client();
    let call = |auth: &'static str| client.get(&url).header("authorization", auth).send();

    for left in (0..4).rev() {
        assert_eq!(call("Bearer tok-1").await.unwrap().status(), StatusCode::OK);
        assert_eq!(
            limiter.remaining("tok-1"),
            left,
            "charged to the token alone"
        );
    }
    let denied = call("Bearer tok-1").await.unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    // Another scheme, or an empty token, is no tenant.
    assert_eq!(
        call("Basic abc").await.unwrap().status(),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        call("Bearer ").await.unwrap().status(),
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test]
async fn only_the_configured_methods_are_limited() {
    let limiter = limiter();
    let layer = RateLimitLayer::new(
        Arc::clone(&limiter),
        TenantKey::header(HeaderName::from_static("x-api-key")),
    )
    .methods([Method::POST]);
    let app = Router::new()
        .route("/", get(|| async { "read" }).post(|| async { "write" }))
        .layer(layer);
    let url = format!("http://{}/", serve(app).await);
    let client = client();

    for _ in 0..10 {
        let read = client
            .get(&url)
            .header("x-api-key", "acme")
            .send()
            .await
            .unwrap();
        assert_eq!(read.status(), StatusCode::OK);
        assert!(ratelimit_fields(&read).is_empty());
    }
    // Not limited means not asked for a key either.
    assert_eq!(
        client.get(&url).send().await.unwrap().status(),
        StatusCode::OK
    );
    let write = || client.post(&url).header("x-api-key", "acme").send();
    for _ in 0..4 {
        assert_eq!(write().await.unwrap().status(), StatusCode::OK);
    }
    assert_eq!(
        write().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
}

/// A per-IP layer outside a per-key layer, each with its own limiter and
/// policy name; internal callers skip the inner one only.
#[tokio::test]
async fn stacked_layers_send_one_field_each_under_distinct_names() {
    let per_ip = limiter();
    let per_key = limiter();
    let ip = ClientIp::peer(|c: &ConnectInfo<SocketAddr>| c.0);
    let outer = RateLimitLayer::new(Arc::clone(&per_ip), TenantKey::client_ip(ip))
        .policy("ip")
        .unwrap();
    let key = TenantKey::header(HeaderName::from_static("x-api-key"))
        .exempt_if(|parts| parts.headers.contains_key("x-internal"));
    let inner = RateLimitLayer::new(Arc::clone(&per_key), key)
        .policy("key")
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(inner)
        .layer(outer); // the last added runs first
    let url = format!("http://{}/", serve_with_peer(app).await);
    let client = client();
    let localhost = [127, 0, 0, 1];

    let reply = client
        .get(&url)
        .header("x-api-key", "acme")
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), StatusCode::OK);
    let fields = ratelimit_fields(&reply);
    assert_eq!(fields.len(), 2, "{fields:?}");
    assert!(fields[0].starts_with("\"key\";r=3;"), "{fields:?}");
    assert!(fields[1].starts_with("\"ip\";r=3;"), "{fields:?}");
    let policies = reply.headers().get_all("ratelimit-policy").iter().count();
    assert_eq!(policies, 2);

    let internal = client
        .get(&url)
        .header("x-internal", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(internal.status(), StatusCode::OK);
    let fields = ratelimit_fields(&internal);
    assert_eq!(fields.len(), 1);
    assert!(fields[0].starts_with("\"ip\";r=2;"), "{fields:?}");

    // The inner layer denies "acme" once its key is spent; the outer
    // layer's token for that request is spent too, not given back (see the
    // module docs for why), and both fields say so.
    while per_key.check("acme").is_ok() {}
    assert_eq!(per_ip.remaining(&localhost), 2);
    let denied = client
        .get(&url)
        .header("x-api-key", "acme")
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    let fields = ratelimit_fields(&denied);
    assert!(fields[0].starts_with("\"key\";r=0;"), "{fields:?}");
    assert!(fields[1].starts_with("\"ip\";r=1;"), "{fields:?}");
    assert_eq!(per_ip.remaining(&localhost), 1);
}
