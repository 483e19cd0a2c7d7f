#![doc = include_str!("../README.md")]
//!
//! ## In tests and simulations
//! Time moves only when you say so: give the limiter a [`ManualClock`].
//! ```
//! use std::time::Duration;
//! use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
//!
//! let clock = ManualClock::new();
//! let sim = ShardedLimiter::builder()
//!     .quota(Quota::per_second(800))
//!     .buckets(8)
//!     .per_tenant(2)
//!     .clock(clock.clone())
//!     .build()?;
//! let tenant = sim.handle("tenant-7"); // shard resolved once
//! let granted = (0..1000).filter(|_| tenant.check().is_ok()).count();
//! assert_eq!(granted, 200); // its 2 buckets of 100 tokens each
//! clock.advance(Duration::from_millis(10)); // 100/s per bucket: 1 token each
//! assert_eq!(tenant.remaining(), 2);
//! # Ok::<(), shuffle_limiter::ConfigError>(())
//! ```
//!
//! ## The pieces
//! - [`guide`]: the guides, rustdoc only: choosing N and k, borrowing, users
//!   and tiers, live changes, and one per integration.
//! - [`Quota`]: the global budget; [`ShardedLimiter`] documents exactly how it
//!   is split over the buckets.
//! - [`Assignment`] and [`Shard`]: the specified tenant → buckets function
//!   (`docs/assignment.md` is the contract, with known-answer vectors).
//! - [`Request`], [`Limiter`], [`ShardedLimiter`], [`Handle`], [`Grant`]
//!   (and its [`Payment`]s), [`Denied`]: the decision. A limiter is one core
//!   (the split, the assignment, the tenant cache) over one [`store`]:
//!   [`InProcess`](store::InProcess) atomics, or Redis; [`Limit`] is what
//!   every limiter does, whatever its store. The decision itself is written
//!   once, as a pure function that every store applies atomically.
//! - Beyond one tenant, one shard: borrowing idle capacity from spill
//!   buckets above a reserve ([`Builder::borrow_from`]), weighted requests
//!   paid by several buckets together ([`Grant::payments`]), users isolated
//!   inside a tenant ([`Builder::per_user`], [`Request::user`])
//!   and tiers with a larger k ([`Builder::tier`]).
//! - [`Sharder`]: the same assignment over anything else (worker addresses,
//!   queue names): a tenant's shard of them, a stable member per resource id,
//!   and where to retry when a member is sick.
//! - [`inflight`]: in-flight limits — a concurrency limit split into pools
//!   by the same assignment, each tenant taking permits from its k, with
//!   bounded FIFO queues, so that a tenant whose calls hang holds only its
//!   own pools.
//! - [`Clock`], [`MonotonicClock`], [`ManualClock`]: time.
//! - [`blast`]: the exact blast-radius math for choosing N and k
//!   ([`Limiter::blast_radius`] gives it for a built limiter); the
//!   `shuffle-lab` command, a package of its own, is built on it.
//!
//! ## The integrations' modules
//! - `wait`: [`Limiter::wait`] and the [`wait`] module.
//! - `tower`: the [`tower`] module.
//! - `config`: the [`set`] module.
//! - `metrics`: the [`metrics`] module.
//! - `redis`: the [`redis`] module.
//!
//! docs.rs shows every feature's items, each marked with the feature it
//! needs.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc(html_root_url = "https://docs.rs/shuffle-limiter/0.1.0")]

mod assign;
pub mod blast;
mod clock;
mod denied;
mod draw;
mod error;
mod grant;
pub mod guide;
pub mod inflight;
mod limiter;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
#[cfg(not(feature = "metrics"))]
#[path = "metrics_off.rs"]
mod metrics;
mod plan;
mod quota;
mod random;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
mod request;
#[cfg(feature = "config")]
#[cfg_attr(docsrs, doc(cfg(feature = "config")))]
pub mod set;
mod sharder;
pub mod store;
mod sync;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;
pub mod upstream;
#[cfg(feature = "wait")]
#[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
pub mod wait;

pub use assign::{Assignment, MAX_BUCKETS, MAX_PER_TENANT, Shard};
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use denied::{DenialReason, Denied};
pub use error::{ConfigError, RefundTooLarge};
pub use grant::{BucketState, Grant, Payment, Refunded, Settled};
pub use limiter::builder::{
    Builder, DEFAULT_BUCKETS, DEFAULT_LENDER_RESERVE, DEFAULT_PER_TENANT, DEFAULT_TENANT_CACHE,
};
pub use limiter::handle::Handle;
pub use limiter::limit::Limit;
pub use limiter::{Limiter, ShardedLimiter};
pub use plan::isolation::{Isolation, WEAK_ISOLATION_SHARDS};
pub use plan::tiers::MAX_TIERED_TENANTS;
pub use quota::Quota;
pub use request::Request;
pub use sharder::{RetryOrder, Sharder, SharderError};
#[cfg(feature = "wait")]
#[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
pub use wait::{Jitter, TokioClock};
