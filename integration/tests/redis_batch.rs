//! Batched decisions ([`RedisOptions::batch`], the default) against a real
//! `redis-server`: the budget under many concurrent decisions, a flood of one tenant that cannot hold back
//! another's decision, callers that leave, a batch that misses the
//! deadline, and the settings refused. (The same answers as in process are
//! in tests/redis.rs, and that a batch applies its decisions exactly as one
//! by one is the differential test in src/redis/script/.)

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shuffle_limiter::redis::{
    BuildError, Decision, FailurePolicy, Layout, MAX_BATCH, RedisLimiter, RedisOptions, Source,
};
use shuffle_limiter::{DenialReason, Limit, Quota, ShardedLimiter};

#[path = "support/batch.rs"]
mod batch;
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/serial.rs"]
mod serial;
use batch::{BATCH, batched_if};
use redis_server::RedisServer;
use serial::{options, serial, server_micros};

/// The most decisions out alone at once, while no batch is out
/// (`MOST_ALONE` of src/redis/batch.rs).
const ALONE: u64 = 12;

/// A batched limiter on `server`: `quota` over 8 buckets, 2 per tenant.
async fn batched(server: &RedisServer, quota: Quota, name: &str) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(quota)
        .buckets(8)
        .per_tenant(2)
        .name(name)
        .build_redis(
            &server.url(),
            batched_if(options(FailurePolicy::FailClosed), true),
        )
        .await
        .unwrap()
}

/// Runs `test` alone, on one thread: a task runs in the order it was woken,
/// so what a test counts is what was answered, not what a busy worker got
/// to.
fn on_one_thread<F: Future>(test: F) -> F::Output {
    let _guard = serial::one_at_a_time();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(test)
}

/// A batched limiter whose window (20 s) sends no batch within a test (only
/// the other rules do), with a budget no test reaches.
async fn windowless(server: &RedisServer, name: &str) -> (Arc<RedisLimiter>, Duration) {
    let window = Duration::from_secs(20);
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(10_000_000))
        .buckets(8)
        .per_tenant(2)
        .name(name)
        .build_redis(
            &server.url(),
            RedisOptions::new(FailurePolicy::FailClosed)
                .deadline(Duration::from_secs(30))
                .batch(64, window),
        )
        .await
        .unwrap();
    assert!(limiter.decide("warm").await.is_granted());
    (Arc::new(limiter), window)
}

/// Redis answers nobody for `millis` ms.
async fn pause(server: &RedisServer, millis: u64) {
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(millis)
        .query_async(&mut server.connection().await)
        .await
        .unwrap();
}

/// On one thread: every task runs until it waits (on Redis, or for a batch).
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// The script calls (by `EVALSHA` or, its library loaded, by `FCALL`)
/// the server counted since the last look, which resets them.
async fn script_calls(server: &RedisServer) -> u64 {
    let (evalsha, fcall) = server.script_calls().await;
    evalsha + fcall
}

/// A task asking `limiter` for tenant `t{i}`.
fn decide(limiter: &Arc<RedisLimiter>, i: usize) -> tokio::task::JoinHandle<Decision> {
    let limiter = Arc::clone(limiter);
    tokio::spawn(async move { limiter.decide(&format!("t{i}")).await })
}

#[test]
fn many_concurrent_batched_decisions_stay_within_the_budget() {
    let server = RedisServer::start();
    serial(async {
        // R = 400/s, B = 40: 64 tasks over 40 tenants ask far more.
        let limiter = Arc::new(
            batched(
                &server,
                Quota::per_second(400).with_burst(40),
                "batched-budget",
            )
            .await,
        );
        let granted = Arc::new(AtomicU64::new(0));
        let first = server_micros(&limiter).await;
        let until = tokio::time::Instant::now() + Duration::from_millis(1500);
        let tasks: Vec<_> = (0..64u64)
            .map(|task| {
                let (limiter, granted) = (limiter.clone(), granted.clone());
                tokio::spawn(async move {
                    let mut i = task;
                    while tokio::time::Instant::now() < until {
                        if limiter.check(format!("t{}", i % 40)).await.is_ok() {
                            granted.fetch_add(1, Ordering::Relaxed);
                        }
                        i += 64;
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        let last = server_micros(&limiter).await;
        let t = (last - first) as f64 / 1e6;
        let (granted, budget) = (granted.load(Ordering::Relaxed), 400.0 * t + 40.0);
        let stats = limiter.stats();
        assert_eq!(stats.from_policy(), 0, "{stats:?}");
        assert!(
            granted as f64 <= budget,
            "{granted} granted in {t:.3} s, budget {budget}"
        );
        // The budget was pressed: every tenant asked all the time.
        assert!(granted as f64 >= 0.8 * budget, "{granted} of {budget}");
    });
}

#[test]
fn a_flood_of_one_tenant_leaves_another_in_the_first_batch_after_it() {
    let server = RedisServer::start();
    on_one_thread(async {
        let limiter =
            Arc::new(batched(&server, Quota::per_second(1_000_000), "batched-flood").await);
        // A tenant on other buckets than the flooder's.
        let flood_shard = limiter.shard("flooder");
        let other = (0..)
            .map(|i| format!("other-{i}"))
            .find(|t| limiter.shard(t).overlap(&flood_shard) == 0)
            .unwrap();
        const FLOOD: u64 = 4000;
        let flooded = Arc::new(AtomicU64::new(0));
        let flood: Vec<_> = (0..FLOOD)
            .map(|_| {
                let (limiter, flooded) = (limiter.clone(), flooded.clone());
                tokio::spawn(async move {
                    limiter.check("flooder").await.unwrap();
                    flooded.fetch_add(1, Ordering::Relaxed);
                })
            })
            .collect();
        // Once the flood is under way (every decision of it asked, the first
        // answered), the other tenant asks.
        while flooded.load(Ordering::Relaxed) == 0 {
            tokio::task::yield_now().await;
        }
        let before = flooded.load(Ordering::Relaxed);
        limiter.check(other.as_str()).await.unwrap();
        let after = flooded.load(Ordering::Relaxed);
        // Its decision went out in the first batch after it came: what was
        // answered meanwhile is what was out when it came (the two batches
        // out, and the twelve of the flood that went alone before any
        // waited), its own batch (where it took a turn beside at most
        // BATCH.0 - 1 of the flood), and batches answered just before it
        // came whose callers had yet to count (each at most BATCH.0): a
        // few batches (121 decisions alone here, 132 once in a run of the
        // whole suite) — not the thousands queued before it.
        assert!(
            after - before <= 5 * u64::from(BATCH.0) + ALONE,
            "{} of the flood decided while the other tenant waited",
            after - before
        );
        assert!(
            after < FLOOD / 2,
            "the flood was nearly over: {after} of {FLOOD}"
        );
        for task in flood {
            task.await.unwrap();
        }
        assert_eq!(limiter.stats().from_policy(), 0);
    });
}

#[test]
fn callers_that_leave_neither_lose_nor_double_tokens() {
    let server = RedisServer::start();
    serial(async {
        // N = k = 2: one shard, 400 tokens, and no refill to speak of during
        // the test (a token per 20 hours per bucket).
        let limiter = Arc::new(
            ShardedLimiter::builder()
                .quota(Quota::new(1, Duration::from_secs(36_000)).with_burst(400))
                .buckets(2)
                .per_tenant(2)
                .name("batched-leave")
                .build_redis(
                    &server.url(),
                    batched_if(options(FailurePolicy::FailClosed), true),
                )
                .await
                .unwrap(),
        );
        let granted = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for i in 0..300u64 {
            let (limiter, granted) = (limiter.clone(), granted.clone());
            let task = tokio::spawn(async move {
                if limiter.check("t").await.is_ok() {
                    granted.fetch_add(1, Ordering::Relaxed);
                }
            });
            // Every third caller leaves, some before their batch leaves,
            // some while it is out.
            if i % 3 == 0 {
                if i % 2 == 0 {
                    tokio::task::yield_now().await;
                }
                task.abort();
            } else {
                tasks.push(task);
            }
        }
        for task in tasks {
            task.await.unwrap();
        }
        // One more decision: once it is answered, every batch before it
        // was applied (one connection, in order).
        limiter.check("t").await.unwrap();
        // The callers that stayed, the probe, and those that left after
        // hearing their grant.
        let granted = granted.load(Ordering::Relaxed) + 1;
        let taken = 400 - limiter.remaining("t").await.unwrap();
        // Each grant a caller heard took its token; a caller that left
        // took at most its own, once.
        assert!(
            granted >= 201,
            "{granted}: the callers that stayed were all granted"
        );
        assert!(
            taken >= granted && taken - granted <= 100,
            "{taken} tokens taken for {granted} grants heard, 100 callers having left"
        );
        assert_eq!(limiter.stats().from_policy(), 0);
    });
}

#[test]
fn a_batch_that_misses_the_deadline_fails_each_of_its_decisions_by_the_policy() {
    let server = RedisServer::start();
    serial(async {
        let options = RedisOptions::new(FailurePolicy::FailClosed)
            .deadline(Duration::from_millis(100))
            .batch(BATCH.0, BATCH.1);
        let limiter = Arc::new(
            ShardedLimiter::builder()
                .quota(Quota::per_second(1000))
                .buckets(8)
                .name("batched-late")
                .build_redis(&server.url(), options)
                .await
                .unwrap(),
        );
        limiter.check("warm").await.unwrap();
        pause(&server, 400).await;
        let decisions: Vec<_> = (0..20).map(|i| decide(&limiter, i)).collect();
        for decision in decisions {
            let decision = decision.await.unwrap();
            assert_eq!(decision.source(), Source::Policy);
            let denied = decision.into_result().unwrap_err();
            assert_eq!(denied.reason(), DenialReason::StoreUnavailable);
        }
        assert_eq!(limiter.stats().from_policy(), 20);
    });
}

#[test]
fn batch_settings_that_cannot_work_are_refused_before_connecting() {
    serial(async {
        let build = |options: RedisOptions| async {
            // Nothing listens there: a refusal comes before any connection.
            ShardedLimiter::builder()
                .quota(Quota::per_second(10))
                .name("refused")
                .build_redis("redis://127.0.0.1:1", options)
                .await
                .unwrap_err()
        };
        let new = || RedisOptions::new(FailurePolicy::FailClosed);
        let ms = Duration::from_millis;
        for most in [0, MAX_BATCH + 1] {
            let refused = build(new().batch(most, ms(1))).await;
            assert!(
                matches!(refused, BuildError::BatchSize { max_decisions } if max_decisions == most)
            );
            assert!(refused.to_string().contains("use 1 to 1024"), "{refused}");
        }
        for window in [Duration::ZERO, ms(100), ms(5000)] {
            let refused = build(new().batch(8, window)).await;
            assert!(
                matches!(refused, BuildError::BatchWindow { window: w, .. } if w == window),
                "{refused:?}"
            );
        }
        let refused = build(new().batch(8, ms(1)).layout(Layout::Spread)).await;
        assert!(matches!(refused, BuildError::SpreadBatching), "{refused:?}");
    });
}

/// A batch window as long as a `Duration` holds (under a deadline as long)
/// gathers as any other: the task sending batches does not panic adding it
/// to the clock, and every decision is Redis's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_of_half_a_duration_max_batches() {
    let server = RedisServer::start();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(100))
        .buckets(4)
        .per_tenant(2)
        .name("huge-window")
        .build_redis(
            &server.url(),
            RedisOptions::new(FailurePolicy::FailClosed)
                .deadline(Duration::MAX)
                .batch(64, Duration::from_secs(u64::MAX / 2)),
        )
        .await
        .unwrap();
    for _ in 0..3 {
        let decision = limiter.decide("t").await;
        let error = decision.error().map(ToString::to_string);
        assert_eq!(
            (decision.source(), decision.is_granted()),
            (Source::Redis, true),
            "{error:?}"
        );
    }
}

/// Up to twelve decisions at a time go alone (no batch out, nothing
/// waiting: each from its caller's task, without a batch); the next waits
/// for a batch, which leaves at once, no batch being out: not after the
/// window, however long, nor when those alone are back.
#[test]
fn twelve_decisions_go_alone_and_the_next_leaves_at_once_in_a_batch() {
    let server = RedisServer::start();
    on_one_thread(async {
        let (limiter, window) = windowless(&server, "batched-alone").await;
        server.command_stats().await;
        // Nothing is answered for a while: every call made stays out.
        pause(&server, 300).await;
        let started = tokio::time::Instant::now();
        let mut decisions = Vec::new();
        for i in 0..ALONE as usize {
            // Each goes out (alone) before the next comes.
            decisions.push(decide(&limiter, i));
            settle().await;
        }
        decisions.extend((0..10).map(|i| decide(&limiter, 100 + i)));
        for decision in decisions {
            let decision = decision.await.unwrap();
            assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
            assert!(decision.is_granted());
        }
        // Twelve alone, and the ten others in one batch.
        assert_eq!(script_calls(&server).await, ALONE + 1);
        // Well before the window: the ten left at once.
        assert!(
            started.elapsed() < window / 4,
            "the waiting decisions took {:?}",
            started.elapsed()
        );
        assert_eq!(limiter.stats().from_policy(), 0);
    });
}

/// Batching is on by default in the one-slot layout: forty decisions asked
/// at once, while Redis answers nobody, go as twelve alone and one batch;
/// `unbatched()`, as forty calls.
#[test]
fn the_default_batches_and_unbatched_makes_a_call_per_decision() {
    let server = RedisServer::start();
    on_one_thread(async {
        let new = || RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_secs(30));
        for (options, name, calls) in [
            (new(), "batched-default", ALONE + 1),
            (new().unbatched(), "unbatched", 40),
        ] {
            let limiter = ShardedLimiter::builder()
                .quota(Quota::per_second(10_000_000))
                .buckets(8)
                .per_tenant(2)
                .name(name)
                .build_redis(&server.url(), options)
                .await
                .unwrap();
            assert!(limiter.decide("warm").await.is_granted());
            let limiter = Arc::new(limiter);
            server.command_stats().await;
            pause(&server, 300).await;
            let decisions: Vec<_> = (0..40).map(|i| decide(&limiter, i)).collect();
            for decision in decisions {
                let decision = decision.await.unwrap();
                assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
                assert!(decision.is_granted());
            }
            assert_eq!(script_calls(&server).await, calls, "{name}");
        }
    });
}

/// While a batch is out, the next leaves once as many decisions wait as
/// are out (Redis has it before it is done with those out), not when one
/// is back; while two are, once one is back. With Redis answering nobody:
/// twelve decisions alone, one (a batch, at once), then sixteen (as many
/// as the thirteen out, and more: a batch, at once), then three (two
/// batches out: they wait) make fifteen calls, where waiting for a batch to
/// be back would make fourteen.
#[test]
fn the_next_batch_leaves_once_as_many_wait_as_are_out() {
    let server = RedisServer::start();
    on_one_thread(async {
        let (limiter, _) = windowless(&server, "batched-next").await;
        server.command_stats().await;
        pause(&server, 300).await;
        let mut decisions = Vec::new();
        for i in 0..=ALONE as usize {
            decisions.push(decide(&limiter, i));
            settle().await;
        }
        decisions.extend((0..16).map(|i| decide(&limiter, 100 + i)));
        settle().await;
        decisions.extend((0..3).map(|i| decide(&limiter, 200 + i)));
        for decision in decisions {
            let decision = decision.await.unwrap();
            assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
        }
        assert_eq!(script_calls(&server).await, ALONE + 3);
    });
}

/// A last decision is answered by Redis once everything before it was, and
/// the server counted at most the calls out (twelve alone, two batches)
/// and the last.
async fn all_out_then_the_last(limiter: &RedisLimiter, server: &RedisServer) {
    let last = limiter.decide("last").await;
    assert_eq!(last.source(), Source::Redis, "{:?}", last.error());
    let calls = script_calls(server).await;
    assert!(
        calls <= ALONE + 3,
        "{calls} script calls for {ALONE} alone, two batches and the last"
    );
}

/// A decision gone alone stays out until Redis answers or the deadline
/// passes, though its caller left: callers that give up while Redis
/// answers nobody do not each put a call out (at most twelve alone and two
/// batches are out, the rest wait in the process, where a caller that
/// leaves takes nothing).
#[test]
fn callers_that_leave_do_not_each_put_a_call_out() {
    let server = RedisServer::start();
    on_one_thread(async {
        let (limiter, _) = windowless(&server, "batched-leave").await;
        server.command_stats().await;
        pause(&server, 300).await;
        for i in 0..40 {
            let task = decide(&limiter, i);
            settle().await;
            task.abort();
            assert!(task.await.unwrap_err().is_cancelled());
        }
        all_out_then_the_last(&limiter, &server).await;
    });
}

/// The same on two workers, each caller giving up by its own timeout.
#[test]
fn callers_that_time_out_do_not_each_put_a_call_out() {
    let server = RedisServer::start();
    serial(async {
        let (limiter, _) = windowless(&server, "batched-time-out").await;
        server.command_stats().await;
        pause(&server, 2000).await;
        for i in 0..40 {
            let tenant = format!("t{i}");
            let decision = limiter.decide(tenant.as_str());
            let given_up = tokio::time::timeout(Duration::from_millis(20), decision).await;
            assert!(given_up.is_err(), "Redis is paused: nothing is answered");
        }
        all_out_then_the_last(&limiter, &server).await;
    });
}

/// No decision waits for the window (20 s) when a rule says it should
/// have left, whatever the interleaving of decisions gone alone, batches,
/// arrivals and callers that leave, on two workers.
#[test]
fn no_decision_waits_for_the_window_on_two_workers() {
    let server = RedisServer::start();
    serial(async {
        let (limiter, window) = windowless(&server, "batched-wake").await;
        for round in 0..20u64 {
            let started = tokio::time::Instant::now();
            let tasks: Vec<_> = (0..1 + (round * 7) % 13)
                .map(|t| {
                    let limiter = Arc::clone(&limiter);
                    tokio::spawn(async move {
                        for i in 0..20u64 {
                            let tenant = format!("t{}", (t * 31 + i) % 5);
                            let decision = limiter.decide(tenant.as_str());
                            if (t + i) % 9 == 0 {
                                // This caller leaves early.
                                let _ = tokio::time::timeout(Duration::from_micros(200), decision)
                                    .await;
                            } else {
                                let decision = decision.await;
                                assert_eq!(decision.source(), Source::Redis);
                            }
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await.unwrap();
            }
            assert!(
                started.elapsed() < window / 4,
                "round {round} took {:?}",
                started.elapsed()
            );
        }
    });
}
