//! The one wait every method of the module comes down to: book the
//! earliest slot, sleep until it, keep it or give it back.

use std::time::Duration;

use tokio::time::{Instant, sleep_until, timeout_at};

use super::Jitter;
use crate::plan::whom::Whom;
use crate::store::Store;
use crate::{DenialReason, Denied, Grant, Limiter};

impl<S: Store> Limiter<S> {
    /// The one wait: draw now; on a denial, book the earliest slot the
    /// shard can give (the draw as it will be then, applied now, so that
    /// later callers line up behind), sleep exactly until it (plus jitter),
    /// and keep the grant. A booking that another caller took first
    /// sends the wait to the next slot, without sleeping. A bounded wait
    /// books only a slot inside its bound, and otherwise returns at once.
    ///
    /// A denial by the store's failure policy (Redis down or late) is no
    /// slot to line up for: the wait sleeps until its retry time (when the
    /// store is next tried), within its bound, and draws again from now.
    /// Nor is a spill bucket's room above its reserve, which no booking
    /// takes ahead: a borrower's wait sleeps until then and draws again.
    ///
    /// A booking made under a quota that changed while the wait slept
    /// is not kept: its slot was paced by the old quota, and keeping it
    /// would let the grants returned after a cut outrun the change bound.
    /// The wait books again under the new quota (the old slot stays
    /// taken: the budget loses it, never gains).
    ///
    /// Dropping the future while it sleeps gives the booking back to
    /// the buckets that paid it where nothing drew on them since (otherwise
    /// the callers behind keep their slots, and the budget loses it).
    ///
    /// A bounded wait cuts every round trip to the store at its bound (a
    /// store's own deadline may be longer): a booking unanswered then is a
    /// denial, and a slot due is kept with the quota last heard of. A bound
    /// of zero is a check: its one round trip is the store's to bound.
    pub(super) async fn wait_for(
        &self,
        whom: Whom<'_>,
        n: u32,
        max_wait: Option<Duration>,
        jitter: Jitter,
    ) -> Result<Grant, Denied> {
        let limiter = self;
        limiter.fits(&whom, n)?;
        // A deadline too far to represent is no deadline.
        let deadline = max_wait.and_then(|d| Instant::now().checked_add(d));
        // Where round trips are cut: at the bound, but for a bound of zero,
        // which waits for no slot, not for no answer (a check, whose round
        // trip the store's own deadline bounds).
        let cut = deadline.filter(|_| max_wait != Some(Duration::ZERO));
        let mut lead = Duration::ZERO;
        let mut last: Option<Denied> = None;
        loop {
            let booking = limiter.book(whom, n, lead);
            let reply = match cut {
                None => booking.await,
                Some(d) => match timeout_at(d, booking).await {
                    Ok(reply) => reply,
                    // The store did not answer within the bound (it may
                    // still book: a slot the budget loses, never gains).
                    Err(_) => {
                        return Err(last.unwrap_or(Denied {
                            retry_after: max_wait.unwrap_or_default(),
                            bucket: whom.shard.buckets()[0],
                            reason: DenialReason::StoreUnavailable,
                            alone: false,
                        }));
                    }
                },
            };
            // Times count from the answer: the store drew at or before it,
            // so the wait never ends before the slot it booked.
            let answered = Instant::now();
            let refused = match reply {
                Ok(held) if held.ready_in().is_zero() => return Ok(held.keep()),
                Ok(held) => {
                    let ready = answered + held.ready_in();
                    let wake = ready + jitter.sample();
                    sleep_until(deadline.map_or(wake, |d| wake.min(d.max(ready)))).await;
                    // Learning of a change while it slept, within the bound
                    // (or the timer's millisecond, when the slot is due at
                    // it); unanswered, the quota last heard of decides, as
                    // when the store's own deadline passes.
                    let caught_up = limiter.catch_up();
                    match cut {
                        None => caught_up.await,
                        Some(d) => {
                            let _ = timeout_at(d.max(Instant::now() + TICK), caught_up).await;
                        }
                    }
                    if held.current() {
                        return Ok(held.keep());
                    }
                    held.forget();
                    lead = Duration::ZERO;
                    continue;
                }
                Err(refused) => refused,
            };
            let denied = refused.denied;
            if let DenialReason::NeverFits { .. } = denied.reason() {
                // Weighed again by the store (under a quota another process
                // or a racing change set): no wait grants it.
                return Err(denied);
            }
            last = Some(denied);
            // The grant can come `retry_after` after the instant drawn at:
            // `lead` on for a denial the store drew there, now for one its
            // failure policy made.
            let until = if refused.by_policy {
                denied.retry_after()
            } else {
                lead.saturating_add(denied.retry_after())
            };
            let at = answered.checked_add(until).filter(|_| until <= FAR);
            if deadline.is_some_and(|deadline| at.is_none_or(|at| at > deadline)) {
                return Err(Denied {
                    retry_after: until,
                    ..denied
                });
            }
            // A spill bucket lends to no booking ahead (its owners would
            // be below their reserve until the slot): a slot it names is
            // drawn at, not booked.
            let lent = limiter.lends(&whom, &denied);
            match at {
                Some(_) if !refused.by_policy && !lent => {
                    lead = until;
                    limiter.record_wait(&denied, lead);
                    // Answered without awaiting, in process: yield in turn.
                    tokio::task::consume_budget().await;
                }
                // No slot to line up for: a failure policy's retry time (the
                // store is tried again then), a spill bucket's room above
                // its reserve, or a denial that does not end within a
                // year. Sleep, then draw again from now.
                // Jittered too, within the bound (checked above): the
                // waiters an outage denied together do not all come back
                // at the instant the store is tried again.
                _ => {
                    let at = at.unwrap_or(answered + FAR);
                    limiter.record_wait(&denied, at - answered);
                    let wake = at + jitter.sample();
                    sleep_until(deadline.map_or(wake, |d| wake.min(d.max(at)))).await;
                    lead = Duration::ZERO;
                }
            }
        }
    }
}

/// The longest a wait books ahead or sleeps at once: a year, well
/// within what tokio's timer holds.
const FAR: Duration = Duration::from_secs(86_400 * 365);

/// The resolution of tokio's timer: what a bounded wait may take past its
/// bound.
const TICK: Duration = Duration::from_millis(1);
