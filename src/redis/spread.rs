//! The decision of the spread layout, where each bucket has a Cluster slot of
//! its own and a tenant's k buckets may live on k different nodes.
//!
//! No script can then touch all k at once, so the decision takes from one
//! bucket at a time, with the same `draw.lua` over that one key (a shard of
//! one bucket: k = 1, no spill): every grant is still one atomic GCRA step
//! on one bucket, on its own node's clock, and the budget holds exactly as
//! in the one-slot layout.
//!
//! Which bucket to try comes from what this process last saw of each
//! ([`Rooms`]): the roomiest first (equal rooms from a random position), the
//! next one on a denial, skipping those known to be short and those whose
//! breaker is open. The denial names the soonest retry over the buckets
//! tried or known. A bucket that could have paid but was paused or failed
//! leaves the decision to the failure policy, as a failure of the one-slot
//! script does, but on those buckets alone: a local fallback never draws on
//! its copy of a bucket Redis answered for, which would pay that bucket's
//! budget twice.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use tokio::time::{Instant, timeout_at};

use super::decision::{Decision, Source};
use super::denial_cache::FRESH_FOR;
use super::error::Error;
use super::quota::spread_stale;
use super::script::{Answer, MICROS, Request, answer};
use super::store::{ERRORS, Shared};
use crate::draw::{MAX_K, Outcome, Single};
use crate::plan::Split;
use crate::random::tie_break;
use crate::store::sealed::Local;
use crate::{Denied, Shard};

/// Per bucket, the local time (the breaker's microseconds) at which this
/// process last knew it would be full again if nothing more were taken,
/// and when it asked.
///
/// Each value is measured from the moment its request was sent, and other
/// processes' draws only ever move a bucket's arrival time forward, so a
/// bucket holds at most the room this implies (up to the drift of the two
/// clocks): a bucket it says is short is short. The largest value seen is
/// kept. Their refunds move it back, which only Redis tells: so what was
/// seen is used for at most [`FRESH_FOR`] after it was asked, as the denial
/// cache's facts are, and then the bucket counts as unknown (full).
#[derive(Debug)]
pub(super) struct Rooms {
    full_at: Box<[AtomicU64]>,
    asked: Box<[AtomicU64]>,
}

impl Rooms {
    pub(super) fn new(buckets: u32) -> Self {
        let zeros = || (0..buckets).map(|_| AtomicU64::new(0)).collect();
        Rooms {
            full_at: zeros(),
            asked: zeros(),
        }
    }

    /// When `bucket` is full again, at the earliest, as known at `now` (0:
    /// not known, or asked too long ago).
    fn full_at(&self, bucket: u32, now: u64) -> u64 {
        let asked = self.asked[bucket as usize].load(Ordering::Acquire);
        let full_at = self.full_at[bucket as usize].load(Ordering::Relaxed);
        if now < asked.saturating_add(FRESH_FOR) {
            full_at
        } else {
            0
        }
    }

    /// The most room (µs of credit) `bucket`, of `capacity`, can have at `now`.
    fn room(&self, bucket: u32, capacity: u64, now: u64) -> u64 {
        capacity.saturating_sub(self.full_at(bucket, now).saturating_sub(now))
    }

    /// Forgets what is known of `bucket`: tokens were given back to it
    /// here, so it may hold more than the latest news said.
    pub(super) fn forget(&self, bucket: u32) {
        self.full_at[bucket as usize].store(0, Ordering::Relaxed);
    }

    /// Learns, from a request sent at `asked`, that `bucket` is full again
    /// at `full_at`: the latest news, unless what was known had gone stale.
    fn saw(&self, bucket: u32, full_at: u64, asked: u64) {
        let b = bucket as usize;
        if self.full_at(bucket, asked) == 0 {
            self.full_at[b].store(full_at, Ordering::Relaxed);
        } else {
            self.full_at[b].fetch_max(full_at, Ordering::Relaxed);
        }
        self.asked[b].fetch_max(asked, Ordering::Release);
    }
}

/// What the tries of one decision found so far.
struct Tries {
    /// The soonest local time a tried or known-short bucket has room, and
    /// that bucket.
    soonest: Option<(u64, u32)>,
    /// A bucket that could have paid was paused or failed: the error, if
    /// one is known.
    unknown: Option<Option<Arc<Error>>>,
    /// Those buckets, by their position in the shard (bit j): the only
    /// ones the failure policy may decide on.
    unanswered: u32,
    /// Whether any round trip was made.
    asked: bool,
}

impl Tries {
    /// Redis could not answer for the bucket at position `j` (paused, or
    /// failed with `error`).
    fn unanswered(&mut self, j: usize, error: Option<Arc<Error>>) {
        self.unanswered |= 1 << j;
        match error {
            Some(error) => self.unknown = Some(Some(error)),
            None => {
                self.unknown.get_or_insert(None);
            }
        }
    }

    fn short(&mut self, at: u64, bucket: u32) {
        if self.soonest.is_none_or(|(soonest, _)| at < soonest) {
            self.soonest = Some((at, bucket));
        }
    }
}

impl<Conn, L> Shared<Conn, L>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local,
{
    /// The decision for `n` tokens over `shard` in the spread layout, drawn
    /// `lead` µs from now (a booking, when not 0); with the outcome of
    /// the bucket that paid, when one did.
    pub(super) async fn decide_spread(
        &self,
        shard: Shard,
        n: u32,
        lead: u64,
    ) -> (Decision, Option<Outcome>) {
        if n == 0 {
            return (self.read_spread(shard).await, None);
        }
        let own = shard.buckets();
        let (version, split) = self.current();
        let interval = split.interval() / MICROS;
        let capacity = |b: u32| u64::from(split.burst_of(b)) * interval;
        let cost = u64::from(n) * interval;
        let deadline = super::after(Instant::now(), self.options.deadline);
        let mut tries = Tries {
            soonest: None,
            unknown: None,
            unanswered: 0,
            asked: false,
        };
        let order = self.order(own, capacity);
        for &j in &order[..own.len()] {
            let b = own[j];
            if capacity(b) < cost {
                continue; // this bucket can never pay it
            }
            // The local instant the draw is made at.
            let now = self.breaker.micros().saturating_add(lead);
            if self.options.cache_denials && self.rooms.room(b, capacity(b), now) < cost {
                tries.short(
                    self.rooms
                        .full_at(b, now)
                        .saturating_sub(capacity(b) - cost),
                    b,
                );
                continue;
            }
            if let Err(error) = self.breaker.admit(&[b]) {
                // The first error known stays the one reported.
                let error = error.filter(|_| !matches!(tries.unknown, Some(Some(_))));
                tries.unanswered(j, error);
                continue;
            }
            tries.asked = true;
            let mut connection = self.connection.clone();
            let request = Request::one((version, &split), b, (n, lead));
            let call = self.script.draw(&mut connection, &request);
            let error = match timeout_at(deadline, call).await {
                // No quota is set live in this layout: every process is on
                // the one it was built with.
                Ok(Ok(Answer::Stale { version })) => spread_stale(Some(version)),
                Ok(Ok(Answer::Drawn(drawn))) => {
                    self.breaker.answered(&[b], self.breaker.micros());
                    self.draw_answered();
                    match drawn.outcome {
                        Outcome::Grant(Single {
                            remaining, full_in, ..
                        }) => {
                            self.rooms.saw(b, now.saturating_add(full_in), now);
                            let drew = (j, remaining, full_in);
                            let result = self.spread_grant((version, &split), &shard, drew, now, n);
                            let decision = self.decided(result, Source::Redis, None);
                            return (decision, Some(drawn.outcome));
                        }
                        Outcome::Deny { at, .. } => {
                            // Room now = cost − at: full in at + capacity − cost.
                            let full_in = at.saturating_add(capacity(b) - cost);
                            self.rooms.saw(b, now.saturating_add(full_in), now);
                            tries.short(now.saturating_add(at), b);
                            continue;
                        }
                        Outcome::Pooled(_) => Error::Reply {
                            detail: "a pooled grant from one bucket".into(),
                        },
                    }
                }
                Ok(Err(error)) => error,
                Err(_) => Error::Timeout {
                    after: self.options.deadline,
                },
            };
            let timed_out = matches!(error, Error::Timeout { .. });
            let error = self.failed_on(b, error);
            tries.unanswered(j, Some(error));
            if timed_out {
                break; // the decision's time is spent
            }
        }
        if !tries.asked {
            tokio::task::consume_budget().await;
        }
        if let Some(error) = tries.unknown {
            // The policy decides on the buckets Redis could not answer for
            // alone: the others answered (a denial stays a denial), and a
            // local fallback drawing on its copies of them would pay their
            // budget a second time, beside Redis.
            let unanswered = shard.only(tries.unanswered).unwrap_or(shard);
            let mut decision = self.by_policy(&unanswered, n, error);
            if let (Err(denied), Some((at, _))) = (&mut decision.result, tries.soonest) {
                // A bucket Redis denied may have room sooner.
                let drawn_at = self.breaker.micros().saturating_add(lead);
                let redis = Duration::from_micros(at.saturating_sub(drawn_at).max(1));
                denied.retry_after = denied.retry_after.min(redis);
            }
            return (decision, None);
        }
        let source = if tries.asked {
            Source::Redis
        } else {
            Source::CachedDenial
        };
        // Without any bucket that could ever pay (weights are checked
        // before), the denial never ends, as in process.
        let (at, bucket) = tries.soonest.unwrap_or((u64::MAX, own[0]));
        // From the instant drawn at, as every store's denial.
        let drawn_at = self.breaker.micros().saturating_add(lead);
        let denied = Denied::limited(
            Duration::from_micros(at.saturating_sub(drawn_at).max(1)),
            bucket,
        );
        (self.decided(Err(denied), source, None), None)
    }

    /// A request of 0 tokens: reads every own bucket, takes nothing.
    async fn read_spread(&self, shard: Shard) -> Decision {
        let deadline = super::after(Instant::now(), self.options.deadline);
        let (version, split) = self.current();
        let interval = split.interval() / MICROS;
        let (mut remaining, mut longest, mut roomiest) = (0, 0, (0, 0));
        for (j, &b) in shard.buckets().iter().enumerate() {
            let now = self.breaker.micros();
            if let Err(error) = self.breaker.admit(&[b]) {
                tokio::task::consume_budget().await;
                return self.by_policy(&shard, 0, error);
            }
            let mut connection = self.connection.clone();
            let request = Request::one((version, &split), b, (0, 0));
            let call = self.script.draw(&mut connection, &request);
            let error = match timeout_at(deadline, call).await {
                Ok(Ok(Answer::Stale { version })) => spread_stale(Some(version)),
                Ok(Ok(Answer::Drawn(drawn))) => {
                    self.breaker.answered(&[b], self.breaker.micros());
                    self.draw_answered();
                    if let Outcome::Grant(Single {
                        remaining: tokens,
                        full_in,
                        ..
                    }) = drawn.outcome
                    {
                        self.rooms.saw(b, now.saturating_add(full_in), now);
                        remaining += tokens;
                        longest = longest.max(full_in);
                        // The roomiest names the grant, the first of equals.
                        let capacity = u64::from(split.burst_of(b)) * interval;
                        let room = capacity.saturating_sub(full_in);
                        if j == 0 || room > roomiest.1 {
                            roomiest = (j, room);
                        }
                        continue;
                    }
                    Error::Reply {
                        detail: "a denial of 0 tokens".into(),
                    }
                }
                Ok(Err(error)) => error,
                Err(_) => Error::Timeout {
                    after: self.options.deadline,
                },
            };
            let error = self.failed_on(b, error);
            return self.by_policy(&shard, 0, Some(error));
        }
        let outcome = Outcome::Grant(Single {
            index: roomiest.0,
            seen: 0,
            tat: 0,
            remaining,
            full_in: longest,
        });
        self.decided(answer(outcome, &shard, 0, version), Source::Redis, None)
    }

    /// The own buckets' positions, the roomiest by this process's knowledge
    /// first, equal rooms in turn from a random position.
    fn order(&self, own: &[u32], capacity: impl Fn(u32) -> u64) -> [usize; MAX_K] {
        let k = own.len();
        let now = self.breaker.micros();
        let start = tie_break(k);
        let mut order = [0; MAX_K];
        let mut rooms = [0; MAX_K];
        for i in 0..k {
            let j = (start + i) % k;
            let room = self.rooms.room(own[j], capacity(own[j]), now);
            // Insertion, after every bucket with as much room: stable.
            let mut at = i;
            while at > 0 && rooms[at - 1] < room {
                order[at] = order[at - 1];
                rooms[at] = rooms[at - 1];
                at -= 1;
            }
            order[at] = j;
            rooms[at] = room;
        }
        order
    }

    /// The grant by own position `j`, whose reply left `tokens` in it and
    /// full in `full_in` µs, read at local time `now`; the other buckets
    /// count with what this process last saw of them.
    fn spread_grant(
        &self,
        (version, split): (u64, &Split),
        shard: &Shard,
        (j, tokens, full_in): (usize, u64, u64),
        now: u64,
        n: u32,
    ) -> Result<crate::Grant, Denied> {
        let interval = split.interval() / MICROS;
        let (mut remaining, mut longest) = (tokens, full_in);
        for (i, &b) in shard.buckets().iter().enumerate() {
            if i != j {
                let capacity = u64::from(split.burst_of(b)) * interval;
                remaining += self.rooms.room(b, capacity, now) / interval;
                longest = longest.max(self.rooms.full_at(b, now).saturating_sub(now));
            }
        }
        let outcome = Outcome::Grant(Single {
            index: j,
            seen: 0,
            tat: 0,
            remaining,
            full_in: longest,
        });
        answer(outcome, shard, n, version)
    }

    /// Counts a failure of `bucket`'s round trip and tells its breaker.
    fn failed_on(&self, bucket: u32, error: Error) -> Arc<Error> {
        self.counts[ERRORS].fetch_add(1, Ordering::Relaxed);
        self.redis_metrics.failed();
        let error = Arc::new(error);
        self.breaker.failed(&[bucket], &error);
        error
    }
}

#[cfg(test)]
mod tests {
    use super::{FRESH_FOR, Rooms};

    #[test]
    fn a_bucket_seen_short_refills_on_the_local_clock_and_the_latest_news_wins() {
        let rooms = Rooms::new(4);
        // Unknown: full.
        assert_eq!(rooms.room(2, 100, 0), 100);
        // Seen at 1000 full only at 1080: room 20, growing one per µs.
        rooms.saw(2, 1080, 1000);
        assert_eq!(rooms.room(2, 100, 1000), 20);
        assert_eq!(rooms.room(2, 100, 1050), 70);
        assert_eq!(rooms.room(2, 100, 5000), 100);
        // An older reply arriving late cannot make it look roomier.
        rooms.saw(2, 1040, 990);
        assert_eq!(rooms.room(2, 100, 1000), 20);
        assert_eq!(rooms.room(1, 100, 1000), 100);
    }

    #[test]
    fn what_was_seen_is_used_for_a_while_only() {
        let rooms = Rooms::new(4);
        // Full only in an hour (a refund elsewhere could change that).
        let hour = 3_600_000_000;
        rooms.saw(1, 1000 + hour, 1000);
        assert_eq!(rooms.room(1, 100, 1000 + FRESH_FOR - 1), 0);
        assert_eq!(rooms.room(1, 100, 1000 + FRESH_FOR), 100);
        // Asked again then: the new news, though earlier, is what counts.
        rooms.saw(1, 1000 + FRESH_FOR + 50, 1000 + FRESH_FOR);
        assert_eq!(rooms.room(1, 100, 1000 + FRESH_FOR), 50);
    }
}
