//! A permit: seats held, given back exactly once when it is dropped.

use std::fmt;

use super::InFlight;
use super::pools::Taken;

/// Seats of a tenant's pools, held until the permit is dropped.
///
/// Dropping it — at the end of a scope, while a panic unwinds, or with the
/// future that held it — gives every seat back, once, to the pool that
/// gave it, and serves whoever waits there first.
///
/// ```
/// use shuffle_limiter::Request;
/// use shuffle_limiter::inflight::InFlight;
///
/// let inflight = InFlight::builder().concurrency(8).pools(4).per_tenant(2).build()?;
/// let permit = inflight.try_acquire(Request::tenant("t").tokens(3))?;
/// assert_eq!(permit.seats(), 3); // 2 of one pool, 1 of the other
/// assert!(permit.pools().all(|(pool, _)| inflight.shard("t").contains(pool)));
/// assert_eq!(inflight.available(), 5);
/// drop(permit);
/// assert_eq!(inflight.available(), 8);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a permit is given back as soon as it is dropped"]
pub struct Permit<'a> {
    pub(super) inflight: &'a InFlight,
    pub(super) taken: Taken,
}

impl Permit<'_> {
    /// The seats it holds.
    pub fn seats(&self) -> u32 {
        self.taken.seats()
    }

    /// Each pool it holds seats of, with how many: one pool for a single
    /// seat, the roomiest first for several.
    pub fn pools(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.taken.iter()
    }
}

impl Drop for Permit<'_> {
    #[inline]
    fn drop(&mut self) {
        self.inflight.release(&self.taken);
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("pools", &self.taken.iter().collect::<Vec<_>>())
            .finish()
    }
}
