//! The in-flight layer: each request holds a permit of its tenant's pools
//! until the inner service has answered it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ::tower::{Layer, Service};
use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};

use super::inflight_future::InFlightFuture;
use super::key::{Found, MissingTenant, TenantKey};
use super::respond::{self, EmptyBody, Reason, Rejection, Respond};
use super::service::ceil_secs;
use crate::inflight::{AcquireOwned, InFlight, OwnedPermit, RejectReason, Rejected};
#[cfg(feature = "redis")]
use crate::inflight::{Lease, LeaseError, RedisInFlight};

/// Where the permits come from: a limit in this process, or leases of one
/// in Redis.
#[derive(Clone)]
pub(super) enum Pools {
    Local(Arc<InFlight>),
    #[cfg(feature = "redis")]
    Redis(RedisInFlight),
}

impl fmt::Debug for Pools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pools::Local(inflight) => inflight.fmt(f),
            #[cfg(feature = "redis")]
            Pools::Redis(inflight) => inflight.fmt(f),
        }
    }
}

/// A permit held for a request: of the limit in this process, or a lease.
pub(super) enum Held {
    Local(#[allow(dead_code)] OwnedPermit),
    #[cfg(feature = "redis")]
    Lease(#[allow(dead_code)] Lease),
}

/// Why a request got no permit.
pub(super) enum Refused {
    Rejected(Rejected),
    /// Redis could not decide, and its failure policy does not grant.
    #[cfg(feature = "redis")]
    Unavailable,
}

/// A wait for a permit.
pub(super) enum Acquiring {
    Local(AcquireOwned),
    #[cfg(feature = "redis")]
    Redis(Pin<Box<dyn Future<Output = Result<Lease, LeaseError>> + Send>>),
}

impl Acquiring {
    pub(super) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<Held, Refused>> {
        match self {
            Acquiring::Local(acquire) => Pin::new(acquire)
                .poll(cx)
                .map(|r| r.map(Held::Local).map_err(Refused::Rejected)),
            #[cfg(feature = "redis")]
            Acquiring::Redis(acquire) => acquire.as_mut().poll(cx).map(|r| match r {
                Ok(lease) => Ok(Held::Lease(lease)),
                Err(LeaseError::Rejected(rejected)) => Err(Refused::Rejected(rejected)),
                Err(_) => Err(Refused::Unavailable),
            }),
        }
    }
}

/// The settings every clone of the service shares.
pub(super) struct Config<R> {
    pub(super) pools: Pools,
    key: TenantKey,
    missing: MissingTenant,
    #[cfg(feature = "wait")]
    max_wait: Option<Duration>,
    retry_after: Duration,
    pub(super) respond: Arc<R>,
}

impl<R> Config<R> {
    /// The same settings with another hook.
    fn with_respond<R2>(&self, respond: Arc<R2>) -> Config<R2> {
        Config {
            pools: self.pools.clone(),
            key: self.key.clone(),
            missing: self.missing.clone(),
            #[cfg(feature = "wait")]
            max_wait: self.max_wait,
            retry_after: self.retry_after,
            respond,
        }
    }

    /// The answer to a request its tenant's pools refused, or that Redis
    /// could not decide: 503 with `Retry-After`, through the hook.
    pub(super) fn refused<B>(&self, refused: Refused) -> Response<B>
    where
        R: Respond<B>,
    {
        let retry_after = self.retry_after;
        let mut headers = HeaderMap::new();
        // Never 0: a client told "retry in 0 s" would come straight back.
        headers.insert(
            RETRY_AFTER,
            HeaderValue::from(ceil_secs(retry_after).max(1)),
        );
        let reason = match refused {
            Refused::Rejected(rejected) => Reason::InFlightFull {
                reason: rejected.reason(),
                retry_after,
            },
            #[cfg(feature = "redis")]
            Refused::Unavailable => Reason::StoreUnavailable { retry_after },
        };
        let status = StatusCode::SERVICE_UNAVAILABLE;
        respond::answer(&*self.respond, Rejection::new(reason, status, headers))
    }
}

/// A [`Layer`] that holds, for each request, a permit of its tenant's
/// in-flight pools ([`InFlight`]) until the inner service's response
/// future completes; see the [module documentation](super#in-flight-limits).
///
/// `R` builds the layer's own answers ([`respond_with`](InFlightLayer::respond_with));
/// by default they have an empty body.
pub struct InFlightLayer<R = EmptyBody> {
    config: Arc<Config<R>>,
}

impl<R> Clone for InFlightLayer<R> {
    fn clone(&self) -> Self {
        InFlightLayer {
            config: Arc::clone(&self.config),
        }
    }
}

impl<R> fmt::Debug for InFlightLayer<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        let mut s = f.debug_struct("InFlightLayer");
        s.field("pools", &c.pools)
            .field("key", &c.key)
            .field("missing", &c.missing);
        #[cfg(feature = "wait")]
        s.field("max_wait", &c.max_wait);
        s.field("retry_after", &c.retry_after)
            .finish_non_exhaustive()
    }
}

impl InFlightLayer {
    /// A layer taking a permit of `inflight` for the tenant `key` finds in
    /// each request; requests without one get a 400. A request waits in
    /// its pools' queues (at most `max_queue` callers each) as long as
    /// the limit's own `max_wait` allows (feature `wait`; no bound unless
    /// set), or [`max_wait`](InFlightLayer::max_wait) if given.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use axum::http::HeaderName;
    /// use shuffle_limiter::inflight::InFlight;
    /// use shuffle_limiter::tower::{InFlightLayer, TenantKey};
    ///
    /// let inflight = Arc::new(InFlight::builder().concurrency(40).build()?);
    /// let layer = InFlightLayer::new(
    ///     inflight.clone(),
    ///     TenantKey::header(HeaderName::from_static("x-tenant")),
    /// );
    /// assert!(Arc::ptr_eq(layer.inflight().unwrap(), &inflight));
    /// # Ok::<(), shuffle_limiter::inflight::BuildError>(())
    /// ```
    pub fn new(inflight: Arc<InFlight>, key: TenantKey) -> Self {
        Self::over(Pools::Local(inflight), key)
    }

    /// A layer taking, for each request, a lease of the in-flight limit in
    /// Redis `inflight` (feature `redis`), shared by every process of a
    /// fleet, and holding it until the inner service's response is ready.
    /// A request waits as [`RedisInFlight::acquire`] waits (its
    /// `LeaseOptions::max_wait`, else its builder's), or
    /// [`max_wait`](InFlightLayer::max_wait) if given; a refusal is answered 503 with [`Reason::InFlightFull`],
    /// and a Redis that cannot decide (when the failure policy does not
    /// grant) 503 with [`Reason::StoreUnavailable`], both with
    /// `Retry-After`.
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use axum::http::HeaderName;
    /// use shuffle_limiter::inflight::{InFlight, LeaseOptions};
    /// use shuffle_limiter::tower::{InFlightLayer, TenantKey};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let client = redis::Client::open("redis://127.0.0.1:6379")?;
    /// let connection = redis::aio::ConnectionManager::new(client).await?;
    /// let inflight = InFlight::builder()
    ///     .concurrency(40)
    ///     .build_redis(connection, LeaseOptions::new("partner", Duration::from_secs(30)))
    ///     .await?;
    /// let layer = InFlightLayer::redis(
    ///     inflight,
    ///     TenantKey::header(HeaderName::from_static("x-tenant")),
    /// );
    /// assert!(layer.inflight().is_none() && layer.redis_inflight().is_some());
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn redis(inflight: RedisInFlight, key: TenantKey) -> Self {
        Self::over(Pools::Redis(inflight), key)
    }

    fn over(pools: Pools, key: TenantKey) -> Self {
        InFlightLayer {
            config: Arc::new(Config {
                pools,
                key,
                missing: MissingTenant::default(),
                #[cfg(feature = "wait")]
                max_wait: None,
                retry_after: Duration::from_secs(1),
                respond: Arc::new(EmptyBody),
            }),
        }
    }
}

impl<R> InFlightLayer<R> {
    /// The shared in-flight limit, for a layer over one in this process.
    pub fn inflight(&self) -> Option<&Arc<InFlight>> {
        match &self.config.pools {
            Pools::Local(inflight) => Some(inflight),
            #[cfg(feature = "redis")]
            Pools::Redis(_) => None,
        }
    }

    /// The in-flight limit in Redis, for a layer made by
    /// [`redis`](InFlightLayer::redis).
    #[cfg(feature = "redis")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
    pub fn redis_inflight(&self) -> Option<&RedisInFlight> {
        match &self.config.pools {
            Pools::Redis(inflight) => Some(inflight),
            Pools::Local(_) => None,
        }
    }

    /// Waits at most `max_wait` (on tokio's timer) for a permit, then
    /// answers 503, whatever the limit's own `max_wait`; `Duration::ZERO`
    /// waits for none.
    #[cfg(feature = "wait")]
    #[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
    pub fn max_wait(self, max_wait: Duration) -> Self {
        self.with_config(|c| c.max_wait = Some(max_wait))
    }

    /// What to do with a request without a tenant, as
    /// [`RateLimitLayer::on_missing_tenant`](super::RateLimitLayer::on_missing_tenant).
    pub fn on_missing_tenant(self, missing: MissingTenant) -> Self {
        self.with_config(|c| c.missing = missing)
    }

    /// The `Retry-After` of a 503 (1 s unless set; whole seconds, rounded
    /// up, never 0): a hint, since nobody knows when a held call ends.
    pub fn retry_after(self, retry_after: Duration) -> Self {
        self.with_config(|c| c.retry_after = retry_after)
    }

    /// Builds the layer's own answers (400, 401, 500, 503) with `respond`,
    /// a [`Respond`] hook, as [`RateLimitLayer::respond_with`](super::RateLimitLayer::respond_with).
    pub fn respond_with<R2>(self, respond: R2) -> InFlightLayer<R2> {
        InFlightLayer {
            config: Arc::new(self.config.with_respond(Arc::new(respond))),
        }
    }

    fn with_config(self, change: impl FnOnce(&mut Config<R>)) -> Self {
        let mut config = self.config.with_respond(Arc::clone(&self.config.respond));
        change(&mut config);
        InFlightLayer {
            config: Arc::new(config),
        }
    }
}

impl<I, R> Layer<I> for InFlightLayer<R> {
    type Service = InFlightLimit<I, R>;

    fn layer(&self, inner: I) -> Self::Service {
        InFlightLimit {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}

/// The service made by [`InFlightLayer`]: takes a permit of the request's
/// tenant, then calls the inner service, or answers the request itself.
pub struct InFlightLimit<I, R = EmptyBody> {
    inner: I,
    config: Arc<Config<R>>,
}

impl<I: Clone, R> Clone for InFlightLimit<I, R> {
    fn clone(&self) -> Self {
        InFlightLimit {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<I: fmt::Debug, R> fmt::Debug for InFlightLimit<I, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightLimit")
            .field("inner", &self.inner)
            .field("pools", &self.config.pools)
            .finish_non_exhaustive()
    }
}

/// What a tenant's pools said at call time.
enum Start {
    Held(Held),
    Wait(Acquiring),
    Refused(Refused),
}

impl<R> Config<R> {
    // Without `redis` the pools are only ever local.
    #[cfg_attr(not(feature = "redis"), allow(clippy::infallible_destructuring_match))]
    fn start(&self, tenant: &[u8]) -> Start {
        let inflight = match &self.pools {
            Pools::Local(inflight) => inflight,
            #[cfg(feature = "redis")]
            Pools::Redis(inflight) => {
                // Over Redis every acquire is a round trip: always a wait.
                #[cfg(feature = "wait")]
                let max_wait = self.max_wait;
                #[cfg(not(feature = "wait"))]
                let max_wait: Option<Duration> = None;
                let acquire = match max_wait {
                    Some(max_wait) => Box::pin(inflight.acquire_within(tenant, max_wait)) as _,
                    None => Box::pin(inflight.acquire(tenant)) as _,
                };
                return Start::Wait(Acquiring::Redis(acquire));
            }
        };
        match inflight.try_acquire_owned(tenant) {
            Ok(permit) => Start::Held(Held::Local(permit)),
            Err(busy) if busy.reason() == RejectReason::Busy => {
                let acquire = inflight.acquire_owned(tenant);
                #[cfg(feature = "wait")]
                let acquire = match self.max_wait {
                    Some(max_wait) => acquire.within(max_wait),
                    None => acquire,
                };
                Start::Wait(Acquiring::Local(acquire))
            }
            Err(refused) => Start::Refused(Refused::Rejected(refused)),
        }
    }
}

impl<I, R, ReqBody, ResBody> Service<Request<ReqBody>> for InFlightLimit<I, R>
where
    I: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    R: Respond<ResBody>,
{
    type Response = Response<ResBody>;
    type Error = I::Error;
    type Future = InFlightFuture<I, R, ReqBody, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Only the inner service: a tenant whose pools are full never
        // holds up another's request.
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let config = &self.config;
        let answer = |reason, status, headers| {
            let rejection = Rejection::new(reason, status, headers);
            InFlightFuture::answer(respond::answer(&*config.respond, rejection))
        };
        let start = match config.key.find(&parts, |tenant| config.start(tenant)) {
            Found::Tenant(start) => start,
            Found::Exempt => {
                let request = Request::from_parts(parts, body);
                return InFlightFuture::called(self.inner.call(request), None);
            }
            Found::NoPeer(err) => {
                let status = StatusCode::INTERNAL_SERVER_ERROR;
                return answer(Reason::NoPeerAddress(err), status, HeaderMap::new());
            }
            Found::Missing => match config.missing.resolve() {
                Ok(tenant) => config.start(tenant),
                Err((status, headers)) => return answer(Reason::MissingTenant, status, headers),
            },
        };
        let request = Request::from_parts(parts, body);
        match start {
            // The service poll_ready made ready serves the request now.
            Start::Held(permit) => InFlightFuture::called(self.inner.call(request), Some(permit)),
            Start::Refused(rejected) => InFlightFuture::answer(config.refused(rejected)),
            Start::Wait(acquire) => {
                // The wait takes a clone that is not ready, and readies it
                // once the permit is held: a ready service can be a
                // reservation (`ConcurrencyLimit`, `Buffer`), and a tenant
                // waiting for its pools must not hold one that another
                // tenant's request needs. This service stays ready.
                let inner = self.inner.clone();
                InFlightFuture::waiting(acquire, inner, request, Arc::clone(config))
            }
        }
    }
}
