//! Which buckets a tenant draws from: the specified assignment, and a bounded
//! cache in front of it.
//!
//! The assignment is a compatibility contract, specified in
//! `docs/assignment.md`: it depends on the salt, the tenant's bytes, the
//! number of buckets N and the shard size k, and on nothing else, so every
//! process on every platform computes the same shard.

use std::fmt;

use sha2::{Digest, Sha256};

mod cache;
mod top;
mod user;

pub(crate) use cache::{MAX_CACHE_ENTRIES, ShardCache};

/// The most buckets a limiter may have.
pub const MAX_BUCKETS: u32 = 1 << 16;

/// The most buckets one tenant may be assigned.
pub const MAX_PER_TENANT: u32 = 8;

/// Domain separation for the seed hash; part of the specification.
const DOMAIN: &[u8] = b"shuffle-limiter/assign/v1";

/// SplitMix64's increment; the score of bucket `i` is the (i+1)-th output of
/// SplitMix64 started at the tenant's seed.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The k buckets assigned to one tenant, highest rendezvous score first,
/// and, when its limiter lets tenants borrow, the d spill buckets that follow
/// them in the same ranking (docs/assignment.md, "the spill set").
///
/// ```
/// use shuffle_limiter::{Quota, ShardedLimiter};
///
/// let limiter = ShardedLimiter::builder()
///     .quota(Quota::per_second(16))
///     .buckets(16)
///     .per_tenant(2)
///     .build()?;
/// let shard = limiter.shard("tenant-42");
/// assert_eq!(shard.buckets().len(), 2);
/// assert!(shard.buckets().iter().all(|&b| b < 16));
/// assert_ne!(shard.buckets()[0], shard.buckets()[1]);
/// # Ok::<(), shuffle_limiter::ConfigError>(())
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Shard {
    /// k: the tenant's own buckets, the first entries of `buckets`. (It
    /// and `spill` are whole words, as the bucket numbers are: a shard is
    /// copied word by word right after it is built, and two narrower
    /// stores read back as one word stalled every keyed check.)
    pub(crate) len: u32,
    /// d: spill buckets, the entries right after the own ones.
    pub(crate) spill: u32,
    /// Own, then spill buckets; zero beyond them.
    pub(crate) buckets: [u32; MAX_PER_TENANT as usize],
}

impl Shard {
    /// The bucket indices, k distinct values below N, highest score first.
    #[inline]
    pub fn buckets(&self) -> &[u32] {
        &self.buckets[..self.len as usize]
    }

    /// The spill buckets, which the tenant may borrow from when none of its
    /// own can pay: the d buckets ranked right after its own, highest score
    /// first; empty unless the limiter lends
    /// ([`Builder::borrow_from`](crate::Builder::borrow_from)).
    #[inline]
    pub fn spill(&self) -> &[u32] {
        let own = self.len as usize;
        &self.buckets[own..own + self.spill as usize]
    }

    /// Own buckets, then spill buckets: every bucket the tenant may draw
    /// from, in rank order.
    #[inline]
    pub(crate) fn ranked(&self) -> &[u32] {
        &self.buckets[..(self.len + self.spill) as usize]
    }

    /// The shard of the own buckets at the positions `keep` names (bit j:
    /// the j-th own bucket), in their order, without spill; `None` when
    /// it names none.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn only(&self, keep: u32) -> Option<Shard> {
        let mut only = Shard {
            len: 0,
            spill: 0,
            buckets: [0; MAX_PER_TENANT as usize],
        };
        for (j, &b) in self.buckets().iter().enumerate() {
            if keep & (1 << j) != 0 {
                only.buckets[only.len as usize] = b;
                only.len += 1;
            }
        }
        (only.len > 0).then_some(only)
    }

    /// Whether `bucket` is one of this shard's own.
    pub fn contains(&self, bucket: u32) -> bool {
        self.buckets().contains(&bucket)
    }

    /// How many buckets two shards have in common.
    pub fn overlap(&self, other: &Shard) -> usize {
        self.buckets()
            .iter()
            .filter(|&&b| other.contains(b))
            .count()
    }

    /// The same buckets as a set, ignoring the rank order.
    pub fn same_set(&self, other: &Shard) -> bool {
        self.len == other.len && self.overlap(other) == self.len as usize
    }
}

impl fmt::Debug for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut tuple = f.debug_tuple("Shard");
        tuple.field(&self.buckets());
        if self.spill > 0 {
            tuple.field(&self.spill());
        }
        tuple.finish()
    }
}

/// The specified tenant → shard function, without a cache or buckets.
///
/// [`ShardedLimiter::shard`](crate::ShardedLimiter::shard) gives the same
/// answer; this type is for tools that need shards without a limiter, such as
/// a sizing script or another backend. See `docs/assignment.md` for the
/// specification and known-answer vectors.
///
/// ```
/// use shuffle_limiter::Assignment;
///
/// let a = Assignment::new(16, 2, b"").unwrap();
/// assert_eq!(a.shard("tenant-0"), a.shard(b"tenant-0"));
/// ```
#[derive(Clone)]
pub struct Assignment {
    buckets: u32,
    per_tenant: u32,
    /// d: spill buckets per tenant.
    spill: u32,
    /// SHA-256 with the domain, salt length and salt already absorbed.
    prefix: Sha256,
    /// The same for users' seeds, with the user domain.
    user_prefix: Sha256,
}

impl Assignment {
    /// The assignment of `per_tenant` of `buckets` buckets under `salt`.
    ///
    /// Returns `None` unless `1 <= per_tenant <= min(buckets, MAX_PER_TENANT)`
    /// and `buckets <= MAX_BUCKETS`; the limiter's builder reports the same
    /// conditions as typed errors.
    pub fn new(buckets: u32, per_tenant: u32, salt: impl AsRef<[u8]>) -> Option<Self> {
        Self::valid(buckets, per_tenant).then(|| {
            let salt = salt.as_ref();
            let mut prefix = Sha256::new();
            prefix.update(DOMAIN);
            prefix.update((salt.len() as u64).to_be_bytes());
            prefix.update(salt);
            Assignment {
                buckets,
                per_tenant,
                spill: 0,
                prefix,
                user_prefix: user::user_prefix(salt),
            }
        })
    }

    /// The same assignment with `spill` spill buckets per tenant: the d
    /// buckets ranked right after each tenant's own k (docs/assignment.md,
    /// "the spill set"). Shards keep their own buckets as they are.
    ///
    /// Returns `None` unless `per_tenant + spill <= min(buckets,
    /// MAX_PER_TENANT)`.
    ///
    /// ```
    /// use shuffle_limiter::Assignment;
    ///
    /// let own = Assignment::new(8, 2, b"").unwrap();
    /// let lending = own.clone().with_spill(2).unwrap();
    /// let shard = lending.shard("tenant-0");
    /// assert_eq!(shard.buckets(), own.shard("tenant-0").buckets());
    /// assert_eq!(shard.spill(), [3, 7]); // docs/assignment.md's vectors
    /// assert!(own.clone().with_spill(7).is_none()); // 2 + 7 > 8 buckets
    /// ```
    pub fn with_spill(self, spill: u32) -> Option<Self> {
        (self.per_tenant + spill <= self.buckets.min(MAX_PER_TENANT))
            .then_some(Assignment { spill, ..self })
    }

    /// Whether `new` accepts these counts (a function of its own, so that
    /// cargo-mutants, which leaves `new` alone, reaches it).
    fn valid(buckets: u32, per_tenant: u32) -> bool {
        (1..=buckets.min(MAX_PER_TENANT)).contains(&per_tenant) && buckets <= MAX_BUCKETS
    }

    /// N: buckets in all.
    pub fn buckets(&self) -> u32 {
        self.buckets
    }

    /// k: buckets per tenant.
    pub fn per_tenant(&self) -> u32 {
        self.per_tenant
    }

    /// The tenant's 64-bit seed: the first 8 bytes, big-endian, of
    /// SHA-256(domain ‖ salt length ‖ salt ‖ tenant).
    pub fn seed(&self, tenant: impl AsRef<[u8]>) -> u64 {
        let mut h = self.prefix.clone();
        h.update(tenant.as_ref());
        let digest = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first)
    }

    /// The tenant's shard.
    pub fn shard(&self, tenant: impl AsRef<[u8]>) -> Shard {
        self.shard_of_seed(self.seed(tenant))
    }

    /// The same assignment over `buckets` buckets, for a limiter whose N
    /// changed; the caller checked that its shards fit.
    pub(crate) fn resized(&self, buckets: u32) -> Assignment {
        debug_assert!(self.per_tenant + self.spill <= buckets.min(MAX_PER_TENANT));
        Assignment {
            buckets,
            ..self.clone()
        }
    }

    /// The tenant's shard among `buckets` buckets: its shard under
    /// [`resized`](Self::resized)`(buckets)`, without the copy.
    #[inline]
    pub(crate) fn shard_in(&self, tenant: &[u8], buckets: u32) -> Shard {
        self.top(self.seed(tenant), buckets, self.per_tenant)
    }

    /// d: spill buckets per tenant (0 unless [`with_spill`](Self::with_spill)).
    pub fn spill(&self) -> u32 {
        self.spill
    }

    /// The shard for a seed: the k + d buckets with the highest scores, the
    /// first k its own.
    pub(crate) fn shard_of_seed(&self, seed: u64) -> Shard {
        self.top(seed, self.buckets, self.per_tenant)
    }

    /// The `per_tenant` buckets with the highest scores among `buckets`,
    /// then the d spill buckets.
    pub(crate) fn top(&self, seed: u64, buckets: u32, per_tenant: u32) -> Shard {
        let ranked = per_tenant + self.spill;
        let mut shard = top::top_k(buckets, ranked, |bucket| score(seed, bucket));
        shard.len = per_tenant;
        shard.spill = self.spill;
        shard
    }
}

impl fmt::Debug for Assignment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Assignment")
            .field("buckets", &self.buckets)
            .field("per_tenant", &self.per_tenant)
            .field("spill", &self.spill)
            .finish_non_exhaustive()
    }
}

/// The rendezvous score of `bucket` for a tenant with `seed`.
#[inline]
fn score(seed: u64, bucket: u32) -> u64 {
    let mut z = seed.wrapping_add(GAMMA.wrapping_mul(u64::from(bucket) + 1));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_ranks_by_score_with_ties_to_the_smaller_index() {
        let a = Assignment::new(64, 4, b"").unwrap();
        for t in 0..200u32 {
            let seed = a.seed(t.to_le_bytes());
            let shard = a.shard_of_seed(seed);
            let mut all: Vec<(u64, u32)> = (0..64).map(|b| (score(seed, b), b)).collect();
            all.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
            let want: Vec<u32> = all[..4].iter().map(|&(_, b)| b).collect();
            assert_eq!(shard.buckets(), &want[..]);
        }
    }

    #[test]
    fn only_keeps_the_own_buckets_named_in_their_order_without_spill() {
        let a = Assignment::new(16, 4, b"").unwrap().with_spill(2).unwrap();
        let shard = a.shard(b"tenant");
        let own = shard.buckets();
        let only = shard.only(0b1010).unwrap();
        assert_eq!(only.buckets(), &[own[1], own[3]]);
        assert!(only.spill().is_empty());
        assert_eq!(shard.only(0b1111).unwrap().buckets(), own);
        assert!(shard.only(0).is_none());
    }

    #[test]
    fn scores_match_the_worked_example_of_the_specification() {
        // docs/assignment.md, "Worked example": tenant-0 under example-salt.
        let seed = 0x4433_efaf_c1ce_150c;
        assert_eq!(
            Assignment::new(5, 2, b"example-salt")
                .unwrap()
                .seed(b"tenant-0"),
            seed
        );
        let want: [u64; 5] = [
            0xfd54_215b_f3f1_2e91,
            0x71e1_5126_a816_3610,
            0xe30e_c87a_dc93_1941,
            0x5197_9f48_6e10_0318,
            0xfc93_42d4_35f3_2932,
        ];
        for (bucket, &score_of) in (0..).zip(&want) {
            assert_eq!(score(seed, bucket), score_of, "bucket {bucket}");
        }
    }

    #[test]
    fn shards_compare_as_sets_and_count_what_they_share() {
        let shard = |buckets: &[u32]| {
            let mut s = Shard {
                len: buckets.len() as u32,
                spill: 0,
                buckets: [0; MAX_PER_TENANT as usize],
            };
            s.buckets[..buckets.len()].copy_from_slice(buckets);
            s
        };
        let (a, b) = (shard(&[3, 1, 4]), shard(&[4, 3, 1]));
        assert!(a.same_set(&b) && a != b);
        assert_eq!(a.overlap(&shard(&[1, 5, 4])), 2);
        assert!(!a.same_set(&shard(&[3, 1, 5])));
        // A shorter shard inside a longer one is not the same set, either way.
        assert!(!shard(&[3, 1]).same_set(&a));
        assert!(!a.same_set(&shard(&[3, 1])));
        assert!(a.contains(4) && !a.contains(0));
        assert_eq!(format!("{a:?}"), "Shard([3, 1, 4])");
    }
}
