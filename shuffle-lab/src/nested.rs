//! `--noisy h` and `--per-user j` for `size`: the checked arguments and the
//! exact predictions (`nested_live` has what `simulate` measures).

use std::fmt;

use serde::Serialize;
use shuffle_limiter::blast::{BlastRadius, Count, Fraction, NestedRadius, NoisyTenants};

use crate::NestedArgs;
use crate::common::{self, Failure, Outcome, p, usage};

/// The largest `h · log2 C(N, k)`, in bits, `--noisy` is computed for.
const MAX_NOISY_BITS: f64 = 65536.0;

/// The report for `--noisy h`, refused when its exact numbers would be huge.
pub(crate) fn noisy(b: &BlastRadius, a: &NestedArgs) -> Result<Option<NoisyTenants>, Failure> {
    let Some(h) = a.noisy else { return Ok(None) };
    if h == 0 {
        return Err(usage(
            "error: --noisy 0 is no flood: set --noisy to the number of tenants flooding at \
             once, 1 or more",
        ));
    }
    let bits = b.shards().log10() / std::f64::consts::LOG10_2;
    if f64::from(h) * bits > MAX_NOISY_BITS {
        return Err(usage(format!(
            "error: --noisy {h} with C({}, {}) ≈ 2^{bits:.0} shards makes exact numbers of \
             {:.0} bits, more than this tool handles ({MAX_NOISY_BITS}); lower --noisy to at \
             most {}",
            b.buckets(),
            b.per_tenant(),
            f64::from(h) * bits,
            (MAX_NOISY_BITS / bits.max(1.0)).floor()
        )));
    }
    Ok(Some(b.noisy(h)))
}

/// The report for `--per-user j`.
pub(crate) fn per_user(b: &BlastRadius, a: &NestedArgs) -> Result<Option<NestedRadius>, Failure> {
    let Some(j) = a.per_user else { return Ok(None) };
    b.per_user(j).map(Some).map_err(|_| {
        usage(format!(
            "error: --per-user {j} is not between 1 and --per-tenant {k}: a user draws from \
             some of its tenant's k buckets; set --per-user between 1 and {k}",
            k = b.per_tenant()
        ))
    })
}

/// `size --noisy h`: h tenants flood at once.
#[derive(Debug, Serialize)]
pub(crate) struct NoisySection {
    flooders: u32,
    p_covered: f64,
    #[serde(serialize_with = "common::display")]
    p_covered_exact: Fraction,
    p_degraded: f64,
    p_untouched: f64,
    #[serde(serialize_with = "common::display")]
    p_untouched_exact: Fraction,
    /// With `--tenants`: expected among the other `T − h`.
    #[serde(skip_serializing_if = "Option::is_none")]
    expected: Option<Outcome<f64>>,
    #[serde(skip)]
    tenants: Option<u64>,
}

impl NoisySection {
    pub(crate) fn new(r: &NoisyTenants, tenants: Option<u64>) -> NoisySection {
        NoisySection {
            flooders: r.noisy(),
            p_covered: r.p_covered(),
            p_covered_exact: r.p_covered_exact().clone(),
            p_degraded: r.p_degraded(),
            p_untouched: r.p_untouched(),
            p_untouched_exact: r.p_untouched_exact().clone(),
            expected: tenants.map(|t| r.tenants(t).into()),
            tenants,
        }
    }
}

impl fmt::Display for NoisySection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = self.flooders;
        writeln!(
            f,
            "{h} tenants flood at once (their shards drawn independently):"
        )?;
        writeln!(
            f,
            "  P(a tenant's whole shard covered: fully down)  {:<12} {}",
            p(self.p_covered),
            common::short(&self.p_covered_exact)
        )?;
        writeln!(
            f,
            "  P(degraded: some, not all, buckets covered)    {}",
            p(self.p_degraded)
        )?;
        writeln!(
            f,
            "  P(untouched: no bucket in any flooder's shard) {:<12} {}",
            p(self.p_untouched),
            common::short(&self.p_untouched_exact)
        )?;
        if let (Some(e), Some(t)) = (&self.expected, self.tenants) {
            writeln!(
                f,
                "  expected among the other {}: {:.2} fully down, {:.2} degraded, {:.2} untouched",
                t.saturating_sub(u64::from(h)),
                e.fully_down,
                e.degraded,
                e.unaffected
            )?;
        }
        Ok(())
    }
}

/// `size --per-user j`: one user of a tenant floods.
#[derive(Debug, Serialize)]
pub(crate) struct NestedSection {
    per_user: u32,
    #[serde(serialize_with = "common::decimal")]
    subsets: Count,
    p_user_fully_down: f64,
    #[serde(serialize_with = "common::display")]
    p_user_fully_down_exact: Fraction,
    p_user_degraded: f64,
    #[serde(serialize_with = "common::display")]
    p_user_degraded_exact: Fraction,
    p_user_unaffected: f64,
    #[serde(serialize_with = "common::display")]
    p_user_unaffected_exact: Fraction,
    p_tenant_fully_down: f64,
    #[serde(serialize_with = "common::display")]
    p_tenant_fully_down_exact: Fraction,
    p_tenant_degraded: f64,
    p_tenant_unaffected: f64,
    #[serde(serialize_with = "common::display")]
    p_tenant_unaffected_exact: Fraction,
    /// With `--tenants`: expected among the other `T − 1` tenants.
    #[serde(skip_serializing_if = "Option::is_none")]
    expected_tenants: Option<Outcome<f64>>,
    #[serde(skip)]
    k: u32,
}

impl NestedSection {
    pub(crate) fn new(r: &NestedRadius, tenants: Option<u64>) -> NestedSection {
        NestedSection {
            per_user: r.per_user(),
            subsets: r.subsets().clone(),
            p_user_fully_down: r.p_user_fully_down(),
            p_user_fully_down_exact: r.p_user_fully_down_exact(),
            p_user_degraded: r.p_user_degraded(),
            p_user_degraded_exact: r.p_user_degraded_exact(),
            p_user_unaffected: r.p_user_unaffected(),
            p_user_unaffected_exact: r.p_user_unaffected_exact(),
            p_tenant_fully_down: r.p_tenant_fully_down(),
            p_tenant_fully_down_exact: r.p_tenant_fully_down_exact(),
            p_tenant_degraded: r.p_tenant_degraded(),
            p_tenant_unaffected: r.p_tenant_unaffected(),
            p_tenant_unaffected_exact: r.p_tenant_unaffected_exact(),
            expected_tenants: tenants.map(|t| r.tenants(t).into()),
            k: r.radius().per_tenant(),
        }
    }
}

impl fmt::Display for NestedSection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (j, k) = (self.per_user, self.k);
        writeln!(
            f,
            "users on j = {j} of their tenant's k = {k} buckets ({} subsets); one user floods:",
            common::big(&self.subsets)
        )?;
        writeln!(f, "  share of the tenant's other users")?;
        writeln!(
            f,
            "    fully down (its very j buckets) 1/C(k,j)    {:<12} {}",
            p(self.p_user_fully_down),
            common::short(&self.p_user_fully_down_exact)
        )?;
        writeln!(
            f,
            "    degraded                                    {:<12} {}",
            p(self.p_user_degraded),
            common::short(&self.p_user_degraded_exact)
        )?;
        writeln!(
            f,
            "    unaffected C(k-j,j)/C(k,j)                  {:<12} {}",
            p(self.p_user_unaffected),
            common::short(&self.p_user_unaffected_exact)
        )?;
        writeln!(f, "  other tenants (the flooder drains only its j buckets)")?;
        writeln!(
            f,
            "    fully down ([j = k] / C(N,k))               {:<12} {}",
            p(self.p_tenant_fully_down),
            common::short(&self.p_tenant_fully_down_exact)
        )?;
        writeln!(
            f,
            "    degraded                                    {}",
            p(self.p_tenant_degraded)
        )?;
        writeln!(
            f,
            "    unaffected C(N-j,k)/C(N,k)                  {:<12} {}",
            p(self.p_tenant_unaffected),
            common::short(&self.p_tenant_unaffected_exact)
        )?;
        if let Some(e) = &self.expected_tenants {
            writeln!(
                f,
                "    expected among the other tenants: {:.2} fully down, {:.2} degraded, \
                 {:.2} unaffected",
                e.fully_down, e.degraded, e.unaffected
            )?;
        }
        Ok(())
    }
}
