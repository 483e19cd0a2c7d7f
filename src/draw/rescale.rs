//! What a bucket becomes when its quota or the number of buckets changes,
//! and when tokens are given back: more pure steps on one arrival time,
//! which every store applies as it applies [`draw`](super::draw).

use super::Pace;

/// A change of one bucket's arrival time `tat` from one pace and burst to
/// another at `now`: [`rescale`] or [`resize`].
pub(crate) type Step = fn(from: (Pace, u32), to: (Pace, u32), tat: u64, now: u64) -> u64;

/// One bucket's arrival time after a change of quota at `now`: the bucket
/// keeps the share of its capacity it had as room, rounded down to a whole
/// unit of time, so it holds `⌊f · burst⌋` tokens of its new burst where it
/// held a fraction `f` of the old one — never more.
///
/// A full bucket stays full, an empty one stays empty. A bucket owing more
/// than its capacity (bookings made for later, see `book` of the
/// stores, or a clock that went back) keeps what it owes beyond its
/// capacity, in time: it stays empty until the last of them is due, and
/// refills at its new pace from there.
pub(crate) fn rescale(from: (Pace, u32), to: (Pace, u32), tat: u64, now: u64) -> u64 {
    // room ≤ old, so the product fits in 128 bits and the quotient in new.
    moved(from, to, tat, now, |room, old, new| {
        (u128::from(room) * u128::from(new) / u128::from(old)) as u64
    })
}

/// A bucket's arrival time when N changes at `now`, for a bucket that
/// stays: it keeps the tokens it held, counted at its new pace and rounded
/// down, but no more than its new burst. Unlike [`rescale`], which keeps a
/// share of the burst, a change of N splits the same budget over more or
/// fewer buckets, and a bucket that stays must not be given the tokens of
/// buckets that go. A bucket owing more than its capacity keeps what it owes
/// beyond it, in time, as [`rescale`] does.
///
/// A bucket that is added starts empty, at `now + capacity`: its share of
/// the burst was in the buckets that were already there.
pub(crate) fn resize(from: (Pace, u32), to: (Pace, u32), tat: u64, now: u64) -> u64 {
    // Whole and partial tokens alike: room / old interval, in new units.
    let (old_interval, new_interval) = (from.0.interval(), to.0.interval());
    moved(from, to, tat, now, |room, _, new| {
        let held = u128::from(room) * u128::from(new_interval) / u128::from(old_interval);
        held.min(u128::from(new)) as u64
    })
}

/// The arrival time of a bucket added at `now` by a change of N, of
/// `capacity`: empty, and no fuller than the fullest bucket that stays, whose
/// arrival time less its capacity after the change is `fullest` (the
/// lowest over them; some always stays, since N is never 0). At a clock reading behind the last draw (a clock set
/// back), `now + capacity` alone would leave it full by the time the clock
/// comes back, where the buckets that stay were drawn empty.
pub(crate) fn added(fullest: u64, capacity: u64, now: u64) -> u64 {
    now.max(fullest).saturating_add(capacity)
}

/// The move both changes share (`kept` in rescale.lua): a bucket owing more
/// than its old capacity `old` keeps what it owes beyond it, in time; any
/// other keeps `kept(room, old, new)` of its room, at most its new capacity
/// `new`.
#[inline]
fn moved(
    from: (Pace, u32),
    to: (Pace, u32),
    tat: u64,
    now: u64,
    kept: impl FnOnce(u64, u64, u64) -> u64,
) -> u64 {
    let (old, new) = (from.0.capacity(from.1), to.0.capacity(to.1));
    if tat - now.min(tat) > old {
        // A debt settled past empty near the latest reading may reach the
        // end of time: it stays there.
        return (tat - old).saturating_add(new);
    }
    now + (new - kept(Pace::room(old, tat, now), old, new))
}

/// One bucket's arrival time after `cost` units of credit are given back at
/// `now`: moved back by the cost, but never before `now`, so that the
/// bucket never holds more than its burst (a full bucket is left as it
/// is). A bucket owing more than its `capacity` has bookings waiting on
/// every unit of it: giving any back would let a new request take a slot
/// already promised, so it is left as it is too.
pub(crate) fn refund(tat: u64, cost: u64, capacity: u64, now: u64) -> u64 {
    if tat <= now || tat - now > capacity {
        return tat;
    }
    tat.saturating_sub(cost).max(now)
}

/// Where a give-back at `now` (a [`refund`], or a booking given back) that
/// would move a bucket's arrival time from `tat` to `back` leaves it while
/// a hold-off holds the bucket until `held` (0: never held): no earlier
/// than the hold-off left it ([`hold`]), so that no whole token comes
/// back before the instant; and never later than `tat`, so that it only
/// ever gives back.
pub(crate) fn unheld(
    tat: u64,
    back: u64,
    held: u64,
    capacity: u64,
    interval: u64,
    now: u64,
) -> u64 {
    if held <= now {
        return back;
    }
    back.max(hold(0, held, capacity, interval).min(tat))
}

/// A booking given back at `now` when its waiter gives up: the bucket
/// that paid `cost` and was left at `written` goes back to `written − cost`
/// (or full, at `now`) if no one drew on it since, and is left as it is
/// otherwise (the requests behind keep their slots; the budget loses the
/// tokens, never gains them).
pub(crate) fn give_back(tat: u64, written: u64, cost: u64, now: u64) -> u64 {
    if tat == written {
        (written - cost).max(now)
    } else {
        tat
    }
}

/// How long after a hold-off's instant the held bucket `i` comes back,
/// when the held buckets come back `stagger` apart: `stagger · i`, or the
/// hold-off's `length` if that is sooner. So no bucket is held longer
/// than twice the longest hold-off from when it was held, whatever the
/// quota since (Redis trusts no instant later than that).
pub(crate) fn turn(stagger: u64, i: u64, length: u64) -> u64 {
    stagger.saturating_mul(i).min(length)
}

/// One bucket's arrival time held off until `until` (the upstream said
/// stop until then): late enough that no request finds a whole token
/// before `until`, with one token at `until` and the bucket's pace after
/// it, or as it is when already later. Only ever moves the arrival time
/// on, so a hold-off takes tokens and never adds one. (`until` is at most a
/// clock reading plus a bounded hold-off, and `interval ≤ capacity ≤`
/// 2^62: no overflow.)
pub(crate) fn hold(tat: u64, until: u64, capacity: u64, interval: u64) -> u64 {
    tat.max(until + capacity - interval)
}

/// One bucket's arrival time after up to `tokens` more are charged at `now`
/// (a cost settled above what was granted), with how many it took: each
/// token moves the arrival time on by `interval` from `max(tat, now)`, but
/// never past `now + 2 · capacity` — a debt of at most one burst beyond
/// empty. A bucket deeper in debt already (or holding bookings that far)
/// takes nothing. Only ever takes tokens.
pub(crate) fn charge(tat: u64, tokens: u32, interval: u64, capacity: u64, now: u64) -> (u64, u32) {
    let from = tat.max(now);
    let limit = now.saturating_add(capacity.saturating_mul(2));
    let room = limit.saturating_sub(from) / interval;
    let taken = u64::from(tokens).min(room);
    (from + taken * interval, taken as u32)
}

#[cfg(test)]
mod tests {
    use super::{Pace, added, charge, give_back, hold, refund, rescale, resize, turn};

    #[test]
    fn an_added_bucket_is_empty_and_no_fuller_than_the_fullest_that_stays() {
        // The fullest that stays is full (or was full before `now`): empty at now.
        assert_eq!(added(500, 100, 1_000), 1_100);
        assert_eq!(added(1_000, 100, 1_000), 1_100);
        // Every bucket that stays was drawn empty at 5 000 (a clock set
        // back to 1 000 since): empty at 5 000 too.
        assert_eq!(added(5_000, 100, 1_000), 5_100);
        // At the end of time it stays there.
        assert_eq!(added(u64::MAX - 10, 100, 1_000), u64::MAX);
    }

    #[test]
    fn a_debt_near_the_end_of_time_stays_there() {
        let (old, new) = ((Pace::every(1 << 61), 1), (Pace::every(1 << 62), 1));
        let tat = u64::MAX - 5;
        assert_eq!(rescale(old, new, tat, 1 << 62), u64::MAX);
        assert_eq!(resize(old, new, tat, 1 << 62), u64::MAX);
        // Below it, what is owed beyond the old capacity is kept exactly.
        let tat = 3 << 61;
        assert_eq!(rescale(old, new, tat, 0), tat - (1 << 61) + (1 << 62));
    }

    const TEN: Pace = Pace::every(10);
    const FOUR: Pace = Pace::every(4);

    fn tokens(pace: Pace, burst: u32, tat: u64, now: u64) -> u64 {
        pace.tokens(Pace::room(pace.capacity(burst), tat, now))
    }

    #[test]
    fn full_and_empty_buckets_stay_so_under_any_quota() {
        // 3 tokens of 10 units to 5 tokens of 4, at now = 100.
        assert_eq!(rescale((TEN, 3), (FOUR, 5), 0, 100), 100);
        assert_eq!(rescale((TEN, 3), (FOUR, 5), 130, 100), 120);
        // Owing more than the capacity (bookings, or a clock that went
        // back): what is owed beyond stays owed, empty until then.
        assert_eq!(rescale((TEN, 3), (FOUR, 5), 500, 100), 490);
        assert_eq!(rescale((TEN, 3), (FOUR, 5), 131, 100), 121);
    }

    #[test]
    fn the_share_of_the_burst_is_kept_and_rounded_down() {
        // Room 20 of 30 (2 tokens of 3) becomes 13 of 20 (3 tokens of 5,
        // since 2/3 of 5 is 3.33).
        let tat = rescale((TEN, 3), (FOUR, 5), 110, 100);
        assert_eq!(tat, 107);
        assert_eq!(tokens(FOUR, 5, tat, 100), 3);
        // One unit short of two tokens stays one token.
        let tat = rescale((TEN, 3), (TEN, 3), 111, 100);
        assert_eq!((tat, tokens(TEN, 3, tat, 100)), (111, 1));
    }

    #[test]
    fn a_bucket_that_stays_keeps_its_tokens_up_to_its_new_burst() {
        // 2 tokens of 3 at 10 units each (room 20), to a burst of 5 at 4
        // units: still 2 tokens (room 8 of 20), not 2/3 of 5.
        let tat = resize((TEN, 3), (FOUR, 5), 110, 100);
        assert_eq!((tat, tokens(FOUR, 5, tat, 100)), (112, 2));
        // Full at 5 tokens of 4 units, to a burst of 3 at 10: full, no more.
        assert_eq!(resize((FOUR, 5), (TEN, 3), 100, 100), 100);
        // Part of a token is kept as part of one: 1.5 tokens stay 1.5.
        let tat = resize((TEN, 3), (FOUR, 5), 115, 100);
        assert_eq!(tat, 114);
        // Empty stays empty; owed beyond the capacity stays owed, in time.
        assert_eq!(resize((TEN, 3), (FOUR, 5), 130, 100), 120);
        assert_eq!(resize((TEN, 3), (FOUR, 5), 500, 100), 490);
    }

    #[test]
    fn a_refund_moves_the_arrival_time_back_but_never_past_now() {
        assert_eq!(refund(130, 10, 30, 100), 120);
        assert_eq!(refund(105, 10, 30, 100), 100);
        // A full bucket gets nothing more; a time far behind stays put.
        assert_eq!(refund(90, 10, 30, 100), 90);
        assert_eq!(refund(0, 10, 30, 100), 0);
        // Bookings wait on every unit beyond the capacity: nothing back.
        assert_eq!(refund(131, 10, 30, 100), 131);
    }

    #[test]
    fn a_reservation_is_given_back_only_when_nothing_drew_after_it() {
        assert_eq!(give_back(140, 140, 10, 100), 130);
        assert_eq!(give_back(140, 140, 10, 135), 135);
        assert_eq!(give_back(150, 140, 10, 100), 150);
    }

    proptest::proptest! {
        /// Whatever the quotas, the tokens kept are the old share of the
        /// new burst rounded down, and the bucket never owes more than its
        /// new capacity.
        #[test]
        fn a_rescaled_bucket_never_holds_more_than_its_share(
            old in (1..=1_000u64, 1..=50u32),
            new in (1..=1_000u64, 1..=50u32),
            tat in 0..=200_000u64,
            now in 0..=100_000u64,
        ) {
            let (from, to) = ((Pace::every(old.0), old.1), (Pace::every(new.0), new.1));
            let after = rescale(from, to, tat, now);
            let capacity = to.0.capacity(to.1);
            proptest::prop_assert!(after >= now);
            let old_capacity = from.0.capacity(from.1);
            if tat > now + old_capacity {
                // Owed beyond the capacity: still owed, empty until then.
                proptest::prop_assert_eq!(after - capacity, tat - old_capacity);
                return Ok(());
            }
            proptest::prop_assert!(after - now <= capacity);
            let room = Pace::room(from.0.capacity(from.1), tat, now);
            let share = u128::from(room) * u128::from(capacity);
            let kept = u128::from(Pace::room(capacity, after, now)) * u128::from(from.0.capacity(from.1));
            // kept / capacity ≤ room / old, and less than one unit below it.
            proptest::prop_assert!(kept <= share);
            proptest::prop_assert!(share - kept < u128::from(from.0.capacity(from.1)));
        }

        /// Whatever the paces, a bucket that stays never holds more tokens
        /// than before nor more than its new burst, and loses less than one
        /// unit of time of credit to rounding when it is not capped.
        #[test]
        fn a_resized_bucket_never_gains_tokens(
            old in (1..=1_000u64, 1..=50u32),
            new in (1..=1_000u64, 1..=50u32),
            tat in 0..=200_000u64,
            now in 0..=100_000u64,
        ) {
            let (from, to) = ((Pace::every(old.0), old.1), (Pace::every(new.0), new.1));
            let after = resize(from, to, tat, now);
            let (old_capacity, capacity) = (from.0.capacity(from.1), to.0.capacity(to.1));
            proptest::prop_assert!(after >= now);
            if tat > now + old_capacity {
                proptest::prop_assert_eq!(after - capacity, tat - old_capacity);
                return Ok(());
            }
            let room = Pace::room(old_capacity, tat, now);
            let kept = Pace::room(capacity, after, now);
            // kept / new interval ≤ room / old interval: never more tokens.
            let (held, had) = (u128::from(kept) * u128::from(old.0), u128::from(room) * u128::from(new.0));
            proptest::prop_assert!(held <= had);
            proptest::prop_assert!(kept <= capacity);
            if kept < capacity {
                proptest::prop_assert!(had - held < u128::from(old.0));
            }
        }

        /// A refund never leaves more room than the capacity, nor less than
        /// there was.
        #[test]
        fn a_refund_only_adds_room_up_to_full(
            burst in 1..=50u32, tat in 0..=2_000u64, now in 0..=1_000u64, tokens in 0..=60u64,
        ) {
            let capacity = TEN.capacity(burst);
            let after = refund(tat, tokens * 10, capacity, now);
            let (before, room) = (Pace::room(capacity, tat, now), Pace::room(capacity, after, now));
            proptest::prop_assert!(room >= before && room <= capacity);
            proptest::prop_assert!(room - before <= tokens * 10);
            // Nothing comes back while bookings wait beyond the capacity.
            proptest::prop_assert!(tat <= now + capacity || after == tat);
        }
    }

    #[test]
    fn a_held_bucket_has_no_whole_token_before_the_instant_and_one_at_it() {
        // 3 tokens of 10 ns, full at 100; held until 150.
        let (capacity, until) = (30, 150);
        let held = hold(100, until, capacity, 10);
        assert_eq!(held, 170);
        for now in 100..until {
            assert_eq!(TEN.tokens(Pace::room(capacity, held, now)), 0, "{now}");
        }
        assert_eq!(TEN.tokens(Pace::room(capacity, held, until)), 1);
        assert_eq!(TEN.tokens(Pace::room(capacity, held, until + 20)), 3);
        // A bucket already owing past that stays as it is: never a token more.
        assert_eq!(hold(500, until, capacity, 10), 500);
    }

    #[test]
    fn held_buckets_come_back_a_stagger_apart_and_within_the_hold_offs_length_again() {
        assert_eq!(
            [0, 1, 2, 3].map(|i| turn(250, i, 1_000)),
            [0, 250, 500, 750]
        );
        // An interval longer than the hold-off: the later turns wait no
        // longer than the hold-off did.
        assert_eq!(
            [0, 1, 2, 3].map(|i| turn(400, i, 1_000)),
            [0, 400, 800, 1_000]
        );
        assert_eq!(turn(u64::MAX, 7, 1_000), 1_000);
    }

    #[test]
    fn a_charge_takes_tokens_down_to_one_burst_of_debt_and_no_further() {
        // 3 tokens of 10 ns (capacity 30), at now = 100.
        assert_eq!(charge(90, 2, 10, 30, 100), (120, 2), "full: from now");
        assert_eq!(charge(130, 2, 10, 30, 100), (150, 2), "empty: into debt");
        assert_eq!(
            charge(130, 9, 10, 30, 100),
            (160, 3),
            "at most a burst of debt"
        );
        assert_eq!(charge(165, 1, 10, 30, 100), (165, 0), "deeper already");
        assert_eq!(charge(u64::MAX, 1, 10, 30, 100), (u64::MAX, 0), "sealed");
        assert_eq!(charge(0, 0, 10, 30, 100), (100, 0));
        // Never an overflow at the latest clock and the largest capacity.
        let (now, capacity) = (u64::MAX - (1 << 62), 1 << 62);
        assert_eq!(charge(now, 1, capacity, capacity, now), (now + capacity, 1));
    }
}
