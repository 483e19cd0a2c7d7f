//! The Lua script against the pure draw: the same inputs, the same outcome,
//! and the same arrival time written — on a real `redis-server`.

use redis::AsyncCommands;

use super::redis_server::RedisServer;
use super::{DrawScript, MICROS};
use crate::draw::{Outcome, Pace, draw};

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

/// One case: the buckets' bursts and arrival times (0 = no key), and the
/// request.
#[derive(Debug)]
struct Case {
    interval: u64,
    bursts: Vec<u32>,
    tats: Vec<u64>,
    now: u64,
    n: u32,
    start: usize,
}

impl Case {
    /// Whether two or more buckets share the most room, so that `start`
    /// settles which pays.
    fn tied(&self) -> bool {
        let rooms: Vec<u64> = (self.bursts.iter().zip(&self.tats))
            .map(|(&burst, &tat)| Pace::room(u64::from(burst) * self.interval, tat, self.now))
            .collect();
        let most = rooms.iter().max().copied().unwrap_or(0);
        rooms.iter().filter(|&&room| room == most).count() > 1
    }
}

fn case(rng: &mut XorShift) -> Case {
    let k = 1 + rng.below(8) as usize;
    let interval = [1, 7, 1000, 20_000, 123_457][rng.below(5) as usize];
    let bursts: Vec<u32> = (0..k).map(|_| 1 + rng.below(6) as u32).collect();
    let now = [0, 1, 1_000_000, 1_764_000_000_000_000][rng.below(4) as usize] + rng.below(1 << 20);
    let tats = bursts
        .iter()
        .map(|&burst| {
            let capacity = u64::from(burst) * interval;
            match rng.below(5) {
                0 => 0,                                               // missing: full
                1 => now.saturating_sub(rng.below(2 * capacity + 1)), // full or filling
                2 => now + rng.below(capacity + 1),                   // part empty
                3 => now + capacity + rng.below(3 * capacity + 1),    // clock went back
                _ => now + rng.below(interval + 1),                   // about one token
            }
        })
        .collect();
    let max = *bursts.iter().max().unwrap();
    Case {
        interval,
        n: rng.below(u64::from(max) + 1) as u32,
        start: rng.below(k as u64) as usize,
        bursts,
        tats,
        now,
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn the_script_draws_exactly_as_the_pure_function() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let script = DrawScript::new("differential", 8);
        let ids: Vec<u32> = (0..8).collect();
        let mut rng = XorShift(0x5EED_D1FF);
        let (mut grants, mut denials, mut zero, mut ties) = (0, 0, 0, 0);
        for step in 0..4000 {
            let case = case(&mut rng);
            let k = case.bursts.len();
            for (j, &tat) in case.tats.iter().enumerate() {
                let key = script.key(j as u32).unwrap();
                if tat == 0 {
                    let _: () = connection.del(key).await.unwrap();
                } else {
                    let _: () = connection.set(key, tat).await.unwrap();
                }
            }
            let want = draw(
                Pace::every(case.interval),
                k,
                |j| case.bursts[j],
                |j| case.tats[j],
                case.now,
                case.n,
                || case.start,
            );
            let got = script
                .run(
                    &mut connection,
                    &ids[..k],
                    case.interval,
                    &case.bursts,
                    case.n,
                    case.start,
                    Some(case.now),
                )
                .await
                .unwrap();
            // The script answers a denial's wait, not its instant, and keeps
            // the new arrival time to itself: compare those apart.
            let relative = match want {
                Outcome::Deny { index, at } => Outcome::Deny {
                    index,
                    at: at - case.now,
                },
                Outcome::Grant {
                    index,
                    remaining,
                    full_in,
                    ..
                } => Outcome::Grant {
                    index,
                    seen: 0,
                    tat: 0,
                    remaining,
                    full_in,
                },
            };
            assert_eq!(got, relative, "step {step}: {case:?}");
            if let Outcome::Grant { index, tat, .. } = want {
                let key = script.key(index as u32).unwrap();
                let stored: Option<u64> = connection.get(key).await.unwrap();
                assert_eq!(stored.unwrap_or(0), tat, "step {step}: {case:?}");
                grants += 1;
                zero += usize::from(case.n == 0);
                ties += usize::from(case.tied());
            } else {
                denials += 1;
            }
        }
        assert!(
            grants > 1000 && denials > 400 && zero > 100 && ties > 300,
            "{grants} grants, {denials} denials, {zero} of 0 tokens, {ties} ties"
        );
    });
}

#[test]
fn a_bucket_holding_a_string_that_is_not_a_time_is_repaired_as_empty() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let script = DrawScript::new("repair", 2);
        let now = 5_000_000;
        for garbage in [
            "nan",
            "inf",
            "-inf",
            "1e300",
            "-5",
            "1.5",
            "x",
            "9007199254740993",
        ] {
            let _: () = connection
                .set(script.key(0).unwrap(), garbage)
                .await
                .unwrap();
            let _: () = connection.del(script.key(1).unwrap()).await.unwrap();
            // Bucket 0 is read as empty, so bucket 1 (full) pays.
            let got = script
                .run(&mut connection, &[0, 1], MICROS, &[3, 3], 1, 0, Some(now))
                .await
                .unwrap();
            assert!(
                matches!(
                    got,
                    Outcome::Grant {
                        index: 1,
                        remaining: 2,
                        ..
                    }
                ),
                "{garbage}: {got:?}"
            );
            let repaired: u64 = connection.get(script.key(0).unwrap()).await.unwrap();
            assert_eq!(repaired, now + 3 * MICROS, "{garbage}");
            let ttl: i64 = connection.pttl(script.key(0).unwrap()).await.unwrap();
            assert!(ttl > 0, "{garbage}: the repaired key expires");
        }
    });
}
