//! The check path allocates nothing: counted by a global allocator.
#![allow(unsafe_code)] // a counting global allocator cannot be written without it

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use shuffle_limiter::{Quota, Request, ShardedLimiter};

struct Counting;

thread_local! {
    // Counted per thread, so the test harness's other threads do not count.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged to the system allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn allocations_during(f: impl FnOnce()) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    f();
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn checking_allocates_nothing() {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(1_000).with_burst(64))
        .buckets(16)
        .per_tenant(3)
        .tenant_cache(64)
        .build()
        .unwrap();
    let keys: Vec<String> = (0..500).map(|t| format!("tenant-{t}")).collect();
    let long = vec![b'x'; 4096];
    let _ = limiter.check("warm-up"); // the clock's first reading may set up state
    let tenant = limiter.handle("tenant-1");
    let allocations = allocations_during(|| {
        for _ in 0..20 {
            for key in &keys {
                // Hits and misses of the cache, grants and denials.
                let _ = limiter.check(key);
                let _ = limiter.check(Request::tenant(key).tokens(2));
                let _ = limiter.check(Request::tenant(key).tokens(1_000)); // never grantable
                let _ = limiter.remaining(key);
            }
            let _ = limiter.check(&long);
            let _ = tenant.check();
            let _ = tenant.remaining();
        }
    });
    assert_eq!(allocations, 0);
    // The counter does count: a snapshot allocates its Vec.
    assert!(allocations_during(|| drop(limiter.snapshot())) > 0);
}

#[test]
fn taking_and_releasing_permits_allocates_nothing() {
    use shuffle_limiter::inflight::InFlight;

    let inflight = InFlight::builder()
        .concurrency(40)
        .pools(8)
        .per_tenant(2)
        .tenant_cache(64)
        .build()
        .unwrap();
    let keys: Vec<String> = (0..500).map(|t| format!("tenant-{t}")).collect();
    let allocations = allocations_during(|| {
        // Permits held a while in a fixed array, each released when its
        // slot is taken again.
        let mut held: [Option<_>; 40] = std::array::from_fn(|_| None);
        for round in 0..20 {
            for (i, key) in keys.iter().enumerate() {
                // Hits and misses of the cache, single and weighted seats,
                // refusals when the pools run dry, releases.
                drop(inflight.try_acquire(Request::tenant(key).tokens(3)));
                drop(inflight.try_acquire(Request::tenant(key).tokens(100)));
                held[(i + round) % 40] = inflight.try_acquire(key).ok();
            }
        }
        drop(held);
    });
    assert_eq!(allocations, 0);
    assert_eq!(inflight.available(), 40);
}

#[test]
fn a_permit_of_many_pools_allocates_only_past_two_words() {
    use shuffle_limiter::inflight::InFlight;

    let limit = |per_pool: u32| {
        InFlight::builder()
            .concurrency(64 * per_pool)
            .pools(64)
            .per_tenant(8)
            .build()
            .unwrap()
    };
    // 64 pools of 100: a pool packs in 6 + 7 bits, eight of them in 104.
    let small = limit(100);
    let allocations = allocations_during(|| {
        let permit = small.try_acquire(Request::tenant("t").tokens(750)).unwrap();
        assert_eq!(permit.pools().count(), 8);
        drop(permit);
    });
    assert_eq!(allocations, 0);
    // Pools of 1000 take 6 + 10 bits, eight of them 128: one allocation.
    let large = limit(1_000);
    let allocations = allocations_during(|| {
        let permit = large
            .try_acquire(Request::tenant("t").tokens(7_500))
            .unwrap();
        assert_eq!(permit.pools().map(|(_, seats)| seats).sum::<u32>(), 7_500);
        drop(permit);
    });
    assert_eq!(allocations, 1);
    assert_eq!(large.available(), 64_000);
}
