//! Blast-radius arithmetic for shuffle sharding: size `N` and `k` before you deploy.
//!
//! A limiter with `N` buckets gives every tenant a *shard* of `k` distinct buckets.
//! Two numbers pull against each other when choosing `k`:
//!
//! * [`BlastRadius::p_identical`] — the chance that another tenant got exactly the
//!   same shard as a misbehaving one, `1 / C(N, k)`. That tenant goes down with it.
//!   It falls very fast as `k` grows (up to `k = N / 2`).
//! * [`BlastRadius::bucket_blast_radius`] — the share of all tenants that one
//!   exhausted bucket touches, `k / N`. It grows linearly with `k`.
//!
//! With borrowing on (each tenant may also draw on `d` *spill buckets* above a
//! reserve `r` of their burst), [`BlastRadius::borrowing`] gives a
//! [`BorrowingRadius`]: who a flooding tenant takes down, `1 / (C(N, k) ·
//! C(N − k, d))` of the others, the share of the budget one tenant can use,
//! `(k + d) / N`, and what the owners of a lent bucket keep.
//!
//! Everything here is exact: counts are [`Count`]s and probabilities are
//! reduced [`Fraction`]s; the `f64` variants are derived from the exact values by
//! a correctly rounded conversion ([`Fraction::to_f64`]), so tiny probabilities such
//! as `1 / C(1000, 500) ≈ 3.7e-300` keep every significant bit. A probability below
//! f64's normal range (about `2.2e-308`) still comes out as the nearest
//! representable value: a subnormal number with fewer significant bits, or `0.0`
//! (as for `1 / C(2000, 1000)`). Use the `*_exact` variants when that matters.
//!
//! Three more questions have reports of their own: [`BlastRadius::noisy`]
//! gives a [`NoisyTenants`], the chance that `h` tenants flooding at once
//! cover another tenant's whole shard; [`BlastRadius::per_user`] gives a
//! [`NestedRadius`], what one flooding user does to the other users of its
//! tenant (each on `j` of the tenant's `k` buckets) and to other tenants;
//! [`BlastRadius::resize_to`] gives a [`ResizeChurn`], the share of tenants
//! whose shard changes when `N` changes, buckets added or removed at the end.
//! For in-flight limits, [`BlastRadius::hung`] gives a [`HungTenant`]: who a
//! tenant whose calls hang starves when a concurrency limit is split into
//! `N` pools, `k` per tenant (1 in `C(N, k)` of the others, when it fills
//! its pools), and the capacity the others keep; [`BorrowingRadius::hung`]
//! gives the same report when tenants borrow from their spill pools (1 in
//! `C(N, k) · C(N − k, d)` with a reserve, when it holds all it can).
//!
//! This module depends on nothing else in the crate.
//!
//! # Example
//!
//! ```
//! use shuffle_limiter::blast::BlastRadius;
//!
//! let b = BlastRadius::new(16, 2)?;
//! assert_eq!(b.shards().to_string(), "120");
//! assert_eq!(b.p_identical_exact().to_string(), "1/120");
//! assert_eq!(b.bucket_blast_radius(), 0.125);
//!
//! let pmf: Vec<String> = b.overlap_pmf_exact().iter().map(|f| f.to_string()).collect();
//! assert_eq!(pmf, ["91/120", "7/30", "1/120"]);
//! # Ok::<(), shuffle_limiter::blast::BlastError>(())
//! ```

use num_bigint::BigUint;
use num_traits::{One, Zero};

mod borrow;
mod count;
mod error;
mod fraction;
mod hung;
mod nested;
mod noisy;
mod resize;

pub use borrow::BorrowingRadius;
pub use count::Count;
pub use error::BlastError;
pub use fraction::Fraction;
pub use hung::HungTenant;
pub use nested::NestedRadius;
pub use noisy::NoisyTenants;
pub use resize::ResizeChurn;

/// `C(n, r)`, exactly; zero when `r > n`.
///
/// Costs `min(r, n - r)` multiplications and divisions of a big integer by a
/// machine word. Each partial product `C(n, i)` is an integer, so every
/// division is exact.
fn binomial(n: u32, r: u32) -> BigUint {
    if r > n {
        return BigUint::zero();
    }
    let r = r.min(n - r);
    let mut acc = BigUint::one();
    for i in 0..r {
        acc *= n - i;
        acc /= i + 1;
    }
    acc
}

/// Expected numbers of the *other* tenants in each state when one tenant
/// exhausts every bucket it can reach.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Impact {
    /// Tenants whose every bucket is exhausted: they get nothing.
    pub fully_down: f64,
    /// Tenants with some, but not all, of their buckets exhausted.
    pub degraded: f64,
    /// Tenants sharing no bucket with the bad tenant.
    pub unaffected: f64,
}

/// Three designs side by side for one tenant count; see [`BlastRadius::tenants`].
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct TenantImpact {
    /// The total number of tenants `T`, the bad one included. The numbers below
    /// are about the other `T - 1`.
    pub tenants: u64,
    /// Shuffle sharding: each tenant on `k` of `N` buckets chosen uniformly.
    pub shuffle_sharded: Impact,
    /// Fixed shards: `N` split into `N / k` disjoint groups of `k`, each tenant
    /// on one group chosen uniformly. `None` when `k` does not divide `N`.
    pub fixed_shards: Option<Impact>,
    /// One pool shared by everyone: the bad tenant takes everybody down.
    pub shared_pool: Impact,
}

/// What `m` failed (exhausted) buckets mean for one tenant; see [`BlastRadius::failed`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct FailureImpact {
    /// The number of failed buckets `m`.
    pub failed: u32,
    /// `C(m, k) / C(N, k)`: the chance that all `k` of a tenant's buckets failed.
    pub p_all_failed: f64,
    /// `1 - C(N - m, k) / C(N, k)`: the chance that at least one did.
    pub p_touched: f64,
    /// [`p_all_failed`](Self::p_all_failed), exactly.
    pub p_all_failed_exact: Fraction,
    /// [`p_touched`](Self::p_touched), exactly.
    pub p_touched_exact: Fraction,
}

/// The blast-radius report for `N` buckets with `k` buckets per tenant.
///
/// It assumes that shards are drawn uniformly from all `C(N, k)` sets of `k`
/// buckets, independently per tenant, which is what a good hash-based
/// assignment approximates.
///
/// ```
/// use shuffle_limiter::blast::BlastRadius;
///
/// let b = BlastRadius::new(16, 2)?;
/// let t = b.tenants(400);
/// // Of the 399 others, 399/120 ≈ 3.3 share the bad tenant's exact shard ...
/// assert!((t.shuffle_sharded.fully_down - 399.0 / 120.0).abs() < 1e-12);
/// // ... against 399/8 ≈ 50 with 8 fixed groups of 2, and all 399 with one pool.
/// assert_eq!(t.fixed_shards.unwrap().fully_down, 399.0 / 8.0);
/// assert_eq!(t.shared_pool.fully_down, 399.0);
/// # Ok::<(), shuffle_limiter::blast::BlastError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlastRadius {
    buckets: u32,
    per_tenant: u32,
    shards: Count,
}

/// # Construction and shape
impl BlastRadius {
    /// The report for `buckets` buckets in all (`N`) and `per_tenant` buckets per tenant (`k`).
    ///
    /// Computes `C(N, k)` once, in `min(k, N - k)` big-integer steps.
    ///
    /// # Errors
    ///
    /// [`BlastError::NoBuckets`] if `N = 0`, [`BlastError::NoBucketsPerTenant`] if
    /// `k = 0`, [`BlastError::PerTenantExceedsBuckets`] if `k > N`.
    pub fn new(buckets: u32, per_tenant: u32) -> Result<BlastRadius, BlastError> {
        if buckets == 0 {
            return Err(BlastError::NoBuckets);
        }
        if per_tenant == 0 {
            return Err(BlastError::NoBucketsPerTenant { buckets });
        }
        if per_tenant > buckets {
            return Err(BlastError::PerTenantExceedsBuckets {
                buckets,
                per_tenant,
            });
        }
        Ok(BlastRadius {
            buckets,
            per_tenant,
            shards: Count(binomial(buckets, per_tenant)),
        })
    }

    /// `N`, the number of buckets.
    pub fn buckets(&self) -> u32 {
        self.buckets
    }

    /// `N`, the number of buckets: the old name of [`buckets`](Self::buckets).
    #[deprecated(note = "use `buckets()`: N is called buckets everywhere")]
    pub fn nodes(&self) -> u32 {
        self.buckets
    }

    /// `k`, the number of buckets per tenant.
    pub fn per_tenant(&self) -> u32 {
        self.per_tenant
    }

    /// `C(N, k)`, the number of distinct shards, exactly.
    ///
    /// ```
    /// use shuffle_limiter::blast::BlastRadius;
    ///
    /// let b = BlastRadius::new(1000, 500)?;
    /// assert_eq!(b.shards().to_string().len(), 300); // about 2.7e299
    /// # Ok::<(), shuffle_limiter::blast::BlastError>(())
    /// ```
    pub fn shards(&self) -> &Count {
        &self.shards
    }

    /// `x / C(N, k)`, reduced.
    fn over_shards(&self, x: BigUint) -> Fraction {
        Fraction::reduced(x, self.shards.0.clone())
    }
}

/// # Two tenants: how much their shards overlap
impl BlastRadius {
    /// The exact overlap distribution of two tenants' shards: entry `j`
    /// (for `j = 0..=k`) is `P(they share exactly j buckets)
    /// = C(k, j) · C(N − k, k − j) / C(N, k)`.
    ///
    /// The entries sum to exactly 1. Computed in `O(k)` big-integer steps.
    pub fn overlap_pmf_exact(&self) -> Vec<Fraction> {
        let (n, k) = (self.buckets, self.per_tenant);
        // Shares below 2k - N are impossible: the two shards cannot both fit otherwise.
        let first = (2 * u64::from(k)).saturating_sub(u64::from(n)) as u32;
        let mut pmf: Vec<Fraction> = (0..first)
            .map(|_| Fraction::reduced(BigUint::zero(), BigUint::one()))
            .collect();
        // a = C(k, j) and b = C(N - k, k - j), stepped exactly from j to j + 1.
        let mut a = binomial(k, first);
        let mut b = binomial(n - k, k - first);
        for j in first..=k {
            pmf.push(self.over_shards(&a * &b));
            if j < k {
                a = a * (k - j) / (j + 1);
                // N - 2k + j + 1 >= 1 because j >= 2k - N.
                b = b * (k - j) / (u64::from(n) + u64::from(j) + 1 - 2 * u64::from(k));
            }
        }
        pmf
    }

    /// [`overlap_pmf_exact`](Self::overlap_pmf_exact) as correctly rounded `f64`s.
    ///
    /// Tiny entries keep full relative precision; an entry below f64's
    /// smallest subnormal becomes `0.0`.
    pub fn overlap_pmf(&self) -> Vec<f64> {
        self.overlap_pmf_exact()
            .iter()
            .map(Fraction::to_f64)
            .collect()
    }

    /// `1 / C(N, k)`, exactly: the chance that another tenant has the very same shard.
    pub fn p_identical_exact(&self) -> Fraction {
        self.over_shards(BigUint::one())
    }

    /// `1 / C(N, k)`: the chance that another tenant has the very same shard, and
    /// so goes fully down with a bad one.
    ///
    /// ```
    /// use shuffle_limiter::blast::BlastRadius;
    ///
    /// // C(1000, 500) ≈ 2.7e299; its inverse ≈ 3.7e-300 is rounded once, from
    /// // the exact fraction, so every significant bit is right.
    /// let p = BlastRadius::new(1000, 500)?.p_identical();
    /// assert!(p > 3.6e-300 && p < 3.8e-300);
    /// # Ok::<(), shuffle_limiter::blast::BlastError>(())
    /// ```
    pub fn p_identical(&self) -> f64 {
        self.p_identical_exact().to_f64()
    }

    /// `C(N − k, k) / C(N, k)`, exactly: the chance that two shards share no bucket.
    pub fn p_disjoint_exact(&self) -> Fraction {
        self.over_shards(binomial(self.buckets - self.per_tenant, self.per_tenant))
    }

    /// `C(N − k, k) / C(N, k)`: the chance that two shards share no bucket.
    pub fn p_disjoint(&self) -> f64 {
        self.p_disjoint_exact().to_f64()
    }

    /// `1 − C(N − k, k) / C(N, k)`, exactly: the chance that two shards share a bucket.
    pub fn p_any_overlap_exact(&self) -> Fraction {
        self.p_disjoint_exact().one_minus()
    }

    /// `1 − C(N − k, k) / C(N, k)`: the chance that two shards share at least one
    /// bucket (rounded from the exact value, so it is accurate even when tiny).
    pub fn p_any_overlap(&self) -> f64 {
        self.p_any_overlap_exact().to_f64()
    }
}

/// # Failures: who feels them
impl BlastRadius {
    /// `k / N`, exactly; see [`bucket_blast_radius`](Self::bucket_blast_radius).
    pub fn bucket_blast_radius_exact(&self) -> Fraction {
        Fraction::reduced(self.per_tenant.into(), self.buckets.into())
    }

    /// `k / N`: the share of all tenants whose shard contains one given bucket,
    /// that is, the share that one failed or exhausted bucket touches.
    pub fn bucket_blast_radius(&self) -> f64 {
        f64::from(self.per_tenant) / f64::from(self.buckets)
    }

    /// The old name of [`bucket_blast_radius_exact`](Self::bucket_blast_radius_exact).
    #[deprecated(note = "use `bucket_blast_radius_exact()`")]
    pub fn node_blast_radius_exact(&self) -> Fraction {
        self.bucket_blast_radius_exact()
    }

    /// The old name of [`bucket_blast_radius`](Self::bucket_blast_radius).
    #[deprecated(note = "use `bucket_blast_radius()`")]
    pub fn node_blast_radius(&self) -> f64 {
        self.bucket_blast_radius()
    }

    /// With `tenants` tenants in all (`T`) and one of them exhausting its whole
    /// shard: the expected number of the other `T − 1` that are fully down
    /// (identical shard), degraded (sharing `1..k−1` buckets) and unaffected
    /// (sharing none), beside the same numbers for fixed shards and for one shared
    /// pool.
    ///
    /// For `T = 0` every number is zero.
    pub fn tenants(&self, tenants: u64) -> TenantImpact {
        let others = tenants.saturating_sub(1);
        let total = |x: BigUint| Fraction::reduced(x * others, self.shards.0.clone()).to_f64();
        let disjoint = binomial(self.buckets - self.per_tenant, self.per_tenant);
        // Every share 1..k-1: all shards but the identical one and the disjoint ones.
        let degraded = &self.shards.0 - &disjoint - 1u32;
        let shuffle_sharded = Impact {
            fully_down: total(BigUint::one()),
            degraded: total(degraded),
            unaffected: total(disjoint),
        };
        let fixed_shards = self.buckets.is_multiple_of(self.per_tenant).then(|| {
            let groups = u64::from(self.buckets / self.per_tenant);
            let per = |x: u64| Fraction::reduced(BigUint::from(x) * others, groups.into()).to_f64();
            Impact {
                fully_down: per(1),
                degraded: 0.0,
                unaffected: per(groups - 1),
            }
        });
        TenantImpact {
            tenants,
            shuffle_sharded,
            fixed_shards,
            shared_pool: Impact {
                fully_down: others as f64,
                degraded: 0.0,
                unaffected: 0.0,
            },
        }
    }

    /// With `failed` of the `N` buckets failed (`m`, any particular set): the
    /// chance that a tenant lost all `k` of its buckets, `C(m, k) / C(N, k)`, and
    /// the chance that it lost at least one, `1 − C(N − m, k) / C(N, k)`.
    ///
    /// # Errors
    ///
    /// [`BlastError::FailedExceedsBuckets`] if `m > N`.
    ///
    /// ```
    /// use shuffle_limiter::blast::BlastRadius;
    ///
    /// let f = BlastRadius::new(16, 2)?.failed(2)?;
    /// assert_eq!(f.p_all_failed_exact.to_string(), "1/120");
    /// assert_eq!(f.p_touched_exact.to_string(), "29/120");
    /// # Ok::<(), shuffle_limiter::blast::BlastError>(())
    /// ```
    pub fn failed(&self, failed: u32) -> Result<FailureImpact, BlastError> {
        if failed > self.buckets {
            return Err(BlastError::FailedExceedsBuckets {
                buckets: self.buckets,
                failed,
            });
        }
        let k = self.per_tenant;
        let all = self.over_shards(binomial(failed, k));
        let touched = self
            .over_shards(binomial(self.buckets - failed, k))
            .one_minus();
        Ok(FailureImpact {
            failed,
            p_all_failed: all.to_f64(),
            p_touched: touched.to_f64(),
            p_all_failed_exact: all,
            p_touched_exact: touched,
        })
    }
}
