//! Every interleaving of a check, or a refund, with what changes the
//! buckets under it (a refund, a change of the quota, of N or of both, a
//! hold-off), model-checked with loom: the budget is never exceeded, a
//! refund never adds beyond a full bucket, and no token is granted twice.
//!
//! ```text
//! RUSTFLAGS="--cfg shuffle_limiter_loom" cargo test --release --test loom_changes
//! ```
#![cfg(shuffle_limiter_loom)]

use std::time::Duration;

use loom::sync::Arc;
use loom::thread;
use shuffle_limiter::upstream::HoldOff;
use shuffle_limiter::{Assignment, ManualClock, Quota, Request, ShardedLimiter};

#[path = "support/loom_model.rs"]
mod loom_model;
use loom_model::model;

/// `n` buckets (room for `max`), `k` a tenant, no tenant cache.
fn limiter(quota: Quota, n: u32, max: u32, k: u32) -> Arc<ShardedLimiter<ManualClock>> {
    let limiter = ShardedLimiter::builder()
        .quota(quota)
        .buckets(n)
        .max_buckets(max)
        .per_tenant(k)
        .tenant_cache(0)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    Arc::new(limiter)
}

/// A tenant whose one bucket among `n` is `bucket`.
fn tenant_on(n: u32, bucket: u32) -> String {
    let assignment = Assignment::new(n, 1, b"").unwrap();
    (0..)
        .map(|t| format!("t{t}"))
        .find(|t| assignment.shard(t).buckets() == [bucket])
        .unwrap()
}

/// Whole tokens in every bucket now, each checked against its burst.
fn total(limiter: &ShardedLimiter<ManualClock>) -> u64 {
    let buckets = limiter.snapshot();
    for bucket in &buckets {
        assert!(
            bucket.available() <= u64::from(bucket.burst()),
            "{bucket:?}"
        );
    }
    buckets.iter().map(|b| b.available()).sum()
}

#[test]
fn a_refund_racing_a_check_on_its_bucket_gives_back_once() {
    model(|| {
        // One bucket of two tokens, one of them granted: a check of the
        // other races the refund of the first. Whatever the order, the
        // check is granted and the refund gives its token back, once: one
        // token left, the check's being the other.
        let limiter = limiter(Quota::per_second(2), 1, 1, 1);
        let grant = limiter.check("a").unwrap();
        let other = limiter.clone();
        // The refund on the spawned thread: the other way round, loom's
        // search misses a refund that overwrites the check's take.
        let t = thread::spawn(move || other.refund(grant));
        let there = limiter.check("a").is_ok();
        let refunded = t.join().unwrap();
        assert!(there, "a token was left, and the refund only adds one");
        assert_eq!((refunded.given(), refunded.gone()), (1, 0));
        assert_eq!(total(&limiter), 1, "2 tokens, 1 granted, 1 refunded");
    });
}

#[test]
fn a_pooled_check_racing_a_change_to_the_same_quota_takes_no_token_twice() {
    model(|| {
        // Two buckets of two tokens, both the tenant's: 3 tokens need both.
        // The change writes every bucket back as it was (or as the check
        // left it): the check is granted once at most, and one that raced
        // it keeps its tokens taken and is denied, but never gains any.
        // Either way both buckets paid 3 once: one token left.
        let quota = Quota::per_second(4);
        let limiter = limiter(quota, 2, 2, 2);
        let other = limiter.clone();
        // The change on the spawned thread, the check on this one: so loom
        // reaches the change between the check's reads and its swaps
        // within one preemption (likewise below).
        let t = thread::spawn(move || other.set_quota(quota).unwrap());
        let here = match limiter.check(Request::tenant("a").tokens(3)) {
            Ok(grant) => {
                assert_eq!(grant.payments().len(), 2, "{grant:?}");
                3
            }
            Err(_) => 0,
        };
        t.join().unwrap();
        let left = limiter.remaining("a");
        assert!(here + left <= 4, "{here} granted, {left} left of 4");
        assert_eq!(left, 1, "{here} granted");
    });
}

#[test]
fn growing_n_racing_a_refund_of_a_grant_drawn_under_the_old_n_gives_it_back_once() {
    model(|| {
        // One bucket of four tokens (0.25 s each), three granted; N grows
        // to 2 (two tokens a bucket, 0.5 s each; the added one empty) while
        // one of the three is refunded. In either order bucket 0 ends full,
        // with 2: its 2 left, counted at the new pace, or its 1 left after
        // the change plus the refund at the new pace. A refund decided
        // under N = 1 and applied after the change gives back a 0.25 s
        // token of 0.5 s: 1 left.
        let limiter = limiter(Quota::per_second(4), 1, 2, 1);
        let mut grant = limiter.check(Request::tenant("a").tokens(3)).unwrap();
        let part = grant.part(1).unwrap();
        let other = limiter.clone();
        let t = thread::spawn(move || other.refund(part));
        limiter.set_buckets(2).unwrap();
        let refunded = t.join().unwrap();
        assert_eq!((refunded.given(), refunded.gone()), (1, 0));
        assert_eq!(total(&limiter), 2, "bucket 0 full at 2, bucket 1 empty");
    });
}

#[test]
fn a_refund_to_a_bucket_removed_and_added_again_gives_nothing() {
    model(|| {
        // Two buckets of one token; a grant from bucket 1, then N cut to 1
        // (bucket 1 sealed), then grown back to 2 while the grant is
        // refunded. Before the growth its bucket is gone; after it, bucket
        // 1 is another bucket, added empty, whose token was never taken.
        let limiter = limiter(Quota::per_second(2), 2, 2, 1);
        let grant = limiter.check(tenant_on(2, 1).as_str()).unwrap();
        assert_eq!(grant.bucket(), 1);
        limiter.set_buckets(1).unwrap();
        let other = limiter.clone();
        let t = thread::spawn(move || other.refund(grant));
        limiter.set_buckets(2).unwrap();
        let refunded = t.join().unwrap();
        assert_eq!((refunded.given(), refunded.gone()), (0, 1));
        assert_eq!(total(&limiter), 1, "bucket 0's token, bucket 1 empty");
    });
}

#[test]
fn a_hold_off_racing_a_check_leaves_no_token_before_its_instant() {
    model(|| {
        // One bucket of two tokens (0.5 s each), held off for 0.1 s while a
        // check takes both: the hold leaves the bucket at one token at
        // 0.1 s, or the check's debt where that is later. Either the check
        // came first (granted, nothing at 0.1 s) or the hold did (denied,
        // one token at 0.1 s); nothing at all before 0.1 s.
        let limiter = limiter(Quota::per_second(2), 1, 1, 1);
        let other = limiter.clone();
        // The hold-off on the spawned thread, as the refund above.
        let t = thread::spawn(move || other.hold_off(HoldOff::all(Duration::from_millis(100))));
        let there = 2 * u64::from(limiter.check(Request::tenant("a").tokens(2)).is_ok());
        t.join().unwrap();
        assert_eq!(
            total(&limiter),
            0,
            "{there} granted: a token before the instant"
        );
        limiter.clock().advance(Duration::from_millis(100));
        let at = total(&limiter);
        assert!(
            (there, at) == (2, 0) || (there, at) == (0, 1),
            "{there} granted, {at} at the instant"
        );
    });
}

#[test]
fn a_pooled_check_racing_a_quota_cut_is_decided_under_one_quota() {
    model(|| {
        // Two buckets of two tokens (0.5 s each), both the tenant's; the
        // rate is halved (1 s a token, the burst kept) while a check of 3
        // tokens pools them. Granted under either quota, the 3 are paid by
        // both and one token is left. Full buckets stay as they are under
        // the cut, so a pool drawn at the old pace still applies after it,
        // where its 1.5 s of the new 4 s leave 2 tokens: a check that did
        // so must see that it raced and go round again (it keeps its
        // tokens taken, and is denied with the 2 left).
        let limiter = limiter(Quota::per_second(4), 2, 2, 2);
        let other = limiter.clone();
        let cut = Quota::new(4, Duration::from_secs(2));
        let t = thread::spawn(move || other.set_quota(cut).unwrap());
        let here = u64::from(limiter.check(Request::tenant("a").tokens(3)).is_ok()) * 3;
        t.join().unwrap();
        let left = limiter.remaining("a");
        assert!(here + left <= 4, "{here} granted, {left} left of 4");
        assert!(here == 0 || left == 1, "{here} granted, {left} left");
    });
}

#[test]
fn a_check_racing_a_change_of_quota_and_n_is_decided_under_one_pair() {
    model(|| {
        // Two buckets of two tokens (0.5 s each), a tenant on bucket 0; the
        // quota and N change together to 1 a second over one bucket, which
        // keeps bucket 0's tokens up to its new burst of 1. Whichever came
        // first, once a granted check's bucket is drained under the new
        // quota it has no token again for 1 s. A check decided at the old
        // pace and applied after the change leaves half a token, whole at
        // 0.5 s: it must see that it raced and go round again (it keeps
        // that half token taken, and is denied).
        let limiter = limiter(Quota::per_second(4), 2, 2, 1);
        let tenant = tenant_on(2, 0);
        let (other, name) = (limiter.clone(), tenant.clone());
        let t = thread::spawn(move || u32::from(other.check(name.as_str()).is_ok()));
        limiter
            .set_quota_and_buckets(Quota::per_second(1), 1)
            .unwrap();
        let here = t.join().unwrap();
        let mut after = 0;
        while after < 3 && limiter.check(tenant.as_str()).is_ok() {
            after += 1;
        }
        assert!(here + after <= 2, "{here} + {after} grants");
        limiter.clock().advance(Duration::from_millis(500));
        let later = u32::from(limiter.check(tenant.as_str()).is_ok());
        assert!(
            here == 0 || later == 0,
            "{here} + {after} grants, and {later} 0.5 s later"
        );
    });
}

#[test]
fn a_pooled_check_racing_a_change_of_quota_and_n_takes_no_token_twice() {
    model(|| {
        // Two buckets of two tokens (0.5 s each, a capacity of 1 s), both
        // the tenant's, and a check of 3 that pools them; the quota goes to
        // 12 a second over 3 buckets of 4 tokens (0.25 s each, 1 s again).
        // A bucket that stays keeps its tokens: granted under either split,
        // the 3 are paid and one token is left, 4 in all, the burst before
        // the change. A bucket the pool emptied is empty under the new
        // split too, at the same arrival time: given back when the pool's
        // other bucket moved under it, it is full there, with 4 tokens.
        //
        // It fails so: the pool empties bucket 1 (0 → 1 s); the change
        // moves bucket 0, full, to 2 tokens of 4 (0 → 0.5 s) and bucket 1,
        // empty, to the same 1 s; the pool's swap of bucket 0 fails, and
        // its give-back finds bucket 1 at the 1 s it wrote and puts back 0
        // (full: 4 tokens). Going round, the check takes 3 of them: 3
        // granted, 3 left (2 + 1), where the burst was 4.
        let limiter = limiter(Quota::per_second(4), 2, 3, 2);
        let other = limiter.clone();
        let t = thread::spawn(move || {
            other
                .set_quota_and_buckets(Quota::per_second(12), 3)
                .unwrap()
        });
        let here = u64::from(limiter.check(Request::tenant("a").tokens(3)).is_ok()) * 3;
        t.join().unwrap();
        let left = total(&limiter);
        assert!(here + left <= 4, "{here} granted, {left} left of 4");
    });
}

#[test]
fn a_pooled_check_racing_a_cut_of_n_leaves_its_buckets_no_fuller() {
    model(|| {
        // Four buckets of two tokens (0.5 s each), a tenant on buckets 0
        // and 1, and a check of 3 that pools them while N is cut to 2
        // (four tokens a bucket, 0.25 s each). The two buckets stay and
        // keep the 4 tokens they held: at most 4 are granted or left. It
        // fails as the change of both above does (3 granted, 3 left): the
        // same change of N with the quota kept.
        let limiter = limiter(Quota::per_second(8), 4, 4, 2);
        let assignment = Assignment::new(4, 2, b"").unwrap();
        let tenant = (0..)
            .map(|t| format!("t{t}"))
            .find(|t| assignment.shard(t).buckets().iter().all(|&b| b < 2))
            .unwrap();
        let other = limiter.clone();
        let t = thread::spawn(move || other.set_buckets(2).unwrap());
        let here = u64::from(limiter.check(Request::tenant(&tenant).tokens(3)).is_ok()) * 3;
        t.join().unwrap();
        let left = total(&limiter);
        assert!(here + left <= 4, "{here} granted, {left} left of 4");
    });
}
