//! The hook that builds the layer's own answers, over real HTTP on
//! 127.0.0.1: a JSON body, and a gRPC-style RESOURCE_EXHAUSTED.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderName, HeaderValue, Response, StatusCode, header};
use axum::routing::get;
use shuffle_limiter::tower::{ClientIp, RateLimitLayer, Reason, Rejection, TenantKey};

#[path = "support/http.rs"]
mod http;
use http::{client, limiter, serve};

fn json(rejection: Rejection) -> Response<Body> {
    let retry_ms = match rejection.reason() {
        Reason::TooManyRequests { retry_after } => retry_after.as_millis(),
        _ => 0,
    };
    let body = format!(
        r#"{{"status":{},"error":{:?},"retry_after_ms":{retry_ms}}}"#,
        rejection.status().as_u16(),
        rejection.to_string()
    );
    let mut response = rejection.into_response(Body::from(body));
    let json = HeaderValue::from_static("application/json");
    response.headers_mut().insert(header::CONTENT_TYPE, json);
    response
}

fn grpc(rejection: Rejection) -> Response<Body> {
    let (code, pushback) = match rejection.reason() {
        Reason::TooManyRequests { retry_after } => ("8", Some(retry_after.as_millis())),
        Reason::MissingTenant => ("16", None),
        _ => ("13", None),
    };
    let mut response = rejection.into_response(Body::empty());
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert("grpc-status", HeaderValue::from_static(code));
    if let Some(ms) = pushback {
        let ms = u64::try_from(ms).unwrap_or(u64::MAX);
        headers.insert("grpc-retry-pushback-ms", HeaderValue::from(ms));
    }
    response
}

fn x_api_key() -> TenantKey {
    TenantKey::header(HeaderName::from_static("x-api-key"))
}

#[tokio::test]
async fn a_json_hook_answers_400_429_and_500_with_a_body() {
    let limiter = limiter();
    let layer = RateLimitLayer::new(Arc::clone(&limiter), x_api_key()).respond_with(json);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let url = format!("http://{}/", serve(app).await);
    let client = client();

    let missing = client.get(&url).send().await.unwrap();
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    assert_eq!(missing.headers()["content-type"], "application/json");
    let body = missing.text().await.unwrap();
    assert!(body.starts_with(r#"{"status":400,"error":"#), "{body}");

    for _ in 0..4 {
        let reply = client.get(&url).header("x-api-key", "acme").send().await;
        assert_eq!(reply.unwrap().status(), StatusCode::OK);
    }
    let denied = client
        .get(&url)
        .header("x-api-key", "acme")
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), StatusCode::TOO_MANY_REQUESTS);
    // The default headers are kept: the fields and Retry-After (4.8 s → 5).
    assert_eq!(denied.headers()["retry-after"], "5");
    assert!(denied.headers().contains_key("ratelimit"));
    let body = denied.text().await.unwrap();
    assert!(body.contains(r#""retry_after_ms":4800"#), "{body}");

    // A per-IP key served without connect info: the body says what to change.
    let ip = ClientIp::peer(|c: &ConnectInfo<SocketAddr>| c.0);
    let layer = RateLimitLayer::new(limiter, TenantKey::client_ip(ip)).respond_with(json);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let url = format!("http://{}/", serve(app).await);
    let reply = client.get(&url).send().await.unwrap();
    assert_eq!(reply.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = reply.text().await.unwrap();
    assert!(
        body.contains("into_make_service_with_connect_info"),
        "{body}"
    );
}

#[tokio::test]
async fn a_grpc_hook_answers_resource_exhausted_with_the_retry_delay() {
    let limiter = limiter();
    let layer = RateLimitLayer::new(Arc::clone(&limiter), x_api_key()).respond_with(grpc);
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let url = format!("http://{}/", serve(app).await);
    let client = client();

    while limiter.check("acme").is_ok() {}
    let denied = client
        .get(&url)
        .header("x-api-key", "acme")
        .send()
        .await
        .unwrap();
    assert_eq!(denied.status(), StatusCode::OK);
    assert_eq!(denied.headers()["grpc-status"], "8");
    assert_eq!(denied.headers()["grpc-retry-pushback-ms"], "4800");
    let missing = client.get(&url).send().await.unwrap();
    assert_eq!(missing.headers()["grpc-status"], "16");
}
