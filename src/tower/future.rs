//! The response future: wait for the limiter's answer, then call the inner
//! service with the grant, or answer the request here.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use ::tower::Service;
use http::header::RETRY_AFTER;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;

use super::layer::Config;
use super::respond::{self, Reason, Rejection, Respond};
use super::service::ceil_secs;
use super::{RATELIMIT, RATELIMIT_POLICY};
use crate::store::Store;
use crate::{DenialReason, Shard};

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

pin_project! {
    /// The response future of [`RateLimit`](super::RateLimit): the limiter's
    /// answer first, then the inner service's response with the `RateLimit`
    /// fields added, or the limiter's own 429.
    pub struct ResponseFuture<I, S, R, ReqBody, ResBody>
    where
        I: Service<Request<ReqBody>>,
        S: Store,
    {
        #[pin]
        state: State<I, S, R, ReqBody, ResBody>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<I, S, R, ReqBody, ResBody>
    where
        I: Service<Request<ReqBody>>,
        S: Store,
    {
        Deciding {
            #[pin]
            pending: S::Pending,
            waiting: Option<(I, Request<ReqBody>)>,
            // Whether the inner service waiting is the one poll_ready made
            // ready (until the decision first has to wait).
            ready: bool,
            config: Arc<Config<S, R>>,
            shard: Shard,
        },
        // Granted after a wait: the inner service (a clone that was not
        // ready) is readied for the request.
        Readying {
            inner: I,
            request: Option<Request<ReqBody>>,
            fields: Option<Fields>,
        },
        Called {
            #[pin]
            future: I::Future,
            fields: Option<Fields>,
        },
        Answered {
            response: Option<Response<ResBody>>,
        },
    }
}

impl<I, S, R, ReqBody, ResBody> ResponseFuture<I, S, R, ReqBody, ResBody>
where
    I: Service<Request<ReqBody>>,
    S: Store,
{
    pub(super) fn deciding(
        pending: S::Pending,
        inner: I,
        request: Request<ReqBody>,
        config: Arc<Config<S, R>>,
        shard: Shard,
    ) -> Self {
        ResponseFuture {
            state: State::Deciding {
                pending,
                waiting: Some((inner, request)),
                ready: true,
                config,
                shard,
            },
        }
    }

    /// The inner service's answer, with no `RateLimit` fields.
    pub(super) fn called(future: I::Future) -> Self {
        ResponseFuture {
            state: State::Called {
                future,
                fields: None,
            },
        }
    }

    pub(super) fn answer(response: Response<ResBody>) -> Self {
        ResponseFuture {
            state: State::Answered {
                response: Some(response),
            },
        }
    }
}

impl<I, S, R, ReqBody, ResBody> Future for ResponseFuture<I, S, R, ReqBody, ResBody>
where
    I: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone,
    S: Store,
    R: Respond<ResBody>,
{
    type Output = Result<Response<ResBody>, I::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut state = self.as_mut().project().state;
            let next = match state.as_mut().project() {
                StateProj::Deciding {
                    pending,
                    waiting,
                    ready,
                    config,
                    shard,
                } => {
                    let Poll::Ready(result) = pending.poll(cx) else {
                        // A decision that waits (a round trip, a wait for
                        // a slot) gives up the readiness it was called
                        // with: a ready service can be a reservation
                        // (`ConcurrencyLimit`, `Buffer`) that another
                        // tenant's request needs meanwhile. A clone is
                        // readied once granted.
                        if *ready {
                            if let Some((inner, _)) = waiting.as_mut() {
                                *inner = inner.clone();
                            }
                            *ready = false;
                        }
                        return Poll::Pending;
                    };
                    let (mut inner, request) = waiting
                        .take()
                        .expect("ResponseFuture polled after it completed");
                    let policy = config.policy_field(shard);
                    match result {
                        Ok(grant) => {
                            let reset = ceil_secs(grant.full_in());
                            let fields = Fields {
                                policy,
                                limit: config.limit_field(grant.remaining(), reset),
                            };
                            let (mut parts, body) = request.into_parts();
                            parts.extensions.insert(super::Granted::new(grant));
                            let request = Request::from_parts(parts, body);
                            if *ready {
                                State::Called {
                                    future: inner.call(request),
                                    fields: Some(fields),
                                }
                            } else {
                                State::Readying {
                                    inner,
                                    request: Some(request),
                                    fields: Some(fields),
                                }
                            }
                        }
                        Err(denied) => {
                            // Never 0: a client told "retry in 0 s" would
                            // come straight back.
                            let retry = ceil_secs(denied.retry_after()).max(1);
                            let mut headers = HeaderMap::new();
                            headers.insert(RETRY_AFTER, HeaderValue::from(retry));
                            let retry_after = denied.retry_after();
                            let (reason, status) = match denied.reason() {
                                DenialReason::StoreUnavailable => (
                                    Reason::StoreUnavailable { retry_after },
                                    StatusCode::SERVICE_UNAVAILABLE,
                                ),
                                _ => {
                                    let fields = Fields {
                                        policy,
                                        limit: config.limit_field(0, retry),
                                    };
                                    fields.append_to(&mut headers);
                                    let reason = Reason::TooManyRequests { retry_after };
                                    (reason, StatusCode::TOO_MANY_REQUESTS)
                                }
                            };
                            let rejection = Rejection::new(reason, status, headers);
                            return Poll::Ready(Ok(respond::answer(&*config.respond, rejection)));
                        }
                    }
                }
                StateProj::Readying {
                    inner,
                    request,
                    fields,
                } => {
                    ready!(inner.poll_ready(cx))?;
                    let request = request
                        .take()
                        .expect("ResponseFuture polled after it completed");
                    State::Called {
                        future: inner.call(request),
                        fields: fields.take(),
                    }
                }
                StateProj::Called { future, fields } => {
                    let response = ready!(future.poll(cx));
                    let fields = fields.take();
                    // Polled again, it says so rather than poll the inner
                    // future again.
                    state.set(State::Answered { response: None });
                    let mut response = response?;
                    if let Some(fields) = fields {
                        fields.append_to(response.headers_mut());
                    }
                    return Poll::Ready(Ok(response));
                }
                StateProj::Answered { response } => {
                    return Poll::Ready(Ok(response
                        .take()
                        .expect("ResponseFuture polled after it completed")));
                }
            };
            state.set(next);
        }
    }
}

impl<I, S, R, ReqBody, ResBody> fmt::Debug for ResponseFuture<I, S, R, ReqBody, ResBody>
where
    I: Service<Request<ReqBody>>,
    S: Store,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}
