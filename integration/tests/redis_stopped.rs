//! A Redis server that stops answering (SIGSTOP: connected, silent) under a
//! running limiter: every operation a user can call over Redis returns
//! within the limiter's deadline (a change of the quota or N within the
//! connect timeout), with [`Error::Timeout`] where it can fail, instead of
//! hanging as long as the connection does.

use std::future::IntoFuture;
use std::time::{Duration, Instant};

use shuffle_limiter::redis::{Error, FailurePolicy, RedisLimiter, RedisOptions, RedisRetryBudget};
use shuffle_limiter::upstream::HoldOff;
use shuffle_limiter::{DenialReason, Jitter, Limit, Quota, ShardedLimiter};

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

/// A limiter on `server` whose deadline (1 s) is longer than the bounds
/// of the waits below: a wait's bound, not the store's, ends it.
async fn slow_limiter(server: &RedisServer, name: &str, quota: Quota) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(quota)
        .buckets(2)
        .per_tenant(1)
        .name(name)
        .build_redis(&server.url(), options(FailurePolicy::FailClosed))
        .await
        .unwrap()
}

#[test]
fn a_bounded_wait_ends_within_its_bound_when_the_store_deadline_is_longer() {
    let server = RedisServer::start();
    serial(async {
        let limiter = slow_limiter(&server, "bounded", Quota::per_second(2).with_burst(2)).await;
        limiter.check("t").await.unwrap(); // its one token; the next in 1 s
        // Redis goes silent before the wait books: the booking is cut at
        // the bound, a denial by the store.
        server.signal("-STOP");
        let bound = Duration::from_millis(50);
        let denied = within(bound, "wait", limiter.wait("t").within(bound)).await;
        server.signal("-CONT");
        let reason = denied.map(drop).unwrap_err().reason();
        assert_eq!(reason, DenialReason::StoreUnavailable);

        // Booked while Redis answers, silent while the wait sleeps: the
        // slot (1 s on) is kept at once, within the bound (1.5 s), with the
        // quota last heard of.
        let limiter = slow_limiter(&server, "booked", Quota::per_second(2).with_burst(2)).await;
        limiter.check("t").await.unwrap();
        let bound = Duration::from_millis(1500);
        let stop = async {
            tokio::time::sleep(Duration::from_millis(400)).await;
            server.signal("-STOP");
        };
        let wait = within(bound, "wait", limiter.wait("t").within(bound));
        let (granted, ()) = tokio::join!(wait, stop);
        server.signal("-CONT");
        assert!(granted.is_ok(), "{granted:?}");
    });
}

#[test]
fn a_wait_within_zero_is_a_check_however_long_its_round_trip() {
    let server = RedisServer::start();
    serial(async {
        let limiter = slow_limiter(&server, "zero", Quota::per_second(2).with_burst(2)).await;
        // Redis paused for 50 ms: the bound of zero waits for no slot, and
        // the check's round trip is the store's deadline's (1 s) to bound.
        server.signal("-STOP");
        let resume = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            server.signal("-CONT");
        };
        let (granted, ()) = tokio::join!(limiter.wait("t").within(Duration::ZERO), resume);
        assert!(granted.is_ok(), "{granted:?}");
        // Its one token taken, the next a second away: denied at once.
        let denied = within(
            Duration::ZERO,
            "wait",
            limiter.wait("t").within(Duration::ZERO),
        )
        .await;
        assert_eq!(
            denied.map(drop).unwrap_err().reason(),
            DenialReason::Limited
        );
    });
}

#[test]
fn a_wait_denied_by_the_failure_policy_wakes_with_its_jitter() {
    let mut server = RedisServer::start();
    serial(async {
        let limiter = ShardedLimiter::builder()
            .quota(Quota::per_second(2).with_burst(2))
            .buckets(2)
            .per_tenant(1)
            .name("jittered")
            .build_redis(
                &server.url(),
                RedisOptions::new(FailurePolicy::FailClosed)
                    .retry_every(Duration::from_millis(100)),
            )
            .await
            .unwrap();
        server.kill();
        // The store is tried again every 100 ms; each wake-up at least
        // 400 ms late: in 1 s, 3 decisions at most (the first, and one
        // after each of two wake-ups), not 10.
        let jitter = Jitter::new(Duration::from_millis(400), Duration::from_millis(400));
        let run = Duration::from_secs(1);
        let waited = tokio::time::timeout(run, limiter.wait("t").jitter(jitter)).await;
        assert!(waited.is_err(), "granted with Redis down: {waited:?}");
        let asked = limiter.stats().from_policy();
        assert!(
            (1..=3).contains(&asked),
            "{asked} decisions by the policy in {run:?}"
        );
    });
}
