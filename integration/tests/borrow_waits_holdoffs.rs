//! Borrowing beside waits and hold-offs, in process and over Redis: a
//! borrower's wait books no slot on a spill bucket (which would take the
//! lender's reserve while it sleeps), but draws on it when its room above
//! the reserve comes first; a tenant held off by its upstream borrows
//! nothing until the hold-off ends, and a tenant that only shares a held
//! bucket still borrows. (The first two were found by an outside review
//! on 2026-12-05.)

use std::sync::Arc;
use std::time::Duration;

use shuffle_limiter::store::Store;
use shuffle_limiter::upstream::HoldOff;
use shuffle_limiter::{Builder, Limit, Limiter, ManualClock, Quota, ShardedLimiter, TokioClock};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;
#[path = "support/lending.rs"]
mod lending;
use lending::{Stores, Who, at_once, options, request};

/// A quota that does not refill during a test: `burst` tokens, one token an
/// hour per bucket at most.
fn still(burst: u32) -> Quota {
    Quota::new(1, Duration::from_secs(3600)).with_burst(burst)
}

/// A tenant whose own bucket is `own` and whose spill bucket is `spill`,
/// and a tenant whose own bucket is `spill` (k = 1, d = 1).
fn lender_and_borrower<S>(limiter: &Limiter<S>) -> (String, String, u32) {
    let shard = |t: &String| limiter.shard(t);
    let borrower = (0..).map(|i| format!("b{i}")).next().unwrap();
    let spill = shard(&borrower).spill()[0];
    let owner = (0..)
        .map(|i| format!("o{i}"))
        .find(|t| shard(t).buckets() == [spill])
        .unwrap();
    (borrower, owner, spill)
}

/// 4 buckets of 4 tokens, k = 1, d = 1, r = 0.5: a lender keeps 2.
fn lending(name: &str) -> Builder {
    ShardedLimiter::builder()
        .quota(Quota::new(4, Duration::from_secs(4 * 3600)).with_burst(16))
        .buckets(4)
        .per_tenant(1)
        .borrow_from(1)
        .lender_reserve(0.5)
        .salt("review")
        .name(name)
}

/// The borrower's own bucket in debt, its spill bucket lent down to the
/// reserve; then a wait of the borrower books a slot ahead on the spill
/// bucket. Returns the tokens the spill bucket's owner can still take at
/// once, with the wait still pending.
async fn owner_left_after_a_borrowers_booking<S>(limiter: Arc<Limiter<S>>) -> u32
where
    S: Store + Send + Sync + 'static,
{
    let (borrower, owner, spill) = lender_and_borrower(&limiter);
    // Drain the own bucket (4), and settle the last grant at 3 tokens: its
    // own bucket owes 2 more.
    let mut last = None;
    for _ in 0..4 {
        let grant = limiter.check(borrower.as_str()).await.unwrap();
        assert!(!grant.borrowed());
        last = Some(grant);
    }
    let settled = limiter.settle(last.unwrap(), 3).await.unwrap();
    assert_eq!(settled.charged(), 2);
    // Borrow the spill bucket down to its reserve: 2 of its 4.
    for _ in 0..2 {
        assert!(limiter.check(borrower.as_str()).await.unwrap().borrowed());
    }
    assert!(limiter.check(borrower.as_str()).await.is_err());
    let before = limiter.snapshot().await.ok().unwrap()[spill as usize].available();
    assert_eq!(before, 2, "the reserve");
    // A wait of the borrower: its own bucket pays in 3 intervals, the
    // spill bucket above its reserve in 1: it books that slot now.
    let waiter = {
        let limiter = limiter.clone();
        tokio::spawn(async move {
            let _ = limiter
                .wait(borrower.as_str())
                .within(Duration::from_secs(10 * 3600))
                .await;
        })
    };
    for _ in 0..100 {
        let now = limiter.snapshot().await.ok().unwrap()[spill as usize].available();
        if now != before {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = limiter.snapshot().await.ok().unwrap()[spill as usize].available();
    // The owner takes its own bucket (its grants borrowed elsewhere aside).
    let mut granted = 0;
    for _ in 0..8 {
        match limiter.check(owner.as_str()).await {
            Ok(grant) if !grant.borrowed() => granted += 1,
            _ => break,
        }
    }
    waiter.abort();
    println!(
        "spill bucket {spill}: {before} before the wait, {after} under it; owner took {granted}"
    );
    granted
}

/// The guides' promise (`guide::borrowing`): "The owners of a bucket may
/// always take it to zero; a borrower never below the reserve".
/// N = 4 buckets of 4, k = 1, d = 1, r = 0.5 (a lender keeps 2), one
/// token per 4 h per bucket. The borrower drains its own bucket and
/// settles its last grant at 3 (its next own token is 3 intervals away),
/// borrows its spill bucket down to the reserve, and then waits: the spill
/// bucket's room above its reserve comes first (1 interval). A booking of
/// that slot now would take the token out of what the bucket holds from
/// now on, leaving its owner 1 where its reserve is 2 (so it was, in both
/// stores, before a booking ahead stopped borrowing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrowers_wait_leaves_the_lenders_reserve_in_process() {
    let limiter = Arc::new(
        lending("lend-local")
            .clock(ManualClock::new())
            .build()
            .unwrap(),
    );
    let granted = owner_left_after_a_borrowers_booking(limiter).await;
    assert_eq!(
        granted, 2,
        "the owner's reserve of 2, under a borrower's booking"
    );
}

/// The same over Redis (one-slot layout).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_borrowers_wait_leaves_the_lenders_reserve_over_redis() {
    let server = RedisServer::start();
    let limiter = lending("lend-redis")
        .build_redis(&server.url(), options())
        .await
        .unwrap();
    let granted = owner_left_after_a_borrowers_booking(Arc::new(limiter)).await;
    assert_eq!(
        granted, 2,
        "the owner's reserve of 2, under a borrower's booking"
    );
}

/// What a per-account hold-off leaves `who` at once: its checks, counting
/// those granted and how many of them were borrowed.
async fn after_a_tenant_hold_off<S>(limiter: &Arc<Limiter<S>>, who: Who) -> (u32, u32)
where
    S: Store + Send + Sync + 'static,
{
    limiter
        .hold_off(HoldOff::tenant(request(who), Duration::from_secs(30)))
        .await
        .ok()
        .unwrap();
    at_once(limiter, who).await
}

fn lending_with_users(name: &str) -> Builder {
    ShardedLimiter::builder()
        .quota(still(32))
        .buckets(8)
        .per_tenant(2)
        .per_user(1)
        .borrow_from(2)
        .salt("review")
        .name(name)
}

/// The guides' promise (`guide::upstream`, `HoldOff::tenant`): after a 429
/// for one account, that account's requests stop until the instant, in
/// process and over Redis. With borrowing on (d = 2, r = 0.5, buckets of
/// 4), a tenant held off for 30 s was granted 4 requests at once, all
/// borrowed, and a held-off user (j = 1) of another tenant 2: each went
/// straight on to the upstream that had just answered 429 for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_held_off_borrows_nothing_until_the_hold_off_ends() {
    let server = RedisServer::start();
    let stores = Stores::new(
        lending_with_users,
        "hold",
        ManualClock::new(),
        &server.url(),
    )
    .await;
    let (tenant, user) = (("acme", None), ("zeta", Some("alice")));
    let seen = [
        after_a_tenant_hold_off(&stores.local, tenant).await,
        after_a_tenant_hold_off(&stores.local, user).await,
        after_a_tenant_hold_off(&stores.redis, tenant).await,
        after_a_tenant_hold_off(&stores.redis, user).await,
        after_a_tenant_hold_off(&stores.batched, tenant).await,
        after_a_tenant_hold_off(&stores.batched, user).await,
    ];
    println!("granted, borrowed after a hold-off: {seen:?}");
    assert_eq!(
        seen,
        [(0, 0); 6],
        "no request of a held-off account goes out"
    );
}

/// The wait whose booking would have taken the reserve still gets the
/// spill bucket's token, when it comes: it sleeps until the spill bucket's
/// room above its reserve (one interval, 4 h), draws then and is granted
/// a borrowed token, 8 h before its own bucket could pay; the owner's
/// reserve is whole while it sleeps.
#[tokio::test(start_paused = true)]
async fn a_borrowers_wait_draws_on_the_spill_bucket_when_its_room_comes() {
    let limiter = Arc::new(
        lending("lend-wait")
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    );
    let (borrower, _, spill) = lender_and_borrower(&limiter);
    let start = tokio::time::Instant::now();
    // The own bucket drained and its last grant settled at 3: its next
    // token is 3 intervals away. The spill bucket lent down to its reserve.
    let grants: Vec<_> = (0..4)
        .map(|_| limiter.check(borrower.as_str()).unwrap())
        .collect();
    assert!(grants.iter().all(|g| !g.borrowed()));
    let last = grants.into_iter().last().unwrap();
    assert_eq!(limiter.settle(last, 3).charged(), 2);
    for _ in 0..2 {
        assert!(limiter.check(borrower.as_str()).unwrap().borrowed());
    }
    assert!(
        limiter.check(borrower.as_str()).is_err(),
        "down to the reserve"
    );
    let waiter = {
        let (limiter, borrower) = (limiter.clone(), borrower.clone());
        tokio::spawn(async move {
            let grant = limiter
                .wait(borrower.as_str())
                .within(Duration::from_secs(10 * 3600))
                .await
                .unwrap();
            (grant.borrowed(), start.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_secs(2 * 3600)).await;
    let spill_now = limiter.snapshot()[spill as usize].available();
    assert_eq!(spill_now, 2, "the reserve, whole while the wait sleeps");
    let (borrowed, after) = waiter.await.unwrap();
    assert!(borrowed, "paid by the spill bucket");
    let interval = Duration::from_secs(4 * 3600);
    assert!(
        after >= interval && after < interval + Duration::from_secs(1),
        "granted {after:?} after the start, when the spill bucket has a token above its reserve"
    );
    assert_eq!(limiter.snapshot()[spill as usize].available(), 2);
}

/// A hold-off of one tenant leaves another that shares one of its own
/// buckets free to borrow: only a shard whose own buckets are all held
/// stops borrowing. Returns what the other tenant is granted at once, and
/// how many of those were borrowed.
async fn sharing_a_held_bucket<S>(limiter: &Arc<Limiter<S>>) -> (u32, u32)
where
    S: Store + Send + Sync + 'static,
{
    let held = limiter.shard("acme");
    let other = (0..)
        .map(|i| &*format!("t{i}").leak())
        .find(|t| {
            let shard = limiter.shard(t);
            let shared = shard
                .buckets()
                .iter()
                .filter(|b| held.buckets().contains(b));
            shared.count() == 1 && shard.spill().iter().all(|b| !held.buckets().contains(b))
        })
        .unwrap();
    assert_eq!(
        after_a_tenant_hold_off(limiter, ("acme", None)).await,
        (0, 0)
    );
    at_once(limiter, (other, None)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_that_shares_a_held_bucket_still_borrows() {
    let server = RedisServer::start();
    let stores = Stores::new(
        lending_with_users,
        "share",
        ManualClock::new(),
        &server.url(),
    )
    .await;
    // Its own bucket that is not held (4 tokens), then 2 above the
    // reserve in each of its spill buckets.
    assert_eq!(sharing_a_held_bucket(&stores.local).await, (8, 4));
    assert_eq!(sharing_a_held_bucket(&stores.redis).await, (8, 4));
    assert_eq!(sharing_a_held_bucket(&stores.batched).await, (8, 4));
}
