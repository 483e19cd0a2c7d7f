//! The tower layer over real HTTP on 127.0.0.1: an axum server on an
//! ephemeral port, a reqwest client, and a ManualClock so that time moves
//! only when the test says.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Extension, Request};
use axum::http::{HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use shuffle_limiter::tower::{Granted, MissingTenant, RateLimitLayer, TenantKey};
use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};

type Limiter = Arc<ShardedLimiter<ManualClock>>;

/// 100/min with a burst of 16 over 8 buckets: every bucket holds 2 tokens
/// and gains one every 4.8 s; a tenant (k = 2) holds 4.
fn limiter(clock: &ManualClock) -> Limiter {
    Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_minute(100).with_burst(16))
            .buckets(8)
            .per_tenant(2)
            .clock(clock.clone())
            .build()
            .unwrap(),
    )
}

fn x_tenant() -> TenantKey {
    TenantKey::header(HeaderName::from_static("x-tenant-id"))
}

/// The bucket that paid, as the handler sees it in the request extensions.
async fn paid_by(Extension(granted): Extension<Granted>) -> String {
    granted.grant().bucket().to_string()
}

/// Serves `app` on 127.0.0.1 at an ephemeral port until the test ends.
async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(axum::serve(listener, app).into_future());
    addr
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

struct Reply {
    status: StatusCode,
    retry_after: Option<String>,
    limit: Option<String>,
    policy: Option<String>,
    body: String,
}

async fn get_as(client: &reqwest::Client, url: &str, tenant: Option<&str>) -> Reply {
    let mut request = client.get(url);
    if let Some(tenant) = tenant {
        request = request.header("x-tenant-id", tenant);
    }
    let response = request.send().await.unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    Reply {
        status: response.status(),
        retry_after: header("retry-after"),
        limit: header("ratelimit"),
        policy: header("ratelimit-policy"),
        body: String::new(),
    }
    .with_body(response)
    .await
}

impl Reply {
    async fn with_body(mut self, response: reqwest::Response) -> Self {
        self.body = response.text().await.unwrap();
        self
    }
}

/// Two tenants whose shards share no bucket.
fn disjoint_tenants(limiter: &ShardedLimiter<ManualClock>) -> (String, String) {
    let a = "tenant-a".to_owned();
    let b = (0..1000)
        .map(|i| format!("tenant-b{i}"))
        .find(|b| limiter.shard(b).overlap(&limiter.shard(&a)) == 0)
        .expect("some tenant among 1000 avoids both of a's buckets");
    (a, b)
}

fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

#[tokio::test]
async fn a_tenant_gets_its_share_then_429_with_the_standard_fields_while_another_is_served() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let (a, b) = disjoint_tenants(&limiter);
    let app = Router::new()
        .route("/", get(paid_by))
        .layer(RateLimitLayer::new(Arc::clone(&limiter), x_tenant()));
    let url = format!("http://{}/", serve(app).await);
    let client = client();

    // Tenant a's share: 2 buckets of 2 tokens, spent with no time passing.
    let share = limiter.remaining(&a);
    assert_eq!(share, 4);
    let policy = "\"tenant\";q=4;w=10"; // 4 tokens, refilled from empty in 9.6 s
    for left in (0..share).rev() {
        let reply = get_as(&client, &url, Some(&a)).await;
        assert_eq!(reply.status, StatusCode::OK);
        let bucket: u32 = reply.body.parse().unwrap();
        assert!(limiter.shard(&a).contains(bucket), "paid by a's own bucket");
        assert_eq!(reply.retry_after, None);
        assert_eq!(reply.policy.as_deref(), Some(policy));
        let reset = ceil_secs(limiter.full_in(&a));
        assert_eq!(
            reply.limit.unwrap(),
            format!("\"tenant\";r={left};t={reset}")
        );
    }
    assert_eq!(ceil_secs(limiter.full_in(&a)), 10);

    // Spent: 429, Retry-After rounded up from 4.8 s, and the same t.
    let denied = get_as(&client, &url, Some(&a)).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(denied.retry_after.as_deref(), Some("5"));
    assert_eq!(denied.limit.as_deref(), Some("\"tenant\";r=0;t=5"));
    assert_eq!(denied.policy.as_deref(), Some(policy));
    assert_eq!(denied.body, "");

    // Tenant b shares no bucket with a: its whole share is still there.
    assert_eq!(limiter.remaining(&b), 4);
    for _ in 0..4 {
        let reply = get_as(&client, &url, Some(&b)).await;
        assert_eq!(reply.status, StatusCode::OK);
    }
    assert_eq!(
        get_as(&client, &url, Some(&b)).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );

    // 4.5 s later a's next token is 0.3 s away: Retry-After rounds up to 1,
    // never down to 0.
    clock.advance(Duration::from_millis(4500));
    let denied = get_as(&client, &url, Some(&a)).await;
    assert_eq!(denied.retry_after.as_deref(), Some("1"));
    assert_eq!(denied.limit.as_deref(), Some("\"tenant\";r=0;t=1"));
    // ... and once it is due, a is served again.
    clock.advance(Duration::from_millis(300));
    assert_eq!(get_as(&client, &url, Some(&a)).await.status, StatusCode::OK);
}

#[tokio::test]
async fn requests_without_a_tenant_get_the_configured_answer() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let layer = RateLimitLayer::new(Arc::clone(&limiter), x_tenant());
    let routes = || Router::new().route("/", get(|| async { "ok" }));

    // The default: 400, and nothing taken from anyone.
    let url = format!("http://{}/", serve(routes().layer(layer.clone())).await);
    let client = client();
    let reply = get_as(&client, &url, None).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert_eq!((reply.limit, reply.retry_after), (None, None));
    // An empty header is no tenant either.
    assert_eq!(
        get_as(&client, &url, Some("")).await.status,
        StatusCode::BAD_REQUEST
    );
    // Nor is a header sent twice: a client's own in front of the one a
    // gateway adds must not choose the tenant.
    let twice = client
        .get(&url)
        .header("x-tenant-id", "victim")
        .header("x-tenant-id", "acme")
        .send()
        .await
        .unwrap();
    assert_eq!(twice.status(), StatusCode::BAD_REQUEST);
    assert_eq!(limiter.remaining("victim"), limiter.remaining("acme"));

    // 401 with the challenge a 401 must carry.
    let challenge = HeaderValue::from_static("Bearer realm=\"api\"");
    let unauthorized = layer
        .clone()
        .on_missing_tenant(MissingTenant::unauthorized(challenge));
    let url = format!("http://{}/", serve(routes().layer(unauthorized)).await);
    let response = client.get(&url).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(
        response.headers()["www-authenticate"],
        "Bearer realm=\"api\""
    );

    // A shared fallback tenant: served from its share, then limited, like
    // any tenant; named tenants are not affected.
    let fallback = layer.on_missing_tenant(MissingTenant::fallback("anonymous"));
    let url = format!("http://{}/", serve(routes().layer(fallback)).await);
    let share = limiter.remaining("anonymous");
    for _ in 0..share {
        assert_eq!(get_as(&client, &url, None).await.status, StatusCode::OK);
    }
    assert_eq!(limiter.remaining("anonymous"), 0);
    let denied = get_as(&client, &url, None).await;
    assert_eq!(denied.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(denied.retry_after.is_some());
}

/// What an authentication layer would leave in the request extensions.
#[derive(Clone)]
struct TenantId(String);

impl AsRef<[u8]> for TenantId {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

async fn fake_auth(mut request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    if let Some(token) = token {
        request.extensions_mut().insert(TenantId(token));
    }
    next.run(request).await
}

#[tokio::test]
async fn the_tenant_can_come_from_an_auth_extension_or_any_function() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let client = client();

    let by_auth = RateLimitLayer::new(Arc::clone(&limiter), TenantKey::extension::<TenantId>());
    let app = Router::new()
        .route("/", get(paid_by))
        .layer(by_auth)
        .layer(middleware::from_fn(fake_auth)); // outermost: runs first
    let url = format!("http://{}/", serve(app).await);
    let reply = client
        .get(&url)
        .header("authorization", "Bearer acme")
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), StatusCode::OK);
    let bucket: u32 = reply.text().await.unwrap().parse().unwrap();
    assert!(limiter.shard("acme").contains(bucket));
    assert_eq!(limiter.remaining("acme"), 3);
    let anonymous = client.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), StatusCode::BAD_REQUEST);

    let by_path = TenantKey::from_fn(|parts: &axum::http::request::Parts| {
        let first = parts.uri.path().trim_start_matches('/').split('/').next()?;
        (!first.is_empty()).then(|| first.to_owned())
    });
    let app = Router::new()
        .route("/{tenant}/orders", get(|| async { "orders" }))
        .layer(RateLimitLayer::new(Arc::clone(&limiter), by_path));
    let base = format!("http://{}", serve(app).await);
    // globex may share a bucket with acme, who spent a token above.
    let share = limiter.remaining("globex");
    assert!(share >= 3);
    let orders = || async {
        let response = client.get(format!("{base}/globex/orders")).send().await;
        response.unwrap().status()
    };
    for _ in 0..share {
        assert_eq!(orders().await, StatusCode::OK);
    }
    assert_eq!(limiter.remaining("globex"), 0);
    assert_eq!(orders().await, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn the_policy_name_is_configurable_and_checked() {
    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let layer = RateLimitLayer::new(Arc::clone(&limiter), x_tenant())
        .policy("per \"tenant\"")
        .unwrap();
    let app = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let url = format!("http://{}/", serve(app).await);
    let reply = get_as(&client(), &url, Some("t")).await;
    assert_eq!(
        reply.policy.as_deref(),
        Some(r#""per \"tenant\"";q=4;w=10"#)
    );
    assert!(
        reply
            .limit
            .unwrap()
            .starts_with(r#""per \"tenant\"";r=3;t="#)
    );

    let err = RateLimitLayer::new(limiter, x_tenant())
        .policy("pér-tenant")
        .unwrap_err();
    assert!(err.to_string().contains("use printable ASCII"), "{err}");
}

#[tokio::test]
async fn clones_of_the_service_share_one_limiter() {
    use tower::{Layer, Service};

    let clock = ManualClock::new();
    let limiter = limiter(&clock);
    let layer = RateLimitLayer::new(Arc::clone(&limiter), x_tenant());
    let mut one = layer.layer(Hello);
    let mut two = one.clone();
    let request = || {
        axum::http::Request::get("/")
            .header("x-tenant-id", "t")
            .body(())
            .unwrap()
    };
    let mut statuses = Vec::new();
    for i in 0..6 {
        let service = if i % 2 == 0 { &mut one } else { &mut two };
        std::future::poll_fn(|cx| service.poll_ready(cx))
            .await
            .unwrap();
        statuses.push(service.call(request()).await.unwrap().status());
    }
    let ok = statuses.iter().filter(|s| **s == StatusCode::OK).count();
    assert_eq!(ok, 4, "{statuses:?}");
    assert_eq!(statuses[4], StatusCode::TOO_MANY_REQUESTS);
}

/// The smallest inner service: always ready, answers 200.
#[derive(Clone)]
struct Hello;

impl tower::Service<axum::http::Request<()>> for Hello {
    type Response = axum::http::Response<String>;
    type Error = std::convert::Infallible;
    type Future = std::future::Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: axum::http::Request<()>) -> Self::Future {
        std::future::ready(Ok(axum::http::Response::new("hello".to_owned())))
    }
}
