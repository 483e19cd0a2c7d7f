//! `simulate`: the limiter's real assignment against the math, then a live
//! flood on a manual clock.

use std::time::Duration;

use serde::Serialize;
use shuffle_limiter::blast::{BlastRadius, BorrowingRadius, HungTenant, ResizeChurn};
use shuffle_limiter::{MAX_BUCKETS, MAX_PER_TENANT, ManualClock, Quota, Request, ShardedLimiter};

use crate::SimulateArgs;
use crate::borrow::{self, State};
use crate::borrow_live::{self, Measured, SimulateSection};
use crate::common::{self, Failure, ONE_SIZE, Outcome, usage};
use crate::hung::{self, HungMeasured};
use crate::nested;
use crate::nested_live::{self, NestedMeasured, NoisyMeasured};
use crate::redis_live::{self, RedisLive};
use crate::resize::{self, ResizeMeasured};

mod text;

/// `simulate` computes `tenants × buckets` rendezvous scores; this bounds its time.
const MAX_SIMULATION_WORK: u64 = 1 << 31;
/// The live scenario uses at most this many tenants, to stay fast.
const LIVE_TENANTS: u64 = 5000;
/// The live scenario: this many steps of [`STEP`] each.
pub(crate) const LIVE_STEPS: u32 = 200;
pub(crate) const STEP: Duration = Duration::from_millis(10);
/// Each well-behaved tenant sends one request every this many steps.
pub(crate) const LIVE_EVERY: u32 = 10;
/// The live budget is this many times what the well-behaved tenants ask for,
/// per tenant (or per bucket, when there are more buckets than tenants).
pub(crate) const HEADROOM: u64 = 4;
/// A tenant granted at most this share is counted fully down ...
pub(crate) const DOWN_AT_MOST: f64 = 0.05;
/// ... and one granted at least this share unaffected.
pub(crate) const UNAFFECTED_AT_LEAST: f64 = 0.95;
impl State {
    /// A tenant granted `share` of what it asked, as the live runs measure
    /// it: fully down at most [`DOWN_AT_MOST`], unaffected at least
    /// [`UNAFFECTED_AT_LEAST`], degraded between.
    pub(crate) fn of_share(share: f64) -> State {
        if share <= DOWN_AT_MOST {
            State::FullyDown
        } else if share >= UNAFFECTED_AT_LEAST {
            State::Unaffected
        } else {
            State::Degraded
        }
    }

    /// A tenant whose shard holds `overlap` of the flooder's `k` buckets,
    /// as the model without borrowing predicts it: down when it holds all
    /// of them, unaffected when none.
    pub(crate) fn of_overlap(overlap: usize, k: usize) -> State {
        match overlap {
            0 => State::Unaffected,
            j if j == k => State::FullyDown,
            _ => State::Degraded,
        }
    }
}

/// Rows further than this many standard deviations from the expectation are flagged.
const FLAG_SIGMAS: f64 = 4.0;

/// Everything `simulate` prints: the JSON is this struct, the tables its `Display`.
#[derive(Debug, Serialize)]
pub(crate) struct SimulateReport {
    buckets: u32,
    per_tenant: u32,
    tenants: u64,
    seed: u64,
    salt: String,
    bad_tenant_shard: Vec<u32>,
    /// The live limiter's `isolation()`, as it prints: C(N, k),
    /// P(identical), k/N, the per-tenant ceiling, and a warning when weak.
    isolation: String,
    /// Entry `j`: how many of the other tenants share `j` buckets with `tenant-0`.
    observed: Vec<u64>,
    expected: Vec<f64>,
    sigma: Vec<f64>,
    /// Infinite where σ is 0 and the count is off; JSON writes that as `null`.
    z: Vec<f64>,
    flagged: Vec<bool>,
    within_4_sigma: bool,
    live: Live,
    /// With `--borrow-from`: the borrowing model beside the real limiter.
    /// The live `predicted` and `by_overlap` rows then follow that model.
    #[serde(skip_serializing_if = "Option::is_none")]
    borrowing: Option<SimulateSection>,
    /// With `--redis-url`: the same flood against Redis, in real time.
    #[serde(skip_serializing_if = "Option::is_none")]
    redis: Option<RedisLive>,
    /// With `--noisy`: coverage by h flooders on this assignment.
    #[serde(skip_serializing_if = "Option::is_none")]
    noisy: Option<NoisyMeasured>,
    /// With `--per-user`: one flooding user on a limiter with nested checks.
    #[serde(skip_serializing_if = "Option::is_none")]
    nested: Option<NestedMeasured>,
    /// With `--resize-to`: whose shard changes, counted beside the exact share.
    #[serde(skip_serializing_if = "Option::is_none")]
    resize: Option<ResizeMeasured>,
    /// With `--concurrency`: the hung-tenant scene on an in-flight limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    hung: Option<HungMeasured>,
}

/// The live flood on a manual clock.
#[derive(Debug, Serialize)]
struct Live {
    tenants: u64,
    steps: u32,
    step_ms: u64,
    requests_per_tenant: u32,
    #[serde(skip)]
    request_every_ms: u64,
    rate_per_second: u32,
    burst: u32,
    flood_granted: u64,
    predicted: Outcome<f64>,
    by_overlap: Outcome<u64>,
    measured: Outcome<u64>,
    mean_share_by_overlap: Vec<Option<f64>>,
}

/// The requests per second one well-behaved tenant sends.
pub(crate) fn tenant_rate() -> u64 {
    1_000 / (STEP.as_millis() as u64 * u64::from(LIVE_EVERY))
}

/// The math `simulate` compares with: the blast radius, the borrowing model
/// and the resize, as asked for.
type Checked = (
    BlastRadius,
    Option<BorrowingRadius>,
    Option<ResizeChurn>,
    Option<HungTenant>,
);

/// Checks the arguments against what a real limiter and this tool accept,
/// and computes the math to compare with.
fn check(a: &SimulateArgs) -> Result<Checked, Failure> {
    let (n, k, t) = (a.buckets, a.per_tenant, a.tenants);
    redis_live::check(a)?;
    if n > MAX_BUCKETS {
        return Err(usage(format!(
            "error: --buckets {n} is more than a limiter supports ({MAX_BUCKETS}), and simulate \
             builds a real one; lower --buckets to at most {MAX_BUCKETS}"
        )));
    }
    if k > MAX_PER_TENANT {
        return Err(usage(format!(
            "error: --per-tenant {k} is more than a limiter supports ({MAX_PER_TENANT}), and \
             simulate builds a real one; lower --per-tenant to at most {MAX_PER_TENANT}"
        )));
    }
    let b = common::radius(n, k, ONE_SIZE)?;
    if t < 2 {
        return Err(usage(format!(
            "error: --tenants {t} leaves no one to flood: set --tenants to at least 2, \
             the flooder and one other"
        )));
    }
    if t.saturating_mul(u64::from(n)) > MAX_SIMULATION_WORK {
        return Err(usage(format!(
            "error: --tenants {t} with --buckets {n} would take too long (tenants × buckets \
             must stay within {MAX_SIMULATION_WORK}); lower --tenants to at most {} or \
             --buckets to at most {}",
            MAX_SIMULATION_WORK / u64::from(n),
            (MAX_SIMULATION_WORK / t).max(1)
        )));
    }
    let lending = borrow::radius_for_limiter(&b, &a.borrow)?;
    if lending.is_some() && (a.nested.noisy.is_some() || a.nested.per_user.is_some()) {
        return Err(usage(
            "error: simulate measures --noisy and --per-user without borrowing: drop --borrow-from (size shows them side by side)",
        ));
    }
    let resize =
        resize::churn_for_simulate(&b, lending.as_ref(), a.resize_to, t, MAX_SIMULATION_WORK)?;
    let hung = hung::check(&b, lending.as_ref(), &a.hung)?;
    Ok((b, lending, resize, hung))
}

/// The limiter `simulate` runs, on a manual clock of its own.
pub(crate) fn limiter(
    a: &SimulateArgs,
    quota: Quota,
    salt: &[u8],
    lending: Option<&BorrowingRadius>,
) -> Result<ShardedLimiter<ManualClock>, Failure> {
    let (n, k) = (a.buckets, a.per_tenant);
    let mut builder = ShardedLimiter::builder()
        .quota(quota)
        .buckets(n)
        .per_tenant(k)
        .salt(salt);
    if let Some(l) = lending {
        builder = builder.borrow_from(l.spill()).lender_reserve(l.reserve());
    }
    builder.clock(ManualClock::new()).build().map_err(|e| {
        usage(format!(
            "error: the limiter refused --buckets {n} with --per-tenant {k}: {e}"
        ))
    })
}

/// Computes the report for `shuffle-lab simulate`.
pub(crate) fn run(a: &SimulateArgs) -> Result<SimulateReport, Failure> {
    let (b, lending, churn, hung_tenant) = check(a)?;
    let (n, k, t) = (a.buckets, a.per_tenant, a.tenants);
    let mut salt = a.salt.as_bytes().to_vec();
    salt.extend_from_slice(&a.seed.to_le_bytes());

    let live_tenants = t.min(LIVE_TENANTS);
    let quota = live_quota(n, live_tenants, lending.as_ref())?;
    let (rate, burst) = (quota.count(), quota.burst());
    let limiter = limiter(a, quota, &salt, lending.as_ref())?;
    let clock = limiter.clock().clone();

    // 1. The real assignment against the math.
    let bad = limiter.shard("tenant-0");
    let mut observed = vec![0u64; k as usize + 1];
    let mut overlap_of = Vec::with_capacity(live_tenants as usize);
    let mut states = Vec::with_capacity(live_tenants as usize);
    let mut by_state = Outcome::<u64>::default();
    let no_reserve = lending
        .as_ref()
        .is_some_and(|l| l.reserve_exact().is_zero());
    for i in 1..t {
        let shard = limiter.shard(format!("tenant-{i}"));
        let j = shard.overlap(&bad);
        observed[j] += 1;
        let state = borrow::state(&bad, &shard, no_reserve);
        by_state.count(state);
        if i < live_tenants {
            overlap_of.push(j);
            states.push(state);
        }
    }
    let others = (t - 1) as f64;
    let pmf = b.overlap_pmf();
    let expected: Vec<f64> = pmf.iter().map(|q| others * q).collect();
    let sigma: Vec<f64> = pmf
        .iter()
        .map(|q| (others * q * (1.0 - q)).sqrt())
        .collect();
    let z: Vec<f64> = observed
        .iter()
        .zip(&expected)
        .zip(&sigma)
        .map(|((&o, &e), &sd)| {
            let d = o as f64 - e;
            if sd > 0.0 {
                d / sd
            } else if d.abs() < 0.5 {
                0.0
            } else {
                f64::INFINITY
            }
        })
        .collect();
    let flagged: Vec<bool> = z.iter().map(|z| z.abs() > FLAG_SIGMAS).collect();

    // 2. A live flood on a manual clock.
    let flooder = limiter.handle("tenant-0");
    let tenants: Vec<_> = (1..live_tenants)
        .map(|i| limiter.handle(Request::tenant(format!("tenant-{i}"))))
        .collect();
    let mut granted = vec![0u32; tenants.len()];
    let mut attempts = vec![0u32; tenants.len()];
    let mut flood_granted = 0u64;
    let mut flood_burst = 0u64;
    let mut lent_fewest_left = u64::MAX;
    for step in 0..LIVE_STEPS {
        // The flooder retries until all its buckets are empty.
        for _ in 0..1_000_000 {
            if flooder.check().is_err() {
                break;
            }
            flood_granted += 1;
        }
        if step == 0 {
            flood_burst = flood_granted;
        }
        if lending.is_some() {
            let snapshot = limiter.snapshot();
            for &s in bad.spill() {
                lent_fewest_left = lent_fewest_left.min(snapshot[s as usize].available());
            }
        }
        for (i, tenant) in tenants.iter().enumerate() {
            if (step as usize + i).is_multiple_of(LIVE_EVERY as usize) {
                attempts[i] += 1;
                granted[i] += u32::from(tenant.check().is_ok());
            }
        }
        clock.advance(STEP);
    }
    let mut by_overlap = Outcome::<u64>::default();
    let mut measured = Outcome::<u64>::default();
    let mut share_sum = vec![0.0f64; k as usize + 1];
    let mut share_n = vec![0u64; k as usize + 1];
    let share_of = |i: usize| f64::from(granted[i]) / f64::from(attempts[i].max(1));
    for (i, &j) in overlap_of.iter().enumerate() {
        if lending.is_some() {
            by_overlap.count(states[i]);
        } else {
            by_overlap.count(State::of_overlap(j, k as usize));
        }
        let share = share_of(i);
        measured.count(State::of_share(share));
        share_sum[j] += share;
        share_n[j] += 1;
    }
    let mean_share_by_overlap = share_sum
        .iter()
        .zip(&share_n)
        .map(|(&s, &c)| (c > 0).then(|| s / c as f64))
        .collect();

    let after_first = |grants: u64| {
        let seconds = f64::from(LIVE_STEPS - 1) * STEP.as_secs_f64();
        grants as f64 / (f64::from(rate) * seconds)
    };
    let borrowing = match &lending {
        None => None,
        Some(l) => {
            let owner_shares = tenants
                .iter()
                .enumerate()
                .filter(|(_, tenant)| {
                    let shard = tenant.shard();
                    !shard.same_set(&bad) && bad.spill().iter().any(|&s| shard.contains(s))
                })
                .map(|(i, _)| share_of(i))
                .collect();
            let measured = Measured {
                others: t - 1,
                by_state,
                burst,
                bursts: limiter.snapshot().iter().map(|b| b.burst()).collect(),
                flood_burst,
                flood_share: after_first(flood_granted - flood_burst),
                lone_share: after_first(borrow_live::lone_grants(a, quota, &salt, l)?),
                lent_fewest_left,
                owner_shares,
            };
            Some(SimulateSection::new(l, &bad, measured))
        }
    };
    let noisy = match nested::noisy(&b, &a.nested)? {
        Some(r) => Some(nested_live::noisy(&limiter, &b, &r, t)?),
        None => None,
    };
    let nested = match nested::per_user(&b, &a.nested)? {
        Some(r) => Some(nested_live::per_user(a, &salt, &r, live_tenants)?),
        None => None,
    };
    let resize = match &churn {
        Some(r) => Some(resize::measure(r, &salt, t)?),
        None => None,
    };
    let hung = match &hung_tenant {
        Some(h) => Some(hung::measure(&b, lending.as_ref(), h, &salt, t)?),
        None => None,
    };
    let predicted = match &lending {
        Some(l) => l.tenants(live_tenants).into(),
        None => b.tenants(live_tenants).shuffle_sharded.into(),
    };

    let redis = match &a.redis_url {
        Some(url) => {
            let assigned: Vec<_> = overlap_of.iter().copied().zip(states).collect();
            Some(redis_live::run(
                url,
                a,
                &salt,
                &b,
                lending.as_ref(),
                &assigned,
            )?)
        }
        None => None,
    };

    Ok(SimulateReport {
        buckets: n,
        per_tenant: k,
        tenants: t,
        seed: a.seed,
        salt: a.salt.clone(),
        bad_tenant_shard: bad.buckets().to_vec(),
        isolation: limiter.isolation().to_string(),
        observed,
        expected,
        sigma,
        z,
        within_4_sigma: !flagged.contains(&true),
        flagged,
        live: Live {
            tenants: live_tenants,
            steps: LIVE_STEPS,
            step_ms: STEP.as_millis() as u64,
            requests_per_tenant: LIVE_STEPS / LIVE_EVERY,
            request_every_ms: STEP.as_millis() as u64 * u64::from(LIVE_EVERY),
            rate_per_second: rate,
            burst,
            flood_granted,
            predicted,
            by_overlap,
            measured,
            mean_share_by_overlap,
        },
        borrowing,
        redis,
        noisy,
        nested,
        resize,
        hung,
    })
}

/// The live scenario's budget for `tenants` tenants: four times what the
/// well-behaved ones ask for, and at least 40/s per bucket, so only the
/// flood can exhaust a bucket.
pub(crate) fn live_quota(
    n: u32,
    tenants: u64,
    lending: Option<&BorrowingRadius>,
) -> Result<Quota, Failure> {
    let per_unit = HEADROOM * tenant_rate();
    let rate = u32::try_from(per_unit * (tenants - 1).max(u64::from(n))).map_err(|_| {
        // Unreachable while MAX_BUCKETS is what it is; the message still says what to do.
        usage(format!(
            "error: --buckets {n} makes the simulated budget more than {}/s; lower --buckets \
             to at most {}",
            u32::MAX,
            u64::from(u32::MAX) / per_unit
        ))
    })?;
    let lent = match lending {
        Some(l) => borrow_live::least_burst(rate, STEP, l)?,
        None => 0,
    };
    let burst = (rate / 20).max(n).max(lent);
    Ok(Quota::per_second(rate).with_burst(burst))
}
