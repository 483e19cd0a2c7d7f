//! What the subcommands share: the failure type, the checked blast-radius
//! report, and number formatting.

use num_bigint::BigUint;
use num_traits::ToPrimitive;
use serde::Serialize;
use shuffle_limiter::blast::{BlastRadius, Impact};

/// The largest `k` the exact report is computed for: it has `k + 1` exact
/// fractions.
pub(crate) const MAX_K: u32 = 4096;
/// The largest `C(N, k)`, in bits, the exact report is computed for.
const MAX_SHARD_BITS: f64 = 16384.0;

/// Why a command failed: a message for one line of stderr and an exit status.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) status: u8,
}

/// Bad arguments: exit status 2.
pub(crate) fn usage(message: impl Into<String>) -> Failure {
    Failure {
        message: message.into(),
        status: 2,
    }
}

/// Validates `N` and `k` and computes the report, refusing sizes whose exact
/// report would be huge.
pub(crate) fn radius(buckets: u32, per_tenant: u32) -> Result<BlastRadius, Failure> {
    if per_tenant > MAX_K {
        return Err(usage(format!(
            "error: --per-tenant {per_tenant} is more than this tool handles ({MAX_K}); lower it"
        )));
    }
    if per_tenant <= buckets {
        let r = per_tenant.min(buckets - per_tenant);
        let bits: f64 = (0..r)
            .map(|i| (f64::from(buckets - i) / f64::from(i + 1)).log2())
            .sum();
        if bits > MAX_SHARD_BITS {
            return Err(usage(format!(
                "error: C({buckets}, {per_tenant}) has about {bits:.0} bits, more than this tool \
                 handles ({MAX_SHARD_BITS}); lower --buckets or --per-tenant"
            )));
        }
    }
    BlastRadius::new(buckets, per_tenant).map_err(|e| usage(format!("error: {e}")))
}

/// Tenants in the three states a flood leaves them in: expected numbers
/// (`f64`) or counted ones (`u64`).
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub(crate) struct Outcome<T> {
    pub(crate) fully_down: T,
    pub(crate) degraded: T,
    pub(crate) unaffected: T,
}

impl From<Impact> for Outcome<f64> {
    fn from(i: Impact) -> Self {
        Outcome {
            fully_down: i.fully_down,
            degraded: i.degraded,
            unaffected: i.unaffected,
        }
    }
}

/// Serializes a list of values by their `Display` text (exact fractions).
pub(crate) fn display_all<T: std::fmt::Display, S: serde::Serializer>(
    items: &[T],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_seq(items.iter().map(ToString::to_string))
}

/// Serializes a big integer as a decimal string: JSON numbers cannot hold it.
pub(crate) fn decimal<S: serde::Serializer>(x: &BigUint, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(x)
}

/// log10 of a positive big integer, to f64 precision.
pub(crate) fn log10(x: &BigUint) -> f64 {
    let drop = x.bits().saturating_sub(64);
    let top = (x >> drop).to_f64().unwrap_or(f64::INFINITY);
    top.log10() + drop as f64 * std::f64::consts::LOG10_2
}

/// A probability or share, readably.
pub(crate) fn p(x: f64) -> String {
    if x == 0.0 || x == 1.0 {
        format!("{x}")
    } else if x > 0.999 {
        // Close to 1: the distance to 1 is what matters.
        format!("1 - {:.4e}", 1.0 - x)
    } else if x >= 1e-3 {
        let s = format!("{x:.6}");
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        format!("{x:.4e}")
    }
}

/// A big decimal number, abbreviated when long.
pub(crate) fn big(x: &BigUint) -> String {
    let s = x.to_string();
    if s.len() <= 24 {
        s
    } else {
        format!(
            "{}.{}e{} ({} digits)",
            &s[..1],
            &s[1..4],
            s.len() - 1,
            s.len()
        )
    }
}
