//! Retry budgets per bucket: a tenant whose calls keep failing spends only
//! its own shard's retries.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_utils::CachePadded;

use crate::clock::{Clock, MonotonicClock};
use crate::store::Store;
use crate::{Grant, Limiter, Shard};

/// One retry, in the units deposits are counted in (thousandths).
pub(crate) const RETRY: u64 = 1000;

/// A retry budget's terms, the in-process one's and the Redis one's alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Terms {
    /// Thousandths of a retry a token deposits.
    pub(crate) ratio: u64,
    /// Nanoseconds between two floor retries of a bucket; 0 for none.
    pub(crate) every: u64,
    /// The most thousandths a bucket holds.
    pub(crate) cap: u64,
}

impl Default for Terms {
    /// 0.2 of a retry per token, a floor of 1 retry per second per bucket,
    /// at most 10 retries banked per bucket.
    fn default() -> Terms {
        Terms {
            ratio: 200,
            every: 1_000_000_000,
            cap: 10 * RETRY,
        }
    }
}

impl Terms {
    /// `ratio` of a retry per token, cut to 0–1, thousandths kept.
    pub(crate) fn ratio(self, ratio: f64) -> Terms {
        let ratio = (ratio.clamp(0.0, 1.0) * RETRY as f64) as u64;
        Terms { ratio, ..self }
    }

    /// `retries` floor retries per second per bucket (0: none).
    pub(crate) fn floor_per_second(self, retries: u32) -> Terms {
        let every = match retries {
            0 => 0,
            r => 1_000_000_000 / u64::from(r),
        };
        Terms { every, ..self }
    }

    /// At most `retries` banked per bucket (at least 1).
    pub(crate) fn most(self, retries: u32) -> Terms {
        let cap = u64::from(retries.max(1)) * RETRY;
        Terms { cap, ..self }
    }
}

// The budget's steps as pure functions, shared by the atomics below and by
// the Redis scripts' mirror (`src/redis/retry.rs`, whose differential test
// holds the Lua to them).

/// A bucket holding `held` thousandths after a deposit of `earned`: up to
/// `cap`, and a bucket already at or over it keeps what it holds.
pub(crate) fn deposited(held: u64, earned: u64, cap: u64) -> u64 {
    if held >= cap {
        held
    } else {
        held.saturating_add(earned).min(cap)
    }
}

/// The position of the roomiest bucket holding a whole retry (the first of
/// equals), if one does.
pub(crate) fn roomiest(held: impl IntoIterator<Item = u64>) -> Option<usize> {
    let mut best: Option<(usize, u64)> = None;
    for (i, held) in held.into_iter().enumerate() {
        if held >= RETRY && best.is_none_or(|(_, most)| held > most) {
            best = Some((i, held));
        }
    }
    best.map(|(i, _)| i)
}

/// A floor whose next retry is due at `due` gives one at `now` when due,
/// and the time the next is due then; none without a floor (`every` 0).
pub(crate) fn floor_due(due: u64, now: u64, every: u64) -> Option<u64> {
    (every > 0 && due <= now).then(|| now.saturating_add(every))
}

/// A retry budget [`Upstream`](super::Upstream) can spend from: the
/// in-process [`RetryBudget`], or a fleet's over Redis
/// (`redis::RedisRetryBudget`, feature `redis`). Sealed.
pub trait Retries: sealed::Sealed + Send + Sync {
    /// Deposits what `grant`'s tokens earn, to the buckets that paid them.
    fn deposit(&self, grant: &Grant);

    /// Whether a retry of `shard`'s call may go, taking it from the budget.
    fn withdraw(&self, shard: &Shard) -> impl Future<Output = bool> + Send;
}

pub(crate) mod sealed {
    /// Only this crate's budgets are [`Retries`](super::Retries).
    #[allow(unreachable_pub)]
    pub trait Sealed {}
}

impl<C: Clock> sealed::Sealed for RetryBudget<C> {}

impl<C: Clock> Retries for RetryBudget<C> {
    fn deposit(&self, grant: &Grant) {
        RetryBudget::deposit(self, grant);
    }

    fn withdraw(&self, shard: &Shard) -> impl Future<Output = bool> + Send {
        std::future::ready(RetryBudget::withdraw(self, shard))
    }
}

/// Retries of upstream calls, budgeted per bucket of a limiter: every
/// token a bucket pays deposits a fraction of a retry there (0.2 by
/// default, as Finagle's budget), and each bucket also earns a small floor
/// of retries per second (1 by default) for when few calls go through. A
/// retry withdraws one from the roomiest of the tenant's own buckets.
///
/// So a tenant whose calls keep failing exhausts the retries of its k
/// buckets only: tenants whose shard differs keep theirs, as they keep
/// their tokens. A retry is a call too: take a grant for it from the
/// limiter as well (and honour a `Retry-After` first; see
/// [`HoldOff`](super::HoldOff)). Deposits are capped (10 retries a bucket
/// by default), so a quiet hour does not bank a storm.
///
/// This budget lives in this process: a fleet of M processes with one each
/// retries a failing tenant up to M times its shard's budget. To budget a
/// fleet's retries once, use the same budget kept in Redis beside a
/// `RedisLimiter`'s buckets, `redis::RedisRetryBudget` (feature `redis`):
/// the same deposits, floor and cap per bucket, shared by every process,
/// with deposits sent in batches every 100 ms and one round trip a
/// withdraw. Either goes to [`Upstream::retries`](super::Upstream::retries)
/// (through [`Retries`]).
///
/// ```
/// use shuffle_limiter::upstream::RetryBudget;
/// use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
///
/// let clock = ManualClock::new();
/// let limiter = ShardedLimiter::builder()
///     .quota(Quota::per_second(100))
///     .buckets(8)
///     .clock(clock.clone())
///     .build()?;
/// let retries = RetryBudget::of(&limiter).floor_per_second(0).clock(clock);
/// for _ in 0..10 {
///     let grant = limiter.check("acme").unwrap();
///     retries.deposit(&grant); // 0.2 of a retry each
/// }
/// let shard = limiter.shard("acme");
/// assert!(retries.withdraw(&shard) && retries.withdraw(&shard));
/// assert!(!retries.withdraw(&shard)); // 10 calls earned 2 retries
/// # Ok::<(), shuffle_limiter::ConfigError>(())
/// ```
#[derive(Debug)]
pub struct RetryBudget<C = MonotonicClock> {
    /// Per bucket, deposits in thousandths of a retry.
    deposits: Box<[CachePadded<AtomicU64>]>,
    /// Per bucket, the floor's arrival time (GCRA, one retry per `floor`).
    floor: Box<[CachePadded<AtomicU64>]>,
    terms: Terms,
    clock: C,
}

impl RetryBudget {
    /// A budget for `limiter`'s buckets (every bucket it may grow to):
    /// 0.2 of a retry per token, a floor of 1 retry per second per bucket,
    /// at most 10 retries banked per bucket.
    pub fn of<S: Store>(limiter: &Limiter<S>) -> RetryBudget {
        let buckets = limiter.max_buckets() as usize;
        let atomics = || {
            (0..buckets)
                .map(|_| CachePadded::new(AtomicU64::new(0)))
                .collect()
        };
        RetryBudget {
            deposits: atomics(),
            floor: atomics(),
            terms: Terms::default(),
            clock: MonotonicClock::default(),
        }
    }
}

impl<C: Clock> RetryBudget<C> {
    /// The clock the floor is timed by (the limiter's, in tests a
    /// `ManualClock`).
    pub fn clock<D: Clock>(self, clock: D) -> RetryBudget<D> {
        RetryBudget {
            deposits: self.deposits,
            floor: self.floor,
            terms: self.terms,
            clock,
        }
    }

    /// The share of a retry each token paid deposits, from 0 to 1 (cut to
    /// that range; thousandths are kept).
    pub fn ratio(mut self, ratio: f64) -> Self {
        self.terms = self.terms.ratio(ratio);
        self
    }

    /// Retries per second every bucket earns whatever the calls (0: none).
    pub fn floor_per_second(mut self, retries: u32) -> Self {
        self.terms = self.terms.floor_per_second(retries);
        self
    }

    /// The most retries a bucket banks (at least 1).
    pub fn most(mut self, retries: u32) -> Self {
        self.terms = self.terms.most(retries);
        self
    }

    /// Deposits what `grant`'s tokens earn, to the buckets that paid them.
    pub fn deposit(&self, grant: &Grant) {
        for payment in grant.payments() {
            let Some(deposits) = self.deposits.get(payment.bucket() as usize) else {
                continue;
            };
            let earned = self.terms.ratio * u64::from(payment.tokens());
            let _ = deposits.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                Some(deposited(held, earned, self.terms.cap)).filter(|&after| after != held)
            });
        }
    }

    /// Takes one retry from the roomiest of `shard`'s own buckets (a
    /// tenant's, from [`Limiter::shard`]), or from a bucket's floor when
    /// none holds a whole one: whether the retry may go.
    pub fn withdraw(&self, shard: &Shard) -> bool {
        let held = (shard.buckets().iter()).map(|&b| {
            self.deposits
                .get(b as usize)
                .map_or(0, |d| d.load(Ordering::Relaxed))
        });
        let best = roomiest(held).and_then(|i| self.deposits.get(shard.buckets()[i] as usize));
        if let Some(deposits) = best {
            let taken = deposits.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
                held.checked_sub(RETRY)
            });
            if taken.is_ok() {
                return true;
            }
        }
        self.terms.every > 0 && shard.buckets().iter().any(|&b| self.floor_retry(b))
    }

    /// One retry from `bucket`'s floor, if it has one now.
    fn floor_retry(&self, bucket: u32) -> bool {
        let Some(tat) = self.floor.get(bucket as usize) else {
            return false;
        };
        // One retry a bucket at most, every `every` ns: due once the last
        // one's time has come.
        let now = self.clock.now_nanos();
        tat.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |due| {
            floor_due(due, now, self.terms.every)
        })
        .is_ok()
    }

    /// Whole retries `shard`'s own buckets hold in deposits now (the floor
    /// apart).
    pub fn banked(&self, shard: &Shard) -> u64 {
        (shard.buckets().iter())
            .filter_map(|&b| self.deposits.get(b as usize))
            .map(|d| d.load(Ordering::Relaxed) / RETRY)
            .sum()
    }
}
