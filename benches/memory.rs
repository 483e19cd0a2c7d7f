//! Memory growth with the number of distinct tenants, beside governor's keyed
//! limiter, counted by a global allocator.
//!
//! ```text
//! cargo bench --bench memory
//! ```
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

const TENANTS: u32 = 1_000_000;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn main() {
    // Keys are formatted into one reused buffer, so only the limiters'
    // own allocations are counted.
    let mut key = String::new();
    let mut each = |f: &mut dyn FnMut(&str)| {
        for t in 0..TENANTS {
            use std::fmt::Write;
            key.clear();
            write!(key, "tenant-{t}").expect("writing to a String");
            f(&key);
        }
    };

    let before_build = live();
    let ours = ShardedLimiter::builder()
        .quota(Quota::per_second(1_000_000))
        .buckets(16)
        .per_tenant(2)
        .build()
        .expect("valid configuration");
    let built = live();
    each(&mut |k| {
        let _ = ours.check(k);
    });
    let ours_growth = live() - built;
    let ours_fixed = built - before_build;
    drop(ours);

    let start = live();
    let governor = governor::RateLimiter::dashmap(governor::Quota::per_second(
        NonZeroU32::new(1_000_000).expect("non-zero"),
    ));
    let built = live();
    each(&mut |k| {
        let _ = governor.check_key(&k.to_owned());
    });
    let governor_growth = live() - built;
    let governor_fixed = built - start;

    println!("distinct tenants: {TENANTS}");
    println!("shuffle-limiter: fixed at build {ours_fixed} B, growth {ours_growth} B");
    println!("governor keyed:  fixed at build {governor_fixed} B, growth {governor_growth} B");
    let ratio = ours_growth.max(0) as f64 / governor_growth as f64;
    println!("growth ratio (ours / governor): {ratio:.6} (target <= 0.02)");
    println!(
        "ours, fixed + growth / governor growth: {:.6}",
        (ours_fixed + ours_growth) as f64 / governor_growth as f64
    );
}
