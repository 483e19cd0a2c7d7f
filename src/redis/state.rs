//! Reading the buckets' state in Redis without taking anything:
//! `state.lua`, over every key at once in the one-slot layout, one bucket
//! per call (concurrently) when spread.
//!
//! A read is bounded by the limiter's deadline as a decision is, but has no
//! failure policy: a timeout or an error is reported. It leaves the
//! breaker, the denial cache and the counts alone.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use tokio::task::JoinSet;
use tokio::time::timeout;

use super::error::Error;
use super::layout::Layout;
use super::lua::Lua;
use super::quota::{ATTEMPTS, spread_stale};
use super::script::MICROS;
use super::store::RedisStore;
use super::store::Shared;
use crate::grant::BucketState;
use crate::plan::Core;
use crate::plan::Split;
use crate::plan::whom::Whom;
use crate::store::sealed::Local;

/// The script's source, after what every script of the limiter starts with.
const STATE_LUA: &str = concat!(include_str!("prelude.lua"), include_str!("state.lua"));

/// The script, hashed once for every limiter.
static STATE: LazyLock<Lua> = LazyLock::new(|| Lua::new(STATE_LUA));

/// One bucket as the script read it, in microseconds of the server's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Read {
    full_in: u64,
    available: u64,
}

/// What a call of the script answered.
enum Answer {
    Read(Vec<Read>),
    /// The quota key holds `version`, not the caller's: nothing was read.
    Stale {
        version: u64,
    },
}

impl<Conn, L> RedisStore<Conn, L>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local + 'static,
{
    /// Tokens the own buckets of `whom`'s shard could grant now (as
    /// `InProcess::remaining`), read in Redis at the server's time, the
    /// shard resolved under the N they are read under (another process
    /// may have changed it since this one last heard).
    ///
    /// A bucket past that N (a shard of a caller that the cache could not
    /// resolve again) counts nothing, as a sealed bucket in process.
    pub(crate) async fn remaining_in_redis(
        &self,
        core: &Core,
        whom: Whom<'_>,
    ) -> Result<u64, Error> {
        let own = |split: &Split| -> Vec<u32> {
            let shard = core.resolve_again(&whom, split.buckets);
            let buckets = shard.buckets().iter().copied();
            buckets.filter(|&b| b < split.buckets).collect()
        };
        let (_, reads) = self.shared.read_state(own).await?;
        Ok(reads.iter().map(|(_, read)| read.available).sum())
    }

    /// The state of every bucket 0..N, read in Redis, as
    /// `ShardedLimiter::snapshot` reads it in process (each bucket at the
    /// server's time; in the one-slot layout all at one instant).
    pub(crate) async fn snapshot_in_redis(&self) -> Result<Vec<BucketState>, Error> {
        let every = |split: &Split| -> Vec<u32> { (0..split.buckets).collect() };
        let (split, reads) = self.shared.read_state(every).await?;
        Ok(reads
            .into_iter()
            .map(|(bucket, read)| BucketState {
                bucket,
                available: read.available,
                burst: split.burst_of(bucket),
                full_in: Duration::from_micros(read.full_in),
            })
            .collect())
    }
}

impl<Conn, L> Shared<Conn, L>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local + 'static,
{
    /// Reads the buckets `which` names under the split in force, within the
    /// deadline: the split they were read under, and each bucket's read in
    /// the order named.
    async fn read_state(
        self: &Arc<Self>,
        which: impl Fn(&Split) -> Vec<u32>,
    ) -> Result<(Split, Vec<(u32, Read)>), Error> {
        let read = async {
            match self.options.layout {
                Layout::OneSlot => self.read_one_slot(which).await,
                Layout::Spread => self.read_spread_state(which).await,
            }
        };
        timeout(self.options.deadline, read)
            .await
            .unwrap_or(Err(Error::Timeout {
                after: self.options.deadline,
            }))
    }

    /// One call over every key; when Redis holds another quota (or N), the
    /// limiter takes it and reads again, as a draw does.
    async fn read_one_slot(
        &self,
        which: impl Fn(&Split) -> Vec<u32>,
    ) -> Result<(Split, Vec<(u32, Read)>), Error> {
        for _ in 0..ATTEMPTS {
            let (version, split) = self.current();
            let buckets = which(&split);
            if buckets.is_empty() {
                return Ok((split, Vec::new()));
            }
            let quota_key = self.script.quota_key(buckets[0]);
            match self.call(&buckets, quota_key, (version, &split)).await? {
                Answer::Read(reads) => {
                    return Ok((split, buckets.into_iter().zip(reads).collect()));
                }
                Answer::Stale { version } => self.stale(version).await?,
            }
        }
        Err(Error::GaveUp {
            detail: "the quota kept changing under the read".to_owned(),
        })
    }

    /// One call per bucket, each with the quota key of its own slot, all at
    /// once (they may be on different nodes).
    async fn read_spread_state(
        self: &Arc<Self>,
        which: impl Fn(&Split) -> Vec<u32>,
    ) -> Result<(Split, Vec<(u32, Read)>), Error> {
        let (version, split) = self.current();
        let buckets = which(&split);
        let mut calls = JoinSet::new();
        for (i, &b) in buckets.iter().enumerate() {
            let shared = Arc::clone(self);
            calls.spawn(async move {
                let quota_key = shared.script.quota_key(b);
                (i, shared.call(&[b], quota_key, (version, &split)).await)
            });
        }
        let mut reads = vec![None; buckets.len()];
        // Dropping the set, on an error or at the deadline, cancels the
        // calls still out.
        while let Some(joined) = calls.join_next().await {
            let (i, answer) = joined.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            reads[i] = match answer? {
                Answer::Read(read) => read.first().copied(),
                // No quota is set live in this layout: every process is on
                // the one it was built with (as the spread draw answers it).
                Answer::Stale { version } => return Err(spread_stale(Some(version))),
            };
        }
        let reads = buckets.into_iter().zip(reads);
        let reads = reads
            .map(|(b, read)| Some((b, read?)))
            .collect::<Option<_>>();
        let reads = reads.ok_or_else(|| Error::Reply {
            detail: "a spread bucket read nothing".to_owned(),
        })?;
        Ok((split, reads))
    }

    /// One round trip: `buckets` (all in the slot of `quota_key`) read under
    /// the split of quota `version`.
    async fn call(
        &self,
        buckets: &[u32],
        quota_key: &str,
        (version, split): (u64, &Split),
    ) -> Result<Answer, Error> {
        let mut invocation = STATE.prepare_invoke();
        for &b in buckets {
            invocation.key(self.script.keys()[b as usize].as_str());
        }
        invocation.key(quota_key);
        invocation.arg(split.interval() / MICROS).arg(version);
        for &b in buckets {
            invocation.arg(split.burst_of(b));
        }
        let reply: Vec<i64> = invocation
            .invoke_async(&mut self.connection.clone())
            .await
            .map_err(Error::from_redis)?;
        parse(&reply, buckets.len()).ok_or_else(|| Error::Reply {
            detail: format!("{reply:?}"),
        })
    }
}

/// The script's reply for `m` buckets.
fn parse(reply: &[i64], m: usize) -> Option<Answer> {
    let number = |v: &i64| u64::try_from(*v).ok();
    match reply {
        [-1, version] => Some(Answer::Stale {
            version: number(version)?,
        }),
        [1, pairs @ ..] if pairs.len() == 2 * m => {
            let reads = pairs.chunks_exact(2).map(|pair| {
                Some(Read {
                    full_in: number(&pair[0])?,
                    available: number(&pair[1])?,
                })
            });
            reads.collect::<Option<_>>().map(Answer::Read)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
