//! The draw on the server: `draw.lua` mirrors `draw` of `src/draw/` line
//! by line, and this file sends it a shard and reads its answer.

use ::redis::Script;
use ::redis::aio::ConnectionLike;

use super::error::Error;
use super::layout::Layout;
use crate::draw::{MAX_K, Outcome, Pool, Span};
use crate::limiter::core::Split;
use crate::{Denied, Grant, Shard};

/// The script's source.
const DRAW_LUA: &str = include_str!("draw.lua");

/// Nanoseconds in the script's unit of time.
pub(super) const MICROS: u64 = 1000;

/// The script with the keys of every bucket.
#[derive(Debug)]
pub(super) struct DrawScript {
    script: Script,
    /// The key of every bucket i, as the layout names it.
    keys: Box<[String]>,
}

impl DrawScript {
    pub(super) fn new(name: &str, buckets: u32, layout: Layout) -> Self {
        DrawScript {
            script: Script::new(DRAW_LUA),
            keys: (0..buckets).map(|i| layout.key(name, i)).collect(),
        }
    }

    pub(super) fn script(&self) -> &Script {
        &self.script
    }

    pub(super) fn key(&self, bucket: u32) -> Option<&str> {
        self.keys.get(bucket as usize).map(String::as_str)
    }

    /// One round trip: the draw for `n` tokens over `shard` (its own
    /// buckets, then its spill buckets above a `reserve` of 2⁻³² parts),
    /// settling a tie from shard position `start`, on the server's clock.
    pub(super) async fn draw<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        split: &Split,
        shard: &Shard,
        reserve: u32,
        n: u32,
        start: usize,
    ) -> Result<Drawn, Error> {
        let ids = shard.ranked();
        let bursts = split.bursts(shard);
        let span = Span {
            own: shard.buckets().len(),
            spill: shard.spill().len(),
            reserve,
        };
        let interval = split.interval() / MICROS;
        let call = Call {
            ids,
            span,
            interval,
            bursts: &bursts[..ids.len()],
            n,
            start,
            now: None,
        };
        self.run(connection, &call).await
    }

    /// One round trip over `bucket` alone, for the spread layout: the same
    /// draw as a shard of that one bucket (k = 1, no spill), for `n` tokens,
    /// on its node's clock.
    pub(super) async fn draw_one<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        split: &Split,
        bucket: u32,
        n: u32,
    ) -> Result<Drawn, Error> {
        let call = Call {
            ids: &[bucket],
            span: Span {
                own: 1,
                spill: 0,
                reserve: 0,
            },
            interval: split.interval() / MICROS,
            bursts: &[split.burst_of(bucket)],
            n,
            start: 0,
            now: None,
        };
        self.run(connection, &call).await
    }

    /// The script's inputs, one for one those of `draw` in `src/draw/`.
    async fn run<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        call: &Call<'_>,
    ) -> Result<Drawn, Error> {
        let mut invocation = self.script.prepare_invoke();
        for &b in call.ids {
            invocation.key(self.keys[b as usize].as_str());
        }
        invocation
            .arg(call.interval)
            .arg(call.n)
            .arg(call.start)
            .arg(call.span.own);
        for &burst in call.bursts {
            invocation.arg(burst);
        }
        // What a borrower must leave in each spill bucket, worked out here:
        // the product would not fit in Lua's doubles.
        for &burst in &call.bursts[call.span.own..] {
            let capacity = u64::from(burst) * call.interval;
            invocation.arg(call.span.reserve_of(capacity));
        }
        if let Some(now) = call.now {
            invocation.arg(now);
        }
        let reply: Vec<i64> = invocation
            .invoke_async(connection)
            .await
            .map_err(Error::from_redis)?;
        parse(&reply, call.span.own, call.ids.len()).ok_or_else(|| Error::Reply {
            detail: format!("{reply:?}"),
        })
    }
}

/// What the script answered: the draw's outcome and, with a denial, the
/// whole tokens each own bucket holds at most until the retry time (for the
/// denial cache), in shard order.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Drawn {
    pub(super) outcome: Outcome,
    pub(super) held: [u32; MAX_K],
}

/// One call of the script: the ranked bucket ids (own, then spill), how the
/// draw sees them, the interval in µs, their bursts, the request, and `now`
/// in µs (or the server's clock when `None`).
struct Call<'a> {
    ids: &'a [u32],
    span: Span,
    interval: u64,
    bursts: &'a [u32],
    n: u32,
    start: usize,
    now: Option<u64>,
}

/// The script's reply as the draw's outcome, in microseconds (the arrival
/// times of a grant are not sent back: they are the store's business), for
/// `own` own buckets out of `ranked`.
fn parse(reply: &[i64], own: usize, ranked: usize) -> Option<Drawn> {
    let k = ranked;
    let position = |j: i64| usize::try_from(j).ok().filter(|&j| j < k);
    let (&[granted, first, wait, remaining], rest) = reply.split_first_chunk()?;
    let index = position(first)?;
    let wait = u64::try_from(wait).ok()?;
    let remaining = u64::try_from(remaining).ok()?;
    let mut held = [0; MAX_K];
    let outcome = match (granted, rest) {
        (1, [_paid]) => Some(Outcome::Grant {
            index,
            seen: 0,
            tat: 0,
            remaining,
            full_in: wait,
        }),
        (1, [paid, more @ ..]) if more.len() % 2 == 0 && more.len() < 2 * MAX_K => {
            let mut pool = Pool::new(remaining, wait);
            let others = more.chunks_exact(2).map(|pair| (pair[0], pair[1]));
            for (i, (j, paid)) in std::iter::once((first, *paid)).chain(others).enumerate() {
                pool.index[i] = position(j)? as u8;
                pool.paid[i] = u32::try_from(paid).ok()?;
                pool.payers += 1;
            }
            Some(Outcome::Pooled(pool))
        }
        (0, tokens) if wait >= 1 && tokens.len() == own => {
            for (held, &tokens) in held.iter_mut().zip(tokens) {
                *held = u32::try_from(tokens).ok()?;
            }
            Some(Outcome::Deny { index, at: wait })
        }
        _ => None,
    }?;
    Some(Drawn { outcome, held })
}

/// The answer for the caller; `at` of a denial is already relative.
pub(super) fn answer(outcome: Outcome, shard: &Shard, n: u32) -> Result<Grant, Denied> {
    crate::limiter::decision::answer(outcome, shard, n, 0, MICROS)
}

#[cfg(test)]
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;

#[cfg(test)]
mod differential;
