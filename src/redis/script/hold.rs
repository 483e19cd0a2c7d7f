//! The hold-off and charge scripts against `hold` and `charge` of
//! `src/draw/rescale.rs`: the same inputs, the same arrival times written —
//! on a real `redis-server`.

use redis::{AsyncCommands, Script};

use super::differential::{XorShift, runtime};
use super::redis_server::RedisServer;
use crate::draw::{charge, hold};
use crate::redis::charge::CHARGE_LUA;
use crate::redis::holdoff::HOLDOFF_LUA;

async fn read(connection: &mut redis::aio::MultiplexedConnection, key: &str) -> u64 {
    let value: Option<u64> = connection.get(key).await.unwrap();
    value.unwrap_or(0)
}

#[test]
fn the_hold_off_script_holds_every_bucket_as_the_pure_function() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let script = Script::new(HOLDOFF_LUA);
        let keys: Vec<String> = (0..4).map(|i| format!("{{hold}}:b{i}")).collect();
        let quota_key = "{hold}:quota";
        let held_key = "{hold}:held";
        let mut recorded = std::collections::HashMap::new();
        let _: () = connection
            .set(quota_key, "3 5 1000000000 5 4")
            .await
            .unwrap();
        let mut rng = XorShift(0x4010_0FF5);
        let (mut moved, mut kept) = (0, 0);
        let version = 3;
        for step in 0..1500 {
            let held = 1 + rng.below(4) as usize;
            let now =
                [0, 1_000_000, 1_764_000_000_000_000][rng.below(3) as usize] + rng.below(1 << 20);
            let interval = [1, 7, 1000, 123_457][rng.below(4) as usize];
            // Up to the longest hold-off (`MAX_HOLD_OFF`), which every
            // hold-off is cut to before it is sent.
            let lead = [0, 1, 999, 3_599_999_000][rng.below(4) as usize] + rng.below(1000);
            let mut invocation = script.prepare_invoke();
            let (mut want, mut capacities, mut turns) = (Vec::new(), Vec::new(), Vec::new());
            for key in &keys[..held] {
                let capacity = interval * (1 + rng.below(64));
                // When this bucket comes back after the instant.
                let turn = [0, interval / 4, interval][rng.below(3) as usize];
                let tat = match rng.below(4) {
                    0 => 0, // missing: a full bucket
                    1 => now.saturating_sub(rng.below(capacity + 1)),
                    2 => now + rng.below(capacity + 1),
                    _ => now + lead + 2 * capacity + rng.below(capacity), // owing past it
                };
                if tat == 0 {
                    let _: () = connection.del(key).await.unwrap();
                } else {
                    let _: () = connection.set(key, tat).await.unwrap();
                }
                let after = hold(tat, now + lead + turn, capacity, interval);
                moved += usize::from(after > tat.max(now));
                kept += usize::from(after == tat && tat > now);
                want.push(after);
                capacities.push(capacity);
                turns.push(turn);
            }
            // Every other step records the instant in the hold-offs key, as
            // the one-slot layout does; the rest hold without it, as the
            // spread layout does.
            let record = step % 2 == 0;
            for key in &keys[..held] {
                invocation.key(key);
            }
            invocation.key(quota_key);
            if record {
                invocation.key(held_key);
            }
            invocation
                .arg(version)
                .arg(lead)
                .arg(interval)
                .arg(if record { "1" } else { "" });
            for &capacity in &capacities {
                invocation.arg(capacity);
            }
            for &turn in &turns {
                invocation.arg(turn);
            }
            invocation.arg(now);
            let reply: Vec<u64> = invocation.invoke_async(&mut connection).await.unwrap();
            assert_eq!(reply, [1, version, now + lead], "step {step}");
            for (j, key) in keys[..held].iter().enumerate() {
                let got = read(&mut connection, key).await;
                // A missing key left missing is a full bucket: at or before now.
                if got == 0 {
                    assert!(want[j] <= now, "step {step}, bucket {j}: {}", want[j]);
                } else {
                    assert_eq!(got, want[j], "step {step}, bucket {j}");
                }
                // The latest instant each bucket was held until, recorded.
                if record {
                    let latest = recorded.entry(key.clone()).or_insert(0);
                    let at = now + lead + turns[j];
                    // This test's clock jumps back and forth: an instant
                    // later than any hold-off at `now` writes (twice the
                    // longest hold-off on) is a stray value to the
                    // script, overwritten.
                    if *latest < at || *latest > now + 2 * 3_600_000_000 {
                        *latest = at;
                    }
                }
                let got: Option<u64> = connection.hget(held_key, key).await.unwrap();
                assert_eq!(got, recorded.get(key).copied(), "step {step}, bucket {j}");
            }
        }
        assert!(moved > 1000 && kept > 200, "{moved} moved, {kept} kept");
        // Another quota version: nothing is held, and the caller asks again.
        let _: () = connection.set(&keys[0], 5u64).await.unwrap();
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&keys[0])
            .key(quota_key)
            .arg(version - 1)
            .arg(1000)
            .arg(1)
            .arg("");
        invocation.arg(10).arg(0).arg(100);
        let reply: Vec<u64> = invocation.invoke_async(&mut connection).await.unwrap();
        assert_eq!(reply, [0, version]);
        assert_eq!(read(&mut connection, &keys[0]).await, 5);
        // A key of another type refuses the whole hold-off.
        let _: () = connection.del(&keys[1]).await.unwrap();
        let _: () = connection.hset(&keys[1], "f", "v").await.unwrap();
        let mut invocation = script.prepare_invoke();
        invocation
            .key(&keys[0])
            .key(&keys[1])
            .key(quota_key)
            .arg(version)
            .arg(1000)
            .arg(1)
            .arg("");
        invocation.arg(10).arg(10).arg(0).arg(0).arg(100);
        let error = invocation
            .invoke_async::<Vec<u64>>(&mut connection)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("NOTABUCKET"), "{error}");
        assert_eq!(read(&mut connection, &keys[0]).await, 5);
        // So does a hold-offs key of another type, before any bucket moves.
        let stray = "{hold}:stray";
        let _: () = connection.set(stray, "text").await.unwrap();
        let mut invocation = script.prepare_invoke();
        invocation.key(&keys[0]).key(quota_key).key(stray);
        invocation.arg(version).arg(1000).arg(1).arg("1");
        invocation.arg(10).arg(0).arg(100);
        let error = invocation
            .invoke_async::<Vec<u64>>(&mut connection)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("NOTAHOLD"), "{error}");
        assert_eq!(read(&mut connection, &keys[0]).await, 5);
    });
}

#[test]
fn the_charge_script_charges_the_payers_in_turn_as_the_pure_function() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let script = Script::new(CHARGE_LUA);
        let keys: Vec<String> = (0..4).map(|i| format!("{{charge}}:b{i}")).collect();
        let quota_key = "{charge}:quota";
        let _: () = connection
            .set(quota_key, "4 5 1000000000 5 4")
            .await
            .unwrap();
        let mut rng = XorShift(0x00C4_A26E);
        let (mut partial, mut into_debt, mut unborn) = (0, 0, 0);
        for step in 0..1500 {
            let payers = 1 + rng.below(4) as usize;
            let now =
                [0, 1_000_000, 1_764_000_000_000_000][rng.below(3) as usize] + rng.below(1 << 20);
            let interval = [1, 7, 1000, 123_457][rng.below(4) as usize];
            let mut left = rng.below(200) as u32;
            let asked = left;
            let mut invocation = script.prepare_invoke();
            let (mut want, mut taken, mut capacities) = (Vec::new(), Vec::new(), Vec::new());
            for key in &keys[..payers] {
                let capacity = interval * (1 + rng.below(64));
                let tat = match rng.below(4) {
                    0 => 0,
                    1 => now.saturating_sub(rng.below(capacity + 1)),
                    2 => now + rng.below(capacity + 1),
                    _ => now + capacity + rng.below(2 * capacity),
                };
                if tat == 0 {
                    let _: () = connection.del(key).await.unwrap();
                } else {
                    let _: () = connection.set(key, tat).await.unwrap();
                }
                // Born after the grant (version 4 > 3): charged nothing.
                let born = rng.below(6) == 0;
                if born {
                    let _: () = connection.set(format!("{key}:born"), 4).await.unwrap();
                    unborn += 1;
                } else {
                    let _: () = connection.del(format!("{key}:born")).await.unwrap();
                }
                let (after, took) = if born {
                    (tat, 0)
                } else {
                    charge(tat, left, interval, capacity, now)
                };
                left -= took;
                into_debt += usize::from(after > now + capacity);
                want.push(if took == 0 { tat } else { after });
                taken.push(u64::from(took));
                capacities.push(capacity);
                invocation.key(key);
            }
            partial += usize::from(left > 0 && left < asked);
            invocation
                .key(quota_key)
                .arg(4)
                .arg(3)
                .arg(asked)
                .arg(interval);
            for &capacity in &capacities {
                invocation.arg(capacity);
            }
            invocation.arg(now);
            let reply: Vec<u64> = invocation.invoke_async(&mut connection).await.unwrap();
            assert_eq!(reply[..2], [1, 4], "step {step}");
            assert_eq!(reply[2..], taken, "step {step}");
            for (j, key) in keys[..payers].iter().enumerate() {
                assert_eq!(
                    read(&mut connection, key).await,
                    want[j],
                    "step {step}, payer {j}"
                );
            }
        }
        assert!(
            partial > 50 && into_debt > 300 && unborn > 100,
            "{partial} {into_debt} {unborn}"
        );
    });
}

/// held.lua's longest hold-off, which bounds the instants it trusts, is
/// the crate's own `MAX_HOLD_OFF` in microseconds.
#[test]
fn the_scripts_longest_hold_off_is_the_crates() {
    let micros = crate::upstream::MAX_HOLD_OFF.as_micros();
    let line = format!("local MAX_HOLD = {micros}\n");
    assert!(include_str!("../held.lua").contains(&line), "{line}");
}
