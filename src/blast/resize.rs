//! Changing N: the share of tenants whose shard changes when buckets are
//! added or removed at the end.

use super::{BlastError, BlastRadius, BorrowingRadius, Fraction, binomial};

/// What changing the number of buckets from `N` to `N′` does to tenants'
/// shards, when the buckets are added or removed at the end (the new ones
/// numbered `N … N′ − 1`, or the last `N − N′` taken away). Made by
/// [`BlastRadius::resize_to`] for a tenant's own buckets, and by
/// [`BorrowingRadius::resize_to`] for its own and spill buckets together.
///
/// # The model
///
/// A bucket's score for a tenant does not depend on the number of buckets,
/// so under either count the tenant's shard is the first `k` of one ranking,
/// restricted to the buckets that exist. With `m = min(N, N′)` and
/// `M = max(N, N′)`, a tenant keeps its shard exactly (the same buckets in
/// the same order) when its first `k` of all `M` buckets are all below `m`,
/// and its shard changes otherwise. Those `k` buckets are a uniform
/// `k`-subset of the `M`, so
///
/// `P(shard changes) = 1 − C(m, k) / C(M, k)`,
///
/// the same whether buckets are added or removed: `k / (N + 1)` for one
/// bucket added, `k / N` for one removed. It is the least any assignment
/// can move whose shards are uniform over the `k`-subsets both before and
/// after: the distance in total variation between the two uniform laws.
///
/// With `d` spill buckets the same holds for the ranked list of `k + d`
/// (own, then spill): it changes, in its own part or its spill part, with
/// probability `1 − C(m, k + d) / C(M, k + d)`.
///
/// ```
/// use shuffle_limiter::blast::BlastRadius;
///
/// let b = BlastRadius::new(8, 2)?;
/// let grow = b.resize_to(9)?;
/// assert_eq!(grow.p_shard_changed_exact().to_string(), "2/9"); // k / (N + 1)
/// // 1 − C(8, 2) / C(12, 2) = 1 − 28/66
/// assert_eq!(b.resize_to(12)?.p_shard_changed_exact().to_string(), "19/33");
/// // Removing the last bucket again moves the same tenants back.
/// let shrink = BlastRadius::new(9, 2)?.resize_to(8)?;
/// assert_eq!(shrink.p_shard_changed_exact(), grow.p_shard_changed_exact());
/// // Own or spill buckets, with d = 2: 1 − C(8, 4) / C(9, 4).
/// let lending = b.borrowing(2, 0.5)?.resize_to(9)?;
/// assert_eq!(lending.p_ranked_changed_exact().to_string(), "4/9");
/// # Ok::<(), shuffle_limiter::blast::BlastError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResizeChurn {
    from: u32,
    to: u32,
    per_tenant: u32,
    spill: u32,
    shard_changed: Fraction,
    ranked_changed: Fraction,
}

impl BlastRadius {
    /// The report for going from this report's `N` buckets to `to` (`N′`),
    /// added or removed at the end, with `k` buckets per tenant as before.
    ///
    /// Costs two binomial coefficients, like [`BlastRadius::new`].
    ///
    /// # Errors
    ///
    /// [`BlastError::ResizeTooSmall`] if `to < k`.
    pub fn resize_to(&self, to: u32) -> Result<ResizeChurn, BlastError> {
        ResizeChurn::new(self.buckets, to, self.per_tenant, 0)
    }
}

impl BorrowingRadius {
    /// The report for going from `N` buckets to `to` (`N′`), added or
    /// removed at the end, for a tenant's own `k` buckets and its `d` spill
    /// buckets together.
    ///
    /// # Errors
    ///
    /// [`BlastError::ResizeTooSmall`] if `to < k + d`.
    pub fn resize_to(&self, to: u32) -> Result<ResizeChurn, BlastError> {
        let radius = self.radius();
        ResizeChurn::new(radius.buckets(), to, radius.per_tenant(), self.spill())
    }
}

impl ResizeChurn {
    /// Checks that `to` holds the `k + d` buckets a tenant ranks; the
    /// caller has checked `k + d ≤ from`.
    fn new(from: u32, to: u32, per_tenant: u32, spill: u32) -> Result<ResizeChurn, BlastError> {
        if u64::from(per_tenant) + u64::from(spill) > u64::from(to) {
            return Err(BlastError::ResizeTooSmall {
                to,
                per_tenant,
                spill,
            });
        }
        let shard_changed = changed(from, to, per_tenant);
        let ranked_changed = if spill == 0 {
            shard_changed.clone()
        } else {
            changed(from, to, per_tenant + spill)
        };
        Ok(ResizeChurn {
            from,
            to,
            per_tenant,
            spill,
            shard_changed,
            ranked_changed,
        })
    }

    /// `N`, the buckets before the change.
    pub fn from(&self) -> u32 {
        self.from
    }

    /// `N′`, the buckets after the change.
    pub fn to(&self) -> u32 {
        self.to
    }

    /// `k`, the buckets per tenant, the same before and after.
    pub fn per_tenant(&self) -> u32 {
        self.per_tenant
    }

    /// `d`, the spill buckets per tenant (0 without borrowing).
    pub fn spill(&self) -> u32 {
        self.spill
    }

    /// `1 − C(m, k) / C(M, k)`, exactly: the share of tenants whose own
    /// buckets change, as a set (see [the model](ResizeChurn#the-model)).
    /// Every other tenant keeps its shard in the same order.
    pub fn p_shard_changed_exact(&self) -> &Fraction {
        &self.shard_changed
    }

    /// [`p_shard_changed_exact`](Self::p_shard_changed_exact), correctly rounded.
    pub fn p_shard_changed(&self) -> f64 {
        self.shard_changed.to_f64()
    }

    /// `1 − C(m, k + d) / C(M, k + d)`, exactly: the share of tenants whose
    /// own or spill buckets change. Equal to
    /// [`p_shard_changed_exact`](Self::p_shard_changed_exact) when `d = 0`.
    pub fn p_ranked_changed_exact(&self) -> &Fraction {
        &self.ranked_changed
    }

    /// [`p_ranked_changed_exact`](Self::p_ranked_changed_exact), correctly rounded.
    pub fn p_ranked_changed(&self) -> f64 {
        self.ranked_changed.to_f64()
    }
}

/// `1 − C(min, len) / C(max, len)` of `from` and `to`, for `len ≤ min`.
fn changed(from: u32, to: u32, len: u32) -> Fraction {
    let (lo, hi) = (from.min(to), from.max(to));
    Fraction::reduced(binomial(lo, len), binomial(hi, len)).one_minus()
}

#[cfg(test)]
mod tests {
    use super::super::{BlastError, BlastRadius, Fraction};

    fn frac(n: u32, d: u32) -> Fraction {
        Fraction::new(n, d).unwrap()
    }

    fn churn(from: u32, to: u32, k: u32) -> Fraction {
        let r = BlastRadius::new(from, k).unwrap().resize_to(to).unwrap();
        assert_eq!(r.p_shard_changed(), r.p_shard_changed_exact().to_f64());
        r.p_shard_changed_exact().clone()
    }

    #[test]
    fn one_bucket_more_moves_k_in_n_plus_one() {
        for n in 1..=40 {
            for k in 1..=n {
                assert_eq!(
                    churn(n, n + 1, k),
                    frac(k, n + 1),
                    "{n} → {}, k = {k}",
                    n + 1
                );
                assert_eq!(
                    churn(n + 1, n, k),
                    frac(k, n + 1),
                    "{} → {n}, k = {k}",
                    n + 1
                );
            }
        }
    }

    #[test]
    fn the_same_both_ways_and_zero_without_a_change() {
        for a in 1..=20 {
            for b in 1..=20 {
                for k in 1..=a.min(b) {
                    assert_eq!(churn(a, b, k), churn(b, a, k), "{a} ↔ {b}, k = {k}");
                }
            }
            for k in 1..=a {
                assert!(churn(a, a, k).is_zero());
            }
        }
        // k = N: a tenant keeps its shard only if the 2 new buckets both
        // rank below the 3 old ones, 1 in C(5, 3).
        assert_eq!(churn(3, 5, 3), frac(9, 10));
    }

    #[test]
    fn hand_computed_values() {
        assert_eq!(churn(8, 12, 2), frac(19, 33)); // 1 − 28/66
        assert_eq!(churn(16, 12, 3), frac(17, 28)); // 1 − 220/560
        assert_eq!(churn(16, 32, 2), frac(47, 62)); // 1 − 120/496
        assert_eq!(churn(64, 65, 4), frac(4, 65));
        let lending = BlastRadius::new(8, 2).unwrap().borrowing(2, 0.5).unwrap();
        let r = lending.resize_to(9).unwrap();
        assert_eq!((r.from(), r.to(), r.per_tenant(), r.spill()), (8, 9, 2, 2));
        assert_eq!(*r.p_shard_changed_exact(), frac(2, 9));
        assert_eq!(*r.p_ranked_changed_exact(), frac(4, 9)); // 1 − 70/126
        assert_eq!(r.p_ranked_changed(), 4.0 / 9.0);
        let own = BlastRadius::new(8, 2).unwrap().resize_to(6).unwrap();
        assert_eq!(own.p_ranked_changed_exact(), own.p_shard_changed_exact());
        assert_eq!(own.spill(), 0);
    }

    /// Every ranking of `max` buckets, as lists of bucket indices.
    fn rankings(max: u32) -> Vec<Vec<u32>> {
        if max == 0 {
            return vec![Vec::new()];
        }
        let mut all = Vec::new();
        for shorter in rankings(max - 1) {
            for at in 0..=shorter.len() {
                let mut r = shorter.clone();
                r.insert(at, max - 1);
                all.push(r);
            }
        }
        all
    }

    /// Over every ranking of `max(from, to)` buckets, equally likely: the
    /// share whose first `len` among `0..from` and among `0..to` differ.
    fn brute_force(from: u32, to: u32, len: usize) -> Fraction {
        let all = rankings(from.max(to));
        let first = |r: &[u32], n: u32| -> Vec<u32> {
            r.iter().copied().filter(|&b| b < n).take(len).collect()
        };
        let differ = all
            .iter()
            .filter(|r| first(r, from) != first(r, to))
            .count();
        Fraction::new(differ as u32, all.len() as u32).unwrap()
    }

    #[test]
    fn the_exact_values_match_a_count_over_every_ranking() {
        for (from, to) in [(3, 4), (4, 6), (6, 4), (5, 2), (2, 6), (6, 6), (1, 5)] {
            for k in 1..=from.min(to) {
                let b = BlastRadius::new(from, k).unwrap();
                assert_eq!(
                    *b.resize_to(to).unwrap().p_shard_changed_exact(),
                    brute_force(from, to, k as usize),
                    "{from} → {to}, k = {k}"
                );
                for d in 1..=from.min(to) - k {
                    let r = b.borrowing(d, 0.5).unwrap().resize_to(to).unwrap();
                    assert_eq!(
                        *r.p_ranked_changed_exact(),
                        brute_force(from, to, (k + d) as usize),
                        "{from} → {to}, k = {k}, d = {d}"
                    );
                }
            }
        }
    }

    #[test]
    fn too_few_buckets_after_the_change_say_how_many_are_needed() {
        let b = BlastRadius::new(8, 3).unwrap();
        let e = b.resize_to(2).unwrap_err();
        assert_eq!(
            e,
            BlastError::ResizeTooSmall {
                to: 2,
                per_tenant: 3,
                spill: 0
            }
        );
        assert!(
            e.to_string().contains("resize to at least 3 buckets"),
            "{e}"
        );
        assert!(b.resize_to(0).is_err());
        assert!(b.resize_to(3).is_ok());
        let e = b.borrowing(2, 0.5).unwrap().resize_to(4).unwrap_err();
        assert!(
            e.to_string().contains("resize to at least 5 buckets"),
            "{e}"
        );
        assert!(b.borrowing(2, 0.5).unwrap().resize_to(5).is_ok());
    }
}
