//! A limiter whose buckets live in Redis, as a config gives it: [`RedisConfig`]
//! and the keys beside `redis = "..."`, each checked inside its value's
//! deserializer.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};

use super::config::{LimiterConfig, field};
use super::duration_text::DurationText;
use crate::redis::{FailurePolicy, RedisOptions};

/// Where a limiter's buckets live when they are in Redis, and what the
/// limiter does when Redis fails: the `redis` key of a `[limiters.NAME]`
/// table and its neighbours.
///
/// Unset options keep the defaults of [`RedisOptions::new`]. A set's Redis
/// limiter is always in the one-slot layout, on one server (or a primary)
/// at `url`: the config has no way yet to choose
/// [`Layout::Spread`](crate::redis::Layout::Spread) or a Redis Cluster.
/// For those, build the limiter with
/// [`build_redis_with`](crate::Builder::build_redis_with) on a cluster
/// connection and the [`RedisOptions`] you need. `Debug` hides
/// the password of the URL; `Serialize` writes the URL whole, so that the
/// output reads back as the same config: keep a printed config as secret as
/// the file it came from.
///
/// ```
/// use std::time::Duration;
/// use shuffle_limiter::redis::FailurePolicy;
/// use shuffle_limiter::set::SetConfig;
///
/// let config: SetConfig = toml::from_str(r#"
///     [limiters.amazon]
///     rate = "5/s"
///     redis = "redis://127.0.0.1:6379"
///     failure_policy = "local_fallback"
///     replicas = 5
///     deadline = "5ms"
/// "#)?;
/// let redis = config.limiters["amazon"].redis.as_ref().expect("a Redis limiter");
/// assert_eq!(redis.url, "redis://127.0.0.1:6379");
/// assert_eq!(redis.failure_policy, FailurePolicy::LocalFallback { replicas: 5 });
/// assert_eq!(redis.deadline, Some(Duration::from_millis(5)));
/// assert_eq!(redis.retry_every, None);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisConfig {
    /// The server, as `redis://[[user]:password@]host[:port][/db]`.
    pub url: String,
    /// What the limiter does when Redis does not answer in time.
    pub failure_policy: FailurePolicy,
    /// The longest a decision may take ([`RedisOptions::deadline`]).
    pub deadline: Option<Duration>,
    /// How long Redis is left alone after a failure
    /// ([`RedisOptions::retry_every`]).
    pub retry_every: Option<Duration>,
    /// How long building waits for Redis before it goes on without it
    /// ([`RedisOptions::connect_timeout`]).
    pub connect_timeout: Option<Duration>,
    /// Whether denials are remembered until their retry time
    /// ([`RedisOptions::cache_denials`]).
    pub cache_denials: Option<bool>,
    /// A prefix for the limiter's Redis keys ([`RedisOptions::key_prefix`]):
    /// none by default, so two configs with the same `[limiters.NAME]` on
    /// one Redis share that limiter's budget unless their prefixes differ.
    pub key_prefix: Option<String>,
}

impl RedisConfig {
    /// Buckets in the Redis at `url`, failing closed, every other option at
    /// its default.
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            failure_policy: FailurePolicy::FailClosed,
            deadline: None,
            retry_every: None,
            connect_timeout: None,
            cache_denials: None,
            key_prefix: None,
        }
    }

    /// The options to build the limiter with.
    pub fn options(&self) -> RedisOptions {
        let mut options = RedisOptions::new(self.failure_policy);
        if let Some(deadline) = self.deadline {
            options = options.deadline(deadline);
        }
        if let Some(retry_every) = self.retry_every {
            options = options.retry_every(retry_every);
        }
        if let Some(connect_timeout) = self.connect_timeout {
            options = options.connect_timeout(connect_timeout);
        }
        if let Some(cache) = self.cache_denials {
            options = options.cache_denials(cache);
        }
        if let Some(prefix) = &self.key_prefix {
            options = options.key_prefix(prefix.as_str());
        }
        options
    }
}

/// The config key of the first Redis setting in which `new` differs from
/// `old`, for a reload that refuses it: `redis` for the URL, or when only
/// one of them is in Redis.
pub(super) fn changed(old: Option<&RedisConfig>, new: Option<&RedisConfig>) -> &'static str {
    let (Some(old), Some(new)) = (old, new) else {
        return "redis";
    };
    let policies = (old.failure_policy, new.failure_policy);
    if old.url != new.url {
        "redis"
    } else if policies.0 != policies.1 {
        match policies {
            (FailurePolicy::LocalFallback { .. }, FailurePolicy::LocalFallback { .. }) => {
                "replicas"
            }
            _ => "failure_policy",
        }
    } else if old.deadline != new.deadline {
        "deadline"
    } else if old.retry_every != new.retry_every {
        "retry_every"
    } else if old.connect_timeout != new.connect_timeout {
        "connect_timeout"
    } else if old.cache_denials != new.cache_denials {
        "cache_denials"
    } else {
        "key_prefix"
    }
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &Redacted(&self.url))
            .field("failure_policy", &self.failure_policy)
            .field("deadline", &self.deadline)
            .field("retry_every", &self.retry_every)
            .field("connect_timeout", &self.connect_timeout)
            .field("cache_denials", &self.cache_denials)
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

/// A URL with its password shown as `***`, wherever a URL the `redis`
/// crate reads may hold one: `scheme://user:password@host`, or the `pass`
/// or `password` of the query (`redis+unix:///path?pass=...`). Configs get
/// logged.
struct Redacted<'a>(&'a str);

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (head, query) = match self.0.split_once('?') {
            Some((head, query)) => (head, Some(query)),
            None => (self.0, None),
        };
        let start = head.find("://").map_or(0, |i| i + 3);
        let authority = head[start..].split('/').next().unwrap_or("");
        let mut shown = match authority.rfind('@').and_then(|at| {
            let (user, _password) = authority[..at].split_once(':')?;
            Some((user, at))
        }) {
            Some((user, at)) => format!("{}{user}:***{}", &head[..start], &head[start + at..]),
            None => head.to_owned(),
        };
        if let Some(query) = query {
            let pairs: Vec<String> = (query.split('&'))
                .map(|pair| match pair.split_once('=') {
                    Some((key, _)) if ["pass", "password"].contains(&key) => format!("{key}=***"),
                    _ => pair.to_owned(),
                })
                .collect();
            shown = format!("{shown}?{}", pairs.join("&"));
        }
        fmt::Debug::fmt(&shown, f)
    }
}

/// The Redis keys of one `[limiters.NAME]` table, gathered as they come and
/// checked together at its end.
#[derive(Default)]
pub(super) struct RedisKeys {
    url: Option<Url>,
    policy: Option<Policy>,
    replicas: Option<Replicas>,
    deadline: Option<DurationText>,
    retry_every: Option<DurationText>,
    connect_timeout: Option<DurationText>,
    cache_denials: Option<bool>,
    key_prefix: Option<Prefix>,
}

impl RedisKeys {
    /// Reads the value of a Redis key; `false` for any other key.
    pub(super) fn read<'de, A: MapAccess<'de>>(
        &mut self,
        map: &mut A,
        limiter: &str,
        key: &str,
    ) -> Result<bool, A::Error> {
        match key {
            "redis" => field(map, &mut self.url, limiter, key)?,
            "failure_policy" => field(map, &mut self.policy, limiter, key)?,
            "replicas" => field(map, &mut self.replicas, limiter, key)?,
            "deadline" => field(map, &mut self.deadline, limiter, key)?,
            "retry_every" => field(map, &mut self.retry_every, limiter, key)?,
            "connect_timeout" => field(map, &mut self.connect_timeout, limiter, key)?,
            "cache_denials" => field(map, &mut self.cache_denials, limiter, key)?,
            "key_prefix" => field(map, &mut self.key_prefix, limiter, key)?,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Checks the keys against each other and sets `config.redis`.
    pub(super) fn finish<E: de::Error>(
        self,
        limiter: &str,
        config: &mut LimiterConfig,
    ) -> Result<(), E> {
        let place = |key: &str| format!("limiters.{limiter}.{key}");
        let Some(Url(url)) = self.url else {
            return match self.first_option() {
                Some(key) => Err(E::custom(format_args!(
                    "{}: only a Redis limiter takes {key}: add redis = \"redis://HOST:PORT\" \
                     to [limiters.{limiter}], or remove {key}",
                    place(key)
                ))),
                None => Ok(()),
            };
        };
        // The name becomes the hash tag of the keys, `{NAME}:b0`, as
        // `build_redis` requires; saying so here names the table to rename.
        if limiter.is_empty() || limiter.contains(['{', '}']) {
            return Err(E::custom(format_args!(
                "{}: the name {limiter:?} cannot be a Redis hash tag: name the table \
                 without '{{' or '}}'",
                place("redis")
            )));
        }
        let failure_policy = match (self.policy.unwrap_or(Policy::FailClosed), self.replicas) {
            (Policy::FailClosed, None) => FailurePolicy::FailClosed,
            (Policy::FailOpen, None) => FailurePolicy::FailOpen,
            (Policy::LocalFallback, Some(Replicas(replicas))) => {
                FailurePolicy::LocalFallback { replicas }
            }
            (Policy::LocalFallback, None) => {
                return Err(E::custom(format_args!(
                    "{}: missing: failure_policy = \"local_fallback\" needs the number of \
                     processes that share the budget, such as replicas = 4",
                    place("replicas")
                )));
            }
            (Policy::FailClosed | Policy::FailOpen, Some(_)) => {
                return Err(E::custom(format_args!(
                    "{}: only failure_policy = \"local_fallback\" takes replicas: set it, \
                     or remove replicas",
                    place("replicas")
                )));
            }
        };
        config.redis = Some(RedisConfig {
            url,
            failure_policy,
            deadline: self.deadline.map(|s| s.0),
            retry_every: self.retry_every.map(|s| s.0),
            connect_timeout: self.connect_timeout.map(|s| s.0),
            cache_denials: self.cache_denials,
            key_prefix: self.key_prefix.map(|p| p.0),
        });
        Ok(())
    }

    /// The first option given, in the order of the docs' table.
    fn first_option(&self) -> Option<&'static str> {
        [
            ("failure_policy", self.policy.is_some()),
            ("replicas", self.replicas.is_some()),
            ("deadline", self.deadline.is_some()),
            ("retry_every", self.retry_every.is_some()),
            ("connect_timeout", self.connect_timeout.is_some()),
            ("cache_denials", self.cache_denials.is_some()),
            ("key_prefix", self.key_prefix.is_some()),
        ]
        .into_iter()
        .find_map(|(key, given)| given.then_some(key))
    }
}

/// A string that the `redis` crate reads as a server's URL.
struct Url(String);

impl<'de> Deserialize<'de> for Url {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Url, D::Error> {
        struct UrlVisitor;
        impl Visitor<'_> for UrlVisitor {
            type Value = Url;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Redis URL such as \"redis://127.0.0.1:6379\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Url, E> {
                if s.is_empty() {
                    return Err(E::custom(
                        "empty: write the server's URL, such as \"redis://127.0.0.1:6379\"",
                    ));
                }
                // The message leaves the URL out: it may hold a password.
                ::redis::IntoConnectionInfo::into_connection_info(s).map_err(|e| {
                    E::custom(format_args!(
                        "not a Redis URL ({e}): write \
                         redis://[[user]:password@]host[:port][/db], such as \
                         \"redis://127.0.0.1:6379\""
                    ))
                })?;
                Ok(Url(s.to_owned()))
            }
        }
        deserializer.deserialize_str(UrlVisitor)
    }
}

/// A key prefix: any string without `{` or `}`, which would move the keys'
/// hash tag.
struct Prefix(String);

impl<'de> Deserialize<'de> for Prefix {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Prefix, D::Error> {
        let prefix = String::deserialize(deserializer)?;
        if prefix.contains(['{', '}']) {
            return Err(de::Error::custom(format_args!(
                "{prefix:?} holds a '{{' or '}}', which would change the keys' hash tag: \
                 use a prefix without braces, such as \"billing:\""
            )));
        }
        Ok(Prefix(prefix))
    }
}

/// `failure_policy`, before `replicas` completes it.
#[derive(Clone, Copy)]
enum Policy {
    FailClosed,
    FailOpen,
    LocalFallback,
}

impl<'de> Deserialize<'de> for Policy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Policy, D::Error> {
        struct PolicyVisitor;
        impl Visitor<'_> for PolicyVisitor {
            type Value = Policy;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"fail_closed\", \"fail_open\" or \"local_fallback\"")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Policy, E> {
                match s {
                    "fail_closed" => Ok(Policy::FailClosed),
                    "fail_open" => Ok(Policy::FailOpen),
                    "local_fallback" => Ok(Policy::LocalFallback),
                    _ => Err(E::custom(format_args!(
                        "unknown policy {s:?}: use \"fail_closed\" (deny while Redis is \
                         away), \"fail_open\" (grant) or \"local_fallback\" (decide in \
                         process, with replicas)"
                    ))),
                }
            }
        }
        deserializer.deserialize_str(PolicyVisitor)
    }
}

/// How many processes share the budget: at least 1.
struct Replicas(u32);

impl<'de> Deserialize<'de> for Replicas {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Replicas, D::Error> {
        match u32::deserialize(deserializer)? {
            0 => Err(de::Error::custom(
                "zero: use the number of processes that share the budget, at least 1",
            )),
            n => Ok(Replicas(n)),
        }
    }
}
