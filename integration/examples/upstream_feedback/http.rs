//! The policer of the scene behind HTTP, and a call to it with reqwest:
//! shared by the example and its fleet test.

// The example and its tests each use a part of this.
#![allow(dead_code)]

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use tokio::time::Instant;

use super::scene::{Policer, Reply};

/// The local policer, behind HTTP.
pub(crate) async fn police(
    State((policer, start)): State<(Arc<Mutex<Policer>>, Instant)>,
    headers: HeaderMap,
) -> impl IntoResponse {
    let tenant = headers
        .get("x-tenant")
        .and_then(|t| t.to_str().ok())
        .unwrap_or("");
    let reply = policer.lock().unwrap().answer(start.elapsed(), tenant);
    let mut out = HeaderMap::new();
    for (name, value) in reply.headers {
        if let Ok(value) = HeaderValue::from_str(&value) {
            out.insert(HeaderName::from_static(name), value);
        }
    }
    (StatusCode::from_u16(reply.status).unwrap(), out)
}

/// What an HTTP answer says, for the limiter: status and the headers it reads.
pub(crate) async fn send(client: &reqwest::Client, url: &str, tenant: &str) -> Reply {
    match client.get(url).header("x-tenant", tenant).send().await {
        Ok(answer) => {
            let read = ["retry-after", "ratelimit-policy"];
            let headers = read
                .into_iter()
                .filter_map(|name| {
                    let value = answer.headers().get(name)?.to_str().ok()?;
                    Some((name, value.to_owned()))
                })
                .collect();
            Reply {
                status: answer.status().as_u16(),
                headers,
            }
        }
        // No answer says nothing of the limit.
        Err(_) => Reply {
            status: 599,
            headers: Vec::new(),
        },
    }
}
