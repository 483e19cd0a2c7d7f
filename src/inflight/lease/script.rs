//! The lease scripts on the server, and their replies read back: one
//! round trip each for an acquire, a renewal, a release and the give-back
//! of an acquire whose reply never came.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use ::redis::Script;

use crate::redis::lua::Lua;
use ::redis::aio::ConnectionLike;

use crate::redis::Error;

/// Each script's source, after what every script of the limiter starts
/// with and what the pool scripts share.
macro_rules! lease_lua {
    ($file:literal) => {
        concat!(
            include_str!("../../redis/prelude.lua"),
            include_str!("pools.lua"),
            include_str!($file)
        )
    };
}

pub(super) const ACQUIRE_LUA: &str = lease_lua!("acquire.lua");
pub(super) const RENEW_LUA: &str = lease_lua!("renew.lua");
pub(super) const RELEASE_LUA: &str = lease_lua!("release.lua");
pub(super) const ABANDON_LUA: &str = lease_lua!("abandon.lua");

/// A fresh acquire id, unique across the fleet: 64 random bits drawn once
/// per process, then the process's count of acquires.
pub(super) fn acquire_id() -> String {
    static PROCESS: OnceLock<u64> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let process = *PROCESS.get_or_init(crate::random::next_u64);
    let count = COUNT.fetch_add(1, Ordering::Relaxed);
    format!("{process:016x}-{count}")
}

/// The four scripts and the keys of every pool.
#[derive(Debug)]
pub(super) struct Scripts {
    acquire: Lua,
    renew: Lua,
    release: Lua,
    abandon: Lua,
    /// Pool i is `{prefix}{name}:p<i>`: one hash tag for the limit.
    keys: Box<[String]>,
    /// The token counter, in the same slot.
    counter: String,
    /// An acquire's record is this and its id, in the same slot.
    records: String,
}

/// A lease's member in a pool: its token and the seats it holds there.
pub(super) fn member(token: u64, seats: u32) -> String {
    format!("{token}:{seats}")
}

/// What an acquire answered.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Acquired {
    /// The token, and the seats taken of each position (own pools, then
    /// spill pools), in the order taken.
    Leased {
        token: u64,
        taken: Vec<(usize, u32)>,
    },
    /// The pools do not have the seats free; µs until the earliest lease
    /// in them expires, when one holds any.
    Busy { free_in: Option<u64> },
    /// This acquire ran already (its record holds its token): the same
    /// command sent again by the client. Not an answer: the caller gives
    /// the acquire back.
    Resent,
}

impl Scripts {
    pub(super) fn new(prefix: &str, name: &str, pools: u32) -> Scripts {
        Scripts {
            acquire: Lua::new(ACQUIRE_LUA),
            renew: Lua::new(RENEW_LUA),
            release: Lua::new(RELEASE_LUA),
            abandon: Lua::new(ABANDON_LUA),
            keys: (0..pools)
                .map(|i| format!("{prefix}{{{name}}}:p{i}"))
                .collect(),
            counter: format!("{prefix}{{{name}}}:lease"),
            records: format!("{prefix}{{{name}}}:acq:"),
        }
    }

    /// The key of the acquire `id`'s record.
    pub(super) fn record(&self, id: &str) -> String {
        format!("{}{id}", self.records)
    }

    pub(super) fn key(&self, pool: u32) -> Option<&str> {
        self.keys.get(pool as usize).map(String::as_str)
    }

    pub(super) fn all(&self) -> [&Script; 4] {
        [&self.acquire, &self.renew, &self.release, &self.abandon].map(Lua::script)
    }

    /// One acquire of `seats` over `pools` (with their `shares`): the
    /// tenant's own, then as many spill pools as there are `reserves`
    /// (each spill pool's), ties from position `start`, for a lease of
    /// `ttl` µs; its token kept `record_ms` in the `record` key.
    pub(super) async fn acquire<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        (pools, shares, reserves): (&[u32], &[u32], &[u32]),
        (seats, ttl, start): (u32, u64, usize),
        (record, record_ms): (&str, u64),
    ) -> Result<Acquired, Error> {
        let mut invocation = self.acquire.prepare_invoke();
        for &p in pools {
            invocation.key(self.keys[p as usize].as_str());
        }
        invocation.key(self.counter.as_str()).key(record);
        invocation
            .arg(ttl)
            .arg(seats)
            .arg(start)
            .arg(reserves.len());
        for &share in shares.iter().chain(reserves) {
            invocation.arg(share);
        }
        invocation.arg(record_ms);
        let reply: Vec<i64> =
            (invocation.invoke_async(connection).await).map_err(Error::from_redis)?;
        parse_acquired(&reply, pools.len(), seats).ok_or_else(|| Error::Reply {
            detail: format!("{reply:?}"),
        })
    }

    /// One renewal: `Some(expiry)`, or `None` when the lease is lost.
    pub(super) async fn renew<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        token: u64,
        taken: &[(u32, u32)],
        ttl: u64,
    ) -> Result<bool, Error> {
        let mut invocation = self.renew.prepare_invoke();
        invocation.arg(ttl);
        for &(pool, seats) in taken {
            invocation.key(self.keys[pool as usize].as_str());
            invocation.arg(member(token, seats));
        }
        let reply: Vec<i64> =
            (invocation.invoke_async(connection).await).map_err(Error::from_redis)?;
        match reply[..] {
            [1, _] => Ok(true),
            [0] => Ok(false),
            _ => Err(Error::Reply {
                detail: format!("{reply:?}"),
            }),
        }
    }

    /// One release: the lease's own members removed.
    pub(super) async fn release<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        token: u64,
        taken: &[(u32, u32)],
    ) -> Result<(), Error> {
        let mut invocation = self.release.prepare_invoke();
        for &(pool, seats) in taken {
            invocation.key(self.keys[pool as usize].as_str());
            invocation.arg(member(token, seats));
        }
        let _: i64 = (invocation.invoke_async(connection).await).map_err(Error::from_redis)?;
        Ok(())
    }

    /// The give-back of the acquire whose record is `record`, over the
    /// `pools` it asked for: its lease's members removed if it ran, or a
    /// tombstone of `record_ms` left so that it takes nothing if it runs
    /// later. The members removed, or -1 for a tombstone.
    pub(super) async fn abandon<Conn: ConnectionLike>(
        &self,
        connection: &mut Conn,
        pools: &[u32],
        (record, record_ms): (&str, u64),
    ) -> Result<i64, Error> {
        let mut invocation = self.abandon.prepare_invoke();
        for &p in pools {
            invocation.key(self.keys[p as usize].as_str());
        }
        invocation.key(record).arg(record_ms);
        (invocation.invoke_async(connection).await).map_err(Error::from_redis)
    }
}

/// acquire.lua's reply for `k` pools (own and spill) and `seats` asked, or
/// `None` when it is not one: positions in range, each once, the seats
/// adding up.
pub(super) fn parse_acquired(reply: &[i64], k: usize, seats: u32) -> Option<Acquired> {
    match reply {
        [0, earliest] => Some(Acquired::Busy {
            free_in: u64::try_from(*earliest).ok(),
        }),
        [2] => Some(Acquired::Resent),
        [1, token, _expiry, rest @ ..] if !rest.is_empty() && rest.len() % 2 == 0 => {
            let token = u64::try_from(*token).ok()?;
            let mut taken = Vec::with_capacity(rest.len() / 2);
            let mut sum = 0u64;
            for pair in rest.chunks_exact(2) {
                let j = usize::try_from(pair[0]).ok().filter(|&j| j < k)?;
                let got = u32::try_from(pair[1]).ok().filter(|&s| s > 0)?;
                if taken.iter().any(|&(seen, _)| seen == j) {
                    return None;
                }
                sum += u64::from(got);
                taken.push((j, got));
            }
            (sum == u64::from(seats)).then_some(Acquired::Leased { token, taken })
        }
        _ => None,
    }
}
