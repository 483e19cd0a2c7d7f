//! A loop of checks and nothing else, for counting the instructions of one
//! check under callgrind, where counts do not depend on the machine's load
//! (`scripts/instructions`, BENCHMARKS.md):
//!
//! ```text
//! cargo run --release -p integration --no-default-features --example check_loop -- 100000 handle
//! ```
//!
//! Its arguments are the number of checks and what each one is: `handle`
//! (a tenant handle's `check()`) or `keyed` (`check(&str)` of one cached
//! tenant); the default limiter (N = 8, k = 2) with a budget of 10⁹/s, so
//! that every check is granted, as in `benches/limiter.rs`.

use std::hint::black_box;

use shuffle_limiter::{Quota, ShardedLimiter};

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(checks), Some(kind)) = (args.next().and_then(|n| n.parse().ok()), args.next()) else {
        eprintln!("usage: check_loop CHECKS handle|keyed");
        std::process::exit(2);
    };
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(1_000_000_000))
        .build()
        .expect("the default limiter builds");
    let tenant = limiter.tenant("tenant-a");
    let mut granted = 0u64;
    // One loop per kind, so that each loop is the check alone.
    if kind == "handle" {
        for _ in 0..checks {
            granted += u64::from(black_box(&tenant).check().is_ok());
        }
    } else {
        for _ in 0..checks {
            granted += u64::from(limiter.check(black_box("tenant-a")).is_ok());
        }
    }
    println!("{granted} of {checks} granted");
}
