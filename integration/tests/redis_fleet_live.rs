//! A quota changed by another OS process, against a real `redis-server`:
//! this process, built with the old quota, decides with the new one from
//! its next decision, and no bucket is handed a fresh burst.
//!
//! The other process is this test binary run again with [`ROLE_ENV`] set,
//! filtered to [`other_process`].

use std::process::{Command, Stdio};
use std::time::Duration;

use shuffle_limiter::redis::{FailurePolicy, RedisLimiter, RedisOptions};
use shuffle_limiter::{Limit, Quota, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

const ROLE_ENV: &str = "SHUFFLE_LIMITER_LIVE_ROLE";
const URL_ENV: &str = "SHUFFLE_LIMITER_LIVE_URL";

/// `burst` tokens over 4 buckets, 2 a second in all: slow enough that the
/// test's own time adds at most a token or two.
fn slow(burst: u32) -> Quota {
    Quota::new(burst, Duration::from_secs(u64::from(burst) / 2)).with_burst(burst)
}

async fn limiter(url: &str) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(slow(20))
        .buckets(4)
        .per_tenant(4)
        .name("fleet-live")
        .build_redis(
            url,
            RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(2)),
        )
        .await
        .unwrap()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Runs the other process with `role`, and waits (boundedly) for it.
fn other(role: &str, url: &str) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "other_process", "--ignored", "--nocapture"])
        .env(ROLE_ENV, role)
        .env(URL_ENV, url)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..1500 {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "the other process failed: {status:?}");
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    panic!("the other process ran longer than 15 s");
}

#[test]
fn a_quota_set_by_another_process_is_what_this_one_decides_with_next() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let here = limiter(&server.url()).await;
        for _ in 0..10 {
            here.check("t").await.unwrap();
        }
        // Another process, built with the same quota, doubles it.
        other("double", &server.url());
        // Half of the burst was left: half of the new one is.
        let mut left = 0;
        while here.check("t").await.is_ok() && left < 60 {
            left += 1;
        }
        assert!((20..=22).contains(&left), "{left} left");
        assert_eq!(here.quota(), slow(40));
        assert_eq!(here.bucket_burst(0), Some(10));
    });
}

/// The other process of the test above: not a test of its own.
#[test]
#[ignore = "a child process of a_quota_set_by_another_process_is_what_this_one_decides_with_next"]
fn other_process() {
    let (Ok(role), Ok(url)) = (std::env::var(ROLE_ENV), std::env::var(URL_ENV)) else {
        return;
    };
    runtime().block_on(async {
        let there = limiter(&url).await;
        match role.as_str() {
            "double" => there.set_quota(slow(40)).await.unwrap(),
            other => panic!("no role {other}"),
        }
    });
}
