//! In-flight acquires over Redis whose reply never came — the deadline
//! missed, the future dropped — given back: the seats the server took for
//! them late are free again at once, not held by no one until the TTL; and
//! a give-back that reaches Redis before its acquire stops it.
//!
//! Real time: a stopped `redis-server` (SIGSTOP) cannot be paused with
//! tokio's clock. The TTL is a minute and each bound 10 s, so a seat back
//! within a bound was given back, not expired, even on a loaded machine.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Arg, AsyncCommands, Cmd, RedisFuture, Value};
use shuffle_limiter::inflight::{InFlight, LeaseError, LeaseSource, RedisInFlight};
use shuffle_limiter::redis::Error;

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/leases.rs"]
mod support;

use redis_server::RedisServer;
use support::{closed, limit, one_at_a_time, runtime};

/// Waits (10 s at most, against a TTL of a minute) until the acquire the
/// stopped server ran late has taken its token and been given back: the
/// counter `{name}:lease` exists, no seat of the one pool is held, and no
/// acquire's record is left. The seat is free again long before the TTL.
async fn given_back(
    server: &RedisServer,
    limit: &RedisInFlight<MultiplexedConnection>,
    name: &str,
) {
    let mut connection = support::connect(server).await;
    let counter = format!("{{{name}}}:lease");
    let records = format!("{{{name}}}:acq:*");
    let done = support::within(Duration::from_secs(10), || {
        let mut connection = connection.clone();
        let (counter, records) = (&counter, &records);
        async move {
            let ran: bool = connection.exists(counter).await.unwrap();
            let held = support::held(&mut connection, limit, 0).await;
            let left: Vec<String> = connection.keys(records).await.unwrap();
            (ran && held == 0 && left.is_empty()).then_some(())
        }
    })
    .await;
    let held = support::held(&mut connection, limit, 0).await;
    assert!(
        done.is_some(),
        "{held} seat still held 10 s after Redis resumed"
    );
    let lease = limit.try_acquire("t").await.unwrap();
    assert_eq!(lease.source(), LeaseSource::Redis);
}

/// An acquire whose reply comes after its deadline (Redis stopped
/// meanwhile) is answered by the policy; the lease the script makes when
/// Redis resumes is given back at once, not held by no one until the TTL.
#[test]
fn an_acquire_past_its_deadline_is_given_back() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let late = closed("late", Duration::from_secs(60))
            .deadline(Duration::from_millis(200))
            .retry_every(Duration::from_millis(10));
        let limit = limit(&server, (1, 1, 1), late).await;
        server.signal("-STOP");
        let refused = limit.try_acquire("t").await.unwrap_err();
        assert!(
            matches!(refused, LeaseError::Redis(Error::Timeout { .. })),
            "{refused}"
        );
        // Stopped past the give-back's own deadline too: both wait unread.
        tokio::time::sleep(Duration::from_millis(500)).await;
        server.signal("-CONT");
        given_back(&server, &limit, "late").await;
    });
}

/// The same for an acquire whose caller goes away before the deadline:
/// dropping its future gives it back.
#[test]
fn a_dropped_acquire_is_given_back() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let options = closed("dropped", Duration::from_secs(60)).deadline(Duration::from_secs(5));
        let limit = limit(&server, (1, 1, 1), options).await;
        server.signal("-STOP");
        let gone = tokio::time::timeout(Duration::from_millis(50), limit.try_acquire("t")).await;
        assert!(gone.is_err(), "dropped while Redis is stopped");
        tokio::time::sleep(Duration::from_millis(500)).await;
        server.signal("-CONT");
        given_back(&server, &limit, "dropped").await;
    });
}

/// A connection that sends the acquires of the limit `name` (the commands
/// naming its counter) `delay` late, whether their caller still waits or
/// not, as a slow path to the server would; everything else at once. The
/// late acquire's reply is kept.
#[derive(Clone)]
struct Slow {
    inner: MultiplexedConnection,
    counter: Arc<str>,
    delay: Arc<Mutex<Duration>>,
    replies: Arc<Mutex<Vec<Value>>>,
}

impl ConnectionLike for Slow {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let delay = *self.delay.lock().unwrap();
        let counter = self.counter.as_bytes();
        let acquire = cmd
            .args_iter()
            .any(|arg| matches!(arg, Arg::Simple(a) if a == counter));
        if !acquire || delay.is_zero() {
            return self.inner.req_packed_command(cmd);
        }
        let (mut inner, cmd, replies) = (self.inner.clone(), cmd.clone(), self.replies.clone());
        let sent = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let reply = inner.req_packed_command(&cmd).await;
            if let Ok(value) = &reply {
                replies.lock().unwrap().push(value.clone());
            }
            reply
        });
        Box::pin(async move { sent.await.expect("the late send") })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// An acquire that reaches Redis after the give-back its caller sent when
/// the deadline passed (here it is sent 600 ms late; the give-back at once)
/// finds the give-back's tombstone and takes nothing: no seat, no token.
#[test]
fn an_acquire_that_runs_after_its_give_back_takes_nothing() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = support::connect(&server).await;
        let slow = Slow {
            inner: connection.clone(),
            counter: "{tomb}:lease".into(),
            delay: Arc::new(Mutex::new(Duration::from_millis(600))),
            replies: Arc::default(),
        };
        // A deadline of 300 ms: the tombstone lives 1.2 s from about 300 ms.
        let options = closed("tomb", Duration::from_secs(60))
            .deadline(Duration::from_millis(300))
            .retry_every(Duration::from_millis(10));
        let limit = InFlight::builder()
            .concurrency(1)
            .build_redis(slow.clone(), options)
            .await
            .unwrap();
        let refused = limit.try_acquire("t").await.unwrap_err();
        assert!(
            matches!(refused, LeaseError::Redis(Error::Timeout { .. })),
            "{refused}"
        );
        let ran = support::within(Duration::from_secs(10), || {
            let replies = slow.replies.lock().unwrap().clone();
            async move { replies.first().cloned() }
        })
        .await;
        let (_, reply) = ran.expect("the late acquire ran within 10 s");
        assert_eq!(reply, Value::Array(vec![Value::Int(0), Value::Int(-1)]));
        let pool = limit.key(0).unwrap();
        let held: usize = connection.zcard(pool).await.unwrap();
        assert_eq!(held, 0, "the late acquire took a seat");
        let counted: bool = connection.exists("{tomb}:lease").await.unwrap();
        assert!(!counted, "the late acquire took a token");
        *slow.delay.lock().unwrap() = Duration::ZERO;
        let lease = limit.try_acquire("t").await.unwrap();
        assert_eq!(lease.source(), LeaseSource::Redis);
    });
}

/// A connection that sends each acquire of the limit whose counter is
/// `counter` twice and answers the second reply, as redis-rs's cluster
/// client does when the connection drops after the server ran the script
/// (`RetryMethod::Reconnect`: the same command, resent).
#[derive(Clone)]
struct Twice {
    inner: MultiplexedConnection,
    counter: Arc<str>,
}

impl ConnectionLike for Twice {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let counter = self.counter.as_bytes();
        let acquire = cmd
            .args_iter()
            .any(|arg| matches!(arg, Arg::Simple(a) if a == counter));
        if !acquire {
            return self.inner.req_packed_command(cmd);
        }
        Box::pin(async move {
            // The first reply is lost with the connection.
            let _ = self.inner.req_packed_command(cmd).await?;
            self.inner.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

/// Promised by the guide's *Failures*: a caller that never gets its lease
/// has it given back at once (otherwise "its seats would stay taken by no
/// one until the TTL"). An acquire the client sent twice found its own
/// record the second time, answered "busy" as for a tombstone, and the seat
/// its first run took stayed held by no one for the whole minute of the
/// TTL. Now the second run's answer is "not answered": the give-back runs.
#[test]
fn a_resent_acquire_leaves_no_seat_held_by_no_one() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let twice = Twice {
            inner: server.connection().await,
            counter: "{resent}:lease".into(),
        };
        let options = closed("resent", Duration::from_secs(60));
        let one = InFlight::builder()
            .concurrency(1)
            .pools(1)
            .build_redis(twice, options.clone())
            .await
            .unwrap();
        let answer = one.try_acquire("t").await;
        let heard = format!("{answer:?}");
        // Whatever it answered, nobody holds a seat once the answer is
        // dropped: a lease releases it, a refusal took none.
        drop(answer);
        let free = support::within(Duration::from_secs(3), || async {
            (support::seats(&server, &one, 0).await == 0).then_some(())
        })
        .await;
        let held = support::seats(&server, &one, 0).await;
        assert!(
            free.is_some(),
            "the caller heard {heard}, yet {held} seat of C = 1 is held by no one \
             (until the 60 s TTL)"
        );
        let two = limit(&server, (1, 1, 1), options).await;
        assert!(two.try_acquire("t").await.is_ok());
    });
}
