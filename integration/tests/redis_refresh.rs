//! The quota key changing between the script's answer and the limiter's
//! own read of it, against a real `redis-server`: the draw finds a newer
//! version, and by the time the process reads the key (a plain `GET`) it
//! holds something else. That is data, like every other stray value, and
//! must deny under `FailOpen`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use shuffle_limiter::redis::{Error, FailurePolicy, RedisOptions, Source};
use shuffle_limiter::{Quota, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

/// A connection that, once armed, replaces the quota key with `stray`
/// right before the first plain `GET` it carries.
#[derive(Clone)]
struct Swapping {
    inner: MultiplexedConnection,
    armed: Arc<AtomicBool>,
    stray: Arc<Cmd>,
}

impl ConnectionLike for Swapping {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let get = cmd.args_iter().next().is_some_and(
                |arg| matches!(arg, redis::Arg::Simple(word) if word.eq_ignore_ascii_case(b"GET")),
            );
            if get && self.armed.swap(false, Ordering::Relaxed) {
                let mut pipe = redis::pipe();
                pipe.atomic().cmd("DEL").arg("{race}:quota").ignore();
                pipe.add_command((*self.stray).clone()).ignore();
                let () = pipe.query_async(&mut self.inner).await?;
            }
            self.inner.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_key_turned_stray_before_the_limiter_reads_it_denies() {
    let server = RedisServer::start();
    let mut hash = redis::cmd("HSET");
    hash.arg("{race}:quota").arg("f").arg("v");
    let mut bytes = redis::cmd("SET");
    bytes
        .arg("{race}:quota")
        .arg(b"\xff\xfe 1 2 3 4".as_slice());
    for stray in [hash, bytes] {
        let armed = Arc::new(AtomicBool::new(false));
        let connection = Swapping {
            inner: server.connection().await,
            armed: Arc::clone(&armed),
            stray: Arc::new(stray),
        };
        let limiter = ShardedLimiter::builder()
            .quota(Quota::new(8, Duration::from_secs(1000)).with_burst(8))
            .buckets(2)
            .per_tenant(2)
            .name("race")
            .build_redis_with(
                connection,
                RedisOptions::new(FailurePolicy::FailOpen).deadline(Duration::from_secs(2)),
            )
            .await
            .unwrap();
        // A newer version than the limiter's: the script answers "stale",
        // and the limiter reads the key, which is then stray.
        let mut admin = server.connection().await;
        let () = redis::cmd("SET")
            .arg("{race}:quota")
            .arg("5 8 1000000000000 8 2")
            .query_async(&mut admin)
            .await
            .unwrap();
        armed.store(true, Ordering::Relaxed);
        let decision = limiter.decide("t").await;
        assert!(!armed.load(Ordering::Relaxed), "the limiter read the key");
        assert_eq!(decision.source(), Source::Policy);
        let error = decision.error();
        assert!(matches!(error, Some(Error::NotAQuota { .. })), "{error:?}");
        assert!(!decision.is_granted(), "FailOpen granted on {error:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quota_key_or_bucket_key_of_bytes_that_are_not_utf8_denies() {
    let server = RedisServer::start();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::new(8, Duration::from_secs(1000)).with_burst(8))
        .buckets(2)
        .per_tenant(2)
        .name("bytes")
        .build_redis(
            &server.url(),
            RedisOptions::new(FailurePolicy::FailOpen).deadline(Duration::from_secs(2)),
        )
        .await
        .unwrap();
    let mut admin = server.connection().await;
    let () = redis::cmd("SET")
        .arg("{bytes}:quota")
        .arg(b"\xff\xfe\r\n 1 2 3 4".as_slice())
        .query_async(&mut admin)
        .await
        .unwrap();
    let decision = limiter.decide("t").await;
    let error = decision.error();
    assert!(matches!(error, Some(Error::NotAQuota { .. })), "{error:?}");
    assert!(!decision.is_granted(), "FailOpen granted on {error:?}");
    // A bucket key of such bytes is not a time: repaired as empty.
    let () = redis::cmd("DEL")
        .arg("{bytes}:quota")
        .query_async(&mut admin)
        .await
        .unwrap();
    for b in 0..2 {
        let () = redis::cmd("SET")
            .arg(limiter.key(b).unwrap())
            .arg(b"\xff\r\n".as_slice())
            .query_async(&mut admin)
            .await
            .unwrap();
    }
    let decision = limiter.decide("t").await;
    assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
    assert!(!decision.is_granted(), "an empty bucket granted");
}
