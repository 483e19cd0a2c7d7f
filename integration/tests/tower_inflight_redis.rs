//! The in-flight layer over Redis leases (`InFlightLayer::redis`), against
//! a real `redis-server` on a free 127.0.0.1 port: a hung tenant's
//! requests hold its pools' leases and the next is answered 503 once its
//! wait runs out, while a tenant on other pools is served; with Redis
//! gone, failing closed, 503 for a store that cannot decide.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, Request, Response, StatusCode};
use axum::routing::get;
use redis::aio::ConnectionManager;
use shuffle_limiter::inflight::{InFlight, LeaseOptions, RedisInFlight};
use shuffle_limiter::tower::{InFlightLayer, Reason, Rejection, TenantKey};
use tokio::sync::{mpsc, watch};
use tower::ServiceExt;

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

/// C = 4 over N = 4 pools of one lease, k = 2; leases of 30 s.
async fn limit(url: &str) -> RedisInFlight {
    let client = redis::Client::open(url).unwrap();
    let connection = ConnectionManager::new(client).await.unwrap();
    let options = LeaseOptions::new("partner", Duration::from_secs(30))
        .deadline(Duration::from_millis(500))
        .retry_every(Duration::from_millis(50));
    (InFlight::builder().concurrency(4).pools(4).per_tenant(2))
        .build_redis(connection, options)
        .await
        .unwrap()
}

/// Answers the layer's refusals with their reason in the body.
fn reason_body(rejection: Rejection) -> Response<Body> {
    let body = match rejection.reason() {
        Reason::InFlightFull { reason, .. } => format!("{reason:?}"),
        Reason::StoreUnavailable { .. } => "store unavailable".to_owned(),
        other => format!("{other:?}"),
    };
    rejection.into_response(Body::from(body))
}

fn request(tenant: &str) -> Request<Body> {
    Request::get("/")
        .header("x-tenant", tenant)
        .body(Body::empty())
        .unwrap()
}

async fn answer(app: &Router, tenant: &str) -> (StatusCode, Option<String>, String) {
    let response = app.clone().oneshot(request(tenant)).await.unwrap();
    let status = response.status();
    let retry_after =
        (response.headers().get("retry-after")).map(|v| v.to_str().unwrap().to_owned());
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 16).await;
    (
        status,
        retry_after,
        String::from_utf8(bytes.unwrap().to_vec()).unwrap(),
    )
}

#[tokio::test]
async fn a_hung_tenant_holds_its_leases_and_others_are_served_until_redis_goes() {
    let mut server = RedisServer::start();
    let inflight = limit(&server.url()).await;
    let (open, gate) = watch::channel(false);
    let (started, mut started_rx) = mpsc::unbounded_channel::<()>();
    let handler = move |headers: HeaderMap| {
        let (mut gate, started) = (gate.clone(), started.clone());
        async move {
            if headers.get("x-tenant").is_some_and(|t| t == "tenant-0") {
                started.send(()).unwrap();
                gate.wait_for(|open| *open).await.unwrap();
            }
            "done"
        }
    };
    let layer = InFlightLayer::redis(
        inflight.clone(),
        TenantKey::header(HeaderName::from_static("x-tenant")),
    )
    .max_wait(Duration::from_millis(200))
    .respond_with(reason_body);
    assert!(layer.inflight().is_none() && layer.redis_inflight().is_some());
    let app: Router = Router::new().route("/", get(handler)).layer(layer);

    // tenant-0's two pools, one lease each: two hung calls hold them.
    let hung: Vec<_> = (0..2)
        .map(|_| tokio::spawn(app.clone().oneshot(request("tenant-0"))))
        .collect();
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(10), started_rx.recv())
            .await
            .expect("a hung call holds a lease");
    }
    let (status, retry_after, body) = answer(&app, "tenant-0").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(retry_after.as_deref(), Some("1"));
    assert!(body.starts_with("TimedOut"), "{body}");
    // A tenant on the other two pools is served.
    let hung_shard = inflight.shard("tenant-0");
    let other = (1..1000)
        .map(|t| format!("tenant-{t}"))
        .find(|t| inflight.shard(t).overlap(&hung_shard) == 0)
        .unwrap();
    assert_eq!(answer(&app, &other).await.0, StatusCode::OK);

    // The hung calls end; their leases come back for tenant-0.
    open.send(true).unwrap();
    for call in hung {
        assert_eq!(call.await.unwrap().unwrap().status(), StatusCode::OK);
    }
    let mut served = false;
    for _ in 0..50 {
        if answer(&app, "tenant-0").await.0 == StatusCode::OK {
            served = true;
            break;
        }
    }
    assert!(served, "tenant-0 is served once its leases are given back");

    // Redis gone, failing closed: a store that cannot decide is a 503.
    server.kill();
    let (status, retry_after, body) = answer(&app, &other).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "store unavailable")
    );
    assert_eq!(retry_after.as_deref(), Some("1"));
}
