//! `/metrics`: Prometheus text through metrics-exporter-prometheus, with a
//! recorder of each server's own (not the global one), so that several
//! servers in one process (the tests) count apart.
//!
//! Labels hold the domain and the descriptor's path from the config, never
//! a value from a request: the number of series stays bounded by the config.

use std::sync::Arc;

use metrics::{Counter, Gauge, Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

const META: Metadata<'static> = Metadata::new(module_path!(), Level::INFO, None);

/// The decisions of one rule, by code.
#[derive(Clone)]
pub(crate) struct Counters {
    pub(crate) ok: Counter,
    pub(crate) over_limit: Counter,
    /// Over the limit, answered OK because of `shadow_mode`.
    pub(crate) shadow_over_limit: Counter,
    /// The store could not decide (Redis away): answered UNAVAILABLE (OK in
    /// shadow mode).
    pub(crate) unavailable: Counter,
}

/// The server's recorder and the counters outside any rule.
#[derive(Clone)]
pub(crate) struct Metrics {
    recorder: Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
    pub(crate) unknown_domain: Counter,
    pub(crate) no_rule: Counter,
    pub(crate) invalid: Counter,
    pub(crate) reload_ok: Counter,
    pub(crate) reload_error: Counter,
    pub(crate) rules: Gauge,
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let recorder = Arc::new(PrometheusBuilder::new().build_recorder());
        let handle = recorder.handle();
        let decision = |domain: &str, code: &'static str| {
            let labels = vec![
                Label::new("domain", domain.to_owned()),
                Label::new("descriptor", ""),
                Label::new("code", code),
            ];
            recorder.register_counter(&Key::from_parts(DECISIONS, labels), &META)
        };
        let reload = |result: &'static str| {
            let labels = vec![Label::new("result", result)];
            recorder.register_counter(&Key::from_parts(RELOADS, labels), &META)
        };
        Metrics {
            unknown_domain: decision("", "unknown_domain"),
            no_rule: decision("", "no_rule"),
            invalid: decision("", "invalid_argument"),
            reload_ok: reload("ok"),
            reload_error: reload("error"),
            rules: recorder.register_gauge(&Key::from_name(RULES), &META),
            handle,
            recorder,
        }
    }

    /// The counters of the rule at `path` in `domain` (the same counters
    /// again after a reload).
    pub(crate) fn counters(&self, domain: &str, path: &str) -> Counters {
        let counter = |code: &'static str| {
            let labels = vec![
                Label::new("domain", domain.to_owned()),
                Label::new("descriptor", path.to_owned()),
                Label::new("code", code),
            ];
            self.recorder
                .register_counter(&Key::from_parts(DECISIONS, labels), &META)
        };
        Counters {
            ok: counter("ok"),
            over_limit: counter("over_limit"),
            shadow_over_limit: counter("shadow_over_limit"),
            unavailable: counter("unavailable"),
        }
    }

    /// The Prometheus text of every metric.
    pub(crate) fn render(&self) -> String {
        self.handle.render()
    }
}

/// Decisions, by `domain`, `descriptor` (the config's path, such as
/// `tenant.user`) and `code`.
const DECISIONS: &str = "shuffle_limiter_server_decisions_total";
/// Reloads of the config, by `result` (`ok`, `error`).
const RELOADS: &str = "shuffle_limiter_server_reloads_total";
/// Rules (descriptors with a rate) in the config now served.
const RULES: &str = "shuffle_limiter_server_rules";
