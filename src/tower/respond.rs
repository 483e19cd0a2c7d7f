//! The answers the layer gives itself (400, 401, 429, 500, 503), and the
//! hook that builds them.

use std::fmt;
use std::time::Duration;

use http::{HeaderMap, Response, StatusCode};

use super::ip::NoPeerAddress;
use crate::inflight::RejectReason;
use crate::upstream::NotSent;

/// Why the layer answers a request itself instead of calling the service.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reason {
    /// The request has no tenant ([`MissingTenant`](super::MissingTenant):
    /// 400, or 401 with `WWW-Authenticate`).
    MissingTenant,
    /// The tenant's share is spent: 429 with `Retry-After` and the
    /// `RateLimit` fields.
    TooManyRequests {
        /// When the next token is due (`Retry-After` is this, rounded up).
        retry_after: Duration,
    },
    /// The key needs the peer address and the server did not provide it:
    /// 500.
    NoPeerAddress(NoPeerAddress),
    /// The limiter's store could not decide (Redis unreachable or too
    /// slow) and its failure policy denied: 503 with `Retry-After`, and no
    /// `RateLimit` fields, since nothing is known of the tenant's share.
    /// It is the service's fault, not the client's; a [`Respond`] hook that
    /// prefers a 429 can say so.
    StoreUnavailable {
        /// When the store is next tried (`Retry-After` is this, rounded up).
        retry_after: Duration,
    },
    /// The tenant's in-flight pools ([`InFlightLayer`](super::InFlightLayer))
    /// gave no permit: their queues are full, or the wait would have been
    /// longer than the layer's `max_wait`. 503 with `Retry-After`: the
    /// service is busy, not the client over a rate.
    InFlightFull {
        /// What the pools said: [`RejectReason::QueueFull`] or
        /// [`RejectReason::TimedOut`].
        reason: RejectReason,
        /// The layer's retry hint (`Retry-After` is this, rounded up).
        retry_after: Duration,
    },
}

/// An answer the layer is about to give: its reason, and the status and
/// headers it carries by default. A [`Respond`] hook turns it into a
/// response, usually through [`into_response`](Rejection::into_response).
#[derive(Debug, Clone)]
pub struct Rejection {
    reason: Reason,
    status: StatusCode,
    headers: HeaderMap,
}

impl Rejection {
    pub(super) fn new(reason: Reason, status: StatusCode, headers: HeaderMap) -> Self {
        Rejection {
            reason,
            status,
            headers,
        }
    }

    /// Why the request is answered here.
    pub fn reason(&self) -> &Reason {
        &self.reason
    }

    /// The status it gets by default: 400, 401, 429, 500 or 503.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The headers it gets by default: `Retry-After` and the `RateLimit`
    /// fields on a 429, `Retry-After` on a 503, `WWW-Authenticate` on a 401.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The default response with `body`: the default status and headers.
    pub fn into_response<B>(self, body: B) -> Response<B> {
        let mut response = Response::new(body);
        *response.status_mut() = self.status;
        *response.headers_mut() = self.headers;
        response
    }
}

impl fmt::Display for Rejection {
    /// A sentence for a person: what happened and what to do.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.reason {
            Reason::MissingTenant => f.write_str("the request does not say who is calling"),
            Reason::TooManyRequests { retry_after } => write!(
                f,
                "too many requests: retry in {:.3} s",
                retry_after.as_secs_f64()
            ),
            Reason::NoPeerAddress(err) => fmt::Display::fmt(err, f),
            Reason::StoreUnavailable { retry_after } => write!(
                f,
                "the rate limiter cannot reach its store: retry in {:.3} s",
                retry_after.as_secs_f64()
            ),
            Reason::InFlightFull { retry_after, .. } => write!(
                f,
                "too many calls of this tenant in flight: retry in {:.3} s",
                retry_after.as_secs_f64()
            ),
        }
    }
}

/// Builds the layer's own answers, with a body of type `B` (the inner
/// service's response body).
///
/// Any `Fn(Rejection) -> Response<B>` is one, as in tower-http; the default,
/// [`EmptyBody`], sends the default status and headers with an empty body.
///
/// A JSON body (with axum's `Body`):
/// ```
/// use std::sync::Arc;
/// use axum::{Router, body::Body, http::{HeaderName, Request, StatusCode, header}, routing::get};
/// use shuffle_limiter::{Quota, ShardedLimiter};
/// use shuffle_limiter::tower::{RateLimitLayer, Reason, Rejection, TenantKey};
/// use tower::Service;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Arc::new(ShardedLimiter::builder().quota(Quota::per_second(1)).build()?);
/// let json = |rejection: Rejection| {
///     let retry = match rejection.reason() {
///         Reason::TooManyRequests { retry_after } => retry_after.as_secs_f64(),
///         _ => 0.0,
///     };
///     let body = format!(r#"{{"error":{:?},"retry_after_s":{retry:.3}}}"#, rejection.to_string());
///     let mut response = rejection.into_response(Body::from(body));
///     response.headers_mut().insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
///     response
/// };
/// let layer = RateLimitLayer::new(limiter, TenantKey::header(HeaderName::from_static("x-api-key")))
///     .respond_with(json);
/// let mut app: Router = Router::new().route("/", get(|| async { "hi" })).layer(layer);
///
/// let anonymous = app.call(Request::get("/").body(Body::empty())?).await?;
/// assert_eq!(anonymous.status(), StatusCode::BAD_REQUEST);
/// assert_eq!(anonymous.headers()["content-type"], "application/json");
/// # Ok(())
/// # }
/// ```
///
/// For a gRPC service (tonic behind this layer), the answer must be HTTP 200
/// with a `grpc-status`: 8 is `RESOURCE_EXHAUSTED`, and
/// `grpc-retry-pushback-ms` tells gRPC clients when to retry:
/// ```
/// use axum::{body::Body, http::{HeaderValue, Response, StatusCode, header}};
/// use shuffle_limiter::tower::{Reason, Rejection};
///
/// fn grpc(rejection: Rejection) -> Response<Body> {
///     let (code, pushback) = match rejection.reason() {
///         Reason::TooManyRequests { retry_after } => ("8", Some(retry_after.as_millis())),
///         Reason::MissingTenant => ("16", None), // UNAUTHENTICATED
///         _ => ("13", None),                     // INTERNAL
///     };
///     let message = rejection.to_string();
///     let mut response = rejection.into_response(Body::empty());
///     *response.status_mut() = StatusCode::OK;
///     let headers = response.headers_mut();
///     headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
///     headers.insert("grpc-status", HeaderValue::from_static(code));
///     if let Ok(message) = HeaderValue::try_from(message) {
///         headers.insert("grpc-message", message);
///     }
///     if let Some(ms) = pushback {
///         headers.insert("grpc-retry-pushback-ms", HeaderValue::from(ms as u64));
///     }
///     response
/// }
/// // RateLimitLayer::new(limiter, key).respond_with(grpc)
/// # let _ = grpc;
/// ```
pub trait Respond<B>: Send + Sync + 'static {
    /// The response to send instead of calling the service.
    fn respond(&self, rejection: Rejection) -> Response<B>;
}

/// `respond`'s answer to `rejection`, marked [`NotSent`]: a layer of this
/// crate made it in place of the call (an [`UpstreamLayer`](super::UpstreamLayer)
/// above does not listen to it).
pub(super) fn answer<B, R: Respond<B> + ?Sized>(respond: &R, rejection: Rejection) -> Response<B> {
    let mut response = respond.respond(rejection);
    response.extensions_mut().insert(NotSent);
    response
}

impl<B, F> Respond<B> for F
where
    F: Fn(Rejection) -> Response<B> + Send + Sync + 'static,
{
    fn respond(&self, rejection: Rejection) -> Response<B> {
        self(rejection)
    }
}

/// The default [`Respond`]: the default status and headers, and an empty
/// body (`B::default()`).
///
/// ```
/// use std::sync::Arc;
/// use axum::http::HeaderName;
/// use shuffle_limiter::{Quota, ShardedLimiter, store::InProcess};
/// use shuffle_limiter::tower::{EmptyBody, RateLimitLayer, TenantKey};
///
/// let limiter = Arc::new(ShardedLimiter::builder().quota(Quota::per_second(5)).build()?);
/// let key = TenantKey::header(HeaderName::from_static("x-api-key"));
/// let layer: RateLimitLayer<InProcess, EmptyBody> = RateLimitLayer::new(limiter, key);
/// # let _ = layer;
/// # Ok::<(), shuffle_limiter::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct EmptyBody;

impl<B: Default> Respond<B> for EmptyBody {
    fn respond(&self, rejection: Rejection) -> Response<B> {
        rejection.into_response(B::default())
    }
}
