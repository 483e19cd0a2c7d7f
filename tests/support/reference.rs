//! An independent reading of `docs/assignment.md`'s assignment, and the
//! limiters and tenant names the assignment tests share.

// Each test file uses a part of this.
#![allow(dead_code)]

use sha2::{Digest, Sha256};
use shuffle_limiter::{Quota, ShardedLimiter};

/// The domain string, as the specification spells it.
pub(crate) const DOMAIN: &[u8] = b"shuffle-limiter/assign/v1";

/// SHA-256 seed built from one concatenated message (the crate absorbs a
/// precomputed prefix instead).
pub(crate) fn reference_seed(salt: &[u8], tenant: &[u8]) -> u64 {
    let mut message = DOMAIN.to_vec();
    message.extend_from_slice(&(salt.len() as u64).to_be_bytes());
    message.extend_from_slice(salt);
    message.extend_from_slice(tenant);
    let digest = Sha256::digest(&message);
    u64::from_be_bytes(digest[..8].try_into().unwrap())
}

/// The scores of buckets 0..n as the successive outputs of SplitMix64 started
/// at `seed`: the "(i+1)-th output" reading of the specification.
pub(crate) fn reference_scores(seed: u64, n: u32) -> Vec<u64> {
    let mut state = seed;
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut out = state;
            out = (out ^ (out >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            out = (out ^ (out >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            out ^ (out >> 31)
        })
        .collect()
}

/// A full sort by (score descending, index ascending), then the first k.
pub(crate) fn reference_shard(n: u32, k: u32, salt: &[u8], tenant: &[u8]) -> Vec<u32> {
    let scores = reference_scores(reference_seed(salt, tenant), n);
    let mut order: Vec<u32> = (0..n).collect();
    order.sort_by_key(|&b| (std::cmp::Reverse(scores[b as usize]), b));
    order.truncate(k as usize);
    order
}

/// A limiter with a tenant cache of `cache` entries (0: none).
pub(crate) fn limiter(n: u32, k: u32, salt: &[u8], cache: usize) -> ShardedLimiter {
    ShardedLimiter::builder()
        .quota(Quota::per_second(1000 * n)) // burst ≥ N: 1000 tokens per bucket
        .buckets(n)
        .per_tenant(k)
        .salt(salt)
        .tenant_cache(cache)
        .build()
        .unwrap()
}

pub(crate) fn tenant(i: u32) -> String {
    format!("tenant-{i}")
}
