//! What the tests of borrowing beside waits and hold-offs share: one
//! limiter in each store (in process, over Redis, over Redis with batched
//! decisions), and checks sent at once.

use std::sync::Arc;
use std::time::Duration;

use shuffle_limiter::redis::{FailurePolicy, RedisLimiter, RedisOptions};
use shuffle_limiter::store::Store;
use shuffle_limiter::{Builder, Limit, Limiter, ManualClock, Request, ShardedLimiter};

/// Fail closed, with a deadline a busy host meets.
pub(crate) fn options() -> RedisOptions {
    RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(2))
}

/// Decisions sent in batches (`draw_batch.lua`).
pub(crate) fn batched() -> RedisOptions {
    options().batch(16, Duration::from_micros(200))
}

/// One limiter in each store, as `build` makes it (named `name` and a
/// suffix): in process on `clock`, over Redis at `url`, and over Redis
/// with batched decisions.
pub(crate) struct Stores {
    pub(crate) local: Arc<ShardedLimiter<ManualClock>>,
    pub(crate) redis: Arc<RedisLimiter>,
    pub(crate) batched: Arc<RedisLimiter>,
}

impl Stores {
    pub(crate) async fn new(
        build: impl Fn(&str) -> Builder,
        name: &str,
        clock: ManualClock,
        url: &str,
    ) -> Stores {
        let local = build(&format!("{name}-local"))
            .clock(clock)
            .build()
            .unwrap();
        let redis = build(&format!("{name}-redis")).build_redis(url, options());
        let batched = build(&format!("{name}-batched")).build_redis(url, batched());
        Stores {
            local: Arc::new(local),
            redis: Arc::new(redis.await.unwrap()),
            batched: Arc::new(batched.await.unwrap()),
        }
    }
}

/// Who asks: a tenant, and a user of it.
pub(crate) type Who = (&'static str, Option<&'static str>);

pub(crate) fn request((tenant, user): Who) -> Request<'static> {
    let request = Request::tenant(tenant);
    match user {
        Some(user) => request.user(user),
        None => request,
    }
}

/// 20 checks of `who` at once (in a batch, where the store batches):
/// how many were granted, and how many of those borrowed.
pub(crate) async fn at_once<S>(limiter: &Arc<Limiter<S>>, who: Who) -> (u32, u32)
where
    S: Store + Send + Sync + 'static,
{
    let mut checks = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let limiter = Arc::clone(limiter);
        checks.spawn(async move { limiter.check(request(who)).await.ok().map(|g| g.borrowed()) });
    }
    let (mut granted, mut borrowed) = (0, 0);
    while let Some(check) = checks.join_next().await {
        if let Some(lent) = check.unwrap() {
            granted += 1;
            borrowed += u32::from(lent);
        }
    }
    (granted, borrowed)
}
