//! What the benches share.

use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Runs `work(thread)` on threads 0 and 1 at once and returns the slower
/// one's time, each timed from a barrier they pass together: starting a
/// thread takes longer than many checks, and one started late would
/// otherwise count as time both spent working.
pub(crate) fn on_two_threads(work: impl Fn(usize) + Sync) -> Duration {
    let start = Barrier::new(2);
    let times = std::thread::scope(|s| {
        let threads = [0, 1].map(|t| {
            let (work, start) = (&work, &start);
            s.spawn(move || {
                start.wait();
                let began = Instant::now();
                work(t);
                began.elapsed()
            })
        });
        threads.map(|thread| thread.join().expect("a benchmark thread panicked"))
    });
    times[0].max(times[1])
}
