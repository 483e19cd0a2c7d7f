//! Memory stays flat with the number of distinct tenant values: a rule's
//! state is its N buckets and a bounded tenant cache, not one counter per
//! value. Live heap bytes are counted by a global allocator of this test
//! binary's own.

#[path = "support/counting.rs"]
mod counting;
mod support;

use counting::{Counting, live};
use support::*;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const CONFIG: &str = r#"
domain: d
descriptors:
  - key: tenant
    rate_limit: {rate: "4000000000/s"}
    shuffle: {buckets: 16, per_tenant: 2, tenant_cache: 1024}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_distinct_values_take_no_more_memory() {
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
