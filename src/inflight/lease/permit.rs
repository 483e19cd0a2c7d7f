//! A permit over Redis: a lease renewed in the background while held, and
//! given back when dropped.

use std::fmt;
use std::sync::Arc;

use ::redis::aio::ConnectionLike;
use tokio::sync::{oneshot, watch};
use tokio::time::{Instant, timeout, timeout_at};

use super::Shared;
use crate::inflight::OwnedPermit;

/// Seats of a tenant's pools held by a fleet, until the lease is dropped.
///
/// Made by [`RedisInFlight`](super::RedisInFlight). While it is held, a
/// task renews its lease every [renewal
/// interval](super::LeaseOptions::renewal_interval); dropping it ends the
/// task, which gives the seats back in Redis (a release that fails is left
/// to expire within the TTL). Release and renewal touch only the lease's
/// own [token](Lease::token), so a late release never frees another
/// holder's seats.
///
/// A renewal that finds the lease gone (it expired while this process
/// stalled, or someone deleted the key), or a whole TTL since the last
/// renewal confirmed was sent (Redis unreachable, renewals failing or
/// hanging), marks it lost, a deadline before that TTL ends (less when
/// the renewal interval leaves less room): [`is_lost`](Lease::is_lost) says so, and
/// [`lost`](Lease::lost) completes, so that the holder can stop the work
/// the permit guarded. Its seats may then be someone else's.
#[must_use = "a lease is given back as soon as it is dropped"]
pub struct Lease {
    pub(super) seats: u32,
    pub(super) pools: Vec<(u32, u32)>,
    pub(super) borrowed: bool,
    pub(super) held: Held,
}

/// What holds the seats.
pub(super) enum Held {
    /// A lease in Redis: its token, whether it is lost, and the end of the
    /// renewing task (which releases when this sender is dropped).
    Redis {
        token: u64,
        lost: watch::Receiver<bool>,
        _dropped: oneshot::Sender<()>,
    },
    /// The local fallback's permit, given back when dropped.
    Local(#[allow(dead_code)] OwnedPermit),
    /// Nothing: a [`FailOpen`](crate::redis::FailurePolicy::FailOpen) grant.
    Open,
}

/// Where a [`Lease`]'s seats are held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseSource {
    /// In Redis, for the whole fleet.
    Redis,
    /// Redis failed: in this process's share of the limit
    /// ([`FailurePolicy::LocalFallback`](crate::redis::FailurePolicy::LocalFallback)).
    Fallback,
    /// Redis failed and the policy is
    /// [`FailOpen`](crate::redis::FailurePolicy::FailOpen): nothing is held.
    Open,
}

impl Lease {
    /// The seats it holds.
    pub fn seats(&self) -> u32 {
        self.seats
    }

    /// Each pool it holds seats of, with how many: its own pools first,
    /// then any it borrowed from, each the roomiest first.
    pub fn pools(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.pools.iter().copied()
    }

    /// Whether some of its seats were borrowed from the tenant's spill
    /// pools, as [`Permit::borrowed`](crate::inflight::Permit::borrowed).
    pub fn borrowed(&self) -> bool {
        self.borrowed
    }

    /// The lease's fencing token in Redis: unique to it among every lease
    /// of the limit, growing with each (the server's clock in µs when it
    /// was given, or one past the last token when that is more, so that a
    /// server restarted from an older snapshot gives none twice); `None`
    /// when Redis does not hold it.
    /// An upstream that records the highest token it has seen can refuse a
    /// holder whose lease was lost.
    pub fn token(&self) -> Option<u64> {
        match &self.held {
            Held::Redis { token, .. } => Some(*token),
            Held::Local(_) | Held::Open => None,
        }
    }

    /// Where its seats are held.
    pub fn source(&self) -> LeaseSource {
        match &self.held {
            Held::Redis { .. } => LeaseSource::Redis,
            Held::Local(_) => LeaseSource::Fallback,
            Held::Open => LeaseSource::Open,
        }
    }

    /// Whether the lease was lost: a renewal found it gone, or none got
    /// through for a whole TTL. Never, for a lease not held in Redis.
    pub fn is_lost(&self) -> bool {
        match &self.held {
            Held::Redis { lost, .. } => *lost.borrow(),
            Held::Local(_) | Held::Open => false,
        }
    }

    /// Completes when the lease is lost (see [`is_lost`](Lease::is_lost));
    /// never for a lease not held in Redis. Race it against the guarded
    /// work to stop the work when the seats are no longer its.
    pub async fn lost(&self) {
        match &self.held {
            Held::Redis { lost, .. } => {
                let mut lost = lost.clone();
                if lost.wait_for(|&lost| lost).await.is_err() {
                    // The renewing task ended without losing it (the
                    // runtime shut down): nothing will ever say so.
                    std::future::pending::<()>().await;
                }
            }
            Held::Local(_) | Held::Open => std::future::pending().await,
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("pools", &self.pools)
            .field("borrowed", &self.borrowed)
            .field("token", &self.token())
            .field("source", &self.source())
            .field("lost", &self.is_lost())
            .finish()
    }
}

/// Starts renewing the lease `token` over `taken` (pool, seats), known to
/// live from `confirmed` on the local clock; the lease it gives back.
pub(super) fn hold<Conn>(
    shared: &Arc<Shared<Conn>>,
    token: u64,
    (taken, borrowed): (Vec<(u32, u32)>, bool),
    confirmed: Instant,
) -> Lease
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    let (lost_tx, lost) = watch::channel(false);
    let (dropped, on_drop) = oneshot::channel();
    let seats = taken.iter().map(|&(_, s)| s).sum();
    tokio::spawn(renew(
        Arc::clone(shared),
        (token, taken.clone()),
        lost_tx,
        on_drop,
        confirmed,
    ));
    Lease {
        seats,
        pools: taken,
        borrowed,
        held: Held::Redis {
            token,
            lost,
            _dropped: dropped,
        },
    }
}

/// The renewing task: every renewal interval until the lease is dropped
/// (then it releases) or lost (then it says so). Lost also as soon as a
/// whole TTL passes since the last confirmation: the server may have let
/// the lease expire by then, and given its seats to someone else.
async fn renew<Conn>(
    shared: Arc<Shared<Conn>>,
    (token, taken): (u64, Vec<(u32, u32)>),
    lost: watch::Sender<bool>,
    mut dropped: oneshot::Receiver<()>,
    mut confirmed: Instant,
) where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
{
    let taken = &taken[..];
    let release = |shared: Arc<Shared<Conn>>| async move {
        let mut connection = shared.connection.clone();
        let released = shared.scripts.release(&mut connection, token, taken);
        // A release that fails or hangs is left to expire.
        let _ = timeout(shared.deadline, released).await;
    };
    loop {
        // Unconfirmed at this instant, the lease may have expired on the
        // server. Its expiry counts from a moment after `confirmed`, but
        // this task's timer may fire late (tokio's, by up to a tick, more
        // on a busy host), and the two clocks' rates differ a little: one
        // deadline early is the margin, or half the time a renewal sent in
        // its turn has before the TTL ends, when that is less (so that a
        // lease whose renewals are answered is never lost).
        // `None`: past what the clock counts, never.
        let margin = (shared.deadline).min(shared.ttl.saturating_sub(shared.renew_every) / 2);
        let lost_at = confirmed.checked_add(shared.ttl - margin);
        let renew_at = Instant::now().checked_add(shared.renew_every);
        // Dropped (the sender gone) or not yet: either way `dropped` ends
        // the wait; otherwise the next renewal, or the lease's end, does.
        if until(earliest(renew_at, lost_at), &mut dropped)
            .await
            .is_some()
        {
            return release(shared).await;
        }
        if lost_at.is_some_and(|at| Instant::now() >= at) {
            // Not confirmed for a whole TTL: its seats may be someone
            // else's. (Released, in case it still holds them.)
            let _ = lost.send_replace(true);
            return release(shared).await;
        }
        let sent = Instant::now();
        let mut connection = shared.connection.clone();
        let renewed = shared
            .scripts
            .renew(&mut connection, token, taken, shared.ttl_micros);
        // Each renewal bounded by the deadline, and by the lease's end: a
        // reply after it would come too late to be believed.
        let bound = earliest(sent.checked_add(shared.deadline), lost_at);
        match until(bound, renewed).await {
            Some(Ok(true)) => confirmed = sent,
            // Gone: the script removed what was left of it.
            Some(Ok(false)) => break,
            // Failed or missed: tried again in its turn, unless the
            // lease's end comes first (then the next wait ends at once).
            _ => {}
        }
    }
    let _ = lost.send_replace(true);
}

/// The earlier of two instants, `None` standing for never.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `future`'s output if it completes by `at` (`None`: no bound).
async fn until<F: std::future::Future>(at: Option<Instant>, future: F) -> Option<F::Output> {
    match at {
        Some(at) => timeout_at(at, future).await.ok(),
        None => Some(future.await),
    }
}
