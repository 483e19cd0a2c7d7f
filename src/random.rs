//! Cheap per-thread pseudo-random numbers: for spreading, not for secrets.
//! Used to jitter wake-ups, and to break ties between equally full buckets.

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
#[cfg_attr(not(feature = "wait"), allow(dead_code))] // the waits' jitter
#[inline]
pub(crate) fn below(n: u64) -> u64 {
    ((u128::from(next_u64()) * u128::from(n)) >> 64) as u64
}

/// A position in `0..k` for breaking a tie between equally roomy buckets:
/// a per-thread Weyl sequence (the golden-ratio step, from a random start),
/// mapped by multiply-shift. It is the cheapest coin there is — one add and
/// one multiply, on the path of every check of a full shard — and, unlike a
/// random bit, it has no long runs: consecutive positions of one thread
/// spread evenly over `0..k`.
#[inline]
pub(crate) fn position(k: u64) -> u64 {
    #[cfg(not(shuffle_limiter_loom))]
    std::thread_local! {
        static WEYL: Cell<u64> = const { Cell::new(0) };
    }
    // loom replays a model many times over, so its values must repeat: a
    // fixed start, in a thread-local that loom resets for each execution.
    #[cfg(shuffle_limiter_loom)]
    loom::thread_local! {
        static WEYL: Cell<u64> = Cell::new(1);
    }
    WEYL.with(|state| {
        let x = match state.get() {
            0 => start(),
            x => x,
        }
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
        state.set(x);
        ((u128::from(x) * u128::from(k)) >> 64) as u64
    })
}

/// A thread's random start, once: out of line, so that the coin inlines.
#[cold]
#[inline(never)]
fn start() -> u64 {
    next_u64() | 1
}

/// Where two or more buckets have equal room, a per-thread pseudo-random
/// starting point keeps any one of them from being favoured.
#[inline]
pub(crate) fn tie_break(k: usize) -> usize {
    if k == 1 {
        return 0;
    }
    position(k as u64) as usize
}

#[cfg(test)]
mod tests {
    #[test]
    fn positions_spread_evenly_without_long_runs() {
        for k in 2..=8u64 {
            let mut counts = [0u32; 8];
            let (mut run, mut longest, mut last) = (0, 0, u64::MAX);
            for _ in 0..8_000 {
                let p = super::position(k);
                assert!(p < k);
                counts[p as usize] += 1;
                run = if p == last { run + 1 } else { 1 };
                longest = longest.max(run);
                last = p;
            }
            let each = 8_000 / k as u32;
            for &c in &counts[..k as usize] {
                // A golden-ratio sequence's counts stay within a few of
                // even from any start (3 at most over 300 random starts).
                assert!(c.abs_diff(each) <= 4, "k {k}: {counts:?}");
            }
            // The golden-ratio step (0.618 of a turn) lands in the same half
            // at most twice in a row, and never twice in the same third or
            // smaller slice.
            let most = if k == 2 { 2 } else { 1 };
            assert!(longest <= most, "k {k}: a run of {longest}");
        }
    }
}
