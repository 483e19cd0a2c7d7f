//! Denials remembered until their retry time, so that a tenant hammering an
//! empty shard does not cost a round trip per request.
//!
//! A denial of `n` tokens proves that until the retry time the tenant's own
//! buckets together hold fewer than `n` whole tokens; the script also
//! answers what each of them holds just before then, if nothing is taken,
//! which bounds it until then whatever other processes take. Each bucket
//! remembers the latest such fact: "fewer than `weight` tokens before
//! `until`". A later request is denied
//! from the cache only when what its own buckets can hold by those facts (a
//! bucket without one: its burst) adds up to less than it asks, and, for a
//! tenant that may borrow, each spill bucket that could ever hold it is
//! known to lack it.
//!
//! Other processes' draws only move a bucket's arrival time forward, which
//! keeps such a fact true; their refunds and changes of the quota move it
//! back, which this process hears of only from Redis. So a fact is used for
//! at most [`FRESH_FOR`] after it was asked: past that, Redis is asked
//! again, even before the retry time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::plan::Split;
use crate::{Denied, Shard};

/// The largest bound remembered; a bucket holding more is not.
const MAX_WEIGHT: u32 = 0xFFFF;

/// How long a fact is used after it was asked, in microseconds: how late a
/// refund or a quota change made by another process may reach a cached
/// denial here.
pub(super) const FRESH_FOR: u64 = 1_000_000;

/// Per bucket, `until << 16 | weight`, `until` in local microseconds, and
/// when that was asked.
#[derive(Debug)]
pub(super) struct DenialCache {
    blocked: Box<[AtomicU64]>,
    asked: Box<[AtomicU64]>,
}

impl DenialCache {
    pub(super) fn new(buckets: u32) -> Self {
        let zeros = || (0..buckets).map(|_| AtomicU64::new(0)).collect();
        DenialCache {
            blocked: zeros(),
            asked: zeros(),
        }
    }

    /// Forgets every denial (they were counted under another quota).
    pub(super) fn clear(&self) {
        for entry in &self.blocked {
            entry.store(0, Ordering::Relaxed);
        }
    }

    /// Forgets what is known of `bucket` (tokens were given back to it).
    pub(super) fn forget(&self, bucket: u32) {
        self.blocked[bucket as usize].store(0, Ordering::Relaxed);
    }

    /// A denial of `n` tokens at local time `now`, when the shard's own
    /// buckets are known to hold fewer together, and each of its spill
    /// buckets that could hold them is known to lack them.
    pub(super) fn lookup(&self, split: &Split, shard: &Shard, n: u32, now: u64) -> Option<Denied> {
        let mut soonest = (u64::MAX, shard.buckets()[0]);
        let mut known = |b: u32| {
            // When first, so that a fact written with it is read with it
            // (a fact paired with an older `asked` is only used less long).
            let asked = self.asked[b as usize].load(Ordering::Acquire);
            let entry = self.blocked[b as usize].load(Ordering::Relaxed);
            let (until, weight) = (entry >> 16, (entry & 0xFFFF) as u32);
            let fresh = now < asked.saturating_add(FRESH_FOR);
            let fewer_than = (until > now && fresh).then_some(weight)?;
            if until < soonest.0 {
                soonest = (until, b);
            }
            Some(fewer_than)
        };
        let mut most = 0u32;
        for &b in shard.buckets() {
            let burst = split.burst_of(b);
            let holds = known(b).map_or(burst, |fewer_than| burst.min(fewer_than - 1));
            most = most.saturating_add(holds);
        }
        if most >= n {
            return None;
        }
        // A tenant that may borrow is denied only if its spill buckets are
        // short too (for their owners, so all the more for a borrower).
        for &b in shard.spill() {
            if split.burst_of(b) >= n && known(b).is_none_or(|fewer_than| fewer_than > n) {
                return None;
            }
        }
        (soonest.0 != u64::MAX)
            .then(|| Denied::limited(Duration::from_micros(soonest.0 - now), soonest.1))
    }

    /// Remembers a denial asked for at local time `sent`, with what each of
    /// the shard's own buckets holds at most until its retry time.
    pub(super) fn remember(&self, shard: &Shard, sent: u64, denied: &Denied, held: &[u32]) {
        let retry = u64::try_from(denied.retry_after().as_micros()).unwrap_or(u64::MAX);
        let until = sent.saturating_add(retry).min(u64::MAX >> 16);
        for (&b, &held) in shard.buckets().iter().zip(held) {
            let fewer_than = held.saturating_add(1);
            if fewer_than <= MAX_WEIGHT {
                let entry = until << 16 | u64::from(fewer_than);
                self.blocked[b as usize].store(entry, Ordering::Relaxed);
                self.asked[b as usize].store(sent, Ordering::Release);
            }
        }
    }
}
