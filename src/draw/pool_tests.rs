//! The pooling of [`rest`](super::rest) where it meets spill buckets and a
//! second reading of the own buckets: the edges issue 25's mutants found
//! untested.

use super::tests::PACE;
use super::{Outcome, ShardShape, Single};

/// `k` own buckets then `spill` spill buckets with no reserve, all of
/// `burst` tokens.
fn shape(own: usize, spill: usize) -> ShardShape {
    ShardShape {
        own,
        spill,
        reserve: 0,
    }
}

#[test]
fn a_weighted_request_the_own_buckets_pay_together_is_pooled_though_a_spill_bucket_could_lend() {
    // Own rooms at now = 100: 20 and 10 (2 and 1 tokens of 3); the spill
    // bucket is full with 4 tokens. Three tokens: no own bucket alone, the
    // two together, and the spill bucket alone could all pay; pooling
    // comes first, and the spill bucket is left alone.
    let (bursts, tats) = ([3, 3, 4], [110, 120, 0]);
    let draw = |n| super::draw(PACE, shape(2, 1), |j| bursts[j], |j| tats[j], 100, n, || 0);
    match draw(3) {
        Outcome::Pooled(pool) => {
            let paid: Vec<_> = pool.payments().collect();
            assert_eq!(paid, [(0, 110, 130, 2), (1, 120, 130, 1)]);
            assert_eq!((pool.remaining, pool.full_in), (0, 30));
        }
        other => panic!("not pooled from the own buckets: {other:?}"),
    }
    // One token more than the own buckets hold: now the spill bucket
    // lends all four, and the own tokens stay where they are.
    assert_eq!(
        draw(4),
        Outcome::Grant(Single {
            index: 2,
            seen: 0,
            tat: 140,
            remaining: 3,
            full_in: 40
        })
    );
}

#[test]
fn read_again_with_exactly_one_token_in_every_own_bucket_it_is_paid_not_denied_at_now() {
    // The rest of the draw after the common case declined a single token,
    // with the buckets read again: each own bucket now has room for one
    // token exactly (room 10 of 30 at now = 100, so each would have room
    // "at 100"). The request is paid by the bucket the start names, not
    // denied with a retry time of now.
    let tats = [120, 120, 0];
    for (spill, start) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
        let outcome = super::rest(PACE, shape(2, spill), |_| 3, |j| tats[j], 100, 1, || start);
        match outcome {
            Outcome::Pooled(pool) => {
                let paid: Vec<_> = pool.payments().collect();
                assert_eq!(paid, [(start, 120, 130, 1)], "spill {spill}");
                assert_eq!((pool.remaining, pool.full_in), (1, 30));
            }
            other => panic!("spill {spill}, start {start}: {other:?}"),
        }
    }
    // One unit of time earlier in every bucket the token is short: denied,
    // at the first instant one has it, after now.
    let short = super::rest(PACE, shape(2, 0), |_| 3, |_| 121, 100, 1, || 0);
    assert_eq!(short, Outcome::Deny { index: 0, at: 101 });
}

/// How many times [`draw`](super::draw) asks for each position's arrival
/// time: buckets of 3 tokens at the arrival times `tats`, the last `spill`
/// of them spill buckets, asked for `n` tokens at now = 100.
fn reads(tats: &[u64], spill: usize, n: u32) -> (Outcome, Vec<u32>) {
    let counts: Vec<_> = tats.iter().map(|_| std::cell::Cell::new(0)).collect();
    let tat = |j: usize| {
        counts[j].set(counts[j].get() + 1);
        tats[j]
    };
    let shape = shape(tats.len() - spill, spill);
    let outcome = super::draw(PACE, shape, |_| 3, tat, 100, n, || 0);
    (outcome, counts.iter().map(std::cell::Cell::get).collect())
}

#[test]
fn each_bucket_is_read_again_only_where_the_rest_of_the_draw_needs_it() {
    // One bucket pays: one reading of each own bucket, none of the spill.
    let (outcome, counts) = reads(&[100, 110, 120, 0], 1, 1);
    assert!(matches!(outcome, Outcome::Grant(Single { index: 0, .. })));
    assert_eq!(counts, [1, 1, 1, 0]);
    // Every own bucket empty (room for a token at 110), nothing to lend
    // from: a single token is denied from the first reading.
    let empty = [130, 130, 130];
    let (outcome, counts) = reads(&empty, 0, 1);
    assert_eq!(outcome, Outcome::Deny { index: 0, at: 110 });
    assert_eq!(counts, [1, 1, 1]);
    // Two tokens may be paid together: one more reading, to pool; with no
    // spill bucket, none to borrow.
    let (outcome, counts) = reads(&empty, 0, 2);
    assert_eq!(outcome, Outcome::Deny { index: 0, at: 110 });
    assert_eq!(counts, [2, 2, 2]);
    // With a spill bucket (empty too) the own buckets are read once more,
    // to borrow, and the spill bucket once.
    let (outcome, counts) = reads(&[130, 130, 130, 130], 1, 2);
    assert_eq!(outcome, Outcome::Deny { index: 0, at: 110 });
    assert_eq!(counts, [3, 3, 3, 1]);
}
