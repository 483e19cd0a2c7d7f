//! The in-flight layer over real HTTP on 127.0.0.1 (a hung tenant's
//! requests answered 503 once its pools and queues are full, while the
//! others are served; stacked with the rate limit layer), and through the
//! service under tokio's paused time (a bounded wait, a cancelled one).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, Request, Response, StatusCode};
use axum::routing::get;
use shuffle_limiter::inflight::{InFlight, RejectReason};
use shuffle_limiter::tower::{InFlightLayer, RateLimitLayer, Reason, Rejection, TenantKey};
use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
use tokio::sync::{mpsc, watch};
use tower::ServiceExt;

#[path = "support/http.rs"]
mod http;
use http::{client, serve};

fn x_tenant() -> TenantKey {
    TenantKey::header(HeaderName::from_static("x-tenant"))
}

/// C = 8 over N = 4 pools of 2, k = 2, queues of `max_queue`.
fn inflight(max_queue: u32) -> Arc<InFlight> {
    Arc::new(
        InFlight::builder()
            .concurrency(8)
            .pools(4)
            .per_tenant(2)
            .max_queue(max_queue)
            .build()
            .unwrap(),
    )
}

/// A tenant whose shard is `tenant-0`'s with `overlap` pools in common.
fn tenant_sharing(inflight: &InFlight, overlap: usize) -> String {
    let hung = inflight.shard("tenant-0");
    (1..1000)
        .map(|t| format!("tenant-{t}"))
        .find(|t| inflight.shard(t).overlap(&hung) == overlap)
        .expect("among 1000 tenants")
}

/// The app's handler: `tenant-0`'s requests say they started, then hang
/// until the gate opens; every other tenant's are answered at once.
#[derive(Clone)]
struct Upstream {
    gate: watch::Receiver<bool>,
    started: mpsc::UnboundedSender<()>,
}

async fn handle(State(upstream): State<Upstream>, headers: HeaderMap) -> &'static str {
    if headers.get("x-tenant").is_some_and(|t| t == "tenant-0") {
        upstream.started.send(()).unwrap();
        let mut gate = upstream.gate.clone();
        gate.wait_for(|open| *open).await.unwrap();
    }
    "done"
}

struct Reply {
    status: StatusCode,
    retry_after: Option<String>,
    ratelimit: Option<String>,
    body: String,
}

async fn get_as(url: &str, tenant: Option<&str>) -> Reply {
    let mut request = client().get(url);
    if let Some(tenant) = tenant {
        request = request.header("x-tenant", tenant);
    }
    let response = request.send().await.unwrap();
    let header = |name| (response.headers().get(name)).map(|v| v.to_str().unwrap().to_owned());
    let (retry_after, ratelimit) = (header("retry-after"), header("ratelimit"));
    Reply {
        status: response.status(),
        retry_after,
        ratelimit,
        body: response.text().await.unwrap(),
    }
}

/// Yields until `done`, at most a bounded number of times.
async fn until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..1_000_000 {
        if done() {
            return;
        }
        tokio::task::yield_now().await;
    }
    panic!("never happened: {what}");
}

/// Starts `n` requests of `tenant-0` that hang, and waits until `held`
/// of them are in the handler and the rest queue in both its pools.
async fn hang(
    url: &str,
    inflight: &Arc<InFlight>,
    started: &mut mpsc::UnboundedReceiver<()>,
    held: usize,
    queued: usize,
) -> Vec<tokio::task::JoinHandle<Reply>> {
    let calls = (0..held + queued)
        .map(|_| {
            let url = url.to_owned();
            tokio::spawn(async move { get_as(&url, Some("tenant-0")).await })
        })
        .collect();
    for _ in 0..held {
        tokio::time::timeout(Duration::from_secs(10), started.recv())
            .await
            .expect("a hung call reaches the handler");
    }
    let pools = inflight.shard("tenant-0");
    until("the rest queue in both pools", || {
        pools
            .buckets()
            .iter()
            .all(|&p| inflight.waiting(p) == queued)
    })
    .await;
    calls
}

fn app(upstream: Upstream) -> Router {
    Router::new().route("/", get(handle)).with_state(upstream)
}

#[tokio::test]
async fn a_hung_tenant_gets_503_once_its_pools_and_queues_are_full_while_others_are_served() {
    let inflight = inflight(2);
    let (open, gate) = watch::channel(false);
    let (started, mut started_rx) = mpsc::unbounded_channel();
    let layer = InFlightLayer::new(Arc::clone(&inflight), x_tenant());
    let url = format!(
        "http://{}/",
        serve(app(Upstream { gate, started }).layer(layer)).await
    );

    // Its two pools' 4 permits held by hung calls, 2 more queued in both.
    let hung = hang(&url, &inflight, &mut started_rx, 4, 2).await;
    let pools = inflight.shard("tenant-0");
    assert!(pools.buckets().iter().all(|&p| inflight.free(p) == 0));

    let full = get_as(&url, Some("tenant-0")).await;
    assert_eq!(full.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(full.retry_after.as_deref(), Some("1"));
    assert_eq!(full.body, "", "an empty body by default");
    // The tenant holding its very pools waits with it: the queues are full.
    let same = get_as(&url, Some(&tenant_sharing(&inflight, 2))).await;
    assert_eq!(same.status, StatusCode::SERVICE_UNAVAILABLE);
    // Every other tenant is served at once: one pool of its own suffices.
    for overlap in [1, 0] {
        let other = get_as(&url, Some(&tenant_sharing(&inflight, overlap))).await;
        assert_eq!(
            (other.status, other.body.as_str()),
            (StatusCode::OK, "done")
        );
    }
    assert_eq!(get_as(&url, None).await.status, StatusCode::BAD_REQUEST);

    // The hung calls end: all six are answered, the queued ones served.
    open.send(true).unwrap();
    for call in hung {
        let reply = call.await.unwrap();
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (StatusCode::OK, "done")
        );
    }
    until("every permit given back", || inflight.available() == 8).await;
    assert!((0..4).all(|p| inflight.waiting(p) == 0));
}

#[tokio::test]
async fn stacked_inside_the_rate_limit_a_request_over_its_rate_takes_no_permit() {
    // No queue: a request finding no permit is answered at once.
    let inflight = inflight(0);
    // 12 tokens per tenant (6 per bucket, k = 2), and no refill meanwhile.
    let limiter = Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_minute(100).with_burst(48))
            .buckets(8)
            .per_tenant(2)
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    );
    let (open, gate) = watch::channel(false);
    let (started, mut started_rx) = mpsc::unbounded_channel();
    let app = app(Upstream { gate, started })
        .layer(InFlightLayer::new(Arc::clone(&inflight), x_tenant()))
        .layer(RateLimitLayer::new(Arc::clone(&limiter), x_tenant()));
    let url = format!("http://{}/", serve(app).await);

    let hung = hang(&url, &inflight, &mut started_rx, 4, 0).await;
    // Within its rate but without a permit: the in-flight layer's 503,
    // with the rate limit's fields on it (the token is spent).
    for left in (0..8).rev() {
        let busy = get_as(&url, Some("tenant-0")).await;
        assert_eq!(busy.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(busy.retry_after.as_deref(), Some("1"));
        let ratelimit = busy.ratelimit.expect("the outer layer's field");
        assert!(
            ratelimit.starts_with(&format!("\"tenant\";r={left};")),
            "{ratelimit}"
        );
    }
    // Over its rate: the rate limit answers, the pools are not asked.
    let over = get_as(&url, Some("tenant-0")).await;
    assert_eq!(over.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(inflight.available(), 4, "only the hung calls hold permits");
    let other = get_as(&url, Some(&tenant_sharing(&inflight, 0))).await;
    assert_eq!(other.status, StatusCode::OK);
    assert!(other.ratelimit.is_some());

    open.send(true).unwrap();
    for call in hung {
        assert_eq!(call.await.unwrap().status, StatusCode::OK);
    }
    until("every permit given back", || inflight.available() == 8).await;
}

/// Answers the layer's refusals with their reason in the body.
fn reason_body(rejection: Rejection) -> Response<Body> {
    let body = match rejection.reason() {
        Reason::InFlightFull { reason, .. } => format!("{reason:?}"),
        other => format!("{other:?}"),
    };
    rejection.into_response(Body::from(body))
}

async fn body_of(response: Response<Body>) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 16).await;
    String::from_utf8(bytes.unwrap().to_vec()).unwrap()
}

fn request(tenant: &str) -> Request<Body> {
    Request::get("/")
        .header("x-tenant", tenant)
        .body(Body::empty())
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_wait_past_max_wait_is_503_and_a_cancelled_wait_leaves_its_queues() {
    let inflight = Arc::new(InFlight::builder().concurrency(2).pools(1).build().unwrap());
    let layer = InFlightLayer::new(Arc::clone(&inflight), x_tenant())
        .max_wait(Duration::from_millis(100))
        .retry_after(Duration::from_millis(2500))
        .respond_with(reason_body);
    let app: Router = Router::new()
        .route("/", get(|| async { "done" }))
        .layer(layer);
    let held: Vec<_> = (0..2)
        .map(|_| inflight.try_acquire_owned("t").unwrap())
        .collect();

    let start = tokio::time::Instant::now();
    let late = app.clone().oneshot(request("t")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(100));
    assert_eq!(late.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(late.headers()["retry-after"], "3", "2.5 s, rounded up");
    let timed_out = RejectReason::TimedOut {
        max_wait: Duration::from_millis(100),
    };
    assert_eq!(body_of(late).await, format!("{timed_out:?}"));
    assert_eq!(inflight.waiting(0), 0);

    // A permit freed within the wait serves it, and comes back after.
    let waiting = tokio::spawn(app.clone().oneshot(request("t")));
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(inflight.waiting(0), 1);
    let mut held = held.into_iter();
    drop(held.next());
    let served = waiting.await.unwrap().unwrap();
    assert_eq!(served.status(), StatusCode::OK);
    assert_eq!(inflight.available(), 1, "the other is still held");

    // A client that goes away while it waits leaves no trace.
    let _last = inflight.try_acquire_owned("t").unwrap();
    let gone = tokio::spawn(app.oneshot(request("t")));
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(inflight.waiting(0), 1);
    gone.abort();
    assert!(gone.await.unwrap_err().is_cancelled());
    assert_eq!(inflight.waiting(0), 0);
    drop(held);
    assert_eq!(inflight.available(), 1, "only `_last` is out");
}

/// Polls `future` once, with a waker that does nothing.
fn poll_once<F: std::future::Future>(future: std::pin::Pin<&mut F>) -> std::task::Poll<F::Output> {
    let waker = std::task::Waker::noop();
    future.poll(&mut std::task::Context::from_waker(waker))
}

/// `Acquire::within(Duration::ZERO)` waits for none: its first poll
/// refuses, and it takes no place in a queue (where it would make another
/// caller's `try_acquire` busy and catch a permit freed meanwhile), even
/// between two ticks of tokio's timer, where a sleep of zero is not yet
/// due.
#[tokio::test(start_paused = true)]
async fn within_zero_answers_on_its_first_poll_and_queues_nowhere() {
    tokio::time::advance(Duration::from_micros(500)).await;
    let inflight = InFlight::builder().concurrency(1).build().unwrap();
    let held = inflight.try_acquire("t").unwrap();
    let mut acquire = std::pin::pin!(inflight.acquire("t").within(Duration::ZERO));
    let first = poll_once(acquire.as_mut());
    let queued = inflight.waiting(0);
    drop(held);
    let other = inflight.try_acquire("t");
    let max_wait = Duration::ZERO;
    assert!(
        matches!(&first, std::task::Poll::Ready(Err(e)) if e.reason() == RejectReason::TimedOut { max_wait }),
        "the first poll of within(0): {first:?}"
    );
    assert_eq!(queued, 0, "a zero wait took a place in the queue");
    assert!(other.is_ok(), "{other:?}");
}

/// The layer's `max_wait(Duration::ZERO)` "waits for none": a request
/// that finds its tenant's pools full is answered 503 on the first poll,
/// not queued until the timer's next tick and served by a permit freed
/// meanwhile.
#[tokio::test(start_paused = true)]
async fn a_layer_max_wait_of_zero_is_503_on_the_first_poll() {
    tokio::time::advance(Duration::from_micros(500)).await;
    let inflight = Arc::new(InFlight::builder().concurrency(1).build().unwrap());
    let handler = tower::service_fn(|_: Request<Body>| async {
        Ok::<_, std::convert::Infallible>(Response::new(Body::empty()))
    });
    let service = tower::Layer::layer(
        &InFlightLayer::new(Arc::clone(&inflight), x_tenant()).max_wait(Duration::ZERO),
        handler,
    );
    let held = inflight.try_acquire_owned("t").unwrap();
    let mut answer = Box::pin(service.oneshot(request("t")));
    let first = poll_once(answer.as_mut());
    let queued = inflight.waiting(0);
    drop(held);
    let (first, response) = match first {
        std::task::Poll::Ready(response) => (true, response),
        std::task::Poll::Pending => (false, answer.await),
    };
    let status = response.unwrap().status();
    assert_eq!(
        (first, queued, status),
        (true, 0, StatusCode::SERVICE_UNAVAILABLE),
        "(answered on the first poll, waiters queued, status)"
    );
}
