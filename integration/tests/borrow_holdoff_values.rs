//! The hold-offs a Redis draw trusts, beside borrowing: `draw.lua`'s
//! hold-off check (through `held_at` of `held.lua`) against `held_off` of
//! `src/store/memory/change.rs`. A real hold-off holds whatever the quota
//! since, and a value no hold-off writes holds nothing. (Found by an
//! outside review on 2026-12-05.)

use std::sync::Arc;
use std::time::Duration;

use shuffle_limiter::store::Store;
use shuffle_limiter::upstream::HoldOff;
use shuffle_limiter::{Builder, Limit, Limiter, ManualClock, Quota, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;
#[path = "support/lending.rs"]
mod lending;
use lending::{Stores, at_once, batched, options};

/// N = 4, k = 2, d = 1, r = 0.5; 2 tokens a bucket, one every 4 `period`s.
fn lending(period: Duration) -> impl Fn(&str) -> Builder {
    move |name| {
        ShardedLimiter::builder()
            .quota(Quota::new(1, period).with_burst(8))
            .buckets(4)
            .per_tenant(2)
            .borrow_from(1)
            .lender_reserve(0.5)
            .salt("review46")
            .name(name)
    }
}

/// A token every 4 s a bucket.
fn slow(name: &str) -> Builder {
    lending(Duration::from_secs(1))(name)
}

/// A tenant held off for the longest hold-off (an hour, after a 429 with
/// `Retry-After: 3600`), then the quota raised (a bucket's token every
/// 100 ms instead of 4 s; its burst, 2, stays): what it is granted at once
/// right after.
async fn held_for_an_hour_then_raised<S>(limiter: &Arc<Limiter<S>>) -> (u32, u32)
where
    S: Store + Send + Sync + 'static,
{
    limiter
        .hold_off(HoldOff::tenant("acme", Duration::from_secs(3600)))
        .await
        .ok()
        .unwrap();
    limiter
        .set_quota(Quota::new(40, Duration::from_secs(1)).with_burst(8))
        .await
        .ok()
        .unwrap();
    at_once(limiter, ("acme", None)).await
}

/// `guide::borrowing`, "A hold-off stops borrowing too": "While a hold-off
/// ... holds every own bucket of a shard, its spill buckets lend it
/// nothing", "in process and over Redis (one or batched decisions)"
/// (CHANGELOG). draw.lua mirrors `held_off` of change.rs.
///
/// The held buckets come back one after another (bucket i of the hold-off
/// `interval / k · i` after the instant, 2 s for the second of k = 2 under
/// the old quota). In process the tenant borrows nothing after the quota
/// change, as the hold-off still holds both own buckets for an hour. Over
/// Redis, `held_at` took the second bucket's instant for a stray value,
/// later than "now + MAX_HOLD + capacity" under the new quota (capacity
/// 200 ms < its 2 s turn), so the spill bucket lent: (1, 1) granted and
/// borrowed, one and batched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_held_for_an_hour_borrows_nothing_after_a_quota_change() {
    let server = RedisServer::start();
    let stores = Stores::new(slow, "held-raise", ManualClock::new(), &server.url()).await;
    let seen = [
        held_for_an_hour_then_raised(&stores.local).await,
        held_for_an_hour_then_raised(&stores.redis).await,
        held_for_an_hour_then_raised(&stores.batched).await,
    ];
    println!("in process, over Redis, batched: (granted, borrowed) = {seen:?}");
    assert_eq!(
        seen,
        [(0, 0); 3],
        "nothing for a tenant held off for an hour"
    );
}

/// Control for the test above: the same with a hold-off of a minute
/// (its instants well inside `held_at`'s bound) borrows nothing over Redis
/// either, so what lent above is the bound, not the quota change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_a_tenant_held_for_a_minute_borrows_nothing_after_a_quota_change() {
    let server = RedisServer::start();
    for options in [options(), batched()] {
        let redis = Arc::new(
            slow("held-minute-redis")
                .build_redis(&server.url(), options)
                .await
                .unwrap(),
        );
        redis
            .hold_off(HoldOff::tenant("acme", Duration::from_secs(60)))
            .await
            .unwrap();
        redis
            .set_quota(Quota::new(40, Duration::from_secs(1)).with_burst(8))
            .await
            .unwrap();
        assert_eq!(at_once(&redis, ("acme", None)).await, (0, 0));
    }
}

/// draw.lua, on the hold-off check: "A hash of another type, or a value
/// that no hold-off writes, holds nothing (`held_at` of held.lua)", and
/// heard.rs reads the same hash as `u64`. A value no hold-off writes
/// (holdoff.lua writes '%d'), an instant 30 s ahead in exponent notation,
/// held the tenant's own buckets for the draw: the tenant, its own
/// buckets drained, borrowed nothing where it borrows 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_value_in_the_hold_offs_hash_holds_nothing() {
    assert_eq!(
        after_stray_values(true).await,
        (1, 1),
        "the spill bucket's token above its reserve"
    );
}

/// Control: without the stray values the same tenant borrows 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_without_stray_values_the_tenant_borrows_one() {
    assert_eq!(after_stray_values(false).await, (1, 1));
}

async fn after_stray_values(write: bool) -> (u32, u32) {
    let server = RedisServer::start();
    let limiter = Arc::new(
        slow("stray-held")
            .build_redis(&server.url(), options())
            .await
            .unwrap(),
    );
    // Drain acme's own buckets (2 tokens each).
    let own = limiter.shard("acme").buckets().to_vec();
    for _ in 0..4 {
        assert!(!limiter.check("acme").await.unwrap().borrowed());
    }
    let client = redis::Client::open(server.url()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let (secs, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut connection)
        .await
        .unwrap();
    let ahead = (secs * 1_000_000 + micros + 30_000_000) as f64;
    for &b in own.iter().filter(|_| write) {
        let key = limiter.key(b).unwrap().to_owned();
        let _: () = redis::cmd("HSET")
            .arg("{stray-held}:held")
            .arg(key)
            .arg(format!("{ahead:e}"))
            .query_async(&mut connection)
            .await
            .unwrap();
    }
    let stray = format!("{ahead:e}");
    let seen = at_once(&limiter, ("acme", None)).await;
    println!(
        "own buckets {own:?}, stray value {stray:?} written: {write}: (granted, borrowed) = {seen:?}"
    );
    seen
}

/// A tenant whose buckets come back further apart than its hold-off is
/// long (a token every 4 h a bucket: the second of k = 2 would come back
/// 2 h after the instant) is held by both, in process and over Redis: the
/// held buckets come back within the hold-off's length again, so no
/// instant a hold-off writes is later than Redis trusts (twice the longest
/// hold-off). Returns what the tenant is granted at once, in process, over
/// Redis and batched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_off_shorter_than_a_buckets_turn_holds_every_own_bucket() {
    let hourly = lending(Duration::from_secs(3600));
    let clock = ManualClock::new();
    let server = RedisServer::start();
    let stores = Stores::new(hourly, "turn", clock.clone(), &server.url()).await;
    let hour = HoldOff::tenant("acme", Duration::from_secs(3600));
    stores.local.hold_off(hour.clone());
    stores.redis.hold_off(hour.clone()).await.unwrap();
    stores.batched.hold_off(hour).await.unwrap();
    let seen = [
        at_once(&stores.local, ("acme", None)).await,
        at_once(&stores.redis, ("acme", None)).await,
        at_once(&stores.batched, ("acme", None)).await,
    ];
    assert_eq!(
        seen,
        [(0, 0); 3],
        "nothing for a tenant held off for an hour"
    );
    // In process, 2 h on: the first own bucket came back at the instant
    // (1 h), the second an hour after it, not its 2 h turn after it; each
    // has a token (and the spill bucket lends its one above the reserve).
    clock.advance(Duration::from_secs(2 * 3600));
    let mut own = 0;
    while let Ok(grant) = stores.local.check("acme") {
        own += u32::from(!grant.borrowed());
    }
    assert_eq!(own, 2);
}
