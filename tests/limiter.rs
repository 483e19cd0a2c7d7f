//! The in-process limiter's promises, driven by `ManualClock`.

use std::collections::HashMap;
use std::time::Duration;

use shuffle_limiter::{Clock, DenialReason, ManualClock, Quota, Request, ShardedLimiter};

#[path = "support/manual.rs"]
mod manual;
use manual::make;

/// Checks until the first denial and returns the grants, failing at once
/// rather than looping when more than `most` are granted.
fn until_denied(most: u64, mut check: impl FnMut() -> bool) -> u64 {
    for granted in 0..=most {
        if !check() {
            return granted;
        }
    }
    panic!("granted more than the {most} tokens there are");
}

/// Drains every bucket through a few tenants whose shards cover them all,
/// and returns the tokens granted.
fn drain_all(limiter: &ShardedLimiter<ManualClock>) -> u64 {
    let mut covered = vec![false; limiter.buckets() as usize];
    let most = u64::from(limiter.quota().burst());
    let mut granted = 0;
    for t in 0..10_000u32 {
        if covered.iter().all(|&c| c) {
            return granted;
        }
        let id = t.to_le_bytes();
        let tenant = limiter.handle(&id);
        for &b in tenant.shard().buckets() {
            covered[b as usize] = true;
        }
        granted += until_denied(most, || tenant.check().is_ok());
    }
    panic!("10 000 tenants do not cover every bucket")
}

#[test]
fn a_tenant_gets_its_buckets_burst_then_exactly_the_refill() {
    // 5/s, burst 5, over 5 buckets: each bucket holds 1 token, 1 per second.
    let (limiter, clock) = make(Quota::per_second(5).with_burst(5), 5, 2);
    let tenant = limiter.handle("tenant-42");
    assert_eq!(tenant.remaining(), 2);
    assert!(tenant.check().is_ok());
    assert!(tenant.check().is_ok());
    let denied = tenant.check().unwrap_err();
    assert_eq!(denied.retry_after(), Duration::from_secs(1));

    clock.advance(Duration::from_millis(999));
    let denied = tenant.check().unwrap_err();
    assert_eq!(denied.retry_after(), Duration::from_millis(1));
    clock.advance(Duration::from_millis(1));
    assert_eq!(tenant.remaining(), 2);
    assert!(tenant.check().is_ok());
    assert!(tenant.check().is_ok());
    assert!(tenant.check().is_err());

    // A long quiet spell refills to the burst, not beyond.
    clock.advance(Duration::from_secs(3600));
    assert_eq!(tenant.remaining(), 2);
}

#[test]
fn bursts_and_rates_add_up_to_the_quota_when_they_do_not_divide() {
    // 10/s, burst 10, over 4 buckets: bursts 3, 3, 2, 2; a token every 400 ms.
    let (limiter, clock) = make(Quota::per_second(10), 4, 1);
    let bursts: Vec<u32> = (0..4).map(|b| limiter.bucket_burst(b).unwrap()).collect();
    assert_eq!(bursts, [3, 3, 2, 2]);
    assert_eq!(limiter.bucket_interval(), Duration::from_millis(400));
    assert_eq!(drain_all(&limiter), 10);

    clock.advance(Duration::from_millis(399));
    assert_eq!(drain_all(&limiter), 0);
    clock.advance(Duration::from_millis(1));
    assert_eq!(drain_all(&limiter), 4);
    // Ten seconds refill 100 tokens, but the buckets hold only 10.
    clock.advance(Duration::from_secs(10));
    assert_eq!(drain_all(&limiter), 10);

    // 7 per 3 s, burst 15, over 5 buckets of 3: a token every 15/7 s per
    // bucket, which is not a whole number of nanoseconds, so it rounds up.
    let (limiter, clock) = make(Quota::new(7, Duration::from_secs(3)).with_burst(15), 5, 2);
    assert_eq!(
        limiter.bucket_interval(),
        Duration::from_nanos(2_142_857_143)
    );
    assert_eq!(drain_all(&limiter), 15);
    // Drained every second, no bucket ever fills up, so 9 000 s give
    // R·t = 21 000 tokens; the rounding loses less than one per bucket.
    let mut granted = 0;
    for _ in 0..9_000 {
        clock.advance(Duration::from_secs(1));
        granted += drain_all(&limiter);
    }
    assert_eq!(granted, 21_000 - 5);
}

#[test]
fn a_tenant_draws_only_from_its_own_buckets_roomiest_first() {
    let (limiter, clock) = make(Quota::per_second(1600).with_burst(1600), 16, 4);
    for t in 0..200 {
        let key = format!("tenant-{t}");
        let shard = limiter.shard(&key);
        for _ in 0..3 {
            let grant = limiter.check(&key).unwrap();
            assert!(shard.contains(grant.bucket()), "{key}: {grant:?} {shard:?}");
        }
    }
    // Always taking from the roomiest bucket keeps a tenant's equally sized
    // buckets within one token of each other.
    clock.advance(Duration::from_secs(1));
    let tenant = limiter.handle("fresh");
    for _ in 0..399 {
        tenant.check().unwrap();
        let snap = limiter.snapshot();
        let levels: Vec<u64> = tenant
            .shard()
            .buckets()
            .iter()
            .map(|&b| snap[b as usize].available())
            .collect();
        let (lo, hi) = (levels.iter().min().unwrap(), levels.iter().max().unwrap());
        assert!(hi - lo <= 1, "{levels:?}");
    }
}

#[test]
fn ties_between_equally_full_buckets_favour_none() {
    let (limiter, clock) = make(Quota::per_second(400).with_burst(400), 4, 2);
    let tenant = limiter.handle("tie");
    let shard = tenant.shard();
    let [a, b] = shard.buckets() else {
        unreachable!()
    };
    let mut first = HashMap::new();
    for _ in 0..1_000 {
        clock.advance(Duration::from_secs(1)); // every bucket full again
        *first
            .entry(tenant.check().unwrap().bucket())
            .or_insert(0u32) += 1;
    }
    let (na, nb) = (
        first.get(a).copied().unwrap_or(0),
        first.get(b).copied().unwrap_or(0),
    );
    assert_eq!(na + nb, 1_000);
    // Binomial(1000, 1/2): 6 sigma is about 95.
    assert!(na.abs_diff(nb) < 190, "{a}: {na}, {b}: {nb}");
}

#[test]
fn denial_names_the_earliest_bucket_to_refill() {
    // 2 buckets of 2 tokens, a token every 500 ms per bucket.
    let (limiter, clock) = make(Quota::per_second(4), 2, 2);
    let first = limiter
        .check(Request::tenant("a").tokens(2))
        .unwrap()
        .bucket(); // full at 1 s
    clock.advance(Duration::from_millis(300));
    let second = limiter
        .check(Request::tenant("a").tokens(2))
        .unwrap()
        .bucket(); // full at 1.3 s
    assert_ne!(first, second);
    let denied = limiter.check("a").unwrap_err();
    assert_eq!(denied.bucket(), first);
    assert_eq!(denied.retry_after(), Duration::from_millis(200));
    assert_eq!(denied.to_string(), "rate limited: retry in 200ms");
    clock.advance(Duration::from_millis(199));
    assert_eq!(
        limiter.check("a").unwrap_err().retry_after(),
        Duration::from_millis(1)
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(limiter.check("a").unwrap().bucket(), first);
}

#[test]
fn weighted_requests_are_paid_by_one_bucket_or_several_together() {
    // 4 buckets of 3, 3, 2, 2 tokens, a token every 400 ms each, all the
    // tenant's: together they hold 10.
    let (limiter, clock) = make(Quota::per_second(10), 4, 4);
    let err = limiter.check(Request::tenant("w").tokens(11)).unwrap_err();
    assert_eq!(
        err.reason(),
        DenialReason::NeverFits {
            asked: 11,
            most: 10
        }
    );
    assert_eq!(err.retry_after(), Duration::MAX);
    assert!(err.to_string().contains("can never be granted"));

    // A bucket that holds the request pays it alone.
    for left in [7, 4] {
        let grant = limiter.check(Request::tenant("w").tokens(3)).unwrap();
        assert!(grant.bucket() < 2, "only buckets 0 and 1 hold 3");
        assert_eq!(grant.payments().len(), 1);
        assert_eq!(grant.payments()[0].tokens(), 3);
        assert_eq!(grant.remaining(), left);
    }
    // Then no bucket does, and the two of 2 pay together.
    let grant = limiter.check(Request::tenant("w").tokens(3)).unwrap();
    let paid: Vec<(u32, u32)> = grant
        .payments()
        .iter()
        .map(|p| (p.bucket(), p.tokens()))
        .collect();
    assert!(matches!(paid[..], [(2 | 3, 2), (2 | 3, 1)]), "{paid:?}");
    assert_ne!(paid[0].0, paid[1].0);
    assert_eq!(grant.remaining(), 1);
    // One token left: two come when the next tokens arrive, in 400 ms.
    let denied = limiter.check(Request::tenant("w").tokens(2)).unwrap_err();
    assert_eq!(denied.reason(), DenialReason::Limited);
    assert_eq!(denied.retry_after(), Duration::from_millis(400));
    assert_eq!(limiter.remaining("w"), 1);

    // A weight of zero takes nothing.
    limiter.check(Request::tenant("w").tokens(0)).unwrap();
    assert_eq!(limiter.remaining("w"), 1);
    clock.advance(Duration::from_millis(399));
    let denied = limiter.check(Request::tenant("w").tokens(2)).unwrap_err();
    assert_eq!(denied.reason(), DenialReason::Limited);
    clock.advance(Duration::from_millis(1));
    assert!(limiter.check(Request::tenant("w").tokens(2)).is_ok());
}

#[test]
fn remaining_and_snapshot_do_not_consume() {
    let (limiter, _clock) = make(Quota::per_second(8), 4, 2);
    for _ in 0..100 {
        assert_eq!(limiter.remaining("r"), 4);
        let _ = limiter.snapshot();
    }
    let total: u64 = limiter.snapshot().iter().map(|b| b.available()).sum();
    assert_eq!(total, 8);
    limiter.check("r").unwrap();
    assert_eq!(limiter.remaining("r"), 3);
    let snap = limiter.snapshot();
    let drawn: Vec<_> = snap
        .iter()
        .filter(|b| b.available() < u64::from(b.burst()))
        .collect();
    assert_eq!(drawn.len(), 1);
    assert_eq!(drawn[0].full_in(), Duration::from_millis(500));
}

#[test]
fn a_clock_that_jumps_back_never_grants_extra() {
    // Grant times recorded against a clock that wanders back and forth; in
    // every window [t_i, t_j] the grants stay within R·(t_j − t_i) + B.
    let (limiter, clock) = make(Quota::per_second(100).with_burst(20), 4, 2);
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut high = 0u64;
    let mut grants = Vec::new(); // the clock reading of each grant
    for step in 0..20_000 {
        let r = next();
        if r % 5 == 0 {
            // Read up to 50 ms earlier than the latest reading.
            clock.set_nanos(high.saturating_sub(next() % 50_000_000));
        } else {
            high += next() % 3_000_000;
            clock.set_nanos(high);
        }
        if limiter.check(format!("t{}", step % 37)).is_ok() {
            grants.push(clock.now_nanos());
        }
    }
    grants.sort_unstable();
    let (r, b) = (100u128, 20u128);
    for i in 0..grants.len() {
        for j in (i..grants.len()).step_by(7) {
            let window = u128::from(grants[j] - grants[i]);
            let count = (j - i + 1) as u128;
            assert!(count * 1_000_000_000 <= r * window + b * 1_000_000_000);
        }
    }
    assert!(grants.len() > 1_000, "the test must exercise the limit");
}

#[test]
fn a_noisy_tenant_takes_down_only_the_tenants_holding_its_exact_shard() {
    // N = 8, k = 2, 400 tenants; R = 800/s, so a bucket refills at 100/s and
    // one tenant may take at most k·R/N = 200/s. The noisy tenant sends 50
    // times that, 10 requests every millisecond; every other tenant sends one
    // request a second, right after the noisy tenant's requests of that
    // millisecond.
    let (limiter, clock) = make(Quota::per_second(800), 8, 2);
    let tenants: Vec<String> = (0..400).map(|t| format!("tenant-{t}")).collect();
    let noisy = limiter.handle(&tenants[0]);
    let others: Vec<_> = tenants[1..].iter().map(|t| limiter.handle(t)).collect();
    let mut ok = vec![0u32; others.len()];
    for ms in 0..100_000u32 {
        clock.advance(Duration::from_millis(1));
        for _ in 0..10 {
            let _ = noisy.check();
        }
        for (i, tenant) in others.iter().enumerate() {
            if (ms + i as u32 * 397).is_multiple_of(1_000) {
                ok[i] += u32::from(tenant.check().is_ok());
            }
        }
    }
    let mut identical = 0;
    for (i, tenant) in others.iter().enumerate() {
        let share = f64::from(ok[i]) / 100.0;
        if tenant.shard().same_set(&noisy.shard()) {
            identical += 1;
            assert!(share < 0.05, "{i} holds the noisy shard, yet got {share}");
        } else {
            assert!(share >= 0.99, "{i} ({:?}) got only {share}", tenant.shard());
        }
    }
    // 1/C(8,2) = 1/28 of 399 tenants is about 14.
    assert!((3..=30).contains(&identical), "{identical}");
}

#[test]
fn tenant_ids_may_be_any_bytes() {
    let (limiter, _clock) = make(Quota::per_second(100), 8, 3);
    let huge = vec![0xFFu8; 1 << 20];
    let keys: [&[u8]; 5] = [
        b"",
        b"\xff\xfe\x00",
        "t\u{e9}nant-\u{1F600}".as_bytes(),
        &huge,
        &[0; 40],
    ];
    for key in keys {
        let shard = limiter.shard(key);
        assert_eq!(shard.buckets().len(), 3);
        assert_eq!(limiter.shard(key), shard, "the cache must agree");
        assert!(shard.contains(limiter.check(key).unwrap().bucket()));
    }
}

// ---------------------------------------------------------------------------
// Defects found by outside testing, each pinned.

#[test]
fn a_clock_at_the_end_of_time_grants_a_burst_then_nothing() {
    for end in [u64::MAX, u64::MAX - 1, u64::MAX - (1 << 62)] {
        let (limiter, clock) = make(Quota::per_second(8).with_burst(8), 4, 2);
        clock.set_nanos(end);
        let granted = (0..100_000).filter(|_| limiter.check("t").is_ok()).count();
        assert_eq!(granted, 4, "a tenant's two buckets hold 4, at {end}");
        assert!(limiter.check("t").unwrap_err().retry_after() > Duration::ZERO);
    }
    let (limiter, clock) = make(Quota::per_second(8).with_burst(8), 4, 2);
    clock.advance(Duration::MAX);
    let granted = (0..100_000).filter(|_| limiter.check("t").is_ok()).count();
    assert_eq!(granted, 4);
}

#[test]
fn a_weight_of_zero_is_granted_and_moves_nothing_even_after_the_clock_went_back() {
    let (limiter, clock) = make(Quota::per_second(4).with_burst(4), 4, 2);
    clock.set_nanos(10_000_000_000);
    limiter.check("t").unwrap();
    limiter.check("t").unwrap();
    let before = limiter.snapshot();
    clock.set_nanos(0); // ten seconds back: the buckets look deeply in debt
    let grant = limiter.check(Request::tenant("t").tokens(0)).unwrap();
    assert_eq!(grant.remaining(), 0);
    clock.set_nanos(10_000_000_000);
    assert_eq!(limiter.snapshot(), before, "a weight of 0 moved a bucket");
    assert_eq!(
        limiter
            .check(Request::tenant("t").tokens(0))
            .unwrap()
            .remaining(),
        0
    );
}

// ---------------------------------------------------------------------------
// Behaviour pinned for mutation testing (see TESTING.md).

#[test]
fn remaining_counts_whole_tokens_where_the_room_is_beyond_f64_precision() {
    // One bucket of 2 tokens, one token every 2⁶¹ ns: a capacity of 2⁶² ns,
    // the longest allowed. 2⁶¹ − 1 ns after it was drained it holds just
    // short of one token, a room that f64 rounds up to a whole token.
    let (limiter, clock) = make(
        Quota::new(1, Duration::from_nanos(1 << 61)).with_burst(2),
        1,
        1,
    );
    assert!(limiter.check("t").is_ok());
    assert!(limiter.check("t").is_ok());
    clock.advance(Duration::from_nanos((1 << 61) - 1));
    let denied = limiter.check("t").unwrap_err();
    assert_eq!(denied.retry_after(), Duration::from_nanos(1));
    assert_eq!(limiter.remaining("t"), 0);
    assert_eq!(limiter.snapshot()[0].available(), 0);
    assert_eq!(limiter.full_in("t"), Duration::from_nanos((1 << 61) + 1));
    clock.advance(Duration::from_nanos(1));
    assert_eq!(limiter.remaining("t"), 1);
    let grant = limiter.check("t").unwrap();
    assert_eq!(
        (grant.remaining(), grant.full_in()),
        (0, Duration::from_nanos(1 << 62))
    );
}

#[test]
fn full_in_is_the_longest_wait_until_the_tenants_buckets_are_full() {
    // 2 buckets of 2 tokens, a token every 500 ms each.
    let (limiter, clock) = make(Quota::per_second(4), 2, 2);
    assert_eq!(limiter.full_in("t"), Duration::ZERO);
    let grant = limiter.check(Request::tenant("t").tokens(2)).unwrap(); // empties one
    assert_eq!(grant.full_in(), Duration::from_secs(1));
    assert_eq!(limiter.full_in("t"), Duration::from_secs(1));
    clock.advance(Duration::from_millis(300));
    assert_eq!(limiter.full_in("t"), Duration::from_millis(700));
    let grant = limiter.check("t").unwrap(); // the other, full at 800 ms
    assert_eq!(grant.full_in(), Duration::from_millis(700));
    let full_in: Vec<Duration> = limiter.snapshot().iter().map(|b| b.full_in()).collect();
    let mut sorted = full_in.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [Duration::from_millis(500), Duration::from_millis(700)]
    );
    clock.advance(Duration::from_millis(699));
    assert_eq!(limiter.full_in("t"), Duration::from_millis(1));
    clock.advance(Duration::from_millis(1));
    assert_eq!(limiter.full_in("t"), Duration::ZERO);
    clock.advance(Duration::from_secs(5));
    assert_eq!(limiter.full_in("t"), Duration::ZERO);
    assert_eq!(limiter.remaining("t"), 4);
}

#[test]
fn a_denial_names_the_tenants_own_bucket_whichever_it_is() {
    // 4 buckets of 1 token, one per tenant: every bucket id is named once.
    let (limiter, _clock) = make(Quota::per_second(4), 4, 1);
    let mut named = [false; 4];
    for t in 0..1_000u32 {
        let id = t.to_le_bytes();
        let tenant = limiter.handle(&id);
        let shard = tenant.shard();
        let &[bucket] = shard.buckets() else {
            unreachable!()
        };
        if named[bucket as usize] {
            continue;
        }
        assert_eq!(tenant.check().unwrap().bucket(), bucket);
        assert_eq!(tenant.check().unwrap_err().bucket(), bucket);
        named[bucket as usize] = true;
    }
    assert_eq!(named, [true; 4]);
}
