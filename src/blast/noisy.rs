//! Several noisy tenants at once: how likely their shards together cover a
//! whole other shard.

use num_bigint::BigUint;
use num_traits::{One, Zero};

use super::{BlastRadius, Fraction, Impact, binomial};

/// What `h` tenants flooding at once do to another tenant; made by
/// [`BlastRadius::noisy`].
///
/// # The model
///
/// Every shard is a uniform `k`-subset of the `N` buckets, independently
/// per tenant. The `h` flooders drain every bucket of their shards. Another
/// tenant is
///
/// * **covered** (fully down) when each of its `k` buckets is in some
///   flooder's shard. By inclusion–exclusion over the buckets of its shard
///   that no flooder holds,
///   `P = Σᵢ (−1)ⁱ · C(k, i) · (C(N − i, k) / C(N, k))ʰ` for `i = 0..=k`;
/// * **untouched** when no flooder holds any of its buckets,
///   `(C(N − k, k) / C(N, k))ʰ`;
/// * **degraded** otherwise.
///
/// With `h = 1` these are [`BlastRadius::p_identical`] and
/// [`BlastRadius::p_disjoint`].
///
/// ```
/// use shuffle_limiter::blast::BlastRadius;
///
/// let b = BlastRadius::new(8, 4)?;
/// let two = b.noisy(2);
/// // (70² − 4·35² + 6·15² − 4·5² + 1²) / 70²
/// assert_eq!(two.p_covered_exact().to_string(), "1251/4900");
/// assert_eq!(two.p_untouched_exact().to_string(), "1/4900"); // (1/70)²
/// assert_eq!(*b.noisy(1).p_covered_exact(), b.p_identical_exact());
/// // Of 400 tenants, 2 flood: the other 398 expect 101.6 fully down.
/// assert!((two.tenants(400).fully_down - 398.0 * 1251.0 / 4900.0).abs() < 1e-9);
/// # Ok::<(), shuffle_limiter::blast::BlastError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoisyTenants {
    noisy: u32,
    covered: Fraction,
    untouched: Fraction,
}

impl BlastRadius {
    /// The report for `noisy` tenants (`h`) flooding at once.
    ///
    /// Exact: it works with numbers of about `h · log2 C(N, k)` bits, `k + 1`
    /// of them, so a very large `h` with a large `C(N, k)` costs time and
    /// memory in proportion. `h = 0` is no flood: nobody is covered.
    pub fn noisy(&self, noisy: u32) -> NoisyTenants {
        let (n, k) = (self.buckets, self.per_tenant);
        let all = self.shards.0.pow(noisy);
        // Inclusion–exclusion, the positive and negative terms apart.
        let (mut plus, mut minus) = (BigUint::zero(), BigUint::zero());
        let mut choose = BigUint::one(); // C(k, i)
        for i in 0..=k {
            let term = &choose * binomial(n - i, k).pow(noisy);
            if i % 2 == 0 {
                plus += term;
            } else {
                minus += term;
            }
            choose = choose * (k - i) / (i + 1);
        }
        NoisyTenants {
            noisy,
            covered: Fraction::reduced(plus - minus, all.clone()),
            untouched: Fraction::reduced(binomial(n - k, k).pow(noisy), all),
        }
    }
}

impl NoisyTenants {
    /// `h`, the flooding tenants.
    pub fn noisy(&self) -> u32 {
        self.noisy
    }

    /// The chance that another tenant's whole shard is inside the union of
    /// the flooders' shards, exactly (see [the model](NoisyTenants#the-model)).
    pub fn p_covered_exact(&self) -> &Fraction {
        &self.covered
    }

    /// [`p_covered_exact`](Self::p_covered_exact), correctly rounded.
    pub fn p_covered(&self) -> f64 {
        self.covered.to_f64()
    }

    /// The chance that no flooder holds any of another tenant's buckets,
    /// exactly: `(C(N − k, k) / C(N, k))ʰ`.
    pub fn p_untouched_exact(&self) -> &Fraction {
        &self.untouched
    }

    /// [`p_untouched_exact`](Self::p_untouched_exact), correctly rounded.
    pub fn p_untouched(&self) -> f64 {
        self.untouched.to_f64()
    }

    /// The chance that another tenant is neither covered nor untouched,
    /// exactly.
    pub fn p_degraded_exact(&self) -> Fraction {
        let (c, u) = (&self.covered, &self.untouched);
        // 1 − c − u over the common denominator c.denom · u.denom.
        let (cn, cd, un, ud) = (&c.numer().0, &c.denom().0, &u.numer().0, &u.denom().0);
        let d = cd * ud;
        let taken = cn * ud + un * cd;
        Fraction::reduced(&d - taken, d)
    }

    /// [`p_degraded_exact`](Self::p_degraded_exact), correctly rounded.
    pub fn p_degraded(&self) -> f64 {
        self.p_degraded_exact().to_f64()
    }

    /// With `tenants` tenants in all (`T`), `h` of them flooding: the
    /// expected number of the other `T − h` that are fully down (covered),
    /// degraded and unaffected (untouched). Zero when `T ≤ h`.
    pub fn tenants(&self, tenants: u64) -> Impact {
        let others = tenants.saturating_sub(u64::from(self.noisy));
        let times = |p: &Fraction| Fraction::reduced(&p.numer().0 * others, p.denom().0.clone());
        Impact {
            fully_down: times(&self.covered).to_f64(),
            degraded: times(&self.p_degraded_exact()).to_f64(),
            unaffected: times(&self.untouched).to_f64(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::BlastRadius;

    /// Every shard of `k` of `n` buckets, as bit masks.
    fn shards(n: u32, k: u32) -> Vec<u32> {
        (0u32..1 << n).filter(|m| m.count_ones() == k).collect()
    }

    /// Counts, over every choice of the tenant's shard and `h` flooders'
    /// shards, how many leave the tenant covered and how many untouched.
    fn brute_force(n: u32, k: u32, h: u32) -> (u64, u64, u64) {
        let all = shards(n, k);
        let (mut covered, mut untouched, mut total) = (0, 0, 0);
        let mut pick = vec![0usize; h as usize];
        loop {
            let union = pick.iter().fold(0u32, |u, &i| u | all[i]);
            for &mine in &all {
                total += 1;
                covered += u64::from(mine & union == mine);
                untouched += u64::from(mine & union == 0);
            }
            // The next tuple of flooders' shards, like an odometer.
            let mut d = 0;
            while d < pick.len() && pick[d] + 1 == all.len() {
                pick[d] = 0;
                d += 1;
            }
            if d == pick.len() {
                return (covered, untouched, total);
            }
            pick[d] += 1;
        }
    }

    #[test]
    fn the_exact_values_match_a_brute_force_count() {
        for (n, k, h) in [
            (5, 2, 3),
            (6, 3, 2),
            (6, 2, 3),
            (7, 1, 2),
            (4, 4, 2),
            (6, 3, 0),
        ] {
            let r = BlastRadius::new(n, k).unwrap().noisy(h);
            let (covered, untouched, total) = brute_force(n, k, h);
            let want = |x: u64| super::Fraction::new(x, total).unwrap();
            assert_eq!(*r.p_covered_exact(), want(covered), "{n} {k} {h}");
            assert_eq!(*r.p_untouched_exact(), want(untouched), "{n} {k} {h}");
            assert_eq!(r.p_degraded_exact(), want(total - covered - untouched));
        }
    }

    #[test]
    fn more_flooders_cover_more() {
        let b = BlastRadius::new(16, 3).unwrap();
        let p: Vec<f64> = (0..6).map(|h| b.noisy(h).p_covered()).collect();
        assert_eq!(p[0], 0.0);
        assert_eq!(p[1], 1.0 / 560.0);
        assert!(p.windows(2).all(|w| w[0] < w[1]), "{p:?}");
        assert_eq!(b.noisy(2).tenants(2).fully_down, 0.0);
    }
}
