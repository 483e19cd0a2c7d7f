//! What a caller asks a limiter for: a [`Request`].

use std::borrow::Cow;
use std::fmt;

/// What one decision asks for: a tenant, optionally one of its users, and a
/// number of tokens (1 unless set).
///
/// Every way of taking tokens takes a request: a limiter's `check` and
/// `wait`, and its `handle`, which resolves the request's shard once. A
/// tenant's id alone converts into a request of one token, so the common
/// case reads as it is:
///
/// ```
/// use shuffle_limiter::{ManualClock, Quota, Request, ShardedLimiter};
///
/// let limiter = ShardedLimiter::builder()
///     .quota(Quota::per_second(16)) // 4 buckets of 4 tokens
///     .buckets(4)
///     .per_tenant(2)
///     .per_user(1)
///     .clock(ManualClock::new())
///     .build()?;
/// assert!(limiter.check("tenant-42").is_ok()); // one token
/// let grant = limiter.check(Request::tenant("tenant-42").user("alice").tokens(2))?;
/// assert_eq!(grant.tokens(), 2);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// A request borrows its ids (from `&str`, `&[u8]`, `&String`, `&[u8; N]`,
/// ...) or owns them (from `String` or `Vec<u8>`); making one never
/// allocates.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Request<'a> {
    tenant: Cow<'a, [u8]>,
    user: Option<Cow<'a, [u8]>>,
    tokens: u32,
}

impl<'a> Request<'a> {
    /// One token for `tenant`.
    #[inline]
    pub fn tenant(tenant: impl Into<Request<'a>>) -> Request<'a> {
        let Request { tenant, .. } = tenant.into();
        Request {
            tenant,
            user: None,
            tokens: 1,
        }
    }

    /// The same request for `user` of its tenant: drawn from the user's j
    /// buckets of the tenant's shard ([`Builder::per_user`]), so that a user
    /// flooding its tenant drains its own j only.
    ///
    /// [`Builder::per_user`]: crate::Builder::per_user
    #[inline]
    #[must_use]
    pub fn user(self, user: impl Into<Request<'a>>) -> Request<'a> {
        Request {
            user: Some(user.into().tenant),
            ..self
        }
    }

    /// The same request for `tokens` tokens at once: paid by the roomiest
    /// bucket when that one holds them, otherwise by several of the
    /// tenant's buckets together, all or nothing
    /// ([`Grant::payments`](crate::Grant::payments)). A request of 0 tokens
    /// is always granted: it takes nothing, and its
    /// [`Grant::remaining`](crate::Grant::remaining) reads the tokens left.
    #[inline]
    #[must_use]
    pub fn tokens(self, tokens: u32) -> Request<'a> {
        Request { tokens, ..self }
    }

    /// The tenant's id.
    #[inline]
    pub fn tenant_id(&self) -> &[u8] {
        &self.tenant
    }

    /// The user's id, if the request is for one user of its tenant.
    #[inline]
    pub fn user_id(&self) -> Option<&[u8]> {
        self.user.as_deref()
    }

    /// The tokens asked for.
    #[inline]
    pub fn weight(&self) -> u32 {
        self.tokens
    }

    /// The same request, owning its ids (copying those it borrowed).
    pub fn into_owned(self) -> Request<'static> {
        Request {
            tenant: Cow::Owned(self.tenant.into_owned()),
            user: self.user.map(|user| Cow::Owned(user.into_owned())),
            tokens: self.tokens,
        }
    }
}

impl fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = |id: &[u8]| String::from_utf8_lossy(id).into_owned();
        f.debug_struct("Request")
            .field("tenant", &text(&self.tenant))
            .field("user", &self.user.as_deref().map(text))
            .field("tokens", &self.tokens)
            .finish()
    }
}

/// One token for the tenant of a borrowed id.
macro_rules! borrowed {
    ($($t:ty),*) => {$(
        impl<'a> From<&'a $t> for Request<'a> {
            #[inline]
            fn from(id: &'a $t) -> Request<'a> {
                let id: &[u8] = AsRef::<[u8]>::as_ref(id);
                Request { tenant: Cow::Borrowed(id), user: None, tokens: 1 }
            }
        }
    )*};
}
borrowed!(str, [u8], String, Vec<u8>, Box<[u8]>);

impl<'a, const N: usize> From<&'a [u8; N]> for Request<'a> {
    #[inline]
    fn from(id: &'a [u8; N]) -> Request<'a> {
        Request::from(id.as_slice())
    }
}

impl<'a> From<String> for Request<'a> {
    #[inline]
    fn from(id: String) -> Request<'a> {
        Request::from(id.into_bytes())
    }
}

impl<'a> From<Vec<u8>> for Request<'a> {
    #[inline]
    fn from(id: Vec<u8>) -> Request<'a> {
        Request {
            tenant: Cow::Owned(id),
            user: None,
            tokens: 1,
        }
    }
}

impl<'a> From<Cow<'a, str>> for Request<'a> {
    #[inline]
    fn from(id: Cow<'a, str>) -> Request<'a> {
        match id {
            Cow::Borrowed(id) => Request::from(id),
            Cow::Owned(id) => Request::from(id),
        }
    }
}

impl<'a> From<Cow<'a, [u8]>> for Request<'a> {
    #[inline]
    fn from(tenant: Cow<'a, [u8]>) -> Request<'a> {
        Request {
            tenant,
            user: None,
            tokens: 1,
        }
    }
}

/// One token for the tenant of an id behind one more reference (an
/// iterator's item over ids, say).
macro_rules! twice_borrowed {
    ($($t:ty),*) => {$(
        impl<'a, 'b> From<&'b &'a $t> for Request<'a> {
            #[inline]
            fn from(id: &'b &'a $t) -> Request<'a> {
                Request::from(*id)
            }
        }
    )*};
}
twice_borrowed!(str, [u8], String, Vec<u8>);

#[cfg(test)]
mod tests {
    use super::Request;

    #[test]
    fn an_id_is_one_token_for_its_tenant() {
        let request = Request::from("t");
        assert_eq!(request.tenant_id(), b"t");
        assert_eq!((request.user_id(), request.weight()), (None, 1));
        assert_eq!(Request::from(String::from("t")), request);
        assert_eq!(Request::from(b"t"), request);
        assert_eq!(Request::tenant("t"), request);
    }

    #[test]
    fn the_builder_sets_each_field() {
        let request = Request::tenant("t").user("u").tokens(3);
        assert_eq!(request.tenant_id(), b"t");
        assert_eq!(request.user_id(), Some(&b"u"[..]));
        assert_eq!(request.weight(), 3);
        // `tenant` keeps only the id of what it is given.
        assert_eq!(Request::tenant(request.clone()), Request::from("t"));
        assert_eq!(request.clone().into_owned(), request);
    }

    #[test]
    fn debug_shows_the_ids_as_text() {
        let request = Request::tenant("acme").user(b"u\xff").tokens(2);
        assert_eq!(
            format!("{request:?}"),
            "Request { tenant: \"acme\", user: Some(\"u\u{fffd}\"), tokens: 2 }"
        );
    }
}
