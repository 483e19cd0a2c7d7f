//! Keyed checks — each tenant named by a `&str` — at 10k, 100k and 1M
//! tenants in three access orders, beside governor's keyed limiter in the
//! same run.
//!
//! ```text
//! cargo bench -p integration --no-default-features --bench keyed                 # everything, about 4½ minutes
//! cargo bench -p integration --no-default-features --bench keyed -- 100k         # one size, every order
//! cargo bench -p integration --no-default-features --bench keyed -- zipf         # one order, every size
//! cargo bench -p integration --no-default-features --bench keyed -- keyed/1M/uniform/ # one size and order
//! cargo bench -p integration --no-default-features --bench keyed -- keyed-2-threads # the two-thread rows only
//! cargo bench -p integration --no-default-features --bench keyed -- --test       # each benchmark once, to see that it runs
//! ```
//!
//! The IDs are `keyed/{10k,100k,1M}/{cyclic,uniform,zipf}/{ours-default-cache,
//! ours-sized-cache,governor-dashmap}`, plus `keyed/100k/uniform/ours-no-cache`
//! and `keyed-2-threads/100k/uniform/{ours-sized-cache,governor-dashmap}`,
//! and at 100k in every order `ours-sized-cache-borrowing-on`.
//!
//! - `ours-default-cache`: `ShardedLimiter` with the default builder (N = 8
//!   buckets, k = 2 per tenant, the default tenant cache).
//! - `ours-sized-cache`: the same with `tenant_cache(tenants)`, a cache that
//!   can hold the whole working set.
//! - `ours-no-cache`: `tenant_cache(0)`, SHA-256 and the rendezvous on every
//!   check: the cost of a miss, for reference (100k uniform only).
//! - `ours-sized-cache-borrowing-on`: the sized cache with `borrow_from(2)`;
//!   the budget is never short, so the own buckets pay every check.
//! - `governor-dashmap`: governor's `RateLimiter::dashmap`, `check_key`.
//!
//! Every limiter is warmed over every key before it is timed, so a row
//! measures the steady state of its order, not first insertions. The orders:
//!
//! - `cyclic`: 0, 1, 2, … — each tenant once per round, the worst case for
//!   any cache smaller than the working set, and a sequential walk over the
//!   keys' own bytes.
//! - `uniform`: uniform random tenants — no locality at all.
//! - `zipf`: Zipf with s = 1 — a few hot tenants and a long tail, closer to
//!   what a multi-tenant service sees.
//!
//! The order is a precomputed `Vec<u32>` of tenant indices, walked cyclically
//! inside the timed loop, so the loop does no random-number generation and
//! both libraries pay the same small cost of reading the next index. Each
//! size's keys and limiters, and each order, are built only when a
//! benchmark that needs them runs, so a filtered run skips the rest.
#![allow(missing_docs)] // criterion's macros generate undocumented items

use std::cell::OnceCell;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::time::Duration;

use criterion::{Bencher, measurement::WallTime};
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use governor::{DefaultKeyedRateLimiter, Quota as GQuota, RateLimiter};
use shuffle_limiter::{Quota, ShardedLimiter};

mod support;

const SIZES: [(&str, usize); 3] = [("10k", 10_000), ("100k", 100_000), ("1M", 1_000_000)];

/// Length of a precomputed order: 16 MiB of indices, four rounds of the
/// largest working set, so the walk repeats rarely and the order itself
/// does not fit in the CPU caches along with the keys.
const ORDER_LEN: usize = 1 << 22;

/// A budget so large that every check is granted, so both libraries do the
/// same work: find the tenant's state, read the clock, decide, write.
const RATE: u32 = 1_000_000_000;

fn ours(cache: Option<usize>) -> ShardedLimiter {
    let builder = ShardedLimiter::builder().quota(Quota::per_second(RATE));
    match cache {
        Some(entries) => builder.tenant_cache(entries),
        None => builder, // the default cache
    }
    .build()
    .expect("valid configuration")
}

/// One working set: the keys, and every limiter warmed over all of them.
struct Tenants {
    keys: Vec<String>,
    default_cache: ShardedLimiter,
    sized_cache: ShardedLimiter,
    governor: DefaultKeyedRateLimiter<String>,
}

impl Tenants {
    fn new(group: &str, tenants: usize) -> Self {
        let keys: Vec<String> = (0..tenants).map(|t| format!("tenant-{t}")).collect();
        let default_cache = ours(None);
        let sized_cache = ours(Some(tenants));
        let governor =
            RateLimiter::dashmap(GQuota::per_second(NonZeroU32::new(RATE).expect("non-zero")));
        for key in &keys {
            let _ = default_cache.check(key);
            let _ = sized_cache.check(key);
            let _ = governor.check_key(key);
        }
        eprintln!(
            "{group}: {tenants} tenants warmed; N = {}, k = {}; default cache holds {} \
             tenants, sized cache {}",
            default_cache.buckets(),
            default_cache.per_tenant(),
            default_cache.tenant_cache_capacity(),
            sized_cache.tenant_cache_capacity(),
        );
        Tenants {
            keys,
            default_cache,
            sized_cache,
            governor,
        }
    }
}

/// splitmix64: a few lines, seeded, good enough to draw benchmark orders
/// (no dependency for that).
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-shift; the bias is below 2⁻⁴⁰ for n ≤ 2²⁴).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }

    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[derive(Clone, Copy)]
enum Order {
    Cyclic,
    Uniform,
    Zipf,
}

impl Order {
    const ALL: [Order; 3] = [Order::Cyclic, Order::Uniform, Order::Zipf];

    fn name(self) -> &'static str {
        match self {
            Order::Cyclic => "cyclic",
            Order::Uniform => "uniform",
            Order::Zipf => "zipf",
        }
    }

    /// `ORDER_LEN` tenant indices in this order (for cyclic, whole rounds
    /// only, so the walk never skips from the middle back to tenant 0).
    fn indices(self, tenants: usize) -> Vec<u32> {
        let mut rng = SplitMix64(0x5EED ^ tenants as u64);
        match self {
            Order::Cyclic => (0..ORDER_LEN / tenants * tenants)
                .map(|i| (i % tenants) as u32)
                .collect(),
            Order::Uniform => (0..ORDER_LEN).map(|_| rng.below(tenants) as u32).collect(),
            Order::Zipf => zipf(tenants, &mut rng),
        }
    }
}

/// `ORDER_LEN` draws from Zipf(s = 1) over `tenants` ranks: rank r has weight
/// 1/r, drawn by binary search in the cumulative weights.
fn zipf(tenants: usize, rng: &mut SplitMix64) -> Vec<u32> {
    let mut cdf = Vec::with_capacity(tenants);
    let mut total = 0.0;
    for rank in 1..=tenants {
        total += 1.0 / rank as f64;
        cdf.push(total);
    }
    // Which tenant holds which rank, shuffled (Fisher–Yates). The keys were
    // allocated in index order, so without this the hottest tenants' key
    // bytes would share a few cache lines, flattering both libraries.
    let mut tenant_of_rank: Vec<u32> = (0..tenants as u32).collect();
    for i in (1..tenants).rev() {
        tenant_of_rank.swap(i, rng.below(i + 1));
    }
    (0..ORDER_LEN)
        .map(|_| {
            let u = rng.unit() * total;
            let rank = cdf.partition_point(|&c| c <= u).min(tenants - 1);
            tenant_of_rank[rank]
        })
        .collect()
}

/// Times one check per iteration, walking `order` from where the previous
/// sample stopped (`cursor`), so short samples do not all replay the same
/// first few, cache-hot keys.
fn walk(
    b: &mut Bencher<'_>,
    cursor: &mut usize,
    order: &[u32],
    keys: &[String],
    mut check: impl FnMut(&String) -> bool,
) {
    b.iter(|| {
        let key = &keys[order[*cursor] as usize];
        *cursor += 1;
        if *cursor == order.len() {
            *cursor = 0;
        }
        check(black_box(key))
    });
}

/// Criterion settings for these groups: 30 benchmarks, each of 2 s warm-up
/// and 5 s of samples, keep the whole run near 4½ minutes. A check costs
/// 50–500 ns, so 5 s is millions of checks, enough for 50 samples.
fn configure(g: &mut BenchmarkGroup<'_, WallTime>) {
    g.warm_up_time(Duration::from_secs(2))
        .measurement_time(Duration::from_secs(5))
        .sample_size(50);
}

fn keyed(c: &mut Criterion) {
    let lending = OnceCell::new();
    let lending = |tenants: usize| {
        lending.get_or_init(|| {
            let limiter = ShardedLimiter::builder()
                .quota(Quota::per_second(RATE))
                .tenant_cache(tenants)
                .borrow_from(2)
                .build()
                .expect("valid configuration");
            for t in 0..tenants {
                let _ = limiter.check(format!("tenant-{t}"));
            }
            limiter
        })
    };
    for (label, tenants) in SIZES {
        let set = OnceCell::new();
        let set = || set.get_or_init(|| Tenants::new(&format!("keyed/{label}"), tenants));
        for order in Order::ALL {
            let indices = OnceCell::new();
            let indices = || indices.get_or_init(|| order.indices(tenants)).as_slice();
            let mut g = c.benchmark_group(format!("keyed/{label}/{}", order.name()));
            configure(&mut g);
            g.throughput(Throughput::Elements(1));
            let mut cursor = 0;
            g.bench_function("ours-default-cache", |b| {
                let s = set();
                walk(b, &mut cursor, indices(), &s.keys, |k| {
                    s.default_cache.check(k.as_str()).is_ok()
                })
            });
            let mut cursor = 0;
            g.bench_function("ours-sized-cache", |b| {
                let s = set();
                walk(b, &mut cursor, indices(), &s.keys, |k| {
                    s.sized_cache.check(k.as_str()).is_ok()
                })
            });
            let mut cursor = 0;
            g.bench_function("governor-dashmap", |b| {
                let s = set();
                walk(b, &mut cursor, indices(), &s.keys, |k| {
                    s.governor.check_key(k).is_ok()
                })
            });
            if label == "100k" {
                // Borrowing on, with every check paid by the tenant's own
                // buckets (the budget is never short): what borrowing costs
                // when it is not used.
                let mut cursor = 0;
                g.bench_function("ours-sized-cache-borrowing-on", |b| {
                    let (s, lending) = (set(), lending(tenants));
                    walk(b, &mut cursor, indices(), &s.keys, |k| {
                        lending.check(k.as_str()).is_ok()
                    })
                });
            }
            if (label, order.name()) == ("100k", "uniform") {
                // The miss-every-time reference: nothing to warm.
                let no_cache = ours(Some(0));
                let mut cursor = 0;
                g.bench_function("ours-no-cache", |b| {
                    walk(b, &mut cursor, indices(), &set().keys, |k| {
                        no_cache.check(k.as_str()).is_ok()
                    })
                });
            }
            g.finish();
        }
    }
}

/// Runs `work(step)` on two threads for `iters` steps each, thread 1 half
/// an order away from thread 0; the time of the slower thread.
fn two_threads(iters: u64, base: usize, work: impl Fn(usize) + Sync) -> Duration {
    support::on_two_threads(|t| {
        let from = base + t * ORDER_LEN / 2;
        for i in 0..iters as usize {
            work((from + i) & (ORDER_LEN - 1));
        }
    })
}

/// Two threads checking uniform random tenants of one shared limiter. Here
/// rather than in `benches/limiter.rs` because it needs this file's keys and
/// orders; it is the keyed counterpart of that file's disjoint-shards row.
fn contended(c: &mut Criterion) {
    let (label, tenants) = SIZES[1];
    let set = OnceCell::new();
    let group = format!("keyed-2-threads/{label}/uniform");
    let set = || set.get_or_init(|| Tenants::new(&group, tenants));
    let indices = OnceCell::new();
    let indices = || indices.get_or_init(|| Order::Uniform.indices(tenants));
    let mut g = c.benchmark_group(&group);
    configure(&mut g);
    // Each iteration is one check on each of the two threads.
    g.throughput(Throughput::Elements(2));
    let mut base = 0;
    g.bench_function("ours-sized-cache", |b| {
        let (s, order) = (set(), indices());
        b.iter_custom(|iters| {
            let took = two_threads(iters, base, |i| {
                black_box(s.sized_cache.check(s.keys[order[i] as usize].as_str())).ok();
            });
            base = (base + iters as usize) & (ORDER_LEN - 1);
            took
        })
    });
    let mut base = 0;
    g.bench_function("governor-dashmap", |b| {
        let (s, order) = (set(), indices());
        b.iter_custom(|iters| {
            let took = two_threads(iters, base, |i| {
                black_box(s.governor.check_key(&s.keys[order[i] as usize])).ok();
            });
            base = (base + iters as usize) & (ORDER_LEN - 1);
            took
        })
    });
    g.finish();
}

criterion_group!(benches, keyed, contended);
criterion_main!(benches);
