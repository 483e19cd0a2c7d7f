//! The gRPC face: `envoy.service.ratelimit.v3.RateLimitService`, with the
//! bounds that keep one client from taking the server.

use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
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
    let service = RateLimitServiceServer::new(Rls(state)).max_decoding_message_size(MAX_MESSAGE);
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
