//! [`Isolation`]: how well a built limiter keeps tenants apart, in numbers,
//! so that a small quota cannot switch shuffle sharding off unnoticed.

use std::fmt;

use crate::assign::Assignment;
use crate::blast::{BlastRadius, Count, Fraction};
use crate::quota::{Per, Quota};

/// Fewer distinct shards than this, or a single bucket, is weak isolation:
/// the limiter warns when it is built.
pub const WEAK_ISOLATION_SHARDS: u32 = 10;

/// How well a limiter keeps tenants apart: the distinct shards C(N, k), the
/// chance P(identical) = 1/C(N, k) that two tenants have exactly the same k
/// buckets, the share k/N of tenants that feel one emptied bucket, and the
/// most one tenant can take, k·R/N sustained and k·B/N at once (more with
/// borrowing or a larger tier); made by
/// [`Limiter::isolation`](crate::Limiter::isolation).
///
/// Small quotas leave few buckets (each needs a token of the burst), and so
/// few shards: `Quota::per_second(1)` with the defaults is one bucket that
/// every tenant shares. The limiter still builds, but its isolation
/// [`is_weak`](Self::is_weak), and with the `metrics` feature a `tracing`
/// event at warn level says so once, when it is built.
///
/// ```
/// use shuffle_limiter::{Quota, ShardedLimiter};
///
/// let limiter = ShardedLimiter::builder().quota(Quota::per_second(80)).build()?;
/// let isolation = limiter.isolation();
/// assert_eq!(isolation.shards().to_string(), "28"); // C(8, 2)
/// assert!(!isolation.is_weak());
/// assert_eq!(
///     isolation.to_string(),
///     "N = 8 buckets, k = 2 per tenant: C(N, k) = 28 distinct shards, \
///      P(identical) = 1/28, k/N = 1/4; one tenant takes at most 20/s (k·R/N), \
///      20 at once (k·B/N)"
/// );
///
/// // One request a second leaves one bucket: no isolation at all.
/// let tiny = ShardedLimiter::builder().quota(Quota::per_second(1)).build()?;
/// assert!(tiny.isolation().is_weak());
/// assert!(tiny.isolation().to_string().ends_with(
///     "weak isolation: one bucket, shared by every tenant: raise the burst to at \
///      least 5 (each bucket needs a token) and use 5 buckets (N) or more"
/// ));
/// # Ok::<(), shuffle_limiter::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Isolation {
    blast: BlastRadius,
    quota: Quota,
}

impl Isolation {
    /// The isolation of a validated assignment under `quota`.
    pub(crate) fn of(assignment: &Assignment, quota: Quota) -> Isolation {
        let blast = BlastRadius::new(assignment.buckets(), assignment.per_tenant())
            .expect("the builder checked 1 <= k <= N");
        Isolation { blast, quota }
    }

    /// N: buckets in all.
    pub fn buckets(&self) -> u32 {
        self.blast.buckets()
    }

    /// k: buckets per tenant.
    pub fn per_tenant(&self) -> u32 {
        self.blast.per_tenant()
    }

    /// C(N, k): the distinct shards.
    pub fn shards(&self) -> &Count {
        self.blast.shards()
    }

    /// P(identical) = 1/C(N, k): the chance that another tenant has exactly
    /// this tenant's k buckets, and goes down with it when it floods.
    pub fn p_identical(&self) -> Fraction {
        self.blast.p_identical_exact()
    }

    /// k/N: the share of tenants whose shard holds one given bucket, who
    /// all feel it when it is emptied.
    pub fn bucket_share(&self) -> Fraction {
        self.blast.bucket_blast_radius_exact()
    }

    /// k·R/N: the most one tenant is granted per the quota's period,
    /// sustained, from its own buckets (borrowing adds the spill buckets'
    /// share above their reserve).
    pub fn tenant_rate(&self) -> f64 {
        self.share_of(self.quota.count())
    }

    /// k·B/N: the most one tenant is granted at once from its own buckets.
    pub fn tenant_burst(&self) -> f64 {
        self.share_of(self.quota.burst())
    }

    fn share_of(&self, total: u32) -> f64 {
        f64::from(total) * f64::from(self.per_tenant()) / f64::from(self.buckets())
    }

    /// Whether isolation is weak: one bucket, or fewer than
    /// [`WEAK_ISOLATION_SHARDS`] distinct shards.
    pub fn is_weak(&self) -> bool {
        self.buckets() == 1 || *self.shards() < Count::from(WEAK_ISOLATION_SHARDS)
    }

    /// The full blast-radius report for this N and k.
    pub fn blast_radius(&self) -> &BlastRadius {
        &self.blast
    }
}

impl fmt::Display for Isolation {
    /// One line, ending with what to change when isolation is weak.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (n, k) = (self.buckets(), self.per_tenant());
        write!(
            f,
            "N = {n} bucket{}, k = {k} per tenant: C(N, k) = {} distinct shard{}, \
             P(identical) = {}, k/N = {}; one tenant takes at most {}/{} (k·R/N), \
             {} at once (k·B/N)",
            if n == 1 { "" } else { "s" },
            self.shards(),
            if *self.shards() == Count::from(1u8) {
                ""
            } else {
                "s"
            },
            self.p_identical(),
            self.bucket_share(),
            Decimal(self.tenant_rate()),
            Per(self.quota.period()),
            Decimal(self.tenant_burst()),
        )?;
        if !self.is_weak() {
            return Ok(());
        }
        // The fewest buckets that give at least 10 shards is 5, with k = 2.
        let more_buckets = if self.quota.burst() < 5 {
            "raise the burst to at least 5 (each bucket needs a token) and use 5 \
             buckets (N) or more"
        } else {
            "use 5 buckets (N) or more"
        };
        f.write_str("; weak isolation: ")?;
        if n == 1 {
            write!(f, "one bucket, shared by every tenant: {more_buckets}")
        } else if n < 5 {
            write!(
                f,
                "fewer than {WEAK_ISOLATION_SHARDS} distinct shards: {more_buckets}"
            )
        } else {
            write!(
                f,
                "fewer than {WEAK_ISOLATION_SHARDS} distinct shards: set per_tenant (k) \
                 nearer N/2, such as 2"
            )
        }
    }
}

/// A number with at most three decimals, without trailing zeros.
struct Decimal(f64);

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = format!("{:.3}", self.0);
        let text = text.trim_end_matches('0').trim_end_matches('.');
        f.write_str(text)
    }
}

/// Warns once, at build, when the isolation of the limiter `name` is weak
/// (a `tracing` event with the `metrics` feature; nothing without it).
pub(crate) fn warn_if_weak(name: &str, isolation: &Isolation) {
    if isolation.is_weak() {
        crate::metrics::weak_isolation(name, isolation);
    }
}
