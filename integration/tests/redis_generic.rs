//! One function generic over the store, run against both: the in-process
//! limiter and a Redis limiter on a real `redis-server` (127.0.0.1) answer
//! every step alike (the same grants, refunds, quota changes and reads).

use std::time::Duration;

use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
use shuffle_limiter::store::Store;
use shuffle_limiter::upstream::HoldOff;
use shuffle_limiter::{
    Builder, DenialReason, Limit, Limiter, ManualClock, Quota, Request, ShardedLimiter,
};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

/// What the walk saw at each step, to compare across stores.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    granted: Vec<u32>,
    never_fits: DenialReason,
    after_refund: u64,
    refunded: (u32, u32),
    after_cut: u64,
    bursts: Vec<u32>,
    user_granted: u32,
    after_hold_off: (u64, u64),
    settled: (u32, u32, u64, u32, u64),
}

/// Takes and gives back through `Limit` alone, as generic code would.
async fn walk<S: Store>(limiter: &Limiter<S>) -> Seen {
    let tenant = "tenant-42";
    // Its 2 buckets hold 4 each: a batch of 3 fits one bucket, 6 takes both.
    let mut granted = Vec::new();
    for tokens in [3, 6, 1] {
        let request = Request::tenant(tenant).tokens(tokens);
        granted.push(limiter.check(request).await.map_or(0, |g| g.tokens()));
    }
    let denied = limiter.check(Request::tenant(tenant).tokens(9)).await;
    let never_fits = denied.unwrap_err().reason();
    // Give back part of a batch that used less than its worst case.
    // On buckets apart from the first tenant's, so that which of its
    // buckets a tie sent the first batch to does not matter.
    let apart = |t: &String| {
        limiter
            .shard(t)
            .buckets()
            .iter()
            .all(|&b| !limiter.shard(tenant).contains(b))
    };
    let other = (0..).map(|i| format!("t{i}")).find(apart).unwrap();
    let mut worst = limiter
        .check(Request::tenant(&other).tokens(5))
        .await
        .unwrap();
    let refunded = limiter.refund(worst.part(4).unwrap()).await.unwrap();
    let after_refund = limiter.remaining(&other).await.unwrap();
    // Halve the quota: every bucket keeps its share of its (now halved) burst.
    limiter
        .set_quota(Quota::new(8, Duration::from_secs(3600)).with_burst(16))
        .await
        .unwrap();
    let after_cut = limiter.remaining(&other).await.unwrap();
    let snapshot = limiter.snapshot().await.unwrap();
    let bursts = snapshot.iter().map(|b| b.burst()).collect();
    let user = Request::tenant("t3").user("alice");
    let user_granted = limiter.check(user).await.map_or(0, |g| g.tokens());
    // Admitted at an estimate, settled at the real cost: less, then more.
    let estimate = limiter
        .check(Request::tenant(&other).tokens(2))
        .await
        .unwrap();
    let less = limiter.settle(estimate, 1).await.unwrap();
    let after_less = limiter.remaining(&other).await.unwrap();
    let estimate = limiter
        .check(Request::tenant(&other).tokens(1))
        .await
        .unwrap();
    let more = limiter.settle(estimate, 3).await.unwrap();
    let after_more = limiter.remaining(&other).await.unwrap();
    let settled = (
        less.refunded().given(),
        more.charged(),
        after_less,
        more.forgiven(),
        after_more,
    );
    // The upstream throttles `other`'s account: its buckets stop, the
    // first tenant's (apart from them) keep what they hold.
    let before = limiter.remaining(tenant).await.unwrap();
    let hold = HoldOff::tenant(&other, Duration::from_secs(600));
    limiter.hold_off(hold).await.unwrap();
    let held = limiter.remaining(&other).await.unwrap();
    assert_eq!(limiter.remaining(tenant).await.unwrap(), before);
    Seen {
        granted,
        never_fits,
        after_refund,
        refunded: (refunded.given(), refunded.gone()),
        after_cut,
        bursts,
        user_granted,
        after_hold_off: (held, before),
        settled,
    }
}

/// 8 buckets of 4 tokens, one token an hour each: nothing refills during
/// the test, in process or in Redis.
fn builder() -> Builder {
    ShardedLimiter::builder()
        .quota(Quota::new(8, Duration::from_secs(3600)).with_burst(32))
        .buckets(8)
        .per_tenant(2)
        .per_user(1)
        .salt("generic")
        .name("generic")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_generic_function_sees_the_same_over_both_stores() {
    let local = builder().clock(ManualClock::new()).build().unwrap();
    let server = RedisServer::start();
    let options = RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(2));
    let redis = builder().build_redis(&server.url(), options).await.unwrap();
    let in_process = walk(&local).await;
    let over_redis = walk(&redis).await;
    assert_eq!(in_process, over_redis);
    // And what both saw is what the budget says.
    assert_eq!(in_process.granted, [3, 0, 1]);
    assert_eq!(
        in_process.never_fits,
        DenialReason::NeverFits { asked: 9, most: 8 }
    );
    assert_eq!(in_process.refunded, (4, 0));
    assert_eq!(in_process.after_refund, 7);
    // 4 of 4 and 3 of 4 keep their shares of 2: 2 and 1 (rounded down).
    assert_eq!(in_process.after_cut, 3);
    assert_eq!(in_process.bursts, [2; 8]);
    assert_eq!(in_process.user_granted, 1);
    assert_eq!(in_process.after_hold_off.0, 0);
    assert_eq!(in_process.settled, (1, 2, 1, 0, 0));
    // A handle reads what the limiter reads, in either store.
    let (local_handle, redis_handle) = (local.handle("tenant-42"), redis.handle("tenant-42"));
    let left = local.remaining("tenant-42");
    assert_eq!(local_handle.remaining(), left);
    assert_eq!(redis_handle.remaining().await.unwrap(), left);
    // Its buckets held 1 and 3 of 4; halved and rounded down, 0 and 1.
    assert_eq!(left, 1);
}
