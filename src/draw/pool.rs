//! Weighted requests across buckets: when no own bucket alone has room for a
//! request but the tenant's own buckets together hold its tokens, they pay
//! it together, all or nothing; when they do not, the denial says when they
//! will.
//!
//! Together, buckets pay in whole tokens: each pays at most the whole tokens
//! its room holds, so a bucket never lends a fraction of a token to another.
//! A request is therefore granted exactly when the own buckets' whole tokens
//! add up to it, whether one bucket or several pay.

use super::{Ask, MAX_K, Outcome, Pace, room_at};

/// A grant paid by several of the tenant's own buckets together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pool {
    /// How many buckets pay: the first `payers` entries of the arrays.
    pub(crate) payers: usize,
    /// Their shard positions, in the order they pay: the roomiest first.
    pub(crate) index: [u8; MAX_K],
    /// Their arrival times as read, for the store's compare-and-swap.
    pub(crate) seen: [u64; MAX_K],
    /// Their new arrival times.
    pub(crate) tat: [u64; MAX_K],
    /// The whole tokens each pays; they add up to the request.
    pub(crate) paid: [u32; MAX_K],
    /// Whole tokens left over the own buckets after the grant.
    pub(crate) remaining: u64,
    /// Units of time until every own bucket is full again.
    pub(crate) full_in: u64,
}

impl Pool {
    /// A grant no bucket pays yet, leaving `remaining` tokens and full in
    /// `full_in`; payers are added in the order they pay.
    pub(crate) fn new(remaining: u64, full_in: u64) -> Pool {
        Pool {
            payers: 0,
            index: [0; MAX_K],
            seen: [0; MAX_K],
            tat: [0; MAX_K],
            paid: [0; MAX_K],
            remaining,
            full_in,
        }
    }

    /// `(position, arrival time as read, new arrival time, tokens)` of each
    /// bucket that pays, in the order they pay.
    pub(crate) fn payments(&self) -> impl Iterator<Item = (usize, u64, u64, u32)> + '_ {
        (0..self.payers).map(|i| {
            (
                usize::from(self.index[i]),
                self.seen[i],
                self.tat[i],
                self.paid[i],
            )
        })
    }
}

/// Why [`single`](super::single) found no own bucket to pay alone, and
/// what follows from that one reading of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoSingle {
    /// A single token, which no pooling can pay ([`short`]): denied,
    /// unless a spill bucket lends it, naming the own bucket with room
    /// first, at `at`.
    Deny {
        /// Its position in the shard.
        index: usize,
        /// When it has room.
        at: u64,
    },
    /// Several tokens, which the own buckets may pay together.
    Several,
}

impl NoSingle {
    /// The outcome this reading already decides for a tenant with `spill`
    /// spill buckets: the denial of a single token when none could lend
    /// it; `None` where the rest of the draw must decide
    /// ([`rest`](super::rest)).
    #[inline(always)]
    pub(crate) fn decided(self, spill: usize) -> Option<Outcome> {
        match self {
            NoSingle::Deny { index, at } if spill == 0 => Some(Outcome::Deny { index, at }),
            _ => None,
        }
    }
}

/// [`NoSingle`] of a request that none of the `k` own buckets (`capacity` and
/// `tat` by position, as read) can pay alone.
#[inline(always)]
pub(super) fn declined(
    k: usize,
    capacity: impl Fn(usize) -> u64,
    tat: impl Fn(usize) -> u64,
    ask: Ask,
) -> NoSingle {
    if ask.n != 1 {
        return NoSingle::Several;
    }
    let (index, at, _) = alone(k, capacity, tat, ask);
    NoSingle::Deny { index, at }
}

/// The request when the roomiest of the `k` own buckets (`burst` and `tat`
/// as for the draw, asked once each) has too little room for it alone:
/// paid by several of them, or denied. (Inlined into [`rest`](super::rest):
/// called, its pace went through the stack; see there. Its pooling is out
/// of line, in [`together`].)
#[inline(always)]
pub(super) fn short(
    pace: Pace,
    k: usize,
    burst: impl Fn(usize) -> u32,
    tat: impl Fn(usize) -> u64,
    ask: Ask,
    start: impl FnOnce() -> usize,
) -> Outcome {
    // Whole tokens add up to a single token only where one bucket holds it
    // whole, and could pay alone: unless one has room by now (a store reads
    // the buckets again, and another request may have given some back), the
    // request is denied, naming the bucket with room first (`soonest` for
    // one token), in one pass and with no arrays.
    if ask.n == 1 {
        let capacity = |j| pace.capacity(burst(j));
        if let (index, at, false) = alone(k, capacity, &tat, ask) {
            return Outcome::Deny { index, at };
        }
    }
    together(pace, k, burst, tat, ask, start)
}

/// [`short`] beyond a single token: the own buckets' whole tokens, pooled
/// or denied. (Apart from `short`, so that a denial of one token does not
/// set up its arrays.)
#[inline(never)]
fn together(
    pace: Pace,
    k: usize,
    burst: impl Fn(usize) -> u32,
    tat: impl Fn(usize) -> u64,
    ask: Ask,
    start: impl FnOnce() -> usize,
) -> Outcome {
    let (mut capacities, mut read) = ([0; MAX_K], [0; MAX_K]);
    for j in 0..k {
        (capacities[j], read[j]) = (pace.capacity(burst(j)), tat(j));
    }
    let (capacities, tats) = (&capacities[..k], &read[..k]);
    let mut rooms = [0; MAX_K];
    let mut tokens = 0;
    for (j, (&capacity, &tat)) in capacities.iter().zip(tats).enumerate() {
        rooms[j] = Pace::room(capacity, tat, ask.now);
        tokens += pace.tokens(rooms[j]);
    }
    if tokens < ask.n {
        let (index, at) = soonest(pace, capacities, tats, ask);
        return Outcome::Deny { index, at };
    }
    let mut pool = Pool::new(tokens - ask.n, 0);
    let mut new_tats = [0; MAX_K];
    new_tats[..k].copy_from_slice(tats);
    // The roomiest bucket not yet paying pays next, as much as it holds in
    // whole tokens, until the request is paid; equal rooms go to the first
    // at or after `start`, wrapping, as for one bucket.
    let start = start();
    let mut paying = [false; MAX_K];
    let mut left = ask.n;
    while left > 0 {
        let mut best = None;
        for j in (start..k).chain(0..start) {
            if !paying[j]
                && rooms[j] >= pace.interval()
                && best.is_none_or(|b: usize| rooms[j] > rooms[b])
            {
                best = Some(j);
            }
        }
        // The whole tokens add up to the request, so a payer is left while
        // part of it is.
        let Some(j) = best else { break };
        paying[j] = true;
        let paid = pace.tokens(rooms[j]).min(left) as u32;
        left -= u64::from(paid);
        new_tats[j] = tats[j].max(ask.now) + u64::from(paid) * pace.interval();
        let i = pool.payers;
        (pool.index[i], pool.seen[i], pool.tat[i], pool.paid[i]) =
            (j as u8, tats[j], new_tats[j], paid);
        pool.payers += 1;
    }
    pool.full_in = new_tats[..k]
        .iter()
        .map(|tat| tat.saturating_sub(ask.now))
        .max()
        .unwrap_or(0);
    Outcome::Pooled(pool)
}

/// When the own buckets, whose `capacities` and arrival times `tats` are
/// given, will together hold the request's tokens if nothing more is taken:
/// the earliest such time and the bucket whose token completes them (the
/// lowest position where several arrive at once); `u64::MAX` when they never
/// can. The time is `now` if they already do.
pub(super) fn soonest(pace: Pace, capacities: &[u64], tats: &[u64], ask: Ask) -> (usize, u64) {
    let now = ask.now;
    // One bucket that holds the whole request is an upper bound (and, for a
    // single token, the answer).
    let (index, at, _) = alone(capacities.len(), |j| capacities[j], |j| tats[j], ask);
    let together = |t: u64| -> u64 {
        let rooms = capacities.iter().zip(tats);
        rooms
            .map(|(&c, &tat)| pace.tokens(Pace::room(c, tat, t)))
            .sum()
    };
    let n = ask.n;
    if n <= 1 {
        return (index, at);
    }
    // Both callers come here short of tokens, as first read; but `borrow`
    // reads the buckets again, and in between a pooled take that lost its
    // race may have been given back. Then the answer is "now", and the
    // halving below, which needs a short start, is not run.
    if together(now) >= n {
        return (0, now);
    }
    // Once every bucket is full they hold all their tokens.
    let full = tats.iter().map(|&tat| tat.max(now)).max().unwrap_or(now);
    let mut high = if together(full) >= n {
        at.min(full)
    } else {
        at
    };
    if high == u64::MAX {
        return (index, at);
    }
    // together(low) < n <= together(high); tokens only arrive as time
    // passes, so halving finds the first instant they add up.
    let mut low = now;
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if together(mid) >= n {
            high = mid;
        } else {
            low = mid;
        }
    }
    let arrives = |&(&c, &tat): &(&u64, &u64)| {
        pace.tokens(Pace::room(c, tat, high)) > pace.tokens(Pace::room(c, tat, high - 1))
    };
    let index = capacities.iter().zip(tats).position(|pair| arrives(&pair));
    (index.unwrap_or(0), high)
}

/// The first of `k` buckets (`capacity` and `tat` by position, each asked
/// once) to have room for the whole request alone, and when (the lowest
/// position where several do at once; `u64::MAX` when none ever can), and
/// whether one has it already.
#[inline(always)]
fn alone(
    k: usize,
    capacity: impl Fn(usize) -> u64,
    tat: impl Fn(usize) -> u64,
    ask: Ask,
) -> (usize, u64, bool) {
    let (mut index, mut at, mut has_room) = (0, u64::MAX, false);
    for j in 0..k {
        let (capacity, tat) = (capacity(j), tat(j));
        has_room |= Pace::room(capacity, tat, ask.now) >= ask.cost;
        if let Some(at_j) = room_at(capacity, tat, ask.now, ask.cost)
            && at_j < at
        {
            (index, at) = (j, at_j);
        }
    }
    (index, at, has_room)
}

#[cfg(test)]
mod tests {
    use super::super::tests::PACE;
    use super::super::{Outcome, ShardShape, Single, draw};
    use super::Pool;

    fn take(bursts: &[u32], tats: &[u64], now: u64, n: u32, start: usize) -> Outcome {
        let shape = ShardShape::own(tats.len());
        draw(PACE, shape, |j| bursts[j], |j| tats[j], now, n, || start)
    }

    fn pool(outcome: Outcome) -> Pool {
        match outcome {
            Outcome::Pooled(pool) => pool,
            other => panic!("not pooled: {other:?}"),
        }
    }

    #[test]
    fn buckets_that_cannot_pay_alone_pay_together_roomiest_first() {
        // Rooms at now = 100: 15, 25, 5 (1, 2 and 0 whole tokens).
        let tats = [115, 105, 125];
        let paid = pool(take(&[3, 3, 3], &tats, 100, 3, 0));
        let payments: Vec<_> = paid.payments().collect();
        assert_eq!(payments, [(1, 105, 125, 2), (0, 115, 125, 1)]);
        assert_eq!((paid.remaining, paid.full_in), (0, 25));
        // One more token than they hold in whole tokens: denied, although
        // the credit (45) would cover 4 tokens if fractions were pooled.
        assert!(matches!(
            take(&[3, 3, 3], &tats, 100, 4, 0),
            Outcome::Deny { .. }
        ));
    }

    #[test]
    fn one_token_short_everywhere_is_denied_but_found_room_is_paid() {
        // The rest of the draw, as a store calls it with the buckets read
        // again after no own bucket could pay alone. Rooms at now = 100 of
        // 5 and 2: no whole token; bucket 0 has room first, at 105.
        let rest = |tats: [u64; 2]| {
            let (bursts, shape) = ([3, 3], ShardShape::own(2));
            super::super::rest(PACE, shape, |j| bursts[j], |j| tats[j], 100, 1, || 0)
        };
        assert_eq!(rest([125, 128]), Outcome::Deny { index: 0, at: 105 });
        // Read again, bucket 1 is full (another request gave its tokens
        // back meanwhile): it pays, as the pooling rule has it.
        let paid = pool(rest([125, 90]));
        assert_eq!(paid.payments().collect::<Vec<_>>(), [(1, 90, 110, 1)]);
    }

    #[test]
    fn together_a_full_shard_pays_the_sum_of_its_bursts() {
        let paid = pool(take(&[2, 3], &[0, 0], 100, 5, 0));
        let payments: Vec<_> = paid.payments().collect();
        assert_eq!(payments, [(1, 0, 130, 3), (0, 0, 120, 2)]);
        assert_eq!(
            take(&[2, 3], &[0, 0], 100, 6, 0),
            Outcome::Deny {
                index: 0,
                at: u64::MAX
            }
        );
    }

    #[test]
    fn equal_rooms_pay_in_turn_from_the_start() {
        let order = |start| {
            let paid = pool(take(&[2, 2, 2], &[0, 0, 0], 100, 5, start));
            paid.payments().map(|p| p.0).collect::<Vec<_>>()
        };
        assert_eq!(order(0), [0, 1, 2]);
        assert_eq!(order(1), [1, 2, 0]);
        assert_eq!(order(2), [2, 0, 1]);
    }

    #[test]
    fn a_denial_names_when_the_tokens_add_up() {
        // Rooms at now = 100: 10, 5, 5; three tokens: the two half-full
        // buckets each complete a token at 105.
        assert_eq!(
            take(&[3, 3, 3], &[120, 125, 125], 100, 3, 0),
            Outcome::Deny { index: 1, at: 105 }
        );
        // A bucket too small for the request alone still helps pay for it.
        assert_eq!(
            take(&[1, 3, 3], &[100, 125, 125], 100, 2, 2),
            Outcome::Deny { index: 1, at: 105 }
        );
    }

    proptest::proptest! {
        /// Together or alone, the own buckets grant a request exactly when
        /// their whole tokens add up to it; the payments add up to it, none
        /// takes more than its bucket holds, and a denial's time is exact:
        /// the same request is granted then and denied one unit earlier.
        #[test]
        fn the_whole_tokens_decide_and_the_denial_time_is_exact(
            bursts in proptest::collection::vec(1..=4u32, 1..=4),
            offsets in proptest::collection::vec(0..=60u64, 4),
            now in 0..=40u64,
            n in 1..=12u32,
            start in 0..4usize,
        ) {
            let k = bursts.len();
            let tats = &offsets[..k];
            let start = start % k;
            let capacity = |j: usize| PACE.capacity(bursts[j]);
            let tokens = |t: u64| -> u64 {
                (0..k).map(|j| PACE.tokens(super::Pace::room(capacity(j), tats[j], t))).sum()
            };
            match take(&bursts, tats, now, n, start) {
                Outcome::Grant(Single { .. }) => proptest::prop_assert!(tokens(now) >= u64::from(n)),
                Outcome::Pooled(pool) => {
                    proptest::prop_assert!(pool.payers >= 2);
                    let mut sum = 0;
                    for (j, seen, tat, paid) in pool.payments() {
                        let held = PACE.tokens(super::Pace::room(capacity(j), seen, now));
                        proptest::prop_assert!(paid >= 1 && u64::from(paid) <= held);
                        proptest::prop_assert_eq!(tat, seen.max(now) + u64::from(paid) * 10);
                        sum += paid;
                    }
                    proptest::prop_assert_eq!(sum, n);
                    proptest::prop_assert_eq!(pool.remaining, tokens(now) - u64::from(n));
                }
                Outcome::Deny { index, at } => {
                    proptest::prop_assert!(tokens(now) < u64::from(n));
                    proptest::prop_assert!(index < k);
                    let total: u32 = bursts.iter().sum();
                    if n > total {
                        proptest::prop_assert_eq!(at, u64::MAX);
                    } else {
                        proptest::prop_assert!(at > now);
                        proptest::prop_assert!(tokens(at) >= u64::from(n));
                        proptest::prop_assert!(tokens(at - 1) < u64::from(n));
                        let denied = matches!(take(&bursts, tats, at, n, start), Outcome::Deny { .. });
                        proptest::prop_assert!(!denied, "denied at {}", at);
                    }
                }
            }
        }
    }
}
