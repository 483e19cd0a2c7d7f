//! The layer and its settings.

use std::fmt;
use std::sync::Arc;

use ::tower::Layer;
use http::Method;

use super::key::{MissingTenant, TenantKey};
use super::respond::EmptyBody;
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
pub(super) struct Config<S, R> {
    pub(super) limiter: Arc<Limiter<S>>,
    pub(super) key: TenantKey,
    /// Where a request's user comes from, for nested checks.
    pub(super) user: Option<TenantKey>,
    pub(super) missing: MissingTenant,
    /// The policy name as a Structured Field String, quotes included.
    pub(super) policy: String,
    /// The only methods limited; `None`: all of them.
    pub(super) methods: Option<Arc<[Method]>>,
    /// Builds the layer's own answers.
    pub(super) respond: Arc<R>,
}

/// A [`Layer`] that rate-limits each request by tenant with a shared
/// limiter, in process or over Redis; see the [module documentation](super).
///
/// `R` builds the layer's own answers ([`respond_with`](RateLimitLayer::respond_with));
/// by default they have an empty body.
pub struct RateLimitLayer<S = InProcess, R = EmptyBody> {
    pub(super) config: Arc<Config<S, R>>,
}

impl<S, R> Clone for RateLimitLayer<S, R> {
    fn clone(&self) -> Self {
        RateLimitLayer {
            config: Arc::clone(&self.config),
        }
    }
}

impl<S: fmt::Debug, R> fmt::Debug for RateLimitLayer<S, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        f.debug_struct("RateLimitLayer")
            .field("limiter", &c.limiter)
            .field("key", &c.key)
            .field("user", &c.user)
            .field("missing", &c.missing)
            .field("policy", &c.policy)
            .field("methods", &c.methods)
            .finish_non_exhaustive()
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
                methods: None,
                respond: Arc::new(EmptyBody),
            }),
        }
    }
}

impl<S: Store, R> RateLimitLayer<S, R> {
    /// Isolates the users of each tenant one level down: a request whose
    /// `user` key finds a user draws from that user's j of its tenant's k
    /// buckets ([`Builder::per_user`](crate::Builder::per_user),
    /// [`Request::user`](crate::Request::user)), so one user
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

    /// Limits only the requests with one of these methods; the others pass
    /// unlimited, with no `RateLimit` fields, as if
    /// [exempt](super::RequestKey::Exempt).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use axum::http::{HeaderName, Method};
    /// use shuffle_limiter::{Quota, ShardedLimiter, tower::{RateLimitLayer, TenantKey}};
    ///
    /// let limiter = Arc::new(ShardedLimiter::builder().quota(Quota::per_second(50)).build()?);
    /// // Reads are free; writes are limited.
    /// let writes = RateLimitLayer::new(limiter, TenantKey::header(HeaderName::from_static("x-api-key")))
    ///     .methods([Method::POST, Method::PUT, Method::PATCH, Method::DELETE]);
    /// # let _ = writes;
    /// # Ok::<(), shuffle_limiter::ConfigError>(())
    /// ```
    pub fn methods(self, methods: impl IntoIterator<Item = Method>) -> Self {
        let methods: Arc<[Method]> = methods.into_iter().collect();
        self.with_config(|c| c.methods = Some(methods))
    }

    /// Builds the layer's own answers (400, 401, 429, 500) with `respond`,
    /// a [`Respond`](super::Respond) hook such as a closure
    /// `|rejection: Rejection| -> Response<B>`; see [`Respond`](super::Respond)
    /// for a JSON body and a gRPC status.
    pub fn respond_with<R2>(self, respond: R2) -> RateLimitLayer<S, R2> {
        let c = &self.config;
        RateLimitLayer {
            config: Arc::new(Config {
                limiter: Arc::clone(&c.limiter),
                key: c.key.clone(),
                user: c.user.clone(),
                missing: c.missing.clone(),
                policy: c.policy.clone(),
                methods: c.methods.clone(),
                respond: Arc::new(respond),
            }),
        }
    }

    fn with_config(self, change: impl FnOnce(&mut Config<S, R>)) -> Self {
        let c = &self.config;
        let mut config = Config {
            limiter: Arc::clone(&c.limiter),
            key: c.key.clone(),
            user: c.user.clone(),
            missing: c.missing.clone(),
            policy: c.policy.clone(),
            methods: c.methods.clone(),
            respond: Arc::clone(&c.respond),
        };
        change(&mut config);
        RateLimitLayer {
            config: Arc::new(config),
        }
    }
}

impl<I, S, R> Layer<I> for RateLimitLayer<S, R> {
    type Service = RateLimit<I, S, R>;

    fn layer(&self, inner: I) -> Self::Service {
        RateLimit {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}
