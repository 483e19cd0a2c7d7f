//! Issue 27's scene on tokio's paused clock: an independent policer whose
//! limit moves 5/s → 3/s → 8/s (a minute each), twenty tenants calling it
//! through one limiter (N = 8, k = 2), `tenant-0` with eight callers. The
//! adaptive limiter against the same run with a fixed one configured at the
//! first limit; a policer that advertises its limit and one that only
//! throttles; and a flaky account's retries, kept to its own buckets.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use shuffle_limiter::upstream::{Adaptive, RetryBudget, Scope, Upstream};
use shuffle_limiter::{Quota, ShardedLimiter, TokioClock};
use tokio::time::Instant;

#[path = "../examples/upstream_feedback/scene.rs"]
mod scene;
use scene::{LATENCY, Policer, Window, tenant};

/// A minute per limit.
const RUN: Duration = Duration::from_secs(180);
/// How long after a change the window starts.
const SETTLE: Duration = Duration::from_secs(10);

fn limiter() -> Arc<ShardedLimiter<TokioClock>> {
    Arc::new(
        ShardedLimiter::builder()
            // Configured at the first limit, a second of it as burst
            // (the least N allows is 8).
            .quota(Quota::per_second(LIMITS_FIRST).with_burst(8))
            .buckets(8)
            .per_tenant(2)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    )
}
const LIMITS_FIRST: u32 = scene::LIMITS[0];

/// The controller: between 1/s and 10/s, counted per minute so that it
/// moves in steps of 1/60 of a request a second.
fn adaptive() -> Adaptive<TokioClock> {
    Adaptive::new(60, Quota::per_minute(600).with_burst(16))
        .unwrap()
        .clock(TokioClock::new())
}

/// Sends a tenant's call to `policer`, answered after `LATENCY`.
fn sender(
    policer: &Arc<Mutex<Policer>>,
    start: Instant,
) -> impl Fn(String) -> std::pin::Pin<Box<dyn std::future::Future<Output = scene::Reply> + Send>>
+ Clone
+ Send
+ Sync
+ 'static {
    let policer = Arc::clone(policer);
    move |id: String| {
        let policer = Arc::clone(&policer);
        Box::pin(async move {
            tokio::time::sleep(LATENCY).await;
            policer.lock().unwrap().answer(start.elapsed(), &id)
        })
    }
}

/// Runs the scene: the three windows, and the policer for more.
async fn run(adapt: bool, advertise: bool) -> (Vec<Window>, Arc<Mutex<Policer>>) {
    let limiter = limiter();
    let upstream = Upstream::new(Arc::clone(&limiter)).scope(Scope::Shared);
    let policer = Arc::new(Mutex::new(Policer::new(RUN, advertise)));
    let start = Instant::now();
    let send = sender(&policer, start);
    let until = start + RUN;
    if adapt {
        let upstream = Arc::new(upstream.adapt(adaptive()));
        scene::drive(upstream, send, until).await;
    } else {
        scene::drive(Arc::new(upstream), send, until).await;
    }
    let windows = {
        let policer = policer.lock().unwrap();
        (0..3).map(|third| policer.window(third, SETTLE)).collect()
    };
    (windows, policer)
}

fn show(name: &str, windows: &[Window]) -> String {
    let parts: Vec<String> = windows
        .iter()
        .map(|w| {
            format!(
                "{}/s: {:.2}/s ({:.0} %), 429 {:.1} %",
                w.limit,
                w.per_second,
                w.utilization() * 100.0,
                w.throttled_share * 100.0
            )
        })
        .collect();
    format!("{name}: {}", parts.join("; "))
}

#[tokio::test(start_paused = true)]
async fn an_advertised_limit_is_followed_within_the_bars_and_a_fixed_one_is_not() {
    let (adaptive, policer) = run(true, true).await;
    let (fixed, _) = run(false, true).await;
    eprintln!("{}\n{}", show("adaptive", &adaptive), show("fixed", &fixed));
    for w in &adaptive {
        assert!(w.throttled_share <= 0.01, "{w:?}");
        assert!(w.utilization() >= 0.9, "{w:?}");
    }
    assert!(
        fixed[1].throttled_share > 0.1,
        "after the cut: {:?}",
        fixed[1]
    );
    assert!(
        fixed[2].utilization() < 0.7,
        "after the raise: {:?}",
        fixed[2]
    );
    // The noisy tenant is held to its shard: 2 of 8 buckets of the rate.
    let policer = policer.lock().unwrap();
    let total: u64 = policer.served.values().sum();
    let noisy = policer.served[&tenant(0)];
    assert!(noisy * 100 <= total * 30, "{noisy} of {total}");
}

/// A policer that only throttles: the controller learns by probing, and
/// pays for it in 429s (see the `Adaptive` docs); still far fewer than
/// the fixed limiter's after the cut, and far more of the raise used.
#[tokio::test(start_paused = true)]
async fn a_limit_told_only_by_throttles_is_found_by_probing() {
    let (adaptive, _) = run(true, false).await;
    let (fixed, _) = run(false, false).await;
    eprintln!("{}\n{}", show("adaptive", &adaptive), show("fixed", &fixed));
    // Measured: 429s 3.8 / 6.3 / 1.6 %, use 80 / 99 / 78 %; fixed: 0 /
    // 13.3 / 0 % and 99 / 100 / 62 %.
    assert!(adaptive[1].throttled_share <= 0.1, "{:?}", adaptive[1]);
    assert!(adaptive[1].throttled_share < fixed[1].throttled_share);
    assert!(adaptive[2].utilization() >= 0.75, "{:?}", adaptive[2]);
    assert!(adaptive[2].utilization() >= fixed[2].utilization() + 0.1);
    assert!(
        adaptive.iter().all(|w| w.utilization() >= 0.75),
        "{adaptive:?}"
    );
}

/// A tenant whose account fails every other call retries within its own
/// buckets' budget; tenants whose shard differs keep theirs whole.
#[tokio::test(start_paused = true)]
async fn a_flaky_account_spends_only_its_own_shards_retries() {
    // Below every limit the policer takes: only the flaky account fails.
    let limiter = Arc::new(
        ShardedLimiter::builder()
            .quota(Quota::per_second(2).with_burst(8))
            .buckets(8)
            .per_tenant(2)
            .clock(TokioClock::new())
            .build()
            .unwrap(),
    );
    let flaky = tenant(7);
    let budget = RetryBudget::of(&limiter)
        .floor_per_second(0)
        .clock(TokioClock::new());
    let upstream = Arc::new(
        Upstream::new(Arc::clone(&limiter))
            .scope(Scope::PerTenant)
            .retries(budget),
    );
    // Four minutes: 60 tokens a bucket, enough to bank the cap.
    let run = Duration::from_secs(240);
    let policer = Arc::new(Mutex::new(Policer::new(run, true).flaky(&flaky)));
    let start = Instant::now();
    let send = sender(&policer, start);
    let (sent, made) = scene::drive(Arc::clone(&upstream), send, start + run).await;
    let calls = made.calls.lock().unwrap()[&flaky];
    let retries = sent.of(&flaky) - calls;
    // The budget earns 0.2 of a retry per token its buckets paid (every
    // tenant on them paying), at most 10 banked a bucket.
    let own = limiter.shard(flaky.as_str());
    let paid: u64 = (0..scene::TENANTS)
        .map(tenant)
        .filter(|t| {
            limiter
                .shard(t.as_str())
                .buckets()
                .iter()
                .any(|b| own.contains(*b))
        })
        .map(|t| sent.of(&t))
        .sum();
    assert!(retries > 0, "it did retry");
    assert!(
        retries * 5 <= paid + 20 * 5,
        "{retries} retries, {paid} tokens paid"
    );
    let throttled: u64 = policer
        .lock()
        .unwrap()
        .seconds
        .iter()
        .map(|s| s.throttled)
        .sum();
    assert_eq!(throttled, 0);
    // Every tenant apart from it: banked to the cap (10 a bucket, 2 buckets).
    let budget = upstream.retry_budget().unwrap();
    for t in (0..scene::TENANTS).map(tenant) {
        let shard = limiter.shard(t.as_str());
        if shard.buckets().iter().all(|b| !own.contains(*b)) {
            assert_eq!(budget.banked(&shard), 20, "{t}");
        }
    }
}
