//! Holding off over Redis when the upstream says stop: one process's
//! hold-off stops the fleet, in both layouts, a tenant's hold-off stops its
//! own buckets alone, and a hold-off while Redis is down still stops the
//! local fallback. Against a real `redis-server` on 127.0.0.1; the times
//! are read from the denials (an hour-long hold-off), never slept through.

use std::time::Duration;

use shuffle_limiter::redis::{Error, FailurePolicy, Layout, RedisLimiter, RedisOptions, Source};
use shuffle_limiter::upstream::{Adaptive, HoldOff, Signal};
use shuffle_limiter::{Limit, Quota, ShardedLimiter};

#[path = "../../tests/support/redis_server.rs"]
mod redis_server;
use redis_server::RedisServer;

const HOUR: Duration = Duration::from_secs(3600);

/// 8 buckets of 100 tokens, k = 2: nothing runs dry during a test.
async fn process(server: &RedisServer, name: &str, options: RedisOptions) -> RedisLimiter {
    ShardedLimiter::builder()
        .quota(Quota::per_second(800).with_burst(800))
        .buckets(8)
        .per_tenant(2)
        .salt("hold")
        .name(name)
        .build_redis(&server.url(), options.deadline(Duration::from_millis(500)))
        .await
        .unwrap()
}

/// A slow limiter of `buckets` buckets, every tenant on all of them.
async fn paced(
    server: &RedisServer,
    name: &str,
    quota: Quota,
    buckets: u32,
) -> std::sync::Arc<RedisLimiter> {
    let options = RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_millis(500));
    let limiter = ShardedLimiter::builder()
        .quota(quota)
        .buckets(buckets)
        .per_tenant(buckets)
        .name(name)
        .build_redis(&server.url(), options)
        .await;
    std::sync::Arc::new(limiter.unwrap())
}

/// The denial of `tenant` now, which must come from Redis (or from what
/// Redis denied a tenant sharing a bucket, remembered).
async fn denied_for(limiter: &RedisLimiter, tenant: &str) -> Duration {
    let decision = limiter.decide(tenant).await;
    let source = decision.source();
    assert!(
        matches!(source, Source::Redis | Source::CachedDenial),
        "{tenant}: {source:?} {:?}",
        decision.error()
    );
    decision.result().unwrap_err().retry_after()
}

/// An hour, less the round trips, and the buckets' staggered return
/// after it: within one interval of a bucket (10 ms here).
fn about_an_hour(wait: Duration) -> bool {
    wait <= HOUR + Duration::from_millis(10) && wait >= HOUR - Duration::from_secs(5)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_holds_off_the_whole_fleet_in_both_layouts() {
    let server = RedisServer::start();
    for layout in [Layout::OneSlot, Layout::Spread] {
        let options = || RedisOptions::new(FailurePolicy::FailClosed).layout(layout);
        let name = format!("fleet-{layout:?}");
        let (a, b) = (
            process(&server, &name, options()).await,
            process(&server, &name, options()).await,
        );
        assert!(b.check("t0").await.is_ok());
        a.hold_off(HoldOff::all(HOUR)).await.unwrap();
        for t in 0..20 {
            let wait = denied_for(&b, &format!("t{t}")).await;
            assert!(about_an_hour(wait), "{layout:?} t{t}: {wait:?}");
        }
        // The state reads agree: no bucket holds a whole token.
        let snapshot = b.snapshot().await.unwrap();
        assert!(snapshot.iter().all(|s| s.available() == 0), "{snapshot:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_hold_off_stops_its_own_buckets_for_every_process() {
    let server = RedisServer::start();
    let options = || RedisOptions::new(FailurePolicy::FailClosed);
    let (a, b) = (
        process(&server, "tenant", options()).await,
        process(&server, "tenant", options()).await,
    );
    a.hold_off(HoldOff::tenant("acme", HOUR)).await.unwrap();
    assert!(about_an_hour(denied_for(&b, "acme").await));
    let held = b.shard("acme");
    let (mut apart, mut sharing) = (0, 0);
    for t in 0..60 {
        let tenant = format!("t{t}");
        let shared = (b.shard(&tenant).buckets().iter())
            .filter(|&&x| held.contains(x))
            .count();
        let left = b.remaining(tenant.as_str()).await.unwrap();
        assert_eq!(left, 200 - 100 * shared as u64, "{tenant}");
        match shared {
            0 => apart += 1,
            1 => sharing += 1,
            _ => {}
        }
    }
    assert!(
        apart > 10 && sharing > 5,
        "{apart} apart, {sharing} sharing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_off_while_redis_is_down_still_stops_the_local_fallback() {
    let server = RedisServer::start();
    let options = RedisOptions::new(FailurePolicy::LocalFallback { replicas: 2 });
    let limiter = process(&server, "down", options).await;
    assert!(limiter.check("t").await.is_ok());
    server.signal("-STOP");
    let held = limiter.hold_off(HoldOff::all(HOUR)).await;
    let decision = limiter.decide("t").await;
    server.signal("-CONT");
    assert!(matches!(held, Err(Error::Timeout { .. })), "{held:?}");
    assert_eq!(decision.source(), Source::Policy);
    let wait = decision.result().unwrap_err().retry_after();
    assert!(about_an_hour(wait), "{wait:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_off_leaves_a_stray_key_and_is_refused() {
    let server = RedisServer::start();
    let limiter = process(
        &server,
        "stray",
        RedisOptions::new(FailurePolicy::FailClosed),
    )
    .await;
    let key = limiter
        .key(limiter.shard("t").buckets()[0])
        .unwrap()
        .to_owned();
    let mut connection = server.connection().await;
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("f")
        .arg("v")
        .query_async(&mut connection)
        .await
        .unwrap();
    let refused = limiter.hold_off(HoldOff::tenant("t", HOUR)).await;
    assert!(
        matches!(refused, Err(Error::NotABucket { .. })),
        "{refused:?}"
    );
    let kind: String = redis::cmd("TYPE")
        .arg(&key)
        .query_async(&mut connection)
        .await
        .unwrap();
    assert_eq!(kind, "hash");
}

/// Three processes' controllers, throttled by the same upstream at once,
/// cut the one quota in Redis once: one that saw the first cut waits out
/// its cooldown, and one that did not look since cuts from the same quota
/// to the same one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_throttled_together_cut_the_shared_quota_once() {
    let server = RedisServer::start();
    let options = || RedisOptions::new(FailurePolicy::FailClosed);
    let mut fleet = Vec::new();
    for _ in 0..3 {
        fleet.push(process(&server, "adapt", options()).await);
    }
    let ceiling = Quota::per_second(800);
    let controllers: Vec<_> = (0..3).map(|_| Adaptive::new(8, ceiling).unwrap()).collect();
    for (limiter, adaptive) in fleet.iter().zip(&controllers) {
        assert_eq!(
            adaptive.observe(limiter, Signal::Served).await.unwrap(),
            None
        );
    }
    let cut = controllers[0]
        .observe(&fleet[0], Signal::Throttled)
        .await
        .unwrap();
    assert_eq!(cut.map(|q| q.count()), Some(560));
    // The second learns of it at its next decision, and its throttle waits.
    assert_eq!(fleet[1].decide("t").await.source(), Source::Redis);
    assert_eq!(fleet[1].quota().count(), 560);
    let waited = controllers[1].observe(&fleet[1], Signal::Throttled).await;
    assert_eq!(waited.unwrap(), None);
    // The third has not looked: it cuts 800 to 560 as well.
    assert_eq!(fleet[2].quota().count(), 800);
    let again = controllers[2].observe(&fleet[2], Signal::Throttled).await;
    assert_eq!(again.unwrap().map(|q| q.count()), Some(560));
    for limiter in &fleet {
        assert_eq!(limiter.decide("t").await.source(), Source::Redis);
        assert_eq!(limiter.quota().count(), 560);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_during_a_hold_off_gives_no_token_before_the_instant() {
    // 5 buckets of one token a second, k = 1: a hold-off of one interval.
    let server = RedisServer::start();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(5).with_burst(5))
        .buckets(5)
        .per_tenant(1)
        .name("refund-held")
        .build_redis(&server.url(), RedisOptions::new(FailurePolicy::FailClosed))
        .await
        .unwrap();
    let in_flight = limiter.check("acme").await.unwrap();
    let hold = HoldOff::tenant("acme", Duration::from_secs(1));
    limiter.hold_off(hold).await.unwrap();
    assert!(limiter.check("acme").await.is_err(), "held off");
    let refunded = limiter.refund(in_flight).await.unwrap();
    assert_eq!(refunded.given(), 1);
    // Denied until the instant, a second on: far more than these steps.
    let denied = limiter.check("acme").await.unwrap_err();
    assert!(
        denied.retry_after() > Duration::from_millis(500),
        "{denied:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_that_failed_to_reach_redis_does_not_hold_back_the_next() {
    let mut server = RedisServer::start();
    let options = RedisOptions::new(FailurePolicy::FailClosed).deadline(Duration::from_millis(200));
    let limiter = process(&server, "failed-cut", options).await;
    let adaptive = Adaptive::new(8, Quota::per_second(800)).unwrap();
    // Redis is down: the cut fails, and the quota stays.
    server.kill();
    let failed = adaptive.observe(&limiter, Signal::Throttled).await;
    assert!(failed.is_err(), "{failed:?}");
    assert_eq!(limiter.quota().count(), 800);
    server.restart();
    // Back (a few tries while the connection returns), the next throttle,
    // within the cooldown of the cut that failed, cuts as the first would
    // have: the failed one is not counted.
    let mut again = None;
    for _ in 0..50 {
        match adaptive.observe(&limiter, Signal::Throttled).await {
            Ok(cut) => {
                again = Some(cut);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert_eq!(again.flatten().map(|q| q.count()), Some(560));
}

/// A caller waiting in one process, on a slot booked before another
/// process holds the fleet off: it is not granted before the instant (it
/// learns of the hold-off when it wakes, and books again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_booked_before_another_process_holds_off_waits_for_the_end() {
    let server = RedisServer::start();
    let slow = || paced(&server, "wait-hold", Quota::per_second(4).with_burst(2), 2);
    let (a, b) = (slow().await, slow().await);
    assert!(a.check("t").await.is_ok() && a.check("t").await.is_ok());
    // Both buckets empty: a slot within half a second.
    let start = tokio::time::Instant::now();
    let waiting = {
        let a = std::sync::Arc::clone(&a);
        tokio::spawn(async move { a.wait("t").await.map(|_| start.elapsed()) })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let hold = Duration::from_millis(1500);
    b.hold_off(HoldOff::all(hold)).await.unwrap();
    let granted = waiting.await.unwrap().unwrap();
    // The hold-off began at least 50 ms in; less the round trip, it ends
    // no sooner than 1.5 s after that.
    assert!(granted >= hold, "granted after {granted:?}");
}

/// The other side: waits in one process whose slots come after another
/// process's hold-off keep them (they do not go to the back of the queue),
/// and only the one whose slot it covers books again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_booked_past_another_process_hold_off_keep_their_slots() {
    let server = RedisServer::start();
    // One bucket, a token every 500 ms.
    let slow = || paced(&server, "keep-slots", Quota::per_second(2).with_burst(1), 1);
    let (a, b) = (slow().await, slow().await);
    let start = tokio::time::Instant::now();
    assert!(a.check("t").await.is_ok());
    // Slots at about 0.5 s, 1 s and 1.5 s, booked in turn.
    let mut waiting = Vec::new();
    for _ in 0..3 {
        let a = std::sync::Arc::clone(&a);
        waiting.push(tokio::spawn(async move {
            a.wait("t").await.map(|_| start.elapsed())
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Until about 0.85 s: it covers the first slot alone.
    b.hold_off(HoldOff::all(Duration::from_millis(750)))
        .await
        .unwrap();
    let mut granted = Vec::new();
    for w in waiting {
        granted.push(w.await.unwrap().unwrap());
    }
    granted.sort();
    // The other two keep theirs (booking again would put them at 2.5 s and
    // 3 s); the first books again behind them (about 2 s).
    assert!(granted[0] < Duration::from_millis(1450), "{granted:?}");
    assert!(granted[1] < Duration::from_millis(1950), "{granted:?}");
    assert!(granted[2] >= Duration::from_millis(1900), "{granted:?}");
}

/// The held buckets come back one after another over one interval, and
/// each records its own instant, as in process: what a give-back or a
/// booked wait reads of bucket i is the instant plus its turn, not the
/// instant alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_held_bucket_records_its_own_instant() {
    // 2 buckets of one token a second, both the tenant's.
    let server = RedisServer::start();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(2).with_burst(2))
        .buckets(2)
        .per_tenant(2)
        .name("turns")
        .build_redis(&server.url(), RedisOptions::new(FailurePolicy::FailClosed))
        .await
        .unwrap();
    let hold = HoldOff::tenant("acme", Duration::from_secs(5));
    limiter.hold_off(hold).await.unwrap();
    let mut connection = server.connection().await;
    let shard = limiter.shard("acme");
    let mut instants = Vec::new();
    for &b in shard.buckets() {
        let until: u64 =
            redis::AsyncCommands::hget(&mut connection, "{turns}:held", format!("{{turns}}:b{b}"))
                .await
                .unwrap();
        instants.push(until);
    }
    // One second a token, two buckets held: the second half a second on.
    assert_eq!(instants[1] - instants[0], 500_000, "{instants:?}");
}
