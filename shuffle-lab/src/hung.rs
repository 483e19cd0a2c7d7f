//! `simulate --concurrency C [--hung-calls H]`: the hung-tenant scene of
//! the `hung_tenant` example, on the real assignment and a real in-flight
//! limit, driven on a virtual clock, beside what `blast` predicts; with
//! `--borrow-from d [--lender-reserve r]` the limit lends, as
//! `borrow_from(d)` and `lender_reserve(r)` make it.
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
use shuffle_limiter::Shard;
use shuffle_limiter::blast::{BlastRadius, BorrowingRadius, HungTenant};
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

/// The checked `--concurrency` and `--hung-calls`, and blast's prediction,
/// with borrowing when `lending` says so.
pub(crate) fn check(
    b: &BlastRadius,
    lending: Option<&BorrowingRadius>,
    a: &HungArgs,
) -> Result<Option<HungTenant>, Failure> {
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
        // Blame the flag that was passed: the hung calls default to C.
        let flag = if a.hung_calls.is_some() {
            "--hung-calls"
        } else {
            "--concurrency"
        };
        return Err(usage(format!(
            "error: {flag} {h} is more hung calls than the scene runs ({MAX_HUNG_CALLS}); \
             lower {flag} to at most {MAX_HUNG_CALLS}"
        )));
    }
    let n = b.buckets();
    let hung = match lending {
        Some(l) => l.hung(c, h),
        None => b.hung(c, h),
    };
    hung.map(Some).map_err(|_| {
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
    /// d and r: the limit's spill pools per tenant and lender's reserve
    /// (both 0 without borrowing).
    spill: u32,
    lender_reserve: f64,
    tenants: u64,
    others_calls: u32,
    hang_ms: u64,
    call_ms: u64,
    max_wait_ms: u64,
    run_secs: u64,
    hung_pools: Vec<u32>,
    hung_spill_pools: Vec<u32>,
    /// The permits of `tenant-0`'s own pools, and those its spill pools
    /// lend above their reserve.
    hung_pool_permits: u32,
    hung_lent_permits: u32,
    /// blast: starved, with some own pool among those `tenant-0` draws on
    /// (not starved), with none; and the same when the pools the others
    /// would borrow from are busy (equal without borrowing).
    predicted: Outcome<f64>,
    predicted_busy: Outcome<f64>,
    /// The same by this assignment: `tenant-0` alone takes what it can of
    /// its H on a fresh limit; starved are the tenants the limit then
    /// refuses a permit at once, and when busy those whose own pools it
    /// left empty.
    by_shard: Outcome<u64>,
    by_shard_busy: Outcome<u64>,
    /// Starved: completed at most 5 % of their calls without `tenant-0`;
    /// over the run, and within the first 10 s, before any of `tenant-0`'s
    /// calls ends (calls that never end, as blast has them).
    measured: Outcome<u64>,
    measured_first: Outcome<u64>,
    p_starved_exact: String,
    /// The permits `tenant-0` holds, and of them borrowed: blast's
    /// expectation, by this assignment, and in the scene on average over
    /// time and at most at once.
    held_predicted: f64,
    held_by_shard: u32,
    held_measured: f64,
    held_most: u64,
    borrowed_predicted: f64,
    borrowed_by_shard: u32,
    borrowed_measured: f64,
    borrowed_most: u64,
    /// The share of C the others keep: blast's expectation, by this
    /// assignment, and the others' completed calls against theirs alone,
    /// over the run and within the first 10 s.
    capacity_left_predicted: f64,
    capacity_left_by_shard: f64,
    throughput_kept: f64,
    throughput_kept_first: f64,
    /// Entry j: the mean share of its calls alone a tenant with j own
    /// pools among those `tenant-0` draws on completed.
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
/// the assignment of `salt`, on a limit that lends when `lending` says so.
pub(crate) fn measure(
    b: &BlastRadius,
    lending: Option<&BorrowingRadius>,
    h: &HungTenant,
    salt: &[u8],
    tenants: u64,
) -> Result<HungMeasured, Failure> {
    let t = tenants.min(SCENE_TENANTS);
    let (c, hung_calls) = (h.concurrency(), h.hung_calls());
    let (d, r) = lending.map_or((0, 0.0), |l| (l.spill(), l.reserve()));
    let limit = |pools: u32, per_tenant: u32, spill: u32, max_queue: u32| {
        InFlight::builder()
            .concurrency(c)
            .pools(pools)
            .per_tenant(per_tenant)
            .borrow_from(spill)
            .lender_reserve(r)
            .max_queue(max_queue)
            .salt(salt)
            .build()
            .map(Arc::new)
            .map_err(|e| usage(format!("error: the in-flight limit refused the scene: {e}")))
    };
    let pools = limit(b.buckets(), b.per_tenant(), d, DEFAULT_MAX_QUEUE)?;
    // One semaphore, as tokio's: one FIFO queue that holds every caller.
    let callers = hung_calls.saturating_add(OTHERS_CALLS * (t as u32 - 1));
    let shared = limit(1, 1, 0, callers)?;
    let hung = pools.shard("tenant-0");
    let permits: u32 = hung.buckets().iter().map(|&p| pools.permits(p)).sum();
    let lent: u32 = (hung.spill().iter())
        .map(|&p| pools.permits(p) - pools.reserve(p))
        .sum();
    let shards: Vec<Shard> = (1..t).map(|i| pools.shard(format!("tenant-{i}"))).collect();
    // Own pools among those tenant-0 draws on: the model's "sharing".
    let reach = |other: &Shard| {
        let drawn = |p: &&u32| hung.contains(**p) || hung.spill().contains(p);
        other.buckets().iter().filter(drawn).count()
    };
    let fresh = limit(b.buckets(), b.per_tenant(), d, DEFAULT_MAX_QUEUE)?;
    let Filled {
        starved,
        emptied,
        held,
        borrowed,
    } = fill_alone(&fresh, t, h);

    let without = run(&pools, t, 0);
    let alone = &without.completed;
    let flooded = run(&pools, t, hung_calls);
    let through_one = run(&shared, t, hung_calls).completed;
    let done = &flooded.completed;
    let (first, alone_first) = (&flooded.completed_first, &without.completed_first);

    let k = b.per_tenant() as usize;
    let (mut by_shard, mut by_shard_busy) = (Outcome::<u64>::default(), Outcome::default());
    let mut measured = Outcome::<u64>::default();
    let mut measured_first = Outcome::<u64>::default();
    let (mut sum, mut n) = (vec![0.0; k + 1], vec![0u64; k + 1]);
    let mut shared_starved = 0;
    for (i, other) in shards.iter().enumerate() {
        let j = reach(other);
        let state = |starved: bool| match (starved, j) {
            (true, _) => 0,
            (false, 0) => 2,
            (false, _) => 1,
        };
        count(&mut by_shard, state(starved[i]));
        count(&mut by_shard_busy, state(emptied[i]));
        let kept = done[i + 1] as f64 / alone[i + 1].max(1) as f64;
        count(&mut measured, state(kept <= DOWN_AT_MOST));
        let kept_first = first[i + 1] as f64 / alone_first[i + 1].max(1) as f64;
        count(&mut measured_first, state(kept_first <= DOWN_AT_MOST));
        sum[j] += kept;
        n[j] += 1;
        let kept_shared = through_one[i + 1] as f64 / alone[i + 1].max(1) as f64;
        shared_starved += u64::from(kept_shared <= DOWN_AT_MOST);
    }
    let others = |counts: &[u64]| counts[1..].iter().sum::<u64>();
    Ok(HungMeasured {
        concurrency: c,
        hung_calls,
        spill: d,
        lender_reserve: if d > 0 { r } else { 0.0 },
        tenants: t,
        others_calls: OTHERS_CALLS,
        hang_ms: HANG.as_millis() as u64,
        call_ms: CALL.as_millis() as u64,
        max_wait_ms: MAX_WAIT.as_millis() as u64,
        run_secs: RUN.as_secs(),
        hung_pools: hung.buckets().to_vec(),
        hung_spill_pools: hung.spill().to_vec(),
        hung_pool_permits: permits,
        hung_lent_permits: lent,
        predicted: h.tenants(t).into(),
        predicted_busy: h.tenants_busy(t).into(),
        by_shard,
        by_shard_busy,
        measured,
        measured_first,
        p_starved_exact: h.p_starved_exact().to_string(),
        held_predicted: h.held(),
        held_by_shard: held,
        held_measured: flooded.hung_mean[0],
        held_most: flooded.hung_most[0],
        borrowed_predicted: h.borrowed(),
        borrowed_by_shard: borrowed,
        borrowed_measured: flooded.hung_mean[1],
        borrowed_most: flooded.hung_most[1],
        capacity_left_predicted: h.capacity_left(),
        capacity_left_by_shard: f64::from(c - held) / f64::from(c),
        throughput_kept: others(done) as f64 / others(alone).max(1) as f64,
        throughput_kept_first: others(first) as f64 / others(alone_first).max(1) as f64,
        kept_by_overlap: sum
            .iter()
            .zip(&n)
            .map(|(&s, &n)| (n > 0).then(|| s / n as f64))
            .collect(),
        others_completed_alone: others(alone),
        others_completed: others(done),
        hung_completed: done[0],
        shared_predicted_starved: h.shared(t).fully_down,
        shared_starved,
        shared_others_completed: others(&through_one),
    })
}

/// What `tenant-0` alone leaves on a fresh limit.
struct Filled {
    /// Of `tenant-1` …: whether the limit refuses it a permit at once.
    starved: Vec<bool>,
    /// Of `tenant-1` …: whether its own pools are all empty.
    emptied: Vec<bool>,
    /// The permits `tenant-0` holds, and of them borrowed.
    held: u32,
    borrowed: u32,
}

/// `tenant-0` takes what it can of its H permits on the fresh `limit`,
/// then each of `tenant-1` … `tenant-(t−1)` asks for one, given back at
/// once.
fn fill_alone(limit: &InFlight, t: u64, h: &HungTenant) -> Filled {
    let held: Vec<_> = std::iter::from_fn(|| limit.try_acquire("tenant-0").ok())
        .take(h.hung_calls() as usize)
        .collect();
    let names = || (1..t).map(|i| format!("tenant-{i}"));
    let empty = |p: &u32| limit.free(*p) == 0;
    Filled {
        starved: names()
            .map(|n| limit.try_acquire(n.as_str()).is_err())
            .collect(),
        emptied: names()
            .map(|n| limit.shard(n.as_str()).buckets().iter().all(empty))
            .collect(),
        held: held.len() as u32,
        borrowed: held.iter().filter(|p| p.borrowed()).count() as u32,
    }
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
        if self.spill > 0 {
            writeln!(
                f,
                "  borrowing (d = {}, r = {}): tenant-0 may also take the {} permits its spill \
                 pools {:?} hold above their reserve",
                self.spill, self.lender_reserve, self.hung_lent_permits, self.hung_spill_pools
            )?;
        }
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
        if self.spill > 0 {
            let b = &self.predicted_busy;
            writeln!(
                f,
                "    when the pools are busy      {:>12.2} {:>11.2} {:>11.2}",
                b.fully_down, b.degraded, b.unaffected
            )?;
        }
        writeln!(
            f,
            "  by shard (this assignment)     {:>12} {:>11} {:>11} {:>14.1}%",
            by.fully_down,
            by.degraded,
            by.unaffected,
            100.0 * self.capacity_left_by_shard
        )?;
        if self.spill > 0 {
            let b = &self.by_shard_busy;
            writeln!(
                f,
                "    when the pools are busy      {:>12} {:>11} {:>11}",
                b.fully_down, b.degraded, b.unaffected
            )?;
        }
        writeln!(
            f,
            "  measured (InFlight)            {:>12} {:>11} {:>11} {:>14.1}%",
            me.fully_down,
            me.degraded,
            me.unaffected,
            100.0 * self.throughput_kept
        )?;
        let (mf, first) = (
            &self.measured_first,
            format!("first {} s", self.hang_ms / 1000),
        );
        writeln!(
            f,
            "    its {first:<24} {:>12} {:>11} {:>11} {:>14.1}%",
            mf.fully_down,
            mf.degraded,
            mf.unaffected,
            100.0 * self.throughput_kept_first
        )?;
        writeln!(
            f,
            "  one shared limit of {:<10} {:>12.2} {:>11} {:>11}    (measured {} starved)",
            self.concurrency, self.shared_predicted_starved, "", "", self.shared_starved
        )?;
        let borrowed = |b: String| {
            if self.spill > 0 {
                format!(" ({b})")
            } else {
                String::new()
            }
        };
        writeln!(
            f,
            "  tenant-0 holds{}: predicted {:.2}{}, by shard {}{}, measured {:.2}{} on average, \
             at most {}{}",
            if self.spill > 0 { " (borrowed)" } else { "" },
            self.held_predicted,
            borrowed(format!("{:.2}", self.borrowed_predicted)),
            self.held_by_shard,
            borrowed(self.borrowed_by_shard.to_string()),
            self.held_measured,
            borrowed(format!("{:.2}", self.borrowed_measured)),
            self.held_most,
            borrowed(self.borrowed_most.to_string()),
        )?;
        let kept: Vec<String> = (self.kept_by_overlap.iter().enumerate())
            .map(|(j, s)| match s {
                Some(s) => format!("{j}: {s:.3}"),
                None => format!("{j}: -"),
            })
            .collect();
        let shared = if self.spill > 0 {
            "own pools among those it draws on"
        } else {
            "pools shared with it"
        };
        writeln!(
            f,
            "  kept of its calls without tenant-0, by {shared}: {}",
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
        )?;
        if self.spill > 0 {
            writeln!(
                f,
                "  (busy: none of the pools a tenant would borrow from has a permit free for it, \
                 as here, where the others keep every pool in use;\n   so tenant-0's calls, made \
                 again after {} s, borrow nothing back: the others keep more over the run than \
                 at first)",
                self.hang_ms / 1000
            )?;
        }
        Ok(())
    }
}
