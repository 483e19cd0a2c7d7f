//! The lease scripts against their mirror in `model.rs`: the same pools,
//! the same reply, the same members left — on a real `redis-server`.

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, Script};

use super::model::{self, Acquired, NotAPool, Pool};
use super::script::{
    ABANDON_LUA, ACQUIRE_LUA, Acquired as Parsed, RELEASE_LUA, RENEW_LUA, parse_acquired,
};
use crate::redis::redis_server::RedisServer;

/// A small deterministic generator, so that a failure can be replayed.
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

pub(super) const KEYS: [&str; 6] = ["{t}:p0", "{t}:p1", "{t}:p2", "{t}:p3", "{t}:p4", "{t}:p5"];
pub(super) const COUNTER: &str = "{t}:lease";
pub(super) const RECORD: &str = "{t}:acq:0123456789abcdef-7";
/// How long a record lives, in ms.
pub(super) const RECORD_MS: u64 = 400;

/// Writes `pools` into the first keys, exactly.
async fn write(connection: &mut MultiplexedConnection, pools: &[Pool]) {
    for (key, pool) in KEYS.iter().zip(pools) {
        let _: () = connection.del(*key).await.unwrap();
        for (member, expiry) in pool {
            let _: () = connection.zadd(*key, member, *expiry).await.unwrap();
        }
    }
}

/// What the first keys hold, as the model keeps them.
pub(super) async fn read(connection: &mut MultiplexedConnection, k: usize) -> Vec<Pool> {
    let mut pools = Vec::new();
    for key in &KEYS[..k] {
        let raw: Vec<(String, u64)> = connection.zrange_withscores(*key, 0, -1).await.unwrap();
        pools.push(raw);
    }
    pools
}

/// A random pool of `share`: leases of 1 to 3 seats, some expired, now and
/// then more than it can hold (another process's larger share), and, once
/// in a while, a member that is not a lease.
fn pool(rng: &mut XorShift, share: u32, now: u64, next: &mut u64) -> Pool {
    let mut pool = Vec::new();
    for _ in 0..rng.below(u64::from(share) + 3) {
        *next += 1;
        let seats = 1 + rng.below(3);
        let expiry = match rng.below(4) {
            0 => now, // expires at this instant: gone
            1 => now.saturating_sub(rng.below(1_000_000)),
            _ => now + 1 + rng.below(1_000_000),
        };
        pool.push((format!("{next}:{seats}"), expiry));
    }
    if rng.below(60) == 0 {
        let stray = ["x:1", "5:0", "7", "9:99999999999"][rng.below(4) as usize];
        pool.push((stray.to_owned(), now + 1 + rng.below(1000)));
    }
    pool.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
    pool
}

#[test]
fn the_lease_scripts_do_what_their_mirror_does() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let (acquire, renew, release, abandon) = (
            Script::new(ACQUIRE_LUA),
            Script::new(RENEW_LUA),
            Script::new(RELEASE_LUA),
            Script::new(ABANDON_LUA),
        );
        let mut rng = XorShift(0x1EA5_E5ED);
        // leased, multi-pool, busy, stray, renewed, lost, borrowed, from the
        // clock, stopped by a record, given back, tombstoned, counted past the
        // clock, sent again
        let mut seen = [0usize; 13];
        let mut next = 0u64;
        for step in 0..2000 {
            // k own pools, then d spill pools (none a third of the time).
            let own = 1 + rng.below(4) as usize;
            let d = [0, 0, 1, 2][rng.below(4) as usize];
            let k = own + d;
            let now =
                [1_000_000, 1_764_000_000_000_000][rng.below(2) as usize] + rng.below(1 << 30);
            let shares: Vec<u32> = (0..k).map(|_| 1 + rng.below(6) as u32).collect();
            let reserves: Vec<u32> = shares[own..]
                .iter()
                .map(|&s| rng.below(u64::from(s) + 1) as u32)
                .collect();
            let mut pools: Vec<Pool> = shares
                .iter()
                .map(|&s| pool(&mut rng, s, now, &mut next))
                .collect();
            write(&mut connection, &pools).await;
            // The counter is ahead of every token, as in production, and
            // behind the clock; now and then missing (a restarted server's,
            // an evicted key) while the clock is past every token, or ahead
            // of the clock (tokens given faster than one a microsecond).
            next = next.saturating_add(1);
            let mut counter = match rng.below(8) {
                0 if now > next => {
                    let _: () = connection.del(COUNTER).await.unwrap();
                    None
                }
                1 => {
                    let ahead = now + rng.below(1000);
                    let _: () = connection.set(COUNTER, ahead).await.unwrap();
                    Some(ahead)
                }
                _ => {
                    let _: () = connection.set(COUNTER, next).await.unwrap();
                    Some(next)
                }
            };
            let most: u32 = shares.iter().sum();
            let seats = 1 + rng.below(u64::from(most)) as u32;
            let ttl = 1 + rng.below(10_000_000);
            let start = rng.below(k as u64) as usize;

            // The acquire's record: missing, as its caller sends it; now
            // and then a tombstone (its give-back came first), or a stray.
            let mut record = match rng.below(12) {
                0 => Some(model::TOMBSTONE.to_owned()),
                1 if rng.below(4) == 0 => Some("12x".to_owned()),
                // Its own token: the same acquire sent again.
                2 => Some(rng.below(1 << 40).to_string()),
                _ => None,
            };
            let _: () = connection.del(RECORD).await.unwrap();
            if let Some(held) = &record {
                let _: () = connection.set(RECORD, held).await.unwrap();
            }
            let stopped = record.is_some();

            let from_clock = counter.is_none();
            let ahead = counter.is_some_and(|last| last >= now);
            let want = model::acquire(
                &mut pools,
                (&shares, &reserves),
                (&mut counter, &mut record),
                (ttl, seats, start, now),
            );
            let mut invocation = acquire.prepare_invoke();
            for key in &KEYS[..k] {
                invocation.key(*key);
            }
            invocation
                .key(COUNTER)
                .key(RECORD)
                .arg(ttl)
                .arg(seats)
                .arg(start)
                .arg(d);
            for share in shares.iter().chain(&reserves) {
                invocation.arg(*share);
            }
            invocation.arg(RECORD_MS).arg(now);
            let got: Result<Vec<i64>, _> = invocation.invoke_async(&mut connection).await;
            let leased = match (want, got) {
                (Err(NotAPool), Err(error)) => {
                    assert!(
                        error.to_string().contains("NOTAPOOL"),
                        "step {step}: {error}"
                    );
                    seen[3] += 1;
                    continue;
                }
                (Ok(Acquired::Busy(free_in)), Ok(reply)) => {
                    let free_in = free_in.map_or(-1, |f| f as i64);
                    assert_eq!(reply, [0, free_in], "step {step}");
                    assert_eq!(
                        parse_acquired(&reply, k, seats),
                        Some(Parsed::Busy {
                            free_in: u64::try_from(free_in).ok()
                        })
                    );
                    seen[2] += 1;
                    seen[8] += usize::from(stopped);
                    None
                }
                (Ok(Acquired::Resent), Ok(reply)) => {
                    assert_eq!(reply, [2], "step {step}");
                    assert_eq!(parse_acquired(&reply, k, seats), Some(Parsed::Resent));
                    seen[12] += 1;
                    None
                }
                (Ok(Acquired::Leased(token, expiry, taken)), Ok(reply)) => {
                    let mut want = vec![1, token as i64, expiry as i64];
                    for &(j, s) in &taken {
                        want.extend([j as i64, i64::from(s)]);
                    }
                    assert_eq!(reply, want, "step {step}");
                    let parsed = parse_acquired(&reply, k, seats);
                    assert_eq!(
                        parsed,
                        Some(Parsed::Leased {
                            token,
                            taken: taken.clone()
                        })
                    );
                    seen[0] += 1;
                    seen[1] += usize::from(taken.len() > 1);
                    seen[6] += usize::from(taken.iter().any(|&(j, _)| j >= own));
                    seen[7] += usize::from(from_clock && token == now);
                    seen[11] += usize::from(ahead && token > now);
                    Some((token, taken))
                }
                (want, got) => panic!("step {step}: the mirror {want:?}, the script {got:?}"),
            };
            assert_eq!(read(&mut connection, k).await, pools, "step {step}");
            let stored: Option<u64> = connection.get(COUNTER).await.unwrap();
            assert_eq!(stored, counter, "step {step}");
            assert_eq!(held(&mut connection).await, record, "step {step}");
            if leased.is_some() {
                let pttl: i64 = redis::cmd("PTTL")
                    .arg(RECORD)
                    .query_async(&mut connection)
                    .await
                    .unwrap();
                assert!(0 < pttl && pttl <= RECORD_MS as i64, "step {step}: {pttl}");
            }

            // Or the acquire given back, as its caller does when the reply
            // does not come: whether it ran or not.
            if rng.below(4) == 0 {
                let mut invocation = abandon.prepare_invoke();
                for key in &KEYS[..k] {
                    invocation.key(*key);
                }
                invocation.key(RECORD).arg(RECORD_MS);
                let got: Result<i64, _> = invocation.invoke_async(&mut connection).await;
                match (model::abandon(&mut pools, &mut record), got) {
                    (Ok(want), Ok(got)) => {
                        assert_eq!(got, want, "step {step}");
                        seen[9] += usize::from(got > 0);
                        seen[10] += usize::from(got < 0);
                    }
                    (Err(NotAPool), Err(error)) => {
                        assert_eq!(error.code(), Some("NOTAPOOL"), "step {step}: {error}");
                    }
                    (want, got) => panic!("step {step}: the mirror {want:?}, the script {got:?}"),
                }
                assert_eq!(
                    read(&mut connection, k).await,
                    pools,
                    "step {step}, given back"
                );
                assert_eq!(
                    held(&mut connection).await,
                    record,
                    "step {step}, given back"
                );
                continue;
            }

            // Renew (maybe too late) or release the new lease, or one of
            // another token's members.
            let (taken, token) = match leased {
                Some((token, taken)) if rng.below(4) > 0 => (taken, token),
                _ => {
                    let Some((j, pool)) = pools.iter().enumerate().find(|(_, p)| !p.is_empty())
                    else {
                        continue;
                    };
                    // (A stray member is left alone: an acquire a
                    // tombstone stopped reads no pool.)
                    let Some((token, seats)) = pool[0].0.split_once(':') else {
                        continue;
                    };
                    let (Ok(token), Ok(seats)) = (token.parse(), seats.parse()) else {
                        continue;
                    };
                    (vec![(j, seats)], token)
                }
            };
            let members: Vec<String> = taken
                .iter()
                .map(|&(_, s)| super::script::member(token, s))
                .collect();
            // Now and then at the very instant the new lease expires.
            let later = match rng.below(4) {
                0 => now + ttl,
                _ => now + rng.below(2 * ttl),
            };
            let is_renew = rng.below(2) == 0;
            let mut invocation = if is_renew {
                renew.prepare_invoke()
            } else {
                release.prepare_invoke()
            };
            if is_renew {
                invocation.arg(ttl);
            }
            for (&(j, _), member) in taken.iter().zip(&members) {
                invocation.key(KEYS[j]).arg(member);
            }
            if is_renew {
                invocation.arg(later);
                let reply: Vec<i64> = invocation.invoke_async(&mut connection).await.unwrap();
                let mut ordered = order(&mut pools, &taken);
                match model::renew(&mut ordered, &members, ttl, later) {
                    Some(expiry) => {
                        assert_eq!(reply, [1, expiry as i64], "step {step}");
                        seen[4] += 1;
                    }
                    None => {
                        assert_eq!(reply, [0], "step {step}");
                        seen[5] += 1;
                    }
                }
            } else {
                let reply: i64 = invocation.invoke_async(&mut connection).await.unwrap();
                let mut ordered = order(&mut pools, &taken);
                assert_eq!(
                    reply as usize,
                    model::release(&mut ordered, &members),
                    "step {step}"
                );
            }
            assert_eq!(read(&mut connection, k).await, pools, "step {step}, after");
        }
        assert!(
            seen[0] > 300 && seen[1] > 50 && seen[2] > 100 && seen[3] > 10 && seen[6] > 50,
            "{seen:?}"
        );
        assert!(
            seen[4] > 50 && seen[5] > 50 && seen[7] > 10 && seen[11] > 10,
            "{seen:?}"
        );
        assert!(
            seen[8] > 50 && seen[9] > 50 && seen[10] > 50 && seen[12] > 50,
            "{seen:?}"
        );
    });
}

/// What an acquire's record holds, if anything.
pub(super) async fn held(connection: &mut MultiplexedConnection) -> Option<String> {
    connection.get(RECORD).await.unwrap()
}

/// An invocation of `script` over `keys` with `args`.
pub(super) fn run<'a>(
    script: &'a Script,
    keys: &[&str],
    args: &[u64],
) -> redis::ScriptInvocation<'a> {
    let mut invocation = script.prepare_invoke();
    for key in keys {
        invocation.key(*key);
    }
    for arg in args {
        invocation.arg(*arg);
    }
    invocation
}

/// The pools at `taken`'s positions, in its order.
fn order<'a>(pools: &'a mut [Pool], taken: &[(usize, u32)]) -> Vec<&'a mut Pool> {
    let mut slots: Vec<Option<&'a mut Pool>> = pools.iter_mut().map(Some).collect();
    taken
        .iter()
        .map(|&(j, _)| slots[j].take().unwrap())
        .collect()
}

#[test]
fn keys_of_another_type_are_refused_before_anything_is_written() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let (acquire, renew, release) = (
            Script::new(ACQUIRE_LUA),
            Script::new(RENEW_LUA),
            Script::new(RELEASE_LUA),
        );
        let _: () = connection.zadd(KEYS[0], "1:1", 5000u64).await.unwrap();
        let _: () = connection.set(KEYS[1], "not a pool").await.unwrap();
        // Acquire: a pool of another type; then a counter of another type.
        let refused = run(
            &acquire,
            &[KEYS[0], KEYS[1], COUNTER, RECORD],
            &[100, 1, 0, 0, 2, 2, RECORD_MS, 1000],
        )
        .invoke_async::<Vec<i64>>(&mut connection)
        .await
        .unwrap_err();
        assert_eq!(refused.code(), Some("NOTAPOOL"), "{refused}");
        assert!(refused.to_string().contains("{t}:p1"), "{refused}");
        let _: () = connection.hset(COUNTER, "f", "v").await.unwrap();
        let refused = run(
            &acquire,
            &[KEYS[0], COUNTER, RECORD],
            &[100, 1, 0, 0, 2, RECORD_MS, 1000],
        )
        .invoke_async::<Vec<i64>>(&mut connection)
        .await
        .unwrap_err();
        assert_eq!(refused.code(), Some("NOTAPOOL"), "{refused}");
        assert!(refused.to_string().contains("{t}:lease"), "{refused}");
        // A counter no double holds exactly, or not a number: refused, and
        // left as it is.
        for stray in ["9007199254740991", "-3", "1e3", "many"] {
            let _: () = connection.set(COUNTER, stray).await.unwrap();
            let refused = run(
                &acquire,
                &[KEYS[0], COUNTER, RECORD],
                &[100, 1, 0, 0, 2, RECORD_MS, 1000],
            )
            .invoke_async::<Vec<i64>>(&mut connection)
            .await
            .unwrap_err();
            assert_eq!(refused.code(), Some("NOTAPOOL"), "{stray}: {refused}");
            let kept: String = connection.get(COUNTER).await.unwrap();
            assert_eq!(kept, stray);
        }
        // Renew and release over the string: refused, the other pool kept.
        let mut renewing = run(&renew, &[KEYS[0], KEYS[1]], &[100]);
        renewing.arg("1:1").arg("1:1").arg(1000);
        let refused = renewing
            .invoke_async::<Vec<i64>>(&mut connection)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("NOTAPOOL"), "{refused}");
        let mut releasing = run(&release, &[KEYS[1]], &[]);
        releasing.arg("1:1");
        let refused = releasing
            .invoke_async::<i64>(&mut connection)
            .await
            .unwrap_err();
        assert!(refused.to_string().contains("NOTAPOOL"), "{refused}");
        assert_eq!(
            read(&mut connection, 1).await,
            [vec![("1:1".to_owned(), 5000)]]
        );
        let kept: String = connection.get(KEYS[1]).await.unwrap();
        assert_eq!(kept, "not a pool");
        assert_eq!(held(&mut connection).await, None, "nothing recorded");
    });
}
