//! What N may change to on a running limiter: a change it cannot take is
//! refused and changes nothing, the room to grow is checked at build,
//! tiers, spill sets and shards bound how far N shrinks, and a quota and N
//! changed together reach any valid pair without adding tokens.

use std::time::Duration;

use shuffle_limiter::{Assignment, ConfigError, ManualClock, Quota, ShardedLimiter};

#[path = "support/live_n.rs"]
mod live_n;
use live_n::{held, limiter};

#[test]
fn a_refused_n_changes_nothing() {
    let (limiter, _clock) = limiter(Quota::per_second(12).with_burst(12), 8, 16);
    limiter.check("t").unwrap();
    let (before, shard) = (held(&limiter), limiter.shard("t"));
    let refused = [
        (
            17,
            ConfigError::BucketsAboveMax {
                buckets: 17,
                max_buckets: 16,
            },
        ),
        (0, ConfigError::ZeroBuckets),
        (
            1,
            ConfigError::PerTenantExceedsBuckets {
                per_tenant: 2,
                buckets: 1,
            },
        ),
        (
            13,
            ConfigError::BurstTooSmall {
                burst: 12,
                buckets: 13,
            },
        ),
    ];
    for (n, err) in refused {
        assert_eq!(limiter.set_buckets(n), Err(err.clone()), "N = {n}");
        assert!(!err.to_string().is_empty());
    }
    assert_eq!((limiter.buckets(), held(&limiter)), (8, before));
    assert_eq!(limiter.shard("t"), shard);
    let message = ConfigError::BucketsAboveMax {
        buckets: 17,
        max_buckets: 16,
    }
    .to_string();
    assert!(message.contains(".max_buckets(17)"), "{message}");
    // Without room asked for, N can shrink but not grow.
    let (fixed, _clock) = self::limiter(Quota::per_second(8), 8, 8);
    assert!(fixed.set_buckets(4).is_ok());
    assert!(fixed.set_buckets(8).is_ok());
    assert!(fixed.set_buckets(9).is_err());
}

#[test]
fn room_to_grow_is_checked_at_build() {
    let builder = ShardedLimiter::builder()
        .quota(Quota::per_second(100))
        .buckets(8);
    let err = builder.clone().max_buckets(4).build().unwrap_err();
    assert_eq!(
        err,
        ConfigError::MaxBucketsBelowBuckets {
            max_buckets: 4,
            buckets: 8
        }
    );
    let err = builder.clone().max_buckets(1 << 17).build().unwrap_err();
    assert!(matches!(err, ConfigError::TooManyBuckets { .. }), "{err}");
    let limiter = builder.max_buckets(64).build().unwrap();
    assert_eq!((limiter.buckets(), limiter.max_buckets()), (8, 64));
}

#[test]
fn tiers_and_spill_sets_bound_how_far_n_shrinks_and_follow_it() {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(1_000))
        .buckets(16)
        .per_tenant(2)
        .borrow_from(1)
        .tier("gold", 4)
        .tenant_tier("vip", "gold")
        .clock(ManualClock::new())
        .build()
        .unwrap();
    // Gold needs 4 + 1 buckets: 5 will do, 4 will not.
    assert_eq!(
        limiter.set_buckets(4),
        Err(ConfigError::TierPerTenant {
            tier: "gold".into(),
            per_tenant: 4,
            max: 3
        })
    );
    limiter.set_buckets(6).unwrap();
    let six = Assignment::new(6, 4, "").unwrap().with_spill(1).unwrap();
    let vip = limiter.shard("vip");
    let want = six.shard("vip");
    assert_eq!((vip.buckets(), vip.spill()), (want.buckets(), want.spill()));
    assert!(limiter.check("vip").is_ok());
    limiter.set_buckets(5).unwrap();
    assert_eq!(limiter.shard("vip").buckets().len(), 4);
}

#[test]
fn a_shard_and_its_spill_set_bound_how_far_n_shrinks() {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(1_000))
        .buckets(16)
        .per_tenant(2)
        .borrow_from(1)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    // k + d = 3 buckets: 3 will do, 2 will not.
    assert_eq!(
        limiter.set_buckets(2),
        Err(ConfigError::SpillTooLarge {
            spill: 1,
            per_tenant: 2,
            max: 0
        })
    );
    limiter.set_buckets(3).unwrap();
    let shard = limiter.shard("t");
    assert_eq!((shard.buckets().len(), shard.spill().len()), (2, 1));
    // Without borrowing, N may come down to k itself.
    let (plain, _clock) = self::limiter(Quota::per_second(100), 8, 8);
    plain.set_buckets(2).unwrap();
    assert!(plain.check("t").is_ok());
    assert_eq!(
        plain.set_buckets(1),
        Err(ConfigError::PerTenantExceedsBuckets {
            per_tenant: 2,
            buckets: 1
        })
    );
}

/// Issue 24, item 8: a quota and N that neither order of `set_quota` and
/// `set_buckets` can reach (each passes through a pair that cannot work)
/// are reached in one step that never adds tokens; a refused pair changes
/// nothing.
#[test]
fn a_quota_and_n_together_reach_any_valid_pair_without_adding_tokens() {
    let slow = Quota::per_second(1).with_burst(4);
    let (limiter, clock) = limiter(slow, 2, 8);
    limiter.check("t").unwrap();
    // 8 buckets need a burst of 8; 4294967295/s needs at least 5 buckets.
    let fast = Quota::per_second(u32::MAX).with_burst(8);
    assert!(limiter.set_quota(fast).is_err());
    assert!(limiter.set_buckets(8).is_err());
    let before = held(&limiter).iter().sum::<u64>();
    limiter.set_quota_and_buckets(fast, 8).unwrap();
    assert_eq!((limiter.quota(), limiter.buckets()), (fast, 8));
    let after = held(&limiter);
    assert!(
        after.iter().sum::<u64>() <= before,
        "{after:?} from {before}"
    );
    assert!(after[2..].iter().all(|&t| t == 0), "{after:?}");
    // And back: 2 buckets cannot take 4294967295/s, 8 cannot take a burst of 4.
    clock.advance(Duration::from_secs(1));
    limiter.set_quota_and_buckets(slow, 2).unwrap();
    assert_eq!((limiter.quota(), limiter.buckets()), (slow, 2));
    assert!(held(&limiter).iter().sum::<u64>() <= 4);
    // A pair that cannot work is refused whole.
    let held_now = held(&limiter);
    assert_eq!(
        limiter.set_quota_and_buckets(fast, 9),
        Err(ConfigError::BucketsAboveMax {
            buckets: 9,
            max_buckets: 8
        })
    );
    assert!(limiter.set_quota_and_buckets(slow, 8).is_err());
    assert_eq!((limiter.quota(), held(&limiter)), (slow, held_now.clone()));
    // One of the two alone is `set_quota` or `set_buckets`: a share of the
    // burst for a new quota.
    limiter
        .set_quota_and_buckets(slow.with_burst(8), 2)
        .unwrap();
    let (was, now) = (
        held_now.iter().sum::<u64>(),
        held(&limiter).iter().sum::<u64>(),
    );
    assert!(was > 0 && now >= 2 * was, "{now} from {was}");
    assert_eq!(limiter.buckets(), 2);
}
