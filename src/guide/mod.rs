//! Guides: how to choose the numbers, and how to use each part, with
//! examples that compile.
//!
//! These modules hold no code, only documentation; every example in them is
//! a doctest. Start with [`choosing`] (what the budget means, and how to
//! pick N and k), then read the one for what you are building:
//!
//! - [`choosing`]: why shuffle sharding, the budget exactly, choosing N and
//!   k with a worked example, the k trade, more than one flooder, picking N,
//!   and checking it all against the real assignment with `shuffle-lab`.
//! - [`borrowing`]: lending idle capacity to a lone tenant without giving up
//!   the isolation.
//! - [`users_and_tiers`]: users isolated inside a tenant, tiers with a larger
//!   k, and the same assignment over anything else ([`Sharder`](crate::Sharder)).
//! - [`inflight`]: in-flight limits — a concurrency limit split into pools,
//!   and the hung-tenant scene with its numbers.
//! - [`live`]: changing the quota or N of a running limiter, refunds, and
//!   reloading a config.
//! - [`upstream`](upstream/index.html) (feature `wait`): calling a rate-limited upstream — waits,
//!   deadlines, jitter, dropped waits.
//! - [`per_upstream`](per_upstream/index.html) (feature `config`): one limiter per upstream, built from a
//!   config (`LimiterSet`), some of them in Redis.
//! - [`tower`](tower/index.html) (feature `tower`): the layer for axum and tower servers.
//! - [`metrics`](metrics/index.html) (feature `metrics`): the counters, gauges and `tracing`
//!   events.
//! - [`redis`](redis/index.html) (feature `redis`): many processes, one budget — the failure
//!   policy, isolation over Redis, Cluster and Valkey, the layouts, the key
//!   prefix, the burst caveat, and how it is tested.
//!
//! The guides of optional features are compiled with their feature (docs.rs
//! shows them all, each marked with the feature it needs).

pub mod borrowing;
pub mod choosing;
pub mod inflight;
pub mod live;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub mod per_upstream;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;
#[cfg(feature = "wait")]
#[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
pub mod upstream;
pub mod users_and_tiers;
