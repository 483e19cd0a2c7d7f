//! Live heap bytes, counted by a global allocator: a binary that includes
//! this declares `#[global_allocator] static ALLOCATOR: Counting = Counting;`
//! and reads [`live`]. (Not a module of `support`: only the binaries that
//! count include it.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

/// Forwards to `System`, counting the bytes live.
pub(crate) struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

/// The bytes allocated and not yet freed.
pub(crate) fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// The most bytes live at once since the last call, which starts the next
/// count from the bytes live now.
#[allow(dead_code, reason = "the memory bench reads `live` alone")]
pub(crate) fn peak() -> isize {
    PEAK.swap(live(), Ordering::Relaxed)
}

// The workspace denies unsafe code; a global allocator needs it. Allowed
// here, for two calls forwarded to System.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        PEAK.fetch_max(now + layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as received.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        // SAFETY: forwarded as received.
        unsafe { System.dealloc(ptr, layout) }
    }
}
