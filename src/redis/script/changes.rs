//! The change scripts against the pure steps of `src/draw/rescale.rs`: the
//! same inputs, the same arrival times written — on a real `redis-server`.

use redis::{AsyncCommands, Script};

use super::differential::{XorShift, runtime};
use super::redis_server::RedisServer;
use crate::draw::{Pace, give_back, refund, rescale, resize, unheld};
use crate::redis::quota::{GIVEBACK_LUA, REFUND_LUA, RESCALE_LUA};

/// A bucket's arrival time, from an empty bucket to a full one and a clock
/// that went back, or 0 for a missing key.
fn tat_of(rng: &mut XorShift, capacity: u64, now: u64) -> u64 {
    match rng.below(5) {
        0 => 0,
        1 => now.saturating_sub(rng.below(2 * capacity + 1)),
        2 | 3 => now + rng.below(capacity + 1),
        _ => now + capacity + rng.below(capacity + 1),
    }
}

/// A split: interval (µs), burst, larger; capacities up to 2⁵⁰ µs, where the
/// product of two no longer fits a double.
fn split_of(rng: &mut XorShift) -> (u64, u32, u32) {
    let interval = [1, 7, 1000, 123_457, 1 << 30, (1 << 40) - 3][rng.below(6) as usize];
    let burst = 1 + rng.below(if interval > 1 << 20 { 1000 } else { 1 << 20 }) as u32;
    (interval, burst, rng.below(8) as u32)
}

async fn read(connection: &mut redis::aio::MultiplexedConnection, key: &str) -> u64 {
    let value: Option<u64> = connection.get(key).await.unwrap();
    value.unwrap_or(0)
}

#[test]
fn the_rescale_script_moves_every_bucket_as_the_pure_functions() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let script = Script::new(RESCALE_LUA);
        let keys: Vec<String> = (0..8).map(|i| format!("{{rescale}}:b{i}")).collect();
        let quota_key = "{rescale}:quota";
        let mut rng = XorShift(0x0005_CA1E);
        let (mut kept_part, mut added, mut removed, mut behind) = (0, 0, 0, 0);
        let mut version = 0;
        for step in 0..2000u64 {
            // Even steps change the quota (same N), odd ones N (any quota).
            let tokens = step % 2 == 1;
            let from_n = 1 + rng.below(8) as u32;
            let to_n = if tokens {
                1 + rng.below(8) as u32
            } else {
                from_n
            };
            let (old, new) = (split_of(&mut rng), split_of(&mut rng));
            let burst = |(_, burst, larger): (u64, u32, u32), b: usize| {
                burst + u32::from((b as u32) < larger)
            };
            let now =
                [0, 1_000_000, 1_764_000_000_000_000][rng.below(3) as usize] + rng.below(1 << 20);
            let every = from_n.max(to_n) as usize;
            let mut want = Vec::new();
            let mut fullest = u64::MAX;
            for (b, key) in keys[..every].iter().enumerate() {
                let capacity = u64::from(burst(old, b)) * old.0;
                let tat = tat_of(&mut rng, capacity, now);
                if tat == 0 {
                    let _: () = connection.del(key).await.unwrap();
                } else {
                    let _: () = connection.set(key, tat).await.unwrap();
                }
                let from = (Pace::every(old.0), burst(old, b));
                let to = (Pace::every(new.0), burst(new, b));
                // The in-process store's `move_buckets`, with a removed
                // bucket's key deleted (read back as 0) where it is sealed.
                let after = if b as u32 >= to_n {
                    removed += 1;
                    0
                } else if b as u32 >= from_n {
                    added += 1;
                    let after = crate::draw::added(fullest, to.0.capacity(to.1), now);
                    behind += usize::from(after > now + to.0.capacity(to.1));
                    after
                } else {
                    let moved = if tokens {
                        resize(from, to, tat, now)
                    } else {
                        rescale(from, to, tat, now)
                    };
                    fullest = fullest.min(moved.saturating_sub(to.0.capacity(to.1)));
                    moved
                };
                let room = Pace::room(to.0.capacity(to.1), after, now);
                kept_part += usize::from(after > 0 && room > 0 && room < to.0.capacity(to.1));
                want.push(after);
            }
            // Each step's quota key holds the version of the one before.
            let mut invocation = script.prepare_invoke();
            for key in &keys[..every] {
                invocation.key(key);
            }
            invocation.key(quota_key).arg(version);
            invocation.arg(if tokens { "tokens" } else { "share" });
            for ((interval, burst, larger), n) in [(old, from_n), (new, to_n)] {
                invocation.arg(interval).arg(burst).arg(larger).arg(n);
            }
            invocation.arg(format!("5 1000000000 5 {to_n}")).arg(now);
            let reply: Vec<u64> = invocation.invoke_async(&mut connection).await.unwrap();
            // The next version: one more, and no less than the clock, so
            // that none is written twice with two meanings.
            let next = (version + 1).max(now);
            assert_eq!(reply, [1, next], "step {step}");
            version = next;
            for (b, key) in keys[..every].iter().enumerate() {
                let got = read(&mut connection, key).await;
                assert_eq!(
                    got, want[b],
                    "step {step}, bucket {b}: {old:?} to {new:?}, N {from_n} to {to_n}, at {now}"
                );
            }
            let text: String = connection.get(quota_key).await.unwrap();
            assert_eq!(text, format!("{version} 5 1000000000 5 {to_n}"));
        }
        assert!(
            kept_part > 1500 && added > 500 && removed > 500 && behind > 50,
            "{kept_part} buckets kept part of their room, {added} added ({behind} no \
             fuller than the fullest that stays, empty past now), {removed} removed"
        );
        // A caller that read an older version moves nothing.
        let _: () = connection.set(&keys[0], 12_345u64).await.unwrap();
        let mut invocation = script.prepare_invoke();
        invocation.key(&keys[0]).key(quota_key).arg(3).arg("tokens");
        invocation.arg(10).arg(1).arg(0).arg(1);
        invocation.arg(20).arg(1).arg(0).arg(1);
        invocation.arg("1 1 1 1").arg(5);
        let reply: Vec<u64> = invocation.invoke_async(&mut connection).await.unwrap();
        assert_eq!(reply, [0, version]);
        assert_eq!(read(&mut connection, &keys[0]).await, 12_345);
    });
}

/// A hold-off instant for `key` in the hash `held_key`, drawn: none (0),
/// over by `now`, or still to come within a capacity; written there.
async fn held_at(
    connection: &mut redis::aio::MultiplexedConnection,
    rng: &mut XorShift,
    (held_key, key): (&str, &str),
    capacity: u64,
    now: u64,
) -> u64 {
    let held = match rng.below(3) {
        0 => 0,
        1 => now.saturating_sub(rng.below(capacity)),
        _ => now + 1 + rng.below(capacity),
    };
    if held > 0 {
        let _: () = connection.hset(held_key, key, held).await.unwrap();
    }
    held
}

#[test]
fn the_refund_script_gives_back_as_the_pure_function() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let script = Script::new(REFUND_LUA);
        let keys: Vec<String> = (0..4).map(|i| format!("{{refund}}:b{i}")).collect();
        let quota_key = "{refund}:quota";
        let _: () = connection
            .set(quota_key, "7 5 1000000000 5 4")
            .await
            .unwrap();
        let held_key = "{refund}:held";
        let mut rng = XorShift(0x0BAC_CAFE);
        let (mut partial, mut capped, mut booked, mut stopped) = (0, 0, 0, 0);
        for step in 0..1500 {
            let payers = 1 + rng.below(4) as usize;
            let now =
                [0, 1_000_000, 1_764_000_000_000_000][rng.below(3) as usize] + rng.below(1 << 20);
            // Every other step with the hold-off hash (the one-slot
            // layout), some of its buckets held until before or after now.
            let with_held = step % 2 == 0;
            let interval = 1 + rng.below(1 << 12);
            let _: () = connection.del(held_key).await.unwrap();
            let mut invocation = script.prepare_invoke();
            let mut want = Vec::new();
            let mut args = Vec::new();
            for key in &keys[..payers] {
                let capacity = interval * (1 + rng.below(1 << 8));
                let tat = tat_of(&mut rng, capacity, now);
                if tat == 0 {
                    let _: () = connection.del(key).await.unwrap();
                } else {
                    let _: () = connection.set(key, tat).await.unwrap();
                }
                let held = held_at(&mut connection, &mut rng, (held_key, key), capacity, now).await;
                let cost = rng.below(2 * capacity);
                let back = refund(tat, cost, capacity, now);
                let after = match with_held {
                    true => unheld(tat, back, held, capacity, interval, now),
                    false => back,
                };
                partial += usize::from(after > now && after < tat);
                capped += usize::from(after == now && tat > now);
                booked += usize::from(tat > now + capacity);
                stopped += usize::from(after > back);
                want.push(after);
                args.push((cost, capacity));
                invocation.key(key);
            }
            // Drawn under version 7, as the quota stands: every bucket is
            // the one that paid.
            invocation.key(quota_key);
            if with_held {
                invocation.key(held_key);
            }
            invocation
                .arg(7)
                .arg(7)
                .arg(if with_held { interval } else { 0 });
            for (cost, capacity) in args {
                invocation.arg(cost).arg(capacity);
            }
            invocation.arg(now);
            let reply: Vec<u64> = invocation.invoke_async(&mut connection).await.unwrap();
            assert_eq!(reply[..2], [1, 7], "step {step}");
            assert_eq!(reply[2..], vec![1; payers], "step {step}");
            for (j, key) in keys[..payers].iter().enumerate() {
                assert_eq!(
                    read(&mut connection, key).await,
                    want[j],
                    "step {step}, payer {j}"
                );
            }
        }
        assert!(
            partial > 200 && capped > 300,
            "{partial} partial, {capped} capped"
        );
        assert!(booked > 200, "{booked} owing beyond their capacity");
        assert!(stopped > 100, "{stopped} stopped at a hold-off's mark");
        // A refund counted under another quota gives nothing back.
        let _: () = connection.set(&keys[0], 5_000_000u64).await.unwrap();
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&keys[0])
            .key(quota_key)
            .arg(6)
            .arg(6)
            .arg(0)
            .arg(1000)
            .arg(1_000_000);
        let reply: Vec<u64> = invocation.invoke_async(&mut connection).await.unwrap();
        assert_eq!(reply, [0, 7]);
        assert_eq!(read(&mut connection, &keys[0]).await, 5_000_000);
        // Nor does one to a bucket born after the grant was drawn (or whose
        // birth cannot be read); one born before or with it gets it back.
        let born = format!("{}:born", keys[0]);
        for (born_at, drawn_under, same) in [("7", 6, 0), ("x", 7, 0), ("6", 6, 1), ("6", 7, 1)] {
            let _: () = connection.set(&keys[0], 5_000_000u64).await.unwrap();
            let _: () = connection.set(&born, born_at).await.unwrap();
            let mut invocation = script.prepare_invoke();
            invocation
                .key(&keys[0])
                .key(quota_key)
                .arg(7)
                .arg(drawn_under)
                .arg(0);
            invocation.arg(1000).arg(1_000_000).arg(4_500_000);
            let reply: Vec<u64> = invocation.invoke_async(&mut connection).await.unwrap();
            assert_eq!(
                reply,
                [1, 7, same],
                "born {born_at}, drawn under {drawn_under}"
            );
            let want = if same == 1 { 4_999_000 } else { 5_000_000 };
            assert_eq!(read(&mut connection, &keys[0]).await, want);
        }
        let _: () = connection.del(&born).await.unwrap();
        let _: () = connection.hset(&born, "a", "b").await.unwrap();
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&keys[0])
            .key(quota_key)
            .arg(7)
            .arg(7)
            .arg(0)
            .arg(1)
            .arg(1);
        let err = invocation
            .invoke_async::<Vec<u64>>(&mut connection)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("NOTABUCKET"), "{err}");
    });
}

#[test]
fn the_give_back_script_returns_a_reservation_as_the_pure_function() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let script = Script::new(GIVEBACK_LUA);
        let keys: Vec<String> = (0..4).map(|i| format!("{{giveback}}:b{i}")).collect();
        let quota_key = "{giveback}:quota";
        let held_key = "{giveback}:held";
        let mut rng = XorShift(0x0617_EBAC);
        let (mut returned, mut kept, mut stopped) = (0, 0, 0);
        for step in 0..1000 {
            let payers = 1 + rng.below(4) as usize;
            let now = 1_764_000_000_000_000 + rng.below(1 << 20);
            // Every other step with the hold-off hash (the one-slot layout).
            let with_held = step % 2 == 0;
            let interval = 1 + rng.below(1 << 12);
            let _: () = connection.del(held_key).await.unwrap();
            let mut invocation = script.prepare_invoke();
            let (mut want, mut args) = (Vec::new(), Vec::new());
            for key in &keys[..payers] {
                let capacity = interval * (1 + rng.below(1 << 10));
                let cost = 1 + rng.below(capacity);
                let written = now + rng.below(2 * capacity);
                // Half the buckets are as the booking left them.
                let tat = if rng.below(2) == 0 {
                    written
                } else {
                    written + 1 + rng.below(99)
                };
                let _: () = connection.set(key, tat).await.unwrap();
                let held = held_at(&mut connection, &mut rng, (held_key, key), capacity, now).await;
                let back = give_back(tat, written, cost, now);
                let after = match with_held {
                    true => unheld(tat, back, held, capacity, interval, now),
                    false => back,
                };
                returned += usize::from(after != tat);
                kept += usize::from(after == tat);
                stopped += usize::from(after > back);
                want.push(after);
                args.push((written, cost, capacity));
                invocation.key(key);
            }
            invocation.key(quota_key);
            if with_held {
                invocation.key(held_key);
            }
            invocation.arg(0).arg(if with_held { interval } else { 0 });
            for (written, cost, capacity) in args {
                invocation.arg(written).arg(cost).arg(capacity);
            }
            invocation.arg(now);
            let reply: Vec<u64> = invocation.invoke_async(&mut connection).await.unwrap();
            assert_eq!(reply, [1, 0], "step {step}");
            for (j, key) in keys[..payers].iter().enumerate() {
                assert_eq!(
                    read(&mut connection, key).await,
                    want[j],
                    "step {step}, payer {j}"
                );
            }
        }
        assert!(
            returned > 500 && kept > 500,
            "{returned} returned, {kept} kept"
        );
        assert!(stopped > 50, "{stopped} stopped at a hold-off's mark");
    });
}
