//! A server of the tests' own, on 127.0.0.1 ports the OS picks, with its
//! config in a file of its own; a gRPC client generated from Envoy's protos
//! (envoy-types); and a small HTTP/1.1 client.
#![allow(dead_code)] // each test file takes what it needs

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use shuffle_limiter_server::{Options, Running, start};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

/// One domain, `web`, one shuffled limit per `tenant` value: 1 an hour
/// with a burst of 8 over N = 4, k = 1 (2 each).
pub(crate) const WEB: &str = r#"
domain: web
descriptors:
  - key: tenant
    rate_limit: {unit: hour, requests_per_unit: 1}
    shuffle: {buckets: 4, per_tenant: 1, burst: 8}
"#;

/// A config file of its own in the temp dir, removed on drop.
pub(crate) struct ConfigFile(pub(crate) PathBuf);

impl ConfigFile {
    pub(crate) fn new(text: &str) -> ConfigFile {
        static N: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "rls-test-{}-{}.yaml",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, text).unwrap();
        ConfigFile(path)
    }

    pub(crate) fn write(&self, text: &str) {
        std::fs::write(&self.0, text).unwrap();
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Options for a server on ports the OS picks, not watched, no SIGHUP.
pub(crate) fn options(config: &ConfigFile) -> Options {
    let mut options = Options::new(&config.0);
    options.grpc = "127.0.0.1:0".parse().unwrap();
    options.http = "127.0.0.1:0".parse().unwrap();
    options.watch = None;
    options.sighup = false;
    options
}

pub(crate) async fn serve(config: &ConfigFile) -> Running {
    start(options(config)).await.expect("the server starts")
}

pub(crate) async fn client(server: &Running) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(format!("http://{}", server.grpc_addr()))
        .await
        .expect("the client connects")
}

/// A request of one descriptor with these entries.
pub(crate) fn request(domain: &str, entries: &[(&str, &str)], hits: u32) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![descriptor(entries)],
        hits_addend: hits,
    }
}

pub(crate) fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..Default::default()
    }
}

pub(crate) async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    request: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(request)
        .await
        .expect("a decision")
        .into_inner()
}

pub(crate) fn code(response: &RateLimitResponse) -> Code {
    Code::try_from(response.overall_code).unwrap()
}

pub(crate) fn header<'a>(response: &'a RateLimitResponse, key: &str) -> Option<&'a str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(key))
        .map(|h| h.value.as_str())
}

/// Asks `n` times; the codes, in order.
pub(crate) async fn codes(
    client: &mut RateLimitServiceClient<Channel>,
    request: &RateLimitRequest,
    n: usize,
) -> Vec<Code> {
    let mut codes = Vec::with_capacity(n);
    for _ in 0..n {
        codes.push(code(&ask(client, request.clone()).await));
    }
    codes
}

/// One HTTP/1.1 exchange: the status and the body.
pub(crate) async fn http(server: &Running, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(server.http_addr())
        .await
        .unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// The value of the metric line that starts with `prefix`, as /metrics
/// renders it.
pub(crate) async fn metric(server: &Running, prefix: &str) -> Option<f64> {
    let (_, body) = http(server, "GET", "/metrics", "").await;
    body.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Asks once for each tenant value `tenant-{i}`, `i` in `from..to`, from 8
/// clients at once, each answer OK.
pub(crate) async fn distinct(server: &Running, from: usize, to: usize) {
    let mut tasks = Vec::new();
    for s in 0..8 {
        let mut client = client(server).await;
        tasks.push(tokio::spawn(async move {
            for i in (from + s..to).step_by(8) {
                let value = format!("tenant-{i}");
                let answer = ask(&mut client, request("d", &[("tenant", &value)], 1)).await;
                assert_eq!(code(&answer), Code::Ok);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}
