//! The in-process limiter's configuration: every bad one a typed error
//! that says what to change, the defaults, the extremes that are accepted,
//! and what the accessors and `Debug` show.

use std::time::Duration;

use shuffle_limiter::{
    ConfigError, MAX_BUCKETS, MAX_PER_TENANT, ManualClock, Quota, ShardedLimiter,
};

#[test]
fn every_bad_configuration_is_a_typed_error_that_says_what_to_change() {
    let base = || {
        ShardedLimiter::builder()
            .quota(Quota::per_second(100))
            .buckets(8)
            .per_tenant(2)
    };
    let cases: Vec<(Result<ShardedLimiter, ConfigError>, ConfigError, &str)> = vec![
        (
            ShardedLimiter::builder().build(),
            ConfigError::MissingQuota,
            "call .quota(",
        ),
        (
            base().quota(Quota::per_second(0)).build(),
            ConfigError::ZeroCount,
            "count of at least 1",
        ),
        (
            base().quota(Quota::new(10, Duration::ZERO)).build(),
            ConfigError::ZeroPeriod,
            "period of at least",
        ),
        (
            base().buckets(0).build(),
            ConfigError::ZeroBuckets,
            "at least 1 bucket",
        ),
        (
            base()
                .quota(Quota::per_second(u32::MAX))
                .buckets(MAX_BUCKETS + 1)
                .build(),
            ConfigError::TooManyBuckets {
                buckets: MAX_BUCKETS + 1,
                max: MAX_BUCKETS,
            },
            "use at most 65536 buckets",
        ),
        (
            base().per_tenant(0).build(),
            ConfigError::ZeroPerTenant,
            "at least 1 bucket",
        ),
        (
            base().per_tenant(9).build(),
            ConfigError::PerTenantExceedsBuckets {
                per_tenant: 9,
                buckets: 8,
            },
            "or more buckets",
        ),
        (
            base().buckets(16).per_tenant(MAX_PER_TENANT + 1).build(),
            ConfigError::TooManyPerTenant {
                per_tenant: 9,
                max: MAX_PER_TENANT,
            },
            "at most 8",
        ),
        (
            base().quota(Quota::per_second(100).with_burst(7)).build(),
            ConfigError::BurstTooSmall {
                burst: 7,
                buckets: 8,
            },
            "raise the burst to at least 8",
        ),
        (
            base()
                .quota(Quota::new(1, Duration::from_secs(u64::MAX)).with_burst(8))
                .build(),
            ConfigError::Overflow {
                refill_secs: u128::from(u64::MAX) * 8 * 8,
            },
            "use a shorter period",
        ),
        (
            base()
                .quota(Quota::per_hour(1).with_burst(u32::MAX))
                .buckets(1)
                .per_tenant(1)
                .build(),
            ConfigError::Overflow {
                refill_secs: 3600 * u128::from(u32::MAX),
            },
            "smaller burst",
        ),
        (
            base().tenant_cache(usize::MAX).build(),
            ConfigError::CacheTooLarge {
                entries: usize::MAX,
                max: 1 << 24,
            },
            "use at most",
        ),
    ];
    for (result, want, hint) in cases {
        let err = result.unwrap_err();
        assert_eq!(err, want);
        let msg = err.to_string();
        assert!(msg.contains(hint), "{msg:?} lacks {hint:?}");
        let _: &dyn std::error::Error = &err;
    }
    // The edges that are fine.
    assert!(base().buckets(8).per_tenant(8).build().is_ok());
    let large = base().quota(Quota::per_second(u32::MAX)).buckets(8);
    assert!(large.clone().max_buckets(MAX_BUCKETS).validate().is_ok());
    assert_eq!(
        large.max_buckets(MAX_BUCKETS + 1).validate(),
        Err(ConfigError::TooManyBuckets {
            buckets: MAX_BUCKETS + 1,
            max: MAX_BUCKETS
        })
    );
    assert!(
        base()
            .quota(Quota::per_second(u32::MAX))
            .buckets(MAX_BUCKETS)
            .per_tenant(MAX_PER_TENANT)
            .build()
            .is_ok()
    );
    assert!(
        base()
            .quota(Quota::per_hour(1).with_burst(8))
            .build()
            .is_ok()
    );
}

#[test]
fn defaults_fit_the_burst_but_explicit_settings_are_kept() {
    let build = |b: shuffle_limiter::Builder| b.build().map(|l| (l.buckets(), l.per_tenant()));
    let q = |count| ShardedLimiter::builder().quota(Quota::per_second(count));
    assert_eq!(build(q(100)), Ok((8, 2)));
    assert_eq!(build(q(5)), Ok((5, 2)));
    assert_eq!(build(q(1)), Ok((1, 1)));
    assert_eq!(build(q(5).per_tenant(3)), Ok((5, 3)));
    // What the caller set is never adjusted behind their back.
    assert_eq!(
        build(q(5).buckets(8)),
        Err(ConfigError::BurstTooSmall {
            burst: 5,
            buckets: 8
        })
    );
    assert_eq!(
        build(q(1).per_tenant(2)),
        Err(ConfigError::PerTenantExceedsBuckets {
            per_tenant: 2,
            buckets: 1
        })
    );
    assert_eq!(
        build(ShardedLimiter::builder().quota(Quota::per_second(5).with_burst(0))),
        Err(ConfigError::ZeroBurst { buckets: 1 })
    );
}

#[test]
fn a_rate_faster_than_one_token_per_nanosecond_per_bucket_is_refused() {
    for buckets in 1..=4 {
        let err = ShardedLimiter::builder()
            .quota(Quota::per_second(u32::MAX))
            .buckets(buckets)
            .build()
            .unwrap_err();
        assert_eq!(
            err,
            ConfigError::RateTooHigh {
                buckets,
                min_buckets: 5
            }
        );
        assert!(err.to_string().contains("use at least 5 buckets"), "{err}");
    }
    // Five buckets: one token per 1.16 ns each, rounded up to 2 ns; the
    // limiter is exact about it.
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(u32::MAX))
        .buckets(5)
        .build()
        .unwrap();
    assert_eq!(limiter.bucket_interval(), Duration::from_nanos(2));
}

#[test]
fn a_burst_of_zero_says_what_to_change() {
    let err = ShardedLimiter::builder()
        .quota(Quota::per_second(5).with_burst(0))
        .buckets(4)
        .build()
        .unwrap_err();
    assert_eq!(err, ConfigError::ZeroBurst { buckets: 4 });
    let message = err.to_string();
    assert!(
        message.contains("with_burst(n) with n of at least 4"),
        "{message}"
    );
    assert!(!message.contains("at most 0"), "{message}");
}

#[test]
fn the_accessors_and_the_debug_output_show_the_settings() {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(10))
        .buckets(4)
        .per_tenant(2)
        .tenant_cache(8)
        .name("upstream-a")
        .clock(ManualClock::new())
        .build()
        .unwrap();
    assert_eq!(limiter.name(), "upstream-a");
    assert_eq!(limiter.quota(), Quota::per_second(10));
    assert_eq!(limiter.tenant_cache_capacity(), 16); // 12 ways: 2 sets of 8
    assert_eq!(limiter.bucket_burst(3), Some(2));
    assert_eq!(limiter.bucket_burst(4), None);
    assert_eq!(limiter.bucket_burst(u32::MAX), None);
    let ids: Vec<u32> = limiter.snapshot().iter().map(|b| b.bucket()).collect();
    assert_eq!(ids, [0, 1, 2, 3]);

    let debug = format!("{limiter:?}");
    for field in [
        "Limiter {",
        "name: \"upstream-a\"",
        "count: 10",
        "buckets: 4",
        "per_tenant: 2",
        "capacity: 16",
        "InProcess { buckets: 4",
    ] {
        assert!(debug.contains(field), "{debug} lacks {field}");
    }
    let tenant = limiter.handle("t");
    let shard = format!("{:?}", tenant.shard());
    assert_eq!(shard, format!("Shard({:?})", tenant.shard().buckets()));
    let debug = format!("{tenant:?}");
    assert!(
        debug.starts_with("Handle {") && debug.contains("\"upstream-a\"") && debug.contains(&shard),
        "{debug}"
    );
    let debug = format!("{:?}", limiter.assignment());
    assert!(
        debug.starts_with("Assignment {")
            && debug.contains("buckets: 4")
            && debug.contains("per_tenant: 2"),
        "{debug}"
    );

    let defaults = ShardedLimiter::builder()
        .quota(Quota::per_second(10))
        .build()
        .unwrap();
    assert_eq!(defaults.name(), "default");
    // 100 000 tenants: 150 000 ways, 8 to a set.
    assert_eq!(defaults.tenant_cache_capacity(), 150_000);
    let uncached = ShardedLimiter::builder()
        .quota(Quota::per_second(10))
        .tenant_cache(0)
        .build()
        .unwrap();
    assert_eq!(uncached.tenant_cache_capacity(), 0);
    assert_eq!(uncached.shard("t"), defaults.shard("t"));
}

#[test]
fn the_fastest_rate_and_the_longest_refill_are_accepted_and_no_more() {
    // One token per nanosecond per bucket is the fastest accepted.
    let build = |quota: Quota, buckets| {
        ShardedLimiter::builder()
            .quota(quota)
            .buckets(buckets)
            .per_tenant(1)
            .build()
    };
    let limiter = build(Quota::new(5, Duration::from_nanos(5)), 1).unwrap();
    assert_eq!(limiter.bucket_interval(), Duration::from_nanos(1));
    assert_eq!(
        build(Quota::new(6, Duration::from_nanos(5)).with_burst(5), 1).unwrap_err(),
        ConfigError::RateTooHigh {
            buckets: 1,
            min_buckets: 2
        }
    );
    // The whole burst may take up to 2⁶² ns to come back at one bucket's
    // pace (the cost of a request as heavy as the burst), not a nanosecond
    // more: a burst of 4 over 2 buckets, at 2⁶⁰ ns a token.
    let slow = |period| build(Quota::new(1, Duration::from_nanos(period)).with_burst(4), 2);
    let limiter = slow(1 << 59).unwrap();
    assert_eq!(limiter.bucket_interval(), Duration::from_nanos(1 << 60));
    assert_eq!(
        slow((1 << 59) + 1).unwrap_err(),
        ConfigError::Overflow {
            refill_secs: ((1 << 62) + 8) / 1_000_000_000
        }
    );
    // So a request of the whole burst is paid there, and only once: its
    // cost, 4 · 2⁶⁰ ns, does not overflow into a free grant.
    let clock = shuffle_limiter::ManualClock::new();
    let limiter = ShardedLimiter::builder()
        .quota(Quota::new(1, Duration::from_nanos(1 << 59)).with_burst(4))
        .buckets(2)
        .per_tenant(2)
        .clock(clock)
        .build()
        .unwrap();
    let heavy = || limiter.check(shuffle_limiter::Request::tenant("t").tokens(4));
    assert_eq!(heavy().unwrap().tokens(), 4);
    assert!(heavy().is_err());
    // And one heavier than a long period's buckets can take is refused at
    // build, where it was a free grant (8 tokens at 2⁶² ns: past 64 bits).
    let k8 = ShardedLimiter::builder()
        .quota(Quota::new(1, Duration::from_nanos(1 << 59)).with_burst(8))
        .buckets(8)
        .per_tenant(8)
        .build();
    assert!(matches!(k8, Err(ConfigError::Overflow { .. })), "{k8:?}");
}
