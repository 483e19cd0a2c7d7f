//! The in-flight limit's queues, polled by hand (no runtime).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use super::*;

fn limit(concurrency: u32, pools: u32, per_tenant: u32, max_queue: u32) -> InFlight {
    InFlight::builder()
        .concurrency(concurrency)
        .pools(pools)
        .per_tenant(per_tenant)
        .max_queue(max_queue)
        .build()
        .unwrap()
}

fn poll<'a>(acquire: &mut Acquire<'a>) -> Poll<Result<Permit<'a>, Rejected>> {
    Pin::new(acquire).poll(&mut Context::from_waker(Waker::noop()))
}

/// A tenant whose shard is exactly `pools`.
fn tenant_on(inflight: &InFlight, pools: &[u32]) -> String {
    (0..)
        .map(|t| format!("t{t}"))
        .find(|t| {
            let shard = inflight.shard(t);
            shard.buckets().len() == pools.len() && pools.iter().all(|&p| shard.contains(p))
        })
        .unwrap()
}

#[test]
fn a_waiter_is_served_by_the_release_of_any_of_its_pools_in_order() {
    let inflight = limit(2, 2, 2, 8);
    let a = inflight.try_acquire("x").unwrap();
    let b = inflight.try_acquire("x").unwrap();
    let (pa, pb) = (a.pools().next().unwrap().0, b.pools().next().unwrap().0);
    assert_ne!(pa, pb);
    let mut first = inflight.acquire("x");
    let mut second = inflight.acquire("x");
    assert!(poll(&mut first).is_pending());
    assert!(poll(&mut second).is_pending());
    assert_eq!((inflight.waiting(0), inflight.waiting(1)), (2, 2));
    // A try never jumps the queue.
    assert_eq!(
        inflight.try_acquire("x").unwrap_err().reason(),
        RejectReason::Busy
    );
    drop(b);
    let Poll::Ready(Ok(got)) = poll(&mut first) else {
        panic!("the first waiter is served first");
    };
    assert_eq!(got.pools().collect::<Vec<_>>(), [(pb, 1)]);
    assert!(poll(&mut second).is_pending());
    assert_eq!((inflight.waiting(0), inflight.waiting(1)), (1, 1));
    drop(a);
    assert!(matches!(poll(&mut second), Poll::Ready(Ok(_))));
    drop((got, second));
    assert_eq!(inflight.available(), 2);
    assert_eq!((inflight.waiting(0), inflight.waiting(1)), (0, 0));
}

#[test]
fn a_dropped_waiter_leaves_no_trace_and_gives_back_a_permit_handed_to_it() {
    let inflight = limit(1, 1, 1, 8);
    let held = inflight.try_acquire("x").unwrap();
    let mut gone = inflight.acquire("x");
    let mut next = inflight.acquire("x");
    assert!(poll(&mut gone).is_pending() && poll(&mut next).is_pending());
    drop(held); // handed to `gone`, which never sees it
    drop(gone); // so it goes to `next`
    assert!(matches!(poll(&mut next), Poll::Ready(Ok(_))));
    drop(next);
    assert_eq!((inflight.available(), inflight.waiting(0)), (1, 0));
    // Dropped while waiting: it leaves its queue, and the pool is open again.
    let held = inflight.try_acquire("x").unwrap();
    let mut gone = inflight.acquire("x");
    assert!(poll(&mut gone).is_pending());
    drop(gone);
    assert_eq!(inflight.waiting(0), 0);
    drop(held);
    assert!(inflight.try_acquire("x").is_ok());
}

#[test]
fn a_full_queue_refuses_and_a_shorter_one_of_the_shard_takes_the_waiter() {
    let inflight = limit(4, 4, 2, 1);
    let x = tenant_on(&inflight, &[0, 1]);
    let y = tenant_on(&inflight, &[1, 2]);
    let z = tenant_on(&inflight, &[0, 2]);
    let held: Vec<_> = (0..2).map(|_| inflight.try_acquire(&x).unwrap()).collect();
    let held_y = inflight.try_acquire(&y).unwrap(); // pool 2
    let mut wx = inflight.acquire(&x);
    assert!(poll(&mut wx).is_pending()); // in the queues of 0 and 1
    let full = poll(&mut inflight.acquire(&x));
    let Poll::Ready(Err(full)) = full else {
        panic!("both queues of x are full");
    };
    assert_eq!(full.reason(), RejectReason::QueueFull { max_queue: 1 });
    assert!(full.to_string().contains("raise max_queue"));
    // z shares pool 0 (full queue) but not pool 2: it waits there alone.
    let mut wz = inflight.acquire(&z);
    assert!(poll(&mut wz).is_pending());
    assert_eq!(inflight.waiting(2), 1);
    drop(held_y);
    assert!(matches!(poll(&mut wz), Poll::Ready(Ok(_))));
    assert!(poll(&mut wx).is_pending());
    drop(held);
    assert!(matches!(poll(&mut wx), Poll::Ready(Ok(_))));
}

/// A waiter that found one of its pools' queue full joins that queue when
/// it has room: once the callers before it are gone, a permit that pool
/// frees is its own, not left free while it waits on its other pool.
#[test]
fn a_waiter_joins_a_queue_that_was_full_once_it_has_room() {
    let inflight = limit(3, 3, 2, 1);
    let w = tenant_on(&inflight, &[0, 1]);
    let x = tenant_on(&inflight, &[1, 2]);
    let held_w = [
        inflight.try_acquire(&w).unwrap(),
        inflight.try_acquire(&w).unwrap(),
    ];
    let on_2 = inflight.try_acquire(&x).unwrap();
    assert_eq!(on_2.pools().next().unwrap().0, 2);
    let [on_0, on_1] = held_w;
    let (_on_0, on_1) = if on_0.pools().next().unwrap().0 == 0 {
        (on_0, on_1)
    } else {
        (on_1, on_0)
    };
    let mut wx = inflight.acquire(&x);
    assert!(poll(&mut wx).is_pending()); // first in the queues of 1 and 2
    let mut ww = inflight.acquire(&w);
    assert!(poll(&mut ww).is_pending()); // in 0's queue; 1's is full
    assert_eq!((inflight.waiting(0), inflight.waiting(1)), (1, 1));
    drop(on_2);
    assert!(matches!(poll(&mut wx), Poll::Ready(Ok(_))));
    assert_eq!(inflight.waiting(1), 1, "w took x's place in the queue of 1");
    // Pool 0's holder hangs; pool 1 frees its permit: w's.
    drop(on_1);
    let Poll::Ready(Ok(served)) = poll(&mut ww) else {
        panic!("pool 1 is free, and w waits for it alone");
    };
    assert_eq!(served.pools().next().unwrap().0, 1);
}

#[test]
fn a_weighted_waiter_takes_its_seats_at_once_never_holding_while_it_waits() {
    let inflight = limit(4, 2, 2, 8); // pools of 2 and 2
    let one = inflight.try_acquire("x").unwrap();
    let two = inflight.try_acquire("x").unwrap();
    let mut three = inflight.acquire(Request::tenant("x").tokens(3));
    assert!(poll(&mut three).is_pending());
    // It took nothing while it waits: the 2 free seats are kept for it.
    assert_eq!(inflight.available(), 2);
    assert_eq!(
        inflight.try_acquire("x").unwrap_err().reason(),
        RejectReason::Busy
    );
    drop(one);
    let Poll::Ready(Ok(permit)) = poll(&mut three) else {
        panic!("4 seats free, 3 asked");
    };
    assert_eq!(permit.seats(), 3);
    assert!(permit.pools().all(|(p, s)| s <= inflight.permits(p)));
    assert_eq!(inflight.available(), 0);
    drop((permit, two));
    assert_eq!(inflight.available(), 4);
}

#[test]
fn bad_requests_are_refused_with_what_fits() {
    let inflight = limit(10, 4, 2, 8); // pools of 3, 3, 2, 2
    let most: u32 = (inflight.shard("x").buckets().iter())
        .map(|&p| inflight.permits(p))
        .sum();
    let too_many = Request::tenant("x").tokens(most + 1);
    let err = inflight.try_acquire(too_many.clone()).unwrap_err();
    assert_eq!(
        err.reason(),
        RejectReason::NeverFits {
            asked: most + 1,
            most
        }
    );
    assert!(err.to_string().contains(&format!("at most {most}")));
    assert!(matches!(
        poll(&mut inflight.acquire(too_many)),
        Poll::Ready(Err(e)) if e == err
    ));
    let zero = inflight
        .try_acquire(Request::tenant("x").tokens(0))
        .unwrap_err();
    assert_eq!(zero.reason(), RejectReason::ZeroSeats);
    assert!(
        inflight
            .try_acquire(Request::tenant("x").tokens(most))
            .is_ok()
    );
}

#[test]
fn a_queue_of_zero_refuses_every_wait() {
    let inflight = limit(1, 1, 1, 0);
    let _held = inflight.try_acquire("x").unwrap();
    assert!(matches!(
        poll(&mut inflight.acquire("x")),
        Poll::Ready(Err(e)) if e.reason() == RejectReason::QueueFull { max_queue: 0 }
    ));
}

#[test]
fn a_user_takes_from_its_subset_of_the_tenants_pools() {
    let inflight = InFlight::builder()
        .concurrency(8)
        .pools(8)
        .per_tenant(4)
        .per_user(1)
        .build()
        .unwrap();
    let user = Request::tenant("acme").user("alice");
    let pool = inflight.shard(user.clone()).buckets()[0];
    assert!(inflight.shard("acme").contains(pool));
    let held = inflight.try_acquire(user.clone()).unwrap();
    assert_eq!(held.pools().collect::<Vec<_>>(), [(pool, 1)]);
    assert!(
        inflight.try_acquire(user).is_err(),
        "its one pool of one permit"
    );
    assert!(
        inflight.try_acquire("acme").is_ok(),
        "the tenant has three more"
    );
}

#[test]
fn a_permit_is_given_back_while_a_panic_unwinds() {
    let inflight = limit(2, 1, 1, 8);
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _permit = inflight.try_acquire("x").unwrap();
        panic!("the call failed");
    }));
    assert!(caught.is_err());
    assert_eq!(inflight.available(), 2);
}

#[test]
fn owned_permits_and_waits_give_back_as_the_borrowed_ones() {
    let inflight = std::sync::Arc::new(limit(1, 1, 1, 8));
    let poll_owned = |acquire: &mut AcquireOwned| {
        Pin::new(acquire).poll(&mut Context::from_waker(Waker::noop()))
    };
    let held = inflight.try_acquire_owned("x").unwrap();
    assert_eq!(
        inflight.try_acquire_owned("x").unwrap_err().reason(),
        RejectReason::Busy
    );
    let mut gone = inflight.acquire_owned("x");
    let mut next = inflight.acquire_owned("x");
    assert!(poll_owned(&mut gone).is_pending() && poll_owned(&mut next).is_pending());
    drop(held); // handed to `gone`, which never sees it
    drop(gone); // so it goes to `next`
    let Poll::Ready(Ok(got)) = poll_owned(&mut next) else {
        panic!("served by the permit `gone` gave back");
    };
    assert_eq!(got.pools().collect::<Vec<_>>(), [(0, 1)]);
    drop((got, next));
    assert_eq!((inflight.available(), inflight.waiting(0)), (1, 0));
    // Dropped while waiting: it leaves its queue.
    let held = inflight.try_acquire_owned("x").unwrap();
    let mut gone = inflight.acquire_owned("x");
    assert!(poll_owned(&mut gone).is_pending());
    drop(gone);
    assert_eq!(inflight.waiting(0), 0);
    drop(held);
    assert_eq!(std::sync::Arc::strong_count(&inflight), 1);
    // Refusals are the same too.
    let zero = inflight.acquire_owned(Request::tenant("x").tokens(0));
    assert!(matches!(
        poll_owned(&mut { zero }),
        Poll::Ready(Err(e)) if e.reason() == RejectReason::ZeroSeats
    ));
}

#[test]
fn an_owned_permit_is_given_back_while_a_panic_unwinds() {
    let inflight = std::sync::Arc::new(limit(2, 1, 1, 8));
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _permit = inflight.try_acquire_owned("x").unwrap();
        panic!("the call failed");
    }));
    assert!(caught.is_err());
    assert_eq!(inflight.available(), 2);
}

#[test]
fn a_handle_takes_and_waits_as_the_request_would_in_the_same_queues() {
    let inflight = limit(4, 4, 2, 8);
    let handle = inflight.handle(Request::tenant("x").tokens(2));
    assert_eq!(handle.shard(), inflight.shard("x"));
    let held = handle.try_acquire().unwrap();
    assert_eq!(held.seats(), 2);
    assert_eq!(
        handle.try_acquire().unwrap_err().reason(),
        RejectReason::Busy
    );
    // Its wait queues behind the keyed one, which came first.
    let mut keyed = inflight.acquire(Request::tenant("x").tokens(2));
    let mut by_handle = handle.acquire();
    assert!(poll(&mut keyed).is_pending());
    assert!(poll(&mut by_handle).is_pending());
    drop(held);
    let Poll::Ready(Ok(first)) = poll(&mut keyed) else {
        panic!("the keyed waiter came first");
    };
    assert!(poll(&mut by_handle).is_pending());
    drop(first);
    assert!(matches!(poll(&mut by_handle), Poll::Ready(Ok(_))));
    // A request that can never be served is refused by every acquire.
    let never = inflight.handle(Request::tenant("x").tokens(3));
    let want = RejectReason::NeverFits { asked: 3, most: 2 };
    assert_eq!(never.try_acquire().unwrap_err().reason(), want);
    assert!(matches!(poll(&mut never.acquire()), Poll::Ready(Err(r)) if r.reason() == want));
    let zero = inflight.handle(Request::tenant("x").tokens(0));
    assert_eq!(
        zero.try_acquire().unwrap_err().reason(),
        RejectReason::ZeroSeats
    );
}

#[test]
fn a_permit_shows_the_seats_it_holds_in_each_pool() {
    let inflight = std::sync::Arc::new(limit(8, 4, 2, 0));
    let tenant = tenant_on(&inflight, &[1, 3]);
    // In the shard's order, which the test does not fix.
    let either = |shown: String, a: &str, b: &str| {
        assert!(shown == a || shown == b, "{shown}");
    };
    // Four seats take both pools whole.
    let permit = inflight
        .try_acquire(Request::tenant(&tenant).tokens(4))
        .unwrap();
    either(
        format!("{permit:?}"),
        "Permit { pools: [(1, 2), (3, 2)] }",
        "Permit { pools: [(3, 2), (1, 2)] }",
    );
    drop(permit);
    // Three: two from the first pool, one from the other.
    let owned = inflight
        .try_acquire_owned(Request::tenant(&tenant).tokens(3))
        .unwrap();
    let shown = format!("{owned:?}");
    assert!(shown.starts_with("OwnedPermit { pools: ["), "{shown}");
    assert!(shown.contains(", 2)") && shown.contains(", 1)"), "{shown}");
}
