//! A lease cut off from Redis, against a real `redis-server`: the holder
//! hears that it is lost no later than the server may give its seats to
//! another. Real time (a server's clock cannot be paused with tokio's),
//! each wait bounded by a few seconds.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Arg, Cmd, RedisFuture, Value};
use shuffle_limiter::inflight::{InFlight, LeaseOptions};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/leases.rs"]
mod support;

use redis_server::RedisServer;
use support::{closed, limit, one_at_a_time, runtime};

/// Whether `cmd` is an acquire of the limit whose counter is `counter`
/// (only acquire.lua names the counter).
fn is_acquire(cmd: &Cmd, counter: &str) -> bool {
    cmd.args_iter()
        .any(|arg| matches!(arg, Arg::Simple(a) if a == counter.as_bytes()))
}

/// A connection of process one to the shared server that, once `cut`,
/// hangs (a partition: no answer, no error) or fails at once every command
/// but the acquires: the renewals and releases of its leases.
#[derive(Clone)]
struct Cut {
    inner: MultiplexedConnection,
    counter: Arc<str>,
    cut: Arc<AtomicBool>,
    hang: bool,
}

impl ConnectionLike for Cut {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        if self.cut.load(Ordering::SeqCst) && !is_acquire(cmd, &self.counter) {
            if self.hang {
                return Box::pin(std::future::pending());
            }
            let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "cut");
            return Box::pin(async move { Err(refused.into()) });
        }
        self.inner.req_packed_command(cmd)
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

/// Process one holds the only seat (C = 1) and is cut off from Redis;
/// process two waits for the seat. When two gets it (the lease expired on
/// the server), one's lease must say it is lost.
async fn cut_off(server: &RedisServer, name: &str, options: LeaseOptions, hang: bool) {
    let cut = Cut {
        inner: server.connection().await,
        counter: format!("{{{name}}}:lease").into(),
        cut: Arc::default(),
        hang,
    };
    let one = InFlight::builder()
        .concurrency(1)
        .pools(1)
        .build_redis(cut.clone(), options.clone())
        .await
        .unwrap();
    let two = limit(server, (1, 1, 1), options).await;
    let a = one.try_acquire("t").await.unwrap();
    cut.cut.store(true, Ordering::SeqCst);
    let taken = support::within(Duration::from_secs(6), || async {
        two.try_acquire("t").await.ok()
    })
    .await;
    let (after, b) = taken.expect("the seat came back within 6 s");
    assert!(
        a.is_lost(),
        "process two holds the only seat (token {:?}, {after:?} after the cut) while \
         process one's lease {:?} is not lost: two holders of C = 1",
        b.token(),
        a.token()
    );
}

/// Promised by the guide's *Lost leases* (and [`Lease`]'s docs): a renewal
/// "that cannot reach Redis for a whole TTL, marks it lost ... Its seats
/// may already be someone else's, so stop the work it guarded". Renewals
/// that fail at once, every 0.8 s of a 1 s TTL (a `renew_every` the docs
/// allow: "less than the TTL"): the lease expires at 1 s, and was said
/// lost only at the renewal after it, at 1.6 s. (It is said lost 0.1 s
/// early now, half what the interval leaves: room for a loaded host.)
///
/// [`Lease`]: shuffle_limiter::inflight::Lease
#[test]
fn a_lease_cut_off_for_its_ttl_is_lost_when_another_takes_its_seat() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let options = closed("cut", Duration::from_secs(1)).renew_every(Duration::from_millis(800));
        cut_off(&server, "cut", options, false).await;
    });
}

/// As above, with the defaults (a third of the TTL) and renewals that hang
/// until their deadline (300 ms): a 3 s lease expires at 3 s, and was said
/// lost at about 3.9 s (three deadlines late).
#[test]
fn a_lease_whose_renewals_hang_is_lost_when_another_takes_its_seat() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let options = closed("hang", Duration::from_secs(3)).deadline(Duration::from_millis(300));
        cut_off(&server, "hang", options, true).await;
    });
}

/// The other side of the two above: a lease whose renewals are answered is
/// never said lost, even with a renewal interval near the TTL (the docs
/// allow any less than it), where a margin of one deadline (2 s here)
/// would say it lost before its first renewal: the margin is half what the
/// interval leaves of the TTL (150 ms here), so a renewal has that long.
#[test]
fn a_lease_renewed_in_its_turn_is_never_lost_however_close_the_interval() {
    let _serial = one_at_a_time();
    let server = RedisServer::start();
    runtime().block_on(async {
        let options =
            closed("renewed", Duration::from_secs(1)).renew_every(Duration::from_millis(700));
        let inflight = limit(&server, (1, 1, 1), options).await;
        let lease = inflight.try_acquire("t").await.unwrap();
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(
            !lease.is_lost(),
            "a lease renewed every 700 ms of a 1 s TTL was said lost"
        );
    });
}
