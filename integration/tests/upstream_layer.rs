//! `tower::UpstreamLayer` around an HTTP service (an axum `Router` standing
//! in for the upstream's client; the bodies are `String`s, which a retry
//! can send again), under tokio's paused time: the tenant
//! comes from a header, a throttle holds that tenant off, a request
//! without a tenant is refused before anything is sent, and an in-flight
//! limit inside the layer refusing a hung tenant's calls holds off no one.

use std::future::poll_fn;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderName, Request, StatusCode};
use axum::routing::get;
use shuffle_limiter::inflight::InFlight;
use shuffle_limiter::tower::{InFlightLayer, TenantKey, UpstreamError, UpstreamLayer};
use shuffle_limiter::upstream::{Scope, Upstream};
use shuffle_limiter::{Quota, ShardedLimiter, TokioClock};
use tokio::time::Instant;
use tower::{Layer, Service};

async fn send<S>(service: &mut S, tenant: Option<&str>) -> Result<StatusCode, S::Error>
where
    S: Service<Request<String>, Response = axum::response::Response>,
{
    poll_fn(|cx| service.poll_ready(cx)).await?;
    let mut request = Request::get("/");
    if let Some(tenant) = tenant {
        request = request.header("x-tenant", tenant);
    }
    let response = service.call(request.body(String::new()).unwrap()).await?;
    Ok(response.status())
}

/// 80 calls a second over N = 8, k = 2, on tokio's clock.
fn limiter() -> Arc<ShardedLimiter<TokioClock>> {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(80).with_burst(80))
        .buckets(8)
        .per_tenant(2)
        .clock(TokioClock::new())
        .build();
    Arc::new(limiter.unwrap())
}

#[tokio::test(start_paused = true)]
async fn the_layer_holds_off_the_throttled_tenant_and_lets_others_pass() {
    let limiter = limiter();
    // The upstream throttles acme's first call for 5 s.
    let calls = Arc::new(AtomicU32::new(0));
    let seen = Arc::clone(&calls);
    let upstream = Router::new().route(
        "/",
        get(move |request: Request<axum::body::Body>| {
            let first = seen.fetch_add(1, Ordering::Relaxed) == 0;
            async move {
                let acme = request.headers()["x-tenant"] == "acme";
                if acme && first {
                    (StatusCode::TOO_MANY_REQUESTS, [("retry-after", "5")]).into_response_parts()
                } else {
                    (StatusCode::OK, [("retry-after", "0")]).into_response_parts()
                }
            }
        }),
    );
    let layer = UpstreamLayer::new(
        Upstream::new(Arc::clone(&limiter)).scope(Scope::PerTenant),
        TenantKey::header(HeaderName::from_static("x-tenant")),
    );
    let mut service = layer.layer(upstream);
    assert_eq!(
        send(&mut service, Some("acme")).await.unwrap(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let held = limiter.shard("acme");
    let other = (0..)
        .map(|t| format!("t{t}"))
        .find(|t| {
            limiter
                .shard(t.as_str())
                .buckets()
                .iter()
                .all(|&b| !held.contains(b))
        })
        .unwrap();
    let start = Instant::now();
    assert_eq!(
        send(&mut service, Some(&other)).await.unwrap(),
        StatusCode::OK
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(
        send(&mut service, Some("acme")).await.unwrap(),
        StatusCode::OK
    );
    assert!(
        start.elapsed() >= Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    // No tenant: refused, and nothing sent.
    let before = calls.load(Ordering::Relaxed);
    let missing = send(&mut service, None).await.unwrap_err();
    assert!(matches!(missing, UpstreamError::MissingTenant), "{missing}");
    assert_eq!(calls.load(Ordering::Relaxed), before);
}

/// A client stack for calls that can hang: the upstream layer (one limit
/// for all tenants, `Scope::Shared`) around an in-flight limit around the
/// client. The in-flight limit's 503 with `Retry-After` is its own, not
/// the upstream's: it must neither hold off every tenant's buckets nor
/// keep the grant.
#[tokio::test(start_paused = true)]
async fn an_inflight_limit_inside_the_layer_refusing_a_hung_tenant_holds_off_no_one() {
    let limiter = limiter();
    // Two permits a pool, no queue: a tenant holds at most 4 calls.
    let inflight = InFlight::builder()
        .concurrency(16)
        .pools(8)
        .per_tenant(2)
        .max_queue(0)
        .build()
        .unwrap();
    let hung = inflight.shard("tenant-0");
    let apart = (1..)
        .map(|t| format!("tenant-{t}"))
        .find(|t| inflight.shard(t.as_str()).overlap(&hung) == 0)
        .unwrap();
    // tenant-0's calls hang for a minute; the others answer at once.
    let client = Router::new().route(
        "/",
        get(|request: Request<axum::body::Body>| async move {
            if request.headers()["x-tenant"] == "tenant-0" {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            StatusCode::OK
        }),
    );
    let key = || TenantKey::header(HeaderName::from_static("x-tenant"));
    let inner = InFlightLayer::new(Arc::new(inflight), key()).layer(client);
    let upstream = Upstream::new(Arc::clone(&limiter)).scope(Scope::Shared);
    let service = UpstreamLayer::new(upstream, key()).layer(inner);
    // Four of tenant-0's calls hang holding its pools; the fifth is
    // refused by the in-flight limit, with 503 and Retry-After.
    for _ in 0..4 {
        let mut service = service.clone();
        tokio::spawn(async move { send(&mut service, Some("tenant-0")).await });
    }
    tokio::task::yield_now().await;
    let available = limiter.remaining("tenant-0");
    let refused = send(&mut service.clone(), Some("tenant-0")).await.unwrap();
    assert_eq!(refused, StatusCode::SERVICE_UNAVAILABLE);
    // Its grant went back, and no bucket is held off: a tenant apart is
    // served at once, and so is one on tenant-0's own buckets.
    assert_eq!(limiter.remaining("tenant-0"), available);
    let start = Instant::now();
    assert_eq!(
        send(&mut service.clone(), Some(&apart)).await.unwrap(),
        StatusCode::OK
    );
    assert!(limiter.check("tenant-0").is_ok());
    assert_eq!(start.elapsed(), Duration::ZERO);
}

trait IntoParts {
    fn into_response_parts(self) -> axum::response::Response;
}

impl<T: axum::response::IntoResponse> IntoParts for T {
    fn into_response_parts(self) -> axum::response::Response {
        self.into_response()
    }
}

#[tokio::test(start_paused = true)]
async fn the_layer_calls_the_service_it_made_ready() {
    // tower's ConcurrencyLimit takes its permit in `poll_ready` and panics
    // in a `call` without one: the service the caller made ready must be
    // the one called, not a clone of it.
    let upstream = tower::limit::ConcurrencyLimitLayer::new(1)
        .layer(Router::new().route("/", get(|| async { "ok" })));
    let key = TenantKey::header(HeaderName::from_static("x-tenant"));
    let mut service = UpstreamLayer::new(Upstream::new(limiter()), key).layer(upstream);
    for _ in 0..3 {
        assert_eq!(
            send(&mut service, Some("acme")).await.unwrap(),
            StatusCode::OK
        );
    }
}
