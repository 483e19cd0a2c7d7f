//! A tower layer for servers (feature `tower`): one limiter for every
//! request, keyed by tenant, answering 429 with the standard fields.
//!
//! [`RateLimitLayer`] takes the tenant of each request from a
//! [`TenantKey`] (a header, a request extension set by an authentication
//! layer, or any function of the request head) and asks the shared limiter at
//! call time. `poll_ready` only forwards to the inner service, so a denial
//! never holds up other tenants, and the service is `Clone`, every clone
//! sharing one limiter through an `Arc`.
//!
//! A denied request gets `429 Too Many Requests` with an empty body and
//! - `Retry-After`: whole seconds, rounded up, never 0;
//! - `RateLimit-Policy: "tenant";q=Q;w=W` and `RateLimit: "tenant";r=0;t=T`,
//!   in the syntax of draft-ietf-httpapi-ratelimit-headers-10 (described
//!   below).
//!
//! A granted request reaches the inner service with its [`Grant`] in the
//! request extensions, and its response carries the same two fields, with
//! `r` the tokens the tenant has left. A request without a tenant key is
//! answered as [`MissingTenant`] says: 400 by default, 401, or charged to a
//! shared fallback tenant; never a panic.
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

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use ::tower::{Layer, Service};
use http::header::{RETRY_AFTER, WWW_AUTHENTICATE};
use http::request::Parts;
use http::{Extensions, HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;

use crate::clock::{Clock, MonotonicClock};
use crate::limiter::{Grant, ShardedLimiter};

/// The `RateLimit` field of draft-ietf-httpapi-ratelimit-headers.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The `RateLimit-Policy` field of draft-ietf-httpapi-ratelimit-headers.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// Where a request's tenant id comes from.
///
/// ```
/// use axum::http::{HeaderName, request::Parts};
/// use shuffle_limiter::tower::TenantKey;
///
/// // A header sent by the client (an empty value counts as missing):
/// let by_header = TenantKey::header(HeaderName::from_static("x-tenant-id"));
///
/// // A value that an authentication layer put in the request extensions:
/// #[derive(Clone)]
/// struct TenantId(String);
/// impl AsRef<[u8]> for TenantId {
///     fn as_ref(&self) -> &[u8] { self.0.as_bytes() }
/// }
/// let by_auth = TenantKey::extension::<TenantId>();
///
/// // Anything else: the first path segment, say.
/// let by_path = TenantKey::from_fn(|parts: &Parts| {
///     parts.uri.path().split('/').nth(1).filter(|s| !s.is_empty()).map(str::to_owned)
/// });
/// # let _ = (by_header, by_auth, by_path);
/// ```
#[derive(Clone)]
pub struct TenantKey(Source);

type ExtensionFn = for<'a> fn(&'a Extensions) -> Option<&'a [u8]>;
type CustomFn = dyn Fn(&Parts, &mut dyn FnMut(&[u8])) + Send + Sync;

#[derive(Clone)]
enum Source {
    Header(HeaderName),
    Extension(ExtensionFn, &'static str),
    Custom(Arc<CustomFn>),
}

impl TenantKey {
    /// The value of the header `name`; a request without it, or with an
    /// empty value, has no tenant.
    pub fn header(name: HeaderName) -> Self {
        TenantKey(Source::Header(name))
    }

    /// The value of type `T` in the request extensions, as an authentication
    /// layer placed in front of this one would leave it.
    pub fn extension<T: AsRef<[u8]> + Send + Sync + 'static>() -> Self {
        fn get<T: AsRef<[u8]> + Send + Sync + 'static>(ext: &Extensions) -> Option<&[u8]> {
            ext.get::<T>().map(AsRef::as_ref)
        }
        TenantKey(Source::Extension(get::<T>, std::any::type_name::<T>()))
    }

    /// Any function of the request head; `None` means the request has no
    /// tenant.
    pub fn from_fn<F, K>(f: F) -> Self
    where
        F: Fn(&Parts) -> Option<K> + Send + Sync + 'static,
        K: AsRef<[u8]>,
    {
        TenantKey(Source::Custom(Arc::new(move |parts, sink| {
            if let Some(key) = f(parts) {
                sink(key.as_ref());
            }
        })))
    }

    /// Runs `decide` on the request's tenant id, if it has one.
    fn with_key<R>(&self, parts: &Parts, decide: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let key = match &self.0 {
            Source::Header(name) => parts.headers.get(name).map(HeaderValue::as_bytes),
            Source::Extension(get, _) => get(&parts.extensions),
            Source::Custom(f) => {
                let mut decide = Some(decide);
                let mut out = None;
                f(parts, &mut |key| {
                    if let Some(decide) = decide.take().filter(|_| !key.is_empty()) {
                        out = Some(decide(key));
                    }
                });
                return out;
            }
        };
        key.filter(|k| !k.is_empty()).map(decide)
    }
}

impl fmt::Debug for TenantKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Source::Header(name) => f.debug_tuple("Header").field(name).finish(),
            Source::Extension(_, ty) => f.debug_tuple("Extension").field(ty).finish(),
            Source::Custom(_) => f.write_str("Custom(..)"),
        }
    }
}

/// What to do with a request whose [`TenantKey`] finds no tenant.
///
/// ```
/// use axum::http::HeaderValue;
/// use shuffle_limiter::tower::MissingTenant;
///
/// let reject = MissingTenant::bad_request(); // the default: 400
/// let login = MissingTenant::unauthorized(HeaderValue::from_static("Bearer"));
/// let shared = MissingTenant::fallback("anonymous"); // all such requests share one tenant
/// # let _ = (reject, login, shared);
/// ```
#[derive(Debug, Clone, Default)]
pub struct MissingTenant(Missing);

#[derive(Debug, Clone, Default)]
enum Missing {
    #[default]
    BadRequest,
    Unauthorized(HeaderValue),
    Fallback(Arc<[u8]>),
}

impl MissingTenant {
    /// Answer `400 Bad Request` (the default).
    pub fn bad_request() -> Self {
        MissingTenant(Missing::BadRequest)
    }

    /// Answer `401 Unauthorized` with `WWW-Authenticate: challenge`, which a
    /// 401 must carry (for example `Bearer`).
    pub fn unauthorized(challenge: HeaderValue) -> Self {
        MissingTenant(Missing::Unauthorized(challenge))
    }

    /// Treat the request as coming from `tenant`, a key shared by all
    /// requests without one (they compete for that tenant's share only).
    pub fn fallback(tenant: impl AsRef<[u8]>) -> Self {
        MissingTenant(Missing::Fallback(tenant.as_ref().into()))
    }
}

/// A policy name that cannot be sent as a Structured Field String.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPolicyName {
    name: String,
}

impl fmt::Display for InvalidPolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "policy name {:?} cannot be sent in a RateLimit field: use printable ASCII \
             (space to '~'), for example \"tenant\"",
            self.name
        )
    }
}

impl std::error::Error for InvalidPolicyName {}

/// The settings every clone of the service shares.
struct Config<C> {
    limiter: Arc<ShardedLimiter<C>>,
    key: TenantKey,
    missing: MissingTenant,
    /// The policy name as a Structured Field String, quotes included.
    policy: String,
}

/// A [`Layer`] that rate-limits each request by tenant with a shared
/// [`ShardedLimiter`]; see the [module documentation](self).
pub struct RateLimitLayer<C = MonotonicClock> {
    config: Arc<Config<C>>,
}

impl<C> Clone for RateLimitLayer<C> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            config: Arc::clone(&self.config),
        }
    }
}

impl<C> fmt::Debug for RateLimitLayer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        f.debug_struct("RateLimitLayer")
            .field("limiter", &c.limiter)
            .field("key", &c.key)
            .field("missing", &c.missing)
            .field("policy", &c.policy)
            .finish()
    }
}

impl<C: Clock> RateLimitLayer<C> {
    /// A layer asking `limiter` about the tenant that `key` finds in each
    /// request; requests without one get a 400.
    pub fn new(limiter: Arc<ShardedLimiter<C>>, key: TenantKey) -> Self {
        RateLimitLayer {
            config: Arc::new(Config {
                limiter,
                key,
                missing: MissingTenant::default(),
                policy: "\"tenant\"".to_owned(),
            }),
        }
    }

    /// What to do with a request without a tenant.
    pub fn on_missing_tenant(self, missing: MissingTenant) -> Self {
        self.with_config(|c| c.missing = missing)
    }

    /// The name of the policy in the `RateLimit` and `RateLimit-Policy`
    /// fields (default `"tenant"`).
    ///
    /// # Errors
    /// [`InvalidPolicyName`] unless the name is printable ASCII, as a
    /// Structured Field String must be.
    pub fn policy(self, name: &str) -> Result<Self, InvalidPolicyName> {
        if !name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(InvalidPolicyName {
                name: name.to_owned(),
            });
        }
        let mut quoted = String::with_capacity(name.len() + 2);
        quoted.push('"');
        for c in name.chars() {
            if c == '"' || c == '\\' {
                quoted.push('\\');
            }
            quoted.push(c);
        }
        quoted.push('"');
        Ok(self.with_config(|c| c.policy = quoted))
    }

    /// The shared limiter.
    pub fn limiter(&self) -> &Arc<ShardedLimiter<C>> {
        &self.config.limiter
    }

    fn with_config(self, change: impl FnOnce(&mut Config<C>)) -> Self {
        let c = &self.config;
        let mut config = Config {
            limiter: Arc::clone(&c.limiter),
            key: c.key.clone(),
            missing: c.missing.clone(),
            policy: c.policy.clone(),
        };
        change(&mut config);
        RateLimitLayer {
            config: Arc::new(config),
        }
    }
}

impl<S, C> Layer<S> for RateLimitLayer<C> {
    type Service = RateLimit<S, C>;

    fn layer(&self, inner: S) -> Self::Service {
        RateLimit {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}

/// The service made by [`RateLimitLayer`]: asks the limiter in `call` and
/// either forwards the request or answers it.
pub struct RateLimit<S, C = MonotonicClock> {
    inner: S,
    config: Arc<Config<C>>,
}

impl<S: Clone, C> Clone for RateLimit<S, C> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, C> fmt::Debug for RateLimit<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("limiter", &self.config.limiter)
            .finish_non_exhaustive()
    }
}

/// The outcome of asking the limiter for one request.
enum Verdict {
    Granted(Grant, Fields),
    Denied(Fields, u64),
}

/// The `RateLimit-Policy` and `RateLimit` values of one decision.
struct Fields {
    policy: Option<HeaderValue>,
    limit: Option<HeaderValue>,
}

impl Fields {
    fn append_to(self, headers: &mut HeaderMap) {
        if let Some(policy) = self.policy {
            headers.append(RATELIMIT_POLICY, policy);
        }
        if let Some(limit) = self.limit {
            headers.append(RATELIMIT, limit);
        }
    }
}

/// Whole seconds, rounded up.
fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

impl<C: Clock> Config<C> {
    fn decide(&self, key: &[u8]) -> Verdict {
        let limiter = &*self.limiter;
        let tenant = limiter.tenant(key);
        let shard = tenant.shard();
        let bursts = shard
            .buckets()
            .iter()
            .filter_map(|&b| limiter.bucket_burst(b));
        let quota: u64 = bursts.clone().map(u64::from).sum();
        let refill = limiter
            .bucket_interval()
            .saturating_mul(bursts.max().unwrap_or(1));
        let policy = format!("{};q={quota};w={}", self.policy, ceil_secs(refill).max(1));
        let (outcome, remaining, reset) = match tenant.check() {
            Ok(grant) => {
                let reset = ceil_secs(limiter.full_in(key));
                (Ok(grant), grant.remaining(), reset)
            }
            Err(denied) => {
                // Never 0: a client told "retry in 0 s" would come straight back.
                let retry = ceil_secs(denied.retry_after()).max(1);
                (Err(retry), 0, retry)
            }
        };
        let fields = Fields {
            policy: HeaderValue::try_from(policy).ok(),
            limit: HeaderValue::try_from(format!("{};r={remaining};t={reset}", self.policy)).ok(),
        };
        match outcome {
            Ok(grant) => Verdict::Granted(grant, fields),
            Err(retry) => Verdict::Denied(fields, retry),
        }
    }
}

impl<S, C, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<S, C>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
    C: Clock,
    ResBody: Default,
{
    type Response = Response<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (mut parts, body) = request.into_parts();
        let config = &*self.config;
        let verdict = match config.key.with_key(&parts, |key| config.decide(key)) {
            Some(verdict) => verdict,
            None => match &config.missing.0 {
                Missing::Fallback(tenant) => config.decide(tenant),
                Missing::BadRequest => {
                    return ResponseFuture::answer(StatusCode::BAD_REQUEST, HeaderMap::new());
                }
                Missing::Unauthorized(challenge) => {
                    let mut headers = HeaderMap::new();
                    headers.insert(WWW_AUTHENTICATE, challenge.clone());
                    return ResponseFuture::answer(StatusCode::UNAUTHORIZED, headers);
                }
            },
        };
        match verdict {
            Verdict::Granted(grant, fields) => {
                parts.extensions.insert(grant);
                ResponseFuture {
                    state: State::Called {
                        future: self.inner.call(Request::from_parts(parts, body)),
                        fields: Some(fields),
                    },
                }
            }
            Verdict::Denied(fields, retry_secs) => {
                let mut headers = HeaderMap::new();
                headers.insert(RETRY_AFTER, HeaderValue::from(retry_secs));
                fields.append_to(&mut headers);
                ResponseFuture::answer(StatusCode::TOO_MANY_REQUESTS, headers)
            }
        }
    }
}

pin_project! {
    /// The response future of [`RateLimit`]: the inner service's response
    /// with the `RateLimit` fields added, or the limiter's own answer.
    pub struct ResponseFuture<F, B> {
        #[pin]
        state: State<F, B>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, B> {
        Called {
            #[pin]
            future: F,
            fields: Option<Fields>,
        },
        Answered {
            response: Option<Response<B>>,
        },
    }
}

impl<F, B: Default> ResponseFuture<F, B> {
    fn answer(status: StatusCode, headers: HeaderMap) -> Self {
        let mut response = Response::new(B::default());
        *response.status_mut() = status;
        *response.headers_mut() = headers;
        ResponseFuture {
            state: State::Answered {
                response: Some(response),
            },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Called { future, fields } => {
                let mut response = ready!(future.poll(cx))?;
                if let Some(fields) = fields.take() {
                    fields.append_to(response.headers_mut());
                }
                Poll::Ready(Ok(response))
            }
            StateProj::Answered { response } => Poll::Ready(Ok(response
                .take()
                .expect("ResponseFuture polled after it completed"))),
        }
    }
}

impl<F, B> fmt::Debug for ResponseFuture<F, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
