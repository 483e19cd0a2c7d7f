//! Memory stays flat with the number of distinct tenant values: a rule's
//! state is its N buckets and a bounded tenant cache, not one counter per
//! value. Live heap bytes are counted by a global allocator of this test
//! binary's own.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::*;

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// The workspace denies unsafe code; a global allocator needs it. Allowed
// here, in a test binary, for two calls forwarded to System.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as received.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const CONFIG: &str = r#"
domain: d
descriptors:
  - key: tenant
    rate_limit: {rate: "4000000000/s"}
    shuffle: {buckets: 16, per_tenant: 2, tenant_cache: 1024}
"#;

async fn distinct(server: &shuffle_limiter_server::Running, from: usize, n: usize) {
    let mut tasks = Vec::new();
    for s in 0..8 {
        let mut client = client(server).await;
        tasks.push(tokio::spawn(async move {
            for i in (from + s..from + n).step_by(8) {
                let value = format!("tenant-{i}");
                let answer = ask(&mut client, request("d", &[("tenant", &value)], 1)).await;
                assert_eq!(code(&answer), Code::Ok);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_distinct_values_take_no_more_memory() {
    let config = ConfigFile::new(CONFIG);
    let server = serve(&config).await;
    // Fill the tenant cache and warm the connections' buffers.
    distinct(&server, 0, 5_000).await;
    let before = LIVE.load(Ordering::Relaxed);
    distinct(&server, 5_000, 20_000).await;
    let after = LIVE.load(Ordering::Relaxed);
    // One counter per value would take hundreds of kB (20 000 keys of 12
    // bytes, and their entries); the buckets and the cache take nothing
    // more (2 kB measured).
    let growth = after - before;
    assert!(growth < 128 * 1024, "live heap grew by {growth} bytes");
    server.shutdown().await;
}
