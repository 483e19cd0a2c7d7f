//! A config compiled for lookups: per domain, a tree of descriptors, each
//! rule with its limiter; built anew on a reload, reusing the limiters of
//! the rules that stay.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::RateLimit as ProtoLimit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use shuffle_limiter::Quota;
use shuffle_limiter::redis::{FailurePolicy, RedisOptions};
use shuffle_limiter::set::LimiterConfig;

use crate::config::{Action, Config, DescriptorConfig, quota_of};
use crate::engine::Engine;
use crate::metrics::{Counters, Metrics};
use crate::names::{escape, redis_name, sf_string, step};
use crate::wire::Entry;

/// One rule: a descriptor with a rate.
pub(crate) struct Rule {
    /// Its identity: the domain, [`escape`]d, `.` and the descriptor's path
    /// (escaped too), so that no two rules share it: the key of the rules
    /// that stay across a reload, and of the Redis keys.
    pub(crate) path: String,
    pub(crate) engine: Arc<Engine>,
    pub(crate) shadow: bool,
    /// The policy name as an sf-string, quotes included.
    pub(crate) policy: String,
    pub(crate) current_limit: ProtoLimit,
    pub(crate) counters: Counters,
    /// The settings it was built with.
    limiter: LimiterConfig,
    redis: bool,
}

enum Then {
    Nothing,
    Unlimited,
    Limit(Arc<Rule>),
    User(Arc<Rule>),
}

/// A key's levels, by value. Keys and values are bytes: a request's are
/// matched byte for byte, UTF-8 or not ([`crate::wire`]).
#[derive(Default)]
struct Key {
    values: HashMap<Vec<u8>, Node>,
    any: Option<Node>,
}

struct Node {
    then: Then,
    /// Whether this level matches every value (its value is part of the
    /// tenant).
    wildcard: bool,
    children: HashMap<Vec<u8>, Key>,
}

/// A request's descriptor matched to a rule.
pub(crate) enum Found<'a> {
    /// No rule: OK, no limit.
    None,
    /// `unlimited`: OK, no limit.
    Unlimited,
    /// A rule, with the tenant and maybe the user drawn on.
    Rule {
        rule: &'a Arc<Rule>,
        tenant: Cow<'a, [u8]>,
        user: Option<&'a [u8]>,
    },
}

/// Every domain's tree.
pub(crate) struct Rules {
    domains: HashMap<Vec<u8>, HashMap<Vec<u8>, Key>>,
    pub(crate) counters: Metrics,
}

/// Where to keep the buckets: in process, or in this Redis.
#[derive(Clone, Debug)]
pub(crate) enum StoreChoice {
    Local,
    Redis(String),
}

impl Rules {
    /// The rule for one request descriptor in `domain`, if any.
    /// `None` when the domain is unknown.
    ///
    /// Domains, keys and values are compared as bytes. A value that is not
    /// UTF-8 equals no `value` of the config (YAML is UTF-8), so a
    /// value-less key matches it, and its bytes, as they came, are the
    /// tenant: such values are told apart as any others are.
    pub(crate) fn find<'a>(&'a self, domain: &[u8], entries: &'a [Entry]) -> Option<Found<'a>> {
        let mut keys = self.domains.get(domain)?;
        let mut wild: Vec<&'a [u8]> = Vec::new();
        let mut last = None;
        for Entry { key, value } in entries {
            let Some(level) = keys.get(key.as_slice()) else {
                return Some(Found::None);
            };
            let Some(node) = level.values.get(value.as_slice()).or(level.any.as_ref()) else {
                return Some(Found::None);
            };
            if node.wildcard {
                wild.push(value);
            }
            last = Some(node);
            keys = &node.children;
        }
        let Some(node) = last else {
            return Some(Found::None);
        };
        let (rule, user) = match &node.then {
            Then::Nothing => return Some(Found::None),
            Then::Unlimited => return Some(Found::Unlimited),
            Then::Limit(rule) => (rule, None),
            // A user level matches every value: its value was pushed last.
            Then::User(rule) => (rule, wild.pop()),
        };
        let tenant = match wild.as_slice() {
            [] => Cow::Borrowed(&[][..]),
            [one] => Cow::Borrowed(*one),
            // Length-prefixed, so that ("a:", "b") and ("a", ":b") differ.
            many => {
                let mut joined = Vec::new();
                for v in many {
                    joined.extend_from_slice(&(v.len() as u32).to_be_bytes());
                    joined.extend_from_slice(v);
                }
                Cow::Owned(joined)
            }
        };
        Some(Found::Rule { rule, tenant, user })
    }

    /// How many rules (descriptors with a rate) are served.
    pub(crate) fn len(&self) -> usize {
        let mut all = HashMap::new();
        for keys in self.domains.values() {
            collect(keys, &mut all);
        }
        all.len()
    }

    /// Builds every rule of `config`, taking the limiter of each rule of
    /// `old` that stays (same domain, path and settings but for the quota
    /// and N, which it changes live). Nothing changes before all is built;
    /// then the live changes are made, and on the first that fails those
    /// made are changed back and the build fails.
    pub(crate) async fn build(
        config: &Config,
        old: Option<&Rules>,
        store: &StoreChoice,
        metrics: &Metrics,
    ) -> Result<Rules, String> {
        let mut old_rules = HashMap::new();
        if let Some(old) = old {
            for keys in old.domains.values() {
                collect(keys, &mut old_rules);
            }
        }
        let mut builder = Build {
            old: old_rules,
            store,
            metrics,
            changes: Vec::new(),
        };
        let mut domains = HashMap::new();
        for domain in &config.domains {
            let mut keys = HashMap::new();
            for d in &domain.descriptors {
                builder.add(&domain.domain, "", d, None, &mut keys).await?;
            }
            domains.insert(domain.domain.clone().into_bytes(), keys);
        }
        // Everything is built: now the live changes, each to a limiter the
        // old rules serve too. One that fails fails the reload, and those
        // made before it are changed back, so that the old rules go on
        // serving as they were (as far as the store lets them be changed
        // back: a failure to is logged).
        let mut made: Vec<(Arc<Rule>, Quota, u32)> = Vec::with_capacity(builder.changes.len());
        for (rule, quota, buckets) in builder.changes {
            let (old_quota, old_n, _) = rule.engine.quota_and_buckets();
            if let Err(e) = rule.engine.change(quota, buckets).await {
                for (rule, quota, buckets) in made.into_iter().rev() {
                    if let Err(e) = rule.engine.change(quota, buckets).await {
                        tracing::error!(
                            rule = %rule.path,
                            "reload failed; could not change the quota or N back: {e}"
                        );
                    }
                }
                return Err(format!(
                    "{}: could not change the quota or N live: {e}",
                    rule.path
                ));
            }
            made.push((rule, old_quota, old_n));
        }
        Ok(Rules {
            domains,
            counters: metrics.clone(),
        })
    }
}

fn collect(keys: &HashMap<Vec<u8>, Key>, out: &mut HashMap<String, Arc<Rule>>) {
    for key in keys.values() {
        for node in key.values.values().chain(key.any.iter()) {
            if let Then::Limit(rule) = &node.then {
                out.insert(rule.path.clone(), Arc::clone(rule));
            }
            collect(&node.children, out);
        }
    }
}

struct Build<'a> {
    old: HashMap<String, Arc<Rule>>,
    store: &'a StoreChoice,
    metrics: &'a Metrics,
    changes: Vec<(Arc<Rule>, Quota, u32)>,
}

/// Whether two limiter configs differ in nothing but what changes live:
/// the rate, the burst and N.
fn same_but_live(old: &LimiterConfig, new: &LimiterConfig) -> bool {
    let mut old = old.clone();
    old.rate = new.rate;
    old.burst = new.burst;
    old.buckets = new.buckets;
    old == *new
}

impl Build<'_> {
    async fn add(
        &mut self,
        domain: &str,
        parent: &str,
        d: &DescriptorConfig,
        parent_rule: Option<&Arc<Rule>>,
        keys: &mut HashMap<Vec<u8>, Key>,
    ) -> Result<(), String> {
        let path = step(parent, d);
        let full = format!("{}.{path}", escape(domain));
        let then = match &d.action {
            Action::None => Then::Nothing,
            Action::Unlimited => Then::Unlimited,
            Action::User(_) => match parent_rule {
                Some(rule) => Then::User(Arc::clone(rule)),
                None => return Err(format!("{full}: a user level needs a parent with a rate")),
            },
            Action::Limit { limiter, name, .. } => {
                let rule = self.rule(domain, &path, &full, limiter, name, d).await?;
                Then::Limit(rule)
            }
        };
        let own_rule = match &then {
            Then::Limit(rule) => Some(Arc::clone(rule)),
            _ => None,
        };
        let mut node = Node {
            then,
            wildcard: d.value.is_none(),
            children: HashMap::new(),
        };
        for child in &d.descriptors {
            Box::pin(self.add(domain, &path, child, own_rule.as_ref(), &mut node.children)).await?;
        }
        let key = keys.entry(d.key.clone().into_bytes()).or_default();
        let slot = match &d.value {
            Some(value) => key.values.insert(value.clone().into_bytes(), node),
            None => key.any.replace(node),
        };
        if slot.is_some() {
            return Err(format!("{full}: this descriptor appears twice"));
        }
        Ok(())
    }

    async fn rule(
        &mut self,
        domain: &str,
        path: &str,
        full: &str,
        limiter: &LimiterConfig,
        name: &Option<String>,
        d: &DescriptorConfig,
    ) -> Result<Arc<Rule>, String> {
        let quota = quota_of(limiter);
        let redis = matches!(self.store, StoreChoice::Redis(_));
        let policy = sf_string(name.as_deref().unwrap_or(path));
        let counters = self.metrics.counters(domain, path);
        let current_limit = proto_limit(name.as_deref().unwrap_or(""), quota);
        let rule = |engine| Rule {
            path: full.to_owned(),
            engine,
            shadow: d.shadow_mode,
            policy,
            current_limit,
            counters,
            limiter: limiter.clone(),
            redis,
        };
        if let Some(old) = self.old.get(full)
            && old.redis == redis
            && same_but_live(&old.limiter, limiter)
        {
            let (old_quota, old_n, max) = old.engine.quota_and_buckets();
            // N when unset: what the build would choose, read from a
            // throwaway build (the library's defaults, not a copy), without
            // a tenant cache, which can be tens of megabytes.
            let check = limiter
                .builder(full)
                .tenant_cache(0)
                .clock(shuffle_limiter::ManualClock::new());
            let n = check.build().map_err(|e| format!("{full}: {e}"))?.buckets();
            if n <= max {
                let rule = Arc::new(rule(Arc::clone(&old.engine)));
                if (old_quota, old_n) != (quota, n) {
                    self.changes.push((Arc::clone(&rule), quota, n));
                }
                return Ok(rule);
            }
        }
        let builder = limiter.builder(&redis_name(full));
        let engine = Arc::new(match self.store {
            StoreChoice::Local => {
                Engine::Local(builder.build().map_err(|e| format!("{full}: {e}"))?)
            }
            StoreChoice::Redis(url) => {
                let options = RedisOptions::new(FailurePolicy::FailClosed);
                Engine::Redis(
                    builder
                        .build_redis(url, options)
                        .await
                        .map_err(|e| format!("{full}: {e}"))?,
                )
            }
        });
        Ok(Arc::new(rule(engine)))
    }
}

/// The configured rate in Envoy's units: the smallest unit of second,
/// minute, hour, day, week, month (30 days) or year (365 days, as
/// envoyproxy/ratelimit counts them) at least the period that holds a whole
/// count; else the smallest that holds one request or more, rounded down
/// (a year's, for a rate slower than one a year).
fn proto_limit(name: &str, quota: Quota) -> ProtoLimit {
    let period = quota.period().as_nanos().max(1);
    const DAY: u128 = 86_400;
    let units = [
        (Unit::Second, 1u128),
        (Unit::Minute, 60),
        (Unit::Hour, 3_600),
        (Unit::Day, DAY),
        (Unit::Week, 7 * DAY),
        (Unit::Month, 30 * DAY),
        (Unit::Year, 365 * DAY),
    ];
    let count = u128::from(quota.count());
    let per = |secs: u128| count * secs * 1_000_000_000 / period;
    let whole = units.iter().find(|(_, secs)| {
        let nanos = secs * 1_000_000_000;
        nanos >= period && (count * nanos) % period == 0
    });
    let (unit, secs) = whole
        .or_else(|| units.iter().find(|&&(_, secs)| per(secs) >= 1))
        .copied()
        .unwrap_or((Unit::Year, 365 * DAY));
    ProtoLimit {
        name: name.to_owned(),
        requests_per_unit: u32::try_from(per(secs)).unwrap_or(u32::MAX),
        unit: unit as i32,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rates_read_in_envoy_units() {
        let limit = proto_limit("", Quota::with_period(100, Duration::from_secs(10)));
        assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (600, Unit::Minute as i32)
        );
        let limit = proto_limit("", Quota::per_second(5));
        assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (5, Unit::Second as i32)
        );
        let limit = proto_limit("", Quota::with_period(7, Duration::from_secs(7 * 86_400)));
        assert_eq!(
            (limit.requests_per_unit, limit.unit),
            (7, Unit::Week as i32)
        );
        // Slower than one a day: a week, a month or a year holds it.
        let day = Duration::from_secs(86_400);
        let read = |count, period| {
            let limit = proto_limit("", Quota::with_period(count, period));
            (limit.requests_per_unit, limit.unit)
        };
        assert_eq!(read(1, day * 7), (1, Unit::Week as i32));
        assert_eq!(read(1, day * 30), (1, Unit::Month as i32));
        assert_eq!(read(3, day * 2), (45, Unit::Month as i32));
        assert_eq!(read(2, day * 365), (2, Unit::Year as i32));
        // No whole count in any unit: the first holding one, rounded down.
        assert_eq!(read(1, day * 11), (2, Unit::Month as i32));
        assert_eq!(read(1, day * 400), (0, Unit::Year as i32));
    }
}
