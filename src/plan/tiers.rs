//! Tiers: tenants named at build time that get more (or fewer) buckets than
//! the limiter's k, each with its shard worked out once.
//!
//! A tier's shard for a tenant is the top k' of the same ranking as
//! everyone's (docs/assignment.md: nested in k), so moving a tenant to a
//! larger tier keeps every bucket it had and adds more.

use std::collections::HashMap;
use std::sync::Arc;

use foldhash::fast::RandomState;

use crate::{Assignment, Shard};

/// The most tenants that may be given a tier: the map is built once and
/// kept for the limiter's life, so the builder caps it.
pub const MAX_TIERED_TENANTS: usize = 1 << 16;

/// Tiered tenants by tenant id.
type ByTenant = HashMap<Box<[u8]>, Tiered, RandomState>;

/// A tiered tenant: its shard among the N buckets the limiter was built
/// with, and what it takes to rank them again after a change of N.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tiered {
    pub(crate) shard: Shard,
    pub(crate) seed: u64,
    pub(crate) per_tenant: u32,
}

/// The shards of the tenants given a tier; empty for most limiters, which
/// then pay one branch per check for it.
#[derive(Debug, Default, Clone)]
pub(crate) struct Tiers {
    shards: Option<Arc<ByTenant>>,
    /// The tier with the most buckets per tenant, and that number, if any
    /// tenant has a tier: it bounds how far N may shrink.
    widest: Option<(String, u32)>,
}

impl Tiers {
    /// Tiers with these tenants.
    pub(crate) fn new(
        shards: impl IntoIterator<Item = (Box<[u8]>, Tiered)>,
        widest: Option<(String, u32)>,
    ) -> Self {
        let map: ByTenant = shards.into_iter().collect();
        Tiers {
            widest: widest.filter(|_| !map.is_empty()),
            shards: (!map.is_empty()).then(|| Arc::new(map)),
        }
    }

    /// Whether some tenant was given a tier.
    #[inline]
    pub(crate) fn any(&self) -> bool {
        self.shards.is_some()
    }

    /// The tier with the most buckets per tenant, if any tenant has a tier.
    pub(crate) fn widest(&self) -> Option<(&str, u32)> {
        self.widest.as_ref().map(|(tier, k)| (tier.as_str(), *k))
    }

    /// The tenant's shard among `buckets` buckets if it was given a tier:
    /// the one worked out at build, or, after a change of N, the top k' of
    /// its ranking under `assignment` (no SHA-256: the seed is kept).
    #[inline]
    pub(crate) fn get(
        &self,
        tenant: &[u8],
        buckets: u32,
        assignment: &Assignment,
    ) -> Option<Shard> {
        let tiered = self.shards.as_ref()?.get(tenant)?;
        if buckets == assignment.buckets() {
            return Some(tiered.shard);
        }
        Some(assignment.top(tiered.seed, buckets, tiered.per_tenant))
    }
}
