//! The warning of a limiter built with weak isolation (feature `metrics`).
//! Alone in its binary: tracing caches each event's interest, and a test
//! running beside it with no subscriber would leave "never" in that cache.

use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

use shuffle_limiter::{Quota, ShardedLimiter};

/// Keeps the message of every warn-level event.
#[derive(Clone, Default)]
struct Warnings(Arc<Mutex<Vec<String>>>);

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

impl Subscriber for Warnings {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }
    fn record(&self, _: &Id, _: &Record<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        if *event.metadata().level() == Level::WARN {
            let mut message = Message(String::new());
            event.record(&mut message);
            self.0.lock().unwrap().push(message.0);
        }
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn a_weak_limiter_warns_once_when_built_and_a_strong_one_never() {
    let warnings = Warnings::default();
    tracing::subscriber::with_default(warnings.clone(), || {
        let weak = ShardedLimiter::builder()
            .quota(Quota::per_minute(3))
            .build()
            .unwrap();
        for _ in 0..10 {
            let _ = weak.check("t");
            let _ = weak.isolation();
        }
        ShardedLimiter::builder()
            .quota(Quota::per_second(100))
            .build()
            .unwrap();
    });
    let seen = warnings.0.lock().unwrap();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert!(
        seen[0].contains("weak isolation: N = 3 buckets, k = 2 per tenant"),
        "{seen:?}"
    );
    assert!(
        seen[0].contains("fewer than 10 distinct shards"),
        "{seen:?}"
    );
}
