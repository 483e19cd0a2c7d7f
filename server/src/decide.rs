//! One `ShouldRateLimit` decision, the same for gRPC and `/json`: check the
//! request, find each descriptor's rule, ask its limiter, and answer with a
//! status per descriptor and the draft-10 `RateLimit` fields.

use std::time::Duration;

use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use shuffle_limiter::{DenialReason, Denied, Request};
use tonic::Status;

use crate::engine::ceil_secs;
use crate::rules::{Found, Rules};
use crate::wire::RateLimitRequest;

/// The longest descriptor key or value a request may carry, in bytes.
pub const MAX_VALUE_LEN: usize = 1024;
/// The most descriptors in one request.
pub const MAX_DESCRIPTORS: usize = 64;
/// The most entries in one descriptor.
pub const MAX_ENTRIES: usize = 16;

fn invalid(rules: &Rules, message: String) -> Status {
    rules.counters.invalid.increment(1);
    Status::invalid_argument(message)
}

/// Checks what a request must be before anything is taken.
fn validate(rules: &Rules, request: &RateLimitRequest) -> Result<(), Status> {
    if request.domain.is_empty() {
        return Err(invalid(rules, "the domain is empty".into()));
    }
    if request.domain.len() > MAX_VALUE_LEN {
        return Err(invalid(
            rules,
            format!("the domain is longer than {MAX_VALUE_LEN} bytes"),
        ));
    }
    if request.descriptors.is_empty() {
        return Err(invalid(rules, "the request has no descriptors".into()));
    }
    if request.descriptors.len() > MAX_DESCRIPTORS {
        return Err(invalid(
            rules,
            format!("more than {MAX_DESCRIPTORS} descriptors"),
        ));
    }
    for (i, d) in request.descriptors.iter().enumerate() {
        if d.entries.is_empty() {
            return Err(invalid(rules, format!("descriptor {i} has no entries")));
        }
        if d.entries.len() > MAX_ENTRIES {
            return Err(invalid(
                rules,
                format!("descriptor {i} has more than {MAX_ENTRIES} entries"),
            ));
        }
        for (j, e) in d.entries.iter().enumerate() {
            if e.key.is_empty() {
                return Err(invalid(
                    rules,
                    format!("descriptor {i}, entry {j}: the key is empty"),
                ));
            }
            if e.key.len() > MAX_VALUE_LEN || e.value.len() > MAX_VALUE_LEN {
                return Err(invalid(
                    rules,
                    format!(
                        "descriptor {i}, entry {j}: a key or value is longer than \
                         {MAX_VALUE_LEN} bytes"
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn proto_duration(d: Duration) -> ProtoDuration {
    ProtoDuration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: d.subsec_nanos() as i32,
    }
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_owned(),
        value,
        ..Default::default()
    }
}

/// The `RateLimit` item of a descriptor over its limit: nothing left, and
/// the seconds until the next token unless none will ever do.
fn over_item(policy: &str, denied: &Denied) -> String {
    match denied.reason() {
        DenialReason::NeverFits { .. } => format!("{policy};r=0"),
        _ => format!("{policy};r=0;t={}", ceil_secs(denied.retry_after()).max(1)),
    }
}

/// Decides `request` against `rules`.
///
/// A request over the limit in one descriptor takes nothing from the
/// others: their grants are given back.
///
/// # Errors
/// `INVALID_ARGUMENT` for a request that is not one (empty domain, no
/// entries, an empty key, values too long); `UNAVAILABLE` when a limiter's
/// store (Redis) could not decide, so that Envoy applies its own
/// `failure_mode_deny`, unless another descriptor is over its limit: then
/// the answer is `OVER_LIMIT` (that descriptor's status `UNKNOWN`).
pub(crate) async fn decide(
    rules: &Rules,
    request: &RateLimitRequest,
) -> Result<RateLimitResponse, Status> {
    validate(rules, request)?;
    let mut statuses = Vec::with_capacity(request.descriptors.len());
    let mut policies = Vec::new();
    let mut fields = Vec::new();
    let mut grants = Vec::new();
    let mut over = false;
    let mut retry: Option<u64> = None;
    let mut unavailable = None;
    for d in &request.descriptors {
        let hits = d
            .hits_addend
            .as_ref()
            .map_or(request.hits_addend, |h| {
                u32::try_from(h.value).unwrap_or(u32::MAX)
            })
            .max(1);
        let ok = DescriptorStatus {
            code: Code::Ok as i32,
            ..Default::default()
        };
        // A negative hit gives back; nothing here is owed one: no effect.
        let found = match rules.find(&request.domain, &d.entries) {
            _ if d.is_negative_hits => Found::None,
            None => {
                rules.counters.unknown_domain.increment(1);
                statuses.push(ok);
                continue;
            }
            Some(found) => found,
        };
        let (rule, tenant, user) = match found {
            Found::None | Found::Unlimited => {
                rules.counters.no_rule.increment(1);
                statuses.push(ok);
                continue;
            }
            Found::Rule { rule, tenant, user } => (rule, tenant, user),
        };
        let mut asked = Request::tenant(&tenant[..]).tokens(hits);
        if let Some(user) = user {
            asked = asked.user(user);
        }
        let shard = rule.engine.shard(asked.clone());
        let (q, w) = rule.engine.share(&shard);
        // Pushed with the descriptor's `RateLimit` item, so that the two
        // lists keep in step: none when its store could not decide.
        let policy = format!("{};q={q};w={w}", rule.policy);
        let mut status = DescriptorStatus {
            current_limit: Some(rule.current_limit.clone()),
            ..ok
        };
        match rule.engine.check(asked).await {
            Ok(grant) => {
                rule.counters.ok.increment(1);
                let remaining = grant.remaining();
                let full_in = grant.full_in();
                fields.push(format!(
                    "{};r={remaining};t={}",
                    rule.policy,
                    ceil_secs(full_in)
                ));
                status.limit_remaining = u32::try_from(remaining).unwrap_or(u32::MAX);
                status.duration_until_reset = Some(proto_duration(full_in));
                policies.push(policy);
                grants.push((rule, grant));
            }
            // A rule in shadow mode is only watched: whatever it decided,
            // even that its store could not decide, the answer stays OK.
            Err(denied) if rule.shadow => {
                if denied.reason() == DenialReason::StoreUnavailable {
                    rule.counters.unavailable.increment(1);
                } else {
                    rule.counters.shadow_over_limit.increment(1);
                    // What the rule found, without a Retry-After: the
                    // answer is OK.
                    policies.push(policy);
                    fields.push(over_item(&rule.policy, &denied));
                }
            }
            Err(denied) if denied.reason() == DenialReason::StoreUnavailable => {
                rule.counters.unavailable.increment(1);
                unavailable = Some(rule.path.clone());
                // Not decided: neither OK nor over the limit.
                status.code = Code::Unknown as i32;
            }
            Err(denied) => {
                rule.counters.over_limit.increment(1);
                over = true;
                status.code = Code::OverLimit as i32;
                policies.push(policy);
                fields.push(over_item(&rule.policy, &denied));
                // No wait helps a request that never fits: no Retry-After,
                // no reset.
                if !matches!(denied.reason(), DenialReason::NeverFits { .. }) {
                    let secs = ceil_secs(denied.retry_after()).max(1);
                    retry = Some(retry.map_or(secs, |r| r.max(secs)));
                    status.duration_until_reset = Some(proto_duration(denied.retry_after()));
                }
            }
        }
        statuses.push(status);
    }
    if over || unavailable.is_some() {
        for (rule, grant) in grants {
            rule.engine.refund(grant).await;
        }
    }
    // Over the limit in one descriptor is over the limit, whatever the
    // others: UNAVAILABLE would let a fail-open Envoy pass the request.
    if let Some(path) = unavailable.filter(|_| !over) {
        return Err(Status::unavailable(format!(
            "the store of {path} could not decide"
        )));
    }
    let mut headers = Vec::new();
    if !policies.is_empty() {
        headers.push(header("RateLimit-Policy", policies.join(", ")));
        headers.push(header("RateLimit", fields.join(", ")));
    }
    if let Some(secs) = retry {
        headers.push(header("Retry-After", secs.to_string()));
    }
    let code = if over { Code::OverLimit } else { Code::Ok };
    Ok(RateLimitResponse {
        overall_code: code as i32,
        statuses,
        response_headers_to_add: headers,
        ..Default::default()
    })
}
