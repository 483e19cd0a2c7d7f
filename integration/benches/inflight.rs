//! An uncontended try_acquire and release of an in-flight limit beside a
//! `tokio::sync::Semaphore`'s, in the same run.
//!
//! ```text
//! cargo bench -p integration --no-default-features --features wait --bench inflight -- --warm-up-time 1 --measurement-time 3 --noplot
//! ```
//!
//! The limit is C = 40 over N = 8 pools, k = 2, the default tenant cache;
//! the semaphore holds 40 permits. Each iteration takes one permit and
//! drops it: by tenant id (the tenant cache's lookup included), and by a
//! handle that resolved the tenant's pools once.
#![allow(missing_docs)] // criterion's macros generate undocumented items

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use shuffle_limiter::inflight::InFlight;
use tokio::sync::Semaphore;

fn uncontended(c: &mut Criterion) {
    let mut g = c.benchmark_group("acquire and release/uncontended");
    g.throughput(Throughput::Elements(1));
    let inflight = InFlight::builder()
        .concurrency(40)
        .pools(8)
        .per_tenant(2)
        .build()
        .expect("valid configuration");
    g.bench_function("shuffle-limiter try_acquire(&str)", |b| {
        b.iter(|| drop(black_box(inflight.try_acquire(black_box("tenant-42")))))
    });
    let tenant = inflight.handle("tenant-42");
    g.bench_function("shuffle-limiter handle try_acquire", |b| {
        b.iter(|| drop(black_box(black_box(&tenant).try_acquire())))
    });
    let semaphore = Semaphore::new(40);
    g.bench_function("tokio Semaphore try_acquire", |b| {
        b.iter(|| drop(black_box(semaphore.try_acquire())))
    });
    g.finish();
}

criterion_group!(benches, uncontended);
criterion_main!(benches);
