//! The gRPC face: `envoy.service.ratelimit.v3.RateLimitService`, with the
//! bounds that keep one client from taking the server.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::SERVICE_NAME;
use tonic::body::Body;
use tonic::codegen::{BoxFuture, Context, Poll, Service, http};
use tonic::server::{NamedService, UnaryService};
use tonic::{Request, Response, Status};
use tonic_prost::ProstCodec;

use crate::decide::decide;
use crate::state::State;
use crate::wire::RateLimitRequest;

/// The largest gRPC message the server decodes, in bytes: 64 KiB, far above
/// any real descriptor set (see [`MAX_DESCRIPTORS`](crate::MAX_DESCRIPTORS)).
pub const MAX_MESSAGE: usize = 64 * 1024;
/// The most concurrent streams (requests in flight) on one HTTP/2
/// connection.
pub const MAX_STREAMS: u32 = 256;

const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// `RateLimitService`, as envoy-types' generated server but for the
/// request, which is read with its strings as bytes ([`crate::wire`]): a
/// descriptor value that is not UTF-8 is decided like any other.
///
/// A message that does not decode, or is over [`MAX_MESSAGE`], is counted
/// as `invalid_argument`, as the HTTP face counts a body that is not a
/// request or is too large; tonic answers them `INTERNAL` (gRPC's code for
/// a message that does not parse) and `OUT_OF_RANGE`, codes the decision
/// itself never answers.
#[derive(Clone)]
struct Rls(Arc<State>);

impl NamedService for Rls {
    const NAME: &'static str = SERVICE_NAME;
}

impl Service<http::Request<Body>> for Rls {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if request.uri().path() != SHOULD_RATE_LIMIT {
            let unknown = Status::unimplemented(format!("no method {}", request.uri().path()));
            return Box::pin(async move { Ok(unknown.into_http()) });
        }
        let state = Arc::clone(&self.0);
        Box::pin(async move {
            let invalid = state.metrics.invalid.clone();
            let codec = ProstCodec::<RateLimitResponse, RateLimitRequest>::default();
            let mut grpc = tonic::server::Grpc::new(codec)
                .apply_max_message_size_config(Some(MAX_MESSAGE), None);
            let response = grpc.unary(ShouldRateLimit(state), request).await;
            // A refused message: INTERNAL (13), one that does not decode;
            // OUT_OF_RANGE (11), one over MAX_MESSAGE, refused before
            // decoding. Both in a trailers-only answer's headers.
            let status = response.headers().get("grpc-status").map(|v| v.as_bytes());
            if matches!(status, Some(b"13" | b"11")) {
                invalid.increment(1);
            }
            Ok(response)
        })
    }
}

/// The one method, once its request is decoded.
struct ShouldRateLimit(Arc<State>);

impl UnaryService<RateLimitRequest> for ShouldRateLimit {
    type Response = RateLimitResponse;
    type Future = BoxFuture<Response<RateLimitResponse>, Status>;

    fn call(&mut self, request: Request<RateLimitRequest>) -> Self::Future {
        let state = Arc::clone(&self.0);
        Box::pin(async move {
            let rules = state.rules.load_full();
            decide(&rules, request.get_ref()).await.map(Response::new)
        })
    }
}

/// The tonic server with its bounds: message size, streams per connection,
/// flow-control windows (what one connection may make the server buffer)
/// and a deadline per request.
pub(crate) fn router(state: Arc<State>) -> tonic::transport::server::Router {
    let service = Rls(state);
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
