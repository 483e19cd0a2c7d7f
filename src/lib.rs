//! Rate-limit many tenants against one shared budget without letting one
//! noisy tenant take the others down.
//!
//! # The model
//! A global budget — rate R with burst B, say the 5 requests/s an upstream API
//! allows all of your tenants together — is split into N lock-free token
//! buckets. Each tenant is assigned k of the N buckets from its id alone
//! (*shuffle sharding*: no lookup table, no coordination; every process
//! computes the same shard), and each request draws from whichever of the
//! tenant's buckets has the most room.
//!
//! A flooding tenant can only drain its own k buckets. Another tenant shares
//! exactly j of them with probability C(k,j)·C(N−k,k−j)/C(N,k): with N = 16
//! and k = 2, 91 in 120 tenants share none and do not notice, 28 in 120 share
//! one and keep half their buckets, and only the 1 in 120 holding the
//! identical pair goes down with it. The budget itself is never exceeded:
//! over any window of length t, all tenants together get at most R·t + B.
//!
//! # Quick start
//! ```
//! use std::time::Duration;
//! use shuffle_limiter::{ManualClock, Quota, ShardedLimiter};
//!
//! let limiter = ShardedLimiter::builder()
//!     .quota(Quota::per_second(5).with_burst(5)) // the global budget
//!     .buckets(5)                                // N
//!     .per_tenant(2)                             // k
//!     .build()?;
//! match limiter.check("tenant-42") {
//!     Ok(grant) => println!("paid by bucket {}", grant.bucket()),
//!     Err(denied) => println!("retry in {:?}", denied.retry_after()),
//! }
//!
//! // In tests and simulations, time moves only when you say so.
//! let clock = ManualClock::new();
//! let sim = ShardedLimiter::builder()
//!     .quota(Quota::per_second(800))
//!     .buckets(8)
//!     .per_tenant(2)
//!     .clock(clock.clone())
//!     .build()?;
//! let tenant = sim.tenant("tenant-7"); // shard resolved once
//! let granted = (0..1000).filter(|_| tenant.check().is_ok()).count();
//! assert_eq!(granted, 200); // its 2 buckets of 100 tokens each
//! clock.advance(Duration::from_millis(10)); // 100/s per bucket: 1 token each
//! assert_eq!(tenant.remaining(), 2);
//! # Ok::<(), shuffle_limiter::ConfigError>(())
//! ```
//!
//! # The pieces
//! - [`Quota`]: the global budget; [`ShardedLimiter`] documents exactly how it
//!   is split over the buckets.
//! - [`Assignment`] and [`Shard`]: the specified tenant → buckets function
//!   (`docs/assignment.md` is the contract, with known-answer vectors).
//! - [`Limiter`], [`ShardedLimiter`], [`Tenant`], [`Grant`] (and its [`Payment`]s), [`Denied`]: the
//!   decision. A limiter is one core (the split, the assignment, the tenant
//!   cache) over one [`store`]: [`InProcess`](store::InProcess) atomics, or
//!   Redis. The decision itself is written once, as a pure function that
//!   every store applies atomically.
//! - Beyond one tenant, one shard: borrowing idle capacity from spill
//!   buckets above a reserve ([`Builder::borrow_from`]), weighted requests
//!   paid by several buckets together ([`Grant::payments`]), users isolated
//!   inside a tenant ([`Builder::per_user`], [`ShardedLimiter::check_nested`])
//!   and tiers with a larger k ([`Builder::tier`]).
//! - [`Sharder`]: the same assignment over anything else (worker addresses,
//!   queue names): a tenant's shard of them, a stable member per resource id,
//!   and where to retry when a member is sick.
//! - [`Clock`], [`MonotonicClock`], [`ManualClock`]: time.
//! - [`blast`]: the exact blast-radius math for choosing N and k
//!   ([`Limiter::blast_radius`] gives it for a built limiter); the
//!   `shuffle-lab` command, a package of its own, is built on it.
//!
//! # Integrations (cargo features)
//! Each works with every store: in process and over Redis alike.
//! - `tokio`: wait for a grant before calling a rate-limited upstream
//!   ([`Limiter::until_ready`] and the [`wait`] module).
//! - `tower`: a layer for axum and tower servers that answers 429 with
//!   `Retry-After` and the IETF `RateLimit` fields (the [`tower`] module).
//! - `serde`: one limiter per upstream, built from a TOML or JSON config
//!   (the [`set`] module).
//! - `metrics`: grant and denial counters per limiter and bucket through the
//!   `metrics` facade, and `tracing` events at debug and trace level (the
//!   [`metrics`] module).
//! - `redis`: one budget shared by many processes, with the bucket state in
//!   Redis, one round trip per decision and an explicit failure policy (the
//!   [`redis`] module).
//!
//! docs.rs shows every feature's items, each marked with the feature it
//! needs.
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![doc(html_root_url = "https://docs.rs/shuffle-limiter/0.1.0")]

mod assign;
pub mod blast;
mod clock;
mod draw;
mod error;
pub mod guide;
mod limiter;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
#[cfg(not(feature = "metrics"))]
#[path = "metrics_off.rs"]
mod metrics;
mod quota;
mod random;
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub mod redis;
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod set;
mod sharder;
pub mod store;
mod sync;
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub mod tower;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod wait;

pub use assign::{Assignment, MAX_BUCKETS, MAX_PER_TENANT, Shard};
pub use clock::{Clock, ManualClock, MonotonicClock};
pub use error::{ConfigError, InsufficientCapacity, RefundTooLarge};
pub use limiter::builder::{
    Builder, DEFAULT_BUCKETS, DEFAULT_LENDER_RESERVE, DEFAULT_PER_TENANT, DEFAULT_TENANT_CACHE,
};
pub use limiter::decision::{BucketState, DenialReason, Denied, Grant, Payment, Refunded};
pub use limiter::isolation::{Isolation, WEAK_ISOLATION_SHARDS};
pub use limiter::tenant::Tenant;
pub use limiter::tiers::MAX_TIERED_TENANTS;
pub use limiter::{Limiter, ShardedLimiter};
pub use quota::Quota;
pub use sharder::{RetryOrder, Sharder, SharderError};
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use wait::{Jitter, TokioClock};
