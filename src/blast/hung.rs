//! A tenant whose calls hang, against an in-flight limit split into pools:
//! who is starved, and what capacity the others keep, with borrowing and
//! without.

use num_bigint::BigUint;
use num_traits::{One, Zero};

use super::{BlastError, BlastRadius, BorrowingRadius, Fraction, Impact, binomial};

/// What one tenant whose calls hang does to the others, when a concurrency
/// limit `C` is split into `N` pools (as an in-flight limit splits it:
/// `⌊C/N⌋` permits each, one more for `C mod N` of them) and every tenant
/// takes permits from its own `k` and, with borrowing, from its `d` spill
/// pools above their reserve; made by [`BlastRadius::hung`], and with
/// borrowing by [`BorrowingRadius::hung`].
///
/// # The model
///
/// The hung tenant keeps `H` calls going and none of them ends, so it
/// holds `min(H, P)` permits, `P` all it can ever hold: its `k` pools
/// whole, plus with borrowing each spill pool's share less its reserve.
/// The reserve is `⌈r · share⌉` permits rounded as the limit rounds it (the
/// `f64` product, rounded up: `r = 0.1` keeps 1 permit of 10, not the 2
/// that the exact binary value of 0.1 would give). It takes its own pools
/// first, each permit from the one with the most free, then borrows, each
/// permit from the spill pool with the most free above its reserve.
///
/// Its shard is a uniform `k`-subset of the pools and its spill set a
/// uniform `d`-subset of the other `N − k`, so how many of them hold one
/// more permit is hypergeometric: `m` of its own pools and `s` of its
/// spill pools in `C(C mod N, m) · C(N − C mod N, k − m) · C(C mod N − m,
/// s) · C(N − C mod N − k + m, d − s)` of the `C(N, k) · C(N − k, d)`
/// equally likely pairs, which fix `P`.
///
/// Another tenant is **starved** exactly when nothing it may draw on has a
/// free permit for it: its `k` own pools are all empty, and its `d` spill
/// pools all at or below their reserve (below which nobody borrows). Of
/// the pools `E` the hung tenant leaves empty and `Z ⊇ E` it leaves with
/// nothing above the reserve, that is `C(|E|, k) · C(|Z| − k, d)` of the
/// pairs:
///
/// * `E` is its own `k` pools once it fills them (`H` at least their
///   permits; before that, at least one keeps a permit and nobody is
///   starved), and with `r = 0` its spill pools lent down to zero. With a
///   reserve, a pool it borrows from keeps the reserve for its owners.
/// * `Z` adds its spill pools at their reserve, and the pools whose reserve
///   is their whole share (with a high `r` or tiny pools): they lend
///   nothing. Borrowing roomiest first levels its spill pools, so with `R`
///   permits still above their reserves and `p` of them lending anything,
///   `d − min(R, p)` are at it: all `d` once `H ≥ P`, none while `R ≥ p`.
///
/// So when every pool lends, another tenant is starved when it has the hung
/// tenant's shard and spill set, and the hung tenant holds all it can
/// (`H ≥ P`): `P(starved) = P(fills) / (C(N, k) · C(N − k, d))`. With
/// `r = 0` its `k + d` pools must be the hung tenant's `k + d`,
/// `P(fills) / C(N, k + d)`; without borrowing (`d = 0`) its shard the same
/// `k` pools, `P(fills) / C(N, k)`. A tenant sharing some of its pools
/// waits in the queues of all of its own and is served by the others, or
/// borrows.
///
/// The others keep `C − min(H, P)` permits: the **capacity left**, as a
/// share of `C`, is `1 − E[min(H, P)] / C`.
///
/// # Busy pools
///
/// That count of the starved takes every pool out of the hung tenant's
/// reach to have a permit free to lend. Borrowing lends only what is idle:
/// never from a pool callers queue for. Under a load that keeps every pool
/// in use, the pools another tenant would borrow from are busy, and it is
/// starved once its own `k` pools are all empty: `C(|E|, k)` of the
/// `C(N, k)` shards ([`p_starved_busy`](Self::p_starved_busy)). With a
/// reserve that is `P(H ≥ k pools' permits) / C(N, k)`, as without
/// borrowing; with `r = 0`, once the hung tenant holds all it can, `C(k +
/// d, k) / C(N, k)`: more than without borrowing, its spill pools being
/// other tenants' own. The two counts bound the starved between an idle
/// limit and a busy one. Under such a load, too, a hung call that ends and
/// is made again borrows back only what is idle: the model's calls never
/// end.
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
    spill: u32,
    least: u32,
    most: u32,
    fills: Fraction,
    starved: Fraction,
    starved_busy: Fraction,
    held: Fraction,
    borrowed: Fraction,
    untouched: Fraction,
}

impl BlastRadius {
    /// The report for one tenant keeping `hung_calls` calls (`H`) hung
    /// against a concurrency limit of `concurrency` (`C`) split into this
    /// report's `N` pools, `k` per tenant, without borrowing.
    ///
    /// Borrowing is covered by [`BorrowingRadius::hung`], the same report
    /// for tenants that borrow from `d` spill pools above a reserve: in the
    /// scene of C = 40 over 8 pools of 5, k = 2, H = 40, with d = 2 and
    /// r = 0.5 the hung tenant holds 14 permits (4 borrowed) instead of 10,
    /// the others keep 65 % instead of 75 %, and 1 in 420 of them are
    /// starved (1 in 28, as here, when the pools they would borrow from are
    /// busy).
    ///
    /// # Errors
    ///
    /// [`BlastError::NoConcurrency`] for `C = 0`, and
    /// [`BlastError::ConcurrencyBelowBuckets`] when `C < N` (every pool
    /// needs a permit).
    pub fn hung(&self, concurrency: u32, hung_calls: u32) -> Result<HungTenant, BlastError> {
        HungTenant::new(self, 0, 0.0, concurrency, hung_calls)
    }
}

impl BorrowingRadius {
    /// The report for one tenant keeping `hung_calls` calls (`H`) hung
    /// against a concurrency limit of `concurrency` (`C`) split into this
    /// report's `N` pools, `k` per tenant, each tenant borrowing from `d`
    /// spill pools above a reserve of `r` of each pool's share: an
    /// in-flight limit built with
    /// [`borrow_from(d)`](crate::inflight::Builder::borrow_from) and
    /// [`lender_reserve(r)`](crate::inflight::Builder::lender_reserve). With
    /// `d = 0` it is [`BlastRadius::hung`]'s report.
    ///
    /// ```
    /// use shuffle_limiter::blast::BlastRadius;
    ///
    /// // The scene of 40 tenants, C = 40 over N = 8 pools of 5, k = 2, with
    /// // d = 2 spill pools lending above a reserve of ⌈0.5 · 5⌉ = 3.
    /// let b = BlastRadius::new(8, 2)?.borrowing(2, 0.5)?;
    /// let hung = b.hung(40, 40)?;
    /// // Its 40 calls hold its 10 permits and 2 of each spill pool: 14 of 40.
    /// assert_eq!(hung.pool_permits(), (14, 14));
    /// assert_eq!(hung.held_exact().to_string(), "14/1");
    /// assert_eq!(hung.borrowed_exact().to_string(), "4/1");
    /// assert_eq!(hung.capacity_left_exact().to_string(), "13/20"); // 26 of 40
    /// // Starved: its shard and its spill set, 1 in 28 · C(6, 2) = 420.
    /// assert_eq!(hung.p_starved_exact().to_string(), "1/420");
    /// let others = hung.tenants(40);
    /// assert!((others.fully_down - 39.0 / 420.0).abs() < 1e-12); // ≈ 0.09
    /// // None of their own pools among its 4: C(4, 2) / C(8, 2) = 3/14.
    /// assert!((others.unaffected - 39.0 * 3.0 / 14.0).abs() < 1e-12); // ≈ 8.4
    /// // Without borrowing: 1/28 starved, 30 of 40 left.
    /// assert_eq!(b.radius().hung(40, 40)?.p_starved_exact().to_string(), "1/28");
    /// // When the pools the others would borrow from are busy, the tenants
    /// // on its own pools are starved as without borrowing: 1 in 28.
    /// assert_eq!(hung.p_starved_busy_exact().to_string(), "1/28");
    /// // With 12 calls it holds 2 borrowed permits, and every spill pool
    /// // keeps one above its reserve: nobody is starved.
    /// assert!(b.hung(40, 12)?.p_starved_exact().is_zero());
    /// # Ok::<(), shuffle_limiter::blast::BlastError>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`BlastRadius::hung`].
    pub fn hung(&self, concurrency: u32, hung_calls: u32) -> Result<HungTenant, BlastError> {
        let (radius, spill) = (self.radius(), self.spill());
        HungTenant::new(radius, spill, self.reserve(), concurrency, hung_calls)
    }
}

/// `C(n, 0)`, `C(n, 1)`, …, `C(n, up_to)`, each from the one before.
fn binomial_row(n: u32, up_to: u32) -> Vec<BigUint> {
    let mut row = vec![BigUint::one()];
    for i in 0..up_to {
        let next = if i < n {
            row[i as usize].clone() * (n - i) / (i + 1)
        } else {
            BigUint::zero()
        };
        row.push(next);
    }
    row
}

impl HungTenant {
    /// The report for `spill` spill pools (`d`, 0 without borrowing) above
    /// a reserve of `reserve` (`r`); see [the model](HungTenant#the-model).
    fn new(
        radius: &BlastRadius,
        spill: u32,
        reserve: f64,
        concurrency: u32,
        hung_calls: u32,
    ) -> Result<HungTenant, BlastError> {
        let (n, k, d) = (radius.buckets, radius.per_tenant, spill);
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
        let smaller = n - larger;
        // The reserve of a pool of `share`, computed as the limit computes it.
        let keep = |share: u32| ((reserve * f64::from(share)).ceil() as u32).min(share);
        // The permits a pool of `base` lends, and one of `base + 1`.
        let lends = [base - keep(base), base + 1 - keep(base + 1)];
        // Only with r = 0 (every share is at least 1) is a pool lent out empty.
        let lent_is_empty = keep(base) == 0;
        let h = u64::from(hung_calls);
        let zero = BigUint::zero;
        let (mut fills, mut starved, mut held, mut borrowed) = (zero(), zero(), zero(), zero());
        let mut own_emptied = zero();
        let (mut least, mut most) = (u64::MAX, 0);
        let (own_larger, own_smaller) = (binomial_row(larger, k), binomial_row(smaller, k));
        // m of its own pools and s of its spill pools hold one more permit.
        for m in 0..=k.min(larger) {
            if k - m > smaller {
                continue;
            }
            let (left_larger, left_smaller) = (larger - m, smaller - (k - m));
            let own_ways = &own_larger[m as usize] * &own_smaller[(k - m) as usize];
            let (spill_larger, spill_smaller) =
                (binomial_row(left_larger, d), binomial_row(left_smaller, d));
            for s in 0..=d.min(left_larger) {
                let ways = &own_ways * &spill_larger[s as usize] * &spill_smaller[(d - s) as usize];
                if ways.is_zero() {
                    continue;
                }
                let own = u64::from(k) * u64::from(base) + u64::from(m);
                let lent =
                    u64::from(s) * u64::from(lends[1]) + u64::from(d - s) * u64::from(lends[0]);
                let can = own + lent;
                (least, most) = (least.min(can), most.max(can));
                let holds = h.min(can);
                held += &ways * holds;
                borrowed += &ways * holds.saturating_sub(own);
                if h >= can {
                    fills += &ways;
                }
                if h < own {
                    continue; // some own pool keeps a permit
                }
                let counts = |larger: u32, smaller: u32, lending: bool| {
                    u64::from(larger) * u64::from((lends[1] > 0) == lending)
                        + u64::from(smaller) * u64::from((lends[0] > 0) == lending)
                };
                let lending = counts(s, d - s, true);
                let at_reserve = u64::from(d) - (can - holds).min(lending);
                let elsewhere = counts(left_larger - s, left_smaller - (d - s), false);
                let empty = u64::from(k) + if lent_is_empty { at_reserve } else { 0 };
                let closed = at_reserve + elsewhere; // outside its own pools
                let own_empty = binomial(empty as u32, k);
                starved += &ways * &own_empty * binomial(closed as u32, d);
                own_emptied += ways * own_empty;
            }
        }
        let pairs = &radius.shards.0 * binomial(n - k, d);
        Ok(HungTenant {
            concurrency,
            hung_calls,
            spill,
            least: least as u32,
            most: most as u32,
            starved: Fraction::reduced(starved, &pairs * &pairs),
            starved_busy: Fraction::reduced(own_emptied, &pairs * &radius.shards.0),
            fills: Fraction::reduced(fills, pairs.clone()),
            held: Fraction::reduced(held, pairs.clone()),
            borrowed: Fraction::reduced(borrowed, pairs),
            untouched: radius.over_shards(binomial(n - k - d, k)),
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

    /// `d`, the spill pools each tenant borrows from; 0 without borrowing.
    pub fn spill(&self) -> u32 {
        self.spill
    }

    /// The fewest and the most permits the hung tenant can hold, `P`: its
    /// `k` pools whole, and with borrowing what its `d` spill pools lend
    /// above their reserve. Equal when `N` divides `C`.
    pub fn pool_permits(&self) -> (u32, u32) {
        (self.least, self.most)
    }

    /// The chance that the hung tenant holds all it can (`H ≥ P`), exactly.
    pub fn p_fills_exact(&self) -> &Fraction {
        &self.fills
    }

    /// [`p_fills_exact`](Self::p_fills_exact), correctly rounded.
    pub fn p_fills(&self) -> f64 {
        self.fills.to_f64()
    }

    /// The chance that another tenant is starved — nothing it may draw on
    /// has a free permit for it; without borrowing, it is on the same `k`
    /// pools as the hung tenant, which fills them — exactly, when the pools
    /// out of the hung tenant's reach lend what they have
    /// ([`p_starved_busy_exact`](Self::p_starved_busy_exact) when they are
    /// busy).
    pub fn p_starved_exact(&self) -> &Fraction {
        &self.starved
    }

    /// [`p_starved_exact`](Self::p_starved_exact), correctly rounded.
    pub fn p_starved(&self) -> f64 {
        self.starved.to_f64()
    }

    /// The chance that another tenant is starved when the pools it would
    /// borrow from are busy — none has a permit free for it, or callers
    /// queue for it, as under a load that keeps every pool in use — exactly:
    /// its `k` own pools are all left empty, `C(|E|, k)` of the `C(N, k)`
    /// shards ([the model](HungTenant#busy-pools)). Without borrowing, it
    /// is [`p_starved_exact`](Self::p_starved_exact).
    pub fn p_starved_busy_exact(&self) -> &Fraction {
        &self.starved_busy
    }

    /// [`p_starved_busy_exact`](Self::p_starved_busy_exact), correctly
    /// rounded.
    pub fn p_starved_busy(&self) -> f64 {
        self.starved_busy.to_f64()
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

    /// Of [`held_exact`](Self::held_exact), the permits it is expected to
    /// hold borrowed from its spill pools, exactly: zero without borrowing.
    pub fn borrowed_exact(&self) -> &Fraction {
        &self.borrowed
    }

    /// [`borrowed_exact`](Self::borrowed_exact), correctly rounded.
    pub fn borrowed(&self) -> f64 {
        self.borrowed.to_f64()
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
    /// expected number of the other `T − 1` starved (`fully_down`), with
    /// some own pool among those the hung tenant draws on (its `k`, and its
    /// `d` spill pools with borrowing) without being starved (`degraded`:
    /// they keep their other pools, or borrow), and with none
    /// (`unaffected`: `C(N − k − d, k) / C(N, k)` of them).
    pub fn tenants(&self, tenants: u64) -> Impact {
        self.impact(tenants, self.p_starved())
    }

    /// [`tenants`](Self::tenants) when the pools they would borrow from are
    /// busy: starved with [`p_starved_busy`](Self::p_starved_busy).
    pub fn tenants_busy(&self, tenants: u64) -> Impact {
        self.impact(tenants, self.p_starved_busy())
    }

    /// The other `T − 1` tenants, each starved with chance `starved`.
    fn impact(&self, tenants: u64, starved: f64) -> Impact {
        let others = tenants.saturating_sub(1) as f64;
        let untouched = self.untouched.to_f64();
        Impact {
            fully_down: others * starved,
            degraded: others * (1.0 - starved - untouched).max(0.0),
            unaffected: others * untouched,
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
