//! The grant of a request, as the rate-limit layer hands it to the inner
//! service: read by any clone, taken by one.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::Grant;

/// The [`Grant`] of a request that [`RateLimitLayer`](super::RateLimitLayer)
/// let through, in the request's extensions (axum:
/// `Extension(granted): Extension<Granted>`).
///
/// Request extensions are cloned (axum's `Extension` extractor clones
/// what it finds), and a grant must not be: a refund takes it, and a clone
/// refunded as well would give its tokens back twice. So every clone of a
/// `Granted` reads the one grant ([`grant`](Self::grant)), and the first
/// [`take`](Self::take) among them gets it, to refund or settle; the others
/// get `None`.
///
/// ```
/// use std::sync::Arc;
/// use axum::{Router, body::Body, extract::Extension, routing::get};
/// use axum::http::{HeaderName, Request};
/// use shuffle_limiter::tower::{Granted, RateLimitLayer, TenantKey};
/// use shuffle_limiter::{Quota, ShardedLimiter};
/// use tower::ServiceExt;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = Arc::new(ShardedLimiter::builder().quota(Quota::per_second(10)).build()?);
/// let refunds = Arc::clone(&limiter);
/// // A request that did no work gives its token back.
/// let handler = move |Extension(granted): Extension<Granted>| async move {
///     let bucket = granted.grant().bucket();
///     if let Some(grant) = granted.take() {
///         refunds.refund(grant);
///     }
///     assert!(granted.take().is_none(), "taken once");
///     format!("paid by bucket {bucket}, refunded")
/// };
/// let key = TenantKey::header(HeaderName::from_static("x-tenant"));
/// let app = Router::new()
///     .route("/", get(handler))
///     .layer(RateLimitLayer::new(Arc::clone(&limiter), key));
/// let before = limiter.remaining("acme");
/// let request = Request::get("/").header("x-tenant", "acme").body(Body::empty())?;
/// assert!(app.oneshot(request).await?.status().is_success());
/// assert_eq!(limiter.remaining("acme"), before, "the token came back");
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Granted(Arc<Once>);

struct Once {
    grant: Grant,
    taken: AtomicBool,
}

impl Granted {
    pub(super) fn new(grant: Grant) -> Self {
        Granted(Arc::new(Once {
            grant,
            taken: AtomicBool::new(false),
        }))
    }

    /// The grant, to read: which buckets paid, what the tenant has left.
    pub fn grant(&self) -> &Grant {
        &self.0.grant
    }

    /// The grant, to refund or settle: the first call among every clone
    /// gets it, every later one `None`.
    pub fn take(&self) -> Option<Grant> {
        let first = !self.0.taken.swap(true, Ordering::AcqRel);
        first.then(|| self.0.grant.duplicate())
    }

    /// Whether a clone has [taken](Self::take) the grant.
    pub fn is_taken(&self) -> bool {
        self.0.taken.load(Ordering::Acquire)
    }
}

impl fmt::Debug for Granted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Granted")
            .field("grant", &self.0.grant)
            .field("taken", &self.is_taken())
            .finish()
    }
}
