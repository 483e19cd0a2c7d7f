//! A user's subset: j of its tenant's k buckets, a rendezvous over the
//! tenant's shard keyed by the salt, the tenant and the user
//! (docs/assignment.md, "a user's subset").

use sha2::{Digest, Sha256};

use super::{Assignment, MAX_PER_TENANT, Shard, score};

/// Domain separation for the user's seed; part of the specification.
const USER_DOMAIN: &[u8] = b"shuffle-limiter/user/v1";

/// SHA-256 with the user domain, the salt's length and the salt absorbed.
pub(super) fn user_prefix(salt: &[u8]) -> Sha256 {
    let mut prefix = Sha256::new();
    prefix.update(USER_DOMAIN);
    prefix.update((salt.len() as u64).to_be_bytes());
    prefix.update(salt);
    prefix
}

/// # Users of a tenant
impl Assignment {
    /// The user's 64-bit seed: the first 8 bytes, big-endian, of
    /// SHA-256(user domain ‖ salt length ‖ salt ‖ tenant length ‖ tenant ‖
    /// user).
    pub fn user_seed(&self, tenant: impl AsRef<[u8]>, user: impl AsRef<[u8]>) -> u64 {
        let tenant = tenant.as_ref();
        let mut h = self.user_prefix.clone();
        h.update((tenant.len() as u64).to_be_bytes());
        h.update(tenant);
        h.update(user.as_ref());
        let digest = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first)
    }

    /// The `per_user` of the tenant's buckets that `user` draws from, in
    /// the user's order, with the tenant's spill set after them; `None`
    /// unless `1 <= per_user <= k`.
    ///
    /// ```
    /// use shuffle_limiter::Assignment;
    ///
    /// // docs/assignment.md, "a user's subset", worked example.
    /// let a = Assignment::new(8, 4, b"example-salt").unwrap();
    /// assert_eq!(a.shard("tenant-0").buckets(), [0, 4, 2, 1]);
    /// let subset = a.user_subset("tenant-0", "user-7", 2).unwrap();
    /// assert_eq!(subset.buckets(), [1, 4]);
    /// assert!(a.user_subset("tenant-0", "user-7", 5).is_none());
    /// ```
    pub fn user_subset(
        &self,
        tenant: impl AsRef<[u8]>,
        user: impl AsRef<[u8]>,
        per_user: u32,
    ) -> Option<Shard> {
        let tenant = tenant.as_ref();
        (1..=self.per_tenant).contains(&per_user).then(|| {
            self.shard(tenant)
                .subset(self.user_seed(tenant, user), per_user)
        })
    }
}

impl Shard {
    /// The `per_user` own buckets with the highest scores under
    /// `user_seed`, highest first, followed by this shard's spill buckets.
    /// `per_user` is at least 1 and at most the shard's own count.
    pub(crate) fn subset(&self, user_seed: u64, per_user: u32) -> Shard {
        let own = self.buckets();
        let mut ranked = [(0u64, 0u32); MAX_PER_TENANT as usize];
        for (slot, &b) in ranked.iter_mut().zip(own) {
            *slot = (score(user_seed, b), b);
        }
        let ranked = &mut ranked[..own.len()];
        // Highest score first; equal scores (which cannot occur) to the
        // smaller index.
        ranked.sort_unstable_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
        let j = (per_user as usize).min(own.len());
        let mut subset = Shard {
            len: j as u32,
            spill: self.spill,
            buckets: [0; MAX_PER_TENANT as usize],
        };
        for (slot, &(_, b)) in subset.buckets.iter_mut().zip(&ranked[..j]) {
            *slot = b;
        }
        let spill = self.spill();
        subset.buckets[j..j + spill.len()].copy_from_slice(spill);
        subset
    }
}

#[cfg(test)]
mod tests {
    use super::super::score;
    use crate::Assignment;

    #[test]
    fn the_worked_example_of_the_specification_holds_line_by_line() {
        let a = Assignment::new(8, 4, b"example-salt").unwrap();
        let seed = a.user_seed(b"tenant-0", b"user-7");
        assert_eq!(seed, 0xac20_27b1_a05b_04f1);
        for (b, want) in [
            (0, 0x3cb3_d5e8_81c6_162f),
            (4, 0x8e8b_1e68_35a2_6183),
            (2, 0x77d6_a4f5_3bd8_4093),
            (1, 0xce23_e685_381a_3320),
        ] {
            assert_eq!(score(seed, b), want, "bucket {b}");
        }
        let subset = a.user_subset(b"tenant-0", b"user-7", 2).unwrap();
        assert_eq!(subset.buckets(), [1, 4]);
    }

    #[test]
    fn a_subset_is_nested_in_j_keeps_the_spill_set_and_is_inside_the_shard() {
        let a = Assignment::new(64, 6, b"s").unwrap().with_spill(2).unwrap();
        for t in 0..50u32 {
            let tenant = t.to_le_bytes();
            let shard = a.shard(tenant);
            let whole = a.user_subset(tenant, b"u", 6).unwrap();
            assert!(whole.same_set(&shard));
            for j in 1..=6 {
                let subset = a.user_subset(tenant, b"u", j).unwrap();
                assert_eq!(subset.buckets(), &whole.buckets()[..j as usize]);
                assert_eq!(subset.spill(), shard.spill());
            }
        }
        assert!(a.user_subset(b"t", b"u", 0).is_none());
    }
}
