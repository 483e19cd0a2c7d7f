//! A rule's limiter, in process or over Redis, behind one face.

use std::time::Duration;

use shuffle_limiter::redis::RedisLimiter;
use shuffle_limiter::{Denied, Grant, Limit, Limiter, Quota, Request, Shard, ShardedLimiter};

/// Where the buckets live.
pub(crate) enum Engine {
    Local(ShardedLimiter),
    Redis(RedisLimiter),
}

impl Engine {
    pub(crate) async fn check(&self, request: Request<'_>) -> Result<Grant, Denied> {
        match self {
            Engine::Local(l) => l.check(request),
            Engine::Redis(l) => Limit::check(l, request).await,
        }
    }

    /// Gives back a grant of a request that another descriptor denied.
    pub(crate) async fn refund(&self, grant: Grant) {
        match self {
            Engine::Local(l) => {
                l.refund(grant);
            }
            Engine::Redis(l) => {
                // A refund that fails leaves the tokens spent: never more.
                let _ = Limit::refund(l, grant).await;
            }
        }
    }

    pub(crate) fn shard(&self, request: Request<'_>) -> Shard {
        match self {
            Engine::Local(l) => l.shard(request),
            Engine::Redis(l) => l.shard(request),
        }
    }

    /// What the tenant's own buckets hold when full, and the seconds they
    /// take to refill from empty (`q` and `w` of `RateLimit-Policy`).
    pub(crate) fn share(&self, shard: &Shard) -> (u64, u64) {
        match self {
            Engine::Local(l) => share_of(l, shard),
            Engine::Redis(l) => share_of(l, shard),
        }
    }

    pub(crate) fn quota_and_buckets(&self) -> (Quota, u32, u32) {
        match self {
            Engine::Local(l) => (l.quota(), l.buckets(), l.max_buckets()),
            Engine::Redis(l) => (l.quota(), l.buckets(), l.max_buckets()),
        }
    }

    pub(crate) async fn change(&self, quota: Quota, buckets: u32) -> Result<(), String> {
        match self {
            Engine::Local(l) => l
                .set_quota_and_buckets(quota, buckets)
                .map_err(|e| e.to_string()),
            Engine::Redis(l) => Limit::set_quota_and_buckets(l, quota, buckets)
                .await
                .map_err(|e| e.to_string()),
        }
    }
}

/// [`Engine::share`] for either store, without allocating (it runs on
/// every decision).
fn share_of<S>(limiter: &Limiter<S>, shard: &Shard) -> (u64, u64) {
    let bursts = || (shard.buckets().iter()).filter_map(|&b| limiter.bucket_burst(b));
    let quota = bursts().map(u64::from).sum();
    let refill = (limiter.bucket_interval()).saturating_mul(bursts().max().unwrap_or(1));
    (quota, ceil_secs(refill).max(1))
}

/// Whole seconds, rounded up.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}
