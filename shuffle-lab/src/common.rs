//! What the subcommands share: the failure type, the checked blast-radius
//! report, and number formatting.

use serde::Serialize;
use shuffle_limiter::blast::{BlastError, BlastRadius, Count, Fraction, Impact};

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

/// How a subcommand spells the two sizes on its command line, so that a
/// message names the flag the user actually passed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flags {
    /// Where N comes from, e.g. `--buckets`.
    pub(crate) buckets: &'static str,
    /// Where k comes from, e.g. `--per-tenant`.
    pub(crate) per_tenant: &'static str,
}

/// `size` and `simulate`: one N, one k.
pub(crate) const ONE_SIZE: Flags = Flags {
    buckets: "--buckets",
    per_tenant: "--per-tenant",
};

/// Validates `N` and `k` and computes the report, refusing sizes whose exact
/// report would be huge. Every message names a flag from `flags` and says
/// what to change it to.
pub(crate) fn radius(buckets: u32, per_tenant: u32, flags: Flags) -> Result<BlastRadius, Failure> {
    let Flags {
        buckets: bf,
        per_tenant: kf,
    } = flags;
    if per_tenant > MAX_K {
        return Err(usage(format!(
            "error: {kf} {per_tenant} is more than this tool handles ({MAX_K}); \
             lower {kf} to at most {}",
            max_per_tenant(buckets).max(1)
        )));
    }
    if per_tenant <= buckets {
        let bits = shard_bits(buckets, per_tenant);
        if bits > MAX_SHARD_BITS {
            return Err(usage(format!(
                "error: C({buckets}, {per_tenant}) has about {bits:.0} bits, more than this tool \
                 handles ({MAX_SHARD_BITS}); lower {kf} to at most {} or {bf} to at most {}",
                max_per_tenant(buckets),
                max_buckets(per_tenant)
            )));
        }
    }
    BlastRadius::new(buckets, per_tenant).map_err(|e| blast_failure(e, flags))
}

/// log2 of `C(n, k)`, summed the same way every time (the first `min(k, n − k)`
/// factors of the product formula).
fn shard_bits(n: u32, k: u32) -> f64 {
    let r = k.min(n - k);
    (0..r)
        .map(|i| (f64::from(n - i) / f64::from(i + 1)).log2())
        .sum()
}

/// The largest k such that every k' in `1..=k` gives a report this tool
/// computes for `n` buckets (at most `n`, at most [`MAX_K`]).
fn max_per_tenant(n: u32) -> u32 {
    let top = n.min(MAX_K);
    let mut bits = 0.0;
    for i in 0..top {
        // C(n, k) grows with k up to n / 2 and shrinks after it.
        if i < n / 2 {
            bits += (f64::from(n - i) / f64::from(i + 1)).log2();
        }
        if bits > MAX_SHARD_BITS {
            return i;
        }
    }
    top
}

/// The largest N for which `k` buckets per tenant still give a report this
/// tool computes: `C(N, k)` grows with N, so a binary search finds it.
fn max_buckets(k: u32) -> u32 {
    let (mut lo, mut hi) = (k, u32::MAX);
    if shard_bits(hi, k) <= MAX_SHARD_BITS {
        return hi;
    }
    // shard_bits(lo) fits, shard_bits(hi) does not.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if shard_bits(mid, k) <= MAX_SHARD_BITS {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// The library's error, in the words of the command line.
pub(crate) fn blast_failure(e: BlastError, flags: Flags) -> Failure {
    let Flags {
        buckets: bf,
        per_tenant: kf,
    } = flags;
    usage(match e {
        BlastError::NoBuckets => {
            format!("error: {bf} is 0: a limiter needs at least 1 bucket; set {bf} to 1 or more")
        }
        BlastError::NoBucketsPerTenant { buckets } => format!(
            "error: {kf} is 0: every tenant needs at least 1 bucket; \
             set {kf} between 1 and {bf} ({buckets})"
        ),
        BlastError::PerTenantExceedsBuckets {
            buckets,
            per_tenant,
        } => format!(
            "error: {kf} {per_tenant} is more than {bf} {buckets}: a shard cannot hold more \
             buckets than exist; lower {kf} to at most {buckets} or raise {bf} to at least \
             {per_tenant}"
        ),
        BlastError::FailedExceedsBuckets { buckets, failed } => format!(
            "error: --failed {failed} is more than {bf} {buckets}: at most {buckets} buckets \
             can fail; lower --failed to at most {buckets}"
        ),
        other => format!("error: {other}"),
    })
}

/// Tenants in the three states a flood leaves them in: expected numbers
/// (`f64`) or counted ones (`u64`).
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub(crate) struct Outcome<T> {
    pub(crate) fully_down: T,
    pub(crate) degraded: T,
    pub(crate) unaffected: T,
}

impl Outcome<f64> {
    /// The head of the table a live flood prints, and blast's prediction
    /// as its first row.
    pub(crate) fn head(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "                                  fully down    degraded  unaffected"
        )?;
        writeln!(
            f,
            "  predicted (math)              {:>11.2} {:>11.2} {:>11.2}",
            self.fully_down, self.degraded, self.unaffected
        )
    }
}

impl Outcome<u64> {
    /// A row of counts under [`Outcome::head`].
    pub(crate) fn row(&self, f: &mut std::fmt::Formatter<'_>, label: &str) -> std::fmt::Result {
        writeln!(
            f,
            "  {label:<30}{:>11} {:>11} {:>11}",
            self.fully_down, self.degraded, self.unaffected
        )
    }
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

/// Serializes an exact fraction by its `Display` text, such as `"1/120"`.
pub(crate) fn display<S: serde::Serializer>(x: &Fraction, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(x)
}

/// An exact value in parentheses when it is short.
pub(crate) fn short(x: &Fraction) -> String {
    let s = x.to_string();
    if s.len() <= 40 {
        format!("({s})")
    } else {
        String::new()
    }
}

/// Serializes an exact count as a decimal string: JSON numbers cannot hold it.
pub(crate) fn decimal<S: serde::Serializer>(x: &Count, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(x)
}

/// Writes an optional section of a report, after a blank line, when present.
pub(crate) fn section(
    f: &mut std::fmt::Formatter<'_>,
    section: Option<&impl std::fmt::Display>,
) -> std::fmt::Result {
    match section {
        Some(section) => write!(f, "\n{section}"),
        None => Ok(()),
    }
}

/// The line under a live flood's table: the others' mean granted share by
/// how many buckets they share with the flooder.
pub(crate) fn shares_by_overlap(
    f: &mut std::fmt::Formatter<'_>,
    shares: &[Option<f64>],
) -> std::fmt::Result {
    write!(f, "  mean granted share by buckets shared:")?;
    for (j, share) in shares.iter().enumerate() {
        match share {
            Some(share) => write!(f, "  {j}: {:.1}%", share * 100.0)?,
            None => write!(f, "  {j}: -")?,
        }
    }
    writeln!(f)
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
pub(crate) fn big(x: &Count) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The bounds the messages suggest are the largest sizes `radius` accepts.
    #[test]
    fn suggested_bounds_are_exact() {
        for n in [1, 2, 7, 100, 5000, 8192, 27_222, 100_000, 1 << 20, u32::MAX] {
            let k = max_per_tenant(n);
            assert!(k <= n.min(MAX_K), "N = {n}");
            assert!(
                (1..=k).all(|k| shard_bits(n, k) <= MAX_SHARD_BITS),
                "N = {n}"
            );
            if k < n.min(MAX_K) {
                assert!(shard_bits(n, k + 1) > MAX_SHARD_BITS, "N = {n}");
            }
        }
        for k in [1, 2, 100, 1000, 2410, 4000, MAX_K] {
            let n = max_buckets(k);
            assert!(shard_bits(n, k) <= MAX_SHARD_BITS, "k = {k}");
            if n < u32::MAX {
                assert!(shard_bits(n + 1, k) > MAX_SHARD_BITS, "k = {k}");
            }
        }
        assert_eq!(max_per_tenant(100_000), 2410);
        assert_eq!(max_buckets(4000), 27_222);
    }
}
