//! A loop of checks and nothing else, for counting the instructions of one
//! check under callgrind, where counts do not depend on the machine's load
//! (`scripts/instructions`, BENCHMARKS.md):
//!
//! ```text
//! cargo run --release -p integration --no-default-features --example check_loop -- 100000 handle
//! ```
//!
//! Its arguments are the number of checks and what each one is: `handle`
//! (a tenant handle's `check()`), `k4` (the same with k = 4), `keyed`
//! (`check(&str)` of one cached tenant) or `governor` (governor's direct
//! `check()`, the baseline); the default limiter (N = 8, k = 2) with a
//! budget of 10⁹/s, so that every check is granted, as in
//! `benches/limiter.rs`. `denied` is a tenant handle's `check()` against a
//! budget of 8/s, drained first, so that every check is denied (a flooding
//! tenant's common case).

use std::hint::black_box;
use std::num::NonZeroU32;

use governor::{Quota as GQuota, RateLimiter};
use shuffle_limiter::{Quota, ShardedLimiter};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(checks), Some(kind)) = (args.next().and_then(|n| n.parse().ok()), args.next()) else {
        eprintln!("usage: check_loop CHECKS handle|k4|keyed|denied|governor");
        std::process::exit(2);
    };
    let budget = Quota::per_second(1_000_000_000);
    let limiter = ShardedLimiter::builder().quota(budget).build();
    let wide = ShardedLimiter::builder()
        .quota(budget)
        .per_tenant(4)
        .build();
    let (limiter, wide) = (limiter.expect("valid"), wide.expect("valid"));
    let (tenant, four) = (limiter.handle("tenant-a"), wide.handle("tenant-a"));
    let governor = RateLimiter::direct(GQuota::per_second(
        NonZeroU32::new(1_000_000_000).expect("non-zero"),
    ));
    let mut granted = 0u64;
    // One loop per kind, so that each loop is the check alone.
    match kind.as_str() {
        "handle" => {
            for _ in 0..checks {
                granted += u64::from(black_box(&tenant).check().is_ok());
            }
        }
        "k4" => {
            for _ in 0..checks {
                granted += u64::from(black_box(&four).check().is_ok());
            }
        }
        "denied" => {
            let flooded = ShardedLimiter::builder()
                .quota(Quota::per_second(8))
                .build()
                .expect("valid");
            let tenant = flooded.handle("tenant-a");
            while tenant.check().is_ok() {}
            for _ in 0..checks {
                granted += u64::from(black_box(&tenant).check().is_ok());
            }
        }
        "governor" => {
            for _ in 0..checks {
                granted += u64::from(black_box(&governor).check().is_ok());
            }
        }
        _ => {
            for _ in 0..checks {
                granted += u64::from(limiter.check(black_box("tenant-a")).is_ok());
            }
        }
    }
    println!("{granted} of {checks} granted");
}
