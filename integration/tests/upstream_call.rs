//! `upstream::Upstream` around a fake upstream, under tokio's paused time:
//! a throttle holds off where the scope says, retries stay within the
//! tenant's budget, the controller moves the quota, and a cost header
//! settles the grant.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use shuffle_limiter::upstream::{Adaptive, Answer, RetryBudget, Scope, Upstream};
use shuffle_limiter::{Quota, Request, ShardedLimiter, TokioClock};
use tokio::time::Instant;

/// An answer: a status and its headers.
struct Reply(u16, Vec<(&'static str, &'static str)>);

impl Answer for Reply {
    fn status(&self) -> u16 {
        self.0
    }

    fn header(&self, name: &str) -> Option<&[u8]> {
        self.1
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_bytes())
    }
}

fn ok() -> Reply {
    Reply(200, Vec::new())
}

/// 100/s over N = 8 buckets of 10 tokens, k = 2.
fn limiter() -> Arc<ShardedLimiter<TokioClock>> {
    Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(80).with_burst(80))
            .buckets(8)
            .per_tenant(2)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    )
}

/// A tenant sharing no bucket with `of`.
fn apart(limiter: &ShardedLimiter<TokioClock>, of: &str) -> String {
    let held = limiter.shard(of);
    (0..)
        .map(|t| format!("t{t}"))
        .find(|t| {
            limiter
                .shard(t.as_str())
                .buckets()
                .iter()
                .all(|&b| !held.contains(b))
        })
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_per_account_throttle_holds_off_that_tenant_alone() {
    let limiter = limiter();
    let upstream = Upstream::new(Arc::clone(&limiter)).scope(Scope::PerTenant);
    let throttled = upstream
        .call("acme", |_| async {
            Reply(429, vec![("retry-after", "10")])
        })
        .await
        .unwrap();
    assert_eq!(throttled.status(), 429);
    let other = apart(&limiter, "acme");
    let start = Instant::now();
    upstream
        .call(other.as_str(), |_| async { ok() })
        .await
        .unwrap();
    assert_eq!(
        start.elapsed(),
        Duration::ZERO,
        "another account goes on at once"
    );
    upstream.call("acme", |_| async { ok() }).await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(
        start.elapsed() < Duration::from_secs(11),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_throttle_without_a_time_or_with_garbage_holds_off_a_second() {
    let limiter = limiter();
    let upstream = Upstream::new(Arc::clone(&limiter));
    for garbage in [
        vec![],
        vec![("retry-after", "soon")],
        vec![("retry-after", "-4")],
    ] {
        let start = Instant::now();
        let _ = upstream
            .call("acme", |_| async { Reply(503, garbage.clone()) })
            .await;
        upstream.call("globex", |_| async { ok() }).await.unwrap();
        let waited = start.elapsed();
        assert!(
            waited >= Duration::from_secs(1) && waited < Duration::from_millis(1_200),
            "{waited:?}"
        );
    }
    // A date years ahead is cut to an hour.
    let start = Instant::now();
    let far = vec![("retry-after", "Fri, 01 Jan 2100 00:00:00 GMT")];
    let _ = upstream
        .call("acme", |_| async { Reply(429, far.clone()) })
        .await;
    upstream.call("globex", |_| async { ok() }).await.unwrap();
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_secs(3600) && waited < Duration::from_secs(3601),
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn retries_stay_within_the_tenants_budget() {
    let limiter = limiter();
    let budget = RetryBudget::of(&limiter)
        .floor_per_second(0)
        .clock(TokioClock::new());
    let upstream = Upstream::new(Arc::clone(&limiter))
        .scope(Scope::PerTenant)
        .retries(budget);
    let sent = AtomicU32::new(0);
    // No retry banked yet: the 503 comes back as it is.
    let first = upstream
        .call("flaky", |_| async {
            sent.fetch_add(1, Ordering::Relaxed);
            Reply(503, vec![("retry-after", "0")])
        })
        .await
        .unwrap();
    assert_eq!((first.status(), sent.load(Ordering::Relaxed)), (503, 1));
    // Ten good calls bank two retries (0.2 each).
    for _ in 0..10 {
        upstream.call("flaky", |_| async { ok() }).await.unwrap();
    }
    sent.store(0, Ordering::Relaxed);
    let answer = upstream
        .call("flaky", |_| async {
            let n = sent.fetch_add(1, Ordering::Relaxed);
            if n < 2 {
                Reply(503, vec![("retry-after", "0")])
            } else {
                ok()
            }
        })
        .await
        .unwrap();
    assert_eq!((answer.status(), sent.load(Ordering::Relaxed)), (200, 3));
    // The budget is spent: the next failure is not retried.
    sent.store(0, Ordering::Relaxed);
    let _ = upstream
        .call("flaky", |_| async {
            sent.fetch_add(1, Ordering::Relaxed);
            Reply(500, Vec::new())
        })
        .await;
    assert_eq!(sent.load(Ordering::Relaxed), 1);
}

/// A call estimated at 5 tokens that the cost header settles at 1 banks
/// what 1 token earns (0.2 of a retry), not what 5 would: the 4 given back
/// are drawn again by later calls, which bank their own.
#[tokio::test(start_paused = true)]
async fn a_settled_call_banks_retries_on_what_it_cost() {
    let limiter = limiter();
    let budget = RetryBudget::of(&limiter)
        .floor_per_second(0)
        .clock(TokioClock::new());
    let upstream = Upstream::new(Arc::clone(&limiter))
        .scope(Scope::PerTenant)
        .cost_header("X-Usage-Tokens")
        .retries(budget);
    let cost = vec![("x-usage-tokens", "1")];
    upstream
        .call(Request::tenant("flaky").tokens(5), |_| async {
            Reply(200, cost.clone())
        })
        .await
        .unwrap();
    let sent = AtomicU32::new(0);
    let answer = upstream
        .call("flaky", |_| async {
            match sent.fetch_add(1, Ordering::Relaxed) {
                0 => Reply(503, vec![("retry-after", "0")]),
                _ => ok(),
            }
        })
        .await
        .unwrap();
    assert_eq!(
        (answer.status(), sent.load(Ordering::Relaxed)),
        (503, 1),
        "0.2 of a retry banked: none to spend"
    );
}

#[tokio::test(start_paused = true)]
async fn a_sent_call_whose_retry_gets_no_grant_returns_its_answer() {
    let limiter = limiter();
    // A floor of a retry a second: one is there at once.
    let budget = RetryBudget::of(&limiter).clock(TokioClock::new());
    let upstream = Upstream::new(Arc::clone(&limiter))
        .max_wait(Duration::from_millis(250))
        .retries(budget);
    let sent = AtomicU32::new(0);
    // A 429 for 2 s: the retry's wait, bounded at 250 ms, gets no grant.
    // The call was sent, and its answer is what the caller gets.
    let answer = upstream
        .call("acme", |_| {
            sent.fetch_add(1, Ordering::Relaxed);
            async { Reply(429, vec![("retry-after", "2")]) }
        })
        .await;
    assert_eq!(sent.load(Ordering::Relaxed), 1);
    assert_eq!(answer.map(|a| a.status()).ok(), Some(429));
    // The next call is held off: denied, nothing sent.
    let denied = upstream
        .call("acme", |_| {
            sent.fetch_add(1, Ordering::Relaxed);
            async { ok() }
        })
        .await;
    assert!(denied.is_err());
    assert_eq!(sent.load(Ordering::Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn the_controller_learns_and_a_cost_header_settles() {
    let limiter = limiter();
    let adaptive = Adaptive::new(8, Quota::per_second(80).with_burst(80)).unwrap();
    let upstream = Upstream::new(Arc::clone(&limiter))
        .adapt(adaptive.clock(TokioClock::new()))
        .cost_header("X-Usage-Tokens");
    let _ = upstream
        .call("acme", |_| async { Reply(429, vec![("retry-after", "0")]) })
        .await;
    assert_eq!(limiter.quota().count(), 56, "cut by 0.7");
    let policy = vec![("ratelimit-policy", "\"default\";q=2400;w=60")];
    upstream
        .call("acme", |_| async { Reply(200, policy.clone()) })
        .await
        .unwrap();
    assert_eq!(
        limiter.quota().count(),
        38,
        "2 400 a minute is 40/s, less 5 %"
    );
    let other = apart(&limiter, "acme");
    let before = limiter.remaining(other.as_str());
    let cost = vec![("x-usage-tokens", "4")];
    upstream
        .call(other.as_str(), |_| async { Reply(200, cost.clone()) })
        .await
        .unwrap();
    assert_eq!(
        limiter.remaining(other.as_str()),
        before - 4,
        "1 granted, 3 charged"
    );
}

/// A per-account throttle of one user's call holds off the whole tenant's
/// buckets: the account is the tenant's.
#[tokio::test(start_paused = true)]
async fn a_users_throttle_holds_off_the_tenants_account() {
    let limiter = Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(80).with_burst(80))
            .buckets(8)
            .per_tenant(4)
            .per_user(1)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    );
    let upstream = Upstream::new(Arc::clone(&limiter)).scope(Scope::PerTenant);
    let ann = shuffle_limiter::Request::tenant("acme").user("ann");
    let _ = upstream
        .call(ann, |_| async { Reply(429, vec![("retry-after", "60")]) })
        .await
        .unwrap();
    assert_eq!(limiter.remaining("acme"), 0, "every bucket of the tenant");
}
