//! The atomics the limiter's state is made of: std's, or loom's when the
//! crate is built with `--cfg shuffle_limiter_loom` to model-check every interleaving
//! (`tests/loom.rs`).

#[cfg(shuffle_limiter_loom)]
pub(crate) use loom::sync::Mutex;
#[cfg(shuffle_limiter_loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering, fence};
#[cfg(not(shuffle_limiter_loom))]
pub(crate) use std::sync::Mutex;
#[cfg(not(shuffle_limiter_loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering, fence};

/// Waits a moment for another thread to finish what it is doing: a spin
/// hint at first, then the rest of the time slice (under loom, a switch to
/// another thread).
#[cold]
pub(crate) fn pause(attempt: u32) {
    #[cfg(shuffle_limiter_loom)]
    {
        let _ = attempt;
        loom::thread::yield_now();
    }
    #[cfg(not(shuffle_limiter_loom))]
    if attempt < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}
