//! docs/assignment.md promises that "the spill set is a uniform
//! d-subset of the N − k buckets outside the shard, independent of which
//! k-subset the shard is" and that a user's subset is "a uniform j-subset
//! of the tenant's k buckets, independently per user". The numbers
//! 1/(C(N, k)·C(N − k, d)) (borrowing) and 1/C(k, j) (nested users) rest on
//! them, yet tests/assignment_properties.rs checks only the shard's
//! uniformity. Chi-square at p = 1e-6, as that file does (critical values
//! from the regularized upper incomplete gamma, checked against its table).

use std::collections::HashMap;

use shuffle_limiter::{ManualClock, Quota, Request, ShardedLimiter};

fn chi_square(observed: &[u64], expected: f64) -> f64 {
    observed
        .iter()
        .map(|&o| (o as f64 - expected).powi(2) / expected)
        .sum()
}

#[test]
fn the_pair_shard_spill_set_is_uniform_over_all_90_pairs_6_2_2() {
    // N = 6, k = 2, d = 2: C(6, 2) · C(4, 2) = 15 · 6 = 90 equally likely pairs.
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(600).with_burst(600))
        .buckets(6)
        .per_tenant(2)
        .borrow_from(2)
        .salt(b"review")
        .tenant_cache(0)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let tenants = 90_000u32;
    let mut cells: HashMap<(u32, u32), u64> = HashMap::new();
    for i in 0..tenants {
        let s = limiter.shard(format!("tenant-{i}"));
        let mask = |b: &[u32]| b.iter().fold(0u32, |m, &x| m | 1 << x);
        *cells
            .entry((mask(s.buckets()), mask(s.spill())))
            .or_default() += 1;
    }
    assert_eq!(cells.len(), 90, "every (shard, spill set) pair occurs");
    let observed: Vec<u64> = cells.values().copied().collect();
    let stat = chi_square(&observed, f64::from(tenants) / 90.0);
    assert!(stat < 167.347797, "89 df: chi-square {stat:.1}");
}

#[test]
fn a_users_subset_is_uniform_over_the_six_pairs_of_its_tenants_four() {
    // k = 4, j = 2: by the positions of the user's buckets in its tenant's
    // shard, over 300 tenants × 300 users; 6 patterns, 5 df.
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(800).with_burst(800))
        .buckets(8)
        .per_tenant(4)
        .per_user(2)
        .salt(b"review")
        .tenant_cache(0)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let mut patterns: HashMap<u32, u64> = HashMap::new();
    let mut total = 0u64;
    for t in 0..300 {
        let tenant = format!("tenant-{t}");
        let shard = limiter.shard(tenant.as_str());
        for u in 0..300 {
            let user = limiter.shard(Request::tenant(tenant.as_str()).user(format!("user-{u}")));
            let pattern = user.buckets().iter().fold(0u32, |m, b| {
                let pos = shard
                    .buckets()
                    .iter()
                    .position(|x| x == b)
                    .expect("inside its tenant's shard");
                m | 1 << pos
            });
            *patterns.entry(pattern).or_default() += 1;
            total += 1;
        }
    }
    assert_eq!(patterns.len(), 6);
    let observed: Vec<u64> = patterns.values().copied().collect();
    let stat = chi_square(&observed, total as f64 / 6.0);
    assert!(stat < 35.888187, "5 df: chi-square {stat:.1}, {patterns:?}");
}
