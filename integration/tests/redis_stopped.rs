//! A Redis server that stops answering (SIGSTOP: connected, silent) under a
//! running limiter: every operation a user can call over Redis returns
//! within the limiter's deadline (a change of the quota or N within the
//! connect timeout), with [`Error::Timeout`] where it can fail, instead of
//! hanging as long as the connection does.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use shuffle_limiter::redis::{Error, FailurePolicy, RedisLimiter, RedisRetryBudget};
use shuffle_limiter::upstream::HoldOff;
use shuffle_limiter::{Limit, Quota, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/serial.rs"]
mod serial;
use redis_server::RedisServer;
use serial::{options, serial};

const DEADLINE: Duration = Duration::from_millis(50);
/// The connect timeout, which bounds a change of the quota or N.
const CHANGE: Duration = Duration::from_millis(200);
/// What an operation may take beyond its bound: the timer's millisecond and
/// the scheduler of a busy two-core machine. A hang would take the whole
/// outage: the guard below.
const MARGIN: Duration = Duration::from_millis(300);
/// How long an operation is given before the test calls it hung.
const HUNG: Duration = Duration::from_secs(3);

async fn limiter(server: &RedisServer) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(Quota::per_second(100).with_burst(40))
        .buckets(4)
        .per_tenant(2)
        .name("stopped")
        .build_redis(
            &server.url(),
            options(FailurePolicy::FailClosed)
                .deadline(DEADLINE)
                .connect_timeout(CHANGE),
        )
        .await
        .unwrap()
}

/// Runs `op`, failing the test if it does not return within `bound` and the
/// margin; what it returned.
async fn within<T>(bound: Duration, what: &str, op: impl IntoFuture<Output = T>) -> T {
    let started = Instant::now();
    let Ok(out) = tokio::time::timeout(HUNG, op).await else {
        panic!("{what} hung past {HUNG:?} on a stopped server");
    };
    let took = started.elapsed();
    assert!(took <= bound + MARGIN, "{what} took {took:?}");
    out
}

/// [`within`] the deadline.
async fn bounded<T>(what: &str, op: impl IntoFuture<Output = T>) -> T {
    within(DEADLINE, what, op).await
}

/// `result` is the deadline's error.
#[track_caller]
fn timed_out<T: std::fmt::Debug>(what: &str, result: Result<T, Error>) {
    assert!(
        matches!(result, Err(Error::Timeout { .. })),
        "{what}: {result:?}"
    );
}

#[test]
fn every_operation_returns_within_its_deadline_on_a_stopped_server() {
    let server = RedisServer::start();
    serial(async {
        let limiter = limiter(&server).await;
        let budget = RedisRetryBudget::of(&limiter);
        let shard = limiter.shard("tenant");
        let grant = limiter.check("tenant").await.unwrap();
        server.signal("-STOP");

        let denied = bounded("check", limiter.check("tenant")).await;
        assert!(denied.is_err(), "fail closed: {denied:?}");
        timed_out("refund", bounded("refund", limiter.refund(grant)).await);
        let quota = Quota::per_second(50).with_burst(20);
        let changed = within(CHANGE, "set_quota", limiter.set_quota(quota)).await;
        timed_out("set_quota", changed);
        let changed = within(CHANGE, "set_buckets", limiter.set_buckets(3)).await;
        timed_out("set_buckets", changed);
        let both = limiter.set_quota_and_buckets(quota, 3);
        timed_out("both", within(CHANGE, "both", both).await);
        let wait = limiter.wait("tenant").within(DEADLINE);
        let denied = within(DEADLINE * 2, "wait", wait).await;
        assert!(denied.is_err(), "fail closed: {denied:?}");
        timed_out(
            "remaining",
            bounded("remaining", limiter.remaining("tenant")).await,
        );
        timed_out("snapshot", bounded("snapshot", limiter.snapshot()).await);
        let hold = HoldOff::tenant("tenant", Duration::from_secs(1));
        timed_out(
            "hold_off",
            bounded("hold_off", limiter.hold_off(hold)).await,
        );
        timed_out(
            "try_withdraw",
            bounded("try_withdraw", budget.try_withdraw(&shard)).await,
        );
        timed_out("banked", bounded("banked", budget.banked(&shard)).await);

        server.signal("-CONT");
        // The changes sent before the stop may run now or not at all: made
        // again, each is made once, whichever happened.
        limiter.set_quota_and_buckets(quota, 3).await.unwrap();
        assert_eq!(limiter.quota(), quota);
        assert_eq!(limiter.buckets(), 3);
    });
}
