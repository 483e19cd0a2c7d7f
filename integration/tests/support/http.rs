//! Serving an axum app on 127.0.0.1 for the tower tests, and a client.

// Each test file uses a part of this.
#![allow(dead_code)]

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};

pub(crate) type Limiter = Arc<ShardedLimiter<ManualClock>>;

/// 100/min with a burst of 16 over 8 buckets: every bucket holds 2 tokens;
/// a tenant (k = 2) holds 4. Time moves only when the test says.
pub(crate) fn limiter() -> Limiter {
    Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_minute(100).with_burst(16))
            .buckets(8)
            .per_tenant(2)
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    )
}

/// Serves `app` on 127.0.0.1 at an ephemeral port, without connect info.
pub(crate) async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(axum::serve(listener, app).into_future());
    addr
}

/// Serves `app` with `ConnectInfo<SocketAddr>` in each request's extensions.
pub(crate) async fn serve_with_peer(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let make = app.into_make_service_with_connect_info::<SocketAddr>();
    tokio::spawn(axum::serve(listener, make).into_future());
    addr
}

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}
