//! A hold-off over Redis: one script holds off the buckets for every
//! process of the fleet (see [`upstream`](crate::upstream)).

use std::time::Duration;

use ::redis::aio::ConnectionLike;

use super::error::{Error, within};
use super::layout::Layout;
use super::quota::ATTEMPTS;
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
    /// all and records the instant beside them, so that a wait of any
    /// process that booked a slot before it books again when it wakes (see
    /// `held_over`), and one that booked after it keeps its slot; in the
    /// spread layout, one script per bucket, and a slot a wait booked
    /// before stays its own.
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
        within(
            shared.options.deadline,
            self.hold_off_attempts(shard, duration),
        )
        .await
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
            let (size, record) = match shared.options.layout {
                Layout::OneSlot => (buckets.len().max(1), "1"),
                Layout::Spread => (1, ""),
            };
            let interval = split.interval() / MICROS;
            // The held buckets come back one after another over one
            // interval, as in process: bucket i of them `stagger · i` after
            // the instant.
            let stagger = interval / buckets.len().max(1) as u64;
            for (at, batch) in (0..).step_by(size).zip(buckets.chunks(size)) {
                let mut invocation = shared.changes.hold_off.prepare_invoke();
                for &b in batch {
                    invocation.key(shared.script.key(b).unwrap_or_default());
                }
                invocation.key(shared.script.quota_key(batch[0]));
                if let Some(key) = shared.script.held_key() {
                    invocation.key(key);
                }
                invocation
                    .arg(version)
                    .arg(micros)
                    .arg(interval)
                    .arg(record);
                for &b in batch {
                    invocation.arg(u64::from(split.burst_of(b)) * interval);
                }
                for i in (at..).take(batch.len()) {
                    invocation.arg(stagger * i);
                }
                let mut connection = shared.connection.clone();
                let reply: Vec<i64> =
                    (invocation.invoke_async(&mut connection).await).map_err(Error::from_redis)?;
                match reply[..] {
                    [1, _, until] if until >= 0 => {
                        for (i, &b) in (at..).zip(batch) {
                            shared.held_until(b, (until as u64).saturating_add(stagger * i));
                        }
                    }
                    // Another process changed the quota first: held again
                    // under the new one (holding twice is holding once).
                    [0, v] if v >= 0 => {
                        shared.stale(v as u64).await?;
                        continue 'attempt;
                    }
                    _ => {
                        return Err(Error::Reply {
                            detail: format!("{reply:?}"),
                        });
                    }
                }
            }
            return Ok(());
        }
        Err(Error::GaveUp {
            detail: "the quota kept changing under the hold-off".to_owned(),
        })
    }
}
