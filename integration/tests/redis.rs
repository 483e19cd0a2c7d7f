//! The Redis backend against a real `redis-server`, started by each test on a
//! free 127.0.0.1 port and killed when the test ends: the same decisions as
//! in process, isolation, one round trip per decision, cached denials.
//!
//! The tests need `redis-server` on the PATH (Debian: `apt-get install
//! redis-server`), or its path in `REDIS_SERVER`. They run one at a time, so
//! that the throughput checks do not compete for the CPU.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, Value};
use shuffle_limiter::redis::{Decision, FailurePolicy, RedisLimiter, Source};
use shuffle_limiter::{Limit, ManualClock, Quota, Request, ShardedLimiter};

#[path = "support/batch.rs"]
mod batch;
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/serial.rs"]
mod serial;
use redis_server::{RedisServer, stat};
use serial::{options, redis_limiter, serial};
#[path = "support/same_answers.rs"]
mod same_answers;
use same_answers::assert_same_answers;

// ---------------------------------------------------------------------------
// The same decisions as in process.

#[test]
fn the_redis_limiter_answers_as_the_in_process_limiter() {
    answers_as_in_process(false);
}

#[test]
fn the_redis_limiter_answers_as_the_in_process_limiter_when_batching() {
    answers_as_in_process(true);
}

fn answers_as_in_process(batched: bool) {
    let server = RedisServer::start();
    serial(async {
        // One token per 8000 s per bucket: the server's clock, which runs
        // during the test, never refills one, and the in-process clock
        // stands still, so both see the same buckets. (The draw itself is
        // compared with the script input by input in src/redis/script/.)
        let builder = ShardedLimiter::builder()
            .quota(Quota::new(8, Duration::from_secs(8000)).with_burst(32))
            .buckets(8)
            .per_tenant(2)
            .salt(b"differential")
            .name("differential");
        let local = builder.clone().clock(ManualClock::new()).build().unwrap();
        let options = options(FailurePolicy::FailClosed).cache_denials(false);
        let remote = builder
            .build_redis(&server.url(), batch::batched_if(options, batched))
            .await
            .unwrap();
        assert_eq!(remote.bucket_interval(), local.bucket_interval());
        assert_same_answers(&local, &remote, 600).await;
    });
}

#[test]
fn a_tenant_borrows_over_redis_exactly_as_in_process() {
    let server = RedisServer::start();
    serial(async {
        // 8 buckets of 4 tokens that never refill during the test; a
        // tenant owns 2 and may borrow from the other 6 down to half.
        let builder = ShardedLimiter::builder()
            .quota(Quota::new(8, Duration::from_secs(8000)).with_burst(32))
            .buckets(8)
            .per_tenant(2)
            .borrow_from(6)
            .lender_reserve(0.5)
            .name("borrowing");
        let local = builder.clone().clock(ManualClock::new()).build().unwrap();
        let remote = builder
            .build_redis(&server.url(), options(FailurePolicy::FailClosed))
            .await
            .unwrap();
        for tenant in ["first", "second"] {
            let shard = local.shard(tenant);
            assert_eq!(remote.shard(tenant), shard);
            let mut answers = Vec::new();
            loop {
                let (want, got) = (local.check(tenant), remote.check(tenant).await);
                assert_eq!(want.is_ok(), got.is_ok(), "{tenant}: {want:?} {got:?}");
                let Ok(got) = got else { break };
                assert_eq!(got.borrowed(), shard.spill().contains(&got.bucket()));
                answers.push(got.borrowed());
            }
            let borrowed = answers.iter().filter(|&&b| b).count();
            // The first drains its own 8 tokens and 2 above the reserve of
            // each of its 6 spill buckets; the second finds some of its own
            // and spill buckets drained by the first.
            if tenant == "first" {
                assert_eq!((answers.len(), borrowed), (20, 12), "{answers:?}");
            }
            assert!(
                answers[..answers.len() - borrowed].iter().all(|&b| !b),
                "own first: {answers:?}"
            );
        }
    });
}

// ---------------------------------------------------------------------------
// Isolation.

#[test]
fn a_noisy_tenant_drains_only_its_own_shard() {
    let server = RedisServer::start();
    serial(async {
        // 10 tokens per bucket, one more every 6 minutes: nothing refills
        // while the test runs.
        let limiter = redis_limiter(
            &server,
            Quota::new(160, Duration::from_secs(3600)),
            (16, 2),
            "isolation",
            FailurePolicy::FailClosed,
        )
        .await;
        let noisy = limiter.shard("noisy");
        let mut granted = 0;
        for _ in 0..300 {
            let decision = limiter.decide("noisy").await;
            assert_ne!(decision.source(), Source::Policy, "{:?}", decision.error());
            if let Ok(grant) = decision.result() {
                assert!(noisy.contains(grant.bucket()));
                granted += 1;
            }
        }
        assert_eq!(granted, 20, "the noisy tenant gets exactly its two buckets");

        let mut by_overlap = [0; 3];
        for t in 0..200 {
            let tenant = format!("tenant-{t}");
            let overlap = limiter.shard(&tenant).overlap(&noisy);
            by_overlap[overlap] += 1;
            let decision = limiter.decide(Request::tenant(&tenant).tokens(0)).await;
            assert_eq!(decision.source(), Source::Redis);
            let left = decision.result().unwrap().remaining();
            assert_eq!(left, 10 * (2 - overlap as u64), "{tenant} shares {overlap}");
        }
        assert!(by_overlap[0] > 100 && by_overlap[1] > 10, "{by_overlap:?}");
        // Ten grants cannot empty a bucket of 10 tokens, whichever they hit.
        let mut checked = 0;
        for t in 0..200 {
            let tenant = format!("tenant-{t}");
            let overlap = limiter.shard(&tenant).overlap(&noisy);
            if overlap == 2 || checked < 10 {
                checked += usize::from(overlap < 2);
                let check = limiter.check(&tenant).await;
                assert_eq!(check.is_ok(), overlap < 2, "{tenant} shares {overlap}");
            }
        }
    });
}

/// A connection that counts the commands sent through it.
#[derive(Clone)]
struct Counting {
    inner: MultiplexedConnection,
    sent: Arc<AtomicUsize>,
}

impl ConnectionLike for Counting {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.sent.fetch_add(1, Ordering::Relaxed);
        self.inner.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[test]
fn one_round_trip_per_decision_and_a_flushed_script_reloads_itself() {
    let server = RedisServer::start();
    serial(async {
        let sent = Arc::new(AtomicUsize::new(0));
        let connection = Counting {
            inner: server.connection().await,
            sent: sent.clone(),
        };
        let limiter = ShardedLimiter::builder()
            .quota(Quota::per_second(1000))
            .name("round-trips")
            .build_redis_with(connection, options(FailurePolicy::FailClosed))
            .await
            .unwrap();
        assert_eq!(
            sent.swap(0, Ordering::Relaxed),
            2,
            "building loads the script and the draw's functions"
        );
        let mut admin = server.connection().await;
        for t in 0..100 {
            let decision = limiter.decide(format!("tenant-{t}")).await;
            assert_eq!(decision.source(), Source::Redis);
        }
        assert_eq!(sent.swap(0, Ordering::Relaxed), 100);
        assert_eq!(server.script_calls().await, (0, 100), "by FCALL");

        // Both gone (a restart without persistence).
        for flush in ["SCRIPT", "FUNCTION"] {
            let () = redis::cmd(flush)
                .arg("FLUSH")
                .query_async(&mut admin)
                .await
                .unwrap();
        }
        // The first decision after: FCALL, EVALSHA, then EVAL of the
        // source (which loads it where the keys are). Once it is answered,
        // the library is loaded again beside the next decisions, which go
        // as the script until it is there, then by FCALL: one call each.
        let decision = limiter.decide("after-flush").await;
        assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
        assert!(decision.is_granted());
        let decide = async || limiter.decide("until-fcall").await;
        let (decisions, stats) = until_by_fcall(&server, decide).await;
        assert_eq!(
            sent.swap(0, Ordering::Relaxed),
            3 + decisions + 1,
            "three calls, one call a decision after, and one FUNCTION LOAD"
        );
        assert_eq!(stat(&stats, "fcall", "failed_calls"), 1, "no function");
        assert_eq!(stat(&stats, "evalsha", "failed_calls"), 1, "no script");
        assert_eq!(stat(&stats, "eval", "calls"), 1);
        assert_eq!(stat(&stats, "function|load", "calls"), 1);
        // The script alone flushed: the functions do not need it. (Nothing
        // is out: the stats may be reset.)
        server.command_stats().await;
        let () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut admin)
            .await
            .unwrap();
        let decision = limiter.decide("after-flush").await;
        assert_eq!(decision.source(), Source::Redis);
        assert_eq!(sent.swap(0, Ordering::Relaxed), 1, "FCALL");
        assert_eq!(server.script_calls().await, (0, 1));
        assert_eq!(limiter.stats().errors(), 0);
    });
}

/// Decides (at most 100 times, by `decide`) until a decision goes by
/// `FCALL`: how many it took, and the server's command stats since they
/// were last reset, read without resetting them (a load from a task of the
/// limiter's own may run between two reads). Every decision must be
/// Redis's.
async fn until_by_fcall(
    server: &RedisServer,
    decide: impl AsyncFn() -> Decision,
) -> (usize, String) {
    for decisions in 1..=100 {
        let decision = decide().await;
        assert_eq!(decision.source(), Source::Redis, "{:?}", decision.error());
        let stats = server.command_totals().await;
        if stat(&stats, "fcall", "calls") > stat(&stats, "fcall", "failed_calls") {
            return (decisions, stats);
        }
    }
    panic!(
        "100 decisions, none by FCALL: {}",
        server.command_totals().await
    );
}

#[test]
fn a_denial_while_redis_refuses_writes_is_still_redis_s() {
    let server = RedisServer::start();
    serial(async {
        let mut admin = server.connection().await;
        // One token a bucket, a minute between tokens: two grants, then
        // denials, which write nothing (each asked of Redis).
        let limiter = ShardedLimiter::builder()
            .quota(Quota::per_minute(4))
            .buckets(4)
            .per_tenant(2)
            .name("refused-writes")
            .build_redis(
                &server.url(),
                options(FailurePolicy::FailOpen).cache_denials(false),
            )
            .await
            .unwrap();
        for _ in 0..2 {
            let decision = limiter.decide("t").await;
            assert!(decision.is_granted() && decision.source() == Source::Redis);
        }
        // Memory full; too few replicas. Redis refuses a function that may
        // write before it runs, a script only at its first write.
        for (setting, refusing) in [("maxmemory", "1"), ("min-replicas-to-write", "1")] {
            server.command_stats().await;
            let set = |value: &str| {
                let mut cmd = redis::cmd("CONFIG");
                cmd.arg("SET").arg(setting).arg(value);
                cmd
            };
            let () = set(refusing).query_async(&mut admin).await.unwrap();
            let decision = limiter.decide("t").await;
            let () = set("0").query_async(&mut admin).await.unwrap();
            assert_eq!(
                decision.source(),
                Source::Redis,
                "{setting}: {:?}",
                decision.error()
            );
            assert!(!decision.is_granted(), "{setting}");
            let stats = server.command_stats().await;
            assert_eq!(stat(&stats, "fcall", "rejected_calls"), 1, "{setting}");
            assert_eq!(stat(&stats, "evalsha", "calls"), 1, "{setting}");
            // And the next decision goes by FCALL again.
            let decision = limiter.decide("t").await;
            assert_eq!(decision.source(), Source::Redis);
            assert_eq!(server.script_calls().await, (0, 1), "{setting}");
        }
        assert_eq!(limiter.stats().errors(), 0);
    });
}

#[test]
fn a_user_who_may_not_call_functions_is_served_by_the_script() {
    let server = RedisServer::start();
    serial(async {
        let mut admin = server.connection().await;
        // Everything but FCALL; then everything but loading functions.
        for (user, denied) in [("no-fcall", "-fcall"), ("no-load", "-function")] {
            let () = redis::cmd("ACL")
                .arg("SETUSER")
                .arg(user)
                .arg("on")
                .arg(">secret")
                .arg("~*")
                .arg("+@all")
                .arg(denied)
                .query_async(&mut admin)
                .await
                .unwrap();
            let url = format!("redis://{user}:secret@127.0.0.1:{}", server.port);
            let limiter = ShardedLimiter::builder()
                .quota(Quota::per_second(1000))
                .name(user)
                .build_redis(&url, options(FailurePolicy::FailClosed))
                .await
                .unwrap();
            server.command_stats().await;
            for t in 0..3 {
                let decision = limiter.decide(format!("tenant-{t}")).await;
                assert_eq!(
                    decision.source(),
                    Source::Redis,
                    "{user}: {:?}",
                    decision.error()
                );
                assert!(decision.is_granted());
            }
            let stats = server.command_stats().await;
            assert_eq!(stat(&stats, "evalsha", "calls"), 3, "{user}");
            // Only the user who could load the functions tried one, once.
            let refused = u64::from(user == "no-fcall");
            assert_eq!(stat(&stats, "fcall", "rejected_calls"), refused, "{user}");
            assert_eq!(stat(&stats, "fcall", "calls"), 0, "{user}");
            // The script flushed (as by a restart): the next decision sends
            // it whole, and the library is loaded again beside the next ones.
            // This user may not load it, or may (it is there already) but
            // not call it: the decisions stay the script's, and nothing is
            // tried twice.
            let () = redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query_async(&mut admin)
                .await
                .unwrap();
            let tried = |stats: &str| {
                let load = stat(stats, "function|load", "calls")
                    + stat(stats, "function|load", "rejected_calls");
                load == 1 && stat(stats, "fcall", "rejected_calls") == refused
            };
            // Until both were tried, then three decisions more; the stats
            // read without resetting them (the load runs in a task of its
            // own, and may run between two reads).
            let mut more = 0;
            for t in 0..100 {
                if tried(&server.command_totals().await) {
                    if more == 3 {
                        break;
                    }
                    more += 1;
                }
                let decision = limiter.decide(format!("tenant-{t}")).await;
                assert_eq!(decision.source(), Source::Redis, "{user}");
            }
            let stats = server.command_totals().await;
            assert!(tried(&stats), "{user}: {stats}");
            assert_eq!(stat(&stats, "eval", "calls"), 1, "{user}");
            assert_eq!(stat(&stats, "fcall", "calls"), 0, "{user}");
            assert_eq!(limiter.stats().errors(), 0, "{user}");
        }
    });
}

#[test]
fn denials_are_cached_until_their_retry_time() {
    let server = RedisServer::start();
    serial(async {
        // One token per bucket and a minute between tokens.
        let limiter = redis_limiter(
            &server,
            Quota::per_minute(4),
            (4, 2),
            "cached",
            FailurePolicy::FailOpen,
        )
        .await;
        for _ in 0..2 {
            assert_eq!(limiter.decide("t").await.source(), Source::Redis);
        }
        let denied = limiter.decide("t").await;
        assert_eq!(denied.source(), Source::Redis);
        let retry = denied.result().unwrap_err().retry_after();
        assert!(retry > Duration::from_secs(59) && retry <= Duration::from_secs(60));
        let cached = limiter.decide("t").await;
        assert_eq!(cached.source(), Source::CachedDenial);
        let again = cached.result().unwrap_err();
        assert!(
            again.retry_after() <= retry && again.retry_after() > retry - Duration::from_secs(1)
        );
        // A weight of 0 is still asked, and granted.
        assert_eq!(
            limiter
                .decide(Request::tenant("t").tokens(0))
                .await
                .source(),
            Source::Redis
        );
        // Another tenant with a free bucket still goes to Redis.
        let shard = limiter.shard("t");
        let other = (0..100)
            .map(|i| format!("other-{i}"))
            .find(|o| limiter.shard(o).overlap(&shard) == 1)
            .unwrap();
        let decision = limiter.decide(&other).await;
        assert_eq!(decision.source(), Source::Redis);
        assert!(decision.is_granted());
        let stats = limiter.stats();
        assert_eq!((stats.from_redis(), stats.from_cache()), (5, 1));

        // A heavy request's denial does not keep a light one from Redis:
        // four tokens per bucket, one every 15 s.
        let limiter = redis_limiter(
            &server,
            Quota::per_minute(16),
            (4, 2),
            "cached-heavy",
            FailurePolicy::FailOpen,
        )
        .await;
        for _ in 0..2 {
            assert!(limiter.check("h").await.is_ok()); // 3 tokens left in each bucket
        }
        let heavy = limiter.decide(Request::tenant("h").tokens(7)).await;
        assert_eq!(heavy.source(), Source::Redis);
        assert!(heavy.result().unwrap_err().retry_after() <= Duration::from_secs(15));
        let light = limiter.decide("h").await;
        assert_eq!(light.source(), Source::Redis);
        assert_eq!(light.result().unwrap().remaining(), 5);
        // Nor does it lose what it proved: each bucket holds at most 3 until
        // its retry time, so 7 is refused from memory again.
        let again = limiter.decide(Request::tenant("h").tokens(7)).await;
        assert_eq!(again.source(), Source::CachedDenial);
    });
}

/// Decides for "t" until Redis answers, for at most 5 s: the decision, and
/// how long it took.
async fn until_asked(limiter: &RedisLimiter) -> (Decision, Duration) {
    let started = std::time::Instant::now();
    loop {
        let decision = limiter.decide("t").await;
        if decision.source() == Source::Redis || started.elapsed() > Duration::from_secs(5) {
            return (decision, started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A refund, or a raise of the quota, made by another process moves a
/// bucket's arrival time back, which a cached denial here cannot see: it is
/// used for at most a second after Redis gave it, then Redis is asked.
#[test]
fn another_process_refund_or_raise_reaches_a_cached_denial_within_a_second() {
    let server = RedisServer::start();
    serial(async {
        // 8 an hour over 4 buckets of 2, k = 2: nothing refills meanwhile.
        let process = |name| {
            redis_limiter(
                &server,
                Quota::per_hour(8),
                (4, 2),
                name,
                FailurePolicy::FailClosed,
            )
        };
        for change in ["refund", "raise"] {
            let (a, b) = (process(change).await, process(change).await);
            let mut grants = Vec::new();
            for _ in 0..5 {
                grants.extend(b.check("t").await.ok());
            }
            assert_eq!(grants.len(), 4);
            assert_eq!(a.decide("t").await.source(), Source::Redis);
            assert_eq!(a.decide("t").await.source(), Source::CachedDenial);
            if change == "refund" {
                assert_eq!(b.refund(grants.pop().unwrap()).await.unwrap().given(), 1);
            } else {
                b.set_quota(Quota::per_second(8000).with_burst(8))
                    .await
                    .unwrap();
            }
            let (decision, took) = until_asked(&a).await;
            assert_eq!(
                decision.source(),
                Source::Redis,
                "{change}: still cached after {took:?}"
            );
            assert!(decision.is_granted(), "{change}: {:?}", decision.result());
            assert!(took <= Duration::from_millis(2500), "{change}: {took:?}");
        }
    });
}

#[test]
fn a_heavy_denial_does_not_cache_away_a_smaller_full_bucket() {
    let server = RedisServer::start();
    serial(async {
        // 10 over 4 buckets: bursts 3, 3, 2, 2, one token per 400 ms each.
        let limiter = redis_limiter(
            &server,
            Quota::per_second(10).with_burst(10),
            (4, 2),
            "cached-small",
            FailurePolicy::FailClosed,
        )
        .await;
        // A tenant holding a bucket of 3 and a bucket of 2.
        let tenant = (0..100)
            .map(|i| format!("t-{i}"))
            .find(|t| {
                let shard = limiter.shard(t);
                shard.contains(0) as u8 + shard.contains(1) as u8 == 1
            })
            .unwrap();
        let large = *limiter
            .shard(&tenant)
            .buckets()
            .iter()
            .find(|&&b| b < 2)
            .unwrap();
        let grant = limiter
            .check(Request::tenant(&tenant).tokens(3))
            .await
            .unwrap();
        assert_eq!(grant.bucket(), large); // only the large bucket holds 3
        let heavy = limiter.decide(Request::tenant(&tenant).tokens(3)).await;
        assert_eq!(heavy.source(), Source::Redis);
        assert!(!heavy.is_granted());
        // The small bucket is full: a light request must reach Redis.
        let light = limiter.decide(&tenant).await;
        assert_eq!(light.source(), Source::Redis, "{:?}", light.result());
        assert!(light.is_granted());
        assert_ne!(light.result().unwrap().bucket(), large);
        // What the heavy denial proved still holds: the large bucket is
        // empty and the small one holds at most 2 until the retry time, so a
        // request of 3 is refused from memory.
        let again = limiter.decide(Request::tenant(&tenant).tokens(3)).await;
        assert_eq!(again.source(), Source::CachedDenial);
    });
}

#[test]
fn a_weight_of_zero_takes_nothing_and_writes_nothing() {
    let server = RedisServer::start();
    serial(async {
        let limiter = redis_limiter(
            &server,
            Quota::per_minute(4),
            (4, 2),
            "zero",
            FailurePolicy::FailClosed,
        )
        .await;
        let mut admin = server.connection().await;
        let grant = limiter.check(Request::tenant("t").tokens(0)).await.unwrap();
        assert_eq!(grant.remaining(), 2);
        let shard = limiter.shard("t");
        for &b in shard.buckets() {
            let exists: bool = redis::cmd("EXISTS")
                .arg(limiter.key(b).unwrap())
                .query_async(&mut admin)
                .await
                .unwrap();
            assert!(!exists, "a weight of 0 wrote bucket {b}");
        }
        limiter.check("t").await.unwrap();
        limiter.check("t").await.unwrap();
        assert!(limiter.check("t").await.is_err());
        let grant = limiter.check(Request::tenant("t").tokens(0)).await.unwrap();
        assert_eq!(grant.remaining(), 0);
    });
}
