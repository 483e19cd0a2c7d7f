//! Refunds that cannot go where the grant came from: to a bucket a change of
//! N removed and brought back since (another generation of it), or to a
//! limiter with fewer buckets. Each gives back what fits, says what did not,
//! and never panics.

use std::time::Duration;

use shuffle_limiter::{ManualClock, Quota, Request, ShardedLimiter};

fn limiter(quota: Quota, buckets: u32, max: u32) -> ShardedLimiter<ManualClock> {
    ShardedLimiter::builder()
        .quota(quota)
        .buckets(buckets)
        .max_buckets(max)
        .per_tenant(2)
        .salt("refund")
        .clock(ManualClock::new())
        .build()
        .unwrap()
}

fn held(limiter: &ShardedLimiter<ManualClock>) -> Vec<u64> {
    limiter.snapshot().iter().map(|b| b.available()).collect()
}

#[test]
fn a_refund_never_revives_a_bucket_removed_and_added_again() {
    // 8 buckets of 10 tokens; drain the tenants whose shards lie in 4-7.
    let limiter = limiter(Quota::per_second(80).with_burst(80), 8, 8);
    let mut grants = Vec::new();
    for t in 0..200 {
        let name = format!("t{t}");
        if limiter.shard(&name).buckets().iter().all(|&b| b >= 4) {
            // Bounded: a limiter that grants past its burst fails the
            // count below instead of looping for ever.
            grants.extend((0..=80).map_while(|_| limiter.check(&name).ok()));
        }
    }
    assert_eq!(held(&limiter)[4..], [0, 0, 0, 0]);
    assert_eq!(grants.len(), 40);
    limiter.set_buckets(4).unwrap();
    limiter.set_buckets(8).unwrap();
    // The buckets 4-7 of now are not the ones that paid: nothing goes back.
    let mut gone = 0;
    for grant in grants {
        let refunded = limiter.refund(grant);
        assert_eq!(refunded.given(), 0);
        gone += refunded.gone();
    }
    assert_eq!(held(&limiter)[4..], [0, 0, 0, 0]);
    assert_eq!(gone, 40);
    // A grant of the new generation is refunded as usual.
    let name = (0..1_000_000)
        .map(|t| format!("t{t}"))
        .find(|t| limiter.shard(t).buckets().iter().all(|&b| b >= 4))
        .unwrap();
    limiter.clock().advance(std::time::Duration::from_secs(10));
    let before = limiter.remaining(&name);
    let grant = limiter.check(&name).unwrap();
    let refunded = limiter.refund(grant);
    assert_eq!((refunded.given(), refunded.gone()), (1, 0));
    assert_eq!(limiter.remaining(&name), before);
}

#[test]
fn a_refund_to_a_limiter_with_fewer_buckets_gives_back_what_fits() {
    let large = limiter(Quota::per_second(160).with_burst(160), 16, 16);
    let small = limiter(Quota::per_second(40).with_burst(40), 4, 4);
    let far = (0..1_000_000)
        .map(|t| format!("t{t}"))
        .find(|t| large.shard(t).buckets().iter().all(|&b| b >= 8))
        .unwrap();
    let grant = large.check(&far).unwrap();
    assert!(grant.bucket() >= 8);
    let refunded = small.refund(grant);
    assert_eq!((refunded.given(), refunded.gone()), (0, 1));
    // A weighted grant paid by two buckets: the one that fits is paid back.
    let near = (0..1_000_000)
        .map(|t| format!("t{t}"))
        .find(|t| {
            let buckets = large.shard(t).buckets().to_vec();
            buckets.iter().any(|&b| b < 4) && buckets.iter().any(|&b| b >= 4)
        })
        .unwrap();
    let grant = large.check(Request::tenant(&near).tokens(15)).unwrap();
    let fits: u32 = grant
        .payments()
        .iter()
        .filter(|p| p.bucket() < 4)
        .map(|p| p.tokens())
        .sum();
    let low = grant
        .payments()
        .iter()
        .find(|p| p.bucket() < 4)
        .unwrap()
        .bucket();
    // Drain the small limiter's bucket so the refund has room to land.
    let taker = (0..1_000_000)
        .map(|t| format!("s{t}"))
        .find(|t| small.shard(t).contains(low))
        .unwrap();
    let most = u64::from(small.quota().burst());
    let spent = (0..=most)
        .take_while(|_| small.check(&taker).is_ok())
        .count();
    assert!(spent as u64 <= most, "granted past the burst");
    let refunded = small.refund(grant);
    assert_eq!((refunded.given(), refunded.gone()), (fits, 15 - fits));
}

#[test]
fn a_refund_reaches_a_bucket_added_after_several_changes_of_n() {
    // Each change of N is a new version of the split; a bucket it adds is
    // born at that version, and a grant it pays afterwards is refunded to
    // it. Two changes are not enough to tell the version advancing by 2
    // (0, 2, 4) from one doubling (0, 0, 4): four are (8 against 12, so
    // such a bucket would look born after the grant it paid).
    let limiter = limiter(Quota::per_second(80).with_burst(80), 8, 8);
    for buckets in [4, 8, 4, 8] {
        limiter.set_buckets(buckets).unwrap();
    }
    let name = (0..1_000_000)
        .map(|t| format!("t{t}"))
        .find(|t| limiter.shard(t).buckets().iter().all(|&b| b >= 4))
        .unwrap();
    // Buckets added start empty: let them fill.
    limiter.clock().advance(std::time::Duration::from_secs(10));
    let before = limiter.remaining(&name);
    let grant = limiter.check(&name).unwrap();
    assert!(grant.bucket() >= 4);
    let refunded = limiter.refund(grant);
    assert_eq!((refunded.given(), refunded.gone()), (1, 0));
    assert_eq!(limiter.remaining(&name), before);
}

/// Promise (src/limiter/changing.rs, `refund`): gives back every token the
/// grant took, "never beyond its burst"; and a grant paid before a change
/// of quota may be refunded after it ("All grants minus all refunds still
/// obey R·t + B"). Refunding a large grant after a cut to a very long
/// period multiplies its tokens by the new interval without a bound: a
/// panic (debug) in `refund`.
#[test]
fn refund_after_a_cut_to_a_long_period_does_not_panic() {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(1_000_000_000)) // 1 bucket, 1 ns a token
        .buckets(1)
        .per_tenant(1)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let grant = limiter
        .check(Request::tenant("t").tokens(1_000_000_000))
        .unwrap();
    limiter
        .set_quota(Quota::with_period(1, Duration::from_nanos(1 << 62)))
        .unwrap();
    let refunded = limiter.refund(grant);
    assert_eq!(refunded.given() + refunded.gone(), 1_000_000_000);
}
