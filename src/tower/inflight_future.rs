//! The in-flight layer's response future: wait for the permit, call the
//! inner service, and give the permit back when its response is ready.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use ::tower::Service;
use http::{Request, Response};
use pin_project_lite::pin_project;

use super::inflight::{Acquiring, Config, Held};
use super::respond::Respond;

pin_project! {
    /// The response future of [`InFlightLimit`](super::InFlightLimit): the
    /// wait for a permit when the tenant's pools have none free, then the
    /// inner service's response, the permit held until it is ready; or the
    /// layer's own 503.
    pub struct InFlightFuture<I, R, ReqBody, ResBody>
    where
        I: Service<Request<ReqBody>>,
    {
        #[pin]
        state: State<I, R, ReqBody, ResBody>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<I, R, ReqBody, ResBody>
    where
        I: Service<Request<ReqBody>>,
    {
        Waiting {
            acquire: Acquiring,
            waiting: Option<(I, Request<ReqBody>)>,
            config: Arc<Config<R>>,
        },
        // The permit is held: the inner service (a clone that was not
        // ready) is readied for the request.
        Readying {
            inner: I,
            request: Option<Request<ReqBody>>,
            permit: Option<Held>,
        },
        Called {
            #[pin]
            future: I::Future,
            permit: Option<Held>,
        },
        Answered {
            response: Option<Response<ResBody>>,
        },
    }
}

impl<I, R, ReqBody, ResBody> InFlightFuture<I, R, ReqBody, ResBody>
where
    I: Service<Request<ReqBody>>,
{
    pub(super) fn waiting(
        acquire: Acquiring,
        inner: I,
        request: Request<ReqBody>,
        config: Arc<Config<R>>,
    ) -> Self {
        InFlightFuture {
            state: State::Waiting {
                acquire,
                waiting: Some((inner, request)),
                config,
            },
        }
    }

    pub(super) fn called(future: I::Future, permit: Option<Held>) -> Self {
        InFlightFuture {
            state: State::Called { future, permit },
        }
    }

    pub(super) fn answer(response: Response<ResBody>) -> Self {
        InFlightFuture {
            state: State::Answered {
                response: Some(response),
            },
        }
    }
}

impl<I, R, ReqBody, ResBody> Future for InFlightFuture<I, R, ReqBody, ResBody>
where
    I: Service<Request<ReqBody>, Response = Response<ResBody>>,
    R: Respond<ResBody>,
{
    type Output = Result<Response<ResBody>, I::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut state = self.as_mut().project().state;
            let next = match state.as_mut().project() {
                StateProj::Waiting {
                    acquire,
                    waiting,
                    config,
                } => {
                    let acquired = ready!(acquire.poll(cx));
                    let (inner, request) = waiting
                        .take()
                        .expect("InFlightFuture polled after it completed");
                    match acquired {
                        Ok(permit) => State::Readying {
                            inner,
                            request: Some(request),
                            permit: Some(permit),
                        },
                        Err(refused) => return Poll::Ready(Ok(config.refused(refused))),
                    }
                }
                StateProj::Readying {
                    inner,
                    request,
                    permit,
                } => {
                    // An error gives the permit back with this state.
                    ready!(inner.poll_ready(cx))?;
                    let request = request
                        .take()
                        .expect("InFlightFuture polled after it completed");
                    State::Called {
                        future: inner.call(request),
                        permit: permit.take(),
                    }
                }
                StateProj::Called { future, permit } => {
                    let response = ready!(future.poll(cx));
                    // Given back as the response head is ready (or the
                    // call failed); a body still streaming holds none.
                    drop(permit.take());
                    // Polled again, it says so rather than poll the inner
                    // future again.
                    state.set(State::Answered { response: None });
                    return Poll::Ready(response);
                }
                StateProj::Answered { response } => {
                    return Poll::Ready(Ok(response
                        .take()
                        .expect("InFlightFuture polled after it completed")));
                }
            };
            state.set(next);
        }
    }
}

impl<I, R, ReqBody, ResBody> fmt::Debug for InFlightFuture<I, R, ReqBody, ResBody>
where
    I: Service<Request<ReqBody>>,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InFlightFuture").finish_non_exhaustive()
    }
}
