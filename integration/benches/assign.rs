//! The cost of a tenant-cache miss: the assignment alone, without a limiter.
//!
//! ```text
//! cargo bench -p integration --bench assign -- --noplot
//! ```
//!
//! `seed` is the SHA-256 half of a miss; `shard` is the whole miss (the seed,
//! then the rendezvous over N buckets), so the rendezvous costs the
//! difference. Each iteration takes the next of 1024 tenants, so the
//! branches of the selection see varied seeds, as real misses do.
#![allow(missing_docs)] // criterion's macros generate undocumented items

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use shuffle_limiter::Assignment;

const TENANTS: usize = 1024;

fn tenants() -> Vec<String> {
    (0..TENANTS).map(|t| format!("tenant-{t}")).collect()
}

fn miss(c: &mut Criterion) {
    let keys = tenants();
    let mut g = c.benchmark_group("assign");
    let a = Assignment::new(8, 2, b"bench-salt").expect("valid counts");
    let mut i = 0;
    g.bench_function("seed", |b| {
        b.iter(|| {
            i = (i + 1) % TENANTS;
            a.seed(black_box(&keys[i]))
        })
    });
    let shapes = [
        (8, 2),
        (64, 2),
        (1024, 2),
        (65536, 2),
        (8, 4),
        (64, 4),
        (1024, 4),
        (65536, 4),
        (64, 1),
        (64, 8),
    ];
    for (n, k) in shapes {
        let a = Assignment::new(n, k, b"bench-salt").expect("valid counts");
        g.bench_function(format!("shard N={n} k={k}"), |b| {
            b.iter(|| {
                i = (i + 1) % TENANTS;
                a.shard(black_box(&keys[i]))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, miss);
criterion_main!(benches);
