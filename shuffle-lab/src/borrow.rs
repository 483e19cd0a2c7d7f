//! `--borrow-from d` and `--lender-reserve r` for `size` and `simulate`: the
//! checked arguments, the model's states, and the predictions `size` shows
//! (`borrow_live` has what `simulate` measures).

use std::fmt;

use serde::Serialize;
use shuffle_limiter::blast::{BlastError, BlastRadius, BorrowingRadius, Count, Fraction};
use shuffle_limiter::{DEFAULT_LENDER_RESERVE, MAX_PER_TENANT, Shard};

use crate::BorrowArgs;
use crate::common::{self, Failure};
use crate::common::{Outcome, p, usage};

/// The borrowing model for `--borrow-from` and `--lender-reserve`, or
/// `None` when borrowing was not asked for. Every message names the flag to
/// change and says to what.
pub(crate) fn radius(b: &BlastRadius, a: &BorrowArgs) -> Result<Option<BorrowingRadius>, Failure> {
    let (n, k) = (b.buckets(), b.per_tenant());
    let Some(d) = a.borrow_from else {
        return match a.lender_reserve {
            Some(r) => Err(usage(format!(
                "error: --lender-reserve {r} has no effect without --borrow-from: add \
                 --borrow-from D (spill buckets per tenant, at most {}) or drop --lender-reserve",
                n - k
            ))),
            None => Ok(None),
        };
    };
    let r = a.lender_reserve.unwrap_or(DEFAULT_LENDER_RESERVE);
    b.borrowing(d, r).map(Some).map_err(|e| {
        usage(match e {
            BlastError::SpillExceedsBuckets { .. } => format!(
                "error: --borrow-from {d} with --per-tenant {k} gives each tenant {} buckets, \
                 more than --buckets {n}: lower --borrow-from to at most {} or raise --buckets \
                 to at least {}",
                u64::from(k) + u64::from(d),
                n - k,
                u64::from(k) + u64::from(d)
            ),
            BlastError::ReserveOutOfRange => format!(
                "error: --lender-reserve {r} is not a share of a bucket's burst: set \
                 --lender-reserve from 0 (lend everything) up to but not including 1, such as 0.5"
            ),
            other => format!("error: {other}"),
        })
    })
}

/// As [`radius`], also within what a real limiter accepts: own and spill
/// buckets together at most [`MAX_PER_TENANT`].
pub(crate) fn radius_for_limiter(
    b: &BlastRadius,
    a: &BorrowArgs,
) -> Result<Option<BorrowingRadius>, Failure> {
    let lending = radius(b, a)?;
    if let Some(l) = &lending {
        let (k, d) = (b.per_tenant(), l.spill());
        if k + d > MAX_PER_TENANT {
            return Err(usage(format!(
                "error: --borrow-from {d} with --per-tenant {k} gives each tenant {} buckets, \
                 and simulate builds a real limiter, which holds at most {MAX_PER_TENANT} per \
                 tenant: lower --borrow-from to at most {}",
                k + d,
                MAX_PER_TENANT.saturating_sub(k)
            )));
        }
    }
    Ok(lending)
}

/// The state a flood leaves `other` in, by the model's definitions
/// ([`BorrowingRadius`]): fully down when it cannot draw on anything the
/// flood left, unaffected when none of its own buckets is within the
/// flooder's reach.
pub(crate) fn state(flooder: &Shard, other: &Shard, reserve_is_zero: bool) -> State {
    let reach = |b: &u32| flooder.contains(*b) || flooder.spill().contains(b);
    let within = |mine: &[u32], theirs: &[u32]| mine.iter().all(|b| theirs.contains(b));
    let down = if reserve_is_zero {
        other.buckets().iter().chain(other.spill()).all(reach)
    } else {
        within(other.buckets(), flooder.buckets()) && within(other.spill(), flooder.spill())
    };
    if down {
        State::FullyDown
    } else if !other.buckets().iter().any(reach) {
        State::Unaffected
    } else {
        State::Degraded
    }
}

/// See [`state`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    FullyDown,
    Degraded,
    Unaffected,
}

impl Outcome<u64> {
    /// Counts one more tenant in `state`.
    pub(crate) fn count(&mut self, state: State) {
        match state {
            State::FullyDown => self.fully_down += 1,
            State::Degraded => self.degraded += 1,
            State::Unaffected => self.unaffected += 1,
        }
    }
}

/// `size --borrow-from d`: the predictions of the borrowing model.
#[derive(Debug, Serialize)]
pub(crate) struct SizeSection {
    spill: u32,
    reserve: f64,
    #[serde(serialize_with = "common::decimal")]
    spill_sets: Count,
    p_fully_down: f64,
    #[serde(serialize_with = "common::display")]
    p_fully_down_exact: Fraction,
    p_degraded: f64,
    p_unaffected: f64,
    sustained_share: f64,
    #[serde(serialize_with = "common::display")]
    sustained_share_exact: Fraction,
    burst_share: f64,
    #[serde(serialize_with = "common::display")]
    burst_share_exact: Fraction,
    owners_keep: f64,
    /// With `--tenants`: expected among the other `T − 1`.
    #[serde(skip_serializing_if = "Option::is_none")]
    expected: Option<Outcome<f64>>,
    #[serde(skip)]
    without: (Fraction, Fraction),
}

impl SizeSection {
    pub(crate) fn new(l: &BorrowingRadius, tenants: Option<u64>) -> SizeSection {
        SizeSection {
            spill: l.spill(),
            reserve: l.reserve(),
            spill_sets: l.spill_sets().clone(),
            p_fully_down: l.p_fully_down(),
            p_fully_down_exact: l.p_fully_down_exact(),
            p_degraded: l.p_degraded(),
            p_unaffected: l.p_unaffected(),
            sustained_share: l.sustained_share(),
            sustained_share_exact: l.sustained_share_exact(),
            burst_share: l.burst_share(),
            burst_share_exact: l.burst_share_exact(),
            owners_keep: l.owners_keep(),
            expected: tenants.map(|t| l.tenants(t).into()),
            without: (
                l.radius().p_identical_exact(),
                l.radius().bucket_blast_radius_exact(),
            ),
        }
    }

    /// The expected fallout with borrowing, for the `--tenants` table.
    pub(crate) fn expected(&self) -> Option<(u32, &Outcome<f64>)> {
        self.expected.as_ref().map(|e| (self.spill, e))
    }
}

impl fmt::Display for SizeSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (d, r) = (self.spill, self.reserve);
        writeln!(
            f,
            "borrowing: d = {d} spill buckets per tenant, lender reserve r = {r}"
        )?;
        writeln!(
            f,
            "  spill sets per shard C(N-k,d)    {}",
            common::big(&self.spill_sets)
        )?;
        writeln!(
            f,
            "  P(fully down under a flood)      {:<12} {}  without borrowing {}",
            p(self.p_fully_down),
            common::short(&self.p_fully_down_exact),
            self.without.0
        )?;
        writeln!(
            f,
            "  P(degraded)                      {}",
            p(self.p_degraded)
        )?;
        writeln!(
            f,
            "  P(unaffected: no own bucket in the flooder's k+d)  {}",
            p(self.p_unaffected)
        )?;
        writeln!(
            f,
            "  sustained share of R, alone      {:<12} {}  without borrowing {}",
            p(self.sustained_share),
            common::short(&self.sustained_share_exact),
            self.without.1
        )?;
        writeln!(
            f,
            "  share of B taken at once         {:<12} {}  (k + d(1-r))/N, B split evenly",
            p(self.burst_share),
            common::short(&self.burst_share_exact)
        )?;
        writeln!(
            f,
            "  owners of a lent bucket keep     {} of its burst, and all of its refill they ask for",
            p(self.owners_keep)
        )
    }
}
