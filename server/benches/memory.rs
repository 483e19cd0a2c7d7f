//! Live heap of the server as the number of distinct tenant values grows
//! to a million, over real gRPC on 127.0.0.1 (8 clients): a rule's state is its N
//! buckets and a bounded tenant cache, so the heap must stay flat. Beside
//! it, in the same run, what one counter per value costs (a `HashMap` from
//! each value to a `u64`: the layout of a limiter with a counter per
//! descriptor value).
//!
//! `cargo bench -p shuffle-limiter-server --bench memory` (`-- VALUES` for
//! the number of distinct values, default 1 000 000).

use std::collections::HashMap;
use std::time::Instant;

#[path = "../tests/support/counting.rs"]
mod counting;
#[path = "../tests/support/mod.rs"]
mod support;

use counting::{Counting, live};
use support::{ConfigFile, distinct, serve};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

// A budget no run exhausts, and the default tenant cache (allocated once).
const CONFIG: &str = r#"
domain: d
descriptors:
  - key: tenant
    rate_limit: {rate: "4000000000/s"}
    shuffle: {buckets: 16, per_tenant: 2}
"#;

fn kib(bytes: isize) -> String {
    format!("{:.1} KiB", bytes as f64 / 1024.0)
}

fn main() {
    let values: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let config = ConfigFile::new(CONFIG);
        let server = serve(&config).await;
        // Fill the tenant cache and warm the connections' buffers.
        let warm = 10_000.min(values);
        distinct(&server, 0, warm).await;
        let base = live();
        println!("distinct values | server live heap growth | one counter per value | decisions/s");
        let mut done = warm;
        for step in [100_000, 250_000, 500_000, 1_000_000, values] {
            let to = step.min(values);
            if to <= done {
                continue;
            }
            let start = Instant::now();
            distinct(&server, done, to).await;
            let rate = (to - done) as f64 / start.elapsed().as_secs_f64();
            let growth = live() - base;
            // The same values, one counter each, measured the same way.
            let before = live();
            let counters: HashMap<String, u64> =
                (0..to).map(|i| (format!("tenant-{i}"), 1)).collect();
            let per_value = live() - before;
            drop(counters);
            println!("{to} | {} | {} | {rate:.0}", kib(growth), kib(per_value));
            done = to;
        }
        server.shutdown().await;
    });
}
