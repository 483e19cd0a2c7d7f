//! Waiting for a grant, under tokio's paused time: no real sleeps.

use std::sync::Arc;
use std::time::Duration;

use shuffle_limiter::{Clock, DenialReason, Jitter, Quota, Request, ShardedLimiter, TokioClock};
use tokio::time::{Instant, advance, timeout};

/// 4 buckets of one token each, one token a second each; a tenant holds
/// `per_tenant` of them.
fn with_buckets_per_tenant(per_tenant: u32) -> ShardedLimiter<TokioClock> {
    ShardedLimiter::builder()
        .quota(Quota::per_second(4))
        .buckets(4)
        .per_tenant(per_tenant)
        .clock(TokioClock::new())
        .build()
        .unwrap()
}

/// A tenant holds 2 tokens and gains 2 a second.
fn limiter() -> ShardedLimiter<TokioClock> {
    with_buckets_per_tenant(2)
}

/// A tenant holds 1 token and gains 1 a second.
fn single_bucket() -> ShardedLimiter<TokioClock> {
    with_buckets_per_tenant(1)
}

/// Takes every token `tenant` has (at most the whole burst), failing at once
/// rather than looping if it is granted more.
fn drain<C: Clock>(limiter: &ShardedLimiter<C>, tenant: &str) {
    let most = limiter.quota().burst();
    let granted = (0..=most)
        .take_while(|_| limiter.check(tenant).is_ok())
        .count();
    assert!(
        granted <= most as usize,
        "granted more than the burst of {most}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_tokio_clock_follows_paused_time() {
    let clock = TokioClock::new();
    assert_eq!(clock.now_nanos(), 0);
    advance(Duration::from_millis(1500)).await;
    assert_eq!(clock.now_nanos(), 1_500_000_000);
}

#[tokio::test(start_paused = true)]
async fn until_ready_grants_at_once_then_waits_exactly_the_retry_time() {
    let limiter = limiter();
    let start = Instant::now();
    limiter.wait("t").await.unwrap();
    limiter.wait("t").await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
    let retry = limiter.check("t").unwrap_err().retry_after();
    assert_eq!(retry, Duration::from_secs(1));
    let grant = limiter.wait("t").await.unwrap();
    assert_eq!(start.elapsed(), retry);
    assert!(limiter.shard("t").contains(grant.bucket()));
}

#[tokio::test(start_paused = true)]
async fn many_waiters_on_one_tenant_get_exactly_its_rate() {
    let limiter = Arc::new(limiter());
    let start = Instant::now();
    let tasks: Vec<_> = (0..12)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move { limiter.wait("t").await.unwrap() })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    // 2 at once, then 2 a second: the 12th grant comes after 5 s, not before
    // (the budget holds) and not much later (nobody oversleeps).
    let elapsed = start.elapsed();
    assert!(elapsed >= Duration::from_secs(5), "{elapsed:?}");
    assert!(elapsed <= Duration::from_millis(5010), "{elapsed:?}");
    assert_eq!(limiter.remaining("t"), 0);
}

#[tokio::test(start_paused = true)]
async fn until_n_ready_waits_for_n_tokens_in_one_bucket_or_refuses_at_once() {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(2).with_burst(8))
        .buckets(2)
        .per_tenant(1)
        .clock(TokioClock::new())
        .build()
        .unwrap();
    // One bucket of 4 tokens, one token a second.
    let start = Instant::now();
    let err = limiter
        .wait(Request::tenant("t").tokens(5))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), DenialReason::NeverFits { asked: 5, most: 4 });
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(limiter.remaining("t"), 4, "a refusal takes nothing");

    limiter.wait(Request::tenant("t").tokens(3)).await.unwrap();
    limiter.wait(Request::tenant("t").tokens(3)).await.unwrap(); // 1 left: 2 more seconds
    assert_eq!(start.elapsed(), Duration::from_secs(2));
}

#[tokio::test(start_paused = true)]
async fn dropping_a_pending_wait_consumes_nothing() {
    let limiter = single_bucket();
    let start = Instant::now();
    drain(&limiter, "t");
    // Give up on the wait half-way; the future is dropped while sleeping.
    let gave_up = timeout(Duration::from_millis(500), limiter.wait("t")).await;
    assert!(gave_up.is_err());
    // More abandoned waits, the last dropped 1 ms before the token is due.
    for ms in [100, 200, 199] {
        let _ = timeout(Duration::from_millis(ms), limiter.wait("t")).await;
    }
    assert_eq!(start.elapsed(), Duration::from_millis(999));
    assert_eq!(limiter.remaining("t"), 0);
    // The token that came due at 1 s is still there for the next caller.
    advance(Duration::from_millis(1)).await;
    assert_eq!(limiter.remaining("t"), 1);
    assert!(limiter.check("t").is_ok());
}

#[tokio::test(start_paused = true)]
async fn a_wait_dropped_by_select_leaves_the_token_to_the_winner() {
    let limiter = single_bucket();
    drain(&limiter, "t");
    let grant = tokio::select! {
        g = limiter.wait("t") => Some(g),
        _ = tokio::time::sleep(Duration::from_millis(999)) => None,
    };
    assert!(grant.is_none());
    advance(Duration::from_millis(1)).await;
    assert_eq!(limiter.remaining("t"), 1);
}

#[tokio::test(start_paused = true)]
async fn the_bounded_wait_gives_up_at_once_when_the_grant_would_be_late() {
    let limiter = single_bucket();
    drain(&limiter, "t");
    let start = Instant::now();
    let denied = limiter
        .wait("t")
        .within(Duration::from_millis(999))
        .await
        .unwrap_err();
    // Decided up front: no time spent sleeping for nothing.
    assert_eq!(start.elapsed(), Duration::ZERO);
    assert_eq!(denied.retry_after(), Duration::from_secs(1));
    assert_eq!(limiter.remaining("t"), 0);

    // With enough time it waits, exactly as long as needed.
    let grant = limiter.wait("t").within(Duration::from_secs(1)).await;
    assert!(grant.is_ok());
    assert_eq!(start.elapsed(), Duration::from_secs(1));

    // Weighted: a never-fitting denial for an impossible weight, at once.
    let err = limiter
        .wait(Request::tenant("t").tokens(2))
        .within(Duration::from_secs(60))
        .await
        .unwrap_err();
    assert!(
        matches!(err.reason(), DenialReason::NeverFits { most: 1, .. }),
        "{err:?}"
    );
    let late = limiter
        .wait(Request::tenant("t").tokens(1))
        .within(Duration::from_millis(10))
        .await;
    assert_eq!(late.unwrap_err().reason(), DenialReason::Limited);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_bounded_waiter_that_loses_the_race_never_waits_past_its_deadline() {
    let limiter = Arc::new(single_bucket());
    drain(&limiter, "t");
    let start = Instant::now();
    let max_wait = Duration::from_millis(1500);
    let tasks: Vec<_> = (0..2)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            tokio::spawn(async move {
                let outcome = limiter.wait("t").within(max_wait).await;
                (outcome, start.elapsed())
            })
        })
        .collect();
    let mut granted = 0;
    for task in tasks {
        let (outcome, elapsed) = task.await.unwrap();
        // The first to ask reserves the token due at 1 s and sleeps until
        // then; the other finds the next one (at 2 s) past its deadline and
        // returns at once, without sleeping for nothing.
        match outcome {
            Ok(grant) => {
                assert!(limiter.shard("t").contains(grant.bucket()));
                assert_eq!(elapsed, Duration::from_secs(1));
                granted += 1;
            }
            Err(denied) => {
                assert_eq!(elapsed, Duration::ZERO);
                assert_eq!(denied.retry_after(), Duration::from_secs(2));
            }
        }
    }
    assert_eq!(granted, 1);
}

#[test]
fn jitter_samples_stay_within_bounds_and_spread() {
    let jitter = Jitter::up_to(Duration::from_millis(100));
    assert_eq!(jitter.max(), Duration::from_millis(100));
    let samples: Vec<Duration> = (0..2000).map(|_| jitter.sample()).collect();
    assert!(samples.iter().all(|&d| d <= Duration::from_millis(100)));
    // Spread over the range: both halves are hit, and values differ.
    let low = samples
        .iter()
        .filter(|&&d| d < Duration::from_millis(50))
        .count();
    assert!(
        (800..1200).contains(&low),
        "{low} of 2000 in the lower half"
    );
    let mut distinct = samples.clone();
    distinct.sort();
    distinct.dedup();
    assert!(distinct.len() > 1900);
    assert_eq!(Jitter::NONE.sample(), Duration::ZERO);
    assert_eq!(Jitter::default(), Jitter::NONE);
    // A jitter past what u64 nanoseconds hold is sampled over all of them,
    // spread over that range rather than stuck at either end.
    let huge: Vec<Duration> = (0..64)
        .map(|_| Jitter::up_to(Duration::MAX).sample())
        .collect();
    let cap = Duration::from_nanos(u64::MAX);
    assert!(huge.iter().all(|&d| d <= cap), "{huge:?}");
    let upper = huge.iter().filter(|&&d| d > cap / 2).count();
    assert!((8..=56).contains(&upper), "{upper} of 64 in the upper half");
}

#[tokio::test(start_paused = true)]
async fn jittered_wakeups_are_late_by_at_most_the_jitter_and_spread_apart() {
    let jitter = Jitter::up_to(Duration::from_millis(200));
    let mut waits = Vec::new();
    for _ in 0..30 {
        let limiter = single_bucket();
        drain(&limiter, "t");
        let start = Instant::now();
        limiter.wait("t").jitter(jitter).await.unwrap();
        let waited = start.elapsed();
        assert!(waited >= Duration::from_secs(1), "{waited:?}");
        // The timer rounds a wake-up up to the next millisecond.
        assert!(waited <= Duration::from_millis(1201), "{waited:?}");
        waits.push(waited);
    }
    waits.sort();
    waits.dedup();
    assert!(waits.len() > 10, "wake-ups should spread: {waits:?}");
}

#[tokio::test(start_paused = true)]
async fn jitter_never_pushes_a_bounded_wait_past_its_deadline() {
    for _ in 0..20 {
        let limiter = single_bucket();
        drain(&limiter, "t");
        let start = Instant::now();
        let max_wait = Duration::from_millis(1050);
        let outcome = limiter
            .wait("t")
            .jitter(Jitter::up_to(Duration::from_secs(5)))
            .within(max_wait)
            .await;
        assert!(start.elapsed() <= max_wait, "{:?}", start.elapsed());
        assert!(
            outcome.is_ok(),
            "the token is due at 1 s, before the deadline"
        );
    }
}

#[tokio::test]
async fn waiting_works_with_the_default_clock_and_real_time() {
    // No sleeping here: the tenant has tokens. This checks that the default
    // clock's futures are Send and usable from spawned tasks.
    let limiter = Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(100))
            .build()
            .unwrap(),
    );
    let l = Arc::clone(&limiter);
    let grant = tokio::spawn(async move { l.wait("t").await.unwrap() })
        .await
        .unwrap();
    assert!(limiter.shard("t").contains(grant.bucket()));
}

#[tokio::test(start_paused = true)]
async fn a_nested_wait_draws_on_the_users_buckets_only() {
    // 8 buckets of one token, one a second each; a tenant holds 4, a user 2.
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(8))
        .per_tenant(4)
        .per_user(2)
        .clock(TokioClock::new())
        .build()
        .unwrap();
    let noisy = limiter.shard(Request::tenant("acme").user("noisy"));
    let quiet = (0..100)
        .map(|u| format!("user-{u}"))
        .find(|u| {
            limiter
                .shard(Request::tenant("acme").user(u))
                .overlap(&noisy)
                == 0
        })
        .unwrap();
    let start = Instant::now();
    for _ in 0..4 {
        let grant = limiter
            .wait(Request::tenant("acme").user("noisy"))
            .await
            .unwrap();
        assert!(noisy.contains(grant.bucket()), "{grant:?}");
    }
    // Two at once, two more a second later: the user's buckets only.
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    // Its tenant's other pair was never touched.
    let grant = limiter
        .wait(Request::tenant("acme").user(&quiet).tokens(2))
        .await
        .unwrap();
    assert_eq!(grant.payments().len(), 2);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
    let err = limiter
        .wait(Request::tenant("acme").user(&quiet).tokens(3))
        .await
        .unwrap_err();
    assert_eq!(err.reason(), DenialReason::NeverFits { asked: 3, most: 2 });
}
