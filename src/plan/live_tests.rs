//! The split's sequence lock as a check sees it, and which changes count as
//! tightening the split (what tells a wait whether its booking still holds;
//! the waits themselves are tested with their feature, in
//! `integration/tests/wait_holdoff.rs`).

use std::cell::Cell;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering::Relaxed;

use super::LiveSplit;
use crate::error::ConfigError;
use crate::plan::Split;
use crate::{ManualClock, Quota, ShardedLimiter};

fn per_second(count: u32, burst: u32) -> Quota {
    Quota::per_second(count).with_burst(burst)
}

#[test]
fn a_change_counts_as_tightening_unless_it_only_raises_rates_and_bursts() {
    let limiter = ShardedLimiter::builder()
        .quota(per_second(8, 8))
        .buckets(4)
        .max_buckets(8)
        .per_tenant(1)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert_eq!(limiter.core.split.tightenings(), 0);
    // Each change from where the one before left the limiter. A bucket's
    // burst is ⌊B/N⌋, one more in the first B mod N buckets; it refills
    // every N/R seconds.
    let (raised, cut) = (false, true);
    let changes = [
        (per_second(8, 8), 4, raised, "the same again"),
        (per_second(16, 8), 4, raised, "the rate up"),
        (per_second(16, 9), 4, raised, "bursts 2,2,2,2 up to 3,2,2,2"),
        (per_second(32, 13), 4, raised, "both up, to 4,3,3,3"),
        (per_second(32, 12), 4, cut, "one burst down, to 3,3,3,3"),
        (per_second(24, 12), 4, cut, "the rate down, bursts kept"),
        (per_second(48, 8), 4, cut, "the rate up, the bursts down"),
        // A change of N counts whatever each bucket's rate and burst:
        (per_second(48, 8), 8, cut, "N up: each slower, smaller"),
        (per_second(48, 8), 4, cut, "N down: each faster, larger"),
        // 2 tokens a bucket, one every 83 ms, as before.
        (per_second(96, 16), 8, cut, "N up, every bucket the same"),
        (per_second(96, 16), 8, raised, "both the same again"),
    ];
    let mut expected = 0;
    for (quota, n, tightens, what) in changes {
        limiter.set_quota_and_buckets(quota, n).unwrap();
        expected += u64::from(tightens);
        assert_eq!(limiter.core.split.tightenings(), expected, "{what}");
    }
    assert_eq!(expected, 6);
    // A change refused changes nothing.
    assert!(limiter.set_buckets(9).is_err());
    assert!(limiter.set_quota(per_second(96, 7)).is_err());
    assert_eq!(limiter.core.split.tightenings(), expected);
}

#[test]
fn a_reading_is_confirmed_only_until_a_change_begins() {
    let (quota, faster) = (per_second(8, 8), per_second(16, 8));
    let live = LiveSplit::new(quota, Split::of(quota, 4).unwrap());
    let (version, split) = live.read();
    assert_eq!(split, Split::of(quota, 4).unwrap());
    assert!(live.unchanged(version));
    let moved = Cell::new(None);
    live.change(
        |_, old| Ok::<_, ConfigError>((faster, Split::of(faster, old.buckets)?)),
        |from, to, next| {
            // A check that read before the change and compare-and-swaps a
            // bucket now, as the change moves them, must go round again.
            assert!(!live.unchanged(version), "confirmed while moving");
            moved.set(Some((from, to, next)));
        },
    )
    .unwrap();
    assert!(!live.unchanged(version), "confirmed after the change");
    // The next reading is of the new split, at the version the move was
    // told it becomes, and stays confirmed while nothing changes.
    let (now, split) = live.read();
    assert_eq!(split, Split::of(faster, 4).unwrap());
    assert_eq!(
        moved.get(),
        Some((Split::of(quota, 4).unwrap(), split, now))
    );
    assert_ne!(now, version);
    assert!(live.unchanged(now));
    assert_eq!((live.get(), live.quota()), (split, faster));
}

#[test]
fn a_reading_is_never_a_torn_split() {
    // Two splits that differ in every word: a reader racing changes
    // between them must get one or the other whole. (Before `read`
    // confirmed its version, it returned whatever the words held, and a
    // check drew with, say, one split's rate and the other's bursts.)
    let (a, b) = (per_second(8, 8), per_second(1000, 3000));
    let (split_a, split_b) = (Split::of(a, 4).unwrap(), Split::of(b, 7).unwrap());
    let live = LiveSplit::new(a, split_a);
    let (done, started) = (AtomicBool::new(false), AtomicBool::new(false));
    std::thread::scope(|s| {
        s.spawn(|| {
            while !started.load(Relaxed) {
                std::hint::spin_loop();
            }
            for i in 0..8_000_000 {
                let (quota, split) = if i % 2 == 0 {
                    (b, split_b)
                } else {
                    (a, split_a)
                };
                live.change(|_, _| Ok::<_, ConfigError>((quota, split)), |_, _, _| {})
                    .unwrap();
            }
            done.store(true, Relaxed);
        });
        started.store(true, Relaxed);
        while !done.load(Relaxed) {
            let (_, split) = live.read();
            assert!(split == split_a || split == split_b, "torn: {split:?}");
        }
    });
}
