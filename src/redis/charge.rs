//! A grant settled above what it took, over Redis: the tokens beyond it
//! charged to the buckets that paid it (see
//! [`Limit::settle`](crate::Limit::settle)).

use ::redis::aio::ConnectionLike;

use super::error::{Error, within};
use super::quota::ATTEMPTS;
use super::script::MICROS;
use super::store::RedisStore;
use crate::store::sealed::Local;
use crate::{Grant, Payment};

pub(super) const CHARGE_LUA: &str =
    concat!(include_str!("prelude.lua"), include_str!("charge.lua"));

impl<Conn, L> RedisStore<Conn, L>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local + 'static,
{
    /// Charges up to `tokens` more to the buckets that paid `grant`, in the
    /// order they paid, within the deadline: one script for them all (one
    /// per bucket in the spread layout); a grant of the local fallback, to
    /// the fallback. The tokens charged.
    pub(super) async fn charge_in_redis(&self, grant: Grant, tokens: u32) -> Result<u32, Error> {
        let shared = &self.shared;
        if grant.generation().0 {
            // The local fallback paid it: Redis never did.
            return Ok(shared
                .fallback
                .as_ref()
                .map_or(0, |local| local.charge(grant, tokens)));
        }
        let payers: Vec<Payment> = (grant.payments().iter().copied())
            .filter(|p| p.tokens() > 0)
            .collect();
        let charge = async {
            let mut left = tokens;
            for batch in shared.batches(&payers) {
                if left == 0 {
                    break;
                }
                left -= self.charge_batch(batch, grant.generation().1, left).await?;
            }
            Ok(tokens - left)
        };
        within(shared.options.deadline, charge).await
    }

    /// Charges up to `tokens` to the buckets of one script call, under the
    /// quota Redis holds (read again when it changed): the tokens charged.
    async fn charge_batch(
        &self,
        batch: &[Payment],
        generation: u64,
        tokens: u32,
    ) -> Result<u32, Error> {
        let shared = &self.shared;
        for _ in 0..ATTEMPTS {
            let (version, split) = shared.current();
            let here: Vec<u32> = (batch.iter().map(Payment::bucket))
                .filter(|&b| b < split.buckets)
                .collect();
            let Some(&first) = here.first() else {
                return Ok(0);
            };
            let mut invocation = shared.changes.charge.prepare_invoke();
            for &b in &here {
                invocation.key(shared.script.key(b).unwrap_or_default());
            }
            invocation.key(shared.script.quota_key(first));
            let interval = split.interval() / MICROS;
            invocation
                .arg(version)
                .arg(generation)
                .arg(tokens)
                .arg(interval);
            for &b in &here {
                invocation.arg(u64::from(split.burst_of(b)) * interval);
            }
            let reply: Vec<i64> = invocation
                .invoke_async(&mut shared.connection.clone())
                .await
                .map_err(Error::from_redis)?;
            match reply[..] {
                [1, _, ref taken @ ..] if taken.len() == here.len() => {
                    let taken: i64 = taken.iter().sum();
                    return u32::try_from(taken)
                        .ok()
                        .filter(|&taken| taken <= tokens)
                        .ok_or_else(|| Error::Reply {
                            detail: format!("charged {taken} of {tokens}"),
                        });
                }
                [0, v] if v >= 0 => shared.stale(v as u64).await?,
                _ => {
                    return Err(Error::Reply {
                        detail: format!("{reply:?}"),
                    });
                }
            }
        }
        Err(Error::GaveUp {
            detail: "the quota kept changing under the charge".to_owned(),
        })
    }
}
