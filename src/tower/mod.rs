//! A tower layer for servers (feature `tower`): one limiter for every
//! request, keyed by tenant, answering 429 with the standard fields (and
//! 503 when the limiter's store cannot decide); and one that bounds the
//! requests in flight per tenant ([`InFlightLayer`], 503 when full). For the client side, around
//! calls to a rate-limited upstream, see [`UpstreamLayer`] (feature `wait`
//! too).
//!
//! [`RateLimitLayer`] takes the tenant of each request from a
//! [`TenantKey`] (a header, a request extension set by an authentication
//! layer, or any function of the request head) and asks the shared limiter —
//! a [`ShardedLimiter`](crate::ShardedLimiter) in process, or a `RedisLimiter`
//! shared by a fleet — when the request is called. `poll_ready` only forwards
//! to the inner service, so a denial never holds up other tenants, and the
//! service is `Clone`, every clone sharing one limiter through an `Arc`. The
//! inner service must be `Clone` too (axum's `Router` is): the request waits
//! for the limiter's answer, which over Redis is a round trip, with the clone
//! that was made ready.
//!
//! A denied request gets `429 Too Many Requests` with an empty body and
//! - `Retry-After`: whole seconds, rounded up, never 0;
//! - `RateLimit-Policy: "tenant";q=Q;w=W` and `RateLimit: "tenant";r=0;t=T`,
//!   in the syntax of draft-ietf-httpapi-ratelimit-headers-10 (described
//!   below).
//!
//! A granted request reaches the inner service with its [`Grant`](crate::Grant) in the
//! request extensions, as a [`Granted`] (read by any clone, taken once), and its response carries the same two fields, with
//! `r` the tokens the tenant has left. A request without a tenant key is
//! answered as [`MissingTenant`] says: 400 by default, 401, or charged to a
//! shared fallback tenant; never a panic.
//!
//! # In-flight limits
//! [`InFlightLayer`] bounds the requests *in flight* per tenant instead of
//! their rate: each request takes a permit of its tenant's pools of an
//! [`InFlight`](crate::inflight::InFlight) limit, keyed by the same
//! [`TenantKey`], and holds it until the inner service's response future
//! completes, so that a tenant whose requests hang holds its k pools and
//! nothing else. A request finding no free permit waits in its pools'
//! queues, bounded by the limit's `max_queue` and, with the `wait`
//! feature, by `InFlightLayer::max_wait`; past either it gets
//! `503 Service Unavailable` with `Retry-After` (whole seconds, at least 1;
//! [`InFlightLayer::retry_after`]) and an empty body, or what the
//! [`Respond`] hook builds for [`Reason::InFlightFull`]. As for
//! [`RateLimitLayer`], `poll_ready` only forwards to the inner service.
//! With the `redis` feature, [`InFlightLayer::redis`] takes leases of an
//! in-flight limit in Redis instead (a `RedisInFlight`, shared by a fleet):
//! every request then waits for its lease's round trip, and a Redis that
//! cannot decide, when the failure policy does not grant, is answered 503
//! with [`Reason::StoreUnavailable`].
//!
//! The permit is given back when the response *head* is ready: a streaming
//! body (server-sent events, a large download) is not covered while it
//! streams. Put the layer inside [`RateLimitLayer`] (added before it, so
//! it runs after), so that a request over its rate never takes a permit:
//!
//! ```
//! use std::sync::Arc;
//! use axum::{Router, body::Body, http::{HeaderName, Request, StatusCode}, routing::get};
//! use shuffle_limiter::{Quota, ShardedLimiter, inflight::InFlight};
//! use shuffle_limiter::tower::{InFlightLayer, RateLimitLayer, TenantKey};
//! use tower::ServiceExt;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let tenant = TenantKey::header(HeaderName::from_static("x-tenant"));
//! let limiter = Arc::new(ShardedLimiter::builder().quota(Quota::per_second(100)).build()?);
//! let inflight = Arc::new(InFlight::builder().concurrency(40).pools(8).per_tenant(2).build()?);
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(InFlightLayer::new(inflight.clone(), tenant.clone()))
//!     .layer(RateLimitLayer::new(limiter, tenant)); // outermost: runs first
//! let request = Request::get("/").header("x-tenant", "acme").body(Body::empty())?;
//! assert_eq!(app.oneshot(request).await?.status(), StatusCode::OK);
//! assert_eq!(inflight.available(), 40); // given back with the response
//! # Ok(())
//! # }
//! ```
//!
//! # Keys
//! - [`TenantKey::header`], [`TenantKey::extension`], [`TenantKey::from_fn`]
//!   (an owned id), [`TenantKey::borrowed`] (bytes borrowed from the request:
//!   no allocation), [`TenantKey::decide`] (a [`RequestKey`]: a tenant,
//!   [exempt](RequestKey::Exempt), or missing);
//! - [`TenantKey::client_ip`] with a [`ClientIp`]: the peer address (axum's
//!   `ConnectInfo<SocketAddr>`), or the client behind [trusted
//!   proxies](ClientIp::trust_proxies) in the one [`ProxyHeader`] they
//!   write (any other is the client's and ignored), IPv6 grouped by /64;
//! - [`TenantKey::exempt_if`] adds an allow-list to any of them, and
//!   [`RateLimitLayer::methods`] limits only some methods.
//!
//! An exempt request (or one whose method is not limited) reaches the inner
//! service untouched: nothing is taken, no `RateLimit` field is sent.
//!
//! # The layer's own answers
//! 400, 401, 429, 500 when a [`ClientIp`] key finds no peer address
//! ([`NoPeerAddress`], which says to serve with
//! `into_make_service_with_connect_info`), and 503 with `Retry-After` when
//! the limiter's store could not decide and its failure policy denied (a
//! Redis outage is the service's fault, not a rate limit the client should
//! read as its own), have an empty body unless
//! [`RateLimitLayer::respond_with`] gives a [`Respond`] hook: any
//! `Fn(Rejection) -> Response<B>`, such as a JSON body or a gRPC
//! `RESOURCE_EXHAUSTED` (both shown at [`Respond`]).
//!
//! # Stacking layers
//! Two layers (say per IP outside, per API key inside) each send their own
//! `RateLimit` and `RateLimit-Policy` field, appended, never replaced; give
//! them distinct [policy names](RateLimitLayer::policy) (`"ip"`, `"key"`),
//! or a client sees two fields both named `"tenant"` and cannot tell them
//! apart. A request one layer finds [exempt](RequestKey::Exempt) gets only
//! the other layer's field.
//!
//! When the inner layer denies a request, the outer layer's token for it is
//! **not** given back, and its field on the 429 shows it spent: the outer
//! layer counts the attempt, as it counts any request its inner service
//! answers. So put outside the layer whose spending on a request the inner
//! one denies is acceptable: per IP outside per key counts a client's
//! attempts with a spent key against its address, which is usually wanted.
//! A handler that wants to give a token back for a request that did no work
//! [takes](Granted::take) the [`Grant`](crate::Grant) from the request
//! extensions' [`Granted`] and refunds it to the limiter that granted it.
//!
//! ```
//! use std::{net::SocketAddr, sync::Arc};
//! use axum::{Router, extract::ConnectInfo, routing::get};
//! use shuffle_limiter::{Quota, ShardedLimiter};
//! use shuffle_limiter::tower::{ClientIp, ProxyHeader, RateLimitLayer, TenantKey};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let per_ip = Arc::new(ShardedLimiter::builder().quota(Quota::per_second(100)).build()?);
//! let per_key = Arc::new(ShardedLimiter::builder().quota(Quota::per_second(1000)).build()?);
//! // Behind a load balancer in 10.0.0.0/8; allow-list the office.
//! let ip = ClientIp::peer(|c: &ConnectInfo<SocketAddr>| c.0)
//!     .trust_proxies(ProxyHeader::XForwardedFor, ["10.0.0.0/8".parse()?]);
//! let office = "203.0.113.0/24".parse::<shuffle_limiter::tower::Cidr>()?;
//! let by_ip = TenantKey::client_ip(ip.clone())
//!     .exempt_if(move |parts| ip.resolve(parts).is_ok_and(|addr| office.contains(addr)));
//! let by_key = TenantKey::borrowed(|parts| {
//!     parts.headers.get("authorization")?.as_bytes().strip_prefix(b"Bearer ")
//! });
//! let app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(per_key, by_key).policy("key")?)
//!     .layer(RateLimitLayer::new(per_ip, by_ip).policy("ip")?); // outermost: runs first
//! // axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
//! # let _ = app;
//! # Ok(())
//! # }
//! ```
//!
//! # The RateLimit fields
//! They describe the tenant's own share, not the global budget, because that
//! is what the client can use:
//! - `q`: the tokens the tenant's k buckets hold when full (its burst);
//! - `w`: the seconds those buckets take to refill from empty, rounded up
//!   (so `q/w` never overstates the tenant's rate);
//! - `r`: the tokens the tenant could take right now;
//! - `t`: on a grant, the seconds until the tenant's buckets are full again;
//!   on a denial, the seconds until the next token, equal to `Retry-After`
//!   (the draft asks that `Retry-After` never point earlier than `t`).
//!
//! The policy is named `"tenant"` unless [`RateLimitLayer::policy`] says
//! otherwise. No partition key (`pk`) is sent, so tenant ids are not echoed.
//!
//! # In an axum/tower server
//! ```
//! use std::sync::Arc;
//! use axum::{Router, body::Body, http::{HeaderName, Request, StatusCode}, routing::get};
//! use shuffle_limiter::{Quota, ShardedLimiter, tower::{RateLimitLayer, TenantKey}};
//! use tower::Service;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let limiter = Arc::new(
//!     ShardedLimiter::builder()
//!         .quota(Quota::per_second(10).with_burst(10))
//!         .buckets(8)
//!         .per_tenant(2)
//!         .build()?,
//! );
//! let tenant = TenantKey::header(HeaderName::from_static("x-tenant-id"));
//! let mut app: Router = Router::new()
//!     .route("/", get(|| async { "hello" }))
//!     .layer(RateLimitLayer::new(limiter, tenant));
//! // Serve it with axum::serve(listener, app); here we call it directly.
//!
//! let request = || Request::get("/").header("x-tenant-id", "acme").body(Body::empty());
//! let mut statuses = Vec::new();
//! for _ in 0..5 {
//!     statuses.push(app.call(request()?).await?.status());
//! }
//! assert_eq!(statuses[0], StatusCode::OK);
//! assert_eq!(statuses[4], StatusCode::TOO_MANY_REQUESTS); // a tenant holds at most 4
//! let denied = app.call(request()?).await?;
//! assert!(denied.headers().contains_key("retry-after"));
//! assert!(denied.headers()["ratelimit"].to_str()?.starts_with("\"tenant\";r=0;t="));
//! # Ok(())
//! # }
//! ```

use http::HeaderName;

mod cidr;
#[cfg(feature = "wait")]
mod client;
mod future;
mod granted;
mod inflight;
mod inflight_future;
mod ip;
mod key;
mod layer;
mod respond;
mod service;

pub use cidr::{Cidr, InvalidCidr};
#[cfg(feature = "wait")]
#[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
pub use client::{UpstreamError, UpstreamLayer, UpstreamService};
pub use future::ResponseFuture;
pub use granted::Granted;
pub use inflight::{InFlightLayer, InFlightLimit};
pub use inflight_future::InFlightFuture;
pub use ip::{ClientIp, InvalidPrefix, NoPeerAddress, ProxyHeader};
pub use key::{MissingTenant, RequestKey, TenantKey};
pub use layer::{InvalidPolicyName, RateLimitLayer};
pub use respond::{EmptyBody, Reason, Rejection, Respond};
pub use service::RateLimit;

/// The `RateLimit` field of draft-ietf-httpapi-ratelimit-headers.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The `RateLimit-Policy` field of draft-ietf-httpapi-ratelimit-headers.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");
