//! `simulate --borrow-from d`: the borrowing model beside what the live
//! flood and a lone tenant did on a real limiter.

use std::fmt;
use std::time::Duration;

use serde::Serialize;
use shuffle_limiter::blast::BorrowingRadius;
use shuffle_limiter::{Quota, Shard};

use crate::SimulateArgs;
use crate::common::{Failure, Outcome, p, usage};
use crate::simulate::{self, LIVE_STEPS, STEP};

/// The largest burst the live scene uses: the flooder's first step takes
/// most of it, one check at a time.
const MAX_LENT_BURST: u32 = 1_000_000;

/// The least burst for a scene stepping by `step` at `rate` per second:
/// one at which a spill bucket emptied to its reserve takes two steps to
/// fill, `(1 − r) · B / N ≥ 2 · step · R / N`. A borrower that comes back
/// once a step then finds room for all the refill; with a smaller burst
/// the refill would overflow a full bucket, and a lone tenant would
/// sustain less than `(k + d) / N` of R. Refused when a reserve near 1
/// would make that burst too large to simulate.
pub(crate) fn least_burst(
    rate: u32,
    step: Duration,
    lending: &BorrowingRadius,
) -> Result<u32, Failure> {
    let refill = 2.0 * step.as_secs_f64() * f64::from(rate);
    let r = lending.reserve();
    let burst = (refill / (1.0 - r)).ceil();
    if burst > f64::from(MAX_LENT_BURST) {
        let most = 1.0 - refill / f64::from(MAX_LENT_BURST);
        return Err(usage(format!(
            "error: --lender-reserve {r} leaves so little of a bucket to lend that the \
             simulated budget would need a burst of {burst} tokens (at most {MAX_LENT_BURST}); \
             lower --lender-reserve to at most {:.5}",
            (most * 1e5).floor() / 1e5
        )));
    }
    Ok(burst as u32)
}

/// What the live flood and the lone tenant measured.
pub(crate) struct Measured {
    /// The others, `T − 1`, and how many of them are in each state by the
    /// model's definitions.
    pub(crate) others: u64,
    pub(crate) by_state: Outcome<u64>,
    /// The budget's burst, B.
    pub(crate) burst: u32,
    /// Every bucket's burst.
    pub(crate) bursts: Vec<u32>,
    /// The flooder's grants in the first step, from full buckets.
    pub(crate) flood_burst: u64,
    /// The flooder's grants after the first step, as a share of R · t.
    pub(crate) flood_share: f64,
    /// The same for `tenant-0` alone on a fresh limiter.
    pub(crate) lone_share: f64,
    /// The fewest tokens any lent bucket held right after the flooder's turn.
    pub(crate) lent_fewest_left: u64,
    /// The granted shares of the tenants owning a lent bucket, the
    /// flooder's shard excepted.
    pub(crate) owner_shares: Vec<f64>,
}

/// A count beside its binomial expectation.
#[derive(Debug, Serialize)]
struct Check {
    observed: u64,
    expected: f64,
    sigma: f64,
}

impl Check {
    /// `observed` of `trials` against probability `q`.
    fn new(observed: u64, trials: u64, q: f64) -> Check {
        let t = trials as f64;
        Check {
            observed,
            expected: t * q,
            sigma: (t * q * (1.0 - q)).sqrt(),
        }
    }

    /// Whether the count is within 4 σ (or, with σ = 0, exactly expected).
    fn within_4_sigma(&self) -> bool {
        (self.observed as f64 - self.expected).abs() <= (4.0 * self.sigma).max(0.5)
    }
}

/// `simulate --borrow-from d`: the borrowing model against the real
/// assignment and the live flood.
#[derive(Debug, Serialize)]
pub(crate) struct SimulateSection {
    spill: u32,
    reserve: f64,
    flooder_spill: Vec<u32>,
    /// Over all `T − 1` others, by the assignment: fully down and unaffected.
    assignment_fully_down: Check,
    assignment_unaffected: Check,
    /// What the flooder took in the first step, from full buckets …
    flood_burst: u64,
    /// … and what the model says: `(k + d(1 − r))/N` of B (for an even split).
    flood_burst_predicted: f64,
    /// The flooder's grants after the first step, as a share of `R · t`.
    flood_share: f64,
    /// At most `(k + d)/N`.
    flood_share_at_most: f64,
    /// The same limiter with one tenant alone, retrying until denied.
    lone_share: f64,
    lone_share_predicted: f64,
    lone_share_without_borrowing: f64,
    /// The fewest tokens a lent bucket held right after the flooder's turn,
    /// over every step, against `⌊r · burst⌋`, the fewest of those buckets.
    lent_fewest_left: u64,
    lent_reserve_tokens: u64,
    /// How many tenants own a lent bucket (the flooder's shard excepted),
    /// and the smallest and mean share of their requests granted.
    owners: u64,
    owners_min_share: Option<f64>,
    owners_mean_share: Option<f64>,
}

impl SimulateSection {
    /// The model `l` for a flood by a tenant with shard `flooder`, beside
    /// what was measured.
    pub(crate) fn new(l: &BorrowingRadius, flooder: &Shard, m: Measured) -> SimulateSection {
        let lent = flooder.spill();
        let owners = m.owner_shares.len();
        SimulateSection {
            spill: l.spill(),
            reserve: l.reserve(),
            flooder_spill: lent.to_vec(),
            assignment_fully_down: Check::new(m.by_state.fully_down, m.others, l.p_fully_down()),
            assignment_unaffected: Check::new(m.by_state.unaffected, m.others, l.p_unaffected()),
            flood_burst: m.flood_burst,
            flood_burst_predicted: l.burst_share() * f64::from(m.burst),
            flood_share: m.flood_share,
            flood_share_at_most: l.sustained_share(),
            lone_share: m.lone_share,
            lone_share_predicted: l.sustained_share(),
            lone_share_without_borrowing: l.radius().bucket_blast_radius(),
            lent_fewest_left: if lent.is_empty() {
                0
            } else {
                m.lent_fewest_left
            },
            lent_reserve_tokens: lent
                .iter()
                .map(|&s| (f64::from(m.bursts[s as usize]) * l.reserve()).floor() as u64)
                .min()
                .unwrap_or(0),
            owners: owners as u64,
            owners_min_share: m.owner_shares.iter().copied().reduce(f64::min),
            owners_mean_share: (owners > 0)
                .then(|| m.owner_shares.iter().sum::<f64>() / owners as f64),
        }
    }
}

impl fmt::Display for SimulateSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "borrowing: d = {}, r = {}; tenant-0's spill set is {:?}",
            self.spill, self.reserve, self.flooder_spill
        )?;
        writeln!(
            f,
            "  over the other tenants        observed      expected         σ"
        )?;
        for (name, c) in [
            ("fully down (shard and spill)", &self.assignment_fully_down),
            ("unaffected (own out of reach)", &self.assignment_unaffected),
        ] {
            writeln!(
                f,
                "  {name:<29} {:>8} {:>13.2} {:>9.2}{}",
                c.observed,
                c.expected,
                c.sigma,
                if c.within_4_sigma() {
                    ""
                } else {
                    "   <-- more than 4σ off"
                }
            )?;
        }
        writeln!(
            f,
            "  flooder at once: {} tokens, predicted {:.2} = (k + d(1-r))/N of the burst",
            self.flood_burst, self.flood_burst_predicted
        )?;
        writeln!(
            f,
            "  flooder sustained: {} of R, at most {} = (k+d)/N",
            p(self.flood_share),
            p(self.flood_share_at_most)
        )?;
        writeln!(
            f,
            "  a lone tenant sustains: {} of R, predicted {} (without borrowing {})",
            p(self.lone_share),
            p(self.lone_share_predicted),
            p(self.lone_share_without_borrowing)
        )?;
        writeln!(
            f,
            "  lent buckets after the flooder's turn: at least {} tokens left, reserve {} tokens",
            self.lent_fewest_left, self.lent_reserve_tokens
        )?;
        match (self.owners_min_share, self.owners_mean_share) {
            (Some(min), Some(mean)) => writeln!(
                f,
                "  their {} owners were granted {:.1}% of their requests (fewest {:.1}%)",
                self.owners,
                mean * 100.0,
                min * 100.0
            ),
            _ => writeln!(f, "  no live tenant owns a lent bucket"),
        }
    }
}

/// `tenant-0` alone on a fresh limiter like the live one, retrying until
/// denied in every step: its grants after the first step, which takes the
/// burst.
pub(crate) fn lone_grants(
    a: &SimulateArgs,
    quota: Quota,
    salt: &[u8],
    lending: &BorrowingRadius,
) -> Result<u64, Failure> {
    let limiter = simulate::limiter(a, quota, salt, Some(lending))?;
    let tenant = limiter.handle("tenant-0");
    let mut grants = 0u64;
    for step in 0..LIVE_STEPS {
        let now = (0..1_000_000).map_while(|_| tenant.check().ok()).count() as u64;
        if step > 0 {
            grants += now;
        }
        limiter.clock().advance(STEP);
    }
    Ok(grants)
}
