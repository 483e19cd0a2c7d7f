//! The in-flight borrowing number for idle pools, measured. README ("1 in
//! C(N, k) · C(N − k, d) with a reserve, when it holds all it can"),
//! src/guide/inflight.md ("1 in 28 · C(6, 2) = 420 of them are starved ...
//! as long as the pools they would borrow from have permits idle") and
//! blast::BorrowingRadius::hung (p_starved = 1/420) state it; `shuffle-lab
//! simulate --concurrency --borrow-from` measures only the busy case (1/28),
//! and tests/blast_hung.rs counts a model of the pools, not a real
//! InFlight. This test measures it on a real InFlight: tenant-0 holds all it
//! can (14 of 40), every other pool idle, and each other tenant asks once.

use shuffle_limiter::blast::BlastRadius;
use shuffle_limiter::inflight::InFlight;

#[test]
fn with_idle_pools_only_the_tenants_with_its_shard_and_spill_set_are_starved() {
    let hung = BlastRadius::new(8, 2)
        .unwrap()
        .borrowing(2, 0.5)
        .unwrap()
        .hung(40, 40)
        .unwrap();
    let (salts, tenants) = (100u64, 400u32);
    let mut starved = 0u64;
    for salt in 0..salts {
        let inflight = InFlight::builder()
            .concurrency(40)
            .pools(8)
            .per_tenant(2)
            .borrow_from(2)
            .lender_reserve(0.5)
            .salt(salt.to_le_bytes())
            .build()
            .unwrap();
        let held: Vec<_> = std::iter::from_fn(|| inflight.try_acquire("tenant-0").ok()).collect();
        assert_eq!(held.len(), 14, "salt {salt}");
        let h = inflight.shard("tenant-0");
        for i in 1..tenants {
            let t = format!("tenant-{i}");
            let s = inflight.shard(t.as_str());
            let twin = s.same_set(&h) && s.spill().iter().all(|x| h.spill().contains(x));
            let ok = inflight.try_acquire(t.as_str()).is_ok(); // the permit is dropped at once
            assert_eq!(
                !ok,
                twin,
                "salt {salt} {t}: {:?}+{:?}",
                s.buckets(),
                s.spill()
            );
            starved += u64::from(!ok);
        }
    }
    let trials = (salts * u64::from(tenants - 1)) as f64;
    let within = |p: f64| {
        let (mean, sigma) = (trials * p, (trials * p * (1.0 - p)).sqrt());
        ((starved as f64 - mean).abs() <= 4.0 * sigma, mean, sigma)
    };
    let (ok, mean, sigma) = within(hung.p_starved());
    assert!(
        ok,
        "{starved} starved of {trials}: 1/420 predicts {mean:.1} ± {sigma:.1}"
    );
    // And it is not the busy number, 1 in 28.
    assert!(!within(hung.p_starved_busy()).0);
}
