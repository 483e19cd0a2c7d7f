//! Two levels: a tenant's users on `j` of its `k` buckets each, and one of
//! them flooding.

use num_bigint::BigUint;
use num_traits::{One, Zero};

use super::{BlastError, BlastRadius, Count, Fraction, Impact, binomial};

/// What one flooding user does to the other users of its tenant, and to
/// other tenants, when each user draws from `j` of its tenant's `k`
/// buckets (as [`Builder::per_user`](crate::Builder::per_user)); made by
/// [`BlastRadius::per_user`].
///
/// # The model
///
/// A user's `j` buckets are a uniform `j`-subset of its tenant's `k`,
/// independently per user. The flooding user drains its `j` buckets, and
/// only those: its tenant's other buckets keep serving the tenant's other
/// users. Another user of the same tenant is
///
/// * **fully down** when its `j` buckets are the flooder's: `1 / C(k, j)`;
/// * **unaffected** when it shares none of them: `C(k − j, j) / C(k, j)`;
/// * **degraded** otherwise.
///
/// Another tenant shares buckets with the drained `j`, not with the whole
/// shard: it is fully down only if its `k` buckets are all among them,
/// which needs `j = k` (then `1 / C(N, k)`, as without nesting), and
/// unaffected when its shard misses the `j`, `C(N − j, k) / C(N, k)`, more
/// often than the `C(N − k, k) / C(N, k)` of a whole tenant flooding.
///
/// ```
/// use shuffle_limiter::blast::BlastRadius;
///
/// let nested = BlastRadius::new(8, 4)?.per_user(2)?;
/// assert_eq!(nested.p_user_fully_down_exact().to_string(), "1/6"); // 1 / C(4, 2)
/// assert_eq!(nested.p_user_unaffected_exact().to_string(), "1/6"); // C(2, 2) / C(4, 2)
/// assert_eq!(nested.p_user_degraded_exact().to_string(), "2/3");
/// // Of 1,000 users, 999 others: 166.5 down with the flooder, not all 999.
/// assert_eq!(nested.users(1000).fully_down, 166.5);
/// // Other tenants: none fully down, 3/14 = C(6, 4) / C(8, 4) untouched.
/// assert_eq!(nested.p_tenant_fully_down_exact().to_string(), "0/1");
/// assert_eq!(nested.p_tenant_unaffected_exact().to_string(), "3/14");
/// // Without nesting (j = k) every other user goes down with the flooder.
/// let flat = BlastRadius::new(8, 4)?.per_user(4)?;
/// assert_eq!(flat.users(1000).fully_down, 999.0);
/// assert_eq!(flat.p_tenant_fully_down_exact().to_string(), "1/70");
/// # Ok::<(), shuffle_limiter::blast::BlastError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NestedRadius {
    radius: BlastRadius,
    per_user: u32,
    /// `C(k, j)`: the subsets a user of a tenant may have.
    subsets: Count,
}

impl BlastRadius {
    /// The report for users on `per_user` (`j`) of each tenant's `k`
    /// buckets.
    ///
    /// # Errors
    ///
    /// [`BlastError::PerUserOutOfRange`] unless `1 ≤ j ≤ k`.
    pub fn per_user(&self, per_user: u32) -> Result<NestedRadius, BlastError> {
        let k = self.per_tenant;
        if per_user == 0 || per_user > k {
            return Err(BlastError::PerUserOutOfRange {
                per_tenant: k,
                per_user,
            });
        }
        Ok(NestedRadius {
            radius: self.clone(),
            per_user,
            subsets: Count(binomial(k, per_user)),
        })
    }
}

/// # Shape
impl NestedRadius {
    /// The report for whole tenants, the same `N` and `k`.
    pub fn radius(&self) -> &BlastRadius {
        &self.radius
    }

    /// `j`, the buckets per user.
    pub fn per_user(&self) -> u32 {
        self.per_user
    }

    /// `C(k, j)`: how many subsets a user of a tenant may have.
    pub fn subsets(&self) -> &Count {
        &self.subsets
    }

    fn over_subsets(&self, x: BigUint) -> Fraction {
        Fraction::reduced(x, self.subsets.0.clone())
    }

    /// `C(k − j, j)`: the subsets that miss the flooder's.
    fn disjoint_subsets(&self) -> BigUint {
        binomial(self.radius.per_tenant - self.per_user, self.per_user)
    }
}

/// # The flooder's own tenant: its other users
impl NestedRadius {
    /// `1 / C(k, j)`, exactly: the chance that another user of the tenant
    /// holds the flooder's very buckets, and is down with it.
    pub fn p_user_fully_down_exact(&self) -> Fraction {
        self.over_subsets(BigUint::one())
    }

    /// [`p_user_fully_down_exact`](Self::p_user_fully_down_exact), correctly rounded.
    pub fn p_user_fully_down(&self) -> f64 {
        self.p_user_fully_down_exact().to_f64()
    }

    /// `C(k − j, j) / C(k, j)`, exactly: the chance that another user
    /// shares none of the flooder's buckets.
    pub fn p_user_unaffected_exact(&self) -> Fraction {
        self.over_subsets(self.disjoint_subsets())
    }

    /// [`p_user_unaffected_exact`](Self::p_user_unaffected_exact), correctly rounded.
    pub fn p_user_unaffected(&self) -> f64 {
        self.p_user_unaffected_exact().to_f64()
    }

    /// `1 − C(k − j, j) / C(k, j) − 1 / C(k, j)`, exactly: the chance that
    /// another user loses some, not all, of its buckets.
    pub fn p_user_degraded_exact(&self) -> Fraction {
        self.over_subsets(&self.subsets.0 - self.disjoint_subsets() - 1u32)
    }

    /// [`p_user_degraded_exact`](Self::p_user_degraded_exact), correctly rounded.
    pub fn p_user_degraded(&self) -> f64 {
        self.p_user_degraded_exact().to_f64()
    }

    /// With `users` users of the tenant (`U`), one flooding: the expected
    /// number of the other `U − 1` fully down, degraded and unaffected.
    pub fn users(&self, users: u64) -> Impact {
        let others = users.saturating_sub(1);
        let total = |x: BigUint| Fraction::reduced(x * others, self.subsets.0.clone()).to_f64();
        let disjoint = self.disjoint_subsets();
        Impact {
            fully_down: total(BigUint::one()),
            degraded: total(&self.subsets.0 - &disjoint - 1u32),
            unaffected: total(disjoint),
        }
    }
}

/// # Other tenants
impl NestedRadius {
    /// How many shards have all `k` buckets among the flooder's `j`: one
    /// when `j = k`, none otherwise.
    fn down_shards(&self) -> BigUint {
        if self.per_user == self.radius.per_tenant {
            BigUint::one()
        } else {
            BigUint::zero()
        }
    }

    /// `C(N − j, k)`: the shards that miss the flooder's `j` buckets.
    fn missing_shards(&self) -> BigUint {
        binomial(self.radius.buckets - self.per_user, self.radius.per_tenant)
    }

    /// The chance that another tenant is fully down, exactly: `1 / C(N, k)`
    /// when `j = k`, zero when `j < k` (its `k` buckets cannot all be among
    /// the `j` drained).
    pub fn p_tenant_fully_down_exact(&self) -> Fraction {
        self.radius.over_shards(self.down_shards())
    }

    /// [`p_tenant_fully_down_exact`](Self::p_tenant_fully_down_exact), correctly rounded.
    pub fn p_tenant_fully_down(&self) -> f64 {
        self.p_tenant_fully_down_exact().to_f64()
    }

    /// `C(N − j, k) / C(N, k)`, exactly: the chance that another tenant's
    /// shard misses the flooder's `j` buckets.
    pub fn p_tenant_unaffected_exact(&self) -> Fraction {
        self.radius.over_shards(self.missing_shards())
    }

    /// [`p_tenant_unaffected_exact`](Self::p_tenant_unaffected_exact), correctly rounded.
    pub fn p_tenant_unaffected(&self) -> f64 {
        self.p_tenant_unaffected_exact().to_f64()
    }

    /// The chance that another tenant is neither, exactly.
    pub fn p_tenant_degraded_exact(&self) -> Fraction {
        let rest = &self.radius.shards().0 - self.down_shards() - self.missing_shards();
        self.radius.over_shards(rest)
    }

    /// [`p_tenant_degraded_exact`](Self::p_tenant_degraded_exact), correctly rounded.
    pub fn p_tenant_degraded(&self) -> f64 {
        self.p_tenant_degraded_exact().to_f64()
    }

    /// With `tenants` tenants in all (`T`), a user of one of them flooding:
    /// the expected number of the other `T − 1` tenants fully down,
    /// degraded and unaffected.
    pub fn tenants(&self, tenants: u64) -> Impact {
        let others = tenants.saturating_sub(1);
        let total =
            |x: BigUint| Fraction::reduced(x * others, self.radius.shards().0.clone()).to_f64();
        let (down, missing) = (self.down_shards(), self.missing_shards());
        Impact {
            degraded: total(&self.radius.shards().0 - &down - &missing),
            fully_down: total(down),
            unaffected: total(missing),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{BlastError, BlastRadius, Fraction};

    /// Counts, over every pair of `j`-subsets of `k` buckets, the pairs
    /// that are equal and the pairs that are disjoint.
    fn brute_force(k: u32, j: u32) -> (u64, u64, u64) {
        let subsets: Vec<u32> = (0u32..1 << k).filter(|m| m.count_ones() == j).collect();
        let (mut same, mut disjoint) = (0, 0);
        for &a in &subsets {
            for &b in &subsets {
                same += u64::from(a == b);
                disjoint += u64::from(a & b == 0);
            }
        }
        let total = (subsets.len() * subsets.len()) as u64;
        (same, disjoint, total)
    }

    #[test]
    fn the_exact_values_match_a_brute_force_count() {
        for k in 1..=8 {
            for j in 1..=k {
                let r = BlastRadius::new(8, k).unwrap().per_user(j).unwrap();
                let (same, disjoint, total) = brute_force(k, j);
                let want = |x: u64| Fraction::new(x, total).unwrap();
                assert_eq!(r.p_user_fully_down_exact(), want(same), "k {k} j {j}");
                assert_eq!(r.p_user_unaffected_exact(), want(disjoint), "k {k} j {j}");
                assert_eq!(r.p_user_degraded_exact(), want(total - same - disjoint));
            }
        }
    }

    #[test]
    fn other_tenants_feel_only_the_drained_buckets() {
        let b = BlastRadius::new(16, 4).unwrap();
        let one = b.per_user(1).unwrap();
        // Only the tenants holding that one bucket: k / N of them.
        assert_eq!(one.p_tenant_degraded_exact(), b.bucket_blast_radius_exact());
        let all = b.per_user(4).unwrap();
        assert_eq!(all.p_tenant_fully_down_exact(), b.p_identical_exact());
        assert_eq!(all.p_tenant_unaffected_exact(), b.p_disjoint_exact());
        assert_eq!(all.tenants(400), b.tenants(400).shuffle_sharded);
        assert_eq!(
            b.per_user(5),
            Err(BlastError::PerUserOutOfRange {
                per_tenant: 4,
                per_user: 5
            })
        );
        assert!(b.per_user(0).is_err());
    }
}
