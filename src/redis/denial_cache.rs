//! Denials remembered until their retry time, so that a tenant hammering an
//! empty shard does not cost a round trip per request.
//!
//! A denial of `n` tokens proves one thing: each bucket of the shard that
//! could ever hold `n` tokens cannot pay `n` (or more) before the retry time
//! — other processes can only move its arrival time later. It proves nothing
//! about fewer tokens, nor about a bucket too small for `n`. So each bucket
//! remembers the latest such fact: "no request of `weight` tokens or more
//! before `until`".

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::limiter::core::Split;
use crate::{Denied, Shard};

/// The largest weight remembered; a heavier denial is not cached.
const MAX_WEIGHT: u32 = 0xFFFF;

/// Per bucket, `until << 16 | weight`, `until` in local microseconds.
#[derive(Debug)]
pub(super) struct DenialCache {
    blocked: Box<[AtomicU64]>,
}

impl DenialCache {
    pub(super) fn new(buckets: u32) -> Self {
        DenialCache {
            blocked: (0..buckets).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// A denial of `n` tokens at local time `now`, when every bucket of the
    /// shard that could hold `n` is known to lack them.
    pub(super) fn lookup(&self, split: &Split, shard: &Shard, n: u32, now: u64) -> Option<Denied> {
        // A tenant that may borrow is denied only if its spill buckets are
        // blocked too (for their owners, so all the more for a borrower).
        let mut soonest = (u64::MAX, shard.buckets()[0]);
        for &b in shard.ranked() {
            if split.burst_of(b) < n {
                continue; // can never pay; the denial did not speak of it
            }
            let entry = self.blocked[b as usize].load(Ordering::Relaxed);
            let (until, weight) = (entry >> 16, (entry & 0xFFFF) as u32);
            if until <= now || weight > n {
                return None;
            }
            if until < soonest.0 {
                soonest = (until, b);
            }
        }
        (soonest.0 != u64::MAX).then(|| Denied {
            retry_after: Duration::from_micros(soonest.0 - now),
            bucket: soonest.1,
        })
    }

    /// Remembers a denial of `n` tokens asked for at local time `sent`.
    pub(super) fn remember(
        &self,
        split: &Split,
        shard: &Shard,
        n: u32,
        sent: u64,
        denied: &Denied,
    ) {
        if n == 0 || n > MAX_WEIGHT {
            return;
        }
        let retry = u64::try_from(denied.retry_after().as_micros()).unwrap_or(u64::MAX);
        let until = sent.saturating_add(retry).min(u64::MAX >> 16);
        let entry = until << 16 | u64::from(n);
        for &b in shard.buckets() {
            if split.burst_of(b) >= n {
                self.blocked[b as usize].store(entry, Ordering::Relaxed);
            }
        }
    }
}
