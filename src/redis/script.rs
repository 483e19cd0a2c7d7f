//! The draw on the server: `draw.lua` mirrors `draw` of `src/draw/` line
//! by line, and this file sends it a shard and reads its answer.

use ::redis::Script;
use ::redis::aio::ConnectionLike;

use super::error::Error;
use super::layout::Layout;
use crate::draw::{MAX_K, Outcome, Pool, ShardShape, Single};
use crate::plan::Split;
use crate::{Denied, Grant, Shard};

/// The script's source, after what every script of the limiter starts with.
const DRAW_LUA: &str = concat!(include_str!("prelude.lua"), include_str!("draw.lua"));

/// Nanoseconds in the script's unit of time.
pub(super) const MICROS: u64 = 1000;

/// The script with the keys of every bucket.
#[derive(Debug)]
pub(super) struct DrawScript {
    script: Script,
    /// The key of every bucket i, as the layout names it.
    keys: Box<[String]>,
    /// The key of the quota set live (see `quota.rs`): one for every
    /// bucket, or one per bucket in its slot.
    quota_keys: Box<[String]>,
    /// The key of the hold-offs (see `holdoff.rs`), in the one-slot layout.
    held_key: Option<String>,
}

impl DrawScript {
    #[cfg(test)]
    pub(super) fn new(name: &str, buckets: u32, layout: Layout) -> Self {
        DrawScript::with_prefix("", name, buckets, layout)
    }

    /// The script over the keys of `buckets` buckets of the limiter `name`,
    /// each key after `prefix`.
    pub(super) fn with_prefix(prefix: &str, name: &str, buckets: u32, layout: Layout) -> Self {
        DrawScript {
            script: Script::new(DRAW_LUA),
            keys: (0..buckets).map(|i| layout.key(prefix, name, i)).collect(),
            quota_keys: layout.quota_keys(prefix, name, buckets),
            held_key: layout.held_key(prefix, name),
        }
    }

    /// The key of the hold-offs, in the one-slot layout.
    pub(super) fn held_key(&self) -> Option<&str> {
        self.held_key.as_deref()
    }

    /// The bucket whose key is `key`.
    pub(super) fn bucket_of(&self, key: &[u8]) -> Option<u32> {
        let b = self.keys.iter().position(|k| k.as_bytes() == key)?;
        u32::try_from(b).ok()
    }

    pub(super) fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The quota key in the slot of `bucket`.
    pub(super) fn quota_key(&self, bucket: u32) -> &str {
        let keys = &self.quota_keys;
        &keys[(bucket as usize).min(keys.len() - 1)]
    }

    pub(super) fn script(&self) -> &Script {
        &self.script
    }

    pub(super) fn key(&self, bucket: u32) -> Option<&str> {
        self.keys.get(bucket as usize).map(String::as_str)
    }

    /// One round trip: the draw for `n` tokens over `shard` (its own
    /// buckets, then its spill buckets above a `reserve` of 2⁻³² parts),
    /// settling a tie from shard position `start`, on the server's clock
    /// `lead` µs on, with the split of quota `version`.
    #[allow(clippy::too_many_arguments)] // the script's inputs, one for one
    pub(super) async fn draw<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        (version, split): (u64, &Split),
        shard: &Shard,
        reserve: u32,
        (n, lead): (u32, u64),
        start: usize,
    ) -> Result<Answer, Error> {
        let ids = shard.ranked();
        let bursts = split.bursts(shard);
        let shape = ShardShape {
            own: shard.buckets().len(),
            spill: shard.spill().len(),
            reserve: u64::from(reserve),
        };
        let interval = split.interval() / MICROS;
        let call = Call {
            ids,
            shape,
            interval,
            bursts: &bursts[..ids.len()],
            n,
            start,
            version,
            lead,
            now: None,
        };
        self.run(connection, &call).await
    }

    /// One round trip over `bucket` alone, for the spread layout: the same
    /// draw as a shard of that one bucket (k = 1, no spill), for `n` tokens,
    /// on its node's clock `lead` µs on, with the split of quota `version`.
    pub(super) async fn draw_one<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        (version, split): (u64, &Split),
        bucket: u32,
        (n, lead): (u32, u64),
    ) -> Result<Answer, Error> {
        let call = Call {
            ids: &[bucket],
            shape: ShardShape {
                own: 1,
                spill: 0,
                reserve: 0,
            },
            interval: split.interval() / MICROS,
            bursts: &[split.burst_of(bucket)],
            n,
            start: 0,
            version,
            lead,
            now: None,
        };
        self.run(connection, &call).await
    }

    /// The script's inputs, one for one those of `draw` in `src/draw/`.
    async fn run<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        call: &Call<'_>,
    ) -> Result<Answer, Error> {
        let mut invocation = self.script.prepare_invoke();
        for &b in call.ids {
            invocation.key(self.keys[b as usize].as_str());
        }
        invocation.key(self.quota_key(call.ids[0]));
        invocation
            .arg(call.interval)
            .arg(call.n)
            .arg(call.start)
            .arg(call.shape.own);
        for &burst in call.bursts {
            invocation.arg(burst);
        }
        // What a borrower must leave in each spill bucket, worked out here:
        // the product would not fit in Lua's doubles.
        for &burst in &call.bursts[call.shape.own..] {
            let capacity = u64::from(burst) * call.interval;
            invocation.arg(call.shape.reserve_of(capacity));
        }
        invocation.arg(call.version).arg(call.lead);
        if let Some(now) = call.now {
            invocation.arg(now);
        }
        let reply: Vec<i64> = invocation
            .invoke_async(connection)
            .await
            .map_err(Error::from_redis)?;
        let stale = match reply[..] {
            [-1, version] => u64::try_from(version).ok(),
            _ => None,
        };
        if let Some(version) = stale {
            return Ok(Answer::Stale { version });
        }
        let drawn = parse(&reply, call.shape.own, call.ids.len()).ok_or_else(|| Error::Reply {
            detail: format!("{reply:?}"),
        })?;
        Ok(Answer::Drawn(drawn))
    }
}

/// What the script answered: a draw, or that the quota changed. (Not
/// boxed: it lives for one call, and the draw is the common answer.)
#[derive(Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)]
pub(super) enum Answer {
    Drawn(Drawn),
    /// The quota key holds `version`, not the caller's: nothing was drawn.
    Stale {
        version: u64,
    },
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
/// draw sees them, the interval in µs, their bursts, the request, the quota
/// version they come from, and `now` in µs (or the server's clock when
/// `None`).
struct Call<'a> {
    ids: &'a [u32],
    shape: ShardShape,
    interval: u64,
    bursts: &'a [u32],
    n: u32,
    start: usize,
    version: u64,
    /// µs from now the draw is made at: 0, or a booking's lead.
    lead: u64,
    now: Option<u64>,
}

/// The script's reply as the draw's outcome, in microseconds (with the
/// arrival times written, but not those read), for `own` own buckets out of
/// `ranked`.
fn parse(reply: &[i64], own: usize, ranked: usize) -> Option<Drawn> {
    let k = ranked;
    let position = |j: i64| usize::try_from(j).ok().filter(|&j| j < k);
    let (&[granted, first, wait, remaining], rest) = reply.split_first_chunk()?;
    let index = position(first)?;
    let wait = u64::try_from(wait).ok()?;
    let remaining = u64::try_from(remaining).ok()?;
    let mut held = [0; MAX_K];
    let time = |t: &i64| u64::try_from(*t).ok();
    let outcome = match (granted, rest) {
        (1, [_paid, tat]) => Some(Outcome::Grant(Single {
            index,
            seen: 0,
            tat: time(tat)?,
            remaining,
            full_in: wait,
        })),
        (1, [paid, tat, more @ ..]) if more.len() % 3 == 0 && more.len() < 3 * MAX_K => {
            let mut pool = Pool::new(remaining, wait);
            let others = more.chunks_exact(3).map(|t| (t[0], t[1], t[2]));
            let first = std::iter::once((first, *paid, *tat));
            for (i, (j, paid, tat)) in first.chain(others).enumerate() {
                pool.index[i] = position(j)? as u8;
                pool.paid[i] = u32::try_from(paid).ok()?;
                pool.tat[i] = time(&tat)?;
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

/// The answer for the caller, drawn under the quota's `version`; `at` of a
/// denial is already relative.
pub(super) fn answer(
    outcome: Outcome,
    shard: &Shard,
    n: u32,
    version: u64,
) -> Result<Grant, Denied> {
    crate::grant::answer(outcome, shard, n, (0, MICROS), version)
}

// Also the server of the state reads' tests (`state.rs`): a file may be
// loaded as one module only.
#[cfg(test)]
#[path = "../../tests/support/redis_server.rs"]
pub(crate) mod redis_server;

#[cfg(test)]
mod differential;

#[cfg(test)]
mod changes;

#[cfg(test)]
mod hold;

#[cfg(test)]
mod retry;
