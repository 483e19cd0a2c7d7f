//! A handle for one request's pools, resolved once.

use std::fmt;

use super::{Acquire, InFlight, Permit, Rejected};
use crate::Shard;

/// A request with its pools resolved once: for a hot tenant, or a loop.
///
/// Made by [`InFlight::handle`]; it takes permits for the same request
/// again and again without hashing its ids or probing the tenant cache —
/// what is left is the pools' own atomics. A request that can never be
/// served (no seat, or more than its pools hold) is refused by each
/// acquire, as by [`InFlight::try_acquire`].
///
/// ```
/// use shuffle_limiter::Request;
/// use shuffle_limiter::inflight::{InFlight, RejectReason};
///
/// let inflight = InFlight::builder().concurrency(8).pools(4).per_tenant(2).build()?;
/// let tenant = inflight.handle("tenant-42");
/// assert_eq!(tenant.shard(), inflight.shard("tenant-42"));
/// let held: Vec<_> = std::iter::from_fn(|| tenant.try_acquire().ok()).collect();
/// assert_eq!(held.len(), 4); // its 2 pools of 2
/// assert_eq!(tenant.try_acquire().unwrap_err().reason(), RejectReason::Busy);
/// let heavy = inflight.handle(Request::tenant("tenant-42").tokens(5));
/// assert!(matches!(heavy.try_acquire().unwrap_err().reason(), RejectReason::NeverFits { .. }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy)]
pub struct Handle<'a> {
    inflight: &'a InFlight,
    shard: Shard,
    /// The seats, or why the request can never be served.
    seats: Result<u32, Rejected>,
}

impl<'a> Handle<'a> {
    pub(super) fn new(inflight: &'a InFlight, shard: Shard, seats: Result<u32, Rejected>) -> Self {
        Handle {
            inflight,
            shard,
            seats,
        }
    }

    /// Takes the request's seats now, or refuses at once, as
    /// [`InFlight::try_acquire`].
    ///
    /// # Errors
    /// [`Rejected`], as [`InFlight::try_acquire`].
    #[inline]
    pub fn try_acquire(&self) -> Result<Permit<'a>, Rejected> {
        self.inflight.try_permit(&self.shard, self.seats?)
    }

    /// Waits for the request's seats, as [`InFlight::acquire`].
    pub fn acquire(&self) -> Acquire<'a> {
        Acquire::new(self.inflight, self.seats.map(|seats| (self.shard, seats)))
    }

    /// The pools the request takes from, as resolved when the handle was
    /// made ([`InFlight::shard`]).
    pub fn shard(&self) -> Shard {
        self.shard
    }
}

impl fmt::Debug for Handle<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Handle")
            .field("shard", &self.shard)
            .field("seats", &self.seats)
            .finish_non_exhaustive()
    }
}
