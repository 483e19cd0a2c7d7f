//! The layers' response futures. Both layers promise that `poll_ready`
//! only forwards to the inner service, so that a tenant who waits never holds up another's request:
//! behind them an inner service whose readiness is a reservation (tower's
//! `ConcurrencyLimit`, as `Buffer`), a request that waits (for its
//! tenant's in-flight pools, for Redis) must not keep a reserved slot of
//! it for the whole wait. And a response future polled again after its
//! answer says so, rather than poll the inner service's future again.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, Request, Response, StatusCode};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use shuffle_limiter::inflight::InFlight;
use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
use shuffle_limiter::tower::{InFlightLayer, RateLimitLayer, TenantKey};
use shuffle_limiter::{Quota, ShardedLimiter};
use tokio::time::timeout;
use tower::limit::ConcurrencyLimitLayer;
use tower::{Layer, Service, ServiceExt};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

fn x_tenant() -> TenantKey {
    TenantKey::header(HeaderName::from_static("x-tenant"))
}

fn request(tenant: &str) -> Request<Body> {
    Request::get("/")
        .header("x-tenant", tenant)
        .body(Body::empty())
        .unwrap()
}

/// The in-flight layer over 4 pools of 2 permits (k = 2), in front of a
/// handler that never answers tenant-0 and a backstop of 6 calls: tenant-0
/// fills its two pools (4 of the 6) and queues `queued` more; another
/// tenant, on the two pools tenant-0 does not touch, is then served.
async fn hung_tenant_queueing(queued: usize) {
    let inflight = Arc::new(
        InFlight::builder()
            .concurrency(8)
            .pools(4)
            .per_tenant(2)
            .build()
            .unwrap(),
    );
    let hung = inflight.shard("tenant-0");
    let other = (1..1000)
        .map(|t| format!("tenant-{t}"))
        .find(|t| inflight.shard(t).overlap(&hung) == 0)
        .unwrap();
    let handler = tower::service_fn(|request: Request<Body>| async move {
        if request.headers()["x-tenant"] == "tenant-0" {
            std::future::pending::<()>().await;
        }
        Ok::<_, Infallible>(Response::new(Body::empty()))
    });
    let inner = ConcurrencyLimitLayer::new(6).layer(handler);
    let mut service = InFlightLayer::new(Arc::clone(&inflight), x_tenant()).layer(inner);
    let mut calls = Vec::new();
    for _ in 0..4 + queued {
        let call = service.ready().await.unwrap().call(request("tenant-0"));
        calls.push(tokio::spawn(call));
    }
    tokio::task::yield_now().await;
    assert_eq!(inflight.available(), 4, "tenant-0 holds its 4 permits");
    for &pool in hung.buckets() {
        assert_eq!(inflight.waiting(pool), queued, "pool {pool}");
    }
    let served = timeout(Duration::from_secs(5), async {
        let call = service.ready().await.unwrap().call(request(&other));
        call.await.unwrap().status()
    })
    .await;
    assert_eq!(
        served.ok(),
        Some(StatusCode::OK),
        "{other}, whose pools are free, held up in poll_ready by tenant-0's {queued} queued requests"
    );
    calls.iter().for_each(|call| call.abort());
}

#[tokio::test(start_paused = true)]
async fn in_flight_a_hung_tenants_queued_requests_hold_no_slot_of_the_inner_service() {
    hung_tenant_queueing(2).await;
}

/// The scene without queued requests: the other tenant is served, so the
/// test above fails for the queued requests alone.
#[tokio::test(start_paused = true)]
async fn in_flight_without_queued_requests_the_other_tenant_is_served() {
    hung_tenant_queueing(0).await;
}

/// A connection that, while stalled, never answers.
#[derive(Clone)]
struct Stalling {
    inner: MultiplexedConnection,
    stalled: Arc<AtomicBool>,
}

impl Stalling {
    async fn unless_stalled(&self) {
        if self.stalled.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }
}

impl ConnectionLike for Stalling {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            self.unless_stalled().await;
            self.inner.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.unless_stalled().await;
            self.inner
                .req_packed_commands(pipeline, offset, count)
                .await
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// The rate layer over Redis, in front of one call at a time: a decision
/// still out to Redis (here, a server that does not answer within the
/// minute's deadline) must not keep the inner service's only slot, which
/// the next request, decided once Redis answers again, needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_a_decision_out_to_redis_holds_no_slot_of_the_inner_service() {
    let server = RedisServer::start();
    let stalled = Arc::new(AtomicBool::new(false));
    let connection = Stalling {
        inner: server.connection().await,
        stalled: Arc::clone(&stalled),
    };
    let options = RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(60));
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(100))
        .buckets(4)
        .per_tenant(2)
        .name("readiness")
        .build_redis_with(connection, options)
        .await
        .unwrap();
    let handler = tower::service_fn(|_: Request<Body>| async {
        Ok::<_, Infallible>(Response::new(Body::empty()))
    });
    let inner = ConcurrencyLimitLayer::new(1).layer(handler);
    let mut service = RateLimitLayer::new(Arc::new(limiter), x_tenant()).layer(inner);

    stalled.store(true, Ordering::SeqCst);
    let mut out = Box::pin(service.ready().await.unwrap().call(request("tenant-0")));
    assert!(
        timeout(Duration::from_millis(50), out.as_mut())
            .await
            .is_err(),
        "decided without Redis"
    );
    stalled.store(false, Ordering::SeqCst);
    let served = timeout(Duration::from_secs(5), async {
        let call = service.ready().await.unwrap().call(request("tenant-1"));
        call.await.unwrap().status()
    })
    .await;
    assert_eq!(
        served.ok(),
        Some(StatusCode::OK),
        "held up in poll_ready by a decision out to Redis"
    );
}

fn answered() -> impl Service<
    Request<Body>,
    Response = Response<Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Body>, Infallible>> + Send,
> + Clone {
    tower::service_fn(|_: Request<Body>| async {
        Ok::<_, Infallible>(Response::new(Body::empty()))
    })
}

fn poll_again<F: Future>(future: Pin<&mut F>) -> Poll<F::Output> {
    future.poll(&mut Context::from_waker(Waker::noop()))
}

#[tokio::test]
#[should_panic(expected = "InFlightFuture polled after it completed")]
async fn in_flight_a_future_polled_after_its_answer_panics_with_a_reason() {
    let inflight = Arc::new(InFlight::builder().concurrency(1).build().unwrap());
    let mut service = InFlightLayer::new(inflight, x_tenant()).layer(answered());
    let mut call = Box::pin(service.ready().await.unwrap().call(request("t")));
    assert_eq!(call.as_mut().await.unwrap().status(), StatusCode::OK);
    let _ = poll_again(call.as_mut());
}

#[tokio::test]
#[should_panic(expected = "ResponseFuture polled after it completed")]
async fn rate_a_future_polled_after_its_answer_panics_with_a_reason() {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(10))
        .build()
        .unwrap();
    let mut service = RateLimitLayer::new(Arc::new(limiter), x_tenant()).layer(answered());
    let mut call = Box::pin(service.ready().await.unwrap().call(request("t")));
    assert_eq!(call.as_mut().await.unwrap().status(), StatusCode::OK);
    let _ = poll_again(call.as_mut());
}

/// The client side's `UpstreamLayer` too: a call waiting for its tenant's
/// grant must not hold a slot of the client service below (here one call
/// at a time), which another tenant's call, granted at once, needs.
#[tokio::test(start_paused = true)]
async fn upstream_a_call_waiting_for_its_grant_holds_no_slot_of_the_client() {
    use shuffle_limiter::TokioClock;
    use shuffle_limiter::tower::UpstreamLayer;
    use shuffle_limiter::upstream::Upstream;

    // 8 tokens a second over 4 buckets of 2, k = 1: a tenant's bucket
    // holds 2 and refills one every half second.
    let limiter = Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(8).with_burst(8))
            .buckets(4)
            .per_tenant(1)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    );
    let waiting = "tenant-0";
    let other = (1..)
        .map(|t| format!("tenant-{t}"))
        .find(|t| limiter.shard(t.as_str()).overlap(&limiter.shard(waiting)) == 0)
        .unwrap();
    assert!(limiter.check(waiting).is_ok() && limiter.check(waiting).is_ok());
    // A body a retry can send again.
    let send = |tenant: &str| {
        let request = Request::get("/").header("x-tenant", tenant);
        request.body(String::new()).unwrap()
    };
    let client =
        ConcurrencyLimitLayer::new(1).layer(tower::service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(Body::empty()))
        }));
    let mut service =
        UpstreamLayer::new(Upstream::new(Arc::clone(&limiter)), x_tenant()).layer(client);
    // tenant-0's call waits half a second for its token.
    let start = tokio::time::Instant::now();
    let mut out = Box::pin(service.ready().await.unwrap().call(send(waiting)));
    assert!(
        poll_again(out.as_mut()).is_pending(),
        "granted without a wait"
    );
    // The other tenant's call goes at once (bounded: held up, it would
    // wait for a call nobody polls here).
    let other_call = timeout(Duration::from_secs(5), async {
        let call = service.ready().await.unwrap().call(send(&other));
        call.await.unwrap().status()
    });
    assert_eq!(
        other_call.await.ok(),
        Some(StatusCode::OK),
        "held up behind a call waiting for its grant"
    );
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(out.await.unwrap().status(), StatusCode::OK);
    assert_eq!(start.elapsed(), Duration::from_millis(500));
}
