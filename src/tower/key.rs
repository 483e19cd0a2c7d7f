//! Where a request's tenant comes from, and what to do when it has none.

use std::fmt;
use std::sync::Arc;

use http::request::Parts;
use http::{Extensions, HeaderName, HeaderValue};

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
pub struct TenantKey(Source);

type ExtensionFn = for<'a> fn(&'a Extensions) -> Option<&'a [u8]>;
type CustomFn = dyn Fn(&Parts, &mut dyn FnMut(&[u8])) + Send + Sync;

#[derive(Clone)]
enum Source {
    Header(HeaderName),
    Extension(ExtensionFn, &'static str),
    Custom(Arc<CustomFn>),
}

impl TenantKey {
    /// The value of the header `name`; a request without it, or with an
    /// empty value, has no tenant.
    pub fn header(name: HeaderName) -> Self {
        TenantKey(Source::Header(name))
    }

    /// The value of type `T` in the request extensions, as an authentication
    /// layer placed in front of this one would leave it.
    pub fn extension<T: AsRef<[u8]> + Send + Sync + 'static>() -> Self {
        fn get<T: AsRef<[u8]> + Send + Sync + 'static>(ext: &Extensions) -> Option<&[u8]> {
            ext.get::<T>().map(AsRef::as_ref)
        }
        TenantKey(Source::Extension(get::<T>, std::any::type_name::<T>()))
    }

    /// Any function of the request head; `None` means the request has no
    /// tenant.
    pub fn from_fn<F, K>(f: F) -> Self
    where
        F: Fn(&Parts) -> Option<K> + Send + Sync + 'static,
        K: AsRef<[u8]>,
    {
        TenantKey(Source::Custom(Arc::new(move |parts, sink| {
            if let Some(key) = f(parts) {
                sink(key.as_ref());
            }
        })))
    }

    /// Runs `decide` on the request's tenant id, if it has one.
    pub(super) fn with_key<R>(&self, parts: &Parts, decide: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let key = match &self.0 {
            Source::Header(name) => parts.headers.get(name).map(HeaderValue::as_bytes),
            Source::Extension(get, _) => get(&parts.extensions),
            Source::Custom(f) => {
                let mut decide = Some(decide);
                let mut out = None;
                f(parts, &mut |key| {
                    if let Some(decide) = decide.take().filter(|_| !key.is_empty()) {
                        out = Some(decide(key));
                    }
                });
                return out;
            }
        };
        key.filter(|k| !k.is_empty()).map(decide)
    }
}

impl fmt::Debug for TenantKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Source::Header(name) => f.debug_tuple("Header").field(name).finish(),
            Source::Extension(_, ty) => f.debug_tuple("Extension").field(ty).finish(),
            Source::Custom(_) => f.write_str("Custom(..)"),
        }
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
