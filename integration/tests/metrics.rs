//! Observability: counters and gauges through a test recorder, and tracing
//! events through a capturing subscriber. No tenant id is ever recorded.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use shuffle_limiter::metrics::{AVAILABLE, DENIALS, GRANTS};
use shuffle_limiter::{DenialReason, ManualClock, Quota, Request, ShardedLimiter};

/// Tests run one at a time: tracing caches each call site's interest when
/// it is first hit, and a call site first hit on another test's thread while
/// the capturing subscriber is being installed can miss it.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// (metric name, limiter, bucket) → value.
type Series = HashMap<(String, String, u32), f64>;

fn read(snapshotter: &Snapshotter) -> Series {
    let mut series = Series::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        let labels: HashMap<&str, &str> = key.labels().map(|l| (l.key(), l.value())).collect();
        assert_eq!(labels.len(), 2, "only limiter and bucket: {labels:?}");
        let bucket = labels["bucket"].parse().unwrap();
        let value = match value {
            DebugValue::Counter(n) => n as f64,
            DebugValue::Gauge(g) => g.0,
            DebugValue::Histogram(_) => panic!("no histograms are recorded"),
        };
        let id = (key.name().to_owned(), labels["limiter"].to_owned(), bucket);
        series.insert(id, value);
    }
    series
}

fn build(name: &str, clock: &ManualClock) -> ShardedLimiter<ManualClock> {
    ShardedLimiter::builder()
        .quota(Quota::per_second(8).with_burst(16))
        .buckets(8)
        .per_tenant(2)
        .name(name)
        .clock(clock.clone())
        .build()
        .unwrap()
}

#[test]
fn grants_and_denials_are_counted_per_limiter_and_bucket() {
    let _serial = serial();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    // Handles are registered at build time, with the recorder in force then;
    // the checks below run outside it and still count.
    let (amazon, ebay) = metrics::with_local_recorder(&recorder, || {
        (build("amazon", &clock), build("ebay", &clock))
    });

    let mut grants: HashMap<u32, f64> = HashMap::new();
    let mut denials: HashMap<u32, f64> = HashMap::new();
    for tenant in ["t1", "t2", "t3", "t4", "t5"] {
        for _ in 0..6 {
            match amazon.check(tenant) {
                Ok(g) => *grants.entry(g.bucket()).or_default() += 1.0,
                Err(d) => *denials.entry(d.bucket()).or_default() += 1.0,
            }
        }
    }
    assert!(ebay.check("t1").is_ok());
    let never = amazon.check(Request::tenant("t1").tokens(5)).unwrap_err();
    assert!(
        matches!(never.reason(), DenialReason::NeverFits { most: 4, .. }),
        "not a decision: {never:?}"
    );

    let series = read(&snapshotter);
    for bucket in 0..8 {
        let at = |name: &str, limiter: &str| {
            series
                .get(&(name.to_owned(), limiter.to_owned(), bucket))
                .copied()
        };
        // Every bucket's series exists from the start, even at zero.
        assert_eq!(
            at(GRANTS, "amazon"),
            Some(grants.get(&bucket).copied().unwrap_or(0.0))
        );
        assert_eq!(
            at(DENIALS, "amazon"),
            Some(denials.get(&bucket).copied().unwrap_or(0.0))
        );
        assert!(at(GRANTS, "ebay").is_some());
    }
    let total = |name: &str, limiter: &str| -> f64 {
        series
            .iter()
            .filter(|((n, l, _), _)| n == name && l == limiter)
            .map(|(_, v)| v)
            .sum()
    };
    assert_eq!(total(GRANTS, "amazon") + total(DENIALS, "amazon"), 30.0);
    assert_eq!(total(GRANTS, "ebay"), 1.0);
    assert_eq!(total(DENIALS, "ebay"), 0.0);
}

/// Takes every token `tenant` has (at most the whole burst), failing at once
/// rather than looping if it is granted more.
fn drain(limiter: &ShardedLimiter<ManualClock>, tenant: &str) {
    let most = limiter.quota().burst() as usize;
    let granted = (0..=most)
        .take_while(|_| limiter.check(tenant).is_ok())
        .count();
    assert!(granted <= most, "granted more than the burst of {most}");
}

#[test]
fn a_snapshot_sets_the_available_tokens_gauge_of_each_bucket() {
    let _serial = serial();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let clock = ManualClock::new();
    let limiter = metrics::with_local_recorder(&recorder, || build("amazon", &clock));
    drain(&limiter, "t");
    clock.advance(Duration::from_millis(1500)); // 1 token per bucket per second
    let states = limiter.snapshot();

    let series = read(&snapshotter);
    for state in &states {
        let gauge = series[&(AVAILABLE.to_owned(), "amazon".to_owned(), state.bucket())];
        assert_eq!(gauge, state.available() as f64);
    }
    let shard = limiter.shard("t");
    for state in &states {
        let expected = if shard.contains(state.bucket()) { 1 } else { 2 };
        assert_eq!(state.available(), expected);
    }
}

#[derive(Default, Clone)]
struct Capture(Arc<Mutex<Vec<(tracing::Level, String)>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.0 += &format!("{}={value:?} ", field.name());
    }
}

impl tracing::Subscriber for Capture {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let level = *event.metadata().level();
        self.0.lock().unwrap().push((level, fields.0));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn tracing_events_are_debug_or_trace_and_never_name_a_tenant() {
    let _serial = serial();
    let capture = Capture::default();
    let clock = ManualClock::new();
    tracing::subscriber::with_default(capture.clone(), || {
        let limiter = build("amazon", &clock);
        drain(&limiter, "secret-tenant-id");
        assert!(limiter.check("secret-tenant-id").is_err());
    });
    let events = capture.0.lock().unwrap();
    let built: Vec<_> = events
        .iter()
        .filter(|(_, f)| f.contains("rate limiter built"))
        .collect();
    assert_eq!(built.len(), 1);
    assert_eq!(built[0].0, tracing::Level::DEBUG);
    assert!(built[0].1.contains("limiter=\"amazon\""), "{}", built[0].1);
    let denied: Vec<_> = events
        .iter()
        .filter(|(_, f)| f.contains("request denied"))
        .collect();
    assert_eq!(denied.len(), 2);
    for (level, fields) in events.iter() {
        assert!(*level >= tracing::Level::DEBUG, "{level} {fields}"); // DEBUG or TRACE
        assert!(!fields.contains("secret-tenant-id"), "{fields}");
    }
}
