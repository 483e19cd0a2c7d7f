//! The draw on the server: `draw.lua` mirrors `draw` of `src/draw/` line
//! by line, and this file sends it a shard and reads its answer.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use ::redis::aio::ConnectionLike;
use ::redis::{RedisResult, Script, Value};
use tokio::time::timeout;

use super::error::Error;
use super::layout::Layout;
use super::lua::{Library, Lua, command, query_by_keys};
use crate::draw::{MAX_K, Outcome, Pool, ShardShape, Single};
use crate::plan::Split;
use crate::{Denied, Grant, Shard};

/// What the scripts of the draw define before they draw: what every
/// script of the limiter starts with, then `draw`.
macro_rules! draw_defines {
    () => {
        concat!(
            include_str!("prelude.lua"),
            include_str!("held.lua"),
            include_str!("draw.lua")
        )
    };
}

/// The script's source: the draw, called once.
const DRAW_LUA: &str = concat!(draw_defines!(), include_str!("draw_one.lua"));

/// The batch script's source: the draw called once per decision.
const BATCH_LUA: &str = concat!(draw_defines!(), include_str!("draw_batch.lua"));

/// The two scripts of the draw as one library of Redis Functions (Redis 7
/// and later), each script's body a function, what they define before it
/// the library's: `FUNCTION LOAD` runs that once, where `EVALSHA` runs it
/// on every call (15 functions made, 14 % of a decision's instructions on
/// the server). The library and its functions are named by the hash of
/// their source, as a script is, so that two versions of this crate in one
/// fleet never call each other's.
struct DrawLibrary {
    /// The library's source, as `FUNCTION LOAD` takes it.
    code: String,
    /// The function of one decision (`draw_one.lua`).
    one: String,
    /// The function of a batch (`draw_batch.lua`).
    batch: String,
}

static DRAW_LIBRARY: LazyLock<DrawLibrary> = LazyLock::new(|| {
    let defines = draw_defines!();
    let (one, batch) = (include_str!("draw_one.lua"), include_str!("draw_batch.lua"));
    let name = |kind: &str, hash: &str| format!("shuffle_limiter_{kind}_{hash}");
    let code = |hash: &str| {
        let function = |kind: &str, body: &str| {
            let name = name(kind, hash);
            format!("redis.register_function('{name}', function(KEYS, ARGV)\n{body}\nend)\n")
        };
        let (one, batch) = (function("draw", one), function("batch", batch));
        format!("#!lua name=shuffle_limiter_{hash}\n{defines}{one}{batch}")
    };
    // The hash of the whole library, its wrapping too, before it is named.
    let hash = Script::new(&code("")).get_hash().to_owned();
    DrawLibrary {
        code: code(&hash),
        one: name("draw", &hash),
        batch: name("batch", &hash),
    }
});

/// Nanoseconds in the script's unit of time.
pub(super) const MICROS: u64 = 1000;

/// `FUNCTION LOAD` of the draw's library, within `wait`: `library` is on
/// once it is loaded, or found loaded already (named by its source's hash,
/// a library of that name is this one); off for good when the server
/// refuses it for what no retry changes (no such command before Redis 7,
/// no permission, another error of the command); off, and to be loaded
/// again later once the server answers a decision, when it refuses for the
/// moment (out of memory, a read-only replica, busy, loading) or does not
/// answer. In a Cluster the command goes to every master, and the `redis`
/// crate answers what the last of them did.
async fn load_library<Conn: ConnectionLike>(
    library: &Library,
    connection: &mut Conn,
    wait: Duration,
) {
    let mut load = ::redis::cmd("FUNCTION");
    load.arg("LOAD").arg(DRAW_LIBRARY.code.as_str());
    let load = load.query_async::<Value>(connection);
    match timeout(wait, load).await {
        Ok(Ok(_)) => library.loaded(true),
        Ok(Err(e)) if e.detail().is_some_and(|d| d.contains("already exists")) => {
            library.loaded(true);
        }
        Ok(Err(e)) if matches!(e.code(), Some("ERR" | "NOPERM")) => library.loaded(false),
        _ => library.load_again(),
    }
}

/// The script with the keys of every bucket.
#[derive(Debug, Clone)]
pub(super) struct DrawScript {
    script: Lua,
    /// The key of every bucket i, as the layout names it.
    keys: Arc<[String]>,
    /// The key of the quota set live (see `quota.rs`): one for every
    /// bucket, or one per bucket in its slot.
    quota_keys: Box<[String]>,
    /// The key of the hold-offs (see `holdoff.rs`), in the one-slot layout.
    held_key: Option<String>,
}

impl DrawScript {
    #[cfg(test)]
    pub(super) fn new(name: &str, buckets: u32, layout: Layout) -> Self {
        DrawScript::with_prefix("", name, buckets, layout)
    }

    /// The script over the keys of `buckets` buckets of the limiter `name`,
    /// each key after `prefix`.
    pub(super) fn with_prefix(prefix: &str, name: &str, buckets: u32, layout: Layout) -> Self {
        DrawScript {
            script: Lua::of_library(DRAW_LUA, &DRAW_LIBRARY.one, Arc::default()),
            keys: (0..buckets).map(|i| layout.key(prefix, name, i)).collect(),
            quota_keys: layout.quota_keys(prefix, name, buckets),
            held_key: layout.held_key(prefix, name),
        }
    }

    /// The key of the hold-offs, in the one-slot layout.
    pub(super) fn held_key(&self) -> Option<&str> {
        self.held_key.as_deref()
    }

    /// The bucket whose key is `key`.
    pub(super) fn bucket_of(&self, key: &[u8]) -> Option<u32> {
        let b = self.keys.iter().position(|k| k.as_bytes() == key)?;
        u32::try_from(b).ok()
    }

    pub(super) fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The keys of every bucket, shared (with the batches' script).
    pub(super) fn shared_keys(&self) -> Arc<[String]> {
        Arc::clone(&self.keys)
    }

    /// The quota key in the slot of `bucket`.
    pub(super) fn quota_key(&self, bucket: u32) -> &str {
        let keys = &self.quota_keys;
        &keys[(bucket as usize).min(keys.len() - 1)]
    }

    /// Whether the draw goes by `FCALL` (its library loaded).
    #[cfg(test)]
    pub(super) fn calls_function(&self) -> bool {
        self.script.function().is_some()
    }

    /// The batch script, which calls its function while this one does.
    pub(super) fn batch_script(&self) -> Lua {
        let library = self.script.library().cloned();
        Lua::of_library(BATCH_LUA, &DRAW_LIBRARY.batch, library.unwrap_or_default())
    }

    /// Loads the script (in the script cache, for `EVALSHA`).
    pub(super) async fn load_script<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
    ) -> RedisResult<()> {
        self.script.script().load_async(connection).await?;
        Ok(())
    }

    /// Loads the draw's library where the server has Redis Functions,
    /// within `wait`; the limiter calls its functions once it is loaded.
    /// Never an error: a server without Functions, or a user who may not
    /// load them, leaves the limiter calling the script; a refusal for the
    /// moment, or no answer within `wait`, until a later load
    /// ([`reload_if_lost`](Self::reload_if_lost)).
    pub(super) async fn load_functions<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        wait: Duration,
    ) {
        if let Some(library) = self.script.library() {
            load_library(library, connection, wait).await;
        }
    }

    /// The library is to be loaded once the server answers a decision
    /// (the limiter was built while it was away).
    pub(super) fn load_later(&self) {
        if let Some(library) = self.script.library() {
            library.mark_lost();
        }
    }

    /// Loads the draw's library again, in a task of its own (no decision
    /// waits on it), when the server was found to have lost it since this
    /// was last asked: an `FCALL` found no function, or, while the limiter
    /// called the scripts, an `EVALSHA` found no script (a restart without
    /// persistence, `FUNCTION FLUSH`); or when it was never loaded (the
    /// limiter was built while the server was away, or a load had no
    /// answer, or was refused for the moment). Called once the server has
    /// answered a decision, at `now()` µs (read only when the library is
    /// lost: every decision Redis answers asks): at most once a second, and
    /// twice as long after each load that follows the last one soon, up to
    /// a minute ([`Library::take_lost`]). The limiter calls the functions
    /// again once the library is loaded.
    pub(super) fn reload_if_lost<Conn>(
        &self,
        connection: &Conn,
        wait: Duration,
        now: impl FnOnce() -> u64,
    ) where
        Conn: ConnectionLike + Clone + Send + 'static,
    {
        let lost = self.script.library().filter(|l| l.lost());
        if let Some(library) = lost.filter(|l| l.take_lost(now())) {
            let (library, mut connection) = (Arc::clone(library), connection.clone());
            tokio::spawn(async move { load_library(&library, &mut connection, wait).await });
        }
    }

    pub(super) fn key(&self, bucket: u32) -> Option<&str> {
        self.keys.get(bucket as usize).map(String::as_str)
    }

    /// One round trip: the draw of `request`.
    pub(super) async fn draw<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        request: &Request,
    ) -> Result<Answer, Error> {
        self.run(connection, &request.call()).await
    }

    /// The script's inputs, one for one those of `draw` in `src/draw/`.
    pub(super) async fn run<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        call: &Call<'_>,
    ) -> Result<Answer, Error> {
        // The hold-offs key only where spill buckets may lend (a layout
        // without one, which never lends, would name the quota key: a
        // string, which holds nothing off).
        let spill = call.shape.spill > 0;
        let keys = call.ids.len() + 1 + usize::from(spill);
        let mut cmd = command(&self.script, keys, keys + 1);
        for &b in call.ids {
            cmd.arg(self.keys[b as usize].as_str());
        }
        let quota = self.quota_key(call.ids[0]);
        cmd.arg(quota);
        if spill {
            cmd.arg(self.held_key().unwrap_or(quota));
        }
        let mut packed = Vec::with_capacity(8 * (call.arguments() + 1));
        call.for_each_argument(|n| pack(&mut packed, n));
        if let Some(now) = call.now {
            pack(&mut packed, now);
        }
        cmd.arg(packed);
        let reply: Value = query_by_keys(&self.script, &cmd, connection)
            .await
            .map_err(Error::from_redis)?;
        match reply {
            Value::BulkString(packed) if packed.len() % 8 == 0 => {
                Answer::of(&unpack(&packed).map(|n| n as i64).collect::<Vec<_>>(), call)
            }
            reply => Err(Error::Reply {
                detail: format!("not the packed reply of a draw: {reply:?}"),
            }),
        }
    }
}

impl Answer {
    /// The script's reply to `call`: a draw, or that the quota changed.
    pub(super) fn of(reply: &[i64], call: &Call<'_>) -> Result<Answer, Error> {
        let stale = match reply[..] {
            [-1, version] => u64::try_from(version).ok(),
            _ => None,
        };
        if let Some(version) = stale {
            return Ok(Answer::Stale { version });
        }
        let drawn = parse(reply, call.shape.own, call.ids.len()).ok_or_else(|| Error::Reply {
            detail: format!("{reply:?}"),
        })?;
        Ok(Answer::Drawn(drawn))
    }
}

/// `n` as the scripts of the draw take their numbers: a little-endian
/// double, exact below 2^53 (as Lua's numbers are), which every argument
/// of the draw is (see `unpacked` in draw.lua).
pub(super) fn pack(packed: &mut Vec<u8>, n: u64) {
    packed.extend_from_slice(&(n as f64).to_le_bytes());
}

/// The numbers a script of the draw answers packed (see `pack`). A caller
/// reading one as an integer truncates it (`as i64`), as Redis turns a Lua
/// number into an integer reply.
pub(super) fn unpack(packed: &[u8]) -> impl Iterator<Item = f64> + '_ {
    (packed.chunks_exact(8)).map(|n| f64::from_le_bytes(n.try_into().unwrap_or_default()))
}

impl Call<'_> {
    /// How many numbers `for_each_argument` gives.
    pub(super) fn arguments(&self) -> usize {
        6 + self.ids.len() + self.shape.spill
    }

    /// Each of draw.lua's argv in turn, but for the time the differential
    /// test sends.
    pub(super) fn for_each_argument(&self, mut argument: impl FnMut(u64)) {
        for n in [
            self.interval,
            u64::from(self.n),
            self.start as u64,
            self.shape.own as u64,
        ] {
            argument(n);
        }
        for &burst in self.bursts {
            argument(u64::from(burst));
        }
        // What a borrower must leave in each spill bucket, worked out here:
        // the product would not fit in Lua's doubles.
        for &burst in &self.bursts[self.shape.own..] {
            let capacity = u64::from(burst) * self.interval;
            argument(self.shape.reserve_of(capacity, self.interval));
        }
        argument(self.version);
        argument(self.lead);
    }
}

/// What the script answered: a draw, or that the quota changed. (Not
/// boxed: it lives for one call, and the draw is the common answer.)
#[derive(Debug, PartialEq, Eq)]
#[allow(clippy::large_enum_variant)]
pub(super) enum Answer {
    Drawn(Drawn),
    /// The quota key holds `version`, not the caller's: nothing was drawn.
    Stale {
        version: u64,
    },
}

/// What the script answered: the draw's outcome and, with a denial, the
/// whole tokens each own bucket holds at most until the retry time (for the
/// denial cache), in shard order.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Drawn {
    pub(super) outcome: Outcome,
    pub(super) held: [u32; MAX_K],
}

/// One decision for the script, owned (to wait in a batch): the ranked
/// bucket ids (own, then spill), how the draw sees them, the interval in
/// µs, their bursts, the request and the quota version they come from.
#[derive(Debug, Clone)]
pub(super) struct Request {
    ids: [u32; MAX_K],
    bursts: [u32; MAX_K],
    shape: ShardShape,
    interval: u64,
    n: u32,
    start: usize,
    version: u64,
    lead: u64,
}

impl Request {
    /// The draw for `n` tokens over `shard` (its own buckets, then its
    /// spill buckets above a `reserve` of 2⁻³² parts), settling a tie from
    /// shard position `start`, on the server's clock `lead` µs on, with the
    /// split of quota `version`. A booking ahead (`lead > 0`) is drawn on
    /// the own buckets alone, as in process (`take_ahead` of
    /// `src/store/memory/mod.rs`): a spill bucket lends to none.
    pub(super) fn of(
        (version, split): (u64, &Split),
        shard: &Shard,
        reserve: u32,
        (n, lead): (u32, u64),
        start: usize,
    ) -> Self {
        let mut ids = [0; MAX_K];
        ids[..shard.ranked().len()].copy_from_slice(shard.ranked());
        let shape = ShardShape {
            own: shard.buckets().len(),
            spill: shard.spill().len(),
            reserve: u64::from(reserve),
        };
        Request {
            ids,
            bursts: split.bursts(shard),
            // The hold-off is the script's to weigh (`lenders`).
            shape: shape.lending(lead == 0, || false),
            interval: split.interval() / MICROS,
            n,
            start,
            version,
            lead,
        }
    }

    /// The same draw as a shard of `bucket` alone (k = 1, no spill), for
    /// the spread layout.
    pub(super) fn one((version, split): (u64, &Split), bucket: u32, (n, lead): (u32, u64)) -> Self {
        let (mut ids, mut bursts) = ([0; MAX_K], [0; MAX_K]);
        (ids[0], bursts[0]) = (bucket, split.burst_of(bucket));
        Request {
            ids,
            bursts,
            shape: ShardShape {
                own: 1,
                spill: 0,
                reserve: 0,
            },
            interval: split.interval() / MICROS,
            n,
            start: 0,
            version,
            lead,
        }
    }

    /// The script's inputs, on the server's clock.
    pub(super) fn call(&self) -> Call<'_> {
        let ranked = self.shape.own + self.shape.spill;
        Call {
            ids: &self.ids[..ranked],
            shape: self.shape,
            interval: self.interval,
            bursts: &self.bursts[..ranked],
            n: self.n,
            start: self.start,
            version: self.version,
            lead: self.lead,
            now: None,
        }
    }
}

/// One call of the script: the ranked bucket ids (own, then spill), how the
/// draw sees them, the interval in µs, their bursts, the request, the quota
/// version they come from, and `now` in µs (or the server's clock when
/// `None`).
pub(super) struct Call<'a> {
    pub(super) ids: &'a [u32],
    pub(super) shape: ShardShape,
    pub(super) interval: u64,
    pub(super) bursts: &'a [u32],
    pub(super) n: u32,
    pub(super) start: usize,
    pub(super) version: u64,
    /// µs from now the draw is made at: 0, or a booking's lead.
    pub(super) lead: u64,
    pub(super) now: Option<u64>,
}

/// The script's reply as the draw's outcome, in microseconds (with the
/// arrival times written, but not those read), for `own` own buckets out of
/// `ranked`.
fn parse(reply: &[i64], own: usize, ranked: usize) -> Option<Drawn> {
    let k = ranked;
    let position = |j: i64| usize::try_from(j).ok().filter(|&j| j < k);
    let (&[granted, first, wait, remaining], rest) = reply.split_first_chunk()?;
    let index = position(first)?;
    let wait = u64::try_from(wait).ok()?;
    let remaining = u64::try_from(remaining).ok()?;
    let mut held = [0; MAX_K];
    let time = |t: &i64| u64::try_from(*t).ok();
    let outcome = match (granted, rest) {
        (1, [_paid, tat]) => Some(Outcome::Grant(Single {
            index,
            seen: 0,
            tat: time(tat)?,
            remaining,
            full_in: wait,
        })),
        (1, [paid, tat, more @ ..]) if more.len() % 3 == 0 && more.len() < 3 * MAX_K => {
            let mut pool = Pool::new(remaining, wait);
            let others = more.chunks_exact(3).map(|t| (t[0], t[1], t[2]));
            let first = std::iter::once((first, *paid, *tat));
            for (i, (j, paid, tat)) in first.chain(others).enumerate() {
                pool.index[i] = position(j)? as u8;
                pool.paid[i] = u32::try_from(paid).ok()?;
                pool.tat[i] = time(&tat)?;
                pool.payers += 1;
            }
            Some(Outcome::Pooled(pool))
        }
        (0, tokens) if wait >= 1 && tokens.len() == own => {
            for (held, &tokens) in held.iter_mut().zip(tokens) {
                *held = u32::try_from(tokens).ok()?;
            }
            Some(Outcome::Deny { index, at: wait })
        }
        _ => None,
    }?;
    Some(Drawn { outcome, held })
}

/// The answer for the caller, drawn under the quota's `version`; `at` of a
/// denial is already relative.
pub(super) fn answer(
    outcome: Outcome,
    shard: &Shard,
    n: u32,
    version: u64,
) -> Result<Grant, Denied> {
    crate::grant::answer(outcome, shard, n, (0, MICROS), version)
}

// Also the server of the state reads' tests (`state.rs`): a file may be
// loaded as one module only.
#[cfg(test)]
#[path = "../../tests/support/redis_server.rs"]
pub(crate) mod redis_server;

#[cfg(test)]
mod differential;

#[cfg(test)]
mod batched;

#[cfg(test)]
mod changes;

#[cfg(test)]
mod hold;

#[cfg(test)]
mod retry;

#[cfg(test)]
mod library;
