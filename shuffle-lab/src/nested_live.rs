//! `simulate --noisy h`: coverage by several flooders on the real
//! assignment; `simulate --per-user j`: one flooding user on a real limiter
//! with nested checks, on a manual clock.

use std::fmt;

use serde::Serialize;
use shuffle_limiter::blast::{BlastRadius, NestedRadius, NoisyTenants};
use shuffle_limiter::{ManualClock, Quota, Request, Shard, ShardedLimiter};

use crate::SimulateArgs;
use crate::borrow::State;
use crate::common::{Failure, Outcome, p, usage};
use crate::simulate::{
    DOWN_AT_MOST, HEADROOM, LIVE_EVERY, LIVE_STEPS, STEP, UNAFFECTED_AT_LEAST, tenant_rate,
};

/// `--noisy`: this many draws of h flooders ...
const NOISY_TRIALS: u32 = 200;
/// ... each against at most this many other tenants.
const NOISY_OTHERS: u64 = 20_000;
/// `--per-user`: the users of `tenant-0`, `user-0` the flooder.
pub(crate) const USERS: u32 = 1000;

/// Shares of tenants covered, degraded and untouched.
#[derive(Debug, Default, Clone, Copy, Serialize)]
struct Shares {
    covered: f64,
    degraded: f64,
    untouched: f64,
}

/// What `simulate --noisy h` measured beside the math.
#[derive(Debug, Serialize)]
pub(crate) struct NoisyMeasured {
    flooders: u32,
    trials: u32,
    others: u64,
    predicted: Shares,
    p_covered_exact: String,
    /// The mean share over the trials, and its standard error.
    measured: Shares,
    standard_error: Shares,
    z_covered: f64,
    /// Trial 0 (flooders `tenant-0` … `tenant-(h−1)`): the buckets their
    /// shards cover together, the tenants covered, and what the math
    /// expects given that union.
    first_union: u32,
    first_covered: u64,
    first_expected_given_union: f64,
}

/// The flooders of one trial: `tenant-0` … `tenant-(h−1)` first, then
/// names of their own.
fn flooder(trial: u32, i: u32) -> String {
    if trial == 0 {
        format!("tenant-{i}")
    } else {
        format!("noisy-{trial}-{i}")
    }
}

/// Draws `NOISY_TRIALS` sets of `h` flooders from the limiter's assignment
/// and counts, each time, the other tenants (`tenant-h` …) whose shard they
/// cover, touch or miss.
pub(crate) fn noisy(
    limiter: &ShardedLimiter<ManualClock>,
    b: &BlastRadius,
    r: &NoisyTenants,
    tenants: u64,
) -> Result<NoisyMeasured, Failure> {
    let h = r.noisy();
    if tenants <= u64::from(h) {
        return Err(usage(format!(
            "error: --noisy {h} leaves none of --tenants {tenants} to watch: set --tenants to at \
             least {} or lower --noisy",
            u64::from(h) + 1
        )));
    }
    let last = tenants.min(u64::from(h) + NOISY_OTHERS);
    let others: Vec<Shard> = (u64::from(h)..last)
        .map(|i| limiter.shard(format!("tenant-{i}")))
        .collect();
    let n = others.len() as f64;
    let mut samples: Vec<Shares> = Vec::with_capacity(NOISY_TRIALS as usize);
    let (mut first_union, mut first_covered) = (0, 0);
    for trial in 0..NOISY_TRIALS {
        let mut union = vec![false; b.buckets() as usize];
        for i in 0..h {
            for &bucket in limiter.shard(flooder(trial, i)).buckets() {
                union[bucket as usize] = true;
            }
        }
        let mut count = Outcome::<u64>::default();
        for shard in &others {
            let held = shard
                .buckets()
                .iter()
                .filter(|&&x| union[x as usize])
                .count();
            match held {
                0 => count.unaffected += 1,
                x if x == shard.buckets().len() => count.fully_down += 1,
                _ => count.degraded += 1,
            }
        }
        if trial == 0 {
            first_union = union.iter().filter(|&&x| x).count() as u32;
            first_covered = count.fully_down;
        }
        samples.push(Shares {
            covered: count.fully_down as f64 / n,
            degraded: count.degraded as f64 / n,
            untouched: count.unaffected as f64 / n,
        });
    }
    let mean = |f: fn(&Shares) -> f64| samples.iter().map(f).sum::<f64>() / samples.len() as f64;
    let se = |f: fn(&Shares) -> f64, m: f64| {
        let var =
            samples.iter().map(|s| (f(s) - m).powi(2)).sum::<f64>() / (samples.len() as f64 - 1.0);
        (var / samples.len() as f64).sqrt()
    };
    let measured = Shares {
        covered: mean(|s| s.covered),
        degraded: mean(|s| s.degraded),
        untouched: mean(|s| s.untouched),
    };
    let standard_error = Shares {
        covered: se(|s| s.covered, measured.covered),
        degraded: se(|s| s.degraded, measured.degraded),
        untouched: se(|s| s.untouched, measured.untouched),
    };
    let given = b
        .failed(first_union)
        .map_err(|e| usage(format!("error: {e}")))?;
    let z = if standard_error.covered > 0.0 {
        (measured.covered - r.p_covered()) / standard_error.covered
    } else {
        0.0
    };
    Ok(NoisyMeasured {
        flooders: h,
        trials: NOISY_TRIALS,
        others: others.len() as u64,
        predicted: Shares {
            covered: r.p_covered(),
            degraded: r.p_degraded(),
            untouched: r.p_untouched(),
        },
        p_covered_exact: r.p_covered_exact().to_string(),
        measured,
        standard_error,
        z_covered: z,
        first_union,
        first_covered,
        first_expected_given_union: n * given.p_all_failed,
    })
}

impl fmt::Display for NoisyMeasured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = self.flooders;
        writeln!(
            f,
            "{h} tenants flood at once: {} draws of {h} flooders (the first tenant-0 … tenant-{}), \
             each against tenant-{h} … tenant-{}:",
            self.trials,
            h - 1,
            u64::from(h) + self.others - 1
        )?;
        writeln!(
            f,
            "                             covered    degraded   untouched"
        )?;
        let (pr, me, se) = (&self.predicted, &self.measured, &self.standard_error);
        writeln!(
            f,
            "  predicted (math)        {:>10.6}  {:>10.6}  {:>10.6}",
            pr.covered, pr.degraded, pr.untouched
        )?;
        writeln!(
            f,
            "  measured (mean share)   {:>10.6}  {:>10.6}  {:>10.6}",
            me.covered, me.degraded, me.untouched
        )?;
        writeln!(
            f,
            "  standard error          {:>10.6}  {:>10.6}  {:>10.6}",
            se.covered, se.degraded, se.untouched
        )?;
        writeln!(
            f,
            "  p_covered exactly {}; measured is {:.2} standard errors off",
            self.p_covered_exact, self.z_covered
        )?;
        writeln!(
            f,
            "  first draw: the flooders' shards cover {} buckets together; {} tenants covered, \
             {:.2} expected given that union",
            self.first_union, self.first_covered, self.first_expected_given_union
        )?;
        writeln!(
            f,
            "  (one draw swings with the size of the union: the mean over draws is what \
             p_covered predicts)"
        )
    }
}

/// Counts of users (or tenants) in each state: expected, by the
/// assignment, and by the share granted.
#[derive(Debug, Serialize)]
struct Split {
    predicted: Outcome<f64>,
    by_assignment: Outcome<u64>,
    measured: Outcome<u64>,
}

/// What `simulate --per-user j` measured on a real limiter.
#[derive(Debug, Serialize)]
pub(crate) struct NestedMeasured {
    per_user: u32,
    users: u32,
    flooder_subset: Vec<u32>,
    rate_per_second: u32,
    burst: u32,
    flood_granted: u64,
    /// The other users of `tenant-0`.
    users_split: Split,
    /// The other tenants.
    tenants_split: Split,
    tenants: u64,
}

/// The state an assignment puts `other` in when `drained` buckets are
/// empty: down when all of its buckets are, unaffected when none is.
fn state_of(other: &Shard, drained: &Shard, out: &mut Outcome<u64>) {
    out.count(State::of_overlap(
        other.overlap(drained),
        other.buckets().len(),
    ));
}

fn by_share(granted: u32, asked: u32, out: &mut Outcome<u64>) {
    out.count(State::of_share(
        f64::from(granted) / f64::from(asked.max(1)),
    ));
}

/// `user-0` of `tenant-0` floods through its own buckets (`Request::user`); the tenant's other
/// users and `tenant-1` … send one request every [`LIVE_EVERY`] steps.
pub(crate) fn per_user(
    a: &SimulateArgs,
    salt: &[u8],
    r: &NestedRadius,
    tenants: u64,
) -> Result<NestedMeasured, Failure> {
    let (n, k, j) = (a.buckets, a.per_tenant, r.per_user());
    // Every bucket can carry all the light load four times over.
    let per_bucket = HEADROOM * tenant_rate() * (u64::from(USERS) - 1 + tenants - 1);
    let rate = u32::try_from(per_bucket * u64::from(n)).map_err(|_| {
        usage(format!(
            "error: --per-user with --buckets {n} and --tenants {tenants} makes the simulated \
             budget more than {}/s; lower --buckets to at most {}",
            u32::MAX,
            u64::from(u32::MAX) / per_bucket
        ))
    })?;
    let burst = (rate / 20).max(n);
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(rate).with_burst(burst))
        .buckets(n)
        .per_tenant(k)
        .per_user(j)
        .salt(salt)
        .clock(ManualClock::new())
        .build()
        .map_err(|e| usage(format!("error: the limiter refused --per-user {j}: {e}")))?;
    let flooder = limiter.handle(Request::tenant("tenant-0").user("user-0"));
    let drained = limiter.shard(Request::tenant("tenant-0").user("user-0"));
    let users: Vec<_> = (1..USERS)
        .map(|u| limiter.handle(Request::tenant("tenant-0").user(format!("user-{u}"))))
        .collect();
    let others: Vec<_> = (1..tenants)
        .map(|t| limiter.handle(Request::tenant(format!("tenant-{t}"))))
        .collect();
    let mut asked = vec![0u32; users.len() + others.len()];
    let mut granted = vec![0u32; asked.len()];
    let mut flood_granted = 0u64;
    for step in 0..LIVE_STEPS {
        flood_granted += (0..1_000_000).map_while(|_| flooder.check().ok()).count() as u64;
        let handles = users.iter().chain(&others);
        for (i, handle) in handles.enumerate() {
            if (step as usize + i).is_multiple_of(LIVE_EVERY as usize) {
                asked[i] += 1;
                granted[i] += u32::from(handle.check().is_ok());
            }
        }
        limiter.clock().advance(STEP);
    }
    let mut users_split = Split {
        predicted: r.users(u64::from(USERS)).into(),
        by_assignment: Outcome::default(),
        measured: Outcome::default(),
    };
    let mut tenants_split = Split {
        predicted: r.tenants(tenants).into(),
        by_assignment: Outcome::default(),
        measured: Outcome::default(),
    };
    for (i, handle) in users.iter().chain(&others).enumerate() {
        let split = if i < users.len() {
            &mut users_split
        } else {
            &mut tenants_split
        };
        state_of(&handle.shard(), &drained, &mut split.by_assignment);
        by_share(granted[i], asked[i], &mut split.measured);
    }
    Ok(NestedMeasured {
        per_user: j,
        users: USERS,
        flooder_subset: drained.buckets().to_vec(),
        rate_per_second: rate,
        burst,
        flood_granted,
        users_split,
        tenants_split,
        tenants,
    })
}

fn rows(f: &mut fmt::Formatter<'_>, s: &Split, by: &str) -> fmt::Result {
    let (pr, by_n, me) = (&s.predicted, &s.by_assignment, &s.measured);
    writeln!(
        f,
        "    predicted (math)            {:>11.2} {:>11.2} {:>11.2}",
        pr.fully_down, pr.degraded, pr.unaffected
    )?;
    writeln!(
        f,
        "    {by:<28}{:>11} {:>11} {:>11}",
        by_n.fully_down, by_n.degraded, by_n.unaffected
    )?;
    writeln!(
        f,
        "    measured (granted share)    {:>11} {:>11} {:>11}",
        me.fully_down, me.degraded, me.unaffected
    )
}

impl fmt::Display for NestedMeasured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "nested: tenant-0 has {} users on j = {} of its buckets each; user-0 floods through \
             Request::user",
            self.users, self.per_user
        )?;
        writeln!(
            f,
            "  on its buckets {:?} (granted {}), budget {}/s with burst {}, {} s on a manual clock",
            self.flooder_subset,
            self.flood_granted,
            self.rate_per_second,
            self.burst,
            f64::from(LIVE_STEPS) * STEP.as_secs_f64()
        )?;
        writeln!(
            f,
            "                                  fully down    degraded  unaffected"
        )?;
        writeln!(f, "  the other {} users of tenant-0", self.users - 1)?;
        rows(f, &self.users_split, "by subset (this assignment)")?;
        writeln!(f, "  the other {} tenants", self.tenants - 1)?;
        rows(f, &self.tenants_split, "by shard (this assignment)")?;
        writeln!(
            f,
            "  (measured: fully down if granted <= {:.0}% of requests, unaffected if >= {:.0}%; \
             degraded ones\n   keep a bucket the flood left, and a light load fits in it: \
             P(user down) = {})",
            DOWN_AT_MOST * 100.0,
            UNAFFECTED_AT_LEAST * 100.0,
            p(self.users_split.predicted.fully_down / f64::from(self.users - 1))
        )
    }
}
