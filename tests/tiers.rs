//! Tiers: tenants given more buckets than the limiter's k keep the buckets
//! they had and add more, draw on them in checks, and bad tiers are refused
//! with what to change.

use std::time::Duration;

use shuffle_limiter::{
    Assignment, ConfigError, MAX_TIERED_TENANTS, ManualClock, Quota, ShardedLimiter,
};

fn builder() -> shuffle_limiter::Builder<ManualClock> {
    ShardedLimiter::builder()
        .quota(Quota::per_second(800))
        .buckets(8)
        .per_tenant(2)
        .clock(ManualClock::new())
}

#[test]
fn a_larger_tier_keeps_every_bucket_a_tenant_had_and_adds_more() {
    let tenants: Vec<String> = (0..300).map(|t| format!("tenant-{t}")).collect();
    let gold = tenants.iter().step_by(3);
    let limiter = gold
        .clone()
        .fold(builder().tier("gold", 4).borrow_from(2), |b, t| {
            b.tenant_tier(t, "gold")
        })
        .build()
        .unwrap();
    let standard = Assignment::new(8, 2, b"").unwrap().with_spill(2).unwrap();
    for (i, tenant) in tenants.iter().enumerate() {
        let (had, has) = (standard.shard(tenant), limiter.shard(tenant));
        if i % 3 == 0 {
            assert_eq!(has.buckets().len(), 4, "{tenant}");
            assert_eq!(
                &has.buckets()[..2],
                had.buckets(),
                "{tenant}: kept its pair first"
            );
            // The spill set follows the tier's k + d ranking as well.
            assert_eq!(
                has.spill(),
                &Assignment::new(8, 6, b"").unwrap().shard(tenant).buckets()[4..]
            );
        } else {
            assert_eq!(has, had, "{tenant}: not tiered, unchanged");
        }
        // Checks draw on the tier's buckets, cached or not.
        let grant = limiter.check(tenant).unwrap();
        assert!(has.contains(grant.bucket()));
        assert_eq!(limiter.shard(tenant), has);
    }
}

#[test]
fn a_gold_tenant_alone_sustains_its_tiers_share() {
    // 8 buckets of 100 tokens, 100/s each: a standard tenant alone sustains
    // 2/8 of R, a gold one 4/8.
    let limiter = builder()
        .tier("gold", 4)
        .tenant_tier("acme", "gold")
        .build()
        .unwrap();
    let share = |tenant: &str| {
        let handle = limiter.handle(tenant);
        // Spend the burst first: 800 tokens at most.
        let spent = (0..=800).take_while(|_| handle.check().is_ok()).count();
        assert!(spent <= 800, "granted past the burst");
        let mut granted = 0u32;
        for _ in 0..1_000 {
            limiter.clock().advance(Duration::from_millis(10));
            while handle.check().is_ok() {
                granted += 1;
                assert!(granted <= 8_000, "more than R over 10 s");
            }
        }
        f64::from(granted) / 8_000.0
    };
    assert!((share("acme") - 0.5).abs() < 0.01, "{}", share("acme"));
    assert!((share("standard-co") - 0.25).abs() < 0.01);
}

#[test]
fn bad_tiers_say_what_to_change() {
    let err = builder().tenant_tier("acme", "gold").build().unwrap_err();
    assert_eq!(
        err,
        ConfigError::UnknownTier {
            tier: "gold".into()
        }
    );
    assert!(
        err.to_string().contains("define it with tier(\"gold\", k)"),
        "{err}"
    );
    // With 2 spill buckets, a tier may give at most 8 − 2 = 6.
    let err = builder()
        .borrow_from(2)
        .tier("huge", 7)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        ConfigError::TierPerTenant {
            tier: "huge".into(),
            per_tenant: 7,
            max: 6
        }
    );
    assert!(err.to_string().contains("use from 1 to 6"), "{err}");
    assert!(builder().tier("none", 0).build().is_err());
    // A later definition of a name replaces the earlier one.
    let limiter = builder()
        .tier("gold", 7)
        .tier("gold", 3)
        .tenant_tier("a", "gold")
        .build();
    assert_eq!(limiter.unwrap().shard("a").buckets().len(), 3);
    let tiered = |n: usize| {
        (0..n).fold(builder().tier("gold", 4), |b, t| {
            b.tenant_tier(t.to_le_bytes(), "gold")
        })
    };
    // As many as there may be; one more is refused.
    assert!(tiered(MAX_TIERED_TENANTS).validate().is_ok());
    let err = tiered(MAX_TIERED_TENANTS + 1).build().unwrap_err();
    assert!(
        matches!(err, ConfigError::TooManyTieredTenants { tenants, .. } if tenants == MAX_TIERED_TENANTS + 1)
    );
}

/// "Defining a name again replaces it" (`Builder::tier`): the replaced
/// definition is not checked either. `.tier("gold", 9).tier("gold", 4)`
/// over N = 8 was refused for the 9 that no tenant would ever get.
#[test]
fn a_tier_defined_again_replaces_the_first_definition() {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(8))
        .buckets(8)
        .per_tenant(2)
        .tier("gold", 9)
        .tier("gold", 4)
        .tenant_tier("acme", "gold")
        .build()
        .expect("the second definition fits");
    assert_eq!(limiter.shard("acme").buckets().len(), 4);
}

/// A tenant put in a tier again is in the last one only: the tier it left
/// neither bounds how far N may shrink nor counts towards
/// `MAX_TIERED_TENANTS`. (`acme` moved from a tier of 6 to one of 2 kept N
/// from going below 6.)
#[test]
fn a_tenant_put_in_a_tier_again_is_in_the_last_one_only() {
    let limiter = builder()
        .tier("wide", 6)
        .tier("narrow", 2)
        .tenant_tier("acme", "wide")
        .tenant_tier("acme", "narrow")
        .build()
        .unwrap();
    assert_eq!(limiter.shard("acme").buckets().len(), 2);
    limiter
        .set_buckets(4)
        .expect("no tenant is in the tier of 6");
    assert_eq!(limiter.shard("acme").buckets().len(), 2);
    // Moved back and forth, every tenant counts once.
    let moved =
        (0..MAX_TIERED_TENANTS).fold(builder().tier("gold", 4).tier("silver", 3), |b, t| {
            b.tenant_tier(t.to_le_bytes(), "gold")
                .tenant_tier(t.to_le_bytes(), "silver")
        });
    assert!(moved.validate().is_ok());
    // A tier it left may even be undefined.
    let limiter = builder()
        .tier("gold", 4)
        .tenant_tier("acme", "typo")
        .tenant_tier("acme", "gold")
        .build()
        .unwrap();
    assert_eq!(limiter.shard("acme").buckets().len(), 4);
}

/// A tier narrower than the users' j would give every user of its tenants
/// the whole tier (`per_user` promises j of the tenant's buckets): refused,
/// saying what to change.
#[test]
fn a_tier_narrower_than_a_users_j_is_refused() {
    let err = ShardedLimiter::builder()
        .quota(Quota::per_second(8))
        .buckets(8)
        .per_tenant(4)
        .per_user(3)
        .tier("small", 2)
        .build()
        .unwrap_err();
    assert_eq!(
        err,
        ConfigError::TierPerUser {
            tier: "small".into(),
            per_tenant: 2,
            per_user: 3
        }
    );
    assert!(err.to_string().contains("per_user"), "{err}");
    // As narrow as j is fine: its users share the tier, as users of a
    // tenant with j = k share its shard.
    let limiter = ShardedLimiter::builder()
        .quota(Quota::per_second(8))
        .buckets(8)
        .per_tenant(4)
        .per_user(2)
        .tier("small", 2)
        .tenant_tier("acme", "small")
        .build()
        .unwrap();
    let user = shuffle_limiter::Request::tenant("acme").user("u");
    assert_eq!(limiter.shard(user).buckets().len(), 2);
}
