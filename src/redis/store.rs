//! The Redis store: the script, the deadline, the denial cache, the breaker
//! and the failure policy around one round trip per decision.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use crossbeam_utils::CachePadded;
use tokio::time::timeout;

use super::batch::Batcher;
use super::breaker::Breaker;
use super::decision::{Decision, Source};
use super::denial_cache::DenialCache;
use super::error::Error;
use super::layout::Layout;
use super::metrics::RedisMetrics;
use super::options::{FailurePolicy, RedisOptions};
use super::quota::ChangeScripts;
use super::script::{Answer, DrawScript, Drawn, MICROS, Request, answer};
use super::spread::Rooms;
use crate::assign::ShardCache;

use crate::denied::DenialReason;
use crate::draw::Outcome;
use crate::grant::{Booked, BucketState, Refunded};
use crate::metrics::Metrics;
use crate::plan::live::LiveSplit;
use crate::plan::whom::Whom;
use crate::plan::{Core, Shards, Split};
use crate::quota::Quota;
use crate::random::tie_break;
use crate::store::Store;
use crate::store::sealed::{Apply, Change, Local, NotReserved};
use crate::{Denied, Grant, Shard};

/// Buckets kept in Redis, shared by every process that builds the same
/// limiter: the store of a [`RedisLimiter`](super::RedisLimiter).
///
/// `Conn` is the connection; `L` is what decides while Redis cannot (the
/// [`FailurePolicy::LocalFallback`](super::FailurePolicy::LocalFallback)'s
/// in-process limiter, reached through the store seam alone). Cloning is
/// cheap: clones share the connection, the breaker and the denial cache.
pub struct RedisStore<Conn, L> {
    pub(super) shared: Arc<Shared<Conn, L>>,
}

impl<Conn, L> Clone for RedisStore<Conn, L> {
    fn clone(&self) -> Self {
        RedisStore {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<Conn, L> fmt::Debug for RedisStore<Conn, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

/// What every decision of one limiter shares, owned by the decisions in
/// flight as much as by the limiter.
pub(super) struct Shared<Conn, L> {
    pub(super) connection: Conn,
    pub(super) script: DrawScript,
    pub(super) changes: ChangeScripts,
    /// The limiter's split, its interval a whole number of microseconds:
    /// the core's, changed when Redis holds another quota.
    pub(super) split: Arc<LiveSplit>,
    /// The version of the quota set live that `split` comes from (0: the
    /// quota the limiter was built with, `built`).
    pub(super) version: AtomicU64,
    pub(super) built: Quota,
    /// The N the limiter was built with, as `built`.
    pub(super) built_buckets: u32,
    /// The lender's reserve, as the core's.
    pub(super) reserve: u32,
    pub(super) options: RedisOptions,
    pub(super) breaker: Breaker,
    pub(super) denials: DenialCache,
    /// What this process last saw of each bucket (the spread layout's).
    pub(super) rooms: Rooms,
    /// Per bucket, the latest instant (µs, the server's clock) a hold-off
    /// of any process held it until, as far as this one has heard (the
    /// one-slot layout's).
    pub(super) held: Box<[AtomicU64]>,
    pub(super) fallback: Option<L>,
    /// Whether the fallback could not follow the quota or N in force (a
    /// change another process made, whose share it cannot take): it then
    /// denies, rather than grant on the budget it had.
    pub(super) fallback_behind: AtomicBool,
    /// When (`Breaker::micros`) a weight too large for the quota this
    /// process knows last made it read the quota from Redis: at most once a
    /// second, so that a flood of such requests is not a flood of reads.
    pub(super) weighed_at: AtomicU64,
    /// Where decisions wait for their batch, when batching is on.
    pub(super) batcher: Option<Batcher>,
    /// How shards are found, to resolve one again when another process
    /// changed N (rare: without a cache).
    pub(super) shards: Shards,
    pub(super) no_cache: ShardCache,
    pub(super) metrics: Metrics,
    /// The same counts as `counts`, through the metrics facade.
    pub(super) redis_metrics: RedisMetrics,
    /// Decisions from Redis, from the denial cache, by the policy; errors.
    pub(super) counts: [CachePadded<AtomicU64>; 4],
}

pub(super) const FROM_REDIS: usize = 0;
pub(super) const FROM_CACHE: usize = 1;
pub(super) const FROM_POLICY: usize = 2;
pub(super) const ERRORS: usize = 3;

impl<Conn, L> Shared<Conn, L>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local,
{
    /// The decision for `n` tokens over `whom`'s shard: from the denial
    /// cache, from Redis within the deadline, or by the failure policy.
    pub(super) async fn decide(&self, whom: Whom<'_>, n: u32) -> Decision {
        self.decide_at(&whom, n, 0).await.0
    }

    /// `whom`'s shard among `buckets` buckets: the one it holds if it was
    /// resolved under that N, else resolved again (a fixed shard as it is).
    fn resolve(&self, whom: &Whom<'_>, buckets: u32) -> Shard {
        if whom.buckets == buckets {
            return whom.shard;
        }
        (self.shards.of(whom.id, buckets, &self.no_cache)).unwrap_or(whom.shard)
    }

    /// A grant for `lead` from now, taken now (see `book` of `Apply`),
    /// or the denial; a grant of the failure policy is for now, and so is
    /// its denial (it drew nothing at the lead).
    pub(super) async fn book(
        &self,
        whom: Whom<'_>,
        n: u32,
        lead: Duration,
    ) -> Result<Booked, NotReserved> {
        // Rounded up: the caller never uses the grant before the script's
        // instant.
        let micros =
            u64::try_from(lead.as_nanos().div_ceil(u128::from(MICROS))).unwrap_or(u64::MAX);
        let (decision, outcome) = self.decide_at(&whom, n, micros).await;
        let grant = decision.result.map_err(|denied| NotReserved {
            denied,
            by_policy: decision.source == Source::Policy,
        })?;
        Ok(match outcome {
            Some(outcome) => Booked::of(grant, &outcome, Duration::from_micros(micros)),
            None => Booked::now(grant),
        })
    }

    /// Redis answered a draw: where the draw's library was found lost, or
    /// never loaded, it is loaded now, beside the decisions.
    pub(super) fn draw_answered(&self) {
        let wait = self.options.connect_timeout;
        (self.script).reload_if_lost(&self.connection, wait, || self.breaker.micros());
    }

    /// The decision at `lead` µs from now (a booking, when not 0, which
    /// the denial cache never answers), with the outcome Redis drew when it
    /// did.
    async fn decide_at(&self, whom: &Whom<'_>, n: u32, lead: u64) -> (Decision, Option<Outcome>) {
        if self.options.layout == Layout::Spread {
            // N never changes in this layout.
            return self.decide_spread(whom.shard, n, lead).await;
        }
        let sent = self.breaker.micros();
        let (mut version, mut split) = self.current();
        let mut shard = self.resolve(whom, split.buckets);
        if split.check_weight(&shard, n).is_err() {
            // Too large for the quota this process last heard of, which
            // another process may have raised since: Redis is asked (within
            // the deadline, at most once a second), and the request denied
            // as never fitting under what Redis holds, or under what this
            // process knows (never by the failure policy: no outage grants
            // it).
            let last = self.weighed_at.load(Ordering::Relaxed);
            let due = sent.saturating_sub(last) >= 1_000_000 || last == 0;
            if due
                && self
                    .weighed_at
                    .compare_exchange(last, sent.max(1), Ordering::Relaxed, Ordering::Relaxed)
                    .is_ok()
                && let Ok(Ok(())) = timeout(self.options.deadline, self.refresh()).await
            {
                (version, split) = self.current();
                shard = self.resolve(whom, split.buckets);
            }
            if let Err(never) = split.check_weight(&shard, n) {
                return (self.decided(Err(never), Source::Limiter, None), None);
            }
        }
        // A weight of 0 is always granted, so never denied from memory.
        if n > 0
            && lead == 0
            && self.options.cache_denials
            && let Some(denied) = self.denials.lookup(&split, &shard, n, sent)
        {
            // Answered without a round trip: spend the task's cooperative
            // budget, so that a caller looping on denials yields in turn
            // instead of starving the other tasks of its worker.
            tokio::task::consume_budget().await;
            return (self.decided(Err(denied), Source::CachedDenial, None), None);
        }
        if let Err(error) = self.breaker.admit(shard.buckets()) {
            tokio::task::consume_budget().await;
            return (self.by_policy(&shard, n, error), None);
        }
        let start = tie_break(shard.buckets().len());
        let round_trip = self.draw((version, split), (whom, shard), (n, lead), start);
        let error = match timeout(self.options.deadline, round_trip).await {
            Ok(Ok(Err(never))) => return (self.decided(Err(never), Source::Limiter, None), None),
            Ok(Ok(Ok((drawn, shard, version)))) => {
                self.breaker
                    .answered(shard.buckets(), self.breaker.micros());
                let result = answer(drawn.outcome, &shard, n, version);
                if let Err(denied) = &result
                    && self.options.cache_denials
                    && lead == 0
                {
                    self.denials.remember(&shard, sent, denied, &drawn.held);
                }
                return (
                    self.decided(result, Source::Redis, None),
                    Some(drawn.outcome),
                );
            }
            Ok(Err(error)) => error,
            Err(_) => Error::Timeout {
                after: self.options.deadline,
            },
        };
        self.counts[ERRORS].fetch_add(1, Ordering::Relaxed);
        self.redis_metrics.failed();
        let error = Arc::new(error);
        self.breaker.failed(shard.buckets(), &error);
        (self.by_policy(&shard, n, Some(error)), None)
    }

    /// The draw in Redis with the split of quota `version`, on `shard`
    /// (`whom`'s under its N); when Redis holds another quota or N, the
    /// limiter takes it, resolves the shard again and draws again. What was
    /// drawn, on which shard; or the denial of a weight that a quota taken
    /// on the way can never pay (another process cut it since the caller
    /// weighed the request).
    async fn draw(
        &self,
        (mut version, mut split): (u64, Split),
        (whom, mut shard): (&Whom<'_>, Shard),
        (n, lead): (u32, u64),
        start: usize,
    ) -> Result<Result<(Drawn, Shard, u64), Denied>, Error> {
        for _ in 0..3 {
            let request = Request::of((version, &split), &shard, self.reserve, (n, lead), start);
            let alone = || async {
                let mut connection = self.connection.clone();
                self.script.draw(&mut connection, &request).await
            };
            let answer = match &self.batcher {
                Some(batcher) => match batcher.alone() {
                    Some(out) => {
                        let answer = alone().await;
                        out.answered();
                        answer
                    }
                    None => batcher.draw((whom.id, &shard), request).await,
                },
                None => alone().await,
            };
            let answer = answer?;
            self.draw_answered();
            match answer {
                Answer::Drawn(drawn) => return Ok(Ok((drawn, shard, version))),
                Answer::Stale { version: found } => {
                    self.stale(found).await?;
                    (version, split) = self.current();
                    shard = self.resolve(whom, split.buckets);
                    // Weighed under the quota just taken (the caller
                    // weighed it under the one it knew).
                    if let Err(never) = split.check_weight(&shard, n) {
                        return Ok(Err(never));
                    }
                }
            }
        }
        Err(Error::GaveUp {
            detail: "the quota kept changing under the draw".to_owned(),
        })
    }

    /// The decision of the failure policy, with the error that called it in,
    /// on `shard` (in the spread layout, only the buckets Redis could not
    /// answer for).
    ///
    /// When the shard's own keys hold something else (not an outage), only
    /// the local fallback may grant: granting without any limit there would
    /// let a stray key lift the budget.
    pub(super) fn by_policy(&self, shard: &Shard, n: u32, error: Option<Arc<Error>>) -> Decision {
        let first = shard.buckets()[0];
        let deny = || Denied {
            retry_after: self.breaker.until_probe(shard.buckets()),
            bucket: first,
            reason: DenialReason::StoreUnavailable,
            alone: false,
        };
        let outage = error.as_deref().is_none_or(Error::is_outage);
        let result = match (&self.fallback, self.options.policy) {
            (Some(_), _) if self.fallback_behind.load(Ordering::Relaxed) => Err(deny()),
            (Some(local), _) => match local.decide(shard, n) {
                Some(decided) => decided.map(Grant::by_fallback),
                None => Err(deny()),
            },
            (None, FailurePolicy::FailOpen) if outage => Ok(Grant::unpaid(first)),
            (None, _) => Err(deny()),
        };
        self.decided(result, Source::Policy, error)
    }

    pub(super) fn decided(
        &self,
        result: Result<Grant, Denied>,
        source: Source,
        error: Option<Arc<Error>>,
    ) -> Decision {
        let count = match source {
            Source::Redis => Some(FROM_REDIS),
            Source::CachedDenial => Some(FROM_CACHE),
            Source::Policy => Some(FROM_POLICY),
            Source::Limiter => None,
        };
        if let Some(count) = count {
            self.counts[count].fetch_add(1, Ordering::Relaxed);
        }
        self.redis_metrics.decided(source);
        // The local fallback counted its own decisions, under the same name.
        if source != Source::Policy || self.fallback.is_none() {
            self.metrics.record(&result);
        }
        Decision {
            result,
            source,
            error,
        }
    }
}

/// A decision in flight over Redis; it owns a handle on the store, so it may
/// outlive the call that made it.
type Pending = Pin<Box<dyn Future<Output = Result<Grant, Denied>> + Send>>;

#[allow(private_interfaces)] // see `Apply`
impl<Conn, L> Apply for RedisStore<Conn, L>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local + 'static,
{
    type Error = Error;
    type Pending = Pending;
    type Booking = Pin<Box<dyn Future<Output = Result<Booked, NotReserved>> + Send>>;

    fn apply(&self, _core: &Core, whom: Whom<'_>, n: u32) -> Pending {
        // The decision outlives `whom`: it keeps the ids and draws on them.
        let (shared, ids) = (Arc::clone(&self.shared), whom.id.to_owned());
        let Whom { shard, buckets, .. } = whom;
        Box::pin(async move {
            let whom = Whom::of_ids(shard, buckets, ids.as_ref());
            shared.decide(whom, n).await.result
        })
    }

    fn denied(denied: Denied) -> Pending {
        Box::pin(std::future::ready(Err(denied)))
    }

    fn refund(
        &self,
        _core: &Core,
        grant: Grant,
    ) -> impl Future<Output = Result<Refunded, Error>> + Send {
        self.refund_in_redis(grant)
    }

    fn charge(
        &self,
        _core: &Core,
        grant: Grant,
        tokens: u32,
    ) -> impl Future<Output = Result<u32, Error>> + Send {
        self.charge_in_redis(grant, tokens)
    }

    fn change(
        &self,
        _core: &Core,
        change: Change,
    ) -> impl Future<Output = Result<(), Error>> + Send {
        self.change_in_redis(change)
    }

    fn remaining(
        &self,
        core: &Core,
        whom: Whom<'_>,
    ) -> impl Future<Output = Result<u64, Error>> + Send {
        self.remaining_in_redis(core, whom)
    }

    fn snapshot(
        &self,
        _core: &Core,
    ) -> impl Future<Output = Result<Vec<BucketState>, Error>> + Send {
        self.snapshot_in_redis()
    }

    fn book(&self, _core: &Core, whom: Whom<'_>, n: u32, lead: Duration) -> Self::Booking {
        // As `apply`: the booking outlives `whom`.
        let (shared, ids) = (Arc::clone(&self.shared), whom.id.to_owned());
        let Whom { shard, buckets, .. } = whom;
        Box::pin(async move {
            let whom = Whom::of_ids(shard, buckets, ids.as_ref());
            shared.book(whom, n, lead).await
        })
    }

    fn give_back(&self, _core: &Core, booked: Booked) {
        Shared::give_back(&self.shared, booked);
    }

    fn held_over(&self, _core: &Core, booked: &Booked) -> bool {
        self.shared.held_over(booked)
    }

    fn catch_up(&self, _core: &Core) -> impl Future<Output = ()> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        async move { shared.catch_up().await }
    }

    fn check_weight(&self, core: &Core, shard: &Shard, n: u32) -> Result<(), Denied> {
        match self.shared.options.layout {
            // Weighed in the decision, under the quota Redis holds: another
            // process may have raised the one this process knows.
            Layout::OneSlot => Ok(()),
            // No quota is set live in this layout.
            Layout::Spread => core.split.get().check_weight_alone(shard, n),
        }
    }
}

impl<Conn, L> Store for RedisStore<Conn, L>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local + 'static,
{
}
