//! Where a limiter's buckets live in Redis: all in one Cluster slot, or each
//! in a slot of its own.

/// How a [`RedisLimiter`](super::RedisLimiter)'s N bucket keys are laid out
/// over the slots of a Redis Cluster
/// ([`RedisOptions::layout`](super::RedisOptions::layout)).
///
/// Every process that shares a limiter must use the same layout: the two
/// name their keys differently, so a process with the other layout draws
/// from other buckets, a second budget.
///
/// ```
/// use shuffle_limiter::redis::{FailurePolicy, Layout, RedisOptions};
///
/// let options = RedisOptions::new(FailurePolicy::FailClosed).layout(Layout::Spread);
/// assert_eq!(Layout::default(), Layout::OneSlot);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Layout {
    /// Bucket i is `{name}:b<i>`: one hash tag, so every bucket lives in one
    /// slot, on one node, and a decision is one round trip of one script
    /// over the tenant's k buckets, atomically. A weighted request may be
    /// paid by several buckets together. The default, and the choice for a
    /// single Redis: but in a Cluster, that one node carries every decision
    /// and its failure stops every tenant.
    #[default]
    OneSlot,
    /// Bucket i is `{name:b<i>}`: a hash tag per bucket, so the buckets
    /// spread over the slots, and the nodes, of a Redis Cluster, and a failed
    /// node touches only the tenants whose shards hold one of its buckets.
    ///
    /// A decision takes from one bucket at a time, with the same script over
    /// that one key: the bucket this process last saw with the most room
    /// first, the next on a denial. So a grant is one atomic step on one
    /// bucket, and the budget holds exactly as in [`OneSlot`](Self::OneSlot);
    /// a denial costs up to k round trips (fewer once the process knows
    /// which buckets are short). Weights one bucket cannot hold are refused
    /// ([`DenialReason::NeverFits`](crate::DenialReason::NeverFits)), since buckets
    /// on different nodes cannot pay one request together atomically, and
    /// borrowing is refused at build
    /// ([`BuildError::SpreadBorrowing`](super::BuildError::SpreadBorrowing)).
    Spread,
}

impl Layout {
    /// The key of bucket `bucket` of the limiter `name`, after `prefix`
    /// (outside the hash tag, so that it moves no key to another slot).
    pub(super) fn key(self, prefix: &str, name: &str, bucket: u32) -> String {
        match self {
            Layout::OneSlot => format!("{prefix}{{{name}}}:b{bucket}"),
            Layout::Spread => format!("{prefix}{{{name}:b{bucket}}}"),
        }
    }

    /// The quota keys of the limiter `name` of `buckets` buckets, in the
    /// slots of its buckets: one beside them all in one slot, one beside
    /// each bucket when spread (where a quota is not changed live yet, so
    /// those stay missing: the quota the limiter was built with).
    pub(super) fn quota_keys(self, prefix: &str, name: &str, buckets: u32) -> Box<[String]> {
        match self {
            Layout::OneSlot => Box::new([format!("{prefix}{{{name}}}:quota")]),
            Layout::Spread => (0..buckets)
                .map(|b| format!("{prefix}{{{name}:b{b}}}:quota"))
                .collect(),
        }
    }

    /// The key of the limiter's hold-offs (each bucket key, to the instant
    /// it is held until), beside its buckets: in the one-slot layout only.
    pub(super) fn held_key(self, prefix: &str, name: &str) -> Option<String> {
        match self {
            Layout::OneSlot => Some(format!("{prefix}{{{name}}}:held")),
            Layout::Spread => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Layout;

    #[test]
    fn one_slot_shares_the_name_as_hash_tag_and_spread_gives_each_bucket_its_own() {
        assert_eq!(Layout::OneSlot.key("", "api", 3), "{api}:b3");
        assert_eq!(Layout::Spread.key("", "api", 3), "{api:b3}");
        assert_eq!(*Layout::OneSlot.quota_keys("", "api", 4), ["{api}:quota"]);
        assert_eq!(
            Layout::OneSlot.held_key("p:", "api").unwrap(),
            "p:{api}:held"
        );
        assert_eq!(Layout::Spread.held_key("", "api"), None);
        assert_eq!(Layout::Spread.quota_keys("", "api", 4)[3], "{api:b3}:quota");
        // A prefix goes before the hash tag, which it leaves as it is.
        assert_eq!(
            Layout::OneSlot.key("billing:", "api", 3),
            "billing:{api}:b3"
        );
        assert_eq!(Layout::Spread.key("billing:", "api", 3), "billing:{api:b3}");
        assert_eq!(
            *Layout::OneSlot.quota_keys("b:", "api", 4),
            ["b:{api}:quota"]
        );
        assert_eq!(
            Layout::Spread.quota_keys("b:", "api", 4)[3],
            "b:{api:b3}:quota"
        );
    }
}
