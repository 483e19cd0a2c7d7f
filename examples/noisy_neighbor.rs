//! The main job: one budget, 400 tenants, one of them abusive, three designs.
//!
//! The same budget (800 requests/s, burst 800) is handed out three ways:
//! one shared bucket, fixed shards (8 buckets' worth in 4 disjoint pairs) and
//! shuffle sharding (8 buckets, 2 per tenant). One tenant floods at 10 000
//! requests/s; the other 399 each send one request a second. Time is a
//! `ManualClock`, so a minute of traffic runs in well under a second.
//!
//! Each tenant is then counted as fully down (under half its requests
//! granted), degraded (served, but with some of its buckets drained by the
//! flood when it asked) or unaffected, beside what the math predicts.
//!
//! ```text
//! cargo run --release --example noisy_neighbor
//! ```

use std::time::Duration;

use shuffle_limiter::blast::{BlastRadius, Impact};
use shuffle_limiter::{ConfigError, ManualClock, Quota, ShardedLimiter};

const TENANTS: usize = 400;
const SECONDS: u32 = 60;
const FLOOD_PER_MS: u32 = 10;

/// What happened to the tenants other than the noisy one.
#[derive(Default)]
struct Outcome {
    down: u32,
    degraded: u32,
    unaffected: u32,
}

fn simulate(limiter: &ShardedLimiter<ManualClock>) -> Outcome {
    let clock = limiter.clock();
    let names: Vec<String> = (0..TENANTS).map(|t| format!("tenant-{t}")).collect();
    let tenants: Vec<_> = names.iter().map(|n| limiter.tenant(n)).collect();
    let (noisy, others) = tenants.split_first().expect("at least one tenant");
    let mut granted = vec![0u32; others.len()];
    let mut drained_seen = vec![0u32; others.len()];
    for ms in 0..SECONDS * 1_000 {
        clock.advance(Duration::from_millis(1));
        for _ in 0..FLOOD_PER_MS {
            let _ = noisy.check();
        }
        for (i, tenant) in others.iter().enumerate() {
            // Each tenant asks once a second, on its own phase.
            if !(ms + i as u32 * 397).is_multiple_of(1_000) {
                continue;
            }
            let snapshot = limiter.snapshot();
            let shard = tenant.shard();
            let drained = shard.buckets().iter();
            if drained
                .filter(|&&b| snapshot[b as usize].available() == 0)
                .count()
                > 0
            {
                drained_seen[i] += 1;
            }
            granted[i] += u32::from(tenant.check().is_ok());
        }
    }
    let mut outcome = Outcome::default();
    for (ok, drained) in granted.iter().zip(&drained_seen) {
        if *ok * 2 < SECONDS {
            outcome.down += 1;
        } else if *drained * 2 >= SECONDS {
            outcome.degraded += 1;
        } else {
            outcome.unaffected += 1;
        }
    }
    outcome
}

fn limiter(buckets: u32, per_tenant: u32) -> Result<ShardedLimiter<ManualClock>, ConfigError> {
    ShardedLimiter::builder()
        .quota(Quota::per_second(800).with_burst(800))
        .buckets(buckets)
        .per_tenant(per_tenant)
        .clock(ManualClock::new())
        .build()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let math = BlastRadius::new(8, 2)?.tenants(TENANTS as u64);
    let fixed = math
        .fixed_shards
        .ok_or("k divides N here, so fixed shards exist")?;
    let designs = [
        // One bucket holding the whole budget.
        ("one shared bucket", limiter(1, 1)?, math.shared_pool),
        // 4 disjoint groups, each with 2/8 of the budget: a bucket of 1 in 4.
        ("fixed shards of 2", limiter(4, 1)?, fixed),
        ("shuffle sharding", limiter(8, 2)?, math.shuffle_sharded),
    ];
    println!(
        "{TENANTS} tenants share 800 req/s; tenant-0 floods at {} req/s, the others send 1 req/s, for {SECONDS} s.\n",
        FLOOD_PER_MS * 1_000
    );
    println!(
        "{:<20} {:>18} {:>18} {:>18}",
        "design", "fully down", "degraded", "unaffected"
    );
    println!(
        "{:<20} {:>18} {:>18} {:>18}",
        "", "seen (predicted)", "seen (predicted)", "seen (predicted)"
    );
    for (name, limiter, predicted) in &designs {
        let seen = simulate(limiter);
        let Impact {
            fully_down,
            degraded,
            unaffected,
        } = *predicted;
        println!(
            "{name:<20} {:>18} {:>18} {:>18}",
            format!("{} ({fully_down:.1})", seen.down),
            format!("{} ({degraded:.1})", seen.degraded),
            format!("{} ({unaffected:.1})", seen.unaffected),
        );
    }
    println!(
        "\nShuffle sharding: only the tenants holding tenant-0's exact pair of buckets \
         (1 in C(8,2) = 28) go down with it."
    );
    Ok(())
}
