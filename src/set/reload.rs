//! Applying a new config to a running set: unchanged limiters keep their
//! state, changed quotas and N change live, removed limiters leave the set,
//! new ones start.

use std::collections::BTreeMap;
use std::sync::Arc;

#[cfg(feature = "redis")]
use super::build_any;
use super::error::SetErrorKind;
use super::member::Entry;
use super::{
    InFlights, LimiterConfig, LimiterSet, Map, RedisInFlights, SetConfig, SetError, build_local,
};
use crate::clock::Clock;
use crate::error::ConfigError;
use crate::{DEFAULT_LENDER_RESERVE, DEFAULT_TENANT_CACHE, Quota, ShardedLimiter};

/// What [`LimiterSet::reload`] did, limiter by limiter, each list sorted by
/// name: the new set is in [`set`](Reload::set).
#[derive(Debug)]
pub struct Reload<C> {
    set: LimiterSet<C>,
    changed: Vec<String>,
    added: Vec<String>,
    removed: Vec<String>,
}

impl<C> Reload<C> {
    /// The set the new config describes. It shares every limiter that the
    /// old set had and the new config keeps, with its state.
    pub fn set(&self) -> &LimiterSet<C> {
        &self.set
    }

    /// The new set, taken.
    pub fn into_set(self) -> LimiterSet<C> {
        self.set
    }

    /// Limiters whose quota or N changed live: whoever holds them (a layer,
    /// a waiting task, the old set) decides with the new ones from now on.
    pub fn changed(&self) -> &[String] {
        &self.changed
    }

    /// Limiters the new config adds, built with full buckets.
    pub fn added(&self) -> &[String] {
        &self.added
    }

    /// Limiters the new config leaves out: not in the new set, and dropped
    /// once nothing holds them.
    pub fn removed(&self) -> &[String] {
        &self.removed
    }
}

/// What a limiter's new settings ask of the running one.
enum Step<'a> {
    Keep,
    Change(&'a LimiterConfig),
    Add(&'a LimiterConfig),
}

/// The first setting, other than the rate, the burst and N, in which `new` differs from `old` as it would be built (N and k as
/// resolved from their defaults too): those cannot change while the limiter
/// runs.
fn fixed_change(
    name: &str,
    old: &LimiterConfig,
    new: &LimiterConfig,
    room: Option<u32>,
) -> Option<&'static str> {
    let (old_shape, new_shape) = (old.builder(name).shape(), new.builder(name).shape());
    if old_shape.1 != new_shape.1 {
        return Some("per_tenant");
    }
    let same = |a: bool| (!a).then_some(());
    // A default written out is no change: `borrow_from = 0` is unset, and
    // so on. `max_buckets` unset keeps the running limiter's `room`; set,
    // it must be that room.
    let max_buckets = room.unwrap_or(old.max_buckets.unwrap_or(old_shape.0));
    let lending = |c: &LimiterConfig| c.borrow_from.unwrap_or(0);
    let reserve = |c: &LimiterConfig| c.lender_reserve.map_or(DEFAULT_LENDER_RESERVE, |r| r.get());
    let cache = |c: &LimiterConfig| c.tenant_cache.unwrap_or(DEFAULT_TENANT_CACHE);
    let fields = [
        (
            "max_buckets",
            same(new.max_buckets.is_none_or(|m| m == max_buckets)),
        ),
        ("per_user", same(old.per_user == new.per_user)),
        ("tiers", same(old.tiers == new.tiers)),
        ("tenant_tiers", same(old.tenant_tiers == new.tenant_tiers)),
        ("borrow_from", same(lending(old) == lending(new))),
        ("lender_reserve", same(reserve(old) == reserve(new))),
        ("salt", same(old.salt == new.salt)),
        ("tenant_cache", same(cache(old) == cache(new))),
        ("redis", same(old.is_redis() == new.is_redis())),
        #[cfg(feature = "redis")]
        (
            super::redis::changed(old.redis.as_ref(), new.redis.as_ref()),
            same(old.redis == new.redis),
        ),
    ];
    fields
        .into_iter()
        .find_map(|(field, differs)| differs.map(|()| field))
        .or_else(|| super::inflight::changed(old.inflight.as_ref(), new.inflight.as_ref()))
}

impl<C: Clock + Clone> LimiterSet<C> {
    /// The steps from this set to `config`, checked before anything changes.
    fn plan<'a>(&self, config: &'a SetConfig) -> Result<Vec<(&'a str, Step<'a>)>, SetError> {
        config.check()?;
        let mut steps = Vec::new();
        for (name, new) in &config.limiters {
            let step = match self.configs.get(name.as_str()) {
                None if self.limiters.contains_key(name.as_str()) => {
                    return Err(SetError::new(name, SetErrorKind::NoConfig));
                }
                None => Step::Add(new),
                Some(old) if old == new => Step::Keep,
                Some(old) => {
                    new.check(name)?;
                    let room = self.limiters.get(name.as_str()).map(|e| e.buckets().1);
                    if let Some(field) = fixed_change(name, old, new, room) {
                        return Err(SetError::new(name, SetErrorKind::FixedSetting { field }));
                    }
                    // Refuse a quota the buckets cannot take, or an N the
                    // limiter has no room for, before any limiter changes.
                    let (quota, buckets) = target(name, new, room.unwrap_or(u32::MAX))?;
                    if let Some(room) = room
                        && buckets > room
                    {
                        let e = ConfigError::BucketsAboveMax {
                            buckets,
                            max_buckets: room,
                        };
                        return Err(SetError::config(name, e));
                    }
                    // Written differently, built the same (a default
                    // written out): nothing changes, nothing to report.
                    if let Some(Entry::Local(limiter)) = self.limiters.get(name.as_str())
                        && (limiter.quota(), limiter.buckets()) == (quota, buckets)
                    {
                        steps.push((name.as_str(), Step::Keep));
                        continue;
                    }
                    // And what Redis's limiter alone refuses (a refill its
                    // script cannot count), before any limiter changes.
                    #[cfg(not(feature = "redis"))]
                    let _ = quota;
                    #[cfg(feature = "redis")]
                    if let Some(Entry::Redis(limiter)) = self.limiters.get(name.as_str()) {
                        (limiter.can_change(quota, buckets))
                            .map_err(|e| SetError::redis(name, e))?;
                    }
                    Step::Change(new)
                }
            };
            steps.push((name.as_str(), step));
        }
        Ok(steps)
    }

    /// The in-flight limits of the limiters `steps` add, built before
    /// anything changes.
    fn added_inflights(&self, steps: &[(&str, Step<'_>)]) -> Result<InFlights, SetError> {
        let mut inflights = InFlights::default();
        for (name, step) in steps {
            if let Step::Add(new) = step
                && let Some(limit) = super::inflight::build(name, new)?
            {
                inflights.insert((*name).into(), limit);
            }
        }
        Ok(inflights)
    }

    /// The set for `config` from this one's limiters, given the limiters
    /// `config` adds; and the report.
    fn assemble(
        &self,
        config: &SetConfig,
        steps: &[(&str, Step<'_>)],
        mut added: Map<C>,
        mut added_inflights: InFlights,
        #[cfg_attr(not(feature = "redis"), allow(unused_mut, unused_variables))]
        mut added_redis: RedisInFlights,
    ) -> Reload<C> {
        let mut map = Map::default();
        let mut inflights = InFlights::default();
        #[cfg_attr(not(feature = "redis"), allow(unused_mut))]
        let mut redis_inflights = RedisInFlights::default();
        let mut changed = Vec::new();
        for (name, step) in steps {
            let entry = match step {
                Step::Add(_) => added.remove(*name).expect("built by the caller"),
                Step::Keep | Step::Change(_) => self.limiters[*name].share(),
            };
            // A kept limiter's in-flight settings are the same (a change
            // is refused): it keeps its limit, and the permits out.
            let inflight = match step {
                Step::Add(_) => added_inflights.remove(*name),
                Step::Keep | Step::Change(_) => self.inflights.get(*name).cloned(),
            };
            if let Some(inflight) = inflight {
                inflights.insert((*name).into(), inflight);
            }
            #[cfg(feature = "redis")]
            if let Some(limit) = match step {
                Step::Add(_) => added_redis.remove(*name),
                Step::Keep | Step::Change(_) => self.redis_inflights.get(*name).cloned(),
            } {
                redis_inflights.insert((*name).into(), limit);
            }
            if matches!(step, Step::Change(_)) {
                changed.push((*name).to_owned());
            }
            map.insert((*name).into(), entry);
        }
        let removed = self
            .names()
            .filter(|name| !config.limiters.contains_key(*name))
            .map(str::to_owned)
            .collect();
        let added = steps
            .iter()
            .filter(|(_, step)| matches!(step, Step::Add(_)))
            .map(|(name, _)| (*name).to_owned())
            .collect();
        Reload {
            set: LimiterSet {
                limiters: Arc::new(map),
                inflights: Arc::new(inflights),
                redis_inflights: Arc::new(redis_inflights),
                configs: Arc::new(config.limiters.clone()),
            },
            changed,
            added,
            removed,
        }
    }

    /// Applies `config` to the running set, in process: limiters whose
    /// settings are the same keep their state untouched; limiters whose
    /// rate or burst changed get the new quota live
    /// ([`ShardedLimiter::set_quota`](crate::ShardedLimiter::set_quota): no
    /// fresh burst, and whoever holds them sees it at once), and those whose
    /// N changed get it live too, with the quota in the same step
    /// ([`set_quota_and_buckets`](crate::ShardedLimiter::set_quota_and_buckets),
    /// up to the `max_buckets` they were built with, so that any settings a
    /// limiter could be built with are reached); new limiters
    /// are built, each reading a clone of `clock`; limiters left out are not
    /// in the new set. This set is left as it was but for the quotas: use
    /// the one in the [`Reload`].
    ///
    /// ```
    /// use shuffle_limiter::ManualClock;
    /// use shuffle_limiter::set::{LimiterSet, SetConfig};
    ///
    /// let clock = ManualClock::new();
    /// let config: SetConfig = toml::from_str(
    ///     "[limiters.amazon]\nrate = \"8/s\"\nbuckets = 2\nper_tenant = 2",
    /// )?;
    /// let set = LimiterSet::from_config_with_clock(&config, clock.clone())?;
    /// let amazon = set.get("amazon").unwrap().clone(); // held by a layer, say
    /// for _ in 0..6 {
    ///     amazon.check("t").unwrap();
    /// }
    ///
    /// let config: SetConfig = toml::from_str(
    ///     "[limiters.amazon]\nrate = \"16/s\"\nbuckets = 2\nper_tenant = 2\n\
    ///      [limiters.ebay]\nrate = \"1/s\"",
    /// )?;
    /// let reload = set.reload(&config, clock.clone())?;
    /// assert_eq!((reload.changed(), reload.added()), (&["amazon".to_owned()][..], &["ebay".to_owned()][..]));
    /// // The tenant had used 6 of its 8 tokens: it keeps a quarter, of 16.
    /// assert_eq!(amazon.quota().count(), 16);
    /// assert_eq!(amazon.remaining("t"), 4);
    /// // Changing k is refused, and changes nothing.
    /// let config: SetConfig = toml::from_str(
    ///     "[limiters.amazon]\nrate = \"16/s\"\nbuckets = 2\nper_tenant = 1",
    /// )?;
    /// let err = reload.set().reload(&config, clock).unwrap_err();
    /// assert!(err.to_string().starts_with("limiters.amazon.per_tenant: a running limiter keeps"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// A [`SetError`] naming the first limiter whose new settings cannot
    /// work, or grow N past its `max_buckets`, or change a setting other
    /// than the rate, the burst and N (k, `max_buckets`, the salt, tiers,
    /// borrowing, the cache, where the buckets live and the Redis options;
    /// a default written out, such as `borrow_from = 0`, is no change), or
    /// that is a Redis limiter to add or change (use `reload_connect`).
    /// Every limiter's new settings are checked before any changes, so
    /// nothing changes then.
    pub fn reload(&self, config: &SetConfig, clock: C) -> Result<Reload<C>, SetError> {
        let steps = self.plan(config)?;
        let added_inflights = self.added_inflights(&steps)?;
        let mut added = Map::default();
        for (name, step) in &steps {
            match step {
                Step::Add(new) | Step::Change(new) if new.is_redis() => {
                    return Err(SetError::new(name, SetErrorKind::NeedsConnect));
                }
                Step::Add(new) => {
                    added.insert((*name).into(), build_local(name, new, clock.clone())?);
                }
                _ => {}
            }
        }
        for (name, step) in &steps {
            if let (Step::Change(new), Some(limiter)) = (step, self.get(name)) {
                change_local(limiter, name, new)?;
            }
        }
        Ok(self.assemble(
            config,
            &steps,
            added,
            added_inflights,
            RedisInFlights::default(),
        ))
    }

    /// As [`reload`](Self::reload), for a set with Redis limiters: those
    /// added connect to their server, and a changed quota or N is set in
    /// Redis for the whole fleet, in one script per limiter
    /// ([`RedisLimiter::set_quota_and_buckets`](crate::redis::RedisLimiter::set_quota_and_buckets)).
    /// Redis limiters added are built as `connect` builds them: one whose
    /// server is unreachable is added all the same, and decides by its
    /// failure policy until the server answers.
    ///
    /// # Errors
    /// As [`reload`](Self::reload) (checked, for Redis limiters too, before
    /// anything changes), and a [`SetError`] for a Redis limiter whose quota
    /// or N Redis could not change. Redis limiters are changed first, each
    /// in one script: after such an error, the Redis limiters changed before
    /// it stay changed, and no in-process limiter has changed.
    #[cfg(feature = "redis")]
    pub async fn reload_connect(&self, config: &SetConfig, clock: C) -> Result<Reload<C>, SetError>
    where
        C: 'static,
    {
        let steps = self.plan(config)?;
        let added_inflights = self.added_inflights(&steps)?;
        let mut added = Map::default();
        let mut added_redis = RedisInFlights::default();
        for (name, step) in &steps {
            if let Step::Add(new) = step {
                let entry = build_any(name, new, clock.clone()).await?;
                if let Some(limit) = super::inflight::connect_entry(name, new, &entry).await? {
                    added_redis.insert((*name).into(), limit);
                }
                added.insert((*name).into(), entry);
            }
        }
        // Redis first: a change there is the only step that can still fail
        // (Redis does not answer), and each is one script, so a failure
        // leaves no limiter half-changed and no in-process one changed.
        for (name, step) in &steps {
            if let (Step::Change(new), Entry::Redis(limiter)) = (step, &self.limiters[*name]) {
                let (quota, buckets) = target(name, new, limiter.max_buckets())?;
                (crate::Limit::set_quota_and_buckets(&**limiter, quota, buckets).await)
                    .map_err(|e| SetError::redis_change(name, e))?;
            }
        }
        for (name, step) in &steps {
            if let (Step::Change(new), Entry::Local(limiter)) = (step, &self.limiters[*name]) {
                change_local(limiter, name, new)?;
            }
        }
        Ok(self.assemble(config, &steps, added, added_inflights, added_redis))
    }
}

/// Changes a running limiter in process to `new`'s quota and N, in one
/// step, so that every target [`LimiterSet::plan`] accepted is reached.
fn change_local<C: Clock>(
    limiter: &ShardedLimiter<C>,
    name: &str,
    new: &LimiterConfig,
) -> Result<(), SetError> {
    let (quota, buckets) = target(name, new, limiter.max_buckets())?;
    (limiter.set_quota_and_buckets(quota, buckets)).map_err(|e| SetError::config(name, e))
}

/// The quota and N `new` asks of a running limiter with room for `room`
/// buckets: N as set, or, left unset, its default (which follows the
/// burst) within that room, so that a changed rate alone is set live.
fn target(name: &str, new: &LimiterConfig, room: u32) -> Result<(Quota, u32), SetError> {
    let (quota, split, _) = (new.builder(name).checked()).map_err(|e| SetError::config(name, e))?;
    let buckets = match new.buckets {
        Some(_) => split.buckets,
        None => split.buckets.min(room),
    };
    Ok((quota, buckets))
}

/// The settings of each limiter of a set built from a config.
pub(super) type Configs = BTreeMap<String, LimiterConfig>;
