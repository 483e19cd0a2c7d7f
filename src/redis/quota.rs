//! Changing a Redis limiter while it runs: the quota and N set live, which
//! live in Redis beside the buckets (tokens given back are `refund.rs`).
//!
//! The quota key `{name}:quota` is missing until a quota or N is set live;
//! then it holds `"<version> <count> <period in ns> <burst> <N>"`. Every
//! draw sends the version its interval, bursts and shard come from, and the
//! script draws nothing when the key holds another: the process reads the
//! key, takes the new quota and N, resolves the shard again, and asks
//! again. So no two processes ever decide with different quotas or Ns,
//! whenever each of them was built. Deleting the key brings every process
//! back to the quota and N it was built with (the buckets keep their state;
//! a bucket beyond the N built with is left alone).
//!
//! A change writes the next version: one more than the last, and no less
//! than the server's clock in microseconds. So a version is never written
//! twice with two meanings, even after the key was lost (FLUSHALL, a
//! restart without persistence, a `DEL`), where counting on from 0 again
//! would write a "1" that a process still holding the old "1" took for its
//! own quota. This assumes a server clock that does not go back across
//! such a loss, as the in-flight leases' tokens do.

use std::sync::atomic::Ordering;

use ::redis::aio::ConnectionLike;

use super::build::{in_micros, replica_share};
use super::error::{BuildError, Error, within};
use super::layout::Layout;
use super::lua::{Invocation, Lua};
use super::script::MICROS;
use super::store::RedisStore;
use super::store::Shared;
use crate::Limiter;
use crate::error::ConfigError;
use crate::plan::Split;
use crate::quota::Quota;
use crate::store::sealed::Change;
use crate::store::sealed::Local;

/// The scripts after what every script of the limiter starts with.
pub(super) const RESCALE_LUA: &str =
    concat!(include_str!("prelude.lua"), include_str!("rescale.lua"));
pub(super) const REFUND_LUA: &str = concat!(
    include_str!("prelude.lua"),
    include_str!("held.lua"),
    include_str!("refund.lua")
);
pub(super) const GIVEBACK_LUA: &str = concat!(
    include_str!("prelude.lua"),
    include_str!("held.lua"),
    include_str!("giveback.lua")
);

/// What a wait that slept reads: the quota key and the hold-offs a hold-off
/// could have written (see `RedisStore::catch_up`).
pub(super) const CATCHUP_LUA: &str = concat!(
    include_str!("prelude.lua"),
    include_str!("held.lua"),
    include_str!("catchup.lua")
);

/// How many times a change asks again after finding a newer quota.
pub(super) const ATTEMPTS: usize = 3;

/// The scripts that change a limiter's buckets other than by a draw.
#[derive(Debug)]
pub(super) struct ChangeScripts {
    pub(super) rescale: Lua,
    pub(super) refund: Lua,
    pub(super) give_back: Lua,
    pub(super) hold_off: Lua,
    pub(super) charge: Lua,
    pub(super) catch_up: Lua,
}

impl Default for ChangeScripts {
    fn default() -> Self {
        ChangeScripts {
            rescale: Lua::new(RESCALE_LUA),
            refund: Lua::new(REFUND_LUA),
            give_back: Lua::new(GIVEBACK_LUA),
            hold_off: Lua::new(super::holdoff::HOLDOFF_LUA),
            charge: Lua::new(super::charge::CHARGE_LUA),
            catch_up: Lua::new(CATCHUP_LUA),
        }
    }
}

/// The quota key's text after its version: the quota and N.
pub(super) fn quota_text(quota: Quota, buckets: u32) -> String {
    let period = quota.period().as_nanos();
    format!("{} {period} {} {buckets}", quota.count(), quota.burst())
}

/// The first version the scripts refuse (2^53): a Lua number is a double,
/// which cannot tell it from the next.
const VERSION_LIMIT: u64 = 1 << 53;

/// The version, quota and N a quota key holds, as the scripts read it:
/// decimal digits only, and a version from 1 to below [`VERSION_LIMIT`].
pub(super) fn parse_quota(text: &str) -> Option<(u64, Quota, u32)> {
    fn number<T: std::str::FromStr>(word: Option<&str>) -> Option<T> {
        let word = word.filter(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_digit()))?;
        word.parse().ok()
    }
    let mut words = text.split(' ');
    // Version 0 is the quota built with, which no key holds.
    let version = number(words.next()).filter(|&v: &u64| (1..VERSION_LIMIT).contains(&v))?;
    let count = number(words.next())?;
    let period: u128 = number(words.next())?;
    let burst = number(words.next())?;
    let buckets = number(words.next())?;
    let period = std::time::Duration::from_nanos(u64::try_from(period).ok()?);
    let quota = Quota::new(count, period).with_burst(burst);
    words.next().is_none().then_some((version, quota, buckets))
}

impl<Conn, L> Shared<Conn, L>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local,
{
    /// The split decisions are made with, and the quota version it comes
    /// from, read together.
    pub(super) fn current(&self) -> (u64, Split) {
        loop {
            let (read, split) = self.split.read();
            let version = self.version.load(Ordering::Relaxed);
            if self.split.unchanged(read) {
                return (version, split);
            }
        }
    }

    /// The split of `quota` over `buckets` buckets, in whole microseconds,
    /// or why the limiter cannot take it (N beyond its room, for one).
    pub(super) fn split_of(&self, quota: Quota, buckets: u32) -> Result<Split, Error> {
        let max_buckets = self.script.keys().len() as u32;
        let split = (self.shards.split_over(quota, buckets, max_buckets)).map_err(Error::Config)?;
        in_micros(split).map_err(|refill_secs| {
            Error::Config(ConfigError::Overflow {
                refill_secs: u128::from(refill_secs),
            })
        })
    }

    /// Takes `quota` and the N of `split`, of `version`, as the ones to
    /// decide with, here and in the local fallback; denials remembered under
    /// the old ones are forgotten.
    pub(super) fn adopt(&self, version: u64, quota: Quota, split: Split) {
        // Waits that woke together each read the new version before any of
        // them adopted it: adopted once, so that it counts as one change.
        if version == self.version.load(Ordering::Relaxed) {
            return;
        }
        let adopted = self.split.change(
            |_, _| Ok::<_, std::convert::Infallible>((quota, split)),
            |_, _, _| self.version.store(version, Ordering::Relaxed),
        );
        let Ok(()) = adopted;
        self.denials.clear();
        if let (Some(local), Some(replicas)) = (&self.fallback, self.options.policy.replicas()) {
            // A share or an N the fallback cannot take (set by a process
            // with other options): it denies until it can follow again,
            // since the budget it had may be more than the fleet's now.
            let followed = replica_share(quota, replicas, split.buckets)
                .is_ok_and(|share| local.follow(share, split.buckets).is_ok());
            self.fallback_behind.store(!followed, Ordering::Relaxed);
        }
    }

    /// Whether the local fallback could take its share of `quota` over
    /// `buckets`.
    pub(super) fn fallback_can_follow(&self, quota: Quota, buckets: u32) -> Result<(), BuildError> {
        if let (Some(local), Some(replicas)) = (&self.fallback, self.options.policy.replicas()) {
            let share = replica_share(quota, replicas, buckets)?;
            local
                .could_follow(share, buckets)
                .map_err(BuildError::Config)?;
        }
        Ok(())
    }

    /// What a script's answer that the quota key beside its buckets holds
    /// `version` (not the one it was sent) means. In the one-slot layout,
    /// another process set a quota live: it is read and adopted
    /// ([`refresh`](Self::refresh)). In the spread layout no quota is ever
    /// set live ([`Error::SpreadQuota`]; the quota keys stay missing), so a
    /// version there was written by nobody this limiter knows: an error,
    /// as the draw answers it, never adopted (its rate and burst could
    /// lift the budget).
    pub(super) async fn stale(&self, version: u64) -> Result<(), Error> {
        match self.options.layout {
            Layout::OneSlot => self.refresh().await,
            Layout::Spread => Err(spread_stale(Some(version))),
        }
    }

    /// Reads the quota key and adopts what it holds (the quota the limiter
    /// was built with, when it holds nothing). In the spread layout, where
    /// nothing is ever set live, it adopts nothing and fails (see
    /// [`stale`](Self::stale)).
    pub(super) async fn refresh(&self) -> Result<(), Error> {
        if self.options.layout == Layout::Spread {
            return Err(spread_stale(None));
        }
        let mut connection = self.connection.clone();
        let key = self.script.quota_key(0);
        // Bytes, not a String: text that is not UTF-8 is a stray value too.
        let text: Option<Vec<u8>> = ::redis::cmd("GET")
            .arg(key)
            .query_async(&mut connection)
            .await
            .map_err(|e| match e.code() {
                // Data, not an outage, as the scripts answer it.
                Some("WRONGTYPE") => Error::NotAQuota {
                    key: key.to_owned(),
                    detail: format!("another type: {e}"),
                },
                _ => Error::from_redis(e),
            })?;
        let (version, quota, buckets) = match text {
            None => (0, self.built, self.built_buckets),
            Some(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(parse_quota)
                .ok_or_else(|| Error::NotAQuota {
                    key: key.to_owned(),
                    detail: String::from_utf8_lossy(&bytes).into_owned(),
                })?,
        };
        let split = self.split_of(quota, buckets)?;
        self.adopt(version, quota, split);
        Ok(())
    }
}

impl<Conn, L> RedisStore<Conn, L>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local + 'static,
{
    /// Changes the quota, N or both for every process sharing this limiter,
    /// at once (the `set_*` of [`Limit`](crate::Limit) over Redis), in one
    /// script that moves every bucket and stores the quota and N beside
    /// them. A new quota keeps each bucket's share of its burst; a new N
    /// alone keeps each staying bucket's tokens (up to its new burst),
    /// starts added buckets empty and deletes removed ones. Every process
    /// must have been built with room for a new N
    /// ([`Builder::max_buckets`](crate::Builder::max_buckets)).
    ///
    /// Fails with [`Error::Config`] when the buckets cannot take the change,
    /// [`Error::SpreadQuota`] in the spread layout (not yet),
    /// [`Error::NotAQuota`] or [`Error::NotABucket`] when the quota key or a
    /// bucket key holds something else, and the errors of a round trip;
    /// nothing is then changed. [`Error::Timeout`] when Redis has not
    /// answered within the connect timeout (or the deadline, if that is
    /// longer): the change may then have been made or not, and making it
    /// again is safe (a quota and N already in force are set again as they
    /// are).
    pub(super) async fn change_in_redis(&self, change: Change) -> Result<(), Error> {
        let (share, tokens) = (Rescale::Share, Rescale::Tokens);
        match change {
            Change::HoldOff(shard, duration) => self.hold_off_in_redis(shard, duration).await,
            Change::Quota(quota) => {
                self.bounded(self.change(share, |_, buckets| (quota, buckets)))
                    .await
            }
            Change::Buckets(buckets) => {
                self.bounded(self.change(tokens, |quota, _| (quota, buckets)))
                    .await
            }
            Change::Both(quota, buckets) => {
                self.bounded(self.change(share, |_, _| (quota, buckets)))
                    .await
            }
        }
    }

    /// `change`, bounded as a decision is (a hold-off bounds itself by the
    /// deadline), but by the longer of the connect timeout and the
    /// deadline: its script moves every bucket, which over a large N takes
    /// longer than a decision, and a change is rarely in a hurry.
    async fn bounded(&self, change: impl Future<Output = Result<(), Error>>) -> Result<(), Error> {
        let options = &self.shared.options;
        within(options.connect_timeout.max(options.deadline), change).await
    }

    /// Moves every bucket from the quota and N in force to the ones `next`
    /// makes of them, in one script, asking again (up to a few times) when
    /// another process changed them first.
    async fn change(
        &self,
        mode: Rescale,
        next: impl Fn(Quota, u32) -> (Quota, u32),
    ) -> Result<(), Error> {
        let shared = &self.shared;
        if shared.options.layout == Layout::Spread {
            return Err(Error::SpreadQuota);
        }
        for _ in 0..ATTEMPTS {
            let (version, old) = shared.current();
            let (quota, buckets) = next(shared.split.quota(), old.buckets);
            let new = shared.split_of(quota, buckets)?;
            // Refused before Redis changes: a fallback left on the old
            // budget could grant more than the fleet's new one.
            shared
                .fallback_can_follow(quota, new.buckets)
                .map_err(|e| match e {
                    BuildError::FallbackBurstTooSmall {
                        burst,
                        replicas,
                        buckets,
                    } => Error::FallbackBurstTooSmall {
                        burst,
                        replicas,
                        buckets,
                    },
                    BuildError::Config(e) => Error::Config(e),
                    e => Error::GaveUp {
                        detail: e.to_string(),
                    },
                })?;
            // A new N keeps tokens, with or without a new quota: a share
            // of a changed burst would refill what buckets removed held.
            let mode = if new.buckets == old.buckets {
                mode
            } else {
                Rescale::Tokens
            };
            let mut invocation = shared.changes.rescale.prepare_invoke();
            let keys = old.buckets.max(new.buckets) as usize;
            for key in &shared.script.keys()[..keys] {
                invocation.key(key.as_str());
            }
            invocation.key(shared.script.quota_key(0));
            invocation.arg(version).arg(mode.word());
            for split in [old, new] {
                let interval = split.interval() / MICROS;
                invocation
                    .arg(interval)
                    .arg(split.burst)
                    .arg(split.larger)
                    .arg(split.buckets);
            }
            invocation.arg(quota_text(quota, buckets));
            match run(&invocation, &shared.connection).await? {
                (1, version) => {
                    shared.adopt(version, quota, new);
                    return Ok(());
                }
                _ => shared.refresh().await?,
            }
        }
        Err(Error::GaveUp {
            detail: "the quota kept changing under the change".to_owned(),
        })
    }
}

impl<Conn, L> Limiter<RedisStore<Conn, L>>
where
    Conn: ConnectionLike + Clone + Send + Sync + 'static,
    L: Local,
{
    /// Whether [`set_quota_and_buckets`](crate::Limit::set_quota_and_buckets) could
    /// make this change, here and in the local fallback, found without
    /// asking Redis: what a limiter built with them would refuse.
    #[cfg_attr(not(feature = "config"), allow(dead_code))] // the set's reload
    pub(crate) fn can_change(&self, quota: Quota, buckets: u32) -> Result<(), BuildError> {
        let shared = &self.store.shared;
        if shared.options.layout == Layout::Spread {
            return Err(BuildError::Redis(Error::SpreadQuota));
        }
        shared.split_of(quota, buckets).map_err(|e| match e {
            Error::Config(e) => BuildError::Config(e),
            e => BuildError::Redis(e),
        })?;
        shared.fallback_can_follow(quota, buckets)
    }
}

/// What `rescale.lua` keeps of each bucket.
#[derive(Debug, Clone, Copy)]
pub(super) enum Rescale {
    /// A new quota: the share of the burst (`rescale`).
    Share,
    /// A new N: the tokens, up to the new burst (`resize`).
    Tokens,
}

impl Rescale {
    pub(super) fn word(self) -> &'static str {
        match self {
            Rescale::Share => "share",
            Rescale::Tokens => "tokens",
        }
    }
}

/// The error of a quota found beside a spread bucket (of `version`, when
/// the script said), where none is ever set live: data nobody of this
/// limiter wrote, not an outage, so no policy but the local fallback grants
/// on it.
pub(super) fn spread_stale(version: Option<u64>) -> Error {
    let detail = match version {
        Some(version) => format!("a quota of version {version} beside a spread bucket"),
        None => "a quota beside a spread bucket".to_owned(),
    };
    Error::Reply { detail }
}

/// One call of a change script, answering `(done, version)`.
pub(super) async fn run<Conn: ConnectionLike + Clone>(
    invocation: &Invocation<'_>,
    connection: &Conn,
) -> Result<(i64, u64), Error> {
    let mut connection = connection.clone();
    let reply: Vec<i64> = invocation
        .invoke_async(&mut connection)
        .await
        .map_err(Error::from_redis)?;
    match reply[..] {
        [done @ (0 | 1), version] if version >= 0 => Ok((done, version as u64)),
        _ => Err(Error::Reply {
            detail: format!("{reply:?}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{Quota, parse_quota, quota_text};

    #[test]
    fn a_quota_key_reads_back_what_was_written() {
        let quota = Quota::new(7, Duration::from_millis(1500)).with_burst(30);
        let text = format!("12 {}", quota_text(quota, 8));
        assert_eq!(text, "12 7 1500000000 30 8");
        assert_eq!(parse_quota(&text), Some((12, quota, 8)));
        // The last version a double holds exactly.
        let last = format!("9007199254740991 {}", quota_text(quota, 8));
        assert_eq!(parse_quota(&last), Some(((1 << 53) - 1, quota, 8)));
        for bad in [
            "",
            "1",
            "1 2 3",
            "1 2 3 4",
            "x 1 2 3 4",
            "1 2 3 4 5 6",
            "1 -2 3 4 5",
            "1 2 3 4 -5",
            "1 2 3 4 5 ",
            "+1 2 3 4 5",
            "0 2 3 4 5",
            "1 +2 3 4 5",
            "9007199254740992 2 3 4 5",
            "18446744073709551615 2 3 4 5",
        ] {
            assert_eq!(parse_quota(bad), None, "{bad:?}");
        }
    }
}
