//! The draw's rules as examples, and its straight-line and general paths
//! held to each other and to the rule written out plainly.

use super::{Outcome, Pace, Single};

pub(super) const PACE: Pace = Pace::every(10);

/// The draw over slices, as the tests write it.
fn draw(pace: Pace, bursts: &[u32], tats: &[u64], now: u64, n: u32, start: usize) -> Outcome {
    super::draw(
        pace,
        super::ShardShape::own(tats.len()),
        |j| bursts[j],
        |j| tats[j],
        now,
        n,
        || start,
    )
}

fn grant_tat(outcome: Outcome) -> u64 {
    match outcome {
        Outcome::Grant(Single { tat, .. }) => tat,
        _ => panic!("not one bucket's grant: {outcome:?}"),
    }
}

#[test]
fn a_fresh_bucket_grants_its_burst_then_refills_one_token_per_interval() {
    let mut tat = 0;
    for _ in 0..3 {
        tat = grant_tat(draw(PACE, &[3], &[tat], 0, 1, 0));
    }
    assert_eq!(tat, 30);
    assert_eq!(
        draw(PACE, &[3], &[tat], 0, 1, 0),
        Outcome::Deny { index: 0, at: 10 }
    );
    assert_eq!(
        draw(PACE, &[3], &[tat], 9, 1, 0),
        Outcome::Deny { index: 0, at: 10 }
    );
    assert_eq!(
        draw(PACE, &[3], &[tat], 10, 1, 0),
        Outcome::Grant(Single {
            index: 0,
            seen: 30,
            tat: 40,
            remaining: 0,
            full_in: 30
        })
    );
}

#[test]
fn an_earlier_reading_of_the_clock_only_shrinks_the_room() {
    let tat = grant_tat(draw(PACE, &[3], &[0], 100, 3, 0));
    assert_eq!(tat, 130);
    assert_eq!(
        draw(PACE, &[3], &[tat], 105, 1, 0),
        Outcome::Deny { index: 0, at: 110 }
    );
    assert!(Pace::room(30, tat, 50) < Pace::room(30, tat, 110));
}

#[test]
fn the_roomiest_bucket_pays_and_ties_go_to_the_first_visited() {
    // Rooms at now = 100: 10, 30, 30 (capacities 30, 30, 30).
    let tats = [120, 0, 50];
    let index = |start| match draw(PACE, &[3, 3, 3], &tats, 100, 1, start) {
        Outcome::Grant(Single { index, .. }) => index,
        denied => panic!("{denied:?}"),
    };
    assert_eq!(index(0), 1);
    assert_eq!(index(1), 1);
    assert_eq!(index(2), 2);
    match draw(PACE, &[3, 3, 3], &tats, 100, 1, 0) {
        Outcome::Grant(Single {
            tat,
            remaining,
            full_in,
            ..
        }) => assert_eq!((tat, remaining, full_in), (110, 1 + 3 + 3 - 1, 20)),
        denied => panic!("{denied:?}"),
    }
}

#[test]
fn a_denial_prefers_the_sooner_bucket_wherever_the_pass_starts() {
    // Rooms at now = 100: 0 and 5; a token costs 10. Bucket 1 can pay
    // at 105, bucket 0 only at 115, even when bucket 0 is visited last.
    // (Several tokens: see pool.rs.)
    for start in 0..2 {
        assert_eq!(
            draw(PACE, &[3, 3], &[135, 125], 100, 1, start),
            Outcome::Deny { index: 1, at: 105 },
            "start {start}"
        );
    }
}

#[test]
fn every_bucket_is_visited_once_from_any_start() {
    // Rooms 10, 20, 30, 0: the third pays whatever the start, and the
    // remaining tokens count every bucket once.
    for start in 0..4 {
        assert_eq!(
            draw(PACE, &[3; 4], &[120, 110, 100, 130], 100, 1, start),
            Outcome::Grant(Single {
                index: 2,
                seen: 100,
                tat: 110,
                remaining: 1 + 2 + 3 - 1,
                full_in: 30
            }),
            "start {start}"
        );
    }
}

#[test]
fn a_request_of_zero_tokens_moves_nothing_even_after_a_clock_jump_back() {
    // tat far beyond now + capacity: the clock went backwards.
    let outcome = draw(PACE, &[3, 3], &[500, 0], 10, 0, 0);
    assert_eq!(
        outcome,
        Outcome::Grant(Single {
            index: 1,
            seen: 0,
            tat: 0,
            remaining: 3,
            full_in: 490
        })
    );
    assert_eq!(
        draw(PACE, &[3], &[500], 10, 0, 0),
        Outcome::Grant(Single {
            index: 0,
            seen: 500,
            tat: 500,
            remaining: 0,
            full_in: 490
        })
    );
}

#[test]
fn a_cost_larger_than_every_capacity_together_is_never_granted() {
    assert_eq!(
        draw(PACE, &[3, 2], &[0, 0], u64::MAX / 2, 6, 1),
        Outcome::Deny {
            index: 0,
            at: u64::MAX
        }
    );
    assert!(matches!(
        draw(PACE, &[3], &[0], 0, 3, 0),
        Outcome::Grant(Single { tat: 30, .. })
    ));
}

#[test]
fn read_again_with_room_in_every_own_bucket_a_single_token_is_paid_not_denied() {
    // The rest of the draw, as a store calls it after the common case found
    // no own bucket with room for one token, and read the buckets again:
    // meanwhile other requests gave tokens back, and now every own bucket
    // has room (30, 25 and 20 at now = 100). The roomiest pays; a denial
    // here would name a time before now.
    let rest = |shape: super::ShardShape, tats: [u64; 4]| {
        super::rest(PACE, shape, |_| 3, |j| tats[j], 100, 1, || 0)
    };
    let own = super::ShardShape::own(3);
    let lending = super::ShardShape {
        own: 3,
        spill: 1,
        reserve: 0,
    };
    for shape in [own, lending] {
        match rest(shape, [100, 105, 110, 0]) {
            Outcome::Pooled(pool) => {
                let paid: Vec<_> = pool.payments().collect();
                assert_eq!(paid, [(0, 100, 110, 1)], "{shape:?}");
                assert_eq!((pool.remaining, pool.full_in), (3 + 2 + 2 - 1, 10));
            }
            other => panic!("{shape:?}: {other:?}"),
        }
    }
    // With one own bucket short of a token the rule is the same.
    assert!(matches!(rest(own, [100, 105, 125, 0]), Outcome::Pooled(_)));
    // None with room: denied, at the first time one has it.
    assert_eq!(
        rest(own, [125, 128, 130, 0]),
        Outcome::Deny { index: 0, at: 105 }
    );
}

proptest::proptest! {
    /// The straight-line path for two buckets decides as the general
    /// one: same winner, tie, denial and counts, on nearby times so that
    /// ties, empty and full buckets all come up.
    #[test]
    fn two_buckets_draw_as_any_number_do(
        bursts in proptest::array::uniform2(1..=4u32),
        tats in proptest::array::uniform2(0..=80u64),
        now in 0..=60u64,
        n in 0..=5u32,
        start in 0..2usize,
    ) {
        let ask = super::Ask { now, n: u64::from(n), cost: u64::from(n) * PACE.interval() };
        let (burst, tat) = (|j: usize| bursts[j], |j: usize| tats[j]);
        proptest::prop_assert_eq!(
            super::pair(PACE, burst, tat, ask, || start),
            super::any(PACE, 2, burst, tat, ask, || start)
        );
    }

    /// Any number of own buckets: the one-bucket grant is the roomiest
    /// that fits, the first of equal rooms at or after the start,
    /// wrapping (the rule as `draw` states it, written out here the
    /// plain way), and the draw grants by several or denies exactly
    /// when no bucket fits alone.
    #[test]
    fn the_roomiest_pays_from_the_start_for_any_number_of_buckets(
        shard in proptest::collection::vec((1..=4u32, 0..=80u64), 1..=super::MAX_K),
        now in 0..=60u64,
        n in 0..=5u32,
        start in 0..super::MAX_K,
    ) {
        let k = shard.len();
        let start = start % k;
        let (burst, tat) = (|j: usize| shard[j].0, |j: usize| shard[j].1);
        let cost = u64::from(n) * PACE.interval();
        let rooms: Vec<u64> = (0..k)
            .map(|j| Pace::room(PACE.capacity(burst(j)), tat(j), now))
            .collect();
        let most = *rooms.iter().max().unwrap();
        let expected = (most >= cost).then(|| {
            (start..k).chain(0..start).find(|&j| rooms[j] == most).unwrap()
        });
        let single = super::single(PACE, k, burst, tat, now, n, || start);
        proptest::prop_assert_eq!(single.ok().map(|s| s.index), expected);
        let outcome = super::draw(PACE, super::ShardShape::own(k), burst, tat, now, n, || start);
        match single {
            Ok(single) => proptest::prop_assert_eq!(outcome, Outcome::Grant(single)),
            // One token short: the denial the whole rule gives, from
            // the one pass.
            Err(super::NoSingle::Deny { index, at }) => {
                proptest::prop_assert_eq!(n, 1);
                proptest::prop_assert_eq!(outcome, Outcome::Deny { index, at });
            }
            Err(super::NoSingle::Several) => {
                proptest::prop_assert!(n > 1 && !matches!(outcome, Outcome::Grant(_)));
            }
        }
    }
}

#[test]
fn the_start_is_asked_for_only_when_equally_roomy_buckets_tie() {
    // A unique roomiest bucket pays without a random start being drawn,
    // wherever it sits; a tie asks for one, once. Rooms at now = 100 are
    // 30 at `at` and less elsewhere, for the straight-line path (k = 2)
    // and the general one (k = 3, 4).
    let asked = std::cell::Cell::new(0);
    let start = || {
        asked.set(asked.get() + 1);
        0
    };
    for k in 2..=4 {
        for at in 0..k {
            let tats: Vec<u64> = (0..k).map(|j| if j == at { 0 } else { 110 }).collect();
            let outcome = super::draw(
                PACE,
                super::ShardShape::own(k),
                |_| 3,
                |j| tats[j],
                100,
                1,
                start,
            );
            assert!(
                matches!(outcome, Outcome::Grant(Single { index, .. }) if index == at),
                "k {k}, roomiest {at}: {outcome:?}"
            );
            assert_eq!(
                asked.get(),
                0,
                "k {k}, roomiest {at}: the start was asked for"
            );
        }
        let outcome = super::draw(PACE, super::ShardShape::own(k), |_| 3, |_| 0, 100, 1, start);
        assert!(matches!(outcome, Outcome::Grant(Single { index: 0, .. })));
        assert_eq!(asked.replace(0), 1, "k {k}, all tied");
    }
}

#[test]
fn a_give_back_during_a_hold_off_stops_where_the_hold_off_left_the_bucket() {
    use super::{hold, refund, unheld};
    // A bucket of 3 tokens, 10 apart: capacity 30. Held until 100, at 95,
    // it was left at 100 + 30 − 10 = 120: one token at 100.
    let (capacity, interval, now, held) = (30, 10, 95, 100);
    let tat = hold(95, held, capacity, interval);
    assert_eq!(tat, 120);
    // A refund of 20 would bring it to 100: two tokens before the instant.
    assert_eq!(refund(tat, 20, capacity, now), 100);
    assert_eq!(unheld(tat, 100, held, capacity, interval, now), 120);
    // Beyond the hold-off's mark, a give-back goes as it would.
    assert_eq!(unheld(150, 130, held, capacity, interval, now), 130);
    // Below the mark already (a live change since): never moved on.
    assert_eq!(unheld(110, 105, held, capacity, interval, now), 110);
    // At the instant and after it, the hold-off is over.
    assert_eq!(unheld(tat, 100, held, capacity, interval, 100), 100);
    assert_eq!(unheld(tat, 101, held, capacity, interval, 101), 101);
    // Never held: as it would.
    assert_eq!(unheld(tat, 96, 0, capacity, interval, now), 96);
}
