//! Check throughput beside governor and a bare atomic, in the same run.
//!
//! ```text
//! cargo bench -p integration --bench limiter
//! cargo bench -p integration --bench limiter -- --test     # each benchmark once, to see that it runs
//! ```
//!
//! The limiter is the default builder's: N = 8 buckets, k = 2 per tenant,
//! the default tenant cache. Many tenants
//! keyed by `&str`, in several access orders, are in `benches/keyed.rs`.
#![allow(missing_docs)] // criterion's macros generate undocumented items

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use crossbeam_utils::CachePadded;
use governor::{Quota as GQuota, RateLimiter};
use shuffle_limiter::{Clock, MonotonicClock, Quota, Request, ShardedLimiter};

mod support;

/// A budget so large that every check in the benchmark is granted, so both
/// libraries do the same work: read the clock, decide, write the state.
/// Everything else is the builder's default.
fn ours() -> ShardedLimiter {
    ShardedLimiter::builder()
        .quota(Quota::per_second(1_000_000_000))
        .build()
        .expect("valid configuration")
}

fn governor_quota() -> GQuota {
    GQuota::per_second(NonZeroU32::new(1_000_000_000).expect("non-zero"))
}

/// The floor: one clock read and one compare-and-swap on one atomic.
fn bare_atomic(clock: &MonotonicClock, cell: &AtomicU64) -> bool {
    let now = clock.now_nanos();
    let old = cell.load(Ordering::Relaxed);
    cell.compare_exchange_weak(old, old.max(now) + 1, Ordering::Relaxed, Ordering::Relaxed)
        .is_ok()
}

fn single(c: &mut Criterion) {
    let mut g = c.benchmark_group("check/one tenant");
    g.throughput(Throughput::Elements(1));
    let limiter = ours();
    let tenant = limiter.handle("tenant-42");
    g.bench_function("shuffle-limiter tenant handle", |b| {
        b.iter(|| black_box(tenant.check()).is_ok())
    });
    g.bench_function("shuffle-limiter check(&str)", |b| {
        b.iter(|| black_box(limiter.check(black_box("tenant-42"))).is_ok())
    });
    // Any k: four buckets per tenant take the general path.
    let wide = ShardedLimiter::builder()
        .quota(Quota::per_second(1_000_000_000))
        .per_tenant(4)
        .build()
        .expect("valid configuration");
    let wide_tenant = wide.handle("tenant-42");
    g.bench_function("shuffle-limiter tenant handle, k = 4", |b| {
        b.iter(|| black_box(wide_tenant.check()).is_ok())
    });
    // Borrowing on: the own buckets pay, as in every check of this group.
    let lending = ShardedLimiter::builder()
        .quota(Quota::per_second(1_000_000_000))
        .borrow_from(2)
        .build()
        .expect("valid configuration");
    let lender = lending.handle("tenant-42");
    g.bench_function("shuffle-limiter tenant handle, borrowing on (d = 2)", |b| {
        b.iter(|| black_box(lender.check()).is_ok())
    });
    // A nested check: the tenant's shard from the cache, the user's two of
    // its four buckets by one SHA-256 (nothing per user is kept).
    let nested = ShardedLimiter::builder()
        .quota(Quota::per_second(1_000_000_000))
        .per_tenant(4)
        .per_user(2)
        .build()
        .expect("valid configuration");
    g.bench_function(
        "shuffle-limiter check_nested(&str, &str), j = 2 of k = 4",
        |b| {
            b.iter(|| {
                black_box(
                    nested.check(Request::tenant(black_box("tenant-42")).user(black_box("user-7"))),
                )
                .is_ok()
            })
        },
    );
    let direct = RateLimiter::direct(governor_quota());
    g.bench_function("governor direct check()", |b| {
        b.iter(|| black_box(direct.check()).is_ok())
    });
    let (clock, cell) = (MonotonicClock::new(), AtomicU64::new(0));
    g.bench_function("bare AtomicU64 CAS + clock", |b| {
        b.iter(|| bare_atomic(&clock, black_box(&cell)))
    });
    g.finish();

    // A caller that reads only whether it may go: the result is not kept,
    // so neither library has to build more of it than that one bit.
    let mut g = c.benchmark_group("check/is_ok only");
    g.throughput(Throughput::Elements(1));
    g.bench_function("shuffle-limiter tenant handle", |b| {
        b.iter(|| black_box(tenant.check().is_ok()))
    });
    g.bench_function("governor direct check()", |b| {
        b.iter(|| black_box(direct.check().is_ok()))
    });
    g.finish();
}

/// A flooding tenant's common case: every check denied, by budgets of 8 and
/// 1 requests a second, drained before the benchmark.
fn denied(c: &mut Criterion) {
    let mut g = c.benchmark_group("check/denied");
    g.throughput(Throughput::Elements(1));
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(8))
        .build()
        .expect("valid configuration");
    let tenant = limiter.handle("tenant-42");
    while tenant.check().is_ok() {}
    g.bench_function("shuffle-limiter tenant handle", |b| {
        b.iter(|| black_box(tenant.check()).is_err())
    });
    g.bench_function("shuffle-limiter check(&str)", |b| {
        b.iter(|| black_box(limiter.check(black_box("tenant-42"))).is_err())
    });
    let direct = RateLimiter::direct(GQuota::per_second(NonZeroU32::MIN));
    while direct.check().is_ok() {}
    g.bench_function("governor direct check()", |b| {
        b.iter(|| black_box(direct.check()).is_err())
    });
    g.finish();
}

/// Runs `work` on two threads for `iters` iterations each; the time of the
/// slower one.
/// `iters` calls of `work(thread)` on each of two threads at once.
fn two_threads(iters: u64, work: impl Fn(usize) + Sync) -> Duration {
    support::on_two_threads(|t| {
        for _ in 0..iters {
            work(t);
        }
    })
}

fn contended(c: &mut Criterion) {
    let mut g = c.benchmark_group("check/2 threads");
    // Each iteration is one check on each of the two threads.
    g.throughput(Throughput::Elements(2));
    let limiter = Arc::new(ours());
    let (a, b) = disjoint_pair(&limiter);
    let handles = [limiter.handle(&a), limiter.handle(&b)];
    g.bench_function("shuffle-limiter, 2 tenants on disjoint shards", |bench| {
        bench.iter_custom(|iters| {
            two_threads(iters, |t| {
                black_box(handles[t].check()).ok();
            })
        })
    });
    g.bench_function(
        "shuffle-limiter, 2 tenants on disjoint shards, is_ok only",
        |bench| {
            bench.iter_custom(|iters| {
                two_threads(iters, |t| {
                    black_box(handles[t].check().is_ok());
                })
            })
        },
    );
    let direct = RateLimiter::direct(governor_quota());
    g.bench_function("governor direct, shared by 2 threads", |bench| {
        bench.iter_custom(|iters| {
            two_threads(iters, |_| {
                black_box(direct.check()).ok();
            })
        })
    });
    let (clock, cell) = (MonotonicClock::new(), AtomicU64::new(0));
    g.bench_function("bare AtomicU64 CAS + clock, shared by 2 threads", |bench| {
        bench.iter_custom(|iters| {
            two_threads(iters, |_| {
                black_box(bare_atomic(&clock, &cell));
            })
        })
    });
    // The floor of two threads that share nothing: each its own atomic on
    // its own cache line, and its own clock read.
    let cells = [
        CachePadded::new(AtomicU64::new(0)),
        CachePadded::new(AtomicU64::new(0)),
    ];
    g.bench_function("bare AtomicU64 CAS + clock, one per thread", |bench| {
        bench.iter_custom(|iters| {
            two_threads(iters, |t| {
                black_box(bare_atomic(&clock, &cells[t]));
            })
        })
    });
    g.finish();
}

/// Two tenants whose shards have no bucket in common.
fn disjoint_pair(limiter: &ShardedLimiter) -> (String, String) {
    let first = limiter.shard("tenant-0");
    let other = (1..)
        .map(|t| format!("tenant-{t}"))
        .find(|t| limiter.shard(t).overlap(&first) == 0)
        .expect("some tenant is disjoint");
    ("tenant-0".to_owned(), other)
}

criterion_group!(benches, single, denied, contended);
criterion_main!(benches);
