//! Every interleaving of a few concurrent checks, model-checked with loom.
//!
//! ```text
//! RUSTFLAGS="--cfg shuffle_limiter_loom" cargo test --release --test loom
//! ```
#![cfg(shuffle_limiter_loom)]

use loom::thread;
use shuffle_limiter::{Assignment, DenialReason, ManualClock, Quota, Request, ShardedLimiter};

#[path = "support/loom_model.rs"]
mod loom_model;
use loom_model::{model, model_bounded};

fn limiter(quota: Quota, n: u32, k: u32, cache: usize) -> ShardedLimiter<ManualClock> {
    ShardedLimiter::builder()
        .quota(quota)
        .buckets(n)
        .per_tenant(k)
        .tenant_cache(cache)
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

#[test]
fn one_token_is_granted_once() {
    model(|| {
        let limiter = loom::sync::Arc::new(limiter(Quota::per_second(1), 1, 1, 0));
        let other = limiter.clone();
        let t = thread::spawn(move || other.check("a").is_ok());
        let here = limiter.check("a").is_ok();
        let there = t.join().unwrap();
        assert!(here ^ there, "exactly one of the two checks is granted");
    });
}

#[test]
fn two_buckets_pay_two_racing_checks_once_each() {
    model(|| {
        // Two buckets of one token each, both the tenant's.
        let limiter = loom::sync::Arc::new(limiter(Quota::per_second(2), 2, 2, 0));
        let other = limiter.clone();
        let t = thread::spawn(move || other.check("a").map(|g| g.bucket()));
        let here = limiter.check("a").map(|g| g.bucket());
        let there = t.join().unwrap();
        let (Ok(a), Ok(b)) = (here, there) else {
            panic!("two tokens, two checks: both must be granted ({here:?}, {there:?})");
        };
        assert_ne!(a, b, "each bucket's token is taken once");
        assert!(limiter.check("a").is_err(), "and nothing is left");
    });
}

#[test]
fn a_request_paid_by_two_buckets_is_all_or_nothing_against_a_racing_one() {
    model(|| {
        // Two buckets of two tokens, both the tenant's: 3 tokens need both,
        // 2 tokens take one. They cannot both be granted; whichever loses
        // takes nothing, and a pooled take that loses its race is given
        // back, so every token is granted once or still there.
        let limiter = loom::sync::Arc::new(limiter(Quota::per_second(4), 2, 2, 0));
        let other = limiter.clone();
        let t = thread::spawn(move || match other.check(Request::tenant("a").tokens(2)) {
            Ok(_) => 2,
            Err(denied) => {
                assert_eq!(denied.reason(), DenialReason::Limited, "2 tokens fit");
                0
            }
        });
        let here = match limiter.check(Request::tenant("a").tokens(3)) {
            Ok(grant) => {
                assert_eq!(grant.payments().len(), 2, "{grant:?}");
                3
            }
            Err(denied) => {
                assert_eq!(denied.reason(), DenialReason::Limited, "3 tokens fit");
                0
            }
        };
        let there = t.join().unwrap();
        assert_ne!(here + there, 5, "5 tokens granted out of 4");
        assert_eq!(here + there + limiter.remaining("a"), 4, "{here} + {there}");
    });
}

#[test]
fn a_check_racing_a_quota_change_is_decided_under_one_quota() {
    model(|| {
        // One bucket of one token, a token a second; the change keeps the
        // burst and halves the rate. A full bucket stays full, so the change
        // writes back the value a racing check read: the check must still
        // see that it raced, or it would pay half a token's worth under
        // the new quota.
        let limiter = loom::sync::Arc::new(limiter(Quota::per_second(1), 1, 1, 0));
        let other = limiter.clone();
        let t = thread::spawn(move || other.check("a").is_ok());
        limiter
            .set_quota(Quota::new(1, std::time::Duration::from_secs(2)))
            .unwrap();
        let here = u32::from(t.join().unwrap());
        // In either order, the check empties the bucket under one quota or
        // the other, and one more second refills half a token: nothing.
        limiter.clock().advance(std::time::Duration::from_secs(1));
        let after = u32::from(limiter.check("a").is_ok());
        assert!(here + after <= 1, "{here} + {after} grants of 1 token");
    });
}

#[test]
fn a_denial_racing_a_quota_change_names_a_wait_under_one_quota() {
    model(|| {
        // One bucket of two tokens, drained at 0: under 2 per second it has
        // room for one token at 0.5 s; under 2 per 4 s, which keeps it
        // empty, at 2 s. A denial that read the old split and the bucket
        // as the change left it would name 3.5 s.
        let limiter = loom::sync::Arc::new(limiter(Quota::per_second(2), 1, 1, 0));
        while limiter.check("a").is_ok() {}
        let other = limiter.clone();
        let t = thread::spawn(move || other.check("a").map(|_| ()).unwrap_err());
        limiter
            .set_quota(Quota::new(2, std::time::Duration::from_secs(4)))
            .unwrap();
        let wait = t.join().unwrap().retry_after();
        let (old, new) = (
            std::time::Duration::from_millis(500),
            std::time::Duration::from_secs(2),
        );
        assert!(wait == old || wait == new, "waits {wait:?}");
    });
}

#[test]
fn a_check_racing_a_change_of_n_never_takes_a_token_twice() {
    model(|| {
        // Two buckets of one token, a tenant's handle on bucket 1, and N cut
        // to 1 while it checks: bucket 1 goes (sealed), bucket 0 keeps its
        // one token, in a burst of 2 (kept as a share of the burst, it would
        // hold 2). Whatever the order, the check is decided under one N, on
        // that N's shard, and at most the 2 tokens there were are granted.
        let limiter = ShardedLimiter::builder()
            .quota(Quota::per_second(2))
            .buckets(2)
            .per_tenant(1)
            .tenant_cache(0)
            .clock(ManualClock::new())
            .build()
            .unwrap();
        let two = Assignment::new(2, 1, b"").unwrap();
        let tenant = (0..)
            .map(|t| format!("t{t}"))
            .find(|t| two.shard(t).buckets() == [1])
            .unwrap();
        let limiter = loom::sync::Arc::new(limiter);
        let (other, name) = (limiter.clone(), tenant.clone());
        let t = thread::spawn(move || u32::from(other.handle(&name).check().is_ok()));
        limiter.set_buckets(1).unwrap();
        let here = t.join().unwrap();
        let mut after = 0;
        while after < 3 && limiter.check(&tenant).is_ok() {
            after += 1;
        }
        assert!(here + after <= 2, "{here} + {after} grants of 2 tokens");
    });
}

/// A tenant cache of one set, looked up by two threads while one of them
/// fills it past its ways: every lookup returns the assignment's shard.
fn cache_race(n: u32, k: u32, tenants: &'static [&'static str]) {
    model_bounded(2, move || {
        let limiter = loom::sync::Arc::new(limiter(Quota::per_second(1024), n, k, 1));
        let reference = Assignment::new(n, k, b"").unwrap();
        assert_eq!(limiter.shard("a"), reference.shard("a"));
        let other = limiter.clone();
        let reference2 = reference.clone();
        let t = thread::spawn(move || {
            for key in ["a", "b"] {
                assert_eq!(other.shard(key), reference2.shard(key));
            }
        });
        for key in tenants {
            assert_eq!(limiter.shard(key), reference.shard(key));
        }
        t.join().unwrap();
    });
}

#[test]
fn the_shard_cache_never_returns_a_torn_or_foreign_shard() {
    // One word an entry, eight to the set: "a" and eight more overflow it.
    cache_race(64, 4, &["b", "c", "d", "e", "f", "g", "h", "i"]);
}

#[test]
fn a_shard_of_four_words_is_never_returned_torn() {
    // Four words an entry, two to the set: "c" overwrites one of "a" and "b"
    // word by word while the other thread reads them both.
    cache_race(1024, 8, &["b", "c"]);
}

mod inflight {
    //! The in-flight limit: acquire, release and a cancelled wait, racing.

    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use loom::sync::Arc;
    use loom::thread;
    use shuffle_limiter::inflight::InFlight;

    /// Notifies the polling thread when woken.
    struct Wake(loom::sync::Notify);

    impl std::task::Wake for Wake {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.notify();
        }
    }

    /// Polls `future` again only once it was woken: a lost wake-up blocks
    /// the thread for ever, which loom reports as a deadlock.
    fn block_on<F: Future>(future: F) -> F::Output {
        let wake = std::sync::Arc::new(Wake(loom::sync::Notify::new()));
        let waker = Waker::from(wake.clone());
        let mut future = pin!(future);
        loop {
            if let Poll::Ready(out) = future.as_mut().poll(&mut Context::from_waker(&waker)) {
                return out;
            }
            wake.0.wait();
        }
    }

    fn limit(concurrency: u32, pools: u32) -> Arc<InFlight> {
        let inflight = InFlight::builder()
            .concurrency(concurrency)
            .pools(pools)
            .per_tenant(pools)
            .tenant_cache(0)
            .build()
            .unwrap();
        Arc::new(inflight)
    }

    #[test]
    fn one_permit_is_taken_once() {
        super::model(|| {
            let inflight = limit(1, 1);
            let other = inflight.clone();
            let t = thread::spawn(move || other.try_acquire("a").map(|p| p.seats()).is_ok());
            let here = inflight.try_acquire("a").map(|p| p.seats()).is_ok();
            let there = t.join().unwrap();
            // Each drops its permit at once, so both may get it in turn, but
            // never both at the same time; in the end it is free again.
            assert!(here || there);
            assert_eq!(inflight.available(), 1);
        });
    }

    #[test]
    fn a_release_racing_a_waiter_as_it_queues_wakes_it() {
        super::model(|| {
            let inflight = limit(1, 1);
            let held = inflight.try_acquire("a").unwrap();
            let other = inflight.clone();
            let t = thread::spawn(move || {
                let permit = block_on(other.acquire("a")).unwrap();
                permit.seats()
            });
            drop(held);
            assert_eq!(t.join().unwrap(), 1);
            assert_eq!((inflight.available(), inflight.waiting(0)), (1, 0));
        });
    }

    #[test]
    fn a_cancelled_waiter_racing_a_release_leaks_nothing() {
        super::model(|| {
            let inflight = limit(1, 1);
            let held = inflight.try_acquire("a").unwrap();
            let other = inflight.clone();
            let t = thread::spawn(move || {
                let mut acquire = pin!(other.acquire("a"));
                let polled = acquire
                    .as_mut()
                    .poll(&mut Context::from_waker(Waker::noop()));
                matches!(polled, Poll::Ready(Ok(_)))
            });
            drop(held);
            t.join().unwrap();
            assert_eq!((inflight.available(), inflight.waiting(0)), (1, 0));
        });
    }

    #[test]
    fn a_borrower_racing_an_owner_never_takes_the_reserve() {
        super::model(|| {
            // Two pools of 2, one per tenant, each the other's spill pool,
            // lent above a reserve of 1. Tenant `a`'s own pool is full; it
            // borrows from `b`'s pool while `b` takes its own.
            let inflight = Arc::new(
                InFlight::builder()
                    .concurrency(4)
                    .pools(2)
                    .per_tenant(1)
                    .borrow_from(1)
                    .lender_reserve(0.5)
                    .tenant_cache(0)
                    .build()
                    .unwrap(),
            );
            let on = |pool: u32| {
                (0..)
                    .map(|t| format!("t{t}"))
                    .find(|t| inflight.shard(t).contains(pool))
                    .unwrap()
            };
            let (a, b) = (on(0), on(1));
            let full: Vec<_> = (0..2)
                .map(|_| inflight.try_acquire(a.as_str()).unwrap())
                .collect();
            let other = inflight.clone();
            let t = thread::spawn(move || {
                let first = other.try_acquire(a.as_str()).ok();
                let second = other.try_acquire(a.as_str()).ok();
                assert!(first.iter().chain(&second).all(|p| p.borrowed()));
                u32::from(first.is_some()) + u32::from(second.is_some())
            });
            let owner: Vec<_> = (0..2)
                .filter_map(|_| inflight.try_acquire(b.as_str()).ok())
                .collect();
            let lent = t.join().unwrap();
            assert!(lent <= 1, "{lent} lent of a pool of 2 with a reserve of 1");
            assert!(!owner.is_empty(), "its owner keeps the reserve");
            drop((full, owner));
            assert_eq!(inflight.available(), 4);
        });
    }

    #[test]
    fn a_weighted_waiter_and_a_single_one_share_two_pools_without_excess() {
        super::model_bounded(2, || {
            // Two pools of one permit, both the tenant's: a waiter for both
            // seats and one for a single seat, while the holder of one
            // releases it. Both are served in the end, never together
            // beyond the two permits.
            let inflight = limit(2, 2);
            let held = inflight.try_acquire("a").unwrap();
            let other = inflight.clone();
            let t = thread::spawn(move || {
                let request = shuffle_limiter::Request::tenant("a").tokens(2);
                let permit = block_on(other.acquire(request)).unwrap();
                assert_eq!(other.available(), 0);
                permit.seats()
            });
            drop(held);
            assert_eq!(t.join().unwrap(), 2);
            assert_eq!(inflight.available(), 2);
        });
    }
}
