//! A call answered while the limiter's store fails: `Upstream::call` and
//! the tower client layer keep the upstream's answer (a payment made, an
//! order placed) and say what the store failed to take in, against a real
//! `redis-server` stopped by `SIGSTOP` while the call is out.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{self, Response, StatusCode};
use shuffle_limiter::redis::{FailurePolicy, RedisLimiter, RedisOptions};
use shuffle_limiter::upstream::{CallError, Unheard, Upstream};
use shuffle_limiter::{Quota, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

async fn limiter(server: &RedisServer) -> Arc<RedisLimiter> {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(100))
        .name("unheard")
        .build_redis(
            &server.url(),
            RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_millis(200)),
        )
        .await
        .unwrap();
    Arc::new(limiter)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Resumes the server however the test ends.
struct Resume<'a>(&'a RedisServer);

impl Drop for Resume<'_> {
    fn drop(&mut self) {
        self.0.signal("-CONT");
    }
}

/// The call is sent and throttled (429, retry in 5 s); the hold-off then
/// finds Redis stopped. The answer used to be dropped with the store's
/// error: it is handed back with it.
#[test]
fn a_call_answered_while_the_store_fails_keeps_its_answer() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let upstream = Upstream::new(limiter(&server).await);
        let _resume = Resume(&server);
        let called = upstream
            .call("acme", |_| {
                server.signal("-STOP");
                let answer = Response::builder()
                    .status(StatusCode::TOO_MANY_REQUESTS)
                    .header("retry-after", "5")
                    .body(())
                    .unwrap();
                std::future::ready(answer)
            })
            .await;
        match called {
            Err(CallError::Store { answer, error }) => {
                assert_eq!(answer.status(), StatusCode::TOO_MANY_REQUESTS, "{error}");
            }
            other => panic!("{other:?}"),
        }
    });
}

/// The same through the tower client layer: the upstream's response comes
/// back, carrying the store's error as `Unheard`.
#[test]
fn the_client_layer_hands_back_the_response_with_what_went_unheard() {
    use tower::{Layer, Service, ServiceExt};

    let server = Arc::new(RedisServer::start());
    runtime().block_on(async {
        let upstream = Upstream::new(limiter(&server).await);
        let _resume = Resume(&server);
        let stop = Arc::clone(&server);
        let inner = tower::service_fn(move |_: http::Request<String>| {
            stop.signal("-STOP");
            let answer = Response::builder()
                .status(StatusCode::TOO_MANY_REQUESTS)
                .header("retry-after", "5")
                .body(String::new())
                .unwrap();
            std::future::ready(Ok::<_, std::convert::Infallible>(answer))
        });
        let key =
            shuffle_limiter::tower::TenantKey::header(http::HeaderName::from_static("x-tenant"));
        let mut service = shuffle_limiter::tower::UpstreamLayer::new(upstream, key).layer(inner);
        let request = http::Request::builder()
            .header("x-tenant", "acme")
            .body(String::new())
            .unwrap();
        let response = service.ready().await.unwrap().call(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        let unheard = response.extensions().get::<Unheard>();
        assert!(unheard.is_some(), "the store's failure is on the response");
    });
}
