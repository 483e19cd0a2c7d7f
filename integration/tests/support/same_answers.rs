//! The same requests to an in-process limiter and a Redis one, answer by
//! answer.
#![allow(dead_code)] // each user takes what it needs

use std::time::Duration;

use redis::aio::ConnectionLike;
use shuffle_limiter::redis::RedisLimiter;
use shuffle_limiter::{DenialReason, Denied, Limit, ManualClock, Request, ShardedLimiter};

/// A small deterministic generator for request sequences.
pub(crate) struct XorShift(pub(crate) u64);

impl XorShift {
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Whether `denied` says the request can never fit.
fn never_fits(denied: &Denied) -> bool {
    matches!(denied.reason(), DenialReason::NeverFits { .. })
}

/// Drives `local` and `remote` with the same requests and compares every
/// answer: granted or not, the tokens left, the weight refused.
///
/// The server's clock runs while the in-process one stands still, so where
/// two buckets of a shard tie, Redis may see one as a hair roomier and pick
/// it: the two stores may then hold the same tokens in different buckets.
/// So the tenants are chosen with disjoint shards, and the limiters must
/// split their burst evenly: then either choice leaves each tenant the same
/// tokens. (The choice itself is compared input by input with the script in
/// the crate's own differential test.)
pub(crate) async fn assert_same_answers<Conn>(
    local: &ShardedLimiter<ManualClock>,
    remote: &RedisLimiter<Conn>,
    steps: u64,
) where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut tenants: Vec<String> = Vec::new();
    for t in 0..1000 {
        let tenant = format!("tenant-{t}");
        let shard = local.shard(&tenant);
        if tenants.iter().all(|o| local.shard(o).overlap(&shard) == 0) {
            tenants.push(tenant);
        }
    }
    assert!(tenants.len() >= 2, "{tenants:?}");
    let mut rng = XorShift(0x5EED);
    // Up to more than the tenants' buckets hold together (8 or 10 in the
    // tests), so that some requests are paid together and some refused.
    let weights = [1, 1, 1, 1, 2, 3, 5, 6, 7, 9, 11];
    let (mut grants, mut denials, mut too_heavy, mut pooled) = (0, 0, 0, 0);
    for step in 0..steps {
        let tenant = &tenants[rng.below(tenants.len() as u64) as usize];
        let n = weights[rng.below(weights.len() as u64) as usize];
        let want = local.check(Request::tenant(tenant).tokens(n));
        let got = remote.check(Request::tenant(tenant).tokens(n)).await;
        let shard = local.shard(tenant);
        match (want, got) {
            (Ok(want), Ok(got)) => {
                assert_eq!(
                    got.remaining(),
                    want.remaining(),
                    "step {step}: {tenant} {n}"
                );
                assert!(shard.contains(got.bucket()), "step {step}");
                // Which of two equally roomy buckets pays first may differ
                // (see above); what they pay may not.
                let paid = |g: &shuffle_limiter::Grant| -> Vec<u32> {
                    let mut paid: Vec<u32> = g.payments().iter().map(|p| p.tokens()).collect();
                    paid.sort_unstable();
                    paid
                };
                assert_eq!(paid(&got), paid(&want), "step {step}: {tenant} {n}");
                grants += 1;
                pooled += usize::from(got.payments().len() > 1);
            }
            (Err(want), Err(got)) if !never_fits(&want) && !never_fits(&got) => {
                let gap = want.retry_after().abs_diff(got.retry_after());
                assert!(
                    gap < Duration::from_secs(60),
                    "step {step}: {want:?} {got:?}"
                );
                denials += 1;
            }
            (Err(want), Err(got)) if never_fits(&want) && never_fits(&got) => {
                assert_eq!(got.reason(), want.reason(), "step {step}");
                too_heavy += 1;
            }
            (want, got) => {
                panic!("step {step}: {tenant} asks {n}: {want:?} here, {got:?} in Redis")
            }
        }
    }
    assert!(
        grants >= 2 * tenants.len() && denials > steps / 4 && too_heavy > steps / 40 && pooled >= 2,
        "{grants} {denials} {too_heavy} {pooled}"
    );
}
