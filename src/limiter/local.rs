//! The in-process limiter as a Redis store's local fallback: it decides on
//! the shard Redis was asked for, as it is, from this process's share.

use std::time::Duration;

use crate::clock::Clock;
use crate::error::ConfigError;
use crate::plan::Core;
use crate::plan::whom::Whom;
use crate::quota::Quota;
use crate::store::sealed::{Apply, Local};
use crate::{Denied, Grant, Refunded, Shard, ShardedLimiter};

#[allow(private_interfaces)] // see `Local`
impl<C: Clock> Local for ShardedLimiter<C> {
    type Clock = C;

    fn from_plan(core: Core, clock: C) -> Self {
        ShardedLimiter::in_process(core, clock)
    }

    fn decide(&self, shard: &Shard, n: u32) -> Option<Result<Grant, Denied>> {
        self.core.split.get().check_weight(shard, n).ok()?;
        // The shard as it is: Redis resolved it, under Redis's N, which
        // this limiter follows (a bucket it lacks is sealed: it denies).
        let whom = Whom::fixed(*shard, self.core.buckets());
        Some(self.store.apply(&self.core, whom, n).into_inner())
    }

    fn refund(&self, grant: Grant) -> Refunded {
        ShardedLimiter::refund(self, grant)
    }

    fn charge(&self, grant: Grant, tokens: u32) -> u32 {
        self.store.charge_grant(&self.core, &grant, tokens)
    }

    fn hold_off(&self, shard: Option<&Shard>, duration: Duration) {
        self.store.hold_off(&self.core, shard, duration);
    }

    fn follow(&self, quota: Quota, buckets: u32) -> Result<(), ConfigError> {
        self.set_quota_and_buckets(quota, buckets)
    }

    fn could_follow(&self, quota: Quota, buckets: u32) -> Result<(), ConfigError> {
        self.core.split_over(quota, buckets).map(drop)
    }
}
