//! Changing N on a running limiter, with threads checking all along: the
//! budget around a change, what buckets that stay, come and go hold, which
//! tenants move, and handles that follow.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::Duration;

use shuffle_limiter::{Assignment, DenialReason, ManualClock, Quota, Request, ShardedLimiter};

const STEP: Duration = Duration::from_millis(1);

#[path = "support/live_n.rs"]
mod live_n;
use live_n::{held, limiter};

/// Two threads checking 100 tenants until stopped: one by key, one through
/// handles made before any change. Every grant must come from a bucket
/// below the largest N the test uses.
fn load(
    limiter: &Arc<ShardedLimiter<ManualClock>>,
    stop: &Arc<AtomicBool>,
    granted: &Arc<AtomicU64>,
) -> Vec<thread::JoinHandle<()>> {
    let keyed = {
        let (limiter, stop, granted) = (limiter.clone(), stop.clone(), granted.clone());
        thread::spawn(move || {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                if let Ok(grant) = limiter.check(format!("t{}", i * 7 % 100)) {
                    assert!(grant.bucket() < limiter.max_buckets());
                    granted.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    let handles = {
        let (limiter, stop, granted) = (limiter.clone(), stop.clone(), granted.clone());
        thread::spawn(move || {
            let tenants: Vec<_> = (0..100)
                .map(|t| limiter.handle(Request::tenant(format!("h{t}"))))
                .collect();
            let mut i = 0usize;
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                if tenants[i % 100].check().is_ok() {
                    granted.fetch_add(1, Ordering::Relaxed);
                }
            }
        })
    };
    vec![keyed, handles]
}

/// Waits (boundedly) until the load has emptied every bucket.
fn drained(limiter: &ShardedLimiter<ManualClock>) {
    for _ in 0..1_000_000 {
        if held(limiter).iter().all(|&t| t == 0) {
            return;
        }
        thread::yield_now();
    }
    panic!("the load never emptied the buckets: {:?}", held(limiter));
}

#[test]
fn n_changed_in_a_tight_loop_never_lifts_the_budget() {
    // 480/s with a burst of 480: every N below divides both, so the bound
    // R·t + B is exact whatever N is in force.
    let quota = Quota::per_second(480);
    let (limiter, clock) = limiter(quota, 8, 16);
    let limiter = Arc::new(limiter);
    let (stop, granted) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicU64::new(0)),
    );
    let workers = load(&limiter, &stop, &granted);
    drained(&limiter);
    let sizes = [12, 4, 16, 6, 8, 5, 15];
    let mut elapsed = Duration::ZERO;
    for i in 0..420 {
        clock.advance(STEP / 2);
        elapsed += STEP / 2;
        limiter.set_buckets(sizes[i % sizes.len()]).unwrap();
        drained(&limiter);
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().unwrap();
    }
    let granted = granted.load(Ordering::Relaxed) as f64;
    let bound = 480.0 + 480.0 * elapsed.as_secs_f64();
    assert!(granted <= bound, "{granted} granted, at most {bound}");
    // A change takes nothing but what races it, and buckets added start
    // empty: the load still gets most of the budget.
    assert!(granted > 0.7 * bound, "{granted} of {bound}");
}

#[test]
fn buckets_that_stay_keep_their_tokens_added_ones_start_empty() {
    // 4 buckets of 4 tokens (16/s: one token per 250 ms each), k = 1.
    let clock = ManualClock::new();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(16))
        .buckets(4)
        .max_buckets(8)
        .per_tenant(1)
        .clock(clock.clone())
        .build()
        .unwrap();
    let on = |b: u32| {
        (0..1_000_000)
            .map(|t| format!("u{t}"))
            .find(|t| limiter.shard(t).buckets()[0] == b)
            .unwrap()
    };
    for b in 0..4 {
        for _ in 0..3 - b {
            limiter.check(on(b)).unwrap();
        }
    }
    assert_eq!(held(&limiter), [1, 2, 3, 4]);
    // Growing to 8 halves each bucket's burst (2 tokens): a bucket keeps
    // what it held, up to 2; the 4 new buckets are empty.
    limiter.set_buckets(8).unwrap();
    assert_eq!(held(&limiter), [1, 2, 2, 2, 0, 0, 0, 0]);
    // They all refill at R/8: one token per 500 ms.
    clock.advance(Duration::from_millis(500));
    assert_eq!(held(&limiter), [2, 2, 2, 2, 1, 1, 1, 1]);
    // Back to 4: buckets 4..8 go, with their tokens; 0..4 keep theirs (of
    // a burst of 4 again).
    limiter.set_buckets(4).unwrap();
    assert_eq!(held(&limiter), [2, 2, 2, 2]);
    // Growing again finds the buckets that went empty, not as they were.
    limiter.set_buckets(8).unwrap();
    assert_eq!(held(&limiter), [2, 2, 2, 2, 0, 0, 0, 0]);
}

#[test]
fn tenants_move_as_the_assignment_says_and_the_cache_follows() {
    let (limiter, _clock) = limiter(Quota::per_second(1_000), 8, 16);
    let tenants: Vec<String> = (0..20_000).map(|t| format!("tenant-{t}")).collect();
    let before: Vec<_> = tenants.iter().map(|t| limiter.shard(t)).collect();
    // Fill the cache under N = 8, then change N twice: every shard is the
    // assignment's under the N in force, never a cached one of another N.
    for n in [9, 16, 8, 9] {
        limiter.set_buckets(n).unwrap();
        let under = Assignment::new(n, 2, "live").unwrap();
        for t in &tenants {
            assert_eq!(limiter.shard(t), under.shard(t), "{t} under N = {n}");
            assert_eq!(limiter.handle(t).shard(), under.shard(t));
        }
    }
    // 8 → 9 moves k/(N+1) = 2/9 of tenants; the others keep their shard,
    // in the same order.
    let moved = tenants
        .iter()
        .zip(&before)
        .filter(|(t, old)| limiter.shard(*t) != **old)
        .count() as f64;
    let (p, n) = (2.0 / 9.0, tenants.len() as f64);
    let sd = (p * (1.0 - p) / n).sqrt();
    assert!(
        (moved / n - p).abs() < 5.0 * sd,
        "{moved} of {n} moved, expected {p:.4} ± {sd:.4}"
    );
    for (t, old) in tenants.iter().zip(&before) {
        let new = limiter.shard(t);
        assert!(new == *old || new.contains(8), "{t}: {old:?} → {new:?}");
    }
}

#[test]
fn a_handle_follows_its_tenant_to_its_new_shard() {
    let (limiter, _clock) = limiter(Quota::per_second(800), 8, 8);
    // A tenant with both its buckets among 4..8, which shrinking to 4 removes.
    let name = (0..1_000_000)
        .map(|t| format!("t{t}"))
        .find(|t| limiter.shard(t).buckets().iter().all(|&b| b >= 4))
        .unwrap();
    let handle = limiter.handle(&name);
    // The same tenant's handle for two tokens a check, also made under N = 8.
    let weighted = limiter.handle(Request::tenant(&name).tokens(2));
    let old = handle.shard();
    limiter.set_buckets(4).unwrap();
    let new = limiter.shard(&name);
    assert!(new.buckets().iter().all(|&b| b < 4), "{new:?}");
    // The handle still reports the shard it was made with, and draws on the
    // new one: 2 buckets that kept their 100 tokens (of 200 now).
    assert_eq!(handle.shard(), old);
    assert_eq!(handle.remaining(), 200);
    let grant = handle.check().unwrap();
    assert!(new.contains(grant.bucket()), "{grant:?} from {new:?}");
    assert_eq!(weighted.check().unwrap().tokens(), 2);
    assert_eq!(limiter.remaining(&name), 197);
}

#[test]
fn tokens_of_removed_buckets_go_to_no_one() {
    let (limiter, _clock) = limiter(Quota::per_second(80), 8, 8);
    let name = (0..1_000_000)
        .map(|t| format!("t{t}"))
        .find(|t| limiter.shard(t).buckets()[0] == 7)
        .unwrap();
    // Take everything from the tenant's buckets, then shrink past bucket 7.
    let grants: Vec<_> = (0..=80).map_while(|_| limiter.check(&name).ok()).collect();
    assert!(grants.len() <= 80, "granted past the burst");
    limiter.set_buckets(7).unwrap();
    let total = |l: &ShardedLimiter<ManualClock>| held(l).iter().sum::<u64>();
    let before = total(&limiter);
    // Refunds of what bucket 7 paid give back to nothing, and say so.
    for grant in grants.into_iter().filter(|g| g.bucket() == 7) {
        let refunded = limiter.refund(grant);
        assert_eq!((refunded.given(), refunded.gone()), (0, 1));
    }
    assert_eq!(total(&limiter), before);
    limiter.set_buckets(8).unwrap();
    assert_eq!(held(&limiter)[7], 0);
}

/// Grants at one clock reading, over tenants covering every bucket, each
/// checked until denied.
fn drain_all(limiter: &ShardedLimiter<ManualClock>) -> u32 {
    let mut granted = 0;
    for t in 0..200 {
        let name = format!("t{t}");
        granted += (0..100).map_while(|_| limiter.check(&name).ok()).count() as u32;
    }
    granted
}

/// Promise (src/clock.rs:10-11): "A reading that goes backwards is safe: it
/// can only cause a denial, never an extra grant." And README "A budget
/// that holds": at most R·t + B "whatever ... the clock readings, the live
/// changes". A change of N made while the clock reads earlier than before
/// starts the added buckets "empty" relative to that early reading, so
/// they are full once the clock is back: at one reading, 6 grants with B = 4.
#[test]
fn a_change_of_n_at_a_backward_reading_adds_no_burst() {
    let clock = ManualClock::new();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(4).with_burst(4))
        .buckets(2)
        .max_buckets(4)
        .per_tenant(1)
        .clock(clock.clone())
        .build()
        .unwrap();
    clock.set_nanos(100_000_000_000); // 100 s
    let before = drain_all(&limiter);
    assert_eq!(before, 4, "the burst");
    clock.set_nanos(0); // one reading earlier than the last
    limiter.set_buckets(4).unwrap();
    clock.set_nanos(100_000_000_000); // back to 100 s: no time has passed
    let after = drain_all(&limiter);
    // Done at 100 s with no backward reading, the added buckets start empty
    // and `after` is 0; all grants here are at the same reading.
    assert_eq!(
        before + after,
        4,
        "granted {} at one clock reading with B = 4",
        before + after
    );
}

/// Promise (src/denied.rs, `NeverFits`): a request that asks for more than
/// the tenant's buckets can ever hold together is denied with `NeverFits`
/// ("no wait grants it"), and otherwise `retry_after` says when it will be
/// granted; src/limiter/handle.rs: after a change of N a handle's checks
/// "draw on the shard under the new N". A handle resolved before N grew
/// weighs the request against its old shard, then draws on the new one,
/// which can never hold it: a `Limited` denial whose retry_after is ~584
/// years, after which it is still denied.
#[test]
fn a_handle_after_a_change_of_n_reports_never_fits_honestly() {
    use shuffle_limiter::DenialReason;
    // B = 6: over 4 buckets 2, 2, 1, 1; over 5 buckets 2, 1, 1, 1, 1.
    let old = Assignment::new(4, 2, b"").unwrap();
    let new = Assignment::new(5, 2, b"").unwrap();
    let sum5 = |s: &[u32]| s.iter().map(|&b| if b == 0 { 2 } else { 1 }).sum::<u32>();
    let tenant = (0..10_000)
        .map(|t| format!("t{t}"))
        .find(|t| sum5(old.shard(t).buckets()) == 3 && sum5(new.shard(t).buckets()) == 2)
        .expect("a tenant whose shard loses bucket 0 to bucket 4");
    let clock = ManualClock::new();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(6).with_burst(6))
        .buckets(4)
        .max_buckets(5)
        .per_tenant(2)
        .clock(clock.clone())
        .build()
        .unwrap();
    let handle = limiter.handle(Request::tenant(tenant.as_str()).tokens(3));
    limiter.set_buckets(5).unwrap();
    // The limiter itself answers NeverFits { asked: 3, most: 2 }.
    let direct = limiter
        .check(Request::tenant(tenant.as_str()).tokens(3))
        .unwrap_err();
    assert_eq!(
        direct.reason(),
        DenialReason::NeverFits { asked: 3, most: 2 }
    );
    let denied = handle.check().unwrap_err();
    assert_eq!(
        denied.reason(),
        DenialReason::NeverFits { asked: 3, most: 2 },
        "the handle's denial: {denied:?}"
    );
}

/// A handle made before N shrank weighs its request on the shard under the
/// N in force: a weight only that shard holds is limited until its tokens
/// come, then granted, never refused as never fitting. (Nine tokens over
/// N = 2 are 5 + 4, held by the new shard only; weighed on the buckets the
/// handle was made with, any two but bucket 0, they hold 4 + 4.)
#[test]
fn a_handle_made_before_n_shrank_weighs_on_the_shard_under_the_new_n() {
    let (limiter, clock) = limiter(Quota::per_second(9), 8, 8);
    let tenant = (0..)
        .map(|t| format!("t{t}"))
        .find(|t| !limiter.shard(t).contains(0))
        .unwrap();
    let weighted = limiter.handle(Request::tenant(&tenant).tokens(9));
    let denied = weighted.check().unwrap_err();
    assert!(
        matches!(denied.reason(), DenialReason::NeverFits { .. }),
        "{denied:?}"
    );
    limiter.set_buckets(2).unwrap();
    let denied = weighted.check().unwrap_err();
    assert_eq!(denied.reason(), DenialReason::Limited, "{denied:?}");
    clock.advance(denied.retry_after());
    assert_eq!(weighted.check().unwrap().tokens(), 9);
}
