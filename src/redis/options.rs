//! How a Redis limiter talks to Redis, and what it does when Redis fails.

use std::time::Duration;

use super::layout::Layout;

/// How long a decision may take unless [`RedisOptions::deadline`] says
/// otherwise: 100 ms.
///
/// A reply later than the deadline is decided by the failure policy, which
/// for `FailClosed` denies a tenant whose buckets may hold plenty. So the
/// default is set above the latencies Redis really has, not its median:
/// managed Redis is reported with a p99.9 above 25 ms, and on a busy host
/// (the client beside a compile, or beside the server on two cores) a reply
/// that Redis sent in time can wait tens of milliseconds for its thread.
/// The price is the other side of the trade: while Redis hangs without a
/// word, a decision can take up to the deadline, until the breaker opens
/// (after three missed deadlines in a row with no answer) and the policy
/// answers at once. Lower it where callers cannot wait that long and the
/// host and the network are known to be quiet.
pub const DEFAULT_DEADLINE: Duration = Duration::from_millis(100);

/// How long the limiter leaves Redis alone after a failure unless
/// [`RedisOptions::retry_every`] says otherwise.
pub const DEFAULT_RETRY_EVERY: Duration = Duration::from_millis(100);

/// How long building may wait for Redis unless
/// [`RedisOptions::connect_timeout`] says otherwise.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// The most decisions one batch may hold
/// ([`RedisOptions::batch`]): 1024.
pub const MAX_BATCH: u32 = 1024;

/// The most decisions of a batch unless [`RedisOptions::batch`] says
/// otherwise: 64.
pub const DEFAULT_BATCH_DECISIONS: u32 = 64;

/// The longest a decision waits for its batch to leave unless
/// [`RedisOptions::batch`] says otherwise: 1 ms. It only counts while a
/// batch is out and fewer decisions wait than are out, which a batch coming
/// back ends first, in the common case.
pub const DEFAULT_BATCH_WINDOW: Duration = Duration::from_millis(1);

/// Batching as asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Batching {
    /// Not asked: on where it can be (see [`RedisOptions::batching`]).
    Default,
    /// [`RedisOptions::unbatched`].
    Off,
    /// [`RedisOptions::batch`]: (most decisions, window).
    On(u32, Duration),
}

/// What a limiter does when Redis does not answer in time.
///
/// See the [module documentation](super) for when to choose which.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FailurePolicy {
    /// Deny, with a retry time of when Redis will be asked again: for hard
    /// upstream quotas.
    FailClosed,
    /// Grant, naming the tenant's first bucket and 0 tokens remaining.
    FailOpen,
    /// Decide in process, with the budget divided by `replicas` (each rate
    /// R / replicas, each burst ⌊B / replicas⌋) and the same N, k and salt.
    LocalFallback {
        /// How many processes share the budget: each falls back to its share.
        replicas: u32,
    },
}

impl FailurePolicy {
    /// The replicas of a `LocalFallback`.
    pub(super) fn replicas(self) -> Option<u32> {
        match self {
            FailurePolicy::LocalFallback { replicas } => Some(replicas),
            FailurePolicy::FailClosed | FailurePolicy::FailOpen => None,
        }
    }
}

/// How a [`RedisLimiter`](super::RedisLimiter) talks to Redis and what it does when Redis fails.
///
/// ```
/// use std::time::Duration;
/// use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
///
/// let options = RedisOptions::new(FailurePolicy::FailClosed)
///     .deadline(Duration::from_millis(10))
///     .retry_every(Duration::from_millis(250));
/// assert_eq!(options.failure_policy(), FailurePolicy::FailClosed);
/// ```
#[derive(Debug, Clone)]
#[must_use = "options do nothing until passed to build_redis"]
pub struct RedisOptions {
    pub(super) policy: FailurePolicy,
    pub(super) deadline: Duration,
    pub(super) retry_every: Duration,
    pub(super) connect_timeout: Duration,
    pub(super) cache_denials: bool,
    pub(super) layout: Layout,
    pub(super) key_prefix: String,
    pub(super) batch: Batching,
}

impl RedisOptions {
    /// Options with the given failure policy, a deadline of
    /// [`DEFAULT_DEADLINE`], a retry interval of [`DEFAULT_RETRY_EVERY`], a
    /// connect timeout of [`DEFAULT_CONNECT_TIMEOUT`], cached denials on,
    /// the [`Layout::OneSlot`] layout and, in it, [batching](Self::batch)
    /// of up to [`DEFAULT_BATCH_DECISIONS`] within
    /// [`DEFAULT_BATCH_WINDOW`].
    pub fn new(policy: FailurePolicy) -> Self {
        RedisOptions {
            policy,
            deadline: DEFAULT_DEADLINE,
            retry_every: DEFAULT_RETRY_EVERY,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            cache_denials: true,
            layout: Layout::OneSlot,
            key_prefix: String::new(),
            batch: Batching::Default,
        }
    }

    /// The longest a decision may take; past it the failure policy decides.
    /// Leave room for the round trip to Redis, a slow moment of the server
    /// and a busy moment of this host (see [`DEFAULT_DEADLINE`] for the
    /// trade).
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// How long to leave Redis alone after it failed or missed the deadline,
    /// before one request tries it again. It bounds how long decisions stay
    /// with the failure policy after Redis is back.
    pub fn retry_every(mut self, retry_every: Duration) -> Self {
        self.retry_every = retry_every;
        self
    }

    /// How long building may wait for Redis to answer; with
    /// [`Builder::build_redis`](crate::Builder::build_redis) also the timeout of each connection attempt.
    /// A server that has not answered by then does not fail
    /// `build_redis`: the limiter decides by its failure policy until it
    /// does.
    ///
    /// It also bounds a live change of the quota or N
    /// ([`Limit::set_quota`](crate::Limit::set_quota) and the like), whose
    /// script moves every bucket and so takes longer than a decision: the
    /// change fails with [`Error::Timeout`](super::Error::Timeout) past it
    /// (or past the [deadline](Self::deadline), if that is longer).
    pub fn connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }

    /// Whether to remember denials from Redis until their retry time (on by
    /// default; see the [module documentation](super#cached-denials)).
    pub fn cache_denials(mut self, cache: bool) -> Self {
        self.cache_denials = cache;
        self
    }

    /// Where the buckets live: all in one Cluster slot ([`Layout::OneSlot`],
    /// the default, one round trip per decision) or each in its own
    /// ([`Layout::Spread`], so that a failed Cluster node touches only the
    /// tenants of its buckets). Every process sharing the limiter must use
    /// the same layout.
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// A prefix for every Redis key of the limiter, such as `"billing:"`:
    /// bucket i is then `billing:{name}:b<i>` (`billing:{name:b<i>}` in the
    /// spread layout) and the quota key `billing:{name}:quota`.
    ///
    /// The default is no prefix: the keys are `{name}:b<i>` and
    /// `{name}:quota`. **Two limiters with the same name and prefix on one
    /// Redis share their buckets and their budget**, whatever process or
    /// service builds them: give each service (or each budget) its own
    /// prefix, or its own names. Every process that shares a budget must
    /// use the same prefix. The prefix goes before the hash tag, so it
    /// moves no key to another Cluster slot; it may not hold `{` or `}`
    /// ([`BuildError::InvalidKeyPrefix`](super::BuildError::InvalidKeyPrefix)).
    ///
    /// ```
    /// use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
    ///
    /// let options = RedisOptions::new(FailurePolicy::FailClosed).key_prefix("billing:");
    /// assert_eq!(options.prefix(), "billing:");
    /// ```
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Coalesces the decisions of this process into batches: one script
    /// call for up to `max_decisions` decisions. On by default in the
    /// [`Layout::OneSlot`] layout, with [`DEFAULT_BATCH_DECISIONS`] and
    /// [`DEFAULT_BATCH_WINDOW`]; [`unbatched`](Self::unbatched) turns it
    /// off.
    ///
    /// A process with a few decisions at a time (up to twelve out, no batch
    /// out) sends each alone at once, as without batching. Past that, a
    /// batch leaves as soon as no other batch is out; while one is, once as
    /// many decisions wait as are out, `max_decisions` wait, or `window`
    /// after the first of them, whichever comes first; while two are, once
    /// one is back: so the window bounds the wait rather than setting it
    /// (tokio's timer rounds it up to a whole millisecond).
    ///
    /// The script applies a batch's decisions in the order they arrived,
    /// each exactly as it would apply it alone, so the budget, the
    /// isolation and every decision's meaning are unchanged; what changes
    /// is that a decision may wait up to `window` for its batch to leave,
    /// and that many decisions share one round trip, which costs Redis less
    /// a decision. The deadline, the breaker and the failure policy still
    /// apply to each decision (a batch that misses the deadline fails each
    /// of its decisions by the policy). A batch takes the decisions waiting
    /// from every tenant in turn, so a flood of one tenant cannot keep
    /// another's decision out of the next batch while fewer than
    /// `max_decisions` tenants wait. Only the [`Layout::OneSlot`] layout
    /// batches, and building checks the values: see the [Redis
    /// guide](crate::guide::redis#batching).
    ///
    /// ```
    /// use std::time::Duration;
    /// use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
    ///
    /// let options = RedisOptions::new(FailurePolicy::FailClosed)
    ///     .batch(16, Duration::from_micros(200));
    /// assert_eq!(options.batching(), Some((16, Duration::from_micros(200))));
    /// ```
    pub fn batch(mut self, max_decisions: u32, window: Duration) -> Self {
        self.batch = Batching::On(max_decisions, window);
        self
    }

    /// One script call per decision: no [batching](Self::batch).
    ///
    /// ```
    /// use shuffle_limiter::redis::{FailurePolicy, Layout, RedisOptions};
    /// use shuffle_limiter::redis::{DEFAULT_BATCH_DECISIONS, DEFAULT_BATCH_WINDOW};
    ///
    /// let options = RedisOptions::new(FailurePolicy::FailClosed);
    /// let default = Some((DEFAULT_BATCH_DECISIONS, DEFAULT_BATCH_WINDOW));
    /// assert_eq!(options.batching(), default);
    /// assert_eq!(options.clone().unbatched().batching(), None);
    /// assert_eq!(options.layout(Layout::Spread).batching(), None);
    /// ```
    pub fn unbatched(mut self) -> Self {
        self.batch = Batching::Off;
        self
    }

    /// The [batching](Self::batch) the limiter will do, as (most decisions,
    /// window), or `None` for one script call per decision: what
    /// [`batch`](Self::batch) set; `None` after
    /// [`unbatched`](Self::unbatched); otherwise the default, in the
    /// [`Layout::OneSlot`] layout with a [deadline](Self::deadline) longer
    /// than [`DEFAULT_BATCH_WINDOW`] (and `None` in the other cases).
    pub fn batching(&self) -> Option<(u32, Duration)> {
        match self.batch {
            Batching::On(most, window) => Some((most, window)),
            Batching::Off => None,
            Batching::Default => (self.layout == Layout::OneSlot
                && self.deadline > DEFAULT_BATCH_WINDOW)
                .then_some((DEFAULT_BATCH_DECISIONS, DEFAULT_BATCH_WINDOW)),
        }
    }

    /// The [key prefix](Self::key_prefix): empty unless set.
    pub fn prefix(&self) -> &str {
        &self.key_prefix
    }

    /// The failure policy.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.policy
    }
}
