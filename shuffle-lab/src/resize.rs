//! `--resize-to N2` for `size` and `simulate`: the share of tenants whose
//! shard changes when N becomes N2 (buckets added or removed at the end),
//! exactly, and as counted on the real assignment.

use std::fmt;

use serde::Serialize;
use shuffle_limiter::blast::{BlastRadius, BorrowingRadius, Fraction, ResizeChurn};
use shuffle_limiter::{Assignment, MAX_BUCKETS};

use crate::common::{self, Failure, Flags, p, usage};

/// How `--resize-to` and the shard size are spelled, for messages about N2.
const RESIZE: Flags = Flags {
    buckets: "--resize-to",
    per_tenant: "--per-tenant",
};

/// The report for `--resize-to`, or `None` when it was not asked for;
/// `lending` adds the own-or-spill share. Every message names the flag to
/// change and says to what.
pub(crate) fn churn(
    b: &BlastRadius,
    lending: Option<&BorrowingRadius>,
    to: Option<u32>,
) -> Result<Option<ResizeChurn>, Failure> {
    let Some(to) = to else { return Ok(None) };
    // The same checks as for --buckets: at least k, and an exact C(N2, k)
    // this tool can print.
    common::radius(to, b.per_tenant(), RESIZE)?;
    let churn = match lending {
        Some(l) => l.resize_to(to).map_err(|_| {
            let (k, d) = (b.per_tenant(), l.spill());
            usage(format!(
                "error: --resize-to {to} leaves fewer buckets than the {} each tenant draws on \
                 (--per-tenant {k} + --borrow-from {d}): raise --resize-to to at least {} or \
                 lower --borrow-from to at most {}",
                k + d,
                k + d,
                to - k
            ))
        })?,
        None => b.resize_to(to).map_err(|e| usage(format!("error: {e}")))?,
    };
    Ok(Some(churn))
}

/// As [`churn`], also within what `simulate` can measure: N2 buckets a real
/// assignment accepts, and `tenants × N2` scores within `max_work`.
pub(crate) fn churn_for_simulate(
    b: &BlastRadius,
    lending: Option<&BorrowingRadius>,
    to: Option<u32>,
    tenants: u64,
    max_work: u64,
) -> Result<Option<ResizeChurn>, Failure> {
    if let Some(to) = to {
        if to > MAX_BUCKETS {
            return Err(usage(format!(
                "error: --resize-to {to} is more than a limiter supports ({MAX_BUCKETS}), and \
                 simulate measures the real assignment; lower --resize-to to at most {MAX_BUCKETS}"
            )));
        }
        if tenants.saturating_mul(u64::from(to)) > max_work {
            return Err(usage(format!(
                "error: --tenants {tenants} with --resize-to {to} would take too long (tenants × \
                 buckets must stay within {max_work}); lower --tenants to at most {} or \
                 --resize-to to at most {}",
                max_work / u64::from(to),
                (max_work / tenants).max(1)
            )));
        }
    }
    churn(b, lending, to)
}

/// One exact share, as a reduced fraction and correctly rounded.
#[derive(Debug, Serialize)]
struct Exact {
    #[serde(serialize_with = "common::display")]
    p_changed_exact: Fraction,
    p_changed: f64,
}

impl Exact {
    fn new(x: &Fraction) -> Exact {
        Exact {
            p_changed_exact: x.clone(),
            p_changed: x.to_f64(),
        }
    }
}

/// `size --resize-to N2`: the exact shares.
#[derive(Debug, Serialize)]
pub(crate) struct ResizeSection {
    from: u32,
    to: u32,
    /// Tenants whose own k buckets change, as a set.
    shard: Exact,
    /// With `--borrow-from d`: tenants whose own or spill buckets change.
    #[serde(skip_serializing_if = "Option::is_none")]
    spill: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ranked: Option<Exact>,
    #[serde(skip)]
    per_tenant: u32,
}

impl ResizeSection {
    pub(crate) fn new(r: &ResizeChurn) -> ResizeSection {
        let lends = r.spill() > 0;
        ResizeSection {
            from: r.from(),
            to: r.to(),
            shard: Exact::new(r.p_shard_changed_exact()),
            spill: lends.then_some(r.spill()),
            ranked: lends.then(|| Exact::new(r.p_ranked_changed_exact())),
            per_tenant: r.per_tenant(),
        }
    }
}

impl fmt::Display for ResizeSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (n, n2, k) = (self.from, self.to, self.per_tenant);
        write!(
            f,
            "N = {n} → {n2} buckets (added or removed at the end), k = {k} per tenant"
        )?;
        match self.spill {
            Some(d) => writeln!(f, ", d = {d} spill:")?,
            None => writeln!(f, ":")?,
        }
        writeln!(
            f,
            "  P(shard changes)       1 - C(min,k)/C(max,k)      {:<12} {}",
            p(self.shard.p_changed),
            common::short(&self.shard.p_changed_exact)
        )?;
        if let Some(r) = &self.ranked {
            writeln!(
                f,
                "  P(own or spill change) 1 - C(min,k+d)/C(max,k+d)  {:<12} {}",
                p(r.p_changed),
                common::short(&r.p_changed_exact)
            )?;
        }
        writeln!(
            f,
            "  (min and max of N and N2; every other tenant keeps its buckets in the same order)"
        )
    }
}

/// One share counted over the tenants, beside the exact one.
#[derive(Debug, Serialize)]
struct Counted {
    #[serde(serialize_with = "common::display")]
    p_changed_exact: Fraction,
    p_changed: f64,
    /// Tenants whose buckets changed, as sets.
    changed: u64,
    /// `changed / tenants`.
    measured: f64,
    /// `sqrt(p (1 − p) / tenants)` for the exact `p`: the binomial standard
    /// error of `measured`.
    standard_error: f64,
    /// `(measured − p) / standard_error`; 0 when both are exact zeros.
    z: f64,
}

impl Counted {
    fn new(exact: &Fraction, changed: u64, tenants: u64) -> Counted {
        let (p, t) = (exact.to_f64(), tenants as f64);
        let measured = changed as f64 / t;
        let standard_error = (p * (1.0 - p) / t).sqrt();
        let d = measured - p;
        let z = if standard_error > 0.0 {
            d / standard_error
        } else if d == 0.0 {
            0.0
        } else {
            f64::INFINITY
        };
        Counted {
            p_changed_exact: exact.clone(),
            p_changed: p,
            changed,
            measured,
            standard_error,
            z,
        }
    }
}

/// `simulate --resize-to N2`: counted on the real assignment.
#[derive(Debug, Serialize)]
pub(crate) struct ResizeMeasured {
    from: u32,
    to: u32,
    tenants: u64,
    /// Tenants whose own k buckets changed.
    shard: Counted,
    /// With `--borrow-from d`: tenants whose own or spill buckets changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    spill: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ranked: Option<Counted>,
    /// Tenants whose buckets stayed the same sets in another order: none,
    /// by the model.
    reordered: u64,
}

/// Whether two lists hold the same buckets, in any order.
fn same_members(a: &[u32], b: &[u32]) -> bool {
    a.len() == b.len() && a.iter().all(|x| b.contains(x))
}

/// Assigns `tenant-0` … `tenant-(tenants−1)` under `salt` with N and with
/// N2 buckets, and counts whose buckets changed.
pub(crate) fn measure(
    r: &ResizeChurn,
    salt: &[u8],
    tenants: u64,
) -> Result<ResizeMeasured, Failure> {
    let (k, d) = (r.per_tenant(), r.spill());
    let assignment = |n: u32| {
        Assignment::new(n, k, salt)
            .and_then(|a| a.with_spill(d))
            .ok_or_else(|| {
                usage(format!(
                    "error: no assignment of {k} + {d} of {n} buckets: keep --per-tenant plus \
                     --borrow-from within both --buckets and --resize-to, and at most 8"
                ))
            })
    };
    let (before, after) = (assignment(r.from())?, assignment(r.to())?);
    let (mut shard_changed, mut ranked_changed, mut reordered) = (0u64, 0u64, 0u64);
    for i in 0..tenants {
        let tenant = format!("tenant-{i}");
        let (old, new) = (before.shard(&tenant), after.shard(&tenant));
        let own = old.same_set(&new);
        let spill = same_members(old.spill(), new.spill());
        shard_changed += u64::from(!own);
        ranked_changed += u64::from(!(own && spill));
        reordered += u64::from(own && spill && old != new);
    }
    Ok(ResizeMeasured {
        from: r.from(),
        to: r.to(),
        tenants,
        shard: Counted::new(r.p_shard_changed_exact(), shard_changed, tenants),
        spill: (d > 0).then_some(d),
        ranked: (d > 0).then(|| Counted::new(r.p_ranked_changed_exact(), ranked_changed, tenants)),
        reordered,
    })
}

fn counted_row(f: &mut fmt::Formatter<'_>, name: &str, c: &Counted) -> fmt::Result {
    writeln!(
        f,
        "  {name:<22} {:>9} {:>10.6} {:>10.6}   {:<10} {:<12} {:>6.2}",
        c.changed,
        c.measured,
        c.standard_error,
        p(c.p_changed),
        common::short(&c.p_changed_exact),
        c.z
    )
}

impl fmt::Display for ResizeMeasured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "N = {} → {} buckets, each of the {} tenants assigned both ways:",
            self.from, self.to, self.tenants
        )?;
        writeln!(
            f,
            "  {:<22} {:>9} {:>10} {:>10}   {:<23} {:>6}",
            "buckets changed", "tenants", "measured", "s.e.", "exact", "z"
        )?;
        counted_row(f, "own (the shard)", &self.shard)?;
        if let (Some(d), Some(r)) = (self.spill, &self.ranked) {
            counted_row(f, &format!("own or spill (d = {d})"), r)?;
        }
        writeln!(
            f,
            "  same buckets in another order: {} (none by the model)",
            self.reordered
        )
    }
}
