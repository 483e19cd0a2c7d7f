//! Tiers: tenants named at build time that get more (or fewer) buckets than
//! the limiter's k, each with its shard worked out once.
//!
//! A tier's shard for a tenant is the top k' of the same ranking as
//! everyone's (docs/assignment.md: nested in k), so moving a tenant to a
//! larger tier keeps every bucket it had and adds more.

use std::collections::HashMap;

use foldhash::fast::RandomState;

use crate::Shard;

/// The most tenants that may be given a tier: the map is built once and
/// kept for the limiter's life, so the builder caps it.
pub const MAX_TIERED_TENANTS: usize = 1 << 16;

/// Tiered tenants' shards by tenant id.
type ByTenant = HashMap<Box<[u8]>, Shard, RandomState>;

/// The shards of the tenants given a tier; empty for most limiters, which
/// then pay one branch per check for it.
#[derive(Debug, Default)]
pub(crate) struct Tiers {
    shards: Option<Box<ByTenant>>,
}

impl Tiers {
    /// Tiers with these tenants' shards.
    pub(crate) fn new(shards: impl IntoIterator<Item = (Box<[u8]>, Shard)>) -> Self {
        let map: ByTenant = shards.into_iter().collect();
        Tiers {
            shards: (!map.is_empty()).then(|| Box::new(map)),
        }
    }

    /// The tenant's shard if it was given a tier.
    #[inline]
    pub(crate) fn get(&self, tenant: &[u8]) -> Option<Shard> {
        self.shards.as_ref()?.get(tenant).copied()
    }
}
