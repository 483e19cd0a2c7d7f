//! A limiter of the tests in `tests/`: `quota` over `n` buckets, `k` per
//! tenant, on a `ManualClock` the test moves.

use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};

pub(crate) fn make(quota: Quota, n: u32, k: u32) -> (ShardedLimiter<ManualClock>, ManualClock) {
    let clock = ManualClock::new();
    let limiter = ShardedLimiter::builder()
        .quota(quota)
        .buckets(n)
        .per_tenant(k)
        .clock(clock.clone())
        .build()
        .expect("valid configuration");
    (limiter, clock)
}
