//! The layer and its settings.

use std::fmt;
use std::sync::Arc;

use ::tower::Layer;

use super::key::{MissingTenant, TenantKey};
use super::service::RateLimit;
use crate::Limiter;
use crate::store::{InProcess, Store};

/// A policy name that cannot be sent as a Structured Field String.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPolicyName {
    name: String,
}

impl fmt::Display for InvalidPolicyName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "policy name {:?} cannot be sent in a RateLimit field: use printable ASCII \
             (space to '~'), for example \"tenant\"",
            self.name
        )
    }
}

impl std::error::Error for InvalidPolicyName {}

/// The settings every clone of the service shares.
pub(super) struct Config<S> {
    pub(super) limiter: Arc<Limiter<S>>,
    pub(super) key: TenantKey,
    /// Where a request's user comes from, for nested checks.
    pub(super) user: Option<TenantKey>,
    pub(super) missing: MissingTenant,
    /// The policy name as a Structured Field String, quotes included.
    pub(super) policy: String,
}

/// A [`Layer`] that rate-limits each request by tenant with a shared
/// limiter, in process or over Redis; see the [module documentation](super).
pub struct RateLimitLayer<S = InProcess> {
    pub(super) config: Arc<Config<S>>,
}

impl<S> Clone for RateLimitLayer<S> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for RateLimitLayer<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        f.debug_struct("RateLimitLayer")
            .field("limiter", &c.limiter)
            .field("key", &c.key)
            .field("user", &c.user)
            .field("missing", &c.missing)
            .field("policy", &c.policy)
            .finish()
    }
}

impl<S: Store> RateLimitLayer<S> {
    /// A layer asking `limiter` about the tenant that `key` finds in each
    /// request; requests without one get a 400.
    ///
    /// `limiter` is an `Arc<ShardedLimiter<_>>` or, with the `redis`
    /// feature, an `Arc<RedisLimiter<_, _>>`; the answers and their fields are
    /// the same.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use axum::http::HeaderName;
    /// use shuffle_limiter::{Quota, ShardedLimiter, tower::{RateLimitLayer, TenantKey}};
    ///
    /// let limiter = Arc::new(ShardedLimiter::builder().quota(Quota::per_second(50)).build()?);
    /// let layer = RateLimitLayer::new(
    ///     limiter.clone(),
    ///     TenantKey::header(HeaderName::from_static("x-api-key")),
    /// );
    /// assert!(Arc::ptr_eq(layer.limiter(), &limiter));
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub fn new(limiter: Arc<Limiter<S>>, key: TenantKey) -> Self {
        RateLimitLayer {
            config: Arc::new(Config {
                limiter,
                key,
                user: None,
                missing: MissingTenant::default(),
                policy: "\"tenant\"".to_owned(),
            }),
        }
    }

    /// Isolates the users of each tenant one level down: a request whose
    /// `user` key finds a user draws from that user's j of its tenant's k
    /// buckets ([`Builder::per_user`](crate::Builder::per_user),
    /// [`check_nested`](crate::ShardedLimiter::check_nested)), so one user
    /// flooding a tenant's API key drains only its j. A request with a
    /// tenant but no user draws from the tenant's k buckets, as without
    /// this setting.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use axum::http::HeaderName;
    /// use shuffle_limiter::{Quota, ShardedLimiter, tower::{RateLimitLayer, TenantKey}};
    ///
    /// let limiter = ShardedLimiter::builder()
    ///     .quota(Quota::per_second(100))
    ///     .per_tenant(4)
    ///     .per_user(2)
    ///     .build()?;
    /// let layer = RateLimitLayer::new(
    ///     Arc::new(limiter),
    ///     TenantKey::header(HeaderName::from_static("x-api-key")),
    /// )
    /// .user(TenantKey::header(HeaderName::from_static("x-user-id")));
    /// # let _ = layer;
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub fn user(self, user: TenantKey) -> Self {
        self.with_config(|c| c.user = Some(user))
    }

    /// What to do with a request without a tenant.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use axum::{Router, body::Body, http::{HeaderName, Request, StatusCode}, routing::get};
    /// use shuffle_limiter::{Quota, ShardedLimiter};
    /// use shuffle_limiter::tower::{MissingTenant, RateLimitLayer, TenantKey};
    /// use tower::Service;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let limiter = Arc::new(ShardedLimiter::builder().quota(Quota::per_second(50)).build()?);
    /// let layer = RateLimitLayer::new(limiter, TenantKey::header(HeaderName::from_static("x-api-key")))
    ///     .on_missing_tenant(MissingTenant::fallback("anonymous"));
    /// let mut app: Router = Router::new().route("/", get(|| async { "hi" })).layer(layer);
    /// let anonymous = app.call(Request::get("/").body(Body::empty())?).await?;
    /// assert_eq!(anonymous.status(), StatusCode::OK); // charged to "anonymous"
    /// # Ok(())
    /// # }
    /// ```
    pub fn on_missing_tenant(self, missing: MissingTenant) -> Self {
        self.with_config(|c| c.missing = missing)
    }

    /// The name of the policy in the `RateLimit` and `RateLimit-Policy`
    /// fields (default `"tenant"`).
    ///
    /// # Errors
    /// [`InvalidPolicyName`] unless the name is printable ASCII, as a
    /// Structured Field String must be.
    pub fn policy(self, name: &str) -> Result<Self, InvalidPolicyName> {
        if !name.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
            return Err(InvalidPolicyName {
                name: name.to_owned(),
            });
        }
        let mut quoted = String::with_capacity(name.len() + 2);
        quoted.push('"');
        for c in name.chars() {
            if c == '"' || c == '\\' {
                quoted.push('\\');
            }
            quoted.push(c);
        }
        quoted.push('"');
        Ok(self.with_config(|c| c.policy = quoted))
    }

    /// The shared limiter.
    pub fn limiter(&self) -> &Arc<Limiter<S>> {
        &self.config.limiter
    }

    fn with_config(self, change: impl FnOnce(&mut Config<S>)) -> Self {
        let c = &self.config;
        let mut config = Config {
            limiter: Arc::clone(&c.limiter),
            key: c.key.clone(),
            user: c.user.clone(),
            missing: c.missing.clone(),
            policy: c.policy.clone(),
        };
        change(&mut config);
        RateLimitLayer {
            config: Arc::new(config),
        }
    }
}

impl<I, S> Layer<I> for RateLimitLayer<S> {
    type Service = RateLimit<I, S>;

    fn layer(&self, inner: I) -> Self::Service {
        RateLimit {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}
