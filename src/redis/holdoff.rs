//! A hold-off over Redis: one script holds off the buckets for every
//! process of the fleet (see [`upstream`](crate::upstream)).

use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use tokio::task::JoinSet;
use tokio::time::{Instant, timeout_at};

use super::error::{Error, within};
use super::layout::Layout;
use super::lua::{command, query_by_keys};
use super::quota::ATTEMPTS;
use super::script::MICROS;
use super::store::{RedisStore, Shared};
use crate::Shard;
use crate::draw::turn;
use crate::plan::Split;
use crate::store::sealed::Local;

pub(super) const HOLDOFF_LUA: &str = concat!(
    include_str!("prelude.lua"),
    include_str!("held.lua"),
    include_str!("holdoff.lua")
);

/// What one hold-off script answered.
enum HoldReply {
    /// Held (each bucket's instant recorded).
    Held,
    /// The quota key holds that version, not the one sent.
    Stale(u64),
}

impl<Conn, L> Shared<Conn, L>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local,
{
    /// One hold-off script over `batch` (all in one slot) for `micros`,
    /// under the split of quota `version`; bucket i of the batch comes
    /// back `offsets[i]` after the instant. Each bucket held is recorded.
    async fn hold_batch(
        &self,
        batch: &[u32],
        offsets: &[u64],
        (version, split): (u64, &Split),
        micros: u64,
    ) -> Result<HoldReply, Error> {
        let record = match self.options.layout {
            Layout::OneSlot => "1",
            Layout::Spread => "",
        };
        let interval = split.interval() / MICROS;
        let keys = batch.len() + 1 + usize::from(self.script.held_key().is_some());
        let mut cmd = command(&self.changes.hold_off, keys, keys + 4 + 2 * batch.len());
        for &b in batch {
            cmd.arg(self.script.key(b).unwrap_or_default());
        }
        cmd.arg(self.script.quota_key(batch[0]));
        if let Some(key) = self.script.held_key() {
            cmd.arg(key);
        }
        cmd.arg(version).arg(micros).arg(interval).arg(record);
        for &b in batch {
            cmd.arg(u64::from(split.burst_of(b)) * interval);
        }
        for &offset in offsets {
            cmd.arg(offset);
        }
        // Loaded where its keys are, if missing: a stopped node must not
        // hold the hold-off of the buckets on the others.
        let mut connection = self.connection.clone();
        let reply: Vec<i64> = (query_by_keys(&self.changes.hold_off, &cmd, &mut connection).await)
            .map_err(Error::from_redis)?;
        match reply[..] {
            [1, _, until] if until >= 0 => {
                for (&b, &offset) in batch.iter().zip(offsets) {
                    self.held_until(b, (until as u64).saturating_add(offset));
                }
                Ok(HoldReply::Held)
            }
            [0, v] if v >= 0 => Ok(HoldReply::Stale(v as u64)),
            _ => Err(Error::Reply {
                detail: format!("{reply:?}"),
            }),
        }
    }
}

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
    /// spread layout, one script per bucket, all sent at once (the buckets
    /// may live on different nodes), and a slot a wait booked before stays
    /// its own: a node that does not answer within the deadline leaves its
    /// buckets alone unheld ([`Error::NotAllHeld`] names them).
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
        let micros = duration.as_nanos().div_ceil(u128::from(MICROS));
        let micros = u64::try_from(micros).unwrap_or(u64::MAX);
        if shared.options.layout == Layout::Spread {
            return self.hold_off_spread(shard, micros).await;
        }
        // Bounded as a decision is: a Redis that stopped answering must not
        // hold the caller (the fallback, above, holds off at once).
        within(
            shared.options.deadline,
            self.hold_off_attempts(shard, micros),
        )
        .await
    }

    /// The buckets a hold-off of `shard` (every bucket, without one) holds
    /// under `split`.
    fn held_buckets(shard: Option<&Shard>, split: &Split) -> Vec<u32> {
        match shard {
            None => (0..split.buckets).collect(),
            Some(shard) => (shard.buckets().iter().copied())
                .filter(|&b| b < split.buckets)
                .collect(),
        }
    }

    /// The held buckets come back one after another over one interval, as
    /// in process: bucket i of `count` `stagger · i` after the instant, or
    /// `micros` (the hold-off's length) if that is sooner (`turn` of
    /// `src/draw/`).
    fn offsets(split: &Split, count: usize, micros: u64) -> Vec<u64> {
        let stagger = (split.interval() / MICROS) / count.max(1) as u64;
        (0..count as u64)
            .map(|i| turn(stagger, i, micros))
            .collect()
    }

    /// The one-slot layout's hold-off: one script over every bucket, asked
    /// again under a quota another process set meanwhile.
    async fn hold_off_attempts(&self, shard: Option<Shard>, micros: u64) -> Result<(), Error> {
        let shared = &self.shared;
        for _ in 0..ATTEMPTS {
            let (version, split) = shared.current();
            let buckets = Self::held_buckets(shard.as_ref(), &split);
            if buckets.is_empty() {
                return Ok(());
            }
            let offsets = Self::offsets(&split, buckets.len(), micros);
            match (shared.hold_batch(&buckets, &offsets, (version, &split), micros)).await? {
                HoldReply::Held => return Ok(()),
                // Another process changed the quota first: held again
                // under the new one (holding twice is holding once).
                HoldReply::Stale(v) => shared.stale(v).await?,
            }
        }
        Err(Error::GaveUp {
            detail: "the quota kept changing under the hold-off".to_owned(),
        })
    }

    /// The spread layout's hold-off: one script per bucket, each in its own
    /// slot, all sent at once and bounded together by the deadline, so that
    /// a node that does not answer costs its own buckets' hold-off alone.
    /// Every bucket that answers is held; the others are named in
    /// [`Error::NotAllHeld`] (or, when none was held, the first error as it
    /// is).
    async fn hold_off_spread(&self, shard: Option<Shard>, micros: u64) -> Result<(), Error> {
        let shared = &self.shared;
        let deadline = super::after(Instant::now(), shared.options.deadline);
        // No quota is set live in this layout: the split never changes.
        let (version, split) = shared.current();
        let buckets = Self::held_buckets(shard.as_ref(), &split);
        let offsets = Self::offsets(&split, buckets.len(), micros);
        let mut calls = JoinSet::new();
        for (i, (&b, &offset)) in buckets.iter().zip(&offsets).enumerate() {
            let shared = Arc::clone(shared);
            calls.spawn(async move {
                let (bucket, offset) = ([b], [offset]);
                let held = shared.hold_batch(&bucket, &offset, (version, &split), micros);
                let held = match held.await {
                    Ok(HoldReply::Held) => Ok(()),
                    Ok(HoldReply::Stale(v)) => shared.stale(v).await,
                    Err(error) => Err(error),
                };
                (i, held)
            });
        }
        // Per bucket: `None` until it answers.
        let mut answers: Vec<Option<Result<(), Error>>> = vec![None; buckets.len()];
        // Dropping the set, at the deadline, cancels the calls still out
        // (a script already sent may still hold its bucket: only ever
        // fewer tokens).
        while let Ok(Some(joined)) = timeout_at(deadline, calls.join_next()).await {
            let (i, held) = joined.unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()));
            answers[i] = Some(held);
        }
        let timeout = Error::Timeout {
            after: shared.options.deadline,
        };
        let mut unheld = Vec::new();
        let mut first = None;
        for (&b, answer) in buckets.iter().zip(answers) {
            if let Err(error) = answer.unwrap_or_else(|| Err(timeout.clone())) {
                unheld.push(b);
                first.get_or_insert(error);
            }
        }
        match first {
            None => Ok(()),
            Some(error) if unheld.len() == buckets.len() => Err(error),
            Some(error) => Err(Error::NotAllHeld {
                unheld,
                error: Box::new(error),
            }),
        }
    }
}
