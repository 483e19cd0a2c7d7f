//! Memory stays flat with the number of distinct tenant values: a rule's
//! state is its N buckets and a bounded tenant cache, not one counter per
//! value. Live heap bytes are counted by a global allocator of this test
//! binary's own.

#[path = "support/counting.rs"]
mod counting;
mod support;

use counting::{Counting, live, peak};
use support::*;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The count is the process's: one test at a time.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const CONFIG: &str = r#"
domain: d
descriptors:
  - key: tenant
    rate_limit: {rate: "4000000000/s"}
    shuffle: {buckets: 16, per_tenant: 2, tenant_cache: 1024}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_distinct_values_take_no_more_memory() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let config = ConfigFile::new(CONFIG);
    let server = serve(&config).await;
    // Fill the tenant cache and warm the connections' buffers.
    distinct(&server, 0, 5_000).await;
    let before = live();
    distinct(&server, 5_000, 25_000).await;
    let after = live();
    // One counter per value would take hundreds of kB (20 000 keys of 12
    // bytes, and their entries); the buckets and the cache take nothing
    // more (2 kB measured).
    let growth = after - before;
    assert!(growth < 128 * 1024, "live heap grew by {growth} bytes");
    server.shutdown().await;
}

/// A plain envoyproxy/ratelimit descriptor (a fixed value, one budget, no
/// `shuffle`) costs a rule of a few kilobytes: a config of hundreds of them
/// must not take a tenant cache sized for a shuffled rule's (1.2 MB) each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_plain_descriptors_take_a_few_megabytes_at_most() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let mut text = String::from("domain: d\ndescriptors:\n");
    for i in 0..100 {
        text.push_str(&format!(
            "  - key: generic_key\n    value: v{i}\n    \
             rate_limit: {{unit: second, requests_per_unit: 10}}\n"
        ));
    }
    let config = ConfigFile::new(&text);
    let before = live();
    let server = serve(&config).await;
    let grown = live() - before;
    // 118 MiB before: the library's default cache for every rule.
    assert!(
        grown < 4 << 20,
        "100 plain descriptors took {} KiB",
        grown >> 10
    );
    server.shutdown().await;
}

/// A reload that changes a rule's rate keeps its limiter, large tenant
/// cache and all: it must not build a second one on the way, if only to
/// read the N the build would choose.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_that_keeps_a_rule_does_not_build_its_cache_again() {
    let _alone = ONE_AT_A_TIME.lock().await;
    let config = |rate: &str| {
        format!(
            "domain: d\ndescriptors:\n  - key: tenant\n    rate_limit: {{rate: \"{rate}\"}}\n    \
             shuffle: {{per_tenant: 2, tenant_cache: 4000000}}\n"
        )
    };
    let file = ConfigFile::new(&config("100/s"));
    let before = live();
    let server = serve(&file).await;
    // 6 000 000 ways of 8 bytes: 48 MB.
    let cache = live() - before;
    assert!(cache > 40 << 20, "the rule took {} KiB", cache >> 10);
    file.write(&config("200/s"));
    peak();
    server.reload().await.unwrap();
    let grown = peak() - before - cache;
    assert!(
        grown < 4 << 20,
        "the reload took {} KiB more at its peak",
        grown >> 10
    );
    server.shutdown().await;
}
