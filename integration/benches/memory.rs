//! Memory per tenant and growth with the number of distinct tenants, beside
//! governor's keyed limiter, counted by a global allocator.
//!
//! ```text
//! cargo bench -p integration --bench memory     # a plain program: prints its lines, takes seconds
//! ```
//!
//! Ours is the default builder (N = 8 buckets, k = 2 per tenant) with the
//! default tenant cache and with caches sized for 10k, 100k and 1M tenants.
//! For each: the cache's heap bytes (the limiter's bytes at build minus those
//! of the same limiter without a cache) divided by the entries it holds, and
//! the growth while 1M distinct tenants are checked, split at the cache's
//! capacity: past it, the cache replaces entries and must not grow. Governor's
//! keyed limiter has no cap, so its figure is its growth per distinct tenant.
#![allow(unsafe_code)] // a counting global allocator cannot be written without it

use std::alloc::{GlobalAlloc, Layout, System};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicIsize, Ordering};

use shuffle_limiter::{Quota, ShardedLimiter};

/// Counts live heap bytes.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Distinct tenants checked; also the largest working set.
const DISTINCT: usize = 1_000_000;

const SIZES: [(&str, usize); 3] = [("10k", 10_000), ("100k", 100_000), ("1M", 1_000_000)];

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// What `f` returns, and the heap bytes it leaves allocated.
fn held<T>(f: impl FnOnce() -> T) -> (T, isize) {
    let before = live();
    let value = f();
    (value, live() - before)
}

/// Calls `f` with the keys "tenant-{t}" for `tenants`, formatted into one
/// reused buffer so that only the limiters' own allocations are counted.
fn each(tenants: std::ops::Range<usize>, mut f: impl FnMut(&str)) {
    use std::fmt::Write;
    let mut key = String::with_capacity(32);
    for t in tenants {
        key.clear();
        write!(key, "tenant-{t}").expect("writing to a String");
        f(&key);
    }
}

fn ours(cache: Option<usize>) -> ShardedLimiter {
    let builder = ShardedLimiter::builder().quota(Quota::per_second(1_000_000));
    match cache {
        Some(entries) => builder.tenant_cache(entries),
        None => builder,
    }
    .build()
    .expect("valid configuration")
}

/// Prints the line for one cache size; returns the whole limiter's bytes
/// (at build and growth) over `DISTINCT` tenants, and the cache's bytes.
fn ours_line(name: &str, cache: Option<usize>, uncached: isize) -> (isize, isize) {
    let (limiter, at_build) = held(|| ours(cache));
    let capacity = limiter.tenant_cache_capacity();
    let cache_bytes = at_build - uncached;
    let full = capacity.min(DISTINCT);
    let ((), to_cap) = held(|| {
        each(0..full, |k| {
            let _ = limiter.check(k);
        })
    });
    let ((), past_cap) = held(|| {
        each(full..DISTINCT, |k| {
            let _ = limiter.check(k);
        })
    });
    let per_entry = cache_bytes as f64 / capacity as f64;
    let past = if full < DISTINCT {
        format!("{past_cap} B from {full} to {DISTINCT} distinct tenants (past the cap)")
    } else {
        format!("the cap is above {DISTINCT} tenants")
    };
    println!(
        "ours, {name}: {capacity} entries in {cache_bytes} B = {per_entry:.1} B per cached tenant; \
         growth {to_cap} B over the first {full} tenants, {past}"
    );
    (at_build + to_cap + past_cap, cache_bytes)
}

/// Governor's growth, in bytes, over `tenants` distinct tenants.
fn governor_growth(tenants: usize) -> isize {
    let limiter = governor::RateLimiter::dashmap(governor::Quota::per_second(
        NonZeroU32::new(1_000_000).expect("non-zero"),
    ));
    held(|| each(0..tenants, |k| drop(limiter.check_key(&k.to_owned())))).1
}

fn main() {
    // The first check sets up per-thread state (the tie-breaking start);
    // take it here so that no line below counts it.
    let _ = ours(Some(0)).check("warm-up");
    let (probe, uncached) = held(|| ours(Some(0)));
    println!(
        "shuffle-limiter: N = {} buckets, k = {} per tenant; without a cache {uncached} B at build",
        probe.buckets(),
        probe.per_tenant()
    );
    drop(probe);

    let (default_total, _) = ours_line("default cache", None, uncached);
    let mut sized = Vec::new();
    for (label, tenants) in SIZES {
        let (_, cache_bytes) = ours_line(&format!("cache {label}"), Some(tenants), uncached);
        sized.push(cache_bytes);
    }

    let mut governor = Vec::new();
    for (label, tenants) in SIZES {
        let growth = governor_growth(tenants);
        let per = growth as f64 / tenants as f64;
        println!("governor keyed (DashMap), {label} tenants: {growth} B = {per:.1} B per tenant");
        governor.push(growth);
    }

    // Ours counts the whole limiter, which with its cache is all it holds.
    for (i, (label, tenants)) in SIZES.iter().enumerate() {
        let ours = sized[i] + uncached;
        println!(
            "{label} tenants, bytes per tenant: ours with the cache sized to them {:.1}, \
             governor {:.1}; ours / governor {:.3}",
            ours as f64 / *tenants as f64,
            governor[i] as f64 / *tenants as f64,
            ours as f64 / governor[i] as f64
        );
    }
    println!(
        "{DISTINCT} tenants, ours at the defaults (build + growth) / governor growth: {:.6} \
         (target <= 0.02)",
        default_total as f64 / governor[2] as f64
    );
}
