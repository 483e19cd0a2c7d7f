//! The HTTP face: `POST /json` (the gRPC request and response in
//! proto3's JSON mapping, as envoyproxy/ratelimit's `/json`),
//! `GET /healthcheck` and `GET /metrics`.

use std::sync::Arc;

use axum::Router;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State as Shared};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::{Duration as ProtoDuration, UInt64Value};
use serde::{Deserialize, Deserializer, Serialize};

use crate::decide::decide;
use crate::grpc::MAX_MESSAGE;
use crate::state::State;
use crate::wire::{Descriptor, Entry, RateLimitRequest};

#[derive(Deserialize)]
struct JsonRequest {
    domain: String,
    #[serde(default)]
    descriptors: Vec<JsonDescriptor>,
    /// A `uint32`: above `u32::MAX` it is not one, and refused.
    #[serde(default, alias = "hitsAddend", deserialize_with = "uint32")]
    hits_addend: u32,
}

#[derive(Deserialize)]
struct JsonDescriptor {
    #[serde(default)]
    entries: Vec<JsonEntry>,
    /// A `UInt64Value`: above `u32::MAX` it reads `u32::MAX`, as over gRPC.
    #[serde(default, alias = "hitsAddend", deserialize_with = "uint64_value")]
    hits_addend: Option<u64>,
}

/// A proto3 JSON integer: a number, or its decimal digits as a string
/// (proto3's JSON writes 64-bit integers so, and its parsers take either
/// for any integer); `null` is the default.
fn proto_integer<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    use serde::de::Error;
    match serde_json::Value::deserialize(deserializer)? {
        serde_json::Value::Null => Ok(None),
        serde_json::Value::Number(n) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("{n} is not an unsigned integer"))),
        serde_json::Value::String(s) => s
            .parse()
            .map(Some)
            .map_err(|_| D::Error::custom(format!("{s:?} is not an unsigned integer"))),
        other => Err(D::Error::custom(format!(
            "{other} is not an unsigned integer (a number or a string of digits)"
        ))),
    }
}

fn uint32<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    let n = proto_integer(deserializer)?.unwrap_or(0);
    u32::try_from(n)
        .map_err(|_| serde::de::Error::custom(format!("{n} is above {} (a uint32)", u32::MAX)))
}

fn uint64_value<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    proto_integer(deserializer)
}

#[derive(Deserialize)]
struct JsonEntry {
    key: String,
    #[serde(default)]
    value: String,
}

impl From<JsonRequest> for RateLimitRequest {
    fn from(json: JsonRequest) -> Self {
        RateLimitRequest {
            domain: json.domain.into_bytes(),
            descriptors: json
                .descriptors
                .into_iter()
                .map(|d| Descriptor {
                    entries: d
                        .entries
                        .into_iter()
                        .map(|e| Entry {
                            key: e.key.into_bytes(),
                            value: e.value.into_bytes(),
                        })
                        .collect(),
                    hits_addend: d.hits_addend.map(|value| UInt64Value { value }),
                    is_negative_hits: false,
                })
                .collect(),
            hits_addend: json.hits_addend,
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonResponse {
    overall_code: &'static str,
    statuses: Vec<JsonStatus>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    response_headers_to_add: Vec<JsonHeader>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonStatus {
    code: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_limit: Option<JsonLimit>,
    #[serde(skip_serializing_if = "is_zero")]
    limit_remaining: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    duration_until_reset: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct JsonLimit {
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    requests_per_unit: u32,
    unit: &'static str,
}

#[derive(Serialize)]
struct JsonHeader {
    key: String,
    value: String,
}

fn code_name(code: i32) -> &'static str {
    Code::try_from(code).unwrap_or(Code::Unknown).as_str_name()
}

/// A duration as proto3's JSON writes it: seconds with 0, 3, 6 or 9
/// decimals, then `s`.
fn duration_json(d: &ProtoDuration) -> String {
    let nanos = d.nanos.unsigned_abs();
    let fraction = if nanos == 0 {
        String::new()
    } else if nanos.is_multiple_of(1_000_000) {
        format!(".{:03}", nanos / 1_000_000)
    } else if nanos.is_multiple_of(1_000) {
        format!(".{:06}", nanos / 1_000)
    } else {
        format!(".{nanos:09}")
    };
    format!("{}{fraction}s", d.seconds)
}

impl From<&DescriptorStatus> for JsonStatus {
    fn from(s: &DescriptorStatus) -> Self {
        JsonStatus {
            code: code_name(s.code),
            current_limit: s.current_limit.as_ref().map(|l| JsonLimit {
                name: l.name.clone(),
                requests_per_unit: l.requests_per_unit,
                unit: Unit::try_from(l.unit)
                    .unwrap_or(Unit::Unknown)
                    .as_str_name(),
            }),
            limit_remaining: s.limit_remaining,
            duration_until_reset: s.duration_until_reset.as_ref().map(duration_json),
        }
    }
}

impl From<&RateLimitResponse> for JsonResponse {
    fn from(r: &RateLimitResponse) -> Self {
        JsonResponse {
            overall_code: code_name(r.overall_code),
            statuses: r.statuses.iter().map(JsonStatus::from).collect(),
            response_headers_to_add: r
                .response_headers_to_add
                .iter()
                .map(|h| JsonHeader {
                    key: h.key.clone(),
                    value: h.value.clone(),
                })
                .collect(),
        }
    }
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

async fn json(
    Shared(state): Shared<Arc<State>>,
    body: Result<axum::body::Bytes, BytesRejection>,
) -> Response {
    // A body over MAX_MESSAGE (413), or one that could not be read.
    let body = match body {
        Ok(body) => body,
        Err(refused) => {
            state.metrics.invalid.increment(1);
            return refused.into_response();
        }
    };
    let request: JsonRequest = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => {
            state.metrics.invalid.increment(1);
            return text(
                StatusCode::BAD_REQUEST,
                format!("not a rate limit request: {e}\n"),
            );
        }
    };
    let request = RateLimitRequest::from(request);
    let rules = state.rules.load_full();
    match decide(&rules, &request).await {
        Ok(response) => {
            let status = match Code::try_from(response.overall_code) {
                Ok(Code::Ok) => StatusCode::OK,
                Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            (status, axum::Json(JsonResponse::from(&response))).into_response()
        }
        Err(status) => {
            let code = match status.code() {
                tonic::Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::BAD_REQUEST,
            };
            text(code, format!("{}\n", status.message()))
        }
    }
}

async fn healthcheck() -> Response {
    text(StatusCode::OK, "OK\n".into())
}

async fn metrics(Shared(state): Shared<Arc<State>>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

/// The HTTP routes, with a body limit of [`MAX_MESSAGE`] bytes.
pub(crate) fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/json", post(json))
        .route("/healthcheck", get(healthcheck))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(MAX_MESSAGE))
        .with_state(state)
}
