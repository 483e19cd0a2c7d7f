//! A limiter whose N the tests in `tests/live_buckets*.rs` change, and
//! what its buckets hold.

use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};

/// `quota` over `buckets` buckets, with room for `max`, k = 2.
pub(crate) fn limiter(
    quota: Quota,
    buckets: u32,
    max: u32,
) -> (ShardedLimiter<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = ShardedLimiter::builder()
        .quota(quota)
        .buckets(buckets)
        .max_buckets(max)
        .per_tenant(2)
        .salt("live")
        .clock(clock.clone())
        .build()
        .unwrap();
    (limiter, clock)
}

/// Tokens each bucket holds now, bucket by bucket.
pub(crate) fn held(limiter: &ShardedLimiter<ManualClock>) -> Vec<u64> {
    limiter.snapshot().iter().map(|b| b.available()).collect()
}
