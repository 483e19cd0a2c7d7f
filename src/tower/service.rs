//! The service: finds the tenant, asks the store, and hands the answer to
//! the response future.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ::tower::Service;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};

use super::future::ResponseFuture;
use super::key::Found;
use super::layer::Config;
use super::respond::{self, Reason, Rejection, Respond};
use crate::store::{InProcess, Store};
use crate::{Request as Asked, Shard};

/// The service made by [`RateLimitLayer`](super::RateLimitLayer): asks the
/// limiter for each request and either forwards it or answers it.
pub struct RateLimit<I, S = InProcess, R = super::EmptyBody> {
    pub(super) inner: I,
    pub(super) config: Arc<Config<S, R>>,
}

impl<I: Clone, S, R> Clone for RateLimit<I, S, R> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<I: fmt::Debug, S, R> fmt::Debug for RateLimit<I, S, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit")
            .field("inner", &self.inner)
            .field("limiter", &self.config.limiter.name())
            .finish_non_exhaustive()
    }
}

/// Whole seconds, rounded up.
pub(super) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

impl<S: Store, R> Config<S, R> {
    /// The `RateLimit-Policy` value for a tenant on `shard`: what its own
    /// buckets hold when full, and how long they take to refill from empty.
    pub(super) fn policy_field(&self, shard: &Shard) -> Option<HeaderValue> {
        let limiter = &*self.limiter;
        let bursts = shard
            .buckets()
            .iter()
            .filter_map(|&b| limiter.bucket_burst(b));
        let quota: u64 = bursts.clone().map(u64::from).sum();
        let refill = limiter
            .bucket_interval()
            .saturating_mul(bursts.max().unwrap_or(1));
        let value = format!("{};q={quota};w={}", self.policy, ceil_secs(refill).max(1));
        HeaderValue::try_from(value).ok()
    }

    /// The `RateLimit` value: tokens left and seconds until `t`.
    pub(super) fn limit_field(&self, remaining: u64, reset_secs: u64) -> Option<HeaderValue> {
        HeaderValue::try_from(format!("{};r={remaining};t={reset_secs}", self.policy)).ok()
    }
}

impl<I, S, R, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<I, S, R>
where
    I: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    S: Store,
    R: Respond<ResBody>,
{
    type Response = Response<ResBody>;
    type Error = I::Error;
    type Future = ResponseFuture<I, S, R, ReqBody, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let config = &self.config;
        let limiter = &config.limiter;
        // The clone that poll_ready made ready goes with the request; this
        // service keeps a fresh one for the next poll_ready.
        let take_inner = |inner: &mut I| {
            let clone = inner.clone();
            std::mem::replace(inner, clone)
        };
        let limited = config
            .methods
            .as_ref()
            .is_none_or(|methods| methods.contains(&parts.method));
        if !limited {
            return ResponseFuture::called(self.inner.call(Request::from_parts(parts, body)));
        }
        // The decision is applied where the tenant (and user) are known, so
        // that it resolves their shard under the N it is made with.
        let decide = |tenant: &[u8]| {
            // Through a handle, as any caller: the shard (for the policy
            // field) resolved once, and the check on it.
            let apply = |asked: Asked<'_>| {
                let handle = limiter.handle(asked);
                (handle.shard(), handle.pending())
            };
            let user = config
                .user
                .as_ref()
                .map(|user| user.find(&parts, |user| apply(Asked::tenant(tenant).user(user))));
            match user {
                Some(Found::Tenant(decided)) => decided,
                _ => apply(Asked::tenant(tenant)),
            }
        };
        let answer = |reason, status, headers| {
            let rejection = Rejection::new(reason, status, headers);
            ResponseFuture::answer(respond::answer(&*config.respond, rejection))
        };
        let (shard, pending) = match config.key.find(&parts, decide) {
            Found::Tenant(decided) => decided,
            Found::Exempt => {
                let request = Request::from_parts(parts, body);
                return ResponseFuture::called(self.inner.call(request));
            }
            Found::NoPeer(err) => {
                let status = StatusCode::INTERNAL_SERVER_ERROR;
                return answer(Reason::NoPeerAddress(err), status, HeaderMap::new());
            }
            Found::Missing => match config.missing.resolve() {
                Ok(tenant) => decide(tenant),
                Err((status, headers)) => return answer(Reason::MissingTenant, status, headers),
            },
        };
        let inner = take_inner(&mut self.inner);
        ResponseFuture::deciding(
            pending,
            inner,
            Request::from_parts(parts, body),
            Arc::clone(config),
            shard,
        )
    }
}
