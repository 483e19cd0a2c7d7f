//! A wait's booking, through the limiter: the store books the slot; the
//! limiter tells whether a change made since has left it stale, and gives
//! it back when the waiter drops it. The waits call these alone, so they
//! work the same over every store without reaching into one.

use std::future::Future;
use std::time::Duration;

use super::Limiter;
use crate::denied::Denied;
use crate::grant::{Booked, Grant};
use crate::plan::whom::Whom;
use crate::request::Request;
use crate::store::Store;
use crate::store::sealed::NotReserved;

impl<S> Limiter<S> {
    /// Whose buckets `request` draws on now.
    #[inline]
    pub(crate) fn whom<'a>(&self, request: &'a Request<'_>) -> Whom<'a> {
        self.core.whom(request)
    }

    /// Counts a wait of `nap` before asking again after `denied`.
    pub(crate) fn record_wait(&self, denied: &Denied, nap: Duration) {
        self.core.metrics.waiting(denied, nap);
    }
}

impl<S: Store> Limiter<S> {
    /// Whether `denied` names a spill bucket of `whom`'s shard under the N
    /// in force (the shard the store drew on, resolved again after a
    /// change of N): a lender's room, which no booking takes ahead.
    pub(crate) fn lends(&self, whom: &Whom<'_>, denied: &Denied) -> bool {
        let shard = self.core.shard_now(whom);
        shard.spill().contains(&denied.bucket)
    }

    /// Whether `whom`'s shard could ever pay `n` tokens in this store.
    pub(crate) fn fits(&self, whom: &Whom<'_>, n: u32) -> Result<(), Denied> {
        (self.store).check_weight(&self.core, &self.core.shard_now(whom), n)
    }

    /// Books `n` tokens for `whom`: the draw as it will be `lead` from now,
    /// applied now, so that later callers line up behind it. The booking
    /// is held until kept; dropped, it goes back where it can.
    pub(crate) async fn book(
        &self,
        whom: Whom<'_>,
        n: u32,
        lead: Duration,
    ) -> Result<Held<'_, S>, NotReserved> {
        // Read before the store draws: a change that lands in between
        // makes the booking stale, never one made under the new split
        // look old.
        let tightenings = self.core.split.tightenings();
        let booked = self.store.book(&self.core, whom, n, lead).await?;
        Ok(Held {
            limiter: self,
            booked: Some(booked),
            tightenings,
        })
    }

    /// Brings the limiter up to date with the quota in force where the
    /// buckets are kept (a change by another process, over Redis), so that
    /// [`Held::current`] sees it.
    pub(crate) fn catch_up(&self) -> impl Future<Output = ()> + Send + 'static {
        self.store.catch_up(&self.core)
    }
}

/// A booking a wait holds while it sleeps: given back if the wait is
/// dropped, kept once it is due.
pub(crate) struct Held<'a, S: Store> {
    limiter: &'a Limiter<S>,
    booked: Option<Booked>,
    /// How many changes had tightened the split when it was booked.
    tightenings: u64,
}

impl<S: Store> Held<'_, S> {
    /// How long from when the store drew until the grant may be used.
    pub(crate) fn ready_in(&self) -> Duration {
        self.booked.as_ref().map_or(Duration::ZERO, |b| b.ready_in)
    }

    /// Whether no change since it was booked did more than raise the rate
    /// (a cut, a change of N: see `LiveSplit::tightenings`), and no
    /// hold-off since covers its slot.
    pub(crate) fn current(&self) -> bool {
        let limiter = self.limiter;
        limiter.core.split.tightenings() == self.tightenings
            && (self.booked.as_ref())
                .is_none_or(|booked| !limiter.store.held_over(&limiter.core, booked))
    }

    /// The grant, to use now.
    pub(crate) fn keep(mut self) -> Grant {
        self.booked.take().expect("held until kept").grant
    }

    /// Lets the booking go without giving it back: it was paid under
    /// another split, whose cost a give-back now would get wrong.
    pub(crate) fn forget(mut self) {
        self.booked = None;
    }
}

impl<S: Store> Drop for Held<'_, S> {
    fn drop(&mut self) {
        if let Some(booked) = self.booked.take()
            && self.current()
        {
            let limiter = self.limiter;
            limiter.store.give_back(&limiter.core, booked);
        }
    }
}

#[cfg(test)]
#[path = "booking_tests.rs"]
mod tests;
