//! A booking ahead, against both stores: only the tenant's own buckets
//! pay it. A spill bucket that would lend at the slot lends nothing ahead
//! of it, since the token it booked would come out of what it holds from
//! now on, below its owners' reserve until the slot.

use std::time::Duration;

use crate::store::Store;
use crate::{Builder, Limit, Limiter, ManualClock, Quota, ShardedLimiter};

/// 4 buckets of 4 tokens, one every 4 h each; k = 1, d = 1, and a lender
/// keeps 2.
fn lending(name: &str) -> Builder {
    ShardedLimiter::builder()
        .quota(Quota::new(4, Duration::from_secs(4 * 3600)).with_burst(16))
        .buckets(4)
        .per_tenant(1)
        .borrow_from(1)
        .lender_reserve(0.5)
        .name(name)
}

const HOUR: Duration = Duration::from_secs(3600);

/// A tenant whose own bucket owes its next token 3 intervals (12 h) on,
/// and whose spill bucket is full: a booking an hour ahead, then one now.
/// Returns the first's denial (bucket, retry after), the spill bucket's
/// tokens after it, and whether the second was borrowed.
async fn booked_ahead<S: Store>(limiter: &Limiter<S>) -> ((u32, Duration), u64, bool) {
    let tenant = "t";
    let shard = limiter.shard(tenant);
    let spill = shard.spill()[0];
    let mut last = None;
    for _ in 0..4 {
        last = Some(limiter.check(tenant).await.unwrap());
    }
    let settled = limiter.settle(last.unwrap(), 3).await.unwrap();
    assert_eq!(settled.charged(), 2);
    let request = tenant.into();
    let whom = limiter.whom(&request);
    let denied = match limiter.book(whom, 1, HOUR).await {
        Ok(_) => panic!("a booking ahead paid by the spill bucket"),
        Err(refused) => refused.denied,
    };
    let spill_left = limiter.snapshot().await.ok().unwrap()[spill as usize].available();
    let now = limiter.book(whom, 1, Duration::ZERO).await.ok().unwrap();
    assert!(now.ready_in().is_zero());
    let borrowed = now.keep().borrowed();
    ((denied.bucket, denied.retry_after()), spill_left, borrowed)
}

#[test]
fn a_booking_ahead_borrows_nothing_in_process() {
    let limiter = lending("ahead").clock(ManualClock::new()).build().unwrap();
    let own = limiter.shard("t").buckets()[0];
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let seen = runtime.block_on(booked_ahead(&limiter));
    assert_eq!(seen, ((own, 11 * HOUR), 4, true));
}

#[cfg(feature = "redis")]
#[test]
fn a_booking_ahead_borrows_nothing_over_redis() {
    use crate::redis::script::redis_server::RedisServer;
    use crate::redis::{FailurePolicy, RedisOptions};
    let server = RedisServer::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let options = RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(2));
        let limiter = lending("ahead")
            .build_redis(&server.url(), options)
            .await
            .unwrap();
        let own = limiter.shard("t").buckets()[0];
        let ((bucket, retry_after), spill_left, borrowed) = booked_ahead(&limiter).await;
        // The server's clock runs: the own bucket's token is 11 h on, less
        // what the test took.
        assert_eq!((bucket, spill_left, borrowed), (own, 4, true));
        assert!(retry_after <= 11 * HOUR && retry_after > 11 * HOUR - Duration::from_secs(60));
    });
}
