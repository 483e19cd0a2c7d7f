//! Permits: seats held, given back exactly once when they are dropped,
//! borrowing the limit ([`Permit`]) or sharing it ([`OwnedPermit`]).

use std::fmt;
use std::sync::Arc;

use super::InFlight;
use super::taken::Taken;

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
#[repr(C)]
pub struct Permit<'a> {
    pub(super) inflight: &'a InFlight,
    pub(super) taken: Taken,
}

impl Permit<'_> {
    /// The seats it holds.
    pub fn seats(&self) -> u32 {
        self.taken.seats(self.inflight.pools.packing())
    }

    /// Each pool it holds seats of, with how many: one pool for a single
    /// seat, the roomiest first for several.
    pub fn pools(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.taken.iter(self.inflight.pools.packing())
    }

    /// Whether some of its seats were borrowed from the tenant's spill
    /// pools ([`Builder::borrow_from`](super::Builder::borrow_from)).
    pub fn borrowed(&self) -> bool {
        self.taken.borrowed()
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
        self.inflight.debug_taken("Permit", &self.taken, f)
    }
}

/// A [`Permit`] that shares its limit through an `Arc` instead of
/// borrowing it: `'static`, so it can move into a spawned task or live in
/// a response future. Made by [`InFlight::try_acquire_owned`] and
/// [`InFlight::acquire_owned`]; dropping it gives its seats back once, as
/// dropping a [`Permit`] does.
///
/// ```
/// use std::sync::Arc;
/// use shuffle_limiter::inflight::InFlight;
///
/// let inflight = Arc::new(InFlight::builder().concurrency(4).build()?);
/// let permit = inflight.try_acquire_owned("t")?;
/// let worker = std::thread::spawn(move || {
///     // ... the slow call, holding the permit ...
///     drop(permit);
/// });
/// worker.join().unwrap();
/// assert_eq!(inflight.available(), 4);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use = "a permit is given back as soon as it is dropped"]
pub struct OwnedPermit {
    pub(super) inflight: Arc<InFlight>,
    pub(super) taken: Taken,
}

impl OwnedPermit {
    /// The seats it holds.
    pub fn seats(&self) -> u32 {
        self.taken.seats(self.inflight.pools.packing())
    }

    /// Each pool it holds seats of, with how many, as [`Permit::pools`].
    pub fn pools(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.taken.iter(self.inflight.pools.packing())
    }

    /// Whether some of its seats were borrowed, as [`Permit::borrowed`].
    pub fn borrowed(&self) -> bool {
        self.taken.borrowed()
    }

    /// The limit it holds seats of.
    pub fn inflight(&self) -> &Arc<InFlight> {
        &self.inflight
    }
}

impl Drop for OwnedPermit {
    #[inline]
    fn drop(&mut self) {
        self.inflight.release(&self.taken);
    }
}

impl fmt::Debug for OwnedPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inflight.debug_taken("OwnedPermit", &self.taken, f)
    }
}
