//! Waiting for a permit: the future [`InFlight::acquire`] returns.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
#[cfg(feature = "wait")]
use std::time::Duration;

use super::error::{RejectReason, Rejected};
use super::pools::Taken;
use super::queue::{Entered, Key};
use super::{InFlight, Permit};
use crate::Shard;

/// A wait for a permit, to `.await`: made by [`InFlight::acquire`],
/// bounded by `within` (feature `wait`).
///
/// Awaited, it takes the seats at once when the tenant's pools have them
/// and nobody queues for them; otherwise it queues (see
/// [Queues](crate::inflight#queues)) and is woken when a permit of its pools is
/// released and its turn has come. It never polls.
///
/// Dropping it before it completes leaves no trace: it leaves its queues,
/// and a permit handed to it as it was dropped goes back to its pools.
///
/// # Errors
/// [`Rejected`]: at once for a request of no seat or of more than the
/// tenant's pools hold ([`RejectReason::NeverFits`]), or when the queues
/// of its pools are full ([`RejectReason::QueueFull`]); with a bound,
/// when it passes ([`RejectReason::TimedOut`]).
#[must_use = "an acquire does nothing until it is awaited"]
pub struct Acquire<'a> {
    inflight: &'a InFlight,
    state: State,
    #[cfg(feature = "wait")]
    max_wait: Option<Duration>,
    #[cfg(feature = "wait")]
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

#[derive(Debug)]
enum State {
    Start(Shard, u32),
    Refused(Rejected),
    Queued(Key),
    Done,
}

impl<'a> Acquire<'a> {
    pub(super) fn new(inflight: &'a InFlight, start: Result<(Shard, u32), Rejected>) -> Self {
        Acquire {
            inflight,
            state: match start {
                Ok((shard, seats)) => State::Start(shard, seats),
                Err(rejected) => State::Refused(rejected),
            },
            #[cfg(feature = "wait")]
            max_wait: None,
            #[cfg(feature = "wait")]
            sleep: None,
        }
    }

    /// Waits at most `max_wait` (on tokio's timer) from when it starts to
    /// queue, then gives up with [`RejectReason::TimedOut`]. A permit
    /// handed to it as the time ran out is kept.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shuffle_limiter::inflight::{InFlight, RejectReason};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let inflight = InFlight::builder().concurrency(1).build()?;
    /// let held = inflight.acquire("t").await?;
    /// let late = inflight.acquire("t").within(Duration::from_millis(50)).await;
    /// assert!(matches!(late.unwrap_err().reason(), RejectReason::TimedOut { .. }));
    /// drop(held);
    /// assert!(inflight.acquire("t").within(Duration::from_millis(50)).await.is_ok());
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(feature = "wait")]
    #[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
    pub fn within(mut self, max_wait: Duration) -> Self {
        self.max_wait = Some(max_wait);
        self
    }

    fn permit(&mut self, taken: Taken) -> Poll<Result<Permit<'a>, Rejected>> {
        self.state = State::Done;
        Poll::Ready(Ok(Permit {
            inflight: self.inflight,
            taken,
        }))
    }

    fn refuse(&mut self, reason: RejectReason) -> Poll<Result<Permit<'a>, Rejected>> {
        self.state = State::Done;
        Poll::Ready(Err(Rejected::new(reason)))
    }
}

impl<'a> Future for Acquire<'a> {
    type Output = Result<Permit<'a>, Rejected>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let inflight = this.inflight;
        let key = match this.state {
            State::Done => panic!("an in-flight Acquire was polled after it completed"),
            State::Refused(rejected) => return this.refuse(rejected.reason),
            State::Start(shard, seats) => {
                if let Some(taken) = inflight.try_take(shard.buckets(), seats) {
                    return this.permit(taken);
                }
                let pools = &inflight.pools;
                let entered = inflight
                    .with_room(|room| room.enter(pools, shard.buckets(), seats, cx.waker()));
                match entered {
                    Entered::Served(taken) => return this.permit(taken),
                    Entered::Full => {
                        let max_queue = inflight.max_queue;
                        return this.refuse(RejectReason::QueueFull { max_queue });
                    }
                    Entered::Queued(key) => {
                        this.state = State::Queued(key);
                        key
                    }
                }
            }
            State::Queued(key) => {
                if let Some(taken) = inflight.with_room(|room| room.poll(key, cx.waker())) {
                    return this.permit(taken);
                }
                key
            }
        };
        #[cfg(feature = "wait")]
        if let Some(max_wait) = this.max_wait {
            let sleep = (this.sleep).get_or_insert_with(|| Box::pin(tokio::time::sleep(max_wait)));
            if sleep.as_mut().poll(cx).is_ready() {
                let pools = &inflight.pools;
                return match inflight.with_room(|room| room.leave(pools, key)) {
                    Some(taken) => this.permit(taken),
                    None => this.refuse(RejectReason::TimedOut { max_wait }),
                };
            }
        }
        let _ = key;
        Poll::Pending
    }
}

impl Drop for Acquire<'_> {
    fn drop(&mut self) {
        if let State::Queued(key) = self.state {
            let pools = &self.inflight.pools;
            self.inflight.with_room(|room| {
                if let Some(taken) = room.leave(pools, key) {
                    room.give_back(pools, &taken);
                }
            });
        }
    }
}

impl fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct("Acquire");
        s.field("state", &self.state);
        #[cfg(feature = "wait")]
        s.field("max_wait", &self.max_wait);
        s.finish_non_exhaustive()
    }
}
