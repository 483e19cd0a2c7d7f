//! One tenant floods a limiter that lends (N = 8, k = 2, d = 2, r = 0.5,
//! 400 tenants) on `ManualClock`: every tenant whose shard differs from the
//! flooder's keeps at least 99 % of its requests, and the tenants cut off
//! entirely are as many as `blast` predicts, counted over many salts.
//!
//! The scene, the same in every test:
//! - R = 1000/s, B = 1000: 8 buckets of 125 tokens refilling at 125/s, the
//!   reserve half of that, 62.5 tokens.
//! - The flooder asks at 50 times its fair share, the k · R / N = 250/s its
//!   own buckets sustain: 12,500/s, so 1,250 requests in each step of
//!   100 ms. It goes first in every step, the worst order for the others.
//! - Each of the 399 other tenants sends 1 request a second (R / 1000),
//!   staggered over the steps. Their total, 0.4 R, leaves room for what
//!   the flooder takes, between k / N and (k + d) / N of R, so this is a
//!   flood test and not an overload: only the flood can empty a bucket. (A
//!   bucket carries more than its eighth of the light demand, because
//!   tenants whose other own bucket the flood empties draw on it alone.
//!   Measured over 3 salts and 200 s: at 0.67 R of light demand every
//!   tenant off the flooder's shard still got all its requests, with
//!   d = 0, 2 or 6; at 0.8 R some got under 99 % with d = 0 too.)

use std::time::Duration;

use shuffle_limiter::blast::BlastRadius;
use shuffle_limiter::{ManualClock, Quota, Request, Shard, ShardedLimiter};

const BUCKETS: u32 = 8;
const PER_TENANT: u32 = 2;
const TENANTS: u32 = 400;
const RATE: u32 = 1_000;
const STEP: Duration = Duration::from_millis(100);
/// The flooder's requests per step: 50 × 250/s × 100 ms.
const FLOOD_PER_STEP: u32 = 1_250;
/// A light tenant asks once every this many steps: once a second.
const EVERY: u32 = 10;
/// A tenant granted less than this share of its requests counts as fully
/// down. (Under this scene such a tenant is granted nothing at all.)
const DOWN_BELOW: f64 = 0.05;

/// What one tenant other than the flooder got.
struct Light {
    shard: Shard,
    asked: u32,
    granted: u32,
}

impl Light {
    fn share(&self) -> f64 {
        f64::from(self.granted) / f64::from(self.asked)
    }
}

/// One flood: `tenant-0` floods, `tenant-1` … `tenant-399` ask lightly, for
/// `seconds` of manual time.
fn flood(salt: u64, spill: u32, reserve: f64, seconds: u32) -> (Shard, Vec<Light>) {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(RATE).with_burst(RATE))
        .buckets(BUCKETS)
        .per_tenant(PER_TENANT)
        .borrow_from(spill)
        .lender_reserve(reserve)
        .salt(salt.to_le_bytes())
        .tenant_cache(0)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let flooder = limiter.handle("tenant-0");
    let tenants: Vec<_> = (1..TENANTS)
        .map(|i| limiter.handle(Request::tenant(format!("tenant-{i}"))))
        .collect();
    let mut lights: Vec<Light> = tenants
        .iter()
        .map(|t| Light {
            shard: t.shard(),
            asked: 0,
            granted: 0,
        })
        .collect();
    for step in 0..seconds * (1_000 / STEP.as_millis() as u32) {
        // A request denied at this instant is followed by more denials at
        // the same instant (nothing refills in between), so the flooder's
        // remaining requests of the step are denied without asking.
        for _ in 0..FLOOD_PER_STEP {
            if flooder.check().is_err() {
                break;
            }
        }
        for (i, (tenant, light)) in tenants.iter().zip(&mut lights).enumerate() {
            if (step + i as u32).is_multiple_of(EVERY) {
                light.asked += 1;
                light.granted += u32::from(tenant.check().is_ok());
            }
        }
        limiter.clock().advance(STEP);
    }
    (flooder.shard(), lights)
}

/// Whether `light` has the flooder's shard and spill set, as sets.
fn twin(flooder: &Shard, light: &Shard) -> bool {
    let same = |a: &[u32], b: &[u32]| a.len() == b.len() && a.iter().all(|x| b.contains(x));
    same(flooder.buckets(), light.buckets()) && same(flooder.spill(), light.spill())
}

/// Floods over `salts` salts: the tenants granted less than
/// [`DOWN_BELOW`], counted, and the smallest share of its requests any
/// tenant whose shard is not the flooder's was granted.
fn count_down(salts: std::ops::Range<u64>, spill: u32, reserve: f64, seconds: u32) -> (u64, f64) {
    let (mut down, mut worst) = (0, 1.0f64);
    for salt in salts {
        let (flooder, lights) = flood(salt, spill, reserve, seconds);
        for light in &lights {
            if !light.shard.same_set(&flooder) {
                worst = worst.min(light.share());
            }
        }
        down += lights.iter().filter(|l| l.share() < DOWN_BELOW).count() as u64;
    }
    (down, worst)
}

/// `count` is within 4 σ of the binomial expectation for `runs` floods,
/// each with 399 others down with probability `p`.
fn within_4_sigma(count: u64, runs: u64, p: f64) -> Result<(), String> {
    let trials = (runs * u64::from(TENANTS - 1)) as f64;
    let (mean, sigma) = (trials * p, (trials * p * (1.0 - p)).sqrt());
    let z = (count as f64 - mean) / sigma;
    if z.abs() <= 4.0 {
        Ok(())
    } else {
        Err(format!(
            "{count} fully down over {runs} floods, expected {mean:.1} ± {sigma:.1} (z = {z:.1})"
        ))
    }
}

#[test]
fn every_tenant_off_the_flooders_shard_keeps_99_percent_over_minutes() {
    // 200 requests each, so 99 % allows 2 denials; three assignments.
    for salt in 0..3 {
        let (flooder, lights) = flood(salt, 2, 0.5, 20 * EVERY);
        let mut worst = 1.0f64;
        for light in lights.iter().filter(|l| !l.shard.same_set(&flooder)) {
            assert_eq!(light.asked, 200);
            worst = worst.min(light.share());
        }
        assert!(
            worst >= 0.99,
            "salt {salt}: a tenant got {worst} of its requests"
        );
        // The tenants that are down are exactly the flooder's twins.
        for light in &lights {
            assert_eq!(
                light.share() < DOWN_BELOW,
                twin(&flooder, &light.shard),
                "salt {salt}: {:?} + {:?}, granted {} of {}",
                light.shard.buckets(),
                light.shard.spill(),
                light.granted,
                light.asked
            );
        }
    }
}

#[test]
fn the_fully_down_count_matches_the_blast_formula_over_many_salts() {
    // One flood of 400 tenants expects 399/420 ≈ 0.95 fully down: too few
    // to tell formulas apart, so count over many assignments (salts).
    let runs = 200;
    let b = BlastRadius::new(BUCKETS, PER_TENANT).unwrap();
    let lending = b.borrowing(2, 0.5).unwrap();
    let (down, worst) = count_down(0..runs, 2, 0.5, 10);
    assert!(
        worst >= 0.99,
        "a tenant off the flooder's shard got {worst}"
    );
    let expected = lending.tenants(u64::from(TENANTS)).fully_down * runs as f64;
    assert!((expected - 190.0).abs() < 1e-9, "{expected}");
    within_4_sigma(down, runs, lending.p_fully_down()).unwrap();
    // The count is not the one without borrowing, 1 in C(8, 2) = 28 ...
    assert!(within_4_sigma(down, runs, b.p_identical()).is_err());
    // ... nor the one without a reserve, 1 in C(8, 4) = 70.
    let no_reserve = b.borrowing(2, 0.0).unwrap();
    assert!(within_4_sigma(down, runs, no_reserve.p_fully_down()).is_err());
}

#[test]
fn without_borrowing_or_without_a_reserve_the_formula_changes_and_the_count_follows() {
    // The same scene, fewer salts: these counts are 15 to 35 times larger.
    let runs = 30;
    let b = BlastRadius::new(BUCKETS, PER_TENANT).unwrap();
    let lending = b.borrowing(2, 0.5).unwrap();
    let (off, worst) = count_down(100..100 + runs, 0, 0.5, 10);
    assert!(worst >= 0.99, "without borrowing: {worst}");
    within_4_sigma(off, runs, b.p_identical()).unwrap();
    assert!(within_4_sigma(off, runs, lending.p_fully_down()).is_err());
    // Without a reserve the flooder empties its spill buckets too, and
    // their owners race it for every token: down are those whose own and
    // spill buckets together are the flooder's four, 1 in C(8, 4).
    let no_reserve = b.borrowing(2, 0.0).unwrap();
    let (bare, worst) = count_down(200..200 + runs, 2, 0.0, 10);
    within_4_sigma(bare, runs, no_reserve.p_fully_down()).unwrap();
    // And the 99 % no longer holds: owners of a bucket the flooder
    // borrows from, whose other bucket it owns, are cut off too.
    assert!(worst < DOWN_BELOW, "without a reserve: {worst}");
    assert!(within_4_sigma(bare, runs, lending.p_fully_down()).is_err());
}
