//! Changing a running in-process limiter: its quota, and tokens given back.

use crate::clock::Clock;
use crate::error::ConfigError;
use crate::grant::Settle;
use crate::quota::Quota;
use crate::store::sealed::Change;
use crate::upstream::HoldOff;
use crate::{Grant, Refunded, Settled, ShardedLimiter};

/// # Changing while running
impl<C: Clock> ShardedLimiter<C> {
    /// Changes the budget of the running limiter, at once and for every
    /// tenant, keeping what each bucket has used.
    ///
    /// Each bucket keeps the share of its burst it held: a bucket with 1 of
    /// its 2 tokens left holds 5 of 10 after a rise, and an empty bucket
    /// stays empty, so neither a rise nor a cut hands out a fresh burst.
    /// Shares are rounded down to a whole nanosecond of credit, never up.
    /// Over any window around the change, all tenants together are granted
    /// at most `R₁·(c − start) + R₂·(end − c) + max(B₁, B₂)`, where the
    /// change happens at `c`.
    ///
    /// N, k and every tenant's shard stay as they are. Checks never wait for
    /// a lock; they wait only while the change moves the N buckets (a few
    /// microseconds), and a check that raced it is decided again under the
    /// new quota. Changes from several threads take turns.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(4))
    ///     .buckets(2)
    ///     .per_tenant(1)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// let tenant = limiter.handle("t");
    /// assert!(tenant.check().is_ok()); // 1 of its bucket's 2 tokens left
    /// // The upstream raises us from 4/s to 20/s: the bucket now holds half
    /// // of 10, and refills every 100 ms instead of every 500 ms.
    /// limiter.set_quota(Quota::per_second(20))?;
    /// assert_eq!(tenant.remaining(), 5);
    /// clock.advance(Duration::from_millis(100));
    /// assert_eq!(tenant.remaining(), 6);
    /// // A quota that cannot be split over the buckets is refused, and the
    /// // limiter keeps its quota.
    /// assert!(limiter.set_quota(Quota::per_second(1)).is_err());
    /// assert_eq!(limiter.quota(), Quota::per_second(20));
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// A [`ConfigError`] when the quota cannot be split over the limiter's
    /// buckets (for one, a burst smaller than N); the limiter is unchanged.
    pub fn set_quota(&self, quota: Quota) -> Result<(), ConfigError> {
        self.store.change(&self.core, Change::Quota(quota))
    }

    /// Changes N, the number of buckets, of the running limiter, keeping
    /// the quota and what each bucket that stays has used.
    ///
    /// - **Who moves.** The assignment ranks buckets by scores that do not
    ///   depend on N, so a tenant keeps its shard unless one of the buckets
    ///   added outranks it (or one removed was in it): `1 − C(N, k)/C(N', k)`
    ///   of tenants move when N grows to N', `k/(N+1)` for one bucket more
    ///   ([`blast`](crate::blast) and `shuffle-lab size --resize-to` give the
    ///   exact fraction). Buckets are added and removed at the end
    ///   (numbers N..N').
    /// - **Buckets that stay** keep the tokens they held, at their new pace,
    ///   but never more than their new burst (B/N' instead of B/N): going
    ///   from 8 to 4 buckets does not fill the 4 that stay.
    /// - **Buckets added start empty**, and fill at their share of R: the
    ///   burst they will hold was in the buckets already there, and handing
    ///   it out again would let the change add a burst to the budget.
    /// - **Buckets removed** are sealed: their tokens go to no one, and a
    ///   grant made from them before the change is not refunded to anyone.
    ///
    /// So over any window around the change at `c`, all tenants together
    /// are granted at most `R·(c − start) + R·(end − c) + B`: the change
    /// never adds tokens. Checks never wait for a lock; a check that raced
    /// the change is decided again under the new N, on the tenant's new
    /// shard. Handles ([`handle`](crate::Limiter::handle)) follow the change
    /// too. N can grow only up to the room the limiter was built with
    /// ([`Builder::max_buckets`](crate::Builder::max_buckets)).
    ///
    /// ```
    /// use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
    ///
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(16))
    ///     .buckets(4)
    ///     .max_buckets(8)
    ///     .per_tenant(1)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let tenant = limiter.handle("t");
    /// for _ in 0..3 {
    ///     tenant.check().unwrap(); // 1 of its bucket's 4 tokens left
    /// }
    /// limiter.set_buckets(8)?;
    /// assert_eq!(limiter.buckets(), 8);
    /// // The tenant holds at most 1 token, whether its bucket stayed (and
    /// // kept its 1 of now 2) or it moved to a bucket added (empty).
    /// assert!(tenant.remaining() <= 1);
    /// assert!(limiter.set_buckets(9).is_err()); // no room to grow past 8
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// A [`ConfigError`] when the limiter cannot have `buckets` buckets:
    /// more than it has room for ([`ConfigError::BucketsAboveMax`]), fewer
    /// than a tenant's shard, a tier's or the burst's tokens need, or a
    /// quota that cannot be split over them. The limiter is unchanged.
    pub fn set_buckets(&self, buckets: u32) -> Result<(), ConfigError> {
        self.store.change(&self.core, Change::Buckets(buckets))
    }

    /// Changes the quota and N of the running limiter together, in one
    /// step: whatever the two are now, any quota and N the limiter could be
    /// built with (within its room) can be reached, where a change of one
    /// and then the other could pass through a pair that cannot work (a
    /// rate too fast for the old N, a burst too small for the new one).
    ///
    /// With only the quota changed this is [`set_quota`](Self::set_quota),
    /// with only N [`set_buckets`](Self::set_buckets). With both, each
    /// bucket that stays keeps the tokens it held, at its new pace, but
    /// never more than its new burst; buckets added start empty and buckets
    /// removed are sealed, as with [`set_buckets`](Self::set_buckets). So
    /// the change never adds tokens: over any window around it at `c`, all
    /// tenants together are granted at most `R₁·(c − start) + R₂·(end − c)
    /// + B₁`.
    ///
    /// ```
    /// use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
    ///
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(1).with_burst(8))
    ///     .buckets(2)
    ///     .max_buckets(8)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// // 4294967295/s is too fast for 2 buckets: set alone, it is refused.
    /// let fast = Quota::per_second(u32::MAX).with_burst(8);
    /// assert!(limiter.set_quota(fast).is_err());
    /// limiter.set_quota_and_buckets(fast, 8)?;
    /// assert_eq!((limiter.quota(), limiter.buckets()), (fast, 8));
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// A [`ConfigError`] when the limiter cannot have the quota over
    /// `buckets` buckets, as [`set_quota`](Self::set_quota) and
    /// [`set_buckets`](Self::set_buckets) say; the limiter is unchanged.
    pub fn set_quota_and_buckets(&self, quota: Quota, buckets: u32) -> Result<(), ConfigError> {
        (self.store).change(&self.core, Change::Both(quota, buckets))
    }

    /// Grants nothing from the buckets `hold` names before its duration is
    /// over, at once: the upstream answered 429 (or 503) with a time to come
    /// back (see [`upstream`](crate::upstream), which reads it from the
    /// headers).
    ///
    /// No bucket held has a whole token before the instant, not even after
    /// a refund, a settlement or a booking given back; they come back
    /// one after another over one interval of a bucket, or over the
    /// hold-off's length if that is shorter (the first at the instant),
    /// then refill at their pace; one already emptier stays as it
    /// is. A hold-off only takes tokens, so every budget bound holds. Checks
    /// that raced it are decided again, and waits that booked a slot before
    /// the instant book again.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shuffle_limiter::upstream::HoldOff;
    /// use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
    ///
    /// let clock = ManualClock::new();
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(80))
    ///     .buckets(8)
    ///     .per_tenant(2)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// // The upstream limits per account: acme's account is throttled.
    /// limiter.hold_off(HoldOff::tenant("acme", Duration::from_millis(500)));
    /// assert!(limiter.check("acme").is_err());
    /// let other = (0..).map(|t| format!("t{t}")).find(|t| {
    ///     limiter.shard(t.as_str()).buckets().iter().all(|&b| !limiter.shard("acme").contains(b))
    /// }).unwrap();
    /// assert!(limiter.check(other.as_str()).is_ok()); // shares no bucket: untouched
    /// clock.advance(Duration::from_millis(500));
    /// assert!(limiter.check("acme").is_ok());
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub fn hold_off(&self, hold: HoldOff<'_>) {
        self.store
            .hold_off(&self.core, self.held(&hold).as_ref(), hold.duration());
    }

    /// Settles `grant` at its real cost of `actual` tokens, at once: the
    /// difference goes back when it cost less, or is charged to the
    /// buckets that paid it when it cost more (see
    /// [`Limit::settle`](crate::Limit::settle)).
    ///
    /// ```
    /// use shuffle_limiter::{ManualClock, Quota, Request, ShardedLimiter};
    ///
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(100))
    ///     .buckets(2)
    ///     .per_tenant(1)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// // Admitted at an estimate of 10 tokens; the answer cost 14.
    /// let grant = limiter.check(Request::tenant("t").tokens(10)).unwrap();
    /// let settled = limiter.settle(grant, 14);
    /// assert_eq!((settled.charged(), settled.forgiven()), (4, 0));
    /// assert_eq!(limiter.remaining("t"), 50 - 14);
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub fn settle(&self, grant: Grant, actual: u32) -> Settled {
        match Settle::of(grant, actual) {
            Settle::Refund(part) => Settled {
                refunded: self.refund(part),
                ..Settled::default()
            },
            Settle::Even => Settled::default(),
            Settle::Forgive(extra) => Settled::charge(extra, 0),
            Settle::Charge(grant, extra) => {
                Settled::charge(extra, self.store.charge_grant(&self.core, &grant, extra))
            }
        }
    }

    /// Gives back every token `grant` took, to the buckets that paid them:
    /// for a request that took its token but never used it (the call failed
    /// before reaching the upstream, or was cancelled).
    ///
    /// A bucket never holds more than its burst: what it refilled since the
    /// grant is not given twice, so a refund long after the grant gives back
    /// little or nothing. All grants minus all refunds still obey `R·t + B`.
    /// The refund takes the grant (which is not `Clone`), so it is given
    /// back once. Dropping a grant refunds nothing: tokens are
    /// spent when granted.
    ///
    /// A bucket that a change of N removed since the grant gets nothing
    /// back, even once a change adds a bucket of its number again: that
    /// one is another bucket, and its tokens were never taken. The answer
    /// says how many tokens went back and how many found their bucket gone
    /// ([`Refunded`]).
    ///
    /// Refund a grant to the limiter that made it: to another, it gives
    /// back to buckets of the same numbers there, where they exist. To give
    /// back only some of its tokens (a weighted request that took its
    /// worst case and used less), refund [`part`](Grant::part) of it.
    ///
    /// ```
    /// use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
    ///
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(4))
    ///     .buckets(2)
    ///     .per_tenant(1)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let grant = limiter.check("t").unwrap();
    /// assert_eq!(limiter.remaining("t"), 1);
    /// let refunded = limiter.refund(grant); // the call it paid for never went out
    /// assert_eq!((refunded.given(), refunded.gone()), (1, 0));
    /// assert_eq!(limiter.remaining("t"), 2);
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub fn refund(&self, grant: Grant) -> Refunded {
        self.store.refund_grant(&self.core, grant)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::plan::whom::Whom;
    use crate::{ManualClock, Quota, ShardedLimiter};

    #[test]
    fn a_shard_from_before_a_cut_finds_its_removed_buckets_sealed() {
        let clock = ManualClock::new();
        let limiter = ShardedLimiter::builder()
            .quota(Quota::per_second(80))
            .buckets(8)
            .per_tenant(2)
            .clock(clock.clone())
            .build()
            .unwrap();
        // A shard of two buckets that N = 4 removes, the first of them
        // bucket 4, used as it is (as the Redis store's local fallback uses
        // the shard Redis answered for).
        let shard = (0..)
            .map(|t| limiter.shard(format!("t{t}")))
            .find(|s| s.contains(4) && s.buckets().iter().all(|&b| b >= 4))
            .unwrap();
        let stale = Whom::fixed(shard, 8);
        assert!(limiter.store.take(&limiter.core, &stale, 1).is_ok());
        limiter.set_buckets(4).unwrap();
        // However long it waits, a removed bucket never has room again.
        for _ in 0..3 {
            assert!(limiter.store.take(&limiter.core, &stale, 1).is_err());
            clock.advance(Duration::from_secs(3600));
        }
    }
}
