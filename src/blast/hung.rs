//! A tenant whose calls hang, against an in-flight limit split into pools:
//! who is starved, and what capacity the others keep.

use num_bigint::BigUint;
use num_traits::Zero;

use super::{BlastError, BlastRadius, Fraction, Impact, binomial};

/// What one tenant whose calls hang does to the others, when a concurrency
/// limit `C` is split into `N` pools (as an in-flight limit splits it:
/// `⌊C/N⌋` permits each, one more for `C mod N` of them) and every tenant
/// takes permits from its own `k`; made by [`BlastRadius::hung`].
///
/// # The model
///
/// The hung tenant keeps `H` calls going and none of them ends, so it
/// holds `min(H, P)` permits, `P` the permits of its `k` pools. Its shard
/// is a uniform `k`-subset, so the number `m` of its pools holding one more
/// permit is hypergeometric: `P = k·⌊C/N⌋ + m` with chance
/// `C(C mod N, m) · C(N − C mod N, k − m) / C(N, k)`.
///
/// * It **fills its pools** when `H ≥ P`. Then another tenant is
///   **starved** exactly when its shard is the same `k` pools:
///   `P(starved) = P(fills) / C(N, k)`. A tenant sharing some of its pools
///   waits in the queues of all of its own and is served by the others.
/// * The others keep `C − min(H, P)` permits: the **capacity left**, as a
///   share of `C`, is `1 − E[min(H, P)] / C`.
///
/// Beside it, one shared limit of `C` (a semaphore): the hung tenant holds
/// `min(H, C)` permits, and starves everyone when `H ≥ C`.
///
/// ```
/// use shuffle_limiter::blast::BlastRadius;
///
/// // The hung-tenant scene: C = 40 over N = 8 pools of 5, k = 2, 40 calls hung.
/// let hung = BlastRadius::new(8, 2)?.hung(40, 40)?;
/// assert_eq!(hung.pool_permits(), (10, 10));
/// assert_eq!(hung.p_starved_exact().to_string(), "1/28");
/// assert_eq!(hung.capacity_left_exact().to_string(), "3/4"); // 30 of 40
/// // Of 40 tenants, 39/28 ≈ 1.4 of the others are starved; through one
/// // semaphore of 40, all 39.
/// assert!((hung.tenants(40).fully_down - 39.0 / 28.0).abs() < 1e-12);
/// assert_eq!(hung.shared(40).fully_down, 39.0);
/// // With 8 calls it cannot fill two pools of 5: nobody is starved.
/// assert!(BlastRadius::new(8, 2)?.hung(40, 8)?.p_starved_exact().is_zero());
/// # Ok::<(), shuffle_limiter::blast::BlastError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HungTenant {
    concurrency: u32,
    hung_calls: u32,
    least: u32,
    most: u32,
    fills: Fraction,
    starved: Fraction,
    held: Fraction,
    disjoint: Fraction,
}

impl BlastRadius {
    /// The report for one tenant keeping `hung_calls` calls (`H`) hung
    /// against a concurrency limit of `concurrency` (`C`) split into this
    /// report's `N` pools, `k` per tenant.
    ///
    /// # Errors
    ///
    /// [`BlastError::NoConcurrency`] for `C = 0`, and
    /// [`BlastError::ConcurrencyBelowBuckets`] when `C < N` (every pool
    /// needs a permit).
    pub fn hung(&self, concurrency: u32, hung_calls: u32) -> Result<HungTenant, BlastError> {
        let (n, k) = (self.buckets, self.per_tenant);
        if concurrency == 0 {
            return Err(BlastError::NoConcurrency);
        }
        if concurrency < n {
            return Err(BlastError::ConcurrencyBelowBuckets {
                buckets: n,
                concurrency,
            });
        }
        let (base, larger) = (concurrency / n, concurrency % n);
        // m of the hung tenant's pools hold one more permit: m from
        // k − (N − C mod N) (if positive) to min(k, C mod N).
        let lo = k.saturating_sub(n - larger);
        let hi = k.min(larger);
        let (mut fills, mut held) = (BigUint::zero(), BigUint::zero());
        for m in lo..=hi {
            let ways = binomial(larger, m) * binomial(n - larger, k - m);
            let permits = u64::from(k) * u64::from(base) + u64::from(m);
            if permits <= u64::from(hung_calls) {
                fills += &ways;
            }
            held += ways * permits.min(u64::from(hung_calls));
        }
        let shards = self.shards.0.clone();
        Ok(HungTenant {
            concurrency,
            hung_calls,
            least: k * base + lo,
            most: k * base + hi,
            starved: Fraction::reduced(fills.clone(), &shards * &shards),
            fills: Fraction::reduced(fills, shards.clone()),
            held: Fraction::reduced(held, shards),
            disjoint: self.p_disjoint_exact(),
        })
    }
}

impl HungTenant {
    /// `C`, the permits of all pools together.
    pub fn concurrency(&self) -> u32 {
        self.concurrency
    }

    /// `H`, the calls the hung tenant keeps going.
    pub fn hung_calls(&self) -> u32 {
        self.hung_calls
    }

    /// The fewest and the most permits `k` pools can hold: equal when `N`
    /// divides `C`.
    pub fn pool_permits(&self) -> (u32, u32) {
        (self.least, self.most)
    }

    /// The chance that the hung tenant fills its pools (`H ≥ P`), exactly.
    pub fn p_fills_exact(&self) -> &Fraction {
        &self.fills
    }

    /// [`p_fills_exact`](Self::p_fills_exact), correctly rounded.
    pub fn p_fills(&self) -> f64 {
        self.fills.to_f64()
    }

    /// The chance that another tenant is starved — on the same `k` pools
    /// as the hung tenant, which fills them — exactly.
    pub fn p_starved_exact(&self) -> &Fraction {
        &self.starved
    }

    /// [`p_starved_exact`](Self::p_starved_exact), correctly rounded.
    pub fn p_starved(&self) -> f64 {
        self.starved.to_f64()
    }

    /// The permits the hung tenant is expected to hold, `E[min(H, P)]`,
    /// exactly.
    pub fn held_exact(&self) -> &Fraction {
        &self.held
    }

    /// [`held_exact`](Self::held_exact), correctly rounded.
    pub fn held(&self) -> f64 {
        self.held.to_f64()
    }

    /// The share of `C` the other tenants keep, `1 − E[min(H, P)] / C`,
    /// exactly.
    pub fn capacity_left_exact(&self) -> Fraction {
        let (held, c) = (&self.held, BigUint::from(self.concurrency));
        let denom = &held.denom().0 * &c;
        Fraction::reduced(&denom - &held.numer().0, denom)
    }

    /// [`capacity_left_exact`](Self::capacity_left_exact), correctly
    /// rounded.
    pub fn capacity_left(&self) -> f64 {
        self.capacity_left_exact().to_f64()
    }

    /// With `tenants` tenants in all (`T`), the hung one included: the
    /// expected number of the other `T − 1` starved (`fully_down`), sharing
    /// some of its pools without being starved (`degraded`: they keep their
    /// other pools), and sharing none (`unaffected`).
    pub fn tenants(&self, tenants: u64) -> Impact {
        let others = tenants.saturating_sub(1) as f64;
        let (starved, disjoint) = (self.p_starved(), self.disjoint.to_f64());
        Impact {
            fully_down: others * starved,
            degraded: others * (1.0 - starved - disjoint).max(0.0),
            unaffected: others * disjoint,
        }
    }

    /// The same tenants through one shared limit of `C`: all `T − 1`
    /// others starved when `H ≥ C`, else all of them sharing what is left.
    pub fn shared(&self, tenants: u64) -> Impact {
        let others = tenants.saturating_sub(1) as f64;
        let all = self.hung_calls >= self.concurrency;
        Impact {
            fully_down: if all { others } else { 0.0 },
            degraded: if all { 0.0 } else { others },
            unaffected: 0.0,
        }
    }

    /// The permits the hung tenant holds through one shared limit of `C`:
    /// `min(H, C)`.
    pub fn shared_held(&self) -> u32 {
        self.hung_calls.min(self.concurrency)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_uneven_split_fills_only_the_smaller_pairs() {
        // C = 42 over 8 pools: 6, 6, 5, 5, 5, 5, 5, 5. k = 2 pools hold
        // 10 (C(6, 2) = 15 pairs), 11 (2 · 6 = 12) or 12 (1) permits.
        let b = BlastRadius::new(8, 2).unwrap();
        let h = b.hung(42, 11).unwrap();
        assert_eq!(h.pool_permits(), (10, 12));
        assert_eq!(h.p_fills_exact().to_string(), "27/28");
        assert_eq!(h.p_starved_exact().to_string(), "27/784");
        // E[min(11, P)] = (15 · 10 + 12 · 11 + 1 · 11) / 28 = 293/28.
        assert_eq!(h.held_exact().to_string(), "293/28");
        assert_eq!(h.capacity_left_exact().to_string(), "883/1176");
        // H ≥ C through a shared limit starves everyone; H < C nobody.
        assert_eq!(h.shared(10).degraded, 9.0);
        assert_eq!(b.hung(42, 42).unwrap().shared(10).fully_down, 9.0);
        assert_eq!(b.hung(42, 12).unwrap().p_fills_exact().to_string(), "1/1");
        assert!(b.hung(42, 9).unwrap().p_fills_exact().is_zero());
        let t = h.tenants(1000);
        let sum = t.fully_down + t.degraded + t.unaffected;
        assert!((sum - 999.0).abs() < 1e-9, "{t:?}");
    }

    #[test]
    fn bad_limits_are_refused() {
        let b = BlastRadius::new(8, 2).unwrap();
        assert_eq!(b.hung(0, 1), Err(BlastError::NoConcurrency));
        assert_eq!(
            b.hung(7, 1),
            Err(BlastError::ConcurrencyBelowBuckets {
                buckets: 8,
                concurrency: 7
            })
        );
        for e in [BlastError::NoConcurrency, b.hung(7, 1).unwrap_err()] {
            assert!(e.to_string().contains("set concurrency"), "{e}");
        }
    }
}
