//! Checks racing live changes, on threads, each bounded in time and
//! deterministic: a clock that pauses or panics on cue stands in for a
//! preemption. A weighted check weighed under one quota and drawn under
//! another is never granted for free; a change that panics midway leaves
//! checks and later changes able to run.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, Mutex};
use std::thread::{self, ThreadId};
use std::time::Duration;

use shuffle_limiter::{Clock, DenialReason, Quota, Request, ShardedLimiter};

/// A clock stopped at `nanos`, which can pause one thread at its first
/// reading (until released), or panic when read while `panics` is set.
#[derive(Default)]
struct Scripted {
    nanos: AtomicU64,
    paused: Mutex<Option<(ThreadId, Arc<Barrier>)>>,
    panics: AtomicBool,
}

impl Clock for Scripted {
    fn now_nanos(&self) -> u64 {
        if self.panics.load(Ordering::SeqCst) {
            panic!("the clock failed");
        }
        let pause = {
            let mut paused = self.paused.lock().unwrap();
            match paused.as_ref() {
                Some((id, _)) if *id == thread::current().id() => paused.take(),
                _ => None,
            }
        };
        if let Some((_, barrier)) = pause {
            barrier.wait(); // paused here ...
            barrier.wait(); // ... until the other thread is done
        }
        self.nanos.load(Ordering::SeqCst)
    }
}

fn one_bucket(quota: Quota, clock: Arc<Scripted>) -> Arc<ShardedLimiter<Arc<Scripted>>> {
    Arc::new(
        ShardedLimiter::builder()
            .quota(quota)
            .buckets(1)
            .per_tenant(1)
            .tenant_cache(0)
            .clock(clock)
            .build()
            .unwrap(),
    )
}

/// A weighted check is weighed under the split in force (`check_weight`)
/// and drawn under the split read again by the store. A rate cut landing
/// between the two (here: while the checking thread reads its clock, as a
/// preemption would) has the draw price 2^24 tokens at 2^40 ns each: 2^64,
/// which wraps to 0 in a release build. The check is granted 2^24 tokens
/// that cost nothing, and the bucket keeps the one token of the new quota.
/// (With overflow checks, the checking thread panics instead.)
#[test]
fn a_weighted_check_racing_a_rate_cut_is_not_granted_for_free() {
    let clock = Arc::new(Scripted::default());
    clock.nanos.store(1_000_000_000, Ordering::SeqCst);
    let limiter = one_bucket(Quota::per_second(1 << 24), clock.clone());
    let barrier = Arc::new(Barrier::new(2));
    let (other, gate) = (limiter.clone(), barrier.clone());
    let (ready, go) = mpsc::channel();
    let clock2 = clock.clone();
    let t = thread::spawn(move || {
        *clock2.paused.lock().unwrap() = Some((thread::current().id(), gate));
        ready.send(()).unwrap();
        other
            .check(Request::tenant("a").tokens(1 << 24))
            .map(|grant| grant.tokens())
            .unwrap_or(0)
    });
    go.recv().unwrap();
    barrier.wait(); // the check is weighed and reads its clock
    limiter
        .set_quota(Quota::new(1, Duration::from_nanos(1 << 40)))
        .unwrap();
    barrier.wait();
    let weighted = t.join().expect("the check returns");
    let after = u32::from(limiter.check("a").is_ok());
    assert!(
        weighted == 0 || after == 0,
        "{weighted} tokens granted, then {after} more, under a quota of 1 token"
    );
}

/// `LiveSplit::change` makes the version odd, then moves the buckets
/// (reading the clock), then makes it even again, with no guard: a panic
/// in between (here the clock's) leaves the version odd for good. Every
/// check then spins in `LiveSplit::read` for ever, and so does the next
/// change (in `LiveSplit::get`, holding the quota's lock).
#[test]
fn a_change_that_panics_midway_leaves_checks_able_to_run() {
    let clock = Arc::new(Scripted::default());
    let limiter = one_bucket(Quota::per_second(10), clock.clone());
    assert!(limiter.check("a").is_ok());
    clock.panics.store(true, Ordering::SeqCst);
    let changed = catch_unwind(AssertUnwindSafe(|| {
        limiter.set_quota(Quota::per_second(20)).ok();
    }));
    assert!(changed.is_err(), "the clock's panic reaches the caller");
    clock.panics.store(false, Ordering::SeqCst);

    // A check and a change on threads of their own, each given 2 s (the
    // threads are left behind if they spin).
    let (done, answers) = mpsc::channel();
    let (other, tx) = (limiter.clone(), done.clone());
    thread::spawn(move || {
        let _ = other.check("a");
        tx.send("check").unwrap();
    });
    let answered = answers.recv_timeout(Duration::from_secs(2));
    assert_eq!(
        answered,
        Ok("check"),
        "a check after a change that panicked never returns"
    );
    let (other, tx) = (limiter.clone(), done);
    thread::spawn(move || {
        let _ = other.set_quota(Quota::per_second(30));
        tx.send("change").unwrap();
    });
    let answered = answers.recv_timeout(Duration::from_secs(2));
    assert_eq!(
        answered,
        Ok("change"),
        "a change after one that panicked never returns"
    );
}

/// What the shard holds, read while a change moves its bucket: one
/// bucket of 8 tokens at 1 a second, drained, then cut to a burst of 1.
/// Empty under either quota, it held 7 tokens for a reader that took the
/// split before the change and the bucket after it (the arrival time one
/// second ahead, read against an 8-second burst).
#[test]
fn remaining_and_snapshot_racing_a_change_are_read_under_one_quota() {
    type Read = fn(&ShardedLimiter<Arc<Scripted>>) -> u64;
    let reads: [(&str, Read); 2] = [
        ("remaining", |limiter| limiter.remaining("a")),
        ("snapshot", |limiter| limiter.snapshot()[0].available()),
    ];
    for (what, read) in reads {
        let clock = Arc::new(Scripted::default());
        clock.nanos.store(1_000_000_000, Ordering::SeqCst);
        let limiter = one_bucket(Quota::per_second(1).with_burst(8), clock.clone());
        let mut drained = 0;
        while drained < 9 && limiter.check("a").is_ok() {
            drained += 1;
        }
        assert_eq!(drained, 8);
        let barrier = Arc::new(Barrier::new(2));
        let (other, gate, clock2) = (limiter.clone(), barrier.clone(), clock.clone());
        let (ready, go) = mpsc::channel();
        let t = thread::spawn(move || {
            *clock2.paused.lock().unwrap() = Some((thread::current().id(), gate));
            ready.send(()).unwrap();
            read(&other)
        });
        go.recv().unwrap();
        barrier.wait(); // the reader reads its clock
        limiter.set_quota(Quota::per_second(1)).unwrap();
        barrier.wait();
        let tokens = t.join().expect("the read returns");
        assert_eq!(tokens, 0, "{what}: the bucket is empty under either quota");
    }
}

/// A weighted check weighed under a burst that holds it and drawn under
/// one cut below it (the cut lands while the checking thread reads its
/// clock) can never be paid: it is denied as never fitting under the new
/// burst, not as limited for 584 years (a wait would sleep that long).
#[test]
fn a_weight_a_racing_cut_leaves_too_large_never_fits() {
    let clock = Arc::new(Scripted::default());
    clock.nanos.store(1_000_000_000, Ordering::SeqCst);
    let limiter = one_bucket(Quota::per_second(8), clock.clone());
    let barrier = Arc::new(Barrier::new(2));
    let (other, gate, clock2) = (limiter.clone(), barrier.clone(), clock.clone());
    let (ready, go) = mpsc::channel();
    let t = thread::spawn(move || {
        *clock2.paused.lock().unwrap() = Some((thread::current().id(), gate));
        ready.send(()).unwrap();
        other.check(Request::tenant("a").tokens(6))
    });
    go.recv().unwrap();
    barrier.wait(); // weighed under a burst of 8, reading its clock
    limiter.set_quota(Quota::per_second(4)).unwrap();
    barrier.wait();
    let denied = t.join().expect("the check returns").unwrap_err();
    assert_eq!(
        denied.reason(),
        DenialReason::NeverFits { asked: 6, most: 4 },
        "retry after {:?}",
        denied.retry_after()
    );
    assert_eq!(denied.retry_after(), Duration::MAX);
}
