//! Retry budgets a fleet shares: the in-process
//! [`RetryBudget`](crate::upstream::RetryBudget)'s deposits and floors, per
//! bucket, in Redis (see [`RedisRetryBudget`]).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager};
use crossbeam_utils::CachePadded;

use super::error::{Error, within};
use super::layout::Layout;
use super::lua::Lua;
use super::script::MICROS;
use super::store::RedisStore;
use crate::store::sealed::Local;
use crate::upstream::{RETRY, Retries, Terms, deposited, retry_sealed};
use crate::{Grant, Limiter, Shard};

pub(super) const DEPOSIT_LUA: &str = concat!(
    include_str!("prelude.lua"),
    include_str!("retry.lua"),
    include_str!("retry_deposit.lua")
);
pub(super) const WITHDRAW_LUA: &str = concat!(
    include_str!("prelude.lua"),
    include_str!("retry.lua"),
    include_str!("retry_withdraw.lua")
);

/// How long deposits wait in the process before they are sent together.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// A retry budget per bucket shared by every process of a fleet: the
/// in-process [`RetryBudget`](crate::upstream::RetryBudget)'s semantics
/// (deposits of a share of a retry per token paid, capped per bucket, a
/// floor of retries per second per bucket, a withdraw from the roomiest of
/// the tenant's own buckets), kept in Redis beside the
/// [`RedisLimiter`](super::RedisLimiter)'s buckets. A tenant whose calls
/// fail in every process exhausts its shard's retries once for the fleet,
/// not once per process, and tenants whose shard differs keep theirs.
///
/// Bucket i's budget is the key `<bucket key>:retry` (so `{name}:b3:retry`,
/// after the [key prefix](super::RedisOptions::key_prefix): in the
/// one-slot layout every key is in the limiter's slot), holding
/// `"<thousandths> <due>"`: the deposits and when the floor's next retry is
/// due, by the server's clock (`TIME`). A key expires an hour after its
/// last write.
///
/// - **Deposits are batched.** A deposit is counted in the process at once
///   and sent within [`FLUSH_EVERY`] (100 ms), one script for every bucket
///   that earned, in the background (a tokio task; outside a runtime, with
///   the next withdraw or [`flush`](Self::flush)). A withdraw sends the
///   shard's own deposits first, in its one round trip, so a process's own
///   deposits always count for its withdraws.
/// - **A withdraw is one round trip** (one script over the shard's keys),
///   bounded by the limiter's [deadline](super::RedisOptions::deadline). In
///   the [spread layout](Layout::Spread) the keys live in their buckets'
///   slots, so a withdraw asks the buckets one after another, the first
///   with a whole retry (not the roomiest), then their floors: up to 2k
///   round trips, each sending the deposits of the bucket it asks.
/// - **Failing closed.** When Redis cannot be reached or does not answer
///   within the deadline, [`withdraw`](Self::withdraw) answers no retry: a
///   retry is optional, and a fleet that cannot count its retries must not
///   multiply them. Deposits that failed to go are kept for the next flush
///   (those of a round trip that timed out are dropped: it may have run).
/// - **Bad values** at a retry key (another type, or text of another
///   shape) fail with [`Error::NotARetryBudget`] and give no retry; a
///   count above the cap counts as the cap.
///
/// ```no_run
/// use shuffle_limiter::redis::{FailurePolicy, RedisOptions, RedisRetryBudget};
/// use shuffle_limiter::upstream::Upstream;
/// use shuffle_limiter::{Quota, ShardedLimiter};
/// use std::sync::Arc;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = ShardedLimiter::builder()
///     .quota(Quota::per_second(5))
///     .buckets(8)
///     .name("partner-api")
///     .build_redis("redis://127.0.0.1:6379", RedisOptions::new(FailurePolicy::FailClosed))
///     .await?;
/// let retries = RedisRetryBudget::of(&limiter).ratio(0.1).most(5);
/// let upstream = Upstream::new(Arc::new(limiter)).retries(retries);
/// # let _ = upstream;
/// # Ok(())
/// # }
/// ```
pub struct RedisRetryBudget<Conn = ConnectionManager> {
    inner: Arc<Inner<Conn>>,
    terms: Terms,
}

/// What the background flushes share with the budget.
struct Inner<Conn> {
    connection: Conn,
    /// Bucket i's retry key.
    keys: Box<[String]>,
    layout: Layout,
    deadline: Duration,
    deposit: Lua,
    withdraw: Lua,
    /// Per bucket, thousandths deposited here and not yet sent.
    pending: Box<[CachePadded<AtomicU64>]>,
    /// Whether a flush is due already.
    scheduled: AtomicBool,
}

impl<Conn> fmt::Debug for RedisRetryBudget<Conn> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisRetryBudget")
            .field("terms", &self.terms)
            .finish_non_exhaustive()
    }
}

impl<Conn> RedisRetryBudget<Conn>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// A budget for `limiter`'s buckets (every bucket it may grow to), over
    /// its connection, with the defaults of the in-process budget: 0.2 of a
    /// retry per token, a floor of 1 retry per second per bucket, at most
    /// 10 retries banked per bucket.
    pub fn of<L: Local + 'static>(limiter: &Limiter<RedisStore<Conn, L>>) -> Self {
        let shared = &limiter.store.shared;
        let keys = (0..limiter.max_buckets())
            .map(|b| format!("{}:retry", shared.script.key(b).unwrap_or_default()))
            .collect();
        RedisRetryBudget::over(
            shared.connection.clone(),
            keys,
            shared.options.layout,
            shared.options.deadline,
        )
    }

    fn over(connection: Conn, keys: Box<[String]>, layout: Layout, deadline: Duration) -> Self {
        let pending = (0..keys.len())
            .map(|_| CachePadded::new(AtomicU64::new(0)))
            .collect();
        RedisRetryBudget {
            inner: Arc::new(Inner {
                connection,
                keys,
                layout,
                deadline,
                deposit: Lua::new(DEPOSIT_LUA),
                withdraw: Lua::new(WITHDRAW_LUA),
                pending,
                scheduled: AtomicBool::new(false),
            }),
            terms: Terms::default(),
        }
    }

    /// The share of a retry each token paid deposits, from 0 to 1 (cut to
    /// that range; thousandths are kept). Every process should use the
    /// same.
    pub fn ratio(mut self, ratio: f64) -> Self {
        self.terms = self.terms.ratio(ratio);
        self
    }

    /// Retries per second every bucket earns whatever the calls (0: none),
    /// for the whole fleet; at most 10⁶ (the script counts microseconds).
    pub fn floor_per_second(mut self, retries: u32) -> Self {
        self.terms = self.terms.floor_per_second(retries);
        self
    }

    /// The most retries a bucket banks (at least 1), for the whole fleet.
    pub fn most(mut self, retries: u32) -> Self {
        self.terms = self.terms.most(retries);
        self
    }

    /// Deposits what `grant`'s tokens earn, to the buckets that paid them:
    /// counted here at once, sent within [`FLUSH_EVERY`]. A grant of the
    /// local fallback earns nothing (Redis never paid it).
    pub fn deposit(&self, grant: &Grant) {
        if grant.generation().0 {
            return;
        }
        let mut any = false;
        for payment in grant.payments() {
            let Some(pending) = self.inner.pending.get(payment.bucket() as usize) else {
                continue;
            };
            let earned = self.terms.ratio * u64::from(payment.tokens());
            if earned > 0 {
                add(pending, earned, self.terms.cap);
                any = true;
            }
        }
        if any {
            self.schedule();
        }
    }

    /// Sends a flush within [`FLUSH_EVERY`], unless one is due already.
    fn schedule(&self) {
        if self.inner.scheduled.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.inner.scheduled.store(false, Ordering::Release);
            return; // sent with the next withdraw or flush
        };
        let (inner, cap) = (Arc::clone(&self.inner), self.terms.cap);
        runtime.spawn(async move {
            tokio::time::sleep(FLUSH_EVERY).await;
            // Deposits from now on schedule the next flush.
            inner.scheduled.store(false, Ordering::Release);
            let _ = inner.flush(cap).await;
        });
    }

    /// Sends the deposits this process holds now, one round trip (one per
    /// bucket in the spread layout), within the deadline.
    ///
    /// # Errors
    /// A round trip's: the connection, the deadline, or a retry key that
    /// holds something else ([`Error::NotARetryBudget`]).
    pub async fn flush(&self) -> Result<(), Error> {
        self.inner.flush(self.terms.cap).await
    }

    /// Takes one retry for `shard` (a tenant's, from
    /// [`Limiter::shard`](crate::Limiter::shard)): from the roomiest of its
    /// own buckets' deposits, counting this process's first, or else from a
    /// bucket's floor. Whether the retry may go: no when Redis fails (fail
    /// closed), see [`try_withdraw`](Self::try_withdraw) for why.
    pub async fn withdraw(&self, shard: &Shard) -> bool {
        self.try_withdraw(shard).await.unwrap_or(false)
    }

    /// As [`withdraw`](Self::withdraw), with the error of a failed round
    /// trip.
    ///
    /// # Errors
    /// The connection, the deadline, or a retry key that holds something
    /// else ([`Error::NotARetryBudget`]).
    pub async fn try_withdraw(&self, shard: &Shard) -> Result<bool, Error> {
        let inner = &self.inner;
        let buckets: Vec<u32> = (shard.buckets().iter().copied())
            .filter(|&b| (b as usize) < inner.keys.len())
            .collect();
        let withdraw = async {
            match inner.layout {
                Layout::OneSlot => self.withdraw_from(&buckets, 0).await,
                Layout::Spread => {
                    for mode in [1, 2] {
                        for &b in &buckets {
                            if self.withdraw_from(&[b], mode).await? {
                                return Ok(true);
                            }
                        }
                    }
                    Ok(false)
                }
            }
        };
        within(inner.deadline, withdraw).await
    }

    /// One withdraw script over `buckets` (see `retry_withdraw.lua`), with
    /// their deposits not sent yet.
    async fn withdraw_from(&self, buckets: &[u32], mode: u8) -> Result<bool, Error> {
        let inner = &self.inner;
        let taken: Vec<u64> = (buckets.iter())
            .map(|&b| inner.pending[b as usize].swap(0, Ordering::AcqRel))
            .collect();
        let mut invocation = inner.withdraw.prepare_invoke();
        for &b in buckets {
            invocation.key(inner.keys[b as usize].as_str());
        }
        // The script counts microseconds (⌊⌊10⁹/r⌋/1000⌋ = ⌊10⁶/r⌋), and 0
        // is no floor: a floor above 10⁶ a second is 10⁶ here.
        let every = (self.terms.every / MICROS).max(u64::from(self.terms.every > 0));
        invocation.arg(self.terms.cap).arg(every).arg(mode);
        for &t in &taken {
            invocation.arg(t);
        }
        let reply = invocation
            .invoke_async::<Vec<i64>>(&mut inner.connection.clone())
            .await
            .map_err(Error::from_redis);
        let reply = match reply {
            Ok(reply) => reply,
            Err(error) => {
                // Not sent: kept for the next round trip.
                for (&b, &t) in buckets.iter().zip(&taken) {
                    add(&inner.pending[b as usize], t, self.terms.cap);
                }
                return Err(error);
            }
        };
        let index = |i: i64| usize::try_from(i).ok().filter(|&i| i < buckets.len());
        match reply[..] {
            [1, 1 | 2, i] if index(i).is_some() => Ok(true),
            [0, 0, 0] => Ok(false),
            _ => Err(Error::Reply {
                detail: format!("{reply:?}"),
            }),
        }
    }

    /// Whole retries `shard`'s own buckets hold in deposits in Redis, after
    /// this process's are sent (the floor apart).
    ///
    /// # Errors
    /// As [`flush`](Self::flush).
    pub async fn banked(&self, shard: &Shard) -> Result<u64, Error> {
        self.flush().await?;
        let inner = &self.inner;
        let read = async {
            let mut banked = 0;
            for &b in shard.buckets() {
                let Some(key) = inner.keys.get(b as usize) else {
                    continue;
                };
                let mut get = ::redis::cmd("GET");
                get.arg(key);
                let text = get
                    .query_async::<Option<String>>(&mut inner.connection.clone())
                    .await
                    .map_err(|e| match e.code() {
                        Some("WRONGTYPE") => not_a_budget(key, "another type"),
                        _ => Error::from_redis(e),
                    })?;
                let held = match text {
                    None => 0,
                    Some(text) => parse(&text).ok_or_else(|| not_a_budget(key, &text))?.0,
                };
                banked += held.min(self.terms.cap) / RETRY;
            }
            Ok(banked)
        };
        within(inner.deadline, read).await
    }
}

impl<Conn: ConnectionLike + Clone + Send + Sync + 'static> Inner<Conn> {
    async fn flush(&self, cap: u64) -> Result<(), Error> {
        let taken: Vec<(usize, u64)> = (self.pending.iter().enumerate())
            .map(|(b, p)| (b, p.swap(0, Ordering::AcqRel)))
            .filter(|&(_, t)| t > 0)
            .collect();
        let size = match self.layout {
            Layout::OneSlot => 1000, // one slot: many keys to a script
            Layout::Spread => 1,
        };
        let send = async {
            for (at, batch) in (0..).step_by(size).zip(taken.chunks(size)) {
                let mut invocation = self.deposit.prepare_invoke();
                for &(b, _) in batch {
                    invocation.key(self.keys[b].as_str());
                }
                invocation.arg(cap);
                for &(_, t) in batch {
                    invocation.arg(t);
                }
                let sent = invocation
                    .invoke_async::<Vec<i64>>(&mut self.connection.clone())
                    .await;
                if let Err(error) = sent {
                    // This batch and the rest were not counted: kept.
                    for &(b, t) in &taken[at..] {
                        add(&self.pending[b], t, cap);
                    }
                    return Err(Error::from_redis(error));
                }
            }
            Ok(())
        };
        // A flush that timed out may have run: its deposits are dropped,
        // which only ever costs retries.
        (tokio::time::timeout(self.deadline, send).await).unwrap_or(Err(Error::Timeout {
            after: self.deadline,
        }))
    }
}

/// Adds `earned` thousandths to a count not sent yet, as a deposit would.
fn add(pending: &AtomicU64, earned: u64, cap: u64) {
    let _ = pending.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |held| {
        Some(deposited(held, earned, cap)).filter(|&after| after != held)
    });
}

fn not_a_budget(key: &str, detail: &str) -> Error {
    let shown: String = (detail.chars().take(64))
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                '?'
            }
        })
        .collect();
    Error::NotARetryBudget {
        key: key.to_owned(),
        detail: shown,
    }
}

/// A retry key's `"<thousandths> <due>"`, as the scripts read it.
fn parse(text: &str) -> Option<(u64, u64)> {
    let (held, due) = text.split_once(' ')?;
    let number = |s: &str| {
        (!s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()))
            .then(|| s.parse::<u64>().ok())
            .flatten()
            .filter(|&n| n < 1 << 53)
    };
    Some((number(held)?, number(due)?))
}

impl<Conn> retry_sealed::Sealed for RedisRetryBudget<Conn> {}

impl<Conn> Retries for RedisRetryBudget<Conn>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn deposit(&self, grant: &Grant) {
        RedisRetryBudget::deposit(self, grant);
    }

    fn withdraw(&self, shard: &Shard) -> impl Future<Output = bool> + Send {
        RedisRetryBudget::withdraw(self, shard)
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_retry_key_reads_as_two_numbers_or_not_at_all() {
        assert_eq!(parse("1500 42"), Some((1500, 42)));
        for bad in [
            "",
            "1500",
            "1500 ",
            " 42",
            "-1 0",
            "1e3 0",
            "1 2 3",
            "9007199254740992 0",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
