//! The retry budget's scripts against the pure steps of
//! `src/upstream/retry.rs` (`deposited`, `roomiest`, `floor_due`): the same
//! random steps, the same values written, on a real `redis-server`.

use redis::{AsyncCommands, Script};

use super::differential::{XorShift, runtime};
use super::redis_server::RedisServer;
use crate::redis::retry::{DEPOSIT_LUA, WITHDRAW_LUA};
use crate::upstream::{RETRY, deposited, floor_due, roomiest};

/// What the Lua must leave at each key: `(thousandths, due)`, as stored.
struct Mirror {
    banks: Vec<(u64, u64)>,
}

impl Mirror {
    fn deposit(&mut self, keys: &[usize], earned: &[u64], cap: u64) -> Vec<i64> {
        let mut reply = Vec::new();
        for (&k, &e) in keys.iter().zip(earned) {
            let (held, due) = self.banks[k];
            let after = deposited(held.min(cap), e, cap);
            self.banks[k] = (after, due);
            reply.push(after as i64);
        }
        reply
    }

    /// The withdraw script's reply, as `RetryBudget::withdraw` decides.
    #[allow(clippy::too_many_arguments)] // the script's inputs, one for one
    fn withdraw(
        &mut self,
        keys: &[usize],
        pending: &[u64],
        (cap, every, mode): (u64, u64, u8),
        now: u64,
    ) -> Vec<i64> {
        let read: Vec<u64> = keys.iter().map(|&k| self.banks[k].0.min(cap)).collect();
        let mut held: Vec<u64> = (read.iter().zip(pending))
            .map(|(&h, &p)| deposited(h, p, cap))
            .collect();
        let mut changed: Vec<bool> = held.iter().zip(&read).map(|(a, b)| a != b).collect();
        let mut due: Vec<u64> = keys.iter().map(|&k| self.banks[k].1).collect();
        let mut reply = vec![0, 0, 0];
        if mode != 2
            && let Some(i) = roomiest(held.iter().copied())
        {
            held[i] -= RETRY;
            changed[i] = true;
            reply = vec![1, 1, i as i64];
        } else if mode != 1 {
            for i in 0..keys.len() {
                if let Some(next) = floor_due(due[i], now, every) {
                    due[i] = next;
                    changed[i] = true;
                    reply = vec![1, 2, i as i64];
                    break;
                }
            }
        }
        for (i, &k) in keys.iter().enumerate() {
            if changed[i] {
                self.banks[k] = (held[i], due[i]);
            }
        }
        reply
    }
}

#[test]
fn the_retry_scripts_deposit_and_withdraw_as_the_pure_steps() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let (deposit, withdraw) = (Script::new(DEPOSIT_LUA), Script::new(WITHDRAW_LUA));
        let keys: Vec<String> = (0..6).map(|i| format!("{{retry}}:b{i}:retry")).collect();
        let mut mirror = Mirror {
            banks: vec![(0, 0); keys.len()],
        };
        let mut rng = XorShift(0x2E72_1B0D);
        let (mut from_deposits, mut from_floor, mut none) = (0, 0, 0);
        let mut now = 1_764_000_000_000_000;
        for step in 0..3000 {
            let cap = RETRY * [1, 2, 10][rng.below(3) as usize];
            // Some shards of 1 to 4 distinct keys, in any order.
            let mut shard: Vec<usize> = Vec::new();
            for _ in 0..1 + rng.below(4) {
                let k = rng.below(keys.len() as u64) as usize;
                if !shard.contains(&k) {
                    shard.push(k);
                }
            }
            now += rng.below(400_000);
            match rng.below(8) {
                // A value over the cap another process's settings left.
                0 => {
                    let k = shard[0];
                    let (_, due) = mirror.banks[k];
                    mirror.banks[k] = (cap + rng.below(5000), due);
                    let text = format!("{} {}", mirror.banks[k].0, due);
                    let _: () = connection.set(&keys[k], text).await.unwrap();
                }
                1..=3 => {
                    let earned: Vec<u64> = shard.iter().map(|_| rng.below(2500)).collect();
                    let mut invocation = deposit.prepare_invoke();
                    for &k in &shard {
                        invocation.key(&keys[k]);
                    }
                    invocation.arg(cap);
                    for &e in &earned {
                        invocation.arg(e);
                    }
                    let reply: Vec<i64> = invocation.invoke_async(&mut connection).await.unwrap();
                    assert_eq!(reply, mirror.deposit(&shard, &earned, cap), "step {step}");
                }
                _ => {
                    let pending: Vec<u64> = (shard.iter())
                        .map(|_| [0, 0, rng.below(1500)][rng.below(3) as usize])
                        .collect();
                    let every = [0, 1, 250_000, 1_000_000][rng.below(4) as usize];
                    let mode = [0, 0, 1, 2][rng.below(4) as usize];
                    let mut invocation = withdraw.prepare_invoke();
                    for &k in &shard {
                        invocation.key(&keys[k]);
                    }
                    invocation.arg(cap).arg(every).arg(mode);
                    for &p in &pending {
                        invocation.arg(p);
                    }
                    invocation.arg(now);
                    let reply: Vec<i64> = invocation.invoke_async(&mut connection).await.unwrap();
                    let want = mirror.withdraw(&shard, &pending, (cap, every, mode), now);
                    assert_eq!(reply, want, "step {step}");
                    match reply[1] {
                        1 => from_deposits += 1,
                        2 => from_floor += 1,
                        _ => none += 1,
                    }
                }
            }
            for (k, key) in keys.iter().enumerate() {
                let got: Option<String> = connection.get(key).await.unwrap();
                let got = got.map_or((0, 0), |text| {
                    let (h, d) = text.split_once(' ').unwrap();
                    (h.parse().unwrap(), d.parse().unwrap())
                });
                assert_eq!(got, mirror.banks[k], "step {step}, key {k}");
            }
        }
        assert!(
            from_deposits > 200 && from_floor > 100 && none > 100,
            "{from_deposits} {from_floor} {none}"
        );
        // Another type, or text of another shape: refused, nothing written.
        let _: () = connection.del(&keys[1]).await.unwrap();
        let _: () = connection.hset(&keys[1], "f", "v").await.unwrap();
        for bad in [&keys[1], &keys[2]] {
            if bad == &keys[2] {
                let _: () = connection.set(bad, "12 nan").await.unwrap();
            }
            let before: Option<String> = connection.get(&keys[0]).await.unwrap();
            let mut invocation = withdraw.prepare_invoke();
            invocation.key(&keys[0]).key(bad);
            invocation.arg(RETRY).arg(1).arg(0).arg(5000).arg(5000);
            let error = (invocation.invoke_async::<Vec<i64>>(&mut connection).await).unwrap_err();
            assert_eq!(error.code(), Some("NOTARETRY"), "{error}");
            let after: Option<String> = connection.get(&keys[0]).await.unwrap();
            assert_eq!(before, after);
        }
    });
}
