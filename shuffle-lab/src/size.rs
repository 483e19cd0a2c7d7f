//! `size`: the exact blast-radius report for one N and k.

use std::fmt;

use serde::Serialize;
use shuffle_limiter::blast::{Count, Fraction};

use crate::SizeArgs;
use crate::borrow::{self, SizeSection};
use crate::common::{self, Failure, ONE_SIZE, Outcome, big, p};
use crate::nested::{self, NestedSection, NoisySection};
use crate::resize::{self, ResizeSection};

/// Everything `size` prints, in one place: the JSON is this struct as it
/// stands, the table is its [`Display`](fmt::Display).
#[derive(Debug, Serialize)]
pub(crate) struct SizeReport {
    buckets: u32,
    per_tenant: u32,
    #[serde(serialize_with = "common::decimal")]
    shards: Count,
    p_identical: f64,
    p_disjoint: f64,
    p_any_overlap: f64,
    overlap_pmf: Vec<f64>,
    #[serde(serialize_with = "common::display_all")]
    overlap_pmf_exact: Vec<Fraction>,
    bucket_blast_radius: f64,
    /// The exact values beside the `f64`s above; the table shows them when short.
    #[serde(skip)]
    exact: Exact,
    #[serde(flatten)]
    tenants: Option<TenantsSection>,
    #[serde(flatten)]
    failed: Option<FailedSection>,
    /// With `--borrow-from`: the borrowing model's numbers.
    #[serde(skip_serializing_if = "Option::is_none")]
    borrowing: Option<SizeSection>,
    /// With `--noisy`: h tenants flooding at once.
    #[serde(skip_serializing_if = "Option::is_none")]
    noisy: Option<NoisySection>,
    /// With `--per-user`: one user of a tenant flooding.
    #[serde(skip_serializing_if = "Option::is_none")]
    nested: Option<NestedSection>,
    /// With `--resize-to`: the share of tenants whose shard changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    resize: Option<ResizeSection>,
}

#[derive(Debug)]
struct Exact {
    p_identical: Fraction,
    p_disjoint: Fraction,
    p_any_overlap: Fraction,
    bucket_blast_radius: Fraction,
}

/// `--tenants T`: one tenant floods; what the other `T − 1` expect.
#[derive(Debug, Serialize)]
struct TenantsSection {
    tenants: u64,
    expected_fully_down: f64,
    expected_degraded: f64,
    expected_unaffected: f64,
    /// `None` (JSON `null`) when k does not divide N.
    fixed_shards: Option<Outcome<f64>>,
    shared_pool: Outcome<f64>,
}

/// `--failed M`: what M failed buckets mean for one tenant.
#[derive(Debug, Serialize)]
struct FailedSection {
    failed: u32,
    p_all_failed: f64,
    p_touched: f64,
    #[serde(skip)]
    p_all_failed_exact: Fraction,
    #[serde(skip)]
    p_touched_exact: Fraction,
}

/// Computes the report for `shuffle-lab size`.
pub(crate) fn run(a: &SizeArgs) -> Result<SizeReport, Failure> {
    let b = common::radius(a.buckets, a.per_tenant, ONE_SIZE)?;
    if a.tenants == Some(0) {
        return Err(common::usage(
            "error: --tenants is 0: set --tenants to 1 or more (the flooding tenant among them)",
        ));
    }
    let lending = borrow::radius(&b, &a.borrow)?;
    let borrowing = lending.as_ref().map(|l| SizeSection::new(l, a.tenants));
    let resize = resize::churn(&b, lending.as_ref(), a.resize_to)?.map(|r| ResizeSection::new(&r));
    let noisy = nested::noisy(&b, &a.nested)?.map(|r| NoisySection::new(&r, a.tenants));
    let nested = nested::per_user(&b, &a.nested)?.map(|r| NestedSection::new(&r, a.tenants));
    let failed = match a.failed {
        Some(m) => {
            let f = b
                .failed(m)
                .map_err(|e| common::blast_failure(e, ONE_SIZE))?;
            Some(FailedSection {
                failed: f.failed,
                p_all_failed: f.p_all_failed,
                p_touched: f.p_touched,
                p_all_failed_exact: f.p_all_failed_exact,
                p_touched_exact: f.p_touched_exact,
            })
        }
        None => None,
    };
    let tenants = a.tenants.map(|t| {
        let t = b.tenants(t);
        TenantsSection {
            tenants: t.tenants,
            expected_fully_down: t.shuffle_sharded.fully_down,
            expected_degraded: t.shuffle_sharded.degraded,
            expected_unaffected: t.shuffle_sharded.unaffected,
            fixed_shards: t.fixed_shards.map(Outcome::from),
            shared_pool: t.shared_pool.into(),
        }
    });
    Ok(SizeReport {
        buckets: b.buckets(),
        per_tenant: b.per_tenant(),
        shards: b.shards().clone(),
        p_identical: b.p_identical(),
        p_disjoint: b.p_disjoint(),
        p_any_overlap: b.p_any_overlap(),
        overlap_pmf: b.overlap_pmf(),
        overlap_pmf_exact: b.overlap_pmf_exact(),
        bucket_blast_radius: b.bucket_blast_radius(),
        exact: Exact {
            p_identical: b.p_identical_exact(),
            p_disjoint: b.p_disjoint_exact(),
            p_any_overlap: b.p_any_overlap_exact(),
            bucket_blast_radius: b.bucket_blast_radius_exact(),
        },
        tenants,
        failed,
        borrowing,
        noisy,
        nested,
        resize,
    })
}

/// A short exact value in parentheses; nothing when it would not fit a line.
struct Short<'a>(&'a Fraction);

impl fmt::Display for Short<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0.to_string();
        if s.len() <= 40 {
            write!(f, "({s})")
        } else {
            Ok(())
        }
    }
}

fn outcome_row(f: &mut fmt::Formatter<'_>, name: &str, o: &Outcome<f64>) -> fmt::Result {
    writeln!(
        f,
        "  {name:<30} {:>11.2} {:>11.2} {:>11.2}",
        o.fully_down, o.degraded, o.unaffected
    )
}

impl fmt::Display for SizeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (n, k, x) = (self.buckets, self.per_tenant, &self.exact);
        writeln!(f, "N = {n} buckets, k = {k} per tenant")?;
        writeln!(f, "  distinct shards C(N,k)        {}", big(&self.shards))?;
        writeln!(
            f,
            "  P(identical shard) 1/C(N,k)   {:<12} {}",
            p(self.p_identical),
            Short(&x.p_identical)
        )?;
        writeln!(
            f,
            "  P(no shared bucket)           {:<12} {}",
            p(self.p_disjoint),
            Short(&x.p_disjoint)
        )?;
        writeln!(
            f,
            "  P(some shared bucket)         {:<12} {}",
            p(self.p_any_overlap),
            Short(&x.p_any_overlap)
        )?;
        writeln!(
            f,
            "  bucket blast radius k/N       {:<12} {}",
            p(self.bucket_blast_radius),
            Short(&x.bucket_blast_radius)
        )?;
        writeln!(f)?;
        writeln!(f, "buckets two tenants share")?;
        writeln!(f, "  shared  probability   exact")?;
        for (j, (q, exact)) in self
            .overlap_pmf
            .iter()
            .zip(&self.overlap_pmf_exact)
            .enumerate()
        {
            let exact = exact.to_string();
            let exact = if exact.len() <= 60 {
                exact.as_str()
            } else {
                "(see --json)"
            };
            writeln!(f, "  {j:<6}  {:<12}  {exact}", p(*q))?;
        }
        if let Some(t) = &self.tenants {
            writeln!(f)?;
            writeln!(
                f,
                "one of {} tenants floods its whole shard; expected among the other {}:",
                t.tenants,
                t.tenants.saturating_sub(1)
            )?;
            writeln!(
                f,
                "  design                          fully down    degraded  unaffected"
            )?;
            let shuffle_sharded = Outcome {
                fully_down: t.expected_fully_down,
                degraded: t.expected_degraded,
                unaffected: t.expected_unaffected,
            };
            outcome_row(f, &format!("shuffle sharding (k = {k})"), &shuffle_sharded)?;
            if let Some((d, e)) = self.borrowing.as_ref().and_then(SizeSection::expected) {
                outcome_row(f, &format!("  with borrowing (d = {d})"), e)?;
            }
            match &t.fixed_shards {
                Some(o) => outcome_row(f, &format!("fixed shards ({} groups of {k})", n / k), o)?,
                None => writeln!(f, "  fixed shards                   (k does not divide N)")?,
            }
            outcome_row(f, "one shared pool", &t.shared_pool)?;
        }
        if let Some(m) = &self.failed {
            writeln!(f)?;
            writeln!(f, "with {} of {n} buckets failed:", m.failed)?;
            writeln!(
                f,
                "  P(all k buckets of a tenant failed)  {:<12} {}",
                p(m.p_all_failed),
                Short(&m.p_all_failed_exact)
            )?;
            writeln!(
                f,
                "  P(a tenant lost at least one)        {:<12} {}",
                p(m.p_touched),
                Short(&m.p_touched_exact)
            )?;
        }
        common::section(f, self.borrowing.as_ref())?;
        common::section(f, self.noisy.as_ref())?;
        common::section(f, self.nested.as_ref())?;
        common::section(f, self.resize.as_ref())?;
        Ok(())
    }
}
