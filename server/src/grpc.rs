//! The gRPC face: `envoy.service.ratelimit.v3.RateLimitService`, with the
//! bounds that keep one client from taking the server.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Context, Poll, Service, http};
use tonic::server::NamedService;
use tonic::{Request, Response, Status};

use crate::decide::decide;
use crate::state::State;

/// The largest gRPC message the server decodes, in bytes: 64 KiB, far above
/// any real descriptor set (see [`MAX_DESCRIPTORS`](crate::MAX_DESCRIPTORS)).
pub const MAX_MESSAGE: usize = 64 * 1024;
/// The most concurrent streams (requests in flight) on one HTTP/2
/// connection.
pub const MAX_STREAMS: u32 = 256;

pub(crate) struct Rls(pub(crate) Arc<State>);

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let rules = self.0.rules.load_full();
        decide(&rules, request.get_ref()).await.map(Response::new)
    }
}

/// The tonic server with its bounds: message size, streams per connection,
/// flow-control windows (what one connection may make the server buffer)
/// and a deadline per request.
pub(crate) fn router(state: Arc<State>) -> tonic::transport::server::Router {
    let invalid = state.metrics.invalid.clone();
    let service = RateLimitServiceServer::new(Rls(state)).max_decoding_message_size(MAX_MESSAGE);
    let service = CountUndecodable { service, invalid };
    tonic::transport::Server::builder()
        .max_concurrent_streams(Some(MAX_STREAMS))
        .concurrency_limit_per_connection(MAX_STREAMS as usize)
        .initial_stream_window_size(Some(MAX_MESSAGE as u32))
        .initial_connection_window_size(Some(1024 * 1024))
        .http2_max_header_list_size(Some(16 * 1024))
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(10)))
        .timeout(crate::serve::REQUEST_TIMEOUT)
        .add_service(service)
}

/// Counts a request whose message did not decode as `invalid_argument`,
/// as the HTTP face counts a body that is not a request. tonic answers it
/// `INTERNAL` before the service sees it (gRPC's code for a message that
/// does not parse), and the service itself never answers `INTERNAL`.
#[derive(Clone)]
struct CountUndecodable<S> {
    service: S,
    invalid: metrics::Counter,
}

impl<S: NamedService> NamedService for CountUndecodable<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> Service<http::Request<Body>> for CountUndecodable<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.service.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let answer = self.service.call(request);
        let invalid = self.invalid.clone();
        Box::pin(async move {
            let response = answer.await?;
            // INTERNAL is code 13, in a trailers-only answer's headers.
            if response.headers().get("grpc-status").map(|v| v.as_bytes()) == Some(b"13") {
                invalid.increment(1);
            }
            Ok(response)
        })
    }
}
