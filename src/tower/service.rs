//! The service: finds the tenant, asks the store, and hands the answer to
//! the response future.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ::tower::Service;
use http::header::WWW_AUTHENTICATE;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};

use super::future::ResponseFuture;
use super::key::Missing;
use super::layer::Config;
use crate::Shard;
use crate::store::{InProcess, Store};

/// The service made by [`RateLimitLayer`](super::RateLimitLayer): asks the
/// limiter for each request and either forwards it or answers it.
pub struct RateLimit<I, S = InProcess> {
    pub(super) inner: I,
    pub(super) config: Arc<Config<S>>,
}

impl<I: Clone, S> Clone for RateLimit<I, S> {
    fn clone(&self) -> Self {
        RateLimit {
            inner: self.inner.clone(),
            config: Arc::clone(&self.config),
        }
    }
}

impl<I: fmt::Debug, S> fmt::Debug for RateLimit<I, S> {
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

impl<S: Store> Config<S> {
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

impl<I, S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimit<I, S>
where
    I: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    S: Store,
    ResBody: Default,
{
    type Response = Response<ResBody>;
    type Error = I::Error;
    type Future = ResponseFuture<I, S, ReqBody, ResBody>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let config = &self.config;
        let limiter = &config.limiter;
        let shard_of = |tenant: &[u8]| {
            let user = config
                .user
                .as_ref()
                .and_then(|user| user.with_key(&parts, |user| limiter.shard_nested(tenant, user)));
            user.unwrap_or_else(|| limiter.shard(tenant))
        };
        let shard = match config.key.with_key(&parts, shard_of) {
            Some(shard) => shard,
            None => match &config.missing.0 {
                Missing::Fallback(tenant) => shard_of(tenant),
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
        let pending = limiter.store.apply(&limiter.core, shard, 1);
        // The clone that poll_ready made ready goes with the request; this
        // service keeps a fresh one for the next poll_ready.
        let clone = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, clone);
        ResponseFuture::deciding(
            pending,
            inner,
            Request::from_parts(parts, body),
            Arc::clone(config),
            shard,
        )
    }
}
