//! A Redis server killed, restarted, stopped and continued under a running
//! limiter: every decision returns within its deadline, each failure policy
//! answers as it says, and decisions go back to Redis once it answers.

use std::time::{Duration, Instant};

use shuffle_limiter::redis::{Error, FailurePolicy, RedisLimiter, Source};
use shuffle_limiter::{Quota, Request, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
#[path = "support/serial.rs"]
mod serial;
use redis_server::RedisServer;
use serial::{options, serial};

const DEADLINE: Duration = Duration::from_millis(5);
/// What a decision may take beyond its deadline: the timer's millisecond and
/// the scheduler of a busy two-core machine (38 ms was seen with builds
/// beside the test; a hung decision would take the whole outage, seconds).
const MARGIN: Duration = Duration::from_millis(100);

/// One limiter per policy, sharing one server.
struct Fleet {
    closed: RedisLimiter,
    open: RedisLimiter,
    local: RedisLimiter,
}

impl Fleet {
    async fn new(server: &RedisServer) -> Fleet {
        let url = server.url();
        let build = |name: &str, policy| {
            ShardedLimiter::builder()
                .quota(Quota::per_second(100).with_burst(40))
                .buckets(4)
                .per_tenant(2)
                .name(name)
                .build_redis(
                    &url,
                    options(policy)
                        .deadline(DEADLINE)
                        .retry_every(Duration::from_millis(100)),
                )
        };
        Fleet {
            closed: build("closed", FailurePolicy::FailClosed).await.unwrap(),
            open: build("open", FailurePolicy::FailOpen).await.unwrap(),
            local: build("local", FailurePolicy::LocalFallback { replicas: 4 })
                .await
                .unwrap(),
        }
    }

    fn all(&self) -> [&RedisLimiter; 3] {
        [&self.closed, &self.open, &self.local]
    }

    /// Decisions for one tenant on every limiter until `limit` has passed,
    /// each within the deadline; checks what each policy did and returns the
    /// grants of the local fallback.
    async fn outage(&self, tenant: &str, limit: Duration) -> u64 {
        let started = Instant::now();
        let mut local_grants = 0;
        let mut decisions = 0;
        while started.elapsed() < limit {
            for limiter in self.all() {
                let (decision, took) = timed(limiter, tenant).await;
                assert!(took <= DEADLINE + MARGIN, "a decision took {took:?}");
                decisions += 1;
                if decision.source() == Source::Redis {
                    // The first request may still have been answered.
                    assert!(decisions <= 3, "Redis decided in an outage");
                    continue;
                }
                assert_eq!(decision.source(), Source::Policy);
                assert!(decision.error().is_some());
                match limiter.failure_policy() {
                    FailurePolicy::FailClosed => {
                        let denied = decision.result().unwrap_err();
                        assert!(denied.retry_after() > Duration::ZERO);
                        assert!(denied.retry_after() <= Duration::from_millis(100));
                    }
                    FailurePolicy::FailOpen => assert!(decision.is_granted()),
                    _ => local_grants += u64::from(decision.is_granted()),
                }
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        // The fallback's share is 25/s with a burst of 10: this tenant's two
        // buckets hold what they hold and refill at 6.25/s each.
        let fallback = self.local.fallback().unwrap();
        let burst: u32 = self
            .local
            .shard(tenant)
            .buckets()
            .iter()
            .map(|&b| fallback.bucket_burst(b).unwrap())
            .sum();
        let bound = f64::from(burst) + 12.5 * started.elapsed().as_secs_f64() + 1.0;
        assert!(
            local_grants >= u64::from(burst) && local_grants as f64 <= bound,
            "{local_grants} grants from a fallback shard of {burst}"
        );
        local_grants
    }

    /// Decides until every limiter has had a decision from Redis; returns
    /// how long that took.
    async fn recovery(&self, tenant: &str) -> Duration {
        let started = Instant::now();
        let mut back = [false; 3];
        while !back.iter().all(|&b| b) {
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "no recovery: {back:?}"
            );
            for (i, limiter) in self.all().into_iter().enumerate() {
                let (decision, took) = timed(limiter, tenant).await;
                assert!(took <= DEADLINE + MARGIN, "a decision took {took:?}");
                back[i] |= decision.source() == Source::Redis;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        started.elapsed()
    }
}

async fn timed(
    limiter: &RedisLimiter,
    tenant: &str,
) -> (shuffle_limiter::redis::Decision, Duration) {
    let started = Instant::now();
    let decision = limiter.decide(tenant).await;
    (decision, started.elapsed())
}

#[test]
fn a_killed_and_restarted_server_is_survived_and_rejoined() {
    let mut server = RedisServer::start();
    serial(async {
        let fleet = Fleet::new(&server).await;
        fleet.recovery("before").await;
        server.kill();
        // Longer than the connection's own reconnection attempts (about 1.3 s):
        // the limiter's probes must start them again.
        fleet.outage("during", Duration::from_millis(1500)).await;
        server.restart();
        let took = fleet.recovery("after").await;
        eprintln!("back on Redis after {took:?}");
        assert!(
            took <= Duration::from_secs(1),
            "back on Redis after {took:?}"
        );
        for limiter in fleet.all() {
            assert!(limiter.stats().errors() > 0);
        }
    });
}

#[test]
fn a_stopped_server_is_survived_and_rejoined_on_a_clean_connection() {
    let server = RedisServer::start();
    serial(async {
        let fleet = Fleet::new(&server).await;
        fleet.recovery("before").await;
        server.signal("-STOP");
        fleet.outage("during", Duration::from_millis(400)).await;
        for limiter in fleet.all() {
            let error = limiter.decide("during").await;
            assert!(
                matches!(error.error(), Some(Error::Timeout { .. })),
                "a hang is a timeout: {:?}",
                error.error()
            );
        }
        server.signal("-CONT");
        let took = fleet.recovery("after").await;
        eprintln!("back on Redis after {took:?}");
        assert!(
            took <= Duration::from_secs(1),
            "back on Redis after {took:?}"
        );

        // Requests abandoned at the deadline were answered after SIGCONT;
        // their replies must not reach later requests on the same connection.
        let mut connection = fleet.closed.connection().clone();
        for i in 0..50 {
            let echo: String = redis::cmd("ECHO")
                .arg(format!("echo-{i}"))
                .query_async(&mut connection)
                .await
                .unwrap();
            assert_eq!(echo, format!("echo-{i}"));
        }
        let fresh = ShardedLimiter::builder()
            .quota(Quota::per_second(100).with_burst(40))
            .buckets(4)
            .per_tenant(2)
            .name("fresh")
            .build_redis_with(
                fleet.closed.connection().clone(),
                options(FailurePolicy::FailClosed),
            )
            .await
            .unwrap();
        for t in 0..20 {
            let decision = fresh
                .decide(Request::tenant(format!("tenant-{t}")).tokens(0))
                .await;
            assert_eq!(decision.source(), Source::Redis);
            assert_eq!(
                decision.result().unwrap().remaining(),
                20,
                "two full buckets"
            );
        }
    });
}
