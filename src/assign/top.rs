//! The selection step of the assignment: the k best of N scored buckets.
//!
//! The specification orders all N buckets by score, highest first, equal
//! scores going to the smaller index, and takes the first k. One pass that
//! keeps the k best so far gives the same list without sorting. Buckets are
//! visited in increasing index, so a bucket displaces one seen before only
//! with a strictly higher score: that comparison alone is the tie rule.
//!
//! The score is a parameter so that tests can force ties, which the real
//! score never produces; the real caller's closure is inlined, so this costs
//! nothing.

use super::{MAX_PER_TENANT, Shard};

const MAX: usize = MAX_PER_TENANT as usize;

/// The `k` buckets of `0..n` with the highest `score`, highest first, equal
/// scores to the smaller index. Needs `1 <= k <= min(n, MAX_PER_TENANT)`.
#[inline]
pub(super) fn top_k(n: u32, k: u32, score: impl Fn(u32) -> u64) -> Shard {
    debug_assert!((1..=n.min(MAX_PER_TENANT)).contains(&k));
    // k = 1 and 2 are by far the common shard sizes; each gets a loop that
    // keeps its best scores in registers. 3 and 4 get the sorted-array loop
    // with k known at compile time; larger k the same loop with k at run time.
    match k {
        1 => top_one(n, score),
        2 => top_two(n, score),
        3 => sorted(n, 3, score),
        4 => sorted(n, 4, score),
        _ => sorted(n, k as usize, score),
    }
}

fn top_one(n: u32, score: impl Fn(u32) -> u64) -> Shard {
    let (mut best, mut at) = (score(0), 0);
    for b in 1..n {
        let s = score(b);
        if s > best {
            (best, at) = (s, b);
        }
    }
    shard(&[at])
}

fn top_two(n: u32, score: impl Fn(u32) -> u64) -> Shard {
    let (s0, s1) = (score(0), score(1));
    let (mut first, mut second) = if s1 > s0 {
        ((s1, 1), (s0, 0))
    } else {
        ((s0, 0), (s1, 1))
    };
    for b in 2..n {
        let s = score(b);
        // Taken for about 2 of every b buckets, so it predicts well for
        // large N; the work it guards stays off the common path.
        if s > second.0 {
            if s > first.0 {
                (first, second) = ((s, b), first);
            } else {
                second = (s, b);
            }
        }
    }
    shard(&[first.1, second.1])
}

/// The k best in an array sorted best first. Always inlined, so that each
/// constant `k` of [`top_k`] gets a loop of its own.
#[inline(always)]
fn sorted(n: u32, k: usize, score: impl Fn(u32) -> u64) -> Shard {
    let mut scores = [0u64; MAX];
    let mut buckets = [0u32; MAX];
    // n >= k, so the first k buckets fill the array.
    for (filled, b) in (0..k).zip(0..) {
        insert(&mut scores, &mut buckets, filled, score(b), b);
    }
    for b in k as u32..n {
        let s = score(b);
        if s > scores[k - 1] {
            insert(&mut scores, &mut buckets, k - 1, s, b);
        }
    }
    shard(&buckets[..k])
}

/// Writes `(s, b)` at `last`, over whatever was there, and moves it up past
/// every strictly lower score: an equal score seen earlier stays ahead.
#[inline(always)]
fn insert(scores: &mut [u64; MAX], buckets: &mut [u32; MAX], last: usize, s: u64, b: u32) {
    let mut at = last;
    while at > 0 && scores[at - 1] < s {
        scores[at] = scores[at - 1];
        buckets[at] = buckets[at - 1];
        at -= 1;
    }
    scores[at] = s;
    buckets[at] = b;
}

fn shard(top: &[u32]) -> Shard {
    let mut buckets = [0; MAX];
    buckets[..top.len()].copy_from_slice(top);
    Shard {
        len: top.len() as u32,
        spill: 0,
        buckets,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::assign::{MAX_BUCKETS, score};

    /// The specification's definition: sort all N by (score descending,
    /// index ascending) and take k.
    fn full_sort(n: u32, k: u32, score: impl Fn(u32) -> u64) -> Vec<u32> {
        let mut all: Vec<(u64, u32)> = (0..n).map(|b| (score(b), b)).collect();
        all.sort_by(|x, y| y.0.cmp(&x.0).then(x.1.cmp(&y.1)));
        all[..k as usize].iter().map(|&(_, b)| b).collect()
    }

    /// What [`top_k`] selects, as a list to compare.
    fn select(n: u32, k: u32, score: impl Fn(u32) -> u64) -> Vec<u32> {
        top_k(n, k, score).buckets().to_vec()
    }

    /// A score with only `values` distinct values, so most buckets tie.
    fn tied(seed: u64, values: u64) -> impl Fn(u32) -> u64 {
        move |b| score(seed, b) % values
    }

    #[test]
    fn every_k_at_the_largest_n_as_the_full_sort() {
        for k in 1..=MAX_PER_TENANT {
            for seed in [0, 1, u64::MAX, 0x4433_efaf_c1ce_150c] {
                let real = |b| score(seed, b);
                assert_eq!(
                    select(MAX_BUCKETS, k, real),
                    full_sort(MAX_BUCKETS, k, real),
                    "k = {k}, seed = {seed:#x}"
                );
                let ties = tied(seed, 3);
                assert_eq!(
                    select(MAX_BUCKETS, k, &ties),
                    full_sort(MAX_BUCKETS, k, &ties),
                    "k = {k}, seed = {seed:#x}, three values"
                );
            }
        }
    }

    #[test]
    fn equal_scores_go_to_the_smaller_index() {
        for k in 1..=MAX_PER_TENANT {
            for n in k..=2 * MAX_PER_TENANT + 1 {
                let want: Vec<u32> = (0..k).collect();
                assert_eq!(select(n, k, |_| 7), want, "all equal, n = {n}");
                // The top value once, at the last bucket, then ties in order.
                let last = |b| u64::from(b == n - 1);
                let mut want = vec![n - 1];
                want.extend(0..k - 1);
                assert_eq!(select(n, k, last), want, "n = {n}, k = {k}");
            }
        }
    }

    fn n_and_k() -> impl Strategy<Value = (u32, u32)> {
        (1..=MAX_PER_TENANT).prop_flat_map(|k| {
            let n = prop_oneof![
                8 => k..=k + 40,
                4 => k..=4096,
                2 => k..=MAX_BUCKETS,
                1 => Just(MAX_BUCKETS),
            ];
            (n, Just(k))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn the_real_score_selects_as_the_full_sort((n, k) in n_and_k(), seed in any::<u64>()) {
            let real = |b| score(seed, b);
            prop_assert_eq!(select(n, k, real), full_sort(n, k, real));
        }

        #[test]
        fn forced_ties_select_as_the_full_sort(
            (n, k) in n_and_k(),
            seed in any::<u64>(),
            values in prop_oneof![1u64..=4, 5u64..=64],
        ) {
            let ties = tied(seed, values);
            prop_assert_eq!(select(n, k, &ties), full_sort(n, k, &ties));
        }
    }
}
