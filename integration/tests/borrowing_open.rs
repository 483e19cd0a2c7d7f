//! Borrowing's open gaps, found by an outside review (2026-12-05) and not
//! fixed yet: each test shows a promise the code does not keep, in process
//! and over Redis, and is ignored until its fix lands
//! (`cargo test -p integration --test borrowing_open -- --ignored` shows
//! them fail). A borrower's wait books a slot on a spill bucket that takes
//! the lender's reserve while it sleeps; a tenant held off by its upstream
//! borrows around the hold-off.

use std::time::Duration;

use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
use shuffle_limiter::store::Store;
use shuffle_limiter::{Builder, Limit, Limiter, ManualClock, Quota, Request, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

/// A quota that does not refill during a test: `burst` tokens, one token an
/// hour per bucket at most.
fn still(burst: u32) -> Quota {
    Quota::new(1, Duration::from_secs(3600)).with_burst(burst)
}

fn options() -> RedisOptions {
    RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(2))
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
async fn owner_left_after_a_borrowers_booking<S>(limiter: std::sync::Arc<Limiter<S>>) -> u32
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

/// PROMISE (src/guide/borrowing.md:12-15): a request "may be paid by the
/// spill bucket with the most room above its **reserve** ... The owners of
/// a bucket may always take it to zero; a borrower never below the
/// reserve"; borrowing.md:57-58 "Their owners keep r of their burst in
/// those buckets"; src/limiter/builder.rs:158-163 (`lender_reserve`) "A
/// borrower may take a spill bucket only down to r of its burst".
/// SETUP: N = 4 buckets of 4, k = 1, d = 1, r = 0.5 (a lender keeps 2),
/// one token per 4 h per bucket. The borrower drains its own bucket and
/// settles its last grant at 3 (its own bucket owes 2 more: its next token
/// is 3 intervals away), then borrows its spill bucket down to the reserve
/// (2 left), and is denied. It then `wait`s (`.within(10 h)`) for one token.
/// OBSERVED: the spill bucket's room above its reserve comes first (1
/// interval), so the wait books that slot *now*: the spill bucket, at its
/// reserve of 2 before the wait, holds 1 while the wait sleeps, and its
/// owner is granted 1 from it where it had its reserve of 2 (in process
/// with `ManualClock`, and over Redis alike: 1, expected 2).
/// CAUSE (guess): a booking is "the draw as it will be `lead` from now,
/// applied now" (src/store/memory/mod.rs:251-273 `take_ahead`: the draw at
/// `now + lead`; over Redis `book`, src/redis/store.rs:140, sends the lead
/// to draw.lua), and `borrow` (src/draw/borrow.rs:66-103) weighs the spill
/// bucket's room above its reserve at that future instant only; the
/// token it books comes out of what the bucket holds from now on, so from
/// now until the slot the owner is left below its reserve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "open: a booking checks the spill bucket's reserve at its slot, not now (src/draw/borrow.rs)"]
async fn a_borrowers_wait_books_the_lenders_reserve_in_process() {
    let limiter = std::sync::Arc::new(
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

/// The same over Redis (one-slot layout): `draw.lua` books at `now + lead`
/// as the in-process draw does (src/redis/store.rs:140 `book`); observed 1,
/// expected 2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "open: a booking checks the spill bucket's reserve at its slot, not now (src/draw/borrow.rs)"]
async fn a_borrowers_wait_books_the_lenders_reserve_over_redis() {
    let server = RedisServer::start();
    let limiter = lending("lend-redis")
        .build_redis(&server.url(), options())
        .await
        .unwrap();
    let granted = owner_left_after_a_borrowers_booking(std::sync::Arc::new(limiter)).await;
    assert_eq!(
        granted, 2,
        "the owner's reserve of 2, under a borrower's booking"
    );
}

/// What a per-account hold-off leaves `tenant` at once: its checks, counting
/// those granted and how many of them were borrowed.
async fn after_a_tenant_hold_off<S: Store>(
    limiter: &Limiter<S>,
    tenant: Request<'_>,
) -> (u32, u32) {
    use shuffle_limiter::upstream::HoldOff;
    limiter
        .hold_off(HoldOff::tenant(tenant.clone(), Duration::from_secs(30)))
        .await
        .ok()
        .unwrap();
    let (mut granted, mut borrowed) = (0, 0);
    for _ in 0..20 {
        match limiter.check(tenant.clone()).await {
            Ok(g) => {
                granted += 1;
                borrowed += u32::from(g.borrowed());
            }
            Err(_) => break,
        }
    }
    (granted, borrowed)
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

/// PROMISE (src/guide/upstream.md:110-113, 127 "The upstream limits each
/// account: hold off this tenant's buckets", and its assertion at :138
/// `assert!(limiter.check("acme").is_err())` after
/// `hold_off(HoldOff::tenant(..))`; src/upstream/mod.rs:128-131 "The
/// request's own buckets stop for `duration` ... For an upstream that
/// limits each account on its own"): after a 429 for one account, that
/// account's requests stop until the instant, in process and over Redis.
/// OBSERVED: with borrowing on (d = 2, r = 0.5, buckets of 4), a tenant
/// held off for 30 s is granted 4 requests at once (all `borrowed()`, 2
/// from each spill bucket), and a held-off user (j = 1) of another tenant
/// is granted 2, borrowed; the same over Redis ([(4, 4), (2, 2)] twice,
/// expected none): each goes straight on to the upstream that just
/// answered 429 for it.
/// CAUSE (guess): `Limiter::held` (src/limiter/limit.rs:204-206) holds
/// `shard.buckets()` only, and the hold-off writes those buckets alone
/// (src/store/memory/change.rs:228-232; over Redis `holdoff.lua`); the
/// draw then borrows from the untouched spill buckets
/// (src/draw/borrow.rs:66-103). Nothing in the guides says a hold-off
/// and borrowing combine this way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "open: a hold-off holds the own buckets only, and borrowing goes around it"]
async fn a_tenant_held_off_borrows_around_its_hold_off() {
    let local = lending_with_users("hold-local")
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let server = RedisServer::start();
    let redis = lending_with_users("hold-redis")
        .build_redis(&server.url(), options())
        .await
        .unwrap();
    let tenant = Request::tenant("acme");
    let user = Request::tenant("zeta").user("alice");
    let seen = [
        after_a_tenant_hold_off(&local, tenant.clone()).await,
        after_a_tenant_hold_off(&local, user.clone()).await,
        after_a_tenant_hold_off(&redis, tenant).await,
        after_a_tenant_hold_off(&redis, user).await,
    ];
    println!("granted, borrowed after a hold-off: {seen:?}");
    assert_eq!(
        seen,
        [(0, 0); 4],
        "no request of a held-off account goes out"
    );
}
