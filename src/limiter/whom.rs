//! Who draws: a shard with whom it belongs to ([`Whom`], [`Id`]), the owned
//! id a handle keeps ([`Owned`]), and what resolves a shard again after a
//! change of N ([`Resolved`]). Both stores take these; neither defines them.

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

/// Who a handle is for, kept to resolve its shard again.
#[derive(Debug, Clone)]
pub(crate) enum Owned {
    Tenant(Box<[u8]>),
    User(Box<[u8]>, Box<[u8]>),
}

impl Owned {
    pub(crate) fn tenant(tenant: &[u8]) -> Owned {
        Owned::Tenant(tenant.into())
    }

    pub(crate) fn user(tenant: &[u8], user: &[u8]) -> Owned {
        Owned::User(tenant.into(), user.into())
    }

    /// The same, borrowed.
    pub(crate) fn id(&self) -> Id<'_> {
        match self {
            Owned::Tenant(tenant) => Id::Tenant(tenant),
            Owned::User(tenant, user) => Id::User(tenant, user),
        }
    }
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

#[cfg_attr(not(feature = "redis"), allow(dead_code))] // the Redis fallback's
impl Whom<'_> {
    /// A shard used as it is (see [`Id::Fixed`]).
    pub(crate) fn fixed(shard: Shard, buckets: u32) -> Whom<'static> {
        Whom {
            shard,
            buckets,
            id: Id::Fixed,
        }
    }
}
