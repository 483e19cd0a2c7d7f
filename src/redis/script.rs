//! The draw on the server: `draw.lua` mirrors `draw` of `src/draw.rs` line
//! by line, and this file sends it a shard and reads its answer.

use ::redis::Script;
use ::redis::aio::ConnectionLike;

use super::error::Error;
use crate::draw::Outcome;
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
    /// `{name}:b<i>` for every bucket i.
    keys: Box<[String]>,
}

impl DrawScript {
    pub(super) fn new(name: &str, buckets: u32) -> Self {
        DrawScript {
            script: Script::new(DRAW_LUA),
            keys: (0..buckets).map(|i| format!("{{{name}}}:b{i}")).collect(),
        }
    }

    pub(super) fn script(&self) -> &Script {
        &self.script
    }

    pub(super) fn key(&self, bucket: u32) -> Option<&str> {
        self.keys.get(bucket as usize).map(String::as_str)
    }

    /// One round trip: the draw for `n` tokens over `shard`, scanning from
    /// shard position `start`, on the server's clock.
    pub(super) async fn draw<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        split: &Split,
        shard: &Shard,
        n: u32,
        start: usize,
    ) -> Result<Outcome, Error> {
        let ids = shard.buckets();
        let bursts = split.bursts(shard);
        let interval = split.interval() / MICROS;
        self.run(
            connection,
            ids,
            interval,
            &bursts[..ids.len()],
            n,
            start,
            None,
        )
        .await
    }

    /// The script's inputs, one for one those of `draw` in `src/draw.rs`
    /// (`now` in µs, or the server's clock when `None`).
    #[allow(clippy::too_many_arguments)]
    async fn run<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        ids: &[u32],
        interval: u64,
        bursts: &[u32],
        n: u32,
        start: usize,
        now: Option<u64>,
    ) -> Result<Outcome, Error> {
        let mut invocation = self.script.prepare_invoke();
        for &b in ids {
            invocation.key(self.keys[b as usize].as_str());
        }
        invocation.arg(interval).arg(n).arg(start);
        for &burst in bursts {
            invocation.arg(burst);
        }
        if let Some(now) = now {
            invocation.arg(now);
        }
        let reply: Vec<i64> = invocation
            .invoke_async(connection)
            .await
            .map_err(Error::from_redis)?;
        parse(&reply, ids.len()).ok_or_else(|| Error::Reply {
            detail: format!("{reply:?}"),
        })
    }
}

/// The script's reply as the draw's outcome, in microseconds (the arrival
/// times of a grant are not sent back: they are the store's business).
fn parse(reply: &[i64], k: usize) -> Option<Outcome> {
    let &[granted, index, wait, remaining] = reply else {
        return None;
    };
    let index = usize::try_from(index).ok().filter(|&j| j < k)?;
    let wait = u64::try_from(wait).ok()?;
    match granted {
        1 => Some(Outcome::Grant {
            index,
            seen: 0,
            tat: 0,
            remaining: u64::try_from(remaining).ok()?,
            full_in: wait,
        }),
        0 if wait >= 1 => Some(Outcome::Deny { index, at: wait }),
        _ => None,
    }
}

/// The answer for the caller; `at` of a denial is already relative.
pub(super) fn answer(outcome: Outcome, shard: &Shard) -> Result<Grant, Denied> {
    crate::limiter::decision::answer(outcome, shard.buckets(), 0, MICROS)
}

#[cfg(test)]
#[path = "../../tests/support/redis_server.rs"]
mod redis_server;

#[cfg(test)]
mod differential;
