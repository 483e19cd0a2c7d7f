//! Borrowing from spill pools above a reserve, polled by hand.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use super::*;

/// C = 16 over 8 pools of 2, k = 2, d = 2, r = 0.5: one permit of each
/// spill pool is lent, one kept for its owners.
fn lending(max_queue: u32) -> InFlight {
    InFlight::builder()
        .concurrency(16)
        .pools(8)
        .per_tenant(2)
        .borrow_from(2)
        .lender_reserve(0.5)
        .max_queue(max_queue)
        .build()
        .unwrap()
}

/// A tenant whose own pools include `pool`.
fn owner_of(inflight: &InFlight, pool: u32, not: &str) -> String {
    (0..)
        .map(|t| format!("owner-{t}"))
        .find(|t| t != not && inflight.shard(t).contains(pool))
        .unwrap()
}

#[test]
fn a_tenant_borrows_above_the_reserve_only_once_its_own_pools_are_full() {
    let inflight = lending(8);
    assert_eq!((inflight.spill(), inflight.lender_reserve()), (2, 0.5));
    let shard = inflight.shard("t");
    let (own, spill) = (shard.buckets().to_vec(), shard.spill().to_vec());
    assert_eq!(spill.len(), 2);
    assert!(spill.iter().all(|p| !own.contains(p)));
    let held: Vec<_> = std::iter::from_fn(|| inflight.try_acquire("t").ok()).collect();
    let (mine, lent): (Vec<_>, Vec<_>) = held.iter().partition(|p| !p.borrowed());
    assert_eq!((mine.len(), lent.len()), (4, 2));
    assert!(
        mine.iter()
            .all(|p| own.contains(&p.pools().next().unwrap().0))
    );
    let mut from: Vec<u32> = lent.iter().map(|p| p.pools().next().unwrap().0).collect();
    from.sort_unstable();
    let mut want = spill.clone();
    want.sort_unstable();
    assert_eq!(from, want, "one permit of each spill pool");
    for &pool in &spill {
        assert_eq!((inflight.free(pool), inflight.reserve(pool)), (1, 1));
        // Its owners take what the borrower left them.
        let owner = owner_of(&inflight, pool, "t");
        let all: Vec<_> =
            std::iter::from_fn(|| inflight.try_acquire(owner.as_str()).ok()).collect();
        let kept = all.iter().filter(|p| p.pools().any(|(p, _)| p == pool));
        assert_eq!(kept.count(), 1, "{owner} keeps the reserve of pool {pool}");
        drop(all);
    }
    assert_eq!(
        inflight.try_acquire("t").unwrap_err().reason(),
        RejectReason::Busy
    );
    drop(held);
    assert_eq!(inflight.available(), 16);
}

#[test]
fn seats_come_from_the_own_pools_first_then_from_spill_all_or_nothing() {
    let inflight = lending(8);
    let own: Vec<_> = (0..2).map(|_| inflight.try_acquire("t").unwrap()).collect();
    assert!(own.iter().all(|p| !p.borrowed()));
    // 2 own permits left and 2 lendable: 3 seats are 2 own and 1 borrowed.
    let three = inflight
        .try_acquire(Request::tenant("t").tokens(3))
        .unwrap();
    assert!(three.borrowed());
    let shard = inflight.shard("t");
    let from_own: u32 = (three.pools())
        .filter(|&(p, _)| shard.contains(p))
        .map(|(_, s)| s)
        .sum();
    assert_eq!((three.seats(), from_own), (3, 2));
    // 1 lendable left: 2 seats are refused and nothing is taken.
    let before = inflight.available();
    let two = Request::tenant("t").tokens(2);
    assert_eq!(
        inflight.try_acquire(two).unwrap_err().reason(),
        RejectReason::Busy
    );
    assert_eq!(inflight.available(), before);
    // What one request may hold is its own pools' permits: borrowing lends
    // what is free now, and a wait is for its own pools.
    let five = Request::tenant("t").tokens(5);
    let never = RejectReason::NeverFits { asked: 5, most: 4 };
    assert_eq!(inflight.try_acquire(five).unwrap_err().reason(), never);
    drop((own, three));
    let four = inflight
        .try_acquire(Request::tenant("t").tokens(4))
        .unwrap();
    assert!(!four.borrowed(), "own pools first");
}

#[test]
fn a_spill_pool_callers_queue_for_lends_nothing_and_a_waiter_waits_for_its_own() {
    let inflight = lending(8);
    let spill = inflight.shard("t").spill()[0];
    let owner = owner_of(&inflight, spill, "t");
    // The owner fills its pools and queues: pool `spill`'s permits are the queue's.
    let full: Vec<_> = std::iter::from_fn(|| inflight.try_acquire(owner.as_str()).ok()).collect();
    let mut queued = inflight.acquire(owner.as_str());
    let cx = &mut Context::from_waker(Waker::noop());
    assert!(Pin::new(&mut queued).poll(cx).is_pending());
    drop(full);
    // Served: the queue took the first released permit, and the rest is free.
    let Poll::Ready(Ok(served)) = Pin::new(&mut queued).poll(cx) else {
        panic!("the owner's waiter is served by the release");
    };
    drop(served);
    // Now `t` fills its own pools; an acquire borrows at once.
    let mine: Vec<_> = (0..4).map(|_| inflight.try_acquire("t").unwrap()).collect();
    let mut lent = inflight.acquire("t");
    let Poll::Ready(Ok(first)) = Pin::new(&mut lent).poll(cx) else {
        panic!("a free permit above the reserve is lent at once");
    };
    assert!(first.borrowed());
    let second = inflight.try_acquire("t").unwrap();
    assert!(second.borrowed());
    // Nothing left above the reserves: it waits, for its own pools.
    let mut waits = inflight.acquire("t");
    assert!(Pin::new(&mut waits).poll(cx).is_pending());
    let own = inflight.shard("t");
    assert!(own.buckets().iter().all(|&p| inflight.waiting(p) == 1));
    assert!(own.spill().iter().all(|&p| inflight.waiting(p) == 0));
    drop(second); // a spill pool's permit: not its own, it still waits
    assert!(Pin::new(&mut waits).poll(cx).is_pending());
    drop(mine);
    let Poll::Ready(Ok(permit)) = Pin::new(&mut waits).poll(cx) else {
        panic!("served by its own pool");
    };
    assert!(!permit.borrowed());
    // Cancelled waits leave no trace.
    let mut cancelled = inflight.acquire(owner.as_str());
    let _ = Pin::new(&mut cancelled).poll(cx);
    drop((cancelled, permit, first, lent, queued));
    assert_eq!(inflight.available(), 16);
    assert!((0..8).all(|p| inflight.waiting(p) == 0));
}

#[test]
fn a_user_borrows_from_its_tenants_spill_pools() {
    let inflight = InFlight::builder()
        .concurrency(8)
        .pools(8)
        .per_tenant(2)
        .per_user(1)
        .borrow_from(2)
        .lender_reserve(0.0)
        .build()
        .unwrap();
    let user = Request::tenant("acme").user("alice");
    let shard = inflight.shard(user.clone());
    assert_eq!(shard.buckets().len(), 1);
    assert_eq!(shard.spill(), inflight.shard("acme").spill());
    let held: Vec<_> = std::iter::from_fn(|| inflight.try_acquire(user.clone()).ok()).collect();
    // Its one pool of one permit, then the two spill pools, all lent (r = 0).
    assert_eq!(held.len(), 3);
    assert_eq!(held.iter().filter(|p| p.borrowed()).count(), 2);
}

#[test]
fn bad_borrowing_settings_are_refused_by_name() {
    let b = || InFlight::builder().concurrency(16).pools(8).per_tenant(2);
    assert_eq!(
        b().borrow_from(7).build().unwrap_err(),
        BuildError::SpillExceedsPools {
            per_tenant: 2,
            spill: 7,
            max: 8
        }
    );
    let four = InFlight::builder().concurrency(16).pools(4).per_tenant(2);
    let err = four.borrow_from(3).build().unwrap_err();
    assert!(
        err.to_string().contains("use borrow_from of at most 2"),
        "{err}"
    );
    for reserve in [1.0, -0.1, f64::NAN] {
        let err = b()
            .borrow_from(2)
            .lender_reserve(reserve)
            .build()
            .unwrap_err();
        assert!(matches!(err, BuildError::LenderReserve { .. }), "{reserve}");
        assert!(err.to_string().contains("such as 0.5"), "{err}");
    }
    // Without borrowing the reserve is not looked at, and nothing is kept.
    let off = b().lender_reserve(7.0).build().unwrap();
    assert_eq!(
        (off.spill(), off.lender_reserve(), off.reserve(0)),
        (0, 0.0, 0)
    );
    assert!(off.shard("t").spill().is_empty());
}

#[test]
fn the_reserve_rounds_up_to_whole_permits_of_each_pools_share() {
    // C = 42 over 8 pools: 6, 6, 5, 5, ...; r = 0.5 keeps 3 of each.
    let inflight = InFlight::builder()
        .concurrency(42)
        .pools(8)
        .borrow_from(2)
        .lender_reserve(0.5)
        .build()
        .unwrap();
    let kept: Vec<u32> = (0..8).map(|p| inflight.reserve(p)).collect();
    assert_eq!(kept, [3, 3, 3, 3, 3, 3, 3, 3]);
    let lend_all = InFlight::builder()
        .concurrency(42)
        .pools(8)
        .borrow_from(2)
        .lender_reserve(0.0)
        .build()
        .unwrap();
    assert_eq!(lend_all.reserve(0), 0);
    let almost = InFlight::builder()
        .concurrency(42)
        .pools(8)
        .borrow_from(2)
        .lender_reserve(0.99)
        .build()
        .unwrap();
    assert_eq!(
        (almost.reserve(0), almost.reserve(7)),
        (6, 5),
        "lends nothing"
    );
}
