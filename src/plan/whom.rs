//! Who draws: a shard with whom it belongs to ([`Whom`], [`Id`]), and what
//! resolves a shard again after a change of N ([`Resolved`]). Both stores
//! take these; neither defines them.

use crate::Shard;

/// Whose buckets a decision draws on: a shard resolved under some N, with
/// whom it belongs to, so that a decision made under another N (the limiter
/// changed N in between) resolves it again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Whom<'a> {
    pub(crate) shard: Shard,
    /// The N `shard` was resolved under.
    pub(crate) buckets: u32,
    pub(crate) id: Id<'a>,
}

/// Who a shard belongs to.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Id<'a> {
    Tenant(&'a [u8]),
    User(&'a [u8], &'a [u8]),
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // the Redis fallback's
    /// Not known: the shard is used as it is, whatever N is by then. Its
    /// buckets that a smaller N removed are sealed (they never grant), so
    /// a decision on it can only be denied there, never exceed the budget.
    Fixed,
}

/// A shard with what resolves it again under another N: a [`Whom`], or a
/// tenant handle, which keeps its tenant's id (and is read in place, without
/// a copy, on the hot path).
pub(crate) trait Resolved {
    /// The shard, as resolved under [`buckets`](Self::buckets).
    fn shard(&self) -> &Shard;
    /// The N the shard was resolved under.
    fn buckets(&self) -> u32;
    /// Whom the shard belongs to.
    fn id(&self) -> Id<'_>;

    /// The same, as a [`Whom`].
    fn whom(&self) -> Whom<'_> {
        Whom {
            shard: *self.shard(),
            buckets: self.buckets(),
            id: self.id(),
        }
    }
}

impl Resolved for Whom<'_> {
    #[inline]
    fn shard(&self) -> &Shard {
        &self.shard
    }

    #[inline]
    fn buckets(&self) -> u32 {
        self.buckets
    }

    fn id(&self) -> Id<'_> {
        self.id
    }
}

impl<'a> Id<'a> {
    /// Who `request` is for.
    #[inline]
    pub(crate) fn of(request: &'a crate::Request<'_>) -> Id<'a> {
        match request.user_id() {
            None => Id::Tenant(request.tenant_id()),
            Some(user) => Id::User(request.tenant_id(), user),
        }
    }

    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // a Redis decision's
    /// The same, owning its ids, or `None` for [`Id::Fixed`]: what a
    /// decision that outlives the borrow keeps, to draw on as
    /// [`Whom::of_ids`] of them.
    pub(crate) fn to_owned(self) -> Option<crate::Request<'static>> {
        match self {
            Id::Tenant(tenant) => Some(crate::Request::from(tenant.to_vec())),
            Id::User(tenant, user) => {
                Some(crate::Request::from(tenant.to_vec()).user(user.to_vec()))
            }
            Id::Fixed => None,
        }
    }
}

#[cfg_attr(not(feature = "redis"), allow(dead_code))] // the Redis store's
impl<'a> Whom<'a> {
    /// A shard used as it is (see [`Id::Fixed`]).
    pub(crate) fn fixed(shard: Shard, buckets: u32) -> Whom<'static> {
        Whom {
            shard,
            buckets,
            id: Id::Fixed,
        }
    }

    /// `shard`, resolved under `buckets`, of the ids [`Id::to_owned`]
    /// kept (`None`: fixed). A decision in flight over Redis outlives the
    /// `Whom` it was given: it owns the ids and lends them out again here,
    /// so that one type says who draws in both stores.
    pub(crate) fn of_ids(
        shard: Shard,
        buckets: u32,
        ids: Option<&'a crate::Request<'_>>,
    ) -> Whom<'a> {
        Whom {
            shard,
            buckets,
            id: ids.map_or(Id::Fixed, Id::of),
        }
    }
}
