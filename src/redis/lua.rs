//! How the limiter calls a Lua script of its own: by `EVALSHA`, or by
//! `FCALL` of its function where the script is one of the draw's and its
//! library is loaded; sent whole as `EVAL` where the server lacks it.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use ::redis::aio::ConnectionLike;
use ::redis::{
    Cmd, FromRedisValue, RedisError, RedisResult, Script, ServerErrorKind, ToRedisArgs, Value,
};

/// A script with its source: called by `EVALSHA`, and sent whole as
/// `EVAL` where the server lacks it (see [`query_value`]); or, for the
/// scripts of the draw once their library is loaded, called by `FCALL`.
#[derive(Debug, Clone)]
pub(crate) struct Lua {
    script: Script,
    code: &'static str,
    /// For a script of the draw: its function in the draw's library (see
    /// `DRAW_LIBRARY` in script.rs), and what this limiter knows of the
    /// library (shared by its draws and batches).
    function: Option<(&'static str, Arc<Library>)>,
}

/// What a limiter knows of the draw's library in the server: whether it
/// calls its functions, and whether the server seems to have lost them
/// (so that loading the library again may bring them back), and when it
/// may load it next.
#[derive(Debug)]
pub(crate) struct Library {
    /// The limiter calls the functions (`FCALL`), not the scripts.
    on: AtomicBool,
    /// The server lacked a function, or a script while the limiter called
    /// scripts: it restarted, or was flushed, or was away when the limiter
    /// was built; or a load had no answer, or one that may change. Taken by
    /// whoever loads the library again.
    lost: AtomicBool,
    /// When (µs, the caller's clock) the last load was taken; 0 for none.
    last: AtomicU64,
    /// The least time after the last load before the next: [`RELOAD_EVERY`]
    /// where loads are rare, twice as long after each load that follows the
    /// last within twice that time, up to [`RELOAD_MOST`].
    every: AtomicU64,
}

/// The least time between two loads of the library by one limiter.
const RELOAD_EVERY: u64 = 1_000_000;

/// The most time between two loads of the library, which loads coming one
/// after another reach by doubling: a server refusing them for a while
/// (out of memory, a read-only replica, busy, loading its data), no answer,
/// or a cluster whose masters answer differently (the `redis` crate says
/// what the last of them did: one holds the library, one lacks it).
const RELOAD_MOST: u64 = 60_000_000;

impl Default for Library {
    fn default() -> Self {
        Library {
            on: AtomicBool::new(false),
            lost: AtomicBool::new(false),
            last: AtomicU64::new(0),
            every: AtomicU64::new(RELOAD_EVERY),
        }
    }
}

impl Library {
    /// Whether the limiter calls the functions.
    pub(crate) fn on(&self) -> bool {
        self.on.load(Relaxed)
    }

    /// The server's final answer to a load: the functions are there to call
    /// (loaded, or found loaded already), or refused (no Functions, no
    /// permission, a library it cannot compile).
    pub(crate) fn loaded(&self, on: bool) {
        self.on.store(on, Relaxed);
    }

    /// A load without an answer, or refused for the moment: the script
    /// meanwhile, and a load again later.
    pub(crate) fn load_again(&self) {
        self.on.store(false, Relaxed);
        self.mark_lost();
    }

    /// Whether the library is to be loaded again (whenever the least time
    /// after the last load has passed, see [`take_lost`](Self::take_lost)).
    pub(crate) fn lost(&self) -> bool {
        self.lost.load(Relaxed)
    }

    /// The library is to be loaded once the server answers: it was not
    /// there, or a load had no final answer.
    pub(crate) fn mark_lost(&self) {
        self.lost.store(true, Relaxed);
    }

    /// Whether the library is to be loaded again at `now` (µs): the server
    /// was found to have lost it since this was last asked, and the least
    /// time after the last load has passed. One caller takes it.
    pub(crate) fn take_lost(&self, now: u64) -> bool {
        if !self.lost() {
            return false;
        }
        let (last, every) = (self.last.load(Relaxed), self.every.load(Relaxed));
        if last != 0 && now < last.saturating_add(every) {
            return false;
        }
        if (self.last)
            .compare_exchange(last, now.max(1), Relaxed, Relaxed)
            .is_err()
        {
            return false;
        }
        // Within twice the least time after the last load: twice as long
        // before the next. Loads further apart start again from a second.
        let soon = last != 0 && now - last < every.saturating_mul(2);
        let next = if soon {
            (every * 2).min(RELOAD_MOST)
        } else {
            RELOAD_EVERY
        };
        self.every.store(next, Relaxed);
        self.lost.swap(false, Relaxed)
    }
}

impl Lua {
    pub(crate) fn new(code: &'static str) -> Lua {
        Lua {
            script: Script::new(code),
            code,
            function: None,
        }
    }

    /// A script of the draw, also the function `name` of the draw's
    /// library, which it calls while `library` is on.
    pub(super) fn of_library(code: &'static str, name: &'static str, library: Arc<Library>) -> Lua {
        Lua {
            function: Some((name, library)),
            ..Lua::new(code)
        }
    }

    /// The `redis` crate's script, for loading it ahead (at build).
    pub(crate) fn script(&self) -> &Script {
        &self.script
    }

    /// The function to call instead of the script, while its library is
    /// loaded.
    pub(super) fn function(&self) -> Option<&'static str> {
        let (name, library) = self.function.as_ref()?;
        library.on().then_some(*name)
    }

    /// What this limiter knows of the script's library, shared with the
    /// other scripts of it; `None` for a script that has none.
    pub(super) fn library(&self) -> Option<&Arc<Library>> {
        self.function.as_ref().map(|(_, library)| library)
    }

    /// From now on, the script rather than its function; `lost` when the
    /// server lacked it (rather than refused it), so that the library may
    /// be loaded again.
    fn functions_off(&self, lost: bool) {
        if let Some(library) = self.library() {
            library.loaded(false);
            if lost {
                library.mark_lost();
            }
        }
    }

    /// The server lacked the script. Where the limiter calls scripts rather
    /// than functions, it may have lost the library too (a restart), or
    /// never had it (the limiter was built while it was away): it may be
    /// loaded again. Where the limiter calls functions, only an `FCALL`
    /// refused as a write went as the script, and the library is there.
    fn script_lost(&self) {
        if let Some(library) = self.library().filter(|library| !library.on()) {
            library.mark_lost();
        }
    }

    /// A call of the script, its keys and arguments added as to the `redis`
    /// crate's `ScriptInvocation`.
    pub(crate) fn prepare_invoke(&self) -> Invocation<'_> {
        Invocation {
            lua: self,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }
}

/// A call of a [`Lua`] script being made: its keys, then its arguments.
pub(crate) struct Invocation<'a> {
    lua: &'a Lua,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Invocation<'_> {
    pub(crate) fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        key.write_redis_args(&mut self.keys);
        self
    }

    pub(crate) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        arg.write_redis_args(&mut self.args);
        self
    }

    /// Sends the call (see [`query_by_keys`]).
    pub(crate) async fn invoke_async<T: FromRedisValue>(
        &self,
        connection: &mut impl ConnectionLike,
    ) -> RedisResult<T> {
        let mut cmd = command(self.lua, self.keys.len(), self.keys.len() + self.args.len());
        for word in self.keys.iter().chain(&self.args) {
            cmd.arg(word.as_slice());
        }
        query_by_keys(self.lua, &cmd, connection).await
    }
}

/// An `EVALSHA` of `script` over `keys` keys (or an `FCALL` of its
/// function, see [`Lua::function`]), with room for `arguments` keys and
/// arguments after it (one buffer, rather than the `redis` crate's buffer
/// per argument of a `ScriptInvocation`).
pub(super) fn command(script: &Lua, keys: usize, arguments: usize) -> Cmd {
    let mut cmd = Cmd::with_capacity(3 + arguments, 64 + 24 * arguments);
    match script.function() {
        Some(name) => cmd.arg("FCALL").arg(name),
        None => cmd.arg("EVALSHA").arg(script.script.get_hash()),
    };
    cmd.arg(keys);
    cmd
}

/// Sends `cmd`, a [`command`] of `script`, and reads its reply as a `T`
/// (see [`query_value`]).
pub(super) async fn query_by_keys<T: FromRedisValue, Conn: ConnectionLike>(
    script: &Lua,
    cmd: &Cmd,
    connection: &mut Conn,
) -> RedisResult<T> {
    let reply = query_value(script, cmd, connection).await?;
    Ok(::redis::from_redis_value(reply.extract_error()?)?)
}

/// Sends `cmd`, a [`command`] of `script`, with the reply as it came (an
/// error reply inside an array, one decision's in a batch, stays in its
/// place rather than failing all). When the server lacks the script (a
/// restart, a failover, `SCRIPT FLUSH`), the same call goes as an `EVAL` of
/// its source, which loads it there, rather than `SCRIPT LOAD`: in a
/// Cluster, `SCRIPT LOAD` goes to every master and waits for each, so a
/// stopped node would hold a call whose keys live on a node that answers.
/// `EVAL` goes where its keys do. For the same reason an `FCALL` that finds
/// no function (a restart without persistence, `FUNCTION FLUSH`), or may
/// not call it (an ACL), goes as the script, and the limiter calls the
/// script until the library is loaded again (not found, or the script not
/// found while the limiter calls it: marked [lost](Library), which the
/// store loads once Redis answers); one refused as a write
/// ([`refused_as_a_write`]) goes as the script this once. Nothing ran, so
/// nothing is taken twice.
pub(super) async fn query_value<Conn: ConnectionLike>(
    script: &Lua,
    cmd: &Cmd,
    connection: &mut Conn,
) -> RedisResult<Value> {
    let once =
        async |connection: &mut Conn, cmd: &Cmd| match connection.req_packed_command(cmd).await {
            Ok(Value::ServerError(error)) => Err(RedisError::from(error)),
            reply => reply,
        };
    // After the command's name and the hash or the function's: the number
    // of keys, the keys and the arguments, as they were.
    let rest = |cmd: &Cmd, mut to: Cmd| {
        for arg in cmd.args_iter().skip(2) {
            if let ::redis::Arg::Simple(arg) = arg {
                to.arg(arg);
            }
        }
        to
    };
    let as_script;
    let mut cmd = cmd;
    if matches!(cmd.args_iter().next(), Some(::redis::Arg::Simple(b"FCALL"))) {
        match once(connection, cmd).await {
            Err(e) if no_function(&e) || refused_as_a_write(&e) => {
                if no_function(&e) {
                    script.functions_off(function_lost(&e));
                }
                let mut evalsha = Cmd::new();
                evalsha.arg("EVALSHA").arg(script.script.get_hash());
                as_script = rest(cmd, evalsha);
                cmd = &as_script;
            }
            reply => return reply,
        }
    }
    match once(connection, cmd).await {
        Err(e) if e.kind() == ::redis::ErrorKind::Server(ServerErrorKind::NoScript) => {
            script.script_lost();
            let mut eval = ::redis::cmd("EVAL");
            eval.arg(script.code);
            once(connection, &rest(cmd, eval)).await
        }
        reply => reply,
    }
}

/// Whether an `FCALL` was refused, before its function ran, for what a
/// function that may write is refused: memory full (`OOM`), writes stopped
/// by a failed save (`MISCONF`), too few replicas (`NOREPLICAS`), or a
/// read-only replica (`READONLY`). Redis checks these when the function
/// starts, where it checks a script (without flags) only at its first
/// write: a denial, which writes nothing, is still the script's to answer
/// (and the next decision's `FCALL` may run again).
fn refused_as_a_write(e: &RedisError) -> bool {
    matches!(
        e.code(),
        Some("OOM" | "MISCONF" | "NOREPLICAS" | "READONLY")
    )
}

/// Whether an `FCALL` failed before its function ran: no such function,
/// no permission, or no such command (a server older than Redis 7).
fn no_function(e: &RedisError) -> bool {
    let detail = e.detail().unwrap_or("");
    // Not a key's permission, which the function met as it ran.
    (e.kind() == ::redis::ErrorKind::Server(ServerErrorKind::NoPerm) && detail.contains("'fcall'"))
        || function_lost(e)
        || (e.code() == Some("ERR") && detail.starts_with("unknown command"))
}

/// Whether an `FCALL` found no such function: the server lost the library
/// (a restart without persistence, `FUNCTION FLUSH`), which loading it again
/// brings back; where no permission or no such command would not.
fn function_lost(e: &RedisError) -> bool {
    e.code() == Some("ERR") && e.detail().unwrap_or("").starts_with("Function not found")
}

#[cfg(test)]
mod tests {
    use super::{Library, RELOAD_EVERY, RELOAD_MOST};

    #[test]
    fn a_lost_library_is_loaded_again_later_each_time_loads_follow_each_other() {
        let library = Library::default();
        assert!(!library.take_lost(0), "nothing lost");
        library.mark_lost();
        assert!(library.take_lost(5), "the first load at once");
        assert!(!library.take_lost(6), "taken once");
        // Lost again at once, again and again (a server refusing loads, or
        // masters that answer differently): a second after the first
        // load, then twice as long each time, up to the most.
        let (mut at, mut every) = (5, RELOAD_EVERY);
        for _ in 0..10 {
            library.load_again();
            assert!(!library.on());
            assert!(!library.take_lost(at + every - 1), "{every}");
            at += every;
            assert!(library.take_lost(at), "{every}");
            every = (every * 2).min(RELOAD_MOST);
        }
        assert_eq!(every, RELOAD_MOST);
        // At the most, loads a minute apart stay a minute apart.
        library.load_again();
        assert!(!library.take_lost(at + RELOAD_MOST - 1));
        at += RELOAD_MOST;
        assert!(library.take_lost(at));
        // Loaded, and lost only long after (a restart, beyond twice the
        // least time): at once, and a second is the least time again.
        library.loaded(true);
        assert!(library.on());
        library.mark_lost();
        at += 2 * RELOAD_MOST;
        assert!(library.take_lost(at));
        library.mark_lost();
        assert!(!library.take_lost(at + RELOAD_EVERY - 1));
        assert!(library.take_lost(at + RELOAD_EVERY));
    }
}
