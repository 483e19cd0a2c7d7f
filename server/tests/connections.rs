//! Peers that connect and then stall, on both faces: each is answered or
//! dropped within the server's timeouts (5 s for a request, a head or an
//! HTTP/2 preface), a shutdown does not wait for them, and a server out of
//! file descriptors backs off instead of spinning. Time is tokio's, paused
//! (it jumps to the next timer whenever every task waits), except in the
//! last test, which runs the real binary.

mod support;

use std::time::Duration;

use support::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

/// The server's timeouts for a request, a head and a preface.
const TIMEOUT: Duration = Duration::from_secs(5);
/// Past this, a stalled peer is held without a bound.
const BOUND: Duration = Duration::from_secs(30);

/// `POST /json` announcing 1000 bytes of body, of which it sends 16 once
/// the server has asked for the body (`100 Continue`), then nothing.
async fn stalled_json(server: &shuffle_limiter_server::Running) -> TcpStream {
    let mut stream = TcpStream::connect(server.http_addr()).await.unwrap();
    stream
        .write_all(
            b"POST /json HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
              Content-Length: 1000\r\nExpect: 100-continue\r\n\r\n",
        )
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let n = timeout(BOUND, stream.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 100"), "{:?}", &buf[..n]);
    stream.write_all(br#"{"domain":"web","#).await.unwrap();
    stream
}

/// A connection to the gRPC port that sends nothing.
async fn silent_grpc(server: &shuffle_limiter_server::Running) -> TcpStream {
    TcpStream::connect(server.grpc_addr()).await.unwrap()
}

/// Everything `stream` receives until the server closes it, and when.
async fn until_closed(stream: &mut TcpStream) -> (String, Duration) {
    let started = Instant::now();
    let mut got = Vec::new();
    let read = timeout(BOUND, stream.read_to_end(&mut got)).await;
    assert!(read.is_ok(), "still open after {BOUND:?}");
    (
        String::from_utf8_lossy(&got).into_owned(),
        started.elapsed(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_json_body_that_stalls_is_answered_408_at_the_request_timeout() {
    let config = ConfigFile::new(WEB);
    let server = serve(&config).await;
    let mut stream = stalled_json(&server).await;
    let (answer, after) = until_closed(&mut stream).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(after <= TIMEOUT + Duration::from_millis(10), "{after:?}");
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_request_head_that_never_ends_is_closed_at_the_head_timeout() {
    let config = ConfigFile::new(WEB);
    let server = serve(&config).await;
    let mut stream = TcpStream::connect(server.http_addr()).await.unwrap();
    stream
        .write_all(b"POST /json HTTP/1.1\r\nHost: t\r\nX-Slow: a")
        .await
        .unwrap();
    let (_, after) = until_closed(&mut stream).await;
    assert!(after <= TIMEOUT + Duration::from_millis(10), "{after:?}");
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_grpc_connection_without_its_preface_is_closed_at_the_head_timeout() {
    let config = ConfigFile::new(WEB);
    let server = serve(&config).await;
    let mut silent = silent_grpc(&server).await;
    let (_, after) = until_closed(&mut silent).await;
    assert!(after <= TIMEOUT + Duration::from_millis(10), "{after:?}");
    // The face still serves.
    let mut client = client(&server).await;
    let asked = request("web", &[("tenant", "acme")], 1);
    ask(&mut client, asked).await;
    server.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_shutdown_does_not_wait_for_stalled_peers() {
    let config = ConfigFile::new(WEB);
    let server = serve(&config).await;
    let _body = stalled_json(&server).await;
    let _silent = silent_grpc(&server).await;
    let started = Instant::now();
    assert!(timeout(BOUND, server.shutdown()).await.is_ok());
    let took = started.elapsed();
    assert!(took <= TIMEOUT + Duration::from_millis(10), "{took:?}");
}

/// A port free on 127.0.0.1 a moment ago.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// CPU ticks (1/100 s) the process `pid` has used.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the command's name in parentheses: state is field 3, utime 14.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The real binary under a limit of 64 file descriptors, sent more silent
/// connections than it can hold: it backs off rather than spinning on
/// `EMFILE`, drops the silent ones at the preface timeout, and answers
/// its health check once it can accept again.
#[cfg(target_os = "linux")]
#[test]
fn out_of_file_descriptors_the_server_backs_off_and_serves_again() {
    use std::io::{BufRead, Read, Write};
    use std::net::TcpStream;
    use std::process::{Command, Stdio};

    let config = ConfigFile::new(WEB);
    let (grpc, http) = (free_port(), free_port());
    let mut child = Command::new("prlimit")
        .arg("--nofile=64")
        .arg(env!("CARGO_BIN_EXE_shuffle-limiter-server"))
        .arg("--config")
        .arg(&config.0)
        .args(["--grpc", &format!("127.0.0.1:{grpc}")])
        .args(["--http", &format!("127.0.0.1:{http}")])
        .args(["--watch-secs", "0"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("prlimit(1) runs the server");
    let pid = child.id();
    let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut lines = stderr.lines().map_while(Result::ok);
    assert!(
        lines.any(|line| line.contains("serving")),
        "the server starts"
    );
    // Keep reading its log, so that its writes never block.
    std::thread::spawn(move || lines.for_each(drop));
    let silent: Vec<TcpStream> = (0..80)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", grpc)).ok())
        .collect();
    let before = cpu_ticks(pid);
    let mut health = TcpStream::connect(("127.0.0.1", http)).unwrap();
    health.set_read_timeout(Some(BOUND)).unwrap();
    health
        .write_all(b"GET /healthcheck HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    let read = health.read_to_string(&mut answer);
    let spent = cpu_ticks(pid) - before;
    let _ = child.kill();
    let _ = child.wait();
    drop(silent);
    assert!(
        read.is_ok() && answer.starts_with("HTTP/1.1 200"),
        "{read:?}: {answer}"
    );
    // Spinning on EMFILE took a whole core (over 300 ticks in 3 s).
    assert!(spent < 100, "{spent} ticks of CPU while out of descriptors");
}
