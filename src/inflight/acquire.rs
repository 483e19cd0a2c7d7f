//! Waiting for a permit: the futures [`InFlight::acquire`] and
//! [`InFlight::acquire_owned`] return, both driven by one wait.

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
#[cfg(feature = "wait")]
use std::time::Duration;

use super::error::{RejectReason, Rejected};
use super::queue::{Entered, Key};
use super::taken::Taken;
use super::{InFlight, OwnedPermit, Permit};
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
    wait: Wait<&'a InFlight>,
}

/// [`Acquire`] for an `Arc<InFlight>`: made by
/// [`InFlight::acquire_owned`], it borrows nothing, so a spawned task or a
/// tower layer can hold it, and gives an [`OwnedPermit`]. It waits, is
/// bounded and is cancelled exactly as [`Acquire`].
///
/// ```
/// use std::sync::Arc;
/// use shuffle_limiter::inflight::InFlight;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let inflight = Arc::new(InFlight::builder().concurrency(1).build()?);
/// let held = inflight.try_acquire_owned("t")?;
/// let task = tokio::spawn(inflight.acquire_owned("t")); // 'static
/// tokio::task::yield_now().await; // it queues
/// drop(held);
/// assert_eq!(task.await??.seats(), 1);
/// assert_eq!(inflight.available(), 1);
/// # Ok(())
/// # }
/// ```
///
/// # Errors
/// As [`Acquire`].
#[must_use = "an acquire does nothing until it is awaited"]
pub struct AcquireOwned {
    wait: Wait<Arc<InFlight>>,
}

/// The wait itself, over a borrowed or a shared limit: what it gets is
/// made into a permit of the caller's kind.
struct Wait<L: Deref<Target = InFlight>> {
    inflight: L,
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

impl<L: Deref<Target = InFlight>> Wait<L> {
    fn new(inflight: L, start: Result<(Shard, u32), Rejected>) -> Self {
        Wait {
            #[cfg(feature = "wait")]
            max_wait: inflight.max_wait,
            inflight,
            state: match start {
                Ok((shard, seats)) => State::Start(shard, seats),
                Err(rejected) => State::Refused(rejected),
            },
            #[cfg(feature = "wait")]
            sleep: None,
        }
    }

    fn done(&mut self, taken: Taken) -> Poll<Result<Taken, Rejected>> {
        self.state = State::Done;
        Poll::Ready(Ok(taken))
    }

    fn refuse(&mut self, reason: RejectReason) -> Poll<Result<Taken, Rejected>> {
        self.state = State::Done;
        Poll::Ready(Err(Rejected::new(reason)))
    }

    fn poll_taken(&mut self, cx: &mut Context<'_>) -> Poll<Result<Taken, Rejected>> {
        let inflight = &*self.inflight;
        let key = match self.state {
            State::Done => panic!("an in-flight Acquire was polled after it completed"),
            State::Refused(rejected) => return self.refuse(rejected.reason()),
            State::Start(shard, seats) => {
                if let Some(taken) = inflight.try_take(&shard, seats) {
                    return self.done(taken);
                }
                // A zero bound waits for none: it takes no place in a
                // queue, where it would hold up the callers after it and
                // catch a permit freed before its timer's first tick.
                #[cfg(feature = "wait")]
                if let Some(max_wait) = self.max_wait.filter(Duration::is_zero) {
                    return self.refuse(RejectReason::TimedOut { max_wait });
                }
                let pools = &inflight.pools;
                let entered = inflight
                    .with_room(|room| room.enter(pools, shard.buckets(), seats, cx.waker()));
                match entered {
                    Entered::Served(taken) => return self.done(taken),
                    Entered::Full => {
                        let max_queue = inflight.max_queue;
                        return self.refuse(RejectReason::QueueFull { max_queue });
                    }
                    Entered::Queued(key) => {
                        self.state = State::Queued(key);
                        key
                    }
                }
            }
            State::Queued(key) => {
                if let Some(taken) = inflight.with_room(|room| room.poll(key, cx.waker())) {
                    return self.done(taken);
                }
                key
            }
        };
        #[cfg(feature = "wait")]
        if let Some(max_wait) = self.max_wait {
            let sleep = (self.sleep).get_or_insert_with(|| Box::pin(tokio::time::sleep(max_wait)));
            if sleep.as_mut().poll(cx).is_ready() {
                let inflight = &*self.inflight;
                let pools = &inflight.pools;
                return match inflight.with_room(|room| room.leave(pools, key)) {
                    Some(taken) => self.done(taken),
                    None => self.refuse(RejectReason::TimedOut { max_wait }),
                };
            }
        }
        let _ = key;
        Poll::Pending
    }
}

impl<L: Deref<Target = InFlight>> Drop for Wait<L> {
    fn drop(&mut self) {
        if let State::Queued(key) = self.state {
            let inflight = &*self.inflight;
            let pools = &inflight.pools;
            inflight.with_room(|room| {
                if let Some(taken) = room.leave(pools, key) {
                    room.give_back(pools, &taken);
                }
            });
        }
    }
}

impl<L: Deref<Target = InFlight>> Wait<L> {
    fn debug(&self, name: &str, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut s = f.debug_struct(name);
        s.field("state", &self.state);
        #[cfg(feature = "wait")]
        s.field("max_wait", &self.max_wait);
        s.finish_non_exhaustive()
    }
}

impl<'a> Acquire<'a> {
    pub(super) fn new(inflight: &'a InFlight, start: Result<(Shard, u32), Rejected>) -> Self {
        Acquire {
            wait: Wait::new(inflight, start),
        }
    }

    /// Waits at most `max_wait` (on tokio's timer) from when it starts to
    /// queue, then gives up with [`RejectReason::TimedOut`]; this replaces
    /// the limit's own [`max_wait`](super::Builder::max_wait). A permit
    /// handed to it as the time ran out is kept. `Duration::ZERO` waits for
    /// none: a permit free now, or `TimedOut` on the first poll, without
    /// queueing.
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
        self.wait.max_wait = Some(max_wait);
        self
    }
}

impl<'a> Future for Acquire<'a> {
    type Output = Result<Permit<'a>, Rejected>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let wait = &mut self.wait;
        wait.poll_taken(cx).map_ok(|taken| Permit {
            inflight: wait.inflight,
            taken,
        })
    }
}

impl fmt::Debug for Acquire<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.wait.debug("Acquire", f)
    }
}

impl AcquireOwned {
    pub(super) fn new(inflight: Arc<InFlight>, start: Result<(Shard, u32), Rejected>) -> Self {
        AcquireOwned {
            wait: Wait::new(inflight, start),
        }
    }

    /// Waits at most `max_wait`, as [`Acquire::within`].
    #[cfg(feature = "wait")]
    #[cfg_attr(docsrs, doc(cfg(feature = "wait")))]
    pub fn within(mut self, max_wait: Duration) -> Self {
        self.wait.max_wait = Some(max_wait);
        self
    }
}

impl Future for AcquireOwned {
    type Output = Result<OwnedPermit, Rejected>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let wait = &mut self.wait;
        wait.poll_taken(cx).map_ok(|taken| OwnedPermit {
            inflight: Arc::clone(&wait.inflight),
            taken,
        })
    }
}

impl fmt::Debug for AcquireOwned {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.wait.debug("AcquireOwned", f)
    }
}
