//! Where a request's tenant comes from, whether it is exempt, and what to do
//! when it has none.

use std::fmt;
use std::sync::Arc;

use http::header::WWW_AUTHENTICATE;
use http::request::Parts;
use http::{Extensions, HeaderMap, HeaderName, HeaderValue, StatusCode};

use super::ip::{ClientIp, NoPeerAddress};

/// What a key function says about one request; see [`TenantKey::decide`].
///
/// ```
/// use shuffle_limiter::tower::RequestKey;
///
/// let key = RequestKey::Tenant(b"acme");
/// assert_eq!(key, RequestKey::Tenant(b"acme".as_slice()));
/// assert_ne!(RequestKey::Exempt, RequestKey::Missing);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestKey<'a> {
    /// The request belongs to this tenant (bytes borrowed from the request;
    /// an empty id counts as [`Missing`](RequestKey::Missing)).
    Tenant(&'a [u8]),
    /// The request passes unlimited: nothing is taken from the limiter and
    /// no `RateLimit` fields are sent, so an outer or inner layer decides.
    Exempt,
    /// The request has no tenant: it is answered as
    /// [`MissingTenant`] says.
    Missing,
}

/// Where a request's tenant id comes from.
///
/// ```
/// use axum::http::{HeaderName, request::Parts};
/// use shuffle_limiter::tower::TenantKey;
///
/// // A header sent by the client (an empty value counts as missing):
/// let by_header = TenantKey::header(HeaderName::from_static("x-tenant-id"));
///
/// // A value that an authentication layer put in the request extensions:
/// #[derive(Clone)]
/// struct TenantId(String);
/// impl AsRef<[u8]> for TenantId {
///     fn as_ref(&self) -> &[u8] { self.0.as_bytes() }
/// }
/// let by_auth = TenantKey::extension::<TenantId>();
///
/// // Anything else: the first path segment, say.
/// let by_path = TenantKey::from_fn(|parts: &Parts| {
///     parts.uri.path().split('/').nth(1).filter(|s| !s.is_empty()).map(str::to_owned)
/// });
/// # let _ = (by_header, by_auth, by_path);
/// ```
#[derive(Clone)]
pub struct TenantKey {
    source: Source,
    exempt: Option<Arc<ExemptFn>>,
}

type ExtensionFn = for<'a> fn(&'a Extensions) -> Option<&'a [u8]>;
type CustomFn = dyn Fn(&Parts, &mut dyn FnMut(&[u8])) + Send + Sync;
type DecideFn = dyn for<'a> Fn(&'a Parts) -> RequestKey<'a> + Send + Sync;
type ExemptFn = dyn Fn(&Parts) -> bool + Send + Sync;

#[derive(Clone)]
enum Source {
    Header(HeaderName),
    Extension(ExtensionFn, &'static str),
    Custom(Arc<CustomFn>),
    Decide(Arc<DecideFn>),
    Ip(ClientIp),
}

/// What a [`TenantKey`] found, with the caller's answer for a tenant.
pub(super) enum Found<R> {
    Tenant(R),
    Exempt,
    Missing,
    NoPeer(NoPeerAddress),
}

/// # Constructors
impl TenantKey {
    fn of(source: Source) -> Self {
        TenantKey {
            source,
            exempt: None,
        }
    }

    /// The value of the header `name`; a request without it, with an
    /// empty value, or with it more than once has no tenant (of two, which
    /// one a gateway set and which one its client sent cannot be told).
    pub fn header(name: HeaderName) -> Self {
        Self::of(Source::Header(name))
    }

    /// The value of type `T` in the request extensions, as an authentication
    /// layer placed in front of this one would leave it.
    pub fn extension<T: AsRef<[u8]> + Send + Sync + 'static>() -> Self {
        fn get<T: AsRef<[u8]> + Send + Sync + 'static>(ext: &Extensions) -> Option<&[u8]> {
            ext.get::<T>().map(AsRef::as_ref)
        }
        Self::of(Source::Extension(get::<T>, std::any::type_name::<T>()))
    }

    /// Any function of the request head returning an owned id; `None` means
    /// the request has no tenant. To borrow from the request instead, use
    /// [`borrowed`](TenantKey::borrowed).
    pub fn from_fn<F, K>(f: F) -> Self
    where
        F: Fn(&Parts) -> Option<K> + Send + Sync + 'static,
        K: AsRef<[u8]>,
    {
        Self::of(Source::Custom(Arc::new(move |parts, sink| {
            if let Some(key) = f(parts) {
                sink(key.as_ref());
            }
        })))
    }

    /// A function of the request head returning bytes borrowed from it, so
    /// that finding the tenant allocates nothing; `None` means the request
    /// has no tenant.
    ///
    /// ```
    /// use shuffle_limiter::tower::TenantKey;
    ///
    /// // The token of `Authorization: Bearer <token>`, without a copy.
    /// let bearer = TenantKey::borrowed(|parts| {
    ///     parts.headers.get("authorization")?.as_bytes().strip_prefix(b"Bearer ")
    /// });
    /// # let _ = bearer;
    /// ```
    pub fn borrowed<F>(f: F) -> Self
    where
        F: for<'a> Fn(&'a Parts) -> Option<&'a [u8]> + Send + Sync + 'static,
    {
        Self::decide(move |parts| f(parts).map_or(RequestKey::Missing, RequestKey::Tenant))
    }

    /// A function of the request head that says, for each request, which
    /// tenant it belongs to, that it is [exempt](RequestKey::Exempt), or
    /// that it has no tenant; ids are borrowed from the request.
    ///
    /// ```
    /// use shuffle_limiter::tower::{RequestKey, TenantKey};
    ///
    /// // Internal callers are not limited; everyone else by API key.
    /// let key = TenantKey::decide(|parts| {
    ///     if parts.headers.contains_key("x-internal-caller") {
    ///         return RequestKey::Exempt;
    ///     }
    ///     match parts.headers.get("x-api-key") {
    ///         Some(key) => RequestKey::Tenant(key.as_bytes()),
    ///         None => RequestKey::Missing,
    ///     }
    /// });
    /// # let _ = key;
    /// ```
    pub fn decide<F>(f: F) -> Self
    where
        F: for<'a> Fn(&'a Parts) -> RequestKey<'a> + Send + Sync + 'static,
    {
        Self::of(Source::Decide(Arc::new(f)))
    }

    /// The client's IP address, as [`ClientIp`] finds it (the peer, or the
    /// client behind trusted proxies), grouped by its prefixes.
    ///
    /// ```
    /// use std::net::SocketAddr;
    /// use axum::extract::ConnectInfo;
    /// use shuffle_limiter::tower::{ClientIp, TenantKey};
    ///
    /// let per_ip = TenantKey::client_ip(ClientIp::peer(|c: &ConnectInfo<SocketAddr>| c.0));
    /// # let _ = per_ip;
    /// ```
    pub fn client_ip(ip: ClientIp) -> Self {
        Self::of(Source::Ip(ip))
    }
}

/// # Exemptions
impl TenantKey {
    /// Lets the requests for which `exempt` is true pass unlimited, with no
    /// `RateLimit` fields: an allow-list. It is asked before the key.
    ///
    /// ```
    /// use std::net::{IpAddr, SocketAddr};
    /// use axum::{extract::ConnectInfo, http::HeaderName};
    /// use shuffle_limiter::tower::{ClientIp, TenantKey};
    ///
    /// // Health checks are never limited.
    /// let key = TenantKey::header(HeaderName::from_static("x-api-key"))
    ///     .exempt_if(|parts| parts.uri.path() == "/health");
    ///
    /// // Allow-listed addresses are never limited by the per-IP layer.
    /// let ip = ClientIp::peer(|c: &ConnectInfo<SocketAddr>| c.0);
    /// let office: IpAddr = "203.0.113.7".parse()?;
    /// let per_ip = TenantKey::client_ip(ip.clone())
    ///     .exempt_if(move |parts| ip.resolve(parts).is_ok_and(|addr| addr == office));
    /// # let _ = (key, per_ip);
    /// # Ok::<(), std::net::AddrParseError>(())
    /// ```
    pub fn exempt_if<F>(mut self, exempt: F) -> Self
    where
        F: Fn(&Parts) -> bool + Send + Sync + 'static,
    {
        self.exempt = Some(match self.exempt.take() {
            None => Arc::new(exempt),
            Some(before) => Arc::new(move |parts: &Parts| before(parts) || exempt(parts)),
        });
        self
    }

    /// Looks for the request's tenant and runs `decide` on its id.
    pub(super) fn find<R>(&self, parts: &Parts, decide: impl FnOnce(&[u8]) -> R) -> Found<R> {
        if self.exempt.as_ref().is_some_and(|exempt| exempt(parts)) {
            return Found::Exempt;
        }
        let key = match &self.source {
            Source::Header(name) => {
                let mut values = parts.headers.get_all(name).iter();
                match (values.next(), values.next()) {
                    (Some(value), None) => Some(value.as_bytes()),
                    _ => None,
                }
            }
            Source::Extension(get, _) => get(&parts.extensions),
            Source::Custom(f) => {
                let mut decide = Some(decide);
                let mut out = Found::Missing;
                f(parts, &mut |key| {
                    if let Some(decide) = decide.take().filter(|_| !key.is_empty()) {
                        out = Found::Tenant(decide(key));
                    }
                });
                return out;
            }
            Source::Decide(f) => match f(parts) {
                RequestKey::Tenant(key) => Some(key),
                RequestKey::Exempt => return Found::Exempt,
                RequestKey::Missing => None,
            },
            Source::Ip(ip) => {
                return match ip.resolve(parts) {
                    Ok(addr) => ip.with_key(addr, |key| Found::Tenant(decide(key))),
                    Err(err) => Found::NoPeer(err),
                };
            }
        };
        match key.filter(|k| !k.is_empty()) {
            Some(key) => Found::Tenant(decide(key)),
            None => Found::Missing,
        }
    }
}

impl fmt::Debug for TenantKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.source {
            Source::Header(name) => f.debug_tuple("Header").field(name).finish()?,
            Source::Extension(_, ty) => f.debug_tuple("Extension").field(ty).finish()?,
            Source::Custom(_) => f.write_str("Custom(..)")?,
            Source::Decide(_) => f.write_str("Decide(..)")?,
            Source::Ip(ip) => fmt::Debug::fmt(ip, f)?,
        }
        if self.exempt.is_some() {
            f.write_str(".exempt_if(..)")?;
        }
        Ok(())
    }
}

/// What to do with a request whose [`TenantKey`] finds no tenant.
///
/// ```
/// use axum::http::HeaderValue;
/// use shuffle_limiter::tower::MissingTenant;
///
/// let reject = MissingTenant::bad_request(); // the default: 400
/// let login = MissingTenant::unauthorized(HeaderValue::from_static("Bearer"));
/// let shared = MissingTenant::fallback("anonymous"); // all such requests share one tenant
/// # let _ = (reject, login, shared);
/// ```
#[derive(Debug, Clone, Default)]
pub struct MissingTenant(pub(super) Missing);

#[derive(Debug, Clone, Default)]
pub(super) enum Missing {
    #[default]
    BadRequest,
    Unauthorized(HeaderValue),
    Fallback(Arc<[u8]>),
}

impl MissingTenant {
    /// What a server layer does with a request without a tenant: charge
    /// the fallback tenant, or refuse with this status and these headers.
    pub(super) fn resolve(&self) -> Result<&[u8], (StatusCode, HeaderMap)> {
        match &self.0 {
            Missing::Fallback(tenant) => Ok(tenant),
            Missing::BadRequest => Err((StatusCode::BAD_REQUEST, HeaderMap::new())),
            Missing::Unauthorized(challenge) => {
                let mut headers = HeaderMap::new();
                headers.insert(WWW_AUTHENTICATE, challenge.clone());
                Err((StatusCode::UNAUTHORIZED, headers))
            }
        }
    }

    /// Answer `400 Bad Request` (the default).
    pub fn bad_request() -> Self {
        MissingTenant(Missing::BadRequest)
    }

    /// Answer `401 Unauthorized` with `WWW-Authenticate: challenge`, which a
    /// 401 must carry (for example `Bearer`).
    pub fn unauthorized(challenge: HeaderValue) -> Self {
        MissingTenant(Missing::Unauthorized(challenge))
    }

    /// Treat the request as coming from `tenant`, a key shared by all
    /// requests without one (they compete for that tenant's share only).
    pub fn fallback(tenant: impl AsRef<[u8]>) -> Self {
        MissingTenant(Missing::Fallback(tenant.as_ref().into()))
    }
}
