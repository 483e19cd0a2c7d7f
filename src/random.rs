//! Cheap per-thread pseudo-random numbers: for spreading, not for secrets.
//! Used to break ties between equally full buckets and to jitter wake-ups.

use std::cell::Cell;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;

/// xorshift64*, one state per thread, seeded on first use from the standard
/// library's per-process random keys, so threads do not share a sequence.
#[inline]
pub(crate) fn next_u64() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = const { Cell::new(0) };
    }
    STATE.with(|state| {
        let mut x = state.get();
        if x == 0 {
            // A zero state would stay zero; `| 1` keeps the seed non-zero.
            x = RandomState::new().hash_one(std::thread::current().id()) | 1;
        }
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

/// A number in `0..n`, by multiply-shift rather than a division.
#[inline]
pub(crate) fn below(n: u64) -> u64 {
    ((u128::from(next_u64()) * u128::from(n)) >> 64) as u64
}
