//! Envoy's `RateLimitRequest` as the server reads it: envoy-types' message
//! field for field (the same tags), with every proto `string` as `bytes`.
//!
//! The two have the same wire format. Envoy copies a request header's
//! bytes into a descriptor's value, and HTTP allows bytes 0x80..=0xFF in a
//! header (obs-text), so a value need not be UTF-8; prost refuses such a
//! `string`, and an error answer is one that a fail-open Envoy lets
//! through. Read as bytes, every request is decided: keys and values are
//! matched byte for byte (see `Rules::find`).

use envoy_types::pb::google::protobuf::UInt64Value;

/// `envoy.service.ratelimit.v3.RateLimitRequest`, strings as bytes.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct RateLimitRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) domain: Vec<u8>,
    #[prost(message, repeated, tag = "2")]
    pub(crate) descriptors: Vec<Descriptor>,
    #[prost(uint32, tag = "3")]
    pub(crate) hits_addend: u32,
}

/// `envoy.extensions.common.ratelimit.v3.RateLimitDescriptor`, strings as
/// bytes. Its `limit` (tag 2) is left out: the config decides, so it is
/// skipped as an unknown field.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Descriptor {
    #[prost(message, repeated, tag = "1")]
    pub(crate) entries: Vec<Entry>,
    #[prost(message, optional, tag = "3")]
    pub(crate) hits_addend: Option<UInt64Value>,
    #[prost(bool, tag = "4")]
    pub(crate) is_negative_hits: bool,
}

/// `RateLimitDescriptor.Entry`, strings as bytes.
#[derive(Clone, PartialEq, Eq, prost::Message)]
pub(crate) struct Entry {
    #[prost(bytes = "vec", tag = "1")]
    pub(crate) key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub(crate) value: Vec<u8>,
}
