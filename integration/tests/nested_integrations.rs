//! Nested checks where users make them: through the tower layer over real
//! HTTP on 127.0.0.1, and over Redis against a real `redis-server`, each
//! drawing on exactly the buckets `shard` names for the user.

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::HeaderName;
use axum::routing::get;
use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
use shuffle_limiter::store::Store;
use shuffle_limiter::tower::{RateLimitLayer, TenantKey};
use shuffle_limiter::{DenialReason, Limit, ManualClock, Quota, Request, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

/// 8 buckets of one token each and nothing refilling during a test; a
/// tenant holds 4, each of its users 2.
fn builder() -> shuffle_limiter::Builder {
    ShardedLimiter::builder()
        .quota(Quota::per_hour(8))
        .buckets(8)
        .per_tenant(4)
        .per_user(2)
}

/// Two users of `tenant` whose pairs share no bucket.
fn disjoint_users<S>(limiter: &shuffle_limiter::Limiter<S>, tenant: &str) -> (String, String) {
    let users: Vec<String> = (0..100).map(|u| format!("user-{u}")).collect();
    let first = &users[0];
    let shard = limiter.shard(Request::tenant(tenant).user(first));
    let second = users[1..]
        .iter()
        .find(|u| {
            limiter
                .shard(Request::tenant(tenant).user(*u))
                .overlap(&shard)
                == 0
        })
        .expect("one of 99 users holds the other pair");
    (first.clone(), second.clone())
}

async fn serve<S: Store + 'static>(limiter: Arc<shuffle_limiter::Limiter<S>>) -> SocketAddr {
    let layer = RateLimitLayer::new(
        limiter,
        TenantKey::header(HeaderName::from_static("x-api-key")),
    )
    .user(TenantKey::header(HeaderName::from_static("x-user")));
    let app: Router = Router::new()
        .route("/", get(|| async { "ok" }))
        .layer(layer);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(axum::serve(listener, app).into_future());
    addr
}

async fn status(addr: SocketAddr, user: Option<&str>) -> u16 {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let mut request = client
        .get(format!("http://{addr}/"))
        .header("x-api-key", "acme");
    if let Some(user) = user {
        request = request.header("x-user", user);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_keys_users_of_a_tenant_by_a_second_header() {
    let limiter = Arc::new(builder().clock(ManualClock::new()).build().unwrap());
    let (noisy, quiet) = disjoint_users(&limiter, "acme");
    let addr = serve(Arc::clone(&limiter)).await;
    // The noisy user spends its two tokens, then is refused; the quiet one,
    // on the tenant's other pair, is still served.
    for want in [200, 200, 429, 429] {
        assert_eq!(status(addr, Some(&noisy)).await, want);
    }
    assert_eq!(status(addr, Some(&quiet)).await, 200);
    // Without a user the request draws on the tenant's four buckets: one
    // token is left of them.
    assert_eq!(status(addr, None).await, 200);
    assert_eq!(status(addr, None).await, 429);
    assert_eq!(limiter.remaining("acme"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_redis_a_user_draws_on_the_same_buckets_as_in_process() {
    let server = RedisServer::start();
    let remote = builder()
        .name("nested")
        .build_redis(
            &server.url(),
            RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    let local = builder().clock(ManualClock::new()).build().unwrap();
    let (noisy, quiet) = disjoint_users(&local, "acme");
    for user in [&noisy, &quiet] {
        assert_eq!(
            remote.shard(Request::tenant("acme").user(user)),
            local.shard(Request::tenant("acme").user(user))
        );
    }
    let pair = remote.shard(Request::tenant("acme").user(&noisy));
    // Two tokens, one in each of the user's buckets, then a denial naming
    // one of them; the quiet user and the weight check see their own pair.
    for _ in 0..2 {
        let grant = remote
            .check(Request::tenant("acme").user(&noisy))
            .await
            .unwrap();
        assert!(pair.contains(grant.bucket()), "{grant:?}");
    }
    let denied = remote
        .check(Request::tenant("acme").user(&noisy))
        .await
        .unwrap_err();
    assert!(pair.contains(denied.bucket()));
    let err = remote
        .check(Request::tenant("acme").user(&quiet).tokens(3))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), DenialReason::NeverFits { asked: 3, most: 2 });
    let grant = remote
        .handle(Request::tenant("acme").user(&quiet).tokens(2))
        .check()
        .await
        .unwrap();
    assert_eq!(
        grant.payments().len(),
        2,
        "the quiet user's two buckets pay together"
    );
    assert_eq!(remote.stats().errors(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_redis_a_gold_tenant_draws_on_its_tiers_buckets() {
    let server = RedisServer::start();
    let remote = builder()
        .tier("gold", 6)
        .tenant_tier("acme", "gold")
        .name("tiers")
        .build_redis(
            &server.url(),
            RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    let gold = remote.shard("acme");
    assert_eq!(gold.buckets().len(), 6);
    // Its six buckets hold six tokens, taken at once.
    let grant = remote
        .check(Request::tenant("acme").tokens(6))
        .await
        .unwrap();
    assert_eq!(grant.payments().len(), 6);
    assert!(remote.check("acme").await.is_err());
    assert_eq!(remote.stats().errors(), 0);
}
