//! The client side (features `tower` and `wait`): a layer around a
//! service that calls an upstream, listening to what it answers.

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::{error, fmt};

use http::{Request, Response};
use tower::{Layer, Service};

use super::key::{Found, TenantKey};
use crate::Denied;
use crate::clock::Clock;
use crate::store::Store;
use crate::upstream::{Answer, CallError, Retries, Unheard, Upstream};

impl<T: Answer, E> Answer for Result<T, E> {
    fn status(&self) -> u16 {
        self.as_ref().map_or(0, Answer::status)
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.as_ref().ok()?.header(name)
    }

    // An error of the inner service may have reached the upstream.
    fn sent(&self) -> bool {
        self.as_ref().map_or(true, Answer::sent)
    }
}

/// Wraps a client [`Service`] (hyper-util's `Client`, or any
/// `Service<http::Request<B>, Response = http::Response<R>>`) so that every
/// call goes through an [`Upstream`]: it waits for the tenant's grant,
/// then holds off, adapts, settles and retries from what the upstream
/// answers. The tenant comes from a [`TenantKey`] (a header the caller
/// sets, or a request extension).
///
/// A retry sends the request again, so the body must be `Clone` (a
/// `String`, `Bytes`, `Full<Bytes>`). reqwest's `Client` is a service of
/// its own request type: call it through [`Upstream::call`] instead, with
/// an [`Answer`] for `reqwest::Response`.
pub struct UpstreamLayer<S, P, R> {
    upstream: Arc<Upstream<S, P, R>>,
    key: TenantKey,
}

impl<S, P, R> UpstreamLayer<S, P, R> {
    /// Calls through `upstream`, for the tenant `key` finds.
    pub fn new(upstream: Upstream<S, P, R>, key: TenantKey) -> Self {
        UpstreamLayer {
            upstream: Arc::new(upstream),
            key,
        }
    }
}

impl<S, P, R> Clone for UpstreamLayer<S, P, R> {
    fn clone(&self) -> Self {
        UpstreamLayer {
            upstream: Arc::clone(&self.upstream),
            key: self.key.clone(),
        }
    }
}

impl<S, P, R> fmt::Debug for UpstreamLayer<S, P, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamLayer").finish_non_exhaustive()
    }
}

impl<I, S, P, R> Layer<I> for UpstreamLayer<S, P, R> {
    type Service = UpstreamService<I, S, P, R>;

    fn layer(&self, inner: I) -> Self::Service {
        UpstreamService {
            inner,
            upstream: Arc::clone(&self.upstream),
            key: self.key.clone(),
        }
    }
}

/// The service of an [`UpstreamLayer`].
pub struct UpstreamService<I, S, P, R> {
    inner: I,
    upstream: Arc<Upstream<S, P, R>>,
    key: TenantKey,
}

impl<I: Clone, S, P, R> Clone for UpstreamService<I, S, P, R> {
    fn clone(&self) -> Self {
        UpstreamService {
            inner: self.inner.clone(),
            upstream: Arc::clone(&self.upstream),
            key: self.key.clone(),
        }
    }
}

impl<I, S, P, R> fmt::Debug for UpstreamService<I, S, P, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstreamService").finish_non_exhaustive()
    }
}

/// Why an [`UpstreamService`] call failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum UpstreamError<E> {
    /// The request had no tenant (or its key found no peer address).
    MissingTenant,
    /// The limiter gave no grant (see [`CallError::Denied`]).
    Denied(Denied),
    /// The inner service failed (no answer to listen to).
    Inner(E),
}

impl<E: fmt::Display> fmt::Display for UpstreamError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UpstreamError::MissingTenant => {
                write!(f, "the request names no tenant: set the layer's tenant key")
            }
            UpstreamError::Denied(denied) => write!(f, "not sent: {denied}"),
            UpstreamError::Inner(error) => write!(f, "the upstream call failed: {error}"),
        }
    }
}

impl<E: fmt::Debug + fmt::Display> error::Error for UpstreamError<E> {}

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<I, B, RB, S, P, R> Service<Request<B>> for UpstreamService<I, S, P, R>
where
    I: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    I::Future: Send,
    I::Error: Send,
    B: Clone + Send + Sync + 'static,
    RB: Send + 'static,
    S: Store + 'static,
    P: Clock + 'static,
    R: Retries + 'static,
{
    type Response = Response<RB>;
    type Error = UpstreamError<I::Error>;
    type Future = Boxed<Result<Response<RB>, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(UpstreamError::Inner)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let tenant = match self.key.find(&parts, <[u8]>::to_vec) {
            Found::Tenant(tenant) => tenant,
            // No tenant to limit: an exempt request goes as it is.
            Found::Exempt => {
                let call = self.inner.call(Request::from_parts(parts, body));
                return Box::pin(async move { call.await.map_err(UpstreamError::Inner) });
            }
            Found::Missing | Found::NoPeer(_) => {
                return Box::pin(std::future::ready(Err(UpstreamError::MissingTenant)));
            }
        };
        // The service made ready goes with the first attempt (tower's
        // contract: a clone is not ready, and one that took a permit in
        // `poll_ready` needs it in `call`), unless the attempt has to wait
        // for its grant: a ready service can be a reservation
        // (`ConcurrencyLimit`, `Buffer`), and a call waiting for its
        // tenant's grant must not hold one that another tenant's call
        // needs. Then, as for every retry, a clone is made ready once the
        // grant has come.
        let ready = self.inner.clone();
        let ready = Arc::new(Mutex::new(Some(std::mem::replace(&mut self.inner, ready))));
        let held = Arc::clone(&ready);
        let (upstream, inner) = (Arc::clone(&self.upstream), self.inner.clone());
        Box::pin(async move {
            let send = move |_: &crate::Grant| {
                let request = Request::from_parts(parts.clone(), body.clone());
                let first = ready.lock().unwrap_or_else(|e| e.into_inner()).take();
                let made_ready = first.is_some();
                let mut service = first.unwrap_or_else(|| inner.clone());
                async move {
                    if !made_ready {
                        poll_fn(|cx| service.poll_ready(cx)).await?;
                    }
                    service.call(request).await
                }
            };
            let mut call = std::pin::pin!(upstream.call(tenant.as_slice(), send));
            let answered = poll_fn(|cx| {
                let answer = call.as_mut().poll(cx);
                if answer.is_pending() {
                    // Still waiting: the service made ready, if no attempt
                    // took it yet, gives its readiness up.
                    held.lock().unwrap_or_else(|e| e.into_inner()).take();
                }
                answer
            });
            match answered.await {
                Ok(answer) => answer.map_err(UpstreamError::Inner),
                Err(CallError::Denied(denied)) => Err(UpstreamError::Denied(denied)),
                // Answered: the response goes back, saying what the store
                // failed to take in.
                Err(CallError::Store { error, answer }) => {
                    let mut response = answer.map_err(UpstreamError::Inner)?;
                    response.extensions_mut().insert(Unheard(Arc::new(error)));
                    Ok(response)
                }
            }
        })
    }
}
