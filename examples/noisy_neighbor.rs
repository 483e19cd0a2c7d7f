//! The main job: one budget, 400 tenants, one of them abusive, four designs.
//!
//! The same budget (800 requests/s, burst 800) is handed out four ways:
//! one shared bucket, fixed shards (8 buckets' worth in 4 disjoint pairs),
//! shuffle sharding (8 buckets, 2 per tenant) and shuffle sharding with
//! borrowing (the same, and 2 spill buckets per tenant that lend down to half
//! their burst). Time is a `ManualClock`, so both scenes, two simulated
//! minutes per design, run in well under a second.
//!
//! Scene 1, the noisy neighbour: tenant-0 floods at 10 000 requests/s; the
//! other 399 each send one request a second. Each of them is counted as fully
//! down (under half its requests granted), degraded (served, but with some of
//! its own buckets emptied by the flood, or lent down to their reserve, when
//! it asked) or unaffected, beside what the math (`blast`) predicts.
//!
//! Scene 2, a tenant alone: tenant-0 asks 10 000 times a second with nobody
//! else around, and uses the share of the budget its design lets it: all of
//! it with one bucket, k/N with shards, (k + d)/N with borrowing.
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
/// The budget: requests per second, and as many at once.
const RATE: u32 = 800;
/// The share of a bucket's burst borrowers leave to its owners (the
/// default, written out).
const RESERVE: f64 = 0.5;

/// One way of handing out the budget.
struct Design {
    name: &'static str,
    /// N: buckets the budget is split into.
    buckets: u32,
    /// k: buckets per tenant.
    per_tenant: u32,
    /// d: spill buckets a tenant may borrow from; 0 is no borrowing.
    borrow_from: u32,
}

const DESIGNS: [Design; 4] = [
    // One bucket holding the whole budget.
    Design::new("one shared bucket", 1, 1, 0),
    // 4 disjoint groups, each with 2/8 of the budget: a bucket of 1 in 4.
    Design::new("fixed shards of 2", 4, 1, 0),
    Design::new("shuffle sharding", 8, 2, 0),
    Design::new("shuffle + borrowing", 8, 2, 2),
];

impl Design {
    const fn new(name: &'static str, buckets: u32, per_tenant: u32, borrow_from: u32) -> Self {
        Design {
            name,
            buckets,
            per_tenant,
            borrow_from,
        }
    }

    /// A fresh limiter of this design, on its own clock at zero.
    fn limiter(&self) -> Result<ShardedLimiter<ManualClock>, ConfigError> {
        ShardedLimiter::builder()
            .quota(Quota::per_second(RATE).with_burst(RATE))
            .buckets(self.buckets)
            .per_tenant(self.per_tenant)
            .borrow_from(self.borrow_from)
            .lender_reserve(RESERVE)
            .clock(ManualClock::new())
            .build()
    }

    /// The share of the budget one tenant can use sustained: (k + d)/N.
    fn lone_share(&self) -> f64 {
        f64::from(self.per_tenant + self.borrow_from) / f64::from(self.buckets)
    }
}

/// What happened to the tenants other than the noisy one.
#[derive(Default)]
struct Outcome {
    down: u32,
    degraded: u32,
    unaffected: u32,
}

/// Scene 1: tenant-0 floods, the others ask once a second each; `lent` is
/// the share of a bucket its owners keep when it lends (0 when it does not).
fn noisy_neighbour(limiter: &ShardedLimiter<ManualClock>, lent: f64) -> Outcome {
    let clock = limiter.clock();
    let names: Vec<String> = (0..TENANTS).map(|t| format!("tenant-{t}")).collect();
    let tenants: Vec<_> = names.iter().map(|n| limiter.handle(n)).collect();
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
            // Degraded: one of its own buckets (a spill bucket is someone
            // else's) was emptied by the flood, or lent down to the reserve.
            let snapshot = limiter.snapshot();
            let drained = |b: &u32| {
                let bucket = &snapshot[*b as usize];
                let reserve = f64::from(bucket.burst()) * lent;
                bucket.available() == 0 || bucket.available() as f64 <= reserve
            };
            if tenant.shard().buckets().iter().any(drained) {
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

/// Scene 2: the share of the budget tenant-0 gets alone, asking
/// `FLOOD_PER_MS` times a millisecond, over `SECONDS` after a first second
/// that spends the burst (so that the share is of the rate alone).
fn alone(limiter: &ShardedLimiter<ManualClock>) -> f64 {
    let tenant = limiter.handle("tenant-0");
    let mut granted = 0u32;
    for ms in 0..(1 + SECONDS) * 1_000 {
        limiter.clock().advance(Duration::from_millis(1));
        for _ in 0..FLOOD_PER_MS {
            let ok = tenant.check().is_ok();
            granted += u32::from(ok && ms >= 1_000);
        }
    }
    f64::from(granted) / f64::from(RATE * SECONDS)
}

/// What the math predicts for each of [`DESIGNS`], in order.
fn predictions() -> Result<[Impact; 4], Box<dyn std::error::Error>> {
    let math = BlastRadius::new(8, 2)?.tenants(TENANTS as u64);
    let fixed = math
        .fixed_shards
        .ok_or("k divides N here, so fixed shards exist")?;
    let lending = &DESIGNS[3];
    let borrowing = BlastRadius::new(lending.buckets, lending.per_tenant)?
        .borrowing(lending.borrow_from, RESERVE)?
        .tenants(TENANTS as u64);
    Ok([math.shared_pool, fixed, math.shuffle_sharded, borrowing])
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "{TENANTS} tenants share {RATE} req/s; tenant-0 floods at {} req/s, the others send 1 req/s, for {SECONDS} s.\n",
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
    for (design, predicted) in DESIGNS.iter().zip(predictions()?) {
        let lent = if design.borrow_from > 0 { RESERVE } else { 0.0 };
        let seen = noisy_neighbour(&design.limiter()?, lent);
        let Impact {
            fully_down,
            degraded,
            unaffected,
        } = predicted;
        println!(
            "{:<20} {:>18} {:>18} {:>18}",
            design.name,
            format!("{} ({fully_down:.1})", seen.down),
            format!("{} ({degraded:.1})", seen.degraded),
            format!("{} ({unaffected:.1})", seen.unaffected),
        );
    }
    println!(
        "\nShuffle sharding: only the tenants holding tenant-0's exact pair of buckets \
         (1 in C(8,2) = 28) go down with it.\nWith borrowing, those of them with other spill \
         buckets borrow and stay up: 1 in 28·C(6,2) = 420 goes down.\nThe price: tenant-0 \
         also drains its 2 spill buckets, down to their reserve (half their burst, which \
         their owners keep),\nso more tenants are degraded and fewer untouched.\n"
    );

    println!(
        "tenant-0 alone asks {} req/s for {SECONDS} s, after a first second that spends the burst.\n",
        FLOOD_PER_MS * 1_000
    );
    println!("{:<20} {:>18}", "design", "share of the rate");
    println!("{:<20} {:>18}", "", "seen (predicted)");
    for design in &DESIGNS {
        let seen = alone(&design.limiter()?);
        println!(
            "{:<20} {:>18}",
            design.name,
            format!("{:.1}% ({:.0}%)", seen * 100.0, design.lone_share() * 100.0)
        );
    }
    println!("\nShards hold a lone tenant to k/N of the budget; borrowing lets it use (k + d)/N.");
    Ok(())
}
