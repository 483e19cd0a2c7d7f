//! What comes back after a grant: what a refund gave back, and what
//! settling a grant at its real cost did.

use super::Grant;

/// What a refund gave back: the tokens offered to the buckets that paid
/// them, and those whose bucket is gone.
///
/// A bucket takes back at most up to its burst, so of what it is
/// [given](Self::given) it may keep less (what it refilled meanwhile is not
/// given twice).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Refunded {
    pub(crate) given: u32,
    pub(crate) gone: u32,
}

impl Refunded {
    /// Tokens handed back to the buckets that paid them. A bucket takes
    /// them only up to its burst: one that refilled meanwhile ends no
    /// fuller than full, so this is what was offered, not what it gained.
    pub fn given(&self) -> u32 {
        self.given
    }

    /// Tokens not given back because the bucket that paid them is not in
    /// this limiter now: a change of N removed it since the grant (a bucket
    /// of the same number added again later is another bucket), or the
    /// grant came from a limiter with more buckets.
    pub fn gone(&self) -> u32 {
        self.gone
    }

    pub(crate) fn add(&mut self, tokens: u32, given: bool) {
        if given {
            self.given += tokens;
        } else {
            self.gone += tokens;
        }
    }
}

/// What settling a grant at its real cost did
/// ([`Limit::settle`](crate::Limit::settle)): tokens given back when it
/// cost less than it took, or charged to the buckets that paid it when it
/// cost more.
///
/// A charge takes at most a burst of debt from each bucket (it is empty
/// then for another burst's time); what no bucket could take is
/// [forgiven](Self::forgiven), never taken from another tenant's bucket.
/// So is the whole charge of a [borrowed](Grant::borrowed) grant: the
/// bucket that lent it is another tenant's, whose reserve it keeps.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settled {
    pub(crate) refunded: Refunded,
    pub(crate) charged: u32,
    pub(crate) forgiven: u32,
}

/// How a grant settles at its real cost ([`Settle::of`]).
pub(crate) enum Settle {
    /// It cost what it took.
    Even,
    /// It cost less: this part of it goes back.
    Refund(Grant),
    /// It cost this many tokens more, to charge to its buckets.
    Charge(Grant, u32),
    /// It cost this many tokens more, but was lent by another tenant's
    /// bucket: forgiven, since its owners keep their reserve.
    Forgive(u32),
}

impl Settle {
    /// How `grant` settles at a real cost of `actual` tokens.
    pub(crate) fn of(mut grant: Grant, actual: u32) -> Settle {
        let took = grant.tokens();
        match actual.checked_sub(took) {
            Some(0) => Settle::Even,
            Some(extra) if grant.borrowed() => Settle::Forgive(extra),
            Some(extra) => Settle::Charge(grant, extra),
            None => Settle::Refund(grant.part(took - actual).expect("less than it took")),
        }
    }
}

impl Settled {
    /// `extra` tokens to charge, of which `charged` were taken.
    pub(crate) fn charge(extra: u32, charged: u32) -> Settled {
        Settled {
            charged,
            forgiven: extra - charged,
            ..Settled::default()
        }
    }

    /// What went back, when the real cost was below the grant.
    pub fn refunded(&self) -> Refunded {
        self.refunded
    }

    /// Tokens taken beyond the grant, when the real cost was above it.
    pub fn charged(&self) -> u32 {
        self.charged
    }

    /// Tokens of the real cost above the grant that no bucket that paid it
    /// could take: its debt was full, it is gone since, or none paid (a
    /// failure policy's grant).
    pub fn forgiven(&self) -> u32 {
        self.forgiven
    }
}
