//! One tenant with 1,000 users, one of them flooding: users on 2 of the
//! tenant's 4 buckets each (`per_user(2)`), against the same tenant without
//! nesting (`per_user(4)`, every user on all four).
//!
//! The budget is 16 buckets, 4 per tenant, with room for all the light
//! traffic four times over. `user-0` of `acme` retries until denied every
//! 10 ms; the other 999 users send one request every 100 ms, for one
//! simulated second on a `ManualClock`. A user is counted, from the
//! limiter's own state, as fully down (all its buckets emptied by the
//! flood), degraded (some) or unaffected (none), beside what
//! `blast::NestedRadius` predicts: 1/C(k,j), the rest, and C(k−j,j)/C(k,j)
//! of the other users. The share of requests granted shows what each state
//! means to a user: the limiter draws from whichever of its buckets has
//! room, so a degraded user with a light load is still served.
//!
//! ```text
//! cargo run --release --example nested_users
//! ```

use std::time::Duration;

use shuffle_limiter::blast::BlastRadius;
use shuffle_limiter::{ManualClock, Quota, Request, ShardedLimiter};

const USERS: u32 = 1000;
const BUCKETS: u32 = 16;
const PER_TENANT: u32 = 4;
const STEP: Duration = Duration::from_millis(10);
const STEPS: u32 = 100;
/// A light user sends one request every this many steps.
const EVERY: u32 = 10;

/// Users of `acme` in each state, and the requests they were granted.
#[derive(Default)]
struct Seen {
    counts: [u32; 3],
    asked: [u32; 3],
    granted: [u32; 3],
}

fn run(per_user: u32) -> Result<Seen, Box<dyn std::error::Error>> {
    // 999 users × 10 requests/s, four times over, on every bucket.
    let per_bucket = 4 * 10 * (USERS - 1);
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(per_bucket * BUCKETS))
        .buckets(BUCKETS)
        .per_tenant(PER_TENANT)
        .per_user(per_user)
        .clock(ManualClock::new())
        .build()?;
    let flooder = limiter.handle(Request::tenant("acme").user("user-0"));
    let users: Vec<_> = (1..USERS)
        .map(|u| limiter.handle(Request::tenant("acme").user(format!("user-{u}"))))
        .collect();
    let mut asked = vec![0u32; users.len()];
    let mut granted = vec![0u32; users.len()];
    let mut drained = Vec::new();
    for step in 0..STEPS {
        while flooder.check().is_ok() {}
        // The flooder's buckets, empty right after its turn.
        drained = limiter
            .snapshot()
            .iter()
            .enumerate()
            .filter(|(_, b)| b.available() == 0)
            .map(|(i, _)| i as u32)
            .collect();
        for (i, user) in users.iter().enumerate() {
            if (step + i as u32).is_multiple_of(EVERY) {
                asked[i] += 1;
                granted[i] += u32::from(user.check().is_ok());
            }
        }
        limiter.clock().advance(STEP);
    }
    let mut seen = Seen::default();
    for (i, user) in users.iter().enumerate() {
        let shard = user.shard();
        let empty = shard
            .buckets()
            .iter()
            .filter(|b| drained.contains(b))
            .count();
        let state = match empty {
            0 => 2,
            e if e == shard.buckets().len() => 0,
            _ => 1,
        };
        seen.counts[state] += 1;
        seen.asked[state] += asked[i];
        seen.granted[state] += granted[i];
    }
    Ok(seen)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "tenant acme: {USERS} users, user-0 flooding; N = {BUCKETS}, k = {PER_TENANT}; \
         {} s on a manual clock\n",
        f64::from(STEPS) * STEP.as_secs_f64()
    );
    println!("                          fully down    degraded  unaffected");
    for per_user in [2, PER_TENANT] {
        let predicted = BlastRadius::new(BUCKETS, PER_TENANT)?
            .per_user(per_user)?
            .users(u64::from(USERS));
        let seen = run(per_user)?;
        let label = if per_user == PER_TENANT {
            format!("without nesting (j = {per_user})")
        } else {
            format!("per_user({per_user})")
        };
        println!("{label}");
        println!(
            "  predicted (blast)     {:>11.1} {:>11.1} {:>11.1}",
            predicted.fully_down, predicted.degraded, predicted.unaffected
        );
        println!(
            "  seen                  {:>11} {:>11} {:>11}",
            seen.counts[0], seen.counts[1], seen.counts[2]
        );
        let share = |s: usize| match seen.asked[s] {
            0 => "-".to_string(),
            asked => format!(
                "{:.1}%",
                100.0 * f64::from(seen.granted[s]) / f64::from(asked)
            ),
        };
        println!(
            "  granted               {:>11} {:>11} {:>11}",
            share(0),
            share(1),
            share(2)
        );
    }
    Ok(())
}
