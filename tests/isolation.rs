//! `Limiter::isolation`: small quotas that leave few shards are reported, in
//! the report, in `Debug`, and (feature `metrics`) once through `tracing`.

use shuffle_limiter::{Quota, ShardedLimiter, WEAK_ISOLATION_SHARDS};

fn limiter(quota: Quota) -> ShardedLimiter {
    ShardedLimiter::builder().quota(quota).build().unwrap()
}

#[test]
fn a_one_token_quota_is_one_shared_bucket_and_says_so() {
    let limiter = limiter(Quota::per_second(1));
    let isolation = limiter.isolation();
    assert_eq!((isolation.buckets(), isolation.per_tenant()), (1, 1));
    assert_eq!(isolation.shards().to_string(), "1");
    assert_eq!(isolation.p_identical().to_string(), "1/1");
    assert!(isolation.is_weak());
    let shown = isolation.to_string();
    assert!(shown.contains("C(N, k) = 1 distinct shard,"), "{shown}");
    assert!(
        shown.contains("one bucket, shared by every tenant"),
        "{shown}"
    );
    let debug = format!("{limiter:?}");
    assert!(debug.contains("weak isolation"), "{debug}");
    assert!(debug.contains("count: 1,"), "{debug}");
}

#[test]
fn the_weak_threshold_is_ten_shards() {
    // The defaults pick N = min(8, B) and k = min(2, N).
    for (burst, shards, weak) in [
        (2, "1", true),   // C(2, 2)
        (3, "3", true),   // C(3, 2)
        (4, "6", true),   // C(4, 2)
        (5, "10", false), // C(5, 2)
        (8, "28", false), // C(8, 2)
        (1000, "28", false),
    ] {
        let isolation = limiter(Quota::per_minute(burst)).isolation();
        assert_eq!(isolation.shards().to_string(), shards, "B = {burst}");
        assert_eq!(isolation.is_weak(), weak, "B = {burst}");
        assert_eq!(
            isolation.to_string().contains("weak isolation"),
            weak,
            "{isolation}"
        );
    }
    assert_eq!(WEAK_ISOLATION_SHARDS, 10);
}

#[test]
fn the_per_tenant_ceiling_is_k_over_n_of_the_budget() {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_hour(3600).with_burst(100))
        .buckets(10)
        .per_tenant(3)
        .build()
        .unwrap();
    let isolation = limiter.isolation();
    assert_eq!(isolation.tenant_rate(), 1080.0);
    assert_eq!(isolation.tenant_burst(), 30.0);
    assert_eq!(isolation.bucket_share().to_string(), "3/10");
    assert_eq!(isolation.p_identical().to_string(), "1/120");
    let shown = isolation.to_string();
    assert!(
        shown.contains("at most 1080/h (k·R/N), 30 at once (k·B/N)"),
        "{shown}"
    );
    assert_eq!(isolation.blast_radius(), &limiter.blast_radius());
}

#[test]
fn the_default_tenant_cache_holds_what_the_readme_says() {
    // README: "sized for 100 000 active tenants by default: 150 000
    // entries".
    let limiter = limiter(Quota::per_second(100));
    assert_eq!(shuffle_limiter::DEFAULT_TENANT_CACHE, 100_000);
    let capacity = limiter.tenant_cache_capacity();
    assert_eq!(capacity, 150_000);
}

/// The isolation report of a limiter of `quota` over N = `n`, k = `k`.
fn shown(quota: Quota, n: u32, k: u32) -> String {
    let limiter = ShardedLimiter::builder()
        .quota(quota)
        .buckets(n)
        .per_tenant(k)
        .build()
        .unwrap();
    limiter.isolation().to_string()
}

#[test]
fn the_weak_isolation_message_says_what_to_change_for_this_config() {
    // Too small a burst for more buckets: raise it first.
    let s = shown(Quota::per_second(3), 3, 2);
    assert!(s.ends_with("raise the burst to at least 5 (each bucket needs a token) and use 5 buckets (N) or more"), "{s}");
    // Burst enough, buckets chosen too few.
    let s = shown(Quota::per_second(100), 3, 2);
    assert!(
        s.ends_with("fewer than 10 distinct shards: use 5 buckets (N) or more"),
        "{s}"
    );
    // Buckets enough, k at an edge: C(8, 1) = 8, C(8, 7) = 8.
    for k in [1, 7] {
        let s = shown(Quota::per_second(100), 8, k);
        assert!(
            s.ends_with("set per_tenant (k) nearer N/2, such as 2"),
            "{s}"
        );
    }
}

#[test]
fn the_weak_isolation_message_at_its_thresholds_says_what_is_still_missing() {
    // A burst of exactly 5 is enough for 5 buckets: only N is too small.
    let s = shown(Quota::per_second(5), 3, 2);
    assert!(
        s.ends_with("fewer than 10 distinct shards: use 5 buckets (N) or more"),
        "{s}"
    );
    // A burst of 4 is not.
    let s = shown(Quota::per_second(4), 3, 2);
    assert!(
        s.ends_with("raise the burst to at least 5 (each bucket needs a token) and use 5 buckets (N) or more"),
        "{s}"
    );
    // Exactly 5 buckets are enough for 10 shards, with k = 2 (C(5, 1) =
    // C(5, 4) = 5 are weak): only k is off.
    for k in [1, 4] {
        let s = shown(Quota::per_second(5), 5, k);
        assert!(s.contains("C(N, k) = 5 distinct shards"), "{s}");
        assert!(
            s.ends_with("fewer than 10 distinct shards: set per_tenant (k) nearer N/2, such as 2"),
            "{s}"
        );
    }
    assert!(!shown(Quota::per_second(5), 5, 2).contains("weak isolation"));
    // Four buckets are not enough for any k (C(4, 2) = 6).
    let s = shown(Quota::per_second(100), 4, 2);
    assert!(
        s.ends_with("fewer than 10 distinct shards: use 5 buckets (N) or more"),
        "{s}"
    );
}
