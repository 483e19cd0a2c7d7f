//! The config file: envoyproxy/ratelimit's YAML, plus a `shuffle` block.
//!
//! Reading checks everything a build could refuse (each limiter is built
//! once, on a manual clock, and thrown away), so an error points at the
//! file, line and field, and a config that reads builds.

mod error;

use std::path::Path;

use serde::Deserialize;
use shuffle_limiter::Quota;
use shuffle_limiter::set::{LimiterConfig, Rate, Reserve};

pub use error::ConfigError;

use crate::names::step;

/// The longest key, value or name a config may hold, in bytes; requests are
/// held to [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN).
pub const MAX_CONFIG_STRING: usize = 256;

/// A config: one domain per YAML document (documents separated by `---`).
#[derive(Debug, Clone)]
pub struct Config {
    /// The domains, in file order.
    pub domains: Vec<DomainConfig>,
    /// What reading found questionable but kept, one sentence each (such as
    /// a value-less key without `shuffle`); the server logs them.
    pub warnings: Vec<String>,
}

/// One domain: `domain` and its `descriptors`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DomainConfig {
    /// The domain Envoy names in its requests.
    pub domain: String,
    /// The top-level descriptors.
    #[serde(default, deserialize_with = "top_level")]
    pub descriptors: Vec<DescriptorConfig>,
}

/// Reads a list of descriptors, refusing two with the same key and value
/// side by side: they would be one rule twice (its path, limiter and Redis
/// keys the same). The error points at what holds the list: the domain's
/// document, or the descriptor.
fn siblings<'de, D>(deserializer: D) -> Result<Vec<DescriptorConfig>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let descriptors = Vec::<DescriptorConfig>::deserialize(deserializer)?;
    for (j, later) in descriptors.iter().enumerate() {
        let same = |d: &DescriptorConfig| d.key == later.key && d.value == later.value;
        if let Some(i) = descriptors[..j].iter().position(same) {
            return Err(serde::de::Error::custom(format!(
                "[{i}] and [{j}] are both {}: merge them into one",
                step("", later)
            )));
        }
    }
    Ok(descriptors)
}

/// The top-level descriptors: [`siblings`], none a user level (it has no
/// limit above it).
fn top_level<'de, D>(deserializer: D) -> Result<Vec<DescriptorConfig>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let descriptors = siblings(deserializer)?;
    if let Some(i) = descriptors
        .iter()
        .position(|d| matches!(d.action, Action::User(_)))
    {
        return Err(serde::de::Error::custom(format!(
            "[{i}]: shuffle.per_user makes a user level of the limit above it, and a \
             top-level descriptor has none: nest it under a descriptor with a rate_limit \
             and a `shuffle` block"
        )));
    }
    Ok(descriptors)
}

/// One descriptor of the tree, checked.
#[derive(Debug, Clone, Deserialize)]
#[serde(try_from = "RawDescriptor")]
pub struct DescriptorConfig {
    /// The entry's key.
    pub key: String,
    /// The entry's value; `None` matches every value.
    pub value: Option<String>,
    /// What applies when a request's descriptor ends here.
    pub action: Action,
    /// Decide, count, but always answer OK.
    pub shadow_mode: bool,
    /// The nested descriptors.
    pub descriptors: Vec<DescriptorConfig>,
}

/// What a descriptor does when a request's descriptor ends on it.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Nothing: no limit (as a descriptor without `rate_limit`).
    None,
    /// `rate_limit: {unlimited: true}`: OK, no limit.
    Unlimited,
    /// A limit: one limiter with these settings. `shuffled` is false when
    /// the descriptor had no `shuffle` block (one bucket, N = 1).
    Limit {
        /// The limiter's settings (N, k, j, burst, salt, ...).
        limiter: Box<LimiterConfig>,
        /// `rate_limit.name`, the policy name in the `RateLimit` fields.
        name: Option<String>,
        /// Whether the descriptor has a `shuffle` block.
        shuffled: bool,
    },
    /// `shuffle: {per_user: j}` without `rate_limit`: the parent's limit,
    /// with this entry's value as the user.
    User(u32),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDescriptor {
    key: String,
    #[serde(default)]
    value: Option<String>,
    #[serde(default)]
    rate_limit: Option<RawRateLimit>,
    #[serde(default)]
    shadow_mode: bool,
    // Accepted for envoyproxy/ratelimit's configs: metrics here never carry
    // request values (their number would be unbounded).
    #[serde(default)]
    #[allow(dead_code)]
    detailed_metric: bool,
    #[serde(default)]
    shuffle: Option<Shuffle>,
    #[serde(default, deserialize_with = "siblings")]
    descriptors: Vec<DescriptorConfig>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    #[serde(default)]
    unit: Option<String>,
    #[serde(default)]
    requests_per_unit: Option<u32>,
    #[serde(default)]
    rate: Option<Rate>,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Shuffle {
    buckets: Option<u32>,
    max_buckets: Option<u32>,
    per_tenant: Option<u32>,
    per_user: Option<u32>,
    burst: Option<u32>,
    borrow_from: Option<u32>,
    lender_reserve: Option<Reserve>,
    salt: Option<String>,
    tenant_cache: Option<usize>,
}

impl Shuffle {
    fn only_per_user(&self) -> Option<u32> {
        let Shuffle {
            buckets: None,
            max_buckets: None,
            per_tenant: None,
            per_user: Some(j),
            burst: None,
            borrow_from: None,
            lender_reserve: None,
            salt: None,
            tenant_cache: None,
        } = self
        else {
            return None;
        };
        Some(*j)
    }
}

fn check_string(field: &str, s: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("{field} is empty"));
    }
    if s.len() > MAX_CONFIG_STRING {
        return Err(format!(
            "{field} is {} bytes long: at most {MAX_CONFIG_STRING}",
            s.len()
        ));
    }
    Ok(())
}

impl RawRateLimit {
    /// The rate, from `rate` or from `unit` and `requests_per_unit`.
    fn rate(&self) -> Result<Rate, String> {
        match (self.rate, &self.unit, self.requests_per_unit) {
            (Some(rate), None, None) => Ok(rate),
            (Some(_), _, _) => Err(
                "rate_limit: give either `rate` (\"100/10s\") or `unit` and \
                 `requests_per_unit`, not both"
                    .into(),
            ),
            (None, Some(unit), Some(count)) => {
                let per = match unit.to_ascii_lowercase().as_str() {
                    "second" => "s",
                    "minute" => "m",
                    "hour" => "h",
                    "day" => "d",
                    "week" => "7d",
                    other => {
                        return Err(format!(
                            "rate_limit.unit: unknown unit {other:?}: use second, minute, \
                             hour, day or week, or `rate: \"N/30d\"` for any other period"
                        ));
                    }
                };
                format!("{count}/{per}")
                    .parse()
                    .map_err(|e| format!("rate_limit.requests_per_unit: {e}"))
            }
            (None, None, _) => Err(
                "rate_limit needs `unit` and `requests_per_unit` (or `rate`, or \
                 `unlimited: true`)"
                    .into(),
            ),
            (None, Some(_), None) => Err("rate_limit.requests_per_unit is missing".into()),
        }
    }
}

impl TryFrom<RawDescriptor> for DescriptorConfig {
    type Error = String;

    fn try_from(raw: RawDescriptor) -> Result<Self, String> {
        check_string("key", &raw.key)?;
        if let Some(value) = &raw.value {
            check_string("value", value)
                .map_err(|e| format!("{e} (leave `value` out to match every value of the key)"))?;
            if value.contains('*') {
                return Err(
                    "value: wildcards (`*`) are not supported here: leave `value` \
                            out to match every value of the key"
                        .into(),
                );
            }
        }
        let shuffle = raw.shuffle;
        let action = match (raw.rate_limit, &shuffle) {
            (None, None) => Action::None,
            (None, Some(shuffle)) => {
                let Some(j) = shuffle.only_per_user() else {
                    return Err("shuffle: a descriptor without rate_limit takes only \
                                `shuffle: {per_user: J}` (a user level under its parent's \
                                limit); the other settings go beside the parent's rate_limit"
                        .into());
                };
                if raw.value.is_some() {
                    return Err("shuffle.per_user: a user level matches every value of its \
                                key: leave `value` out"
                        .into());
                }
                Action::User(j)
            }
            (Some(limit), shuffle) => {
                if let Some(name) = &limit.name {
                    check_string("rate_limit.name", name)?;
                    if !name.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
                        return Err("rate_limit.name: printable ASCII only (it is sent in \
                                    the RateLimit fields)"
                            .into());
                    }
                }
                if limit.unlimited {
                    if limit.unit.is_some() || limit.requests_per_unit.is_some() {
                        return Err("rate_limit: `unlimited: true` takes no unit or rate".into());
                    }
                    if shuffle.is_some() {
                        return Err("shuffle: an unlimited descriptor has nothing to share".into());
                    }
                    Action::Unlimited
                } else {
                    let rate = limit.rate()?;
                    let config = limiter_config(rate, shuffle.as_ref(), &raw.descriptors)?;
                    Action::Limit {
                        limiter: Box::new(config),
                        name: limit.name,
                        shuffled: shuffle.is_some(),
                    }
                }
            }
        };
        let limited = matches!(action, Action::Limit { .. });
        if let Some(i) = (raw.descriptors.iter())
            .position(|d| matches!(d.action, Action::User(_)))
            .filter(|_| !limited)
        {
            return Err(format!(
                "descriptors[{i}]: shuffle.per_user makes a user level of the limit above \
                 it, and this descriptor has none: give it a rate_limit with a rate (and a \
                 `shuffle` block)"
            ));
        }
        Ok(DescriptorConfig {
            key: raw.key,
            value: raw.value,
            action,
            shadow_mode: raw.shadow_mode,
            descriptors: raw.descriptors,
        })
    }
}

/// The tenant cache of a rule without `shuffle` (about 12 KB).
const ONE_BUCKET_CACHE: usize = 1024;

/// The limiter of a descriptor with a rate: its `shuffle` settings, the
/// per_user of a user level below it, checked by building it once.
fn limiter_config(
    rate: Rate,
    shuffle: Option<&Shuffle>,
    children: &[DescriptorConfig],
) -> Result<LimiterConfig, String> {
    let mut config = LimiterConfig::new(rate);
    match shuffle {
        Some(s) => {
            if s.per_user.is_some() {
                return Err(
                    "shuffle.per_user goes on the nested descriptor whose value is \
                            the user, not beside the rate_limit"
                        .into(),
                );
            }
            config.burst = s.burst;
            config.buckets = s.buckets;
            config.max_buckets = s.max_buckets;
            config.per_tenant = s.per_tenant;
            config.borrow_from = s.borrow_from;
            config.lender_reserve = s.lender_reserve;
            config.salt = s.salt.clone();
            config.tenant_cache = s.tenant_cache;
        }
        // No shuffle: one budget, one bucket. Every value's shard is that
        // bucket, so a small cache does: a fixed value is one tenant, and
        // the library's default (1.2 MB) per such rule made a config of a
        // few hundred plain descriptors take hundreds of megabytes.
        None => {
            config.buckets = Some(1);
            config.per_tenant = Some(1);
            config.tenant_cache = Some(ONE_BUCKET_CACHE);
        }
    }
    let users: Vec<u32> = children
        .iter()
        .filter_map(|c| match c.action {
            Action::User(j) => Some(j),
            _ => None,
        })
        .collect();
    if let Some(&j) = users.first() {
        if users.iter().any(|&other| other != j) {
            return Err(
                "descriptors: two user levels with different per_user under one \
                        limit; give them the same"
                    .into(),
            );
        }
        if shuffle.is_none() {
            return Err("descriptors: a user level (`shuffle: {per_user}`) needs a \
                        `shuffle` block beside this rate_limit"
                .into());
        }
        config.per_user = Some(j);
    }
    // Checked without building: a limiter's tenant cache can be tens of
    // megabytes, and the rules build their own.
    config
        .builder("check")
        .validate()
        .map_err(|e| format!("shuffle: {e}"))?;
    Ok(config)
}

impl Config {
    /// Reads and checks the config file at `path`.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the file, line and field.
    pub fn read(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
            file: path.to_owned(),
            line: None,
            column: None,
            path: String::new(),
            message: format!("cannot read it: {e}"),
        })?;
        Config::parse(path, &text)
    }

    /// Reads and checks a config from `text`; `file` names it in errors.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the file, line and field.
    pub fn parse(file: &Path, text: &str) -> Result<Config, ConfigError> {
        let error = |line, column, path: String, message| ConfigError {
            file: file.to_owned(),
            line,
            column,
            path,
            message,
        };
        let mut domains: Vec<DomainConfig> = Vec::new();
        for document in serde_yaml_ng::Deserializer::from_str(text) {
            // An empty document (a `---` that ends the file, or two in a
            // row) holds no domain: YAML reads it as null.
            let domain: Option<DomainConfig> =
                serde_path_to_error::deserialize(document).map_err(|e| {
                    let path = e.path().to_string();
                    let inner = e.into_inner();
                    let at = inner.location();
                    // The message without serde_yaml_ng's own " at line ..".
                    let mut message = inner.to_string();
                    if let Some(cut) = message.find(" at line ") {
                        message.truncate(cut);
                    }
                    // serde_yaml_ng may begin with (a part of) the path too.
                    if let Some((first, rest)) = message.split_once(": ")
                        && !first.contains(' ')
                        && path.starts_with(first)
                    {
                        message = rest.to_owned();
                    }
                    error(
                        at.as_ref().map(|l| l.line()),
                        at.as_ref().map(|l| l.column()),
                        path,
                        message,
                    )
                })?;
            let Some(domain) = domain else { continue };
            check_string("domain", &domain.domain)
                .map_err(|e| error(None, None, "domain".into(), e))?;
            if domains.iter().any(|d| d.domain == domain.domain) {
                let message = format!("domain {:?} appears twice", domain.domain);
                return Err(error(None, None, "domain".into(), message));
            }
            domains.push(domain);
        }
        if domains.is_empty() {
            // An empty file is more likely a write caught halfway than a
            // wish to limit nothing.
            let message = "no domain: the file holds no document".to_owned();
            return Err(error(None, None, String::new(), message));
        }
        let mut warnings = Vec::new();
        for domain in &domains {
            warn_unshuffled(&domain.domain, &domain.descriptors, "", &mut warnings);
        }
        Ok(Config { domains, warnings })
    }
}

fn warn_unshuffled(
    domain: &str,
    descriptors: &[DescriptorConfig],
    parent: &str,
    warnings: &mut Vec<String>,
) {
    for d in descriptors {
        let path = step(parent, d);
        if let Action::Limit {
            shuffled: false,
            limiter,
            ..
        } = &d.action
            && d.value.is_none()
        {
            warnings.push(format!(
                "domain {domain:?}, descriptor {path}: a key without a value and without \
                     `shuffle` is one budget ({}) shared by every value, in one bucket; \
                     add `shuffle: {{buckets: 16, per_tenant: 2}}` so that one value cannot \
                     take it all",
                quota_of(limiter)
            ));
        }
        warn_unshuffled(domain, &d.descriptors, &path, warnings);
    }
}

/// The quota a limiter config builds with.
pub(crate) fn quota_of(config: &LimiterConfig) -> Quota {
    let quota = config.rate.quota();
    match config.burst {
        Some(burst) => quota.with_burst(burst),
        None => quota,
    }
}
