//! The builder's own checks, below the public API.

use super::*;

#[test]
fn the_largest_tenant_cache_is_accepted_and_one_entry_more_is_not() {
    // Checked by `validate` (and `checked`), which allocate no cache: the
    // largest one takes half a gigabyte.
    let builder = |entries| {
        ShardedLimiter::builder()
            .quota(Quota::per_second(100))
            .tenant_cache(entries)
    };
    assert!(builder(MAX_CACHE_ENTRIES).validate().is_ok());
    assert_eq!(
        builder(MAX_CACHE_ENTRIES + 1).validate().unwrap_err(),
        ConfigError::CacheTooLarge {
            entries: MAX_CACHE_ENTRIES + 1,
            max: MAX_CACHE_ENTRIES
        }
    );
    assert_eq!(
        builder(MAX_CACHE_ENTRIES + 1).checked().unwrap_err(),
        ConfigError::CacheTooLarge {
            entries: MAX_CACHE_ENTRIES + 1,
            max: MAX_CACHE_ENTRIES
        }
    );
    // `plan` reports what `checked` found.
    assert_eq!(
        builder(MAX_CACHE_ENTRIES + 1).plan().unwrap_err(),
        ConfigError::CacheTooLarge {
            entries: MAX_CACHE_ENTRIES + 1,
            max: MAX_CACHE_ENTRIES
        }
    );
}

#[test]
fn the_plan_carries_the_settings() {
    let core = ShardedLimiter::builder()
        .quota(Quota::per_second(10))
        .buckets(4)
        .per_tenant(3)
        .tenant_cache(12)
        .name("n")
        .plan()
        .unwrap();
    assert_eq!(core.quota(), Quota::per_second(10));
    let split = core.split.get();
    assert_eq!((split.burst, split.larger), (2, 2));
    assert_eq!(
        (
            core.shards.assignment.buckets(),
            core.shards.assignment.per_tenant()
        ),
        (4, 3)
    );
    assert_eq!(core.cache.capacity(), 24); // 12 tenants: 18 ways, 3 sets of 8
    assert_eq!(core.name, "n");
}
