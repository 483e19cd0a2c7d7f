//! Blast radius when tenants borrow: d spill buckets per tenant, lent above a
//! reserve r of each bucket's burst.

use num_bigint::BigUint;
use num_traits::One;

use super::{BlastError, BlastRadius, Count, Fraction, Impact, binomial};

/// The blast-radius report for a limiter that lends idle capacity: `N`
/// buckets, `k` of them a tenant's own, the next `d` of its ranking its
/// *spill set*, which it may borrow from down to a reserve of `r` of each
/// bucket's burst. Made by [`BlastRadius::borrowing`].
///
/// # The model
///
/// A tenant's own `k` buckets are a uniform `k`-subset of the `N`, and its
/// spill set a uniform `d`-subset of the other `N − k`, independently per
/// tenant: `C(N, k) · C(N − k, d)` equally likely (shard, spill set) pairs,
/// which is what the limiter's nested rendezvous ranking approximates.
///
/// One tenant floods: it asks without pause, so it takes its own `k` buckets
/// to zero and its `d` spill buckets down to their reserve, and takes every
/// token of refill above those levels. Another tenant is then
///
/// * **fully down** when nothing it may draw on has anything left for it:
///   its own buckets are the flooder's own (a bucket the flooder merely
///   borrows from still holds the reserve for its owners), and its spill
///   buckets are all the flooder's spill buckets (it may borrow only above
///   the reserve, which the flooder has taken). That is one pair in
///   `C(N, k) · C(N − k, d)`. With `r = 0` there is no reserve: the flooder
///   takes its spill buckets to zero too, and a tenant is down when its
///   `k + d` buckets are the flooder's `k + d`, one in `C(N, k + d)`;
/// * **unaffected** when none of its own buckets is among the flooder's
///   `k + d`: it keeps all it had without borrowing (only the spare capacity
///   it might have borrowed can be gone), `C(N − k − d, k) / C(N, k)`;
/// * **degraded** otherwise: some own bucket is drained, to zero or to the
///   reserve, but something it may draw on is not.
///
/// With `d = 0` these are [`BlastRadius::p_identical`],
/// [`BlastRadius::p_disjoint`] and the rest, as without borrowing.
///
/// The reserve protects owners only if it holds a whole request: with an
/// even split, `r · B / N` tokens should be at least the largest weight
/// asked. Below that, owners and the borrower race for the refill.
///
/// ```
/// use shuffle_limiter::blast::BlastRadius;
///
/// let b = BlastRadius::new(8, 2)?.borrowing(2, 0.5)?;
/// assert_eq!(b.spill_sets().to_string(), "15"); // C(6, 2)
/// assert_eq!(b.p_fully_down_exact().to_string(), "1/420"); // 1 / (28 · 15)
/// assert_eq!(b.p_unaffected_exact().to_string(), "3/14"); // C(4, 2) / 28
/// assert_eq!(b.p_degraded_exact().to_string(), "47/60");
/// // Of 399 other tenants, 399 / 420 = 0.95 are expected fully down.
/// assert_eq!(b.tenants(400).fully_down, 0.95);
/// // Alone, a tenant sustains half of R, takes 3/8 of B at once, and the
/// // owners of every bucket it borrows from keep half of that bucket's burst.
/// assert_eq!(b.sustained_share_exact().to_string(), "1/2");
/// assert_eq!(b.burst_share_exact().to_string(), "3/8");
/// assert_eq!(b.owners_keep(), 0.5);
/// // Without a reserve, a flooder drains its spill buckets to zero.
/// let no_reserve = BlastRadius::new(8, 2)?.borrowing(2, 0.0)?;
/// assert_eq!(no_reserve.p_fully_down_exact().to_string(), "1/70"); // 1 / C(8, 4)
/// # Ok::<(), shuffle_limiter::blast::BlastError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BorrowingRadius {
    radius: BlastRadius,
    spill: u32,
    reserve: Fraction,
    /// `C(N − k, d)`.
    spill_sets: Count,
}

impl BlastRadius {
    /// The report for the same `N` and `k` when every tenant may borrow from
    /// `spill` more buckets (`d`, as
    /// [`Builder::borrow_from`](crate::Builder::borrow_from)) above a
    /// reserve of `reserve` of each bucket's burst (`r`, as
    /// [`Builder::lender_reserve`](crate::Builder::lender_reserve)).
    ///
    /// `reserve` is taken exactly as the `f64` it is: 0.5 is `1/2`, 0.1 the
    /// binary fraction nearest to a tenth. `spill = 0` is borrowing off.
    ///
    /// # Errors
    ///
    /// [`BlastError::SpillExceedsBuckets`] if `k + d > N`,
    /// [`BlastError::ReserveOutOfRange`] unless `0 ≤ r < 1`.
    pub fn borrowing(&self, spill: u32, reserve: f64) -> Result<BorrowingRadius, BlastError> {
        let (n, k) = (self.buckets, self.per_tenant);
        if spill > n - k {
            return Err(BlastError::SpillExceedsBuckets {
                buckets: n,
                per_tenant: k,
                spill,
            });
        }
        let reserve = Fraction::from_f64(reserve)
            .filter(|r| r.numer() < r.denom())
            .ok_or(BlastError::ReserveOutOfRange)?;
        Ok(BorrowingRadius {
            radius: self.clone(),
            spill,
            reserve,
            spill_sets: Count(binomial(n - k, spill)),
        })
    }
}

/// # Shape
impl BorrowingRadius {
    /// The report without borrowing, for the same `N` and `k`.
    pub fn radius(&self) -> &BlastRadius {
        &self.radius
    }

    /// `d`, the spill buckets per tenant.
    pub fn spill(&self) -> u32 {
        self.spill
    }

    /// `r`, the share of each bucket's burst borrowers leave to its owners.
    pub fn reserve(&self) -> f64 {
        self.reserve.to_f64()
    }

    /// [`reserve`](Self::reserve), exactly.
    pub fn reserve_exact(&self) -> &Fraction {
        &self.reserve
    }

    /// `C(N − k, d)`: the spill sets a tenant with a given shard may have.
    pub fn spill_sets(&self) -> &Count {
        &self.spill_sets
    }

    /// `x / (C(N, k) · C(N − k, d))`, over all (shard, spill set) pairs.
    fn over_pairs(&self, x: BigUint) -> Fraction {
        Fraction::reduced(x, &self.radius.shards().0 * &self.spill_sets.0)
    }

    /// How many (shard, spill set) pairs leave a tenant fully down.
    fn down_pairs(&self) -> BigUint {
        if self.reserve.is_zero() {
            // Any split of the flooder's k + d buckets into k own and d spill.
            binomial(self.radius.per_tenant + self.spill, self.spill)
        } else {
            BigUint::one()
        }
    }

    /// How many (shard, spill set) pairs have no own bucket among the
    /// flooder's `k + d`.
    fn untouched_pairs(&self) -> BigUint {
        let (n, k, d) = (self.radius.buckets, self.radius.per_tenant, self.spill);
        binomial(n - k - d, k) * &self.spill_sets.0
    }
}

/// # One tenant floods: who is down
impl BorrowingRadius {
    /// The chance that another tenant is fully down under a flood, exactly:
    /// `1 / (C(N, k) · C(N − k, d))` with a reserve, `1 / C(N, k + d)` with
    /// `r = 0` (see [the model](BorrowingRadius#the-model)).
    pub fn p_fully_down_exact(&self) -> Fraction {
        self.over_pairs(self.down_pairs())
    }

    /// [`p_fully_down_exact`](Self::p_fully_down_exact), correctly rounded.
    pub fn p_fully_down(&self) -> f64 {
        self.p_fully_down_exact().to_f64()
    }

    /// The chance that none of another tenant's own buckets is among the
    /// flooder's `k + d`, exactly: `C(N − k − d, k) / C(N, k)`.
    pub fn p_unaffected_exact(&self) -> Fraction {
        self.over_pairs(self.untouched_pairs())
    }

    /// [`p_unaffected_exact`](Self::p_unaffected_exact), correctly rounded.
    pub fn p_unaffected(&self) -> f64 {
        self.p_unaffected_exact().to_f64()
    }

    /// The chance that another tenant is neither fully down nor unaffected,
    /// exactly.
    pub fn p_degraded_exact(&self) -> Fraction {
        let all = &self.radius.shards().0 * &self.spill_sets.0;
        self.over_pairs(all - self.down_pairs() - self.untouched_pairs())
    }

    /// [`p_degraded_exact`](Self::p_degraded_exact), correctly rounded.
    pub fn p_degraded(&self) -> f64 {
        self.p_degraded_exact().to_f64()
    }

    /// With `tenants` tenants in all (`T`), one of them flooding: the
    /// expected number of the other `T − 1` that are fully down, degraded
    /// and unaffected. For `T = 0` every number is zero.
    ///
    /// ```
    /// use shuffle_limiter::blast::BlastRadius;
    ///
    /// let b = BlastRadius::new(8, 2)?;
    /// // Borrowing from every other bucket: every own bucket is within a
    /// // flooder's reach, but only its shard's twins are down, as without.
    /// let all = b.borrowing(6, 0.5)?.tenants(400);
    /// assert_eq!((all.fully_down, all.unaffected), (399.0 / 28.0, 0.0));
    /// assert_eq!(b.borrowing(0, 0.5)?.tenants(400), b.tenants(400).shuffle_sharded);
    /// # Ok::<(), shuffle_limiter::blast::BlastError>(())
    /// ```
    pub fn tenants(&self, tenants: u64) -> Impact {
        let others = tenants.saturating_sub(1);
        let all = &self.radius.shards().0 * &self.spill_sets.0;
        let total = |x: BigUint| Fraction::reduced(x * others, all.clone()).to_f64();
        let (down, untouched) = (self.down_pairs(), self.untouched_pairs());
        let degraded = &all - &down - &untouched;
        Impact {
            fully_down: total(down),
            degraded: total(degraded),
            unaffected: total(untouched),
        }
    }
}

/// # What a tenant can take, and what owners keep
impl BorrowingRadius {
    /// `(k + d) / N`, exactly: the largest share of the rate `R` one tenant
    /// sustains, reached when it is alone (every bucket refills at `R / N`;
    /// the reserve holds back burst, not rate). It is also the most a
    /// flooder takes.
    ///
    /// A borrower reaches it only if it asks at least once every
    /// `(1 − r) · B / R`, the time a spill bucket takes from its reserve to
    /// full: refill that arrives at a full bucket is lost, to it as to
    /// anyone. Asking less often, it takes at most `(1 − r) · B / N` tokens
    /// from each spill bucket per visit.
    pub fn sustained_share_exact(&self) -> Fraction {
        let (n, k) = (self.radius.buckets, self.radius.per_tenant);
        Fraction::reduced((k + self.spill).into(), n.into())
    }

    /// [`sustained_share_exact`](Self::sustained_share_exact), correctly rounded.
    pub fn sustained_share(&self) -> f64 {
        self.sustained_share_exact().to_f64()
    }

    /// `(k + d · (1 − r)) / N`, exactly: the share of the burst `B` one
    /// tenant can take at once from full buckets, `k · B / N` from its own
    /// and `d · (1 − r) · B / N` from above its spill buckets' reserve, when
    /// `B` splits evenly over the buckets (otherwise bucket by bucket, and
    /// rounded down to whole tokens by the limiter).
    pub fn burst_share_exact(&self) -> Fraction {
        let (n, k, d) = (self.radius.buckets, self.radius.per_tenant, self.spill);
        let (r, q) = (&self.reserve.numer().0, &self.reserve.denom().0);
        // (k · q + d · (q − r)) / (N · q)
        Fraction::reduced(q * k + (q - r) * d, q * n)
    }

    /// [`burst_share_exact`](Self::burst_share_exact), correctly rounded.
    pub fn burst_share(&self) -> f64 {
        self.burst_share_exact().to_f64()
    }

    /// `r`, exactly: the share of a bucket's burst its owners keep however
    /// hard borrowers take from it. A borrower takes only room above the
    /// reserve, so refill goes first to restoring the reserve: owners also
    /// get all of the bucket's rate, `R / N`, that they ask for.
    pub fn owners_keep_exact(&self) -> &Fraction {
        &self.reserve
    }

    /// [`owners_keep_exact`](Self::owners_keep_exact) as an `f64`.
    pub fn owners_keep(&self) -> f64 {
        self.reserve()
    }
}
