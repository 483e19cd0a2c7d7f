//! The in-process store's answer to a draw that raced a change of the
//! split.

use std::time::Duration;

use super::answered;
use crate::draw::Outcome;
use crate::{DenialReason, ManualClock, Quota, ShardedLimiter};

/// A draw denied "at the end of time" found a weight no bucket could pay
/// (a cut of the burst raced it). Answered once the split in force holds
/// the weight again (the cut undone in between), the request is told to
/// ask again at once, not after 584 years; under a split that still cannot
/// hold it, it never fits.
#[test]
fn a_draw_denied_for_ever_under_a_split_that_holds_the_weight_again_retries_at_once() {
    let limiter = ShardedLimiter::builder()
        .quota(Quota::new(8, Duration::from_secs(1)).with_burst(8))
        .buckets(4)
        .per_tenant(2)
        .clock(ManualClock::new())
        .build()
        .unwrap();
    let shard = limiter.shard("t");
    let never = Outcome::Deny {
        index: 1,
        at: u64::MAX,
    };
    let now = 5_000_000_000;

    let fits = answered(&limiter.core, never, &shard, 2, (now, 0)).unwrap_err();
    assert_eq!(fits.reason(), DenialReason::Limited);
    assert_eq!(fits.retry_after(), Duration::from_nanos(1));
    assert_eq!(fits.bucket(), shard.buckets()[1]);

    let too_heavy = answered(&limiter.core, never, &shard, 5, (now, 0)).unwrap_err();
    assert!(
        matches!(
            too_heavy.reason(),
            DenialReason::NeverFits { asked: 5, most: 4 }
        ),
        "{too_heavy:?}"
    );
}
