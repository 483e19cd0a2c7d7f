//! `sweep`: one row per N for a fixed k, the table to scan when picking N.

use std::fmt;

use serde::Serialize;
use shuffle_limiter::blast::Count;

use crate::common::{self, Failure, Flags, big, p};
use crate::{BucketRange, SweepArgs};

/// A wide range is sampled in this many geometric steps (plus one).
const STEPS: u32 = 24;

/// The flags as `sweep` spells them: N comes from the top of a range.
const FLAGS: Flags = Flags {
    buckets: "the end of the --buckets range",
    per_tenant: "--per-tenant",
};

/// Everything `sweep` prints: the JSON is this struct, the table its `Display`.
#[derive(Debug, Serialize)]
pub(crate) struct SweepReport {
    per_tenant: u32,
    rows: Vec<SweepRow>,
}

#[derive(Debug, Serialize)]
struct SweepRow {
    buckets: u32,
    #[serde(serialize_with = "common::decimal")]
    shards: Count,
    p_identical: f64,
    bucket_blast_radius: f64,
}

/// Computes the report for `shuffle-lab sweep`.
pub(crate) fn run(a: &SweepArgs) -> Result<SweepReport, Failure> {
    let k = a.per_tenant;
    if k == 0 {
        return Err(common::usage(
            "error: --per-tenant is 0: every tenant needs at least 1 bucket; \
             set --per-tenant to 1 or more",
        ));
    }
    let BucketRange { lo, hi } = a.buckets;
    if hi < k {
        return Err(common::usage(format!(
            "error: every N in {lo}..{hi} is below --per-tenant {k}: raise the end of the \
             --buckets range to at least {k} or lower --per-tenant to at most {hi}"
        )));
    }
    // C(N, k) grows with N: if the largest N is within reach, every N is.
    common::radius(hi, k, FLAGS)?;
    let lo = lo.max(k);
    let mut ns: Vec<u32> = if hi - lo < 32 {
        (lo..=hi).collect()
    } else {
        let ratio = f64::from(hi) / f64::from(lo);
        (0..=STEPS)
            .map(|i| (f64::from(lo) * ratio.powf(f64::from(i) / f64::from(STEPS))).round() as u32)
            .collect()
    };
    ns.dedup();
    let rows = ns
        .into_iter()
        .map(|n| {
            let b = common::radius(n, k, FLAGS)?;
            Ok(SweepRow {
                buckets: n,
                shards: b.shards().clone(),
                p_identical: b.p_identical(),
                bucket_blast_radius: b.bucket_blast_radius(),
            })
        })
        .collect::<Result<_, Failure>>()?;
    Ok(SweepReport {
        per_tenant: k,
        rows,
    })
}

impl fmt::Display for SweepReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "k = {} buckets per tenant", self.per_tenant)?;
        writeln!(
            f,
            "{:>8}  {:>26}  {:>12}  {:>17}",
            "N", "shards C(N,k)", "P(identical)", "bucket blast k/N"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:>8}  {:>26}  {:>12}  {:>17}",
                r.buckets,
                big(&r.shards),
                p(r.p_identical),
                p(r.bucket_blast_radius)
            )?;
        }
        Ok(())
    }
}
