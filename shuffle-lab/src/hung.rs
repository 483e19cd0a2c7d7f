//! `simulate --concurrency C [--hung-calls H]`: the hung-tenant scene of
//! the `hung_tenant` example, on the real assignment and a real in-flight
//! limit, driven on a virtual clock, beside what `blast` predicts.
//!
//! `tenant-0` keeps H calls going, each hanging [`HANG`]; every other
//! tenant keeps [`OTHERS_CALLS`] going, each taking [`CALL`] once it holds
//! a permit and waiting at most [`MAX_WAIT`] for one, then trying again
//! [`RETRY`] later (as at once after a full queue). The run lasts [`RUN`].
//! The pools have queues of the limit's default length (50 callers each);
//! the shared limit beside them is one pool whose one FIFO queue holds
//! every caller, as a `tokio::sync::Semaphore`'s.
//! Events (a call ending, a wait running out, a retry) are taken in time
//! order; between them nothing happens, so the clock jumps from one to the
//! next, and the limit's own wakers say which waiters a release served.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use shuffle_limiter::blast::{BlastRadius, HungTenant};
use shuffle_limiter::inflight::{DEFAULT_MAX_QUEUE, InFlight};

use crate::HungArgs;
use crate::common::{Failure, Outcome, usage};
use crate::simulate::DOWN_AT_MOST;

mod scene;

use scene::run;

/// How long each of the hung tenant's calls takes once it holds a permit.
pub(crate) const HANG: Duration = Duration::from_secs(10);
/// How long each call of the others takes.
pub(crate) const CALL: Duration = Duration::from_millis(10);
/// The calls each other tenant keeps going.
pub(crate) const OTHERS_CALLS: u32 = 4;
/// The longest a call waits for its permit before it gives up.
pub(crate) const MAX_WAIT: Duration = Duration::from_millis(100);
/// How long a refused or timed-out call waits before it tries again.
pub(crate) const RETRY: Duration = Duration::from_millis(1);
/// The scene's length.
pub(crate) const RUN: Duration = Duration::from_secs(20);
/// The scene runs on at most this many tenants, to stay fast.
pub(crate) const SCENE_TENANTS: u64 = 200;
/// The most calls the hung tenant may keep going.
const MAX_HUNG_CALLS: u32 = 100_000;

/// The checked `--concurrency` and `--hung-calls`, and blast's prediction.
pub(crate) fn check(b: &BlastRadius, a: &HungArgs) -> Result<Option<HungTenant>, Failure> {
    let Some(c) = a.concurrency else {
        return match a.hung_calls {
            Some(h) => Err(usage(format!(
                "error: --hung-calls {h} needs --concurrency: add --concurrency C, the \
                 in-flight limit the scene splits over --buckets pools"
            ))),
            None => Ok(None),
        };
    };
    let h = a.hung_calls.unwrap_or(c);
    if h > MAX_HUNG_CALLS {
        return Err(usage(format!(
            "error: --hung-calls {h} is more than the scene runs ({MAX_HUNG_CALLS}); lower \
             --hung-calls to at most {MAX_HUNG_CALLS}"
        )));
    }
    let n = b.buckets();
    b.hung(c, h).map(Some).map_err(|_| {
        usage(format!(
            "error: --concurrency {c} cannot be split into --buckets {n} pools: every pool \
             needs a permit; set --concurrency to at least {n} or lower --buckets to at most \
             {}",
            c.max(1)
        ))
    })
}

/// What `simulate --concurrency` measured beside the prediction.
#[derive(Debug, Serialize)]
pub(crate) struct HungMeasured {
    concurrency: u32,
    hung_calls: u32,
    tenants: u64,
    others_calls: u32,
    hang_ms: u64,
    call_ms: u64,
    max_wait_ms: u64,
    run_secs: u64,
    hung_pools: Vec<u32>,
    /// The permits of `tenant-0`'s pools, and those it held (at most H).
    hung_pool_permits: u32,
    /// blast: starved, sharing some pools (not starved), sharing none.
    predicted: Outcome<f64>,
    /// The same by this assignment: starved are the tenants on
    /// `tenant-0`'s exact pools, if it fills them.
    by_shard: Outcome<u64>,
    /// Starved: completed at most 5 % of their calls without `tenant-0`.
    measured: Outcome<u64>,
    p_starved_exact: String,
    /// The share of C the others keep: blast's expectation, by this
    /// assignment, and the others' completed calls against theirs alone.
    capacity_left_predicted: f64,
    capacity_left_by_shard: f64,
    throughput_kept: f64,
    /// Entry j: the mean share of its calls alone a tenant sharing j of
    /// `tenant-0`'s pools completed.
    kept_by_overlap: Vec<Option<f64>>,
    others_completed_alone: u64,
    others_completed: u64,
    hung_completed: u64,
    /// One shared limit of C: blast's starved, and the measured.
    shared_predicted_starved: f64,
    shared_starved: u64,
    shared_others_completed: u64,
}

/// Runs the scene on `tenants` tenants (at most [`SCENE_TENANTS`]) with
/// the assignment of `salt`.
pub(crate) fn measure(
    b: &BlastRadius,
    h: &HungTenant,
    salt: &[u8],
    tenants: u64,
) -> Result<HungMeasured, Failure> {
    let t = tenants.min(SCENE_TENANTS);
    let (c, hung_calls) = (h.concurrency(), h.hung_calls());
    let limit = |pools: u32, per_tenant: u32, max_queue: u32| {
        InFlight::builder()
            .concurrency(c)
            .pools(pools)
            .per_tenant(per_tenant)
            .max_queue(max_queue)
            .salt(salt)
            .build()
            .map(Arc::new)
            .map_err(|e| usage(format!("error: the in-flight limit refused the scene: {e}")))
    };
    let pools = limit(b.buckets(), b.per_tenant(), DEFAULT_MAX_QUEUE)?;
    // One semaphore, as tokio's: one FIFO queue that holds every caller.
    let callers = hung_calls.saturating_add(OTHERS_CALLS * (t as u32 - 1));
    let shared = limit(1, 1, callers)?;
    let hung = pools.shard("tenant-0");
    let permits: u32 = hung.buckets().iter().map(|&p| pools.permits(p)).sum();
    let fills = hung_calls >= permits;
    let overlaps: Vec<usize> = (1..t)
        .map(|i| pools.shard(format!("tenant-{i}")).overlap(&hung))
        .collect();

    let alone = run(&pools, t, 0);
    let flooded = run(&pools, t, hung_calls);
    let through_one = run(&shared, t, hung_calls);

    let k = b.per_tenant() as usize;
    let mut by_shard = Outcome::<u64>::default();
    let mut measured = Outcome::<u64>::default();
    let (mut sum, mut n) = (vec![0.0; k + 1], vec![0u64; k + 1]);
    let mut shared_starved = 0;
    for (i, &j) in overlaps.iter().enumerate() {
        let state = |starved: bool| match (starved, j) {
            (true, _) => 0,
            (false, 0) => 2,
            (false, _) => 1,
        };
        count(&mut by_shard, state(fills && j == k));
        let kept = flooded[i + 1] as f64 / alone[i + 1].max(1) as f64;
        count(&mut measured, state(kept <= DOWN_AT_MOST));
        sum[j] += kept;
        n[j] += 1;
        let kept_shared = through_one[i + 1] as f64 / alone[i + 1].max(1) as f64;
        shared_starved += u64::from(kept_shared <= DOWN_AT_MOST);
    }
    let others = |counts: &[u64]| counts[1..].iter().sum::<u64>();
    let held = hung_calls.min(permits);
    Ok(HungMeasured {
        concurrency: c,
        hung_calls,
        tenants: t,
        others_calls: OTHERS_CALLS,
        hang_ms: HANG.as_millis() as u64,
        call_ms: CALL.as_millis() as u64,
        max_wait_ms: MAX_WAIT.as_millis() as u64,
        run_secs: RUN.as_secs(),
        hung_pools: hung.buckets().to_vec(),
        hung_pool_permits: permits,
        predicted: h.tenants(t).into(),
        by_shard,
        measured,
        p_starved_exact: h.p_starved_exact().to_string(),
        capacity_left_predicted: h.capacity_left(),
        capacity_left_by_shard: f64::from(c - held) / f64::from(c),
        throughput_kept: others(&flooded) as f64 / others(&alone).max(1) as f64,
        kept_by_overlap: sum
            .iter()
            .zip(&n)
            .map(|(&s, &n)| (n > 0).then(|| s / n as f64))
            .collect(),
        others_completed_alone: others(&alone),
        others_completed: others(&flooded),
        hung_completed: flooded[0],
        shared_predicted_starved: h.shared(t).fully_down,
        shared_starved,
        shared_others_completed: others(&through_one),
    })
}

/// Adds one tenant to state 0 (starved), 1 (sharing) or 2 (untouched).
fn count(outcome: &mut Outcome<u64>, state: u8) {
    match state {
        0 => outcome.fully_down += 1,
        1 => outcome.degraded += 1,
        _ => outcome.unaffected += 1,
    }
}

impl fmt::Display for HungMeasured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let others = self.tenants - 1;
        writeln!(
            f,
            "hung tenant: an in-flight limit of C = {} over the pools; tenant-0 (pools {:?}, {} \
             permits) keeps {} calls going,",
            self.concurrency, self.hung_pools, self.hung_pool_permits, self.hung_calls
        )?;
        writeln!(
            f,
            "  each hanging {} s; the other {others} keep {} calls going each, of {} ms, each \
             waiting at most {} ms for a permit; {} s on a virtual clock",
            self.hang_ms / 1000,
            self.others_calls,
            self.call_ms,
            self.max_wait_ms,
            self.run_secs
        )?;
        writeln!(
            f,
            "                                     starved  share pools   untouched   capacity left"
        )?;
        let (pr, by, me) = (&self.predicted, &self.by_shard, &self.measured);
        writeln!(
            f,
            "  predicted (blast)              {:>12.2} {:>11.2} {:>11.2} {:>14.1}%",
            pr.fully_down,
            pr.degraded,
            pr.unaffected,
            100.0 * self.capacity_left_predicted
        )?;
        writeln!(
            f,
            "  by shard (this assignment)     {:>12} {:>11} {:>11} {:>14.1}%",
            by.fully_down,
            by.degraded,
            by.unaffected,
            100.0 * self.capacity_left_by_shard
        )?;
        writeln!(
            f,
            "  measured (InFlight)            {:>12} {:>11} {:>11} {:>14.1}%",
            me.fully_down,
            me.degraded,
            me.unaffected,
            100.0 * self.throughput_kept
        )?;
        writeln!(
            f,
            "  one shared limit of {:<10} {:>12.2} {:>11} {:>11}    (measured {} starved)",
            self.concurrency, self.shared_predicted_starved, "", "", self.shared_starved
        )?;
        let kept: Vec<String> = (self.kept_by_overlap.iter().enumerate())
            .map(|(j, s)| match s {
                Some(s) => format!("{j}: {s:.3}"),
                None => format!("{j}: -"),
            })
            .collect();
        writeln!(
            f,
            "  kept of its calls without tenant-0, by pools shared with it: {}",
            kept.join("  ")
        )?;
        writeln!(
            f,
            "  (P(starved) = {}; measured: starved if it completed <= {:.0}% of its calls \
             without tenant-0;\n   capacity left measured: the others' {} calls against {} \
             without tenant-0, {} through one shared limit)",
            self.p_starved_exact,
            DOWN_AT_MOST * 100.0,
            self.others_completed,
            self.others_completed_alone,
            self.shared_others_completed
        )
    }
}
