//! A hold-off over Redis: one script holds off the buckets for every
//! process of the fleet (see [`upstream`](crate::upstream)).

use std::time::Duration;

use ::redis::aio::ConnectionLike;

use super::error::Error;
use super::layout::Layout;
use super::quota::{ATTEMPTS, quota_text, run};
use super::script::MICROS;
use super::store::RedisStore;
use crate::Shard;
use crate::store::sealed::Local;

pub(super) const HOLDOFF_LUA: &str =
    concat!(include_str!("prelude.lua"), include_str!("holdoff.lua"));

impl<Conn, L> RedisStore<Conn, L>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local + 'static,
{
    /// Holds off the shard's own buckets (or every bucket) for `duration`
    /// from the server's clock, rounded up to a microsecond, and the local
    /// fallback's the same. In the one-slot layout one script holds them
    /// all and moves the quota's version on, so that every process decides
    /// again and its waits book again; in the spread layout, one script per
    /// bucket, and a slot a wait booked before stays its own.
    pub(super) async fn hold_off_in_redis(
        &self,
        shard: Option<Shard>,
        duration: Duration,
    ) -> Result<(), Error> {
        let shared = &self.shared;
        if duration.is_zero() {
            return Ok(()); // nothing to wait for: every token stays
        }
        if let Some(local) = &shared.fallback {
            local.hold_off(shard.as_ref(), duration);
        }
        // Bounded as a decision is: a Redis that stopped answering must not
        // hold the caller (the fallback, above, holds off at once).
        let deadline = shared.options.deadline;
        let held = tokio::time::timeout(deadline, self.hold_off_attempts(shard, duration));
        held.await
            .unwrap_or(Err(Error::Timeout { after: deadline }))
    }

    async fn hold_off_attempts(
        &self,
        shard: Option<Shard>,
        duration: Duration,
    ) -> Result<(), Error> {
        let shared = &self.shared;
        let micros = duration.as_nanos().div_ceil(u128::from(MICROS));
        let micros = u64::try_from(micros).unwrap_or(u64::MAX);
        'attempt: for _ in 0..ATTEMPTS {
            let (version, split) = shared.current();
            let buckets: Vec<u32> = match &shard {
                None => (0..split.buckets).collect(),
                Some(shard) => (shard.buckets().iter().copied())
                    .filter(|&b| b < split.buckets)
                    .collect(),
            };
            let (size, text) = match shared.options.layout {
                Layout::OneSlot => (
                    buckets.len().max(1),
                    quota_text(shared.split.quota(), split.buckets),
                ),
                Layout::Spread => (1, String::new()),
            };
            let interval = split.interval() / MICROS;
            // The held buckets come back one after another over one
            // interval, as in process: bucket i of them is held as if its
            // capacity were `stagger · i` longer (which only ever takes).
            let stagger = interval / buckets.len().max(1) as u64;
            for (at, batch) in (0..).step_by(size).zip(buckets.chunks(size)) {
                let mut invocation = shared.changes.hold_off.prepare_invoke();
                for &b in batch {
                    invocation.key(shared.script.key(b).unwrap_or_default());
                }
                invocation.key(shared.script.quota_key(batch[0]));
                invocation.arg(version).arg(micros).arg(interval);
                for (i, &b) in (at..).zip(batch) {
                    invocation.arg(u64::from(split.burst_of(b)) * interval + stagger * i);
                }
                invocation.arg(&text);
                match run(&invocation, &shared.connection).await? {
                    (1, now) if now != version => {
                        shared.adopt(now, shared.split.quota(), split);
                    }
                    (1, _) => {}
                    // Another process changed the quota first: held again
                    // under the new one (holding twice is holding once).
                    _ => {
                        shared.refresh().await?;
                        continue 'attempt;
                    }
                }
            }
            return Ok(());
        }
        Err(Error::Reply {
            detail: "the quota kept changing under the hold-off".to_owned(),
        })
    }
}
