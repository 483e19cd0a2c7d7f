//! Tokens given back to a Redis limiter's buckets: a refund of a grant, to
//! the generation of each bucket that paid it (`refund.lua`), and a
//! booking a waiter gave up (`giveback.lua`).

use std::sync::Arc;

use ::redis::aio::ConnectionLike;

use super::error::{Error, within};
use super::layout::Layout;
use super::lua::Invocation;
use super::quota::{ATTEMPTS, run};
use super::script::MICROS;
use super::store::RedisStore;
use super::store::Shared;
use crate::grant::Booked;
use crate::store::sealed::Local;
use crate::{Grant, Payment, Refunded};

impl<Conn, L> Shared<Conn, L>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local,
{
    /// Gives a booking back in the background, where a runtime runs
    /// (without one, its tokens stay taken: the budget can only lose).
    pub(super) fn give_back(shared: &Arc<Self>, booked: Booked)
    where
        Conn: 'static,
        L: 'static,
    {
        // A policy's grant is used at once, never booked; were one given
        // back, Redis never paid it.
        if booked.grant.payments().is_empty() || booked.grant.generation().0 {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let shared = Arc::clone(shared);
        let deadline = shared.options.deadline;
        let give_back = async move {
            let (version, split) = shared.current();
            let payments = booked.grant.payments();
            let mut written = booked.written.iter();
            for batch in shared.batches(payments) {
                let mut invocation = shared.changes.give_back.prepare_invoke();
                for payment in batch {
                    invocation.key(shared.script.key(payment.bucket()).unwrap_or_default());
                }
                invocation.key(shared.script.quota_key(batch[0].bucket()));
                let interval = split.interval() / MICROS;
                let held = shared.held_arg(&mut invocation, interval);
                invocation.arg(version).arg(held);
                for (payment, written) in batch.iter().zip(&mut written) {
                    let cost = u64::from(payment.tokens()).saturating_mul(interval);
                    let capacity = u64::from(split.burst_of(payment.bucket())) * interval;
                    invocation.arg(*written).arg(cost).arg(capacity);
                }
                // A failure leaves the tokens taken, which is safe, and so
                // does a quota changed since (nothing given back then): a
                // give-back adopts no quota (in the spread layout there is
                // none to adopt).
                if let Ok((1, _)) = run(&invocation, &shared.connection).await {
                    shared.forget(batch);
                }
            }
        };
        // Bounded as a refund is: a Redis that stopped answering must not
        // keep a task per abandoned wait (what is not given back by then
        // stays taken).
        runtime.spawn(tokio::time::timeout(deadline, give_back));
    }

    /// Adds the hold-off hash to the keys of a script that gives tokens
    /// back, where the layout keeps one (no give-back brings a token
    /// before a hold-off's instant), and returns the argument that says
    /// so: the interval in microseconds (at least 1), or 0 without it.
    fn held_arg(&self, invocation: &mut Invocation<'_>, interval: u64) -> u64 {
        match self.script.held_key() {
            Some(held) => {
                invocation.key(held);
                interval.max(1)
            }
            None => 0,
        }
    }

    /// Forgets what this process knew of the buckets that were just given
    /// tokens back: a remembered denial or room would deny what they can
    /// now pay.
    fn forget(&self, payments: &[Payment]) {
        for payment in payments {
            self.denials.forget(payment.bucket());
            self.rooms.forget(payment.bucket());
        }
    }

    /// The payments one script can take together: all of them in one slot,
    /// one at a time when each bucket has a slot of its own.
    pub(super) fn batches<'p>(&self, payments: &'p [Payment]) -> std::slice::Chunks<'p, Payment> {
        let size = match self.options.layout {
            Layout::OneSlot => payments.len().max(1),
            Layout::Spread => 1,
        };
        payments.chunks(size)
    }
}

impl<Conn, L> RedisStore<Conn, L>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local + 'static,
{
    /// Gives back every token `grant` took (the [`Limit::refund`] of a
    /// Redis limiter), as [`ShardedLimiter::refund`] does, in one script per
    /// batch: nothing to a bucket that a change of N removed since the
    /// grant, or that this limiter does not have. On a failed round trip
    /// nothing is given back (but by the scripts that ran before it, in the
    /// spread layout, one bucket each); past the limiter's deadline
    /// (`Error::Timeout`) a script already sent may still give back its
    /// part, never more than the grant took.
    ///
    /// [`Limit::refund`]: crate::Limit::refund
    /// [`ShardedLimiter::refund`]: crate::ShardedLimiter::refund
    pub(super) async fn refund_in_redis(&self, grant: Grant) -> Result<Refunded, Error> {
        let shared = &self.shared;
        let tokens = grant.tokens();
        if grant.generation().0 {
            // The local fallback paid it: Redis never did.
            return Ok(match &shared.fallback {
                Some(local) => local.refund(grant),
                None => Refunded {
                    given: 0,
                    gone: tokens,
                },
            });
        }
        let refunds: Vec<_> = grant
            .refunds(tokens)
            .expect("a grant's own tokens")
            .collect();
        let refund = async {
            let mut refunded = Refunded::default();
            for batch in shared.batches(&refunds) {
                let given = self.refund_batch(batch, grant.generation().1).await?;
                for (payment, given) in batch.iter().zip(given) {
                    refunded.add(payment.tokens(), given);
                }
            }
            Ok(refunded)
        };
        // Bounded as a decision is: a Redis that stopped answering must not
        // hold the caller (a refund lost on the way only leaves budget
        // unused).
        within(shared.options.deadline, refund).await
    }

    /// Gives back the payments of one script call, under the quota Redis
    /// holds (read again when it changed), of a grant drawn under the
    /// quota's version `generation`: per payment, whether its bucket is the
    /// one that paid (a bucket past N, or added since, is not).
    async fn refund_batch(&self, batch: &[Payment], generation: u64) -> Result<Vec<bool>, Error> {
        let shared = &self.shared;
        for _ in 0..ATTEMPTS {
            let (version, split) = shared.current();
            let here: Vec<Payment> = batch
                .iter()
                .copied()
                .filter(|p| p.bucket() < split.buckets)
                .collect();
            if here.is_empty() {
                return Ok(vec![false; batch.len()]);
            }
            let mut invocation = shared.changes.refund.prepare_invoke();
            for payment in &here {
                invocation.key(shared.script.key(payment.bucket()).unwrap_or_default());
            }
            invocation.key(shared.script.quota_key(here[0].bucket()));
            let interval = split.interval() / MICROS;
            let held = shared.held_arg(&mut invocation, interval);
            invocation.arg(version).arg(generation).arg(held);
            for payment in &here {
                let capacity = u64::from(split.burst_of(payment.bucket())) * interval;
                invocation
                    .arg(u64::from(payment.tokens()).saturating_mul(interval))
                    .arg(capacity);
            }
            let reply: Vec<i64> = invocation
                .invoke_async(&mut shared.connection.clone())
                .await
                .map_err(Error::from_redis)?;
            match reply[..] {
                [1, _, ref same @ ..] if same.len() == here.len() => {
                    let given: Vec<Payment> = (here.iter().zip(same))
                        .filter(|&(_, &same)| same == 1)
                        .map(|(p, _)| *p)
                        .collect();
                    shared.forget(&given);
                    let mut same = here.iter().zip(same).map(|(_, &same)| same == 1);
                    return Ok(batch
                        .iter()
                        .map(|p| p.bucket() < split.buckets && same.next() == Some(true))
                        .collect());
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
            detail: "the quota kept changing under refund".to_owned(),
        })
    }
}
