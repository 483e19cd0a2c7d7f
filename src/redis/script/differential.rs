//! The Lua script against the pure draw: the same inputs, the same outcome,
//! and the same arrival time written — on a real `redis-server`.

use std::time::Duration;

use redis::AsyncCommands;

use super::redis_server::RedisServer;
use super::{Answer, Call, DrawScript, Drawn, MICROS};
use crate::draw::{Outcome, Pace, ShardShape, Single, draw};
use crate::redis::layout::Layout;

/// The draw of an answer that must be one.
fn drawn(answer: Answer) -> Drawn {
    match answer {
        Answer::Drawn(drawn) => drawn,
        Answer::Stale { version } => {
            panic!("no quota was set, yet the script saw version {version}")
        }
    }
}

/// A small deterministic generator, so that a failure can be replayed.
pub(super) struct XorShift(pub(super) u64);

impl XorShift {
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// One case: the buckets' bursts and arrival times (0 = no key), own then
/// spill, how many are spill and what they keep, and the request.
#[derive(Debug)]
struct Case {
    interval: u64,
    shape: ShardShape,
    bursts: Vec<u32>,
    tats: Vec<u64>,
    now: u64,
    /// A booking's lead: the draw is made at `now + lead`.
    lead: u64,
    n: u32,
    start: usize,
}

impl Case {
    /// Whether two or more buckets share the most room, so that `start`
    /// settles which pays.
    fn tied(&self) -> bool {
        let own = self.shape.own;
        let rooms: Vec<u64> = (self.bursts[..own].iter().zip(&self.tats))
            .map(|(&burst, &tat)| {
                Pace::room(u64::from(burst) * self.interval, tat, self.now + self.lead)
            })
            .collect();
        let most = rooms.iter().max().copied().unwrap_or(0);
        rooms.iter().filter(|&&room| room == most).count() > 1
    }
}

fn case(rng: &mut XorShift) -> Case {
    let ranked = 1 + rng.below(8) as usize;
    // Half the cases lend: a spill of 1 to 7 buckets, the rest own.
    let spill = if ranked > 1 && rng.below(2) == 0 {
        1 + rng.below(ranked as u64 - 1) as usize
    } else {
        0
    };
    let reserve = [0, 1 << 31, 0x4000_0001, u32::MAX][rng.below(4) as usize];
    let shape = ShardShape {
        own: ranked - spill,
        spill,
        reserve: u64::from(reserve),
    };
    let k = ranked;
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
    // Up to what the own buckets hold together, so that some requests are
    // paid by several of them.
    let max: u32 = bursts[..shape.own].iter().sum();
    Case {
        interval,
        shape,
        n: rng.below(u64::from(max) + 1) as u32,
        start: rng.below(shape.own as u64) as usize,
        // A third of the draws are bookings, up to two intervals on.
        lead: [0, 0, rng.below(2 * interval + 1)][rng.below(3) as usize],
        bursts,
        tats,
        now,
    }
}

pub(super) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The pure function's outcome for a case.
fn want_of(case: &Case) -> Outcome {
    draw(
        Pace::every(case.interval),
        case.shape,
        |j| case.bursts[j],
        |j| case.tats[j],
        case.now + case.lead,
        case.n,
        || case.start,
    )
}

#[test]
fn the_script_draws_exactly_as_the_pure_function() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        // Every case both ways the limiter calls the draw: the script by
        // `EVALSHA`, and its function by `FCALL` once the library is loaded.
        let scripted = DrawScript::new("differential", 8, Layout::OneSlot);
        let function = DrawScript::new("differential", 8, Layout::OneSlot);
        function
            .load_functions(&mut connection, Duration::from_secs(10))
            .await;
        assert!(function.calls_function() && !scripted.calls_function());
        let ids: Vec<u32> = (0..8).collect();
        let mut rng = XorShift(0x5EED_D1FF);
        let (mut grants, mut denials, mut zero, mut ties) = (0, 0, 0, 0);
        let (mut borrowed, mut pooled) = (0, 0);
        for step in 0..5000 {
            let case = case(&mut rng);
            let script = [&scripted, &function][step % 2];
            let k = case.bursts.len();
            borrowed += usize::from(
                matches!(want_of(&case), Outcome::Grant(Single { index, .. }) if index >= case.shape.own),
            );
            for (j, &tat) in case.tats.iter().enumerate() {
                let key = script.key(j as u32).unwrap();
                if tat == 0 {
                    let _: () = connection.del(key).await.unwrap();
                } else {
                    let _: () = connection.set(key, tat).await.unwrap();
                }
            }
            let want = want_of(&case);
            let call = Call {
                ids: &ids[..k],
                shape: case.shape,
                interval: case.interval,
                bursts: &case.bursts,
                n: case.n,
                start: case.start,
                version: 0,
                lead: case.lead,
                now: Some(case.now),
            };
            let drawn = drawn(script.run(&mut connection, &call).await.unwrap());
            let got = drawn.outcome;
            // The script answers a denial's wait, not its instant, and the
            // arrival times it wrote but not those it read.
            let relative = match want {
                Outcome::Deny { index, at } => Outcome::Deny {
                    index,
                    at: at - (case.now + case.lead),
                },
                Outcome::Grant(Single {
                    index,
                    tat,
                    remaining,
                    full_in,
                    ..
                }) => Outcome::Grant(Single {
                    index,
                    seen: 0,
                    tat,
                    remaining,
                    full_in,
                }),
                Outcome::Pooled(mut pool) => {
                    pool.seen = Default::default();
                    Outcome::Pooled(pool)
                }
            };
            assert_eq!(got, relative, "step {step}: {case:?}");
            // A denial also answers what each own bucket holds just before
            // its time, for the denial cache.
            if let Outcome::Deny { at, .. } = want {
                let held: Vec<u32> = (0..case.shape.own)
                    .map(|j| {
                        let capacity = u64::from(case.bursts[j]) * case.interval;
                        let room = Pace::room(capacity, case.tats[j], at - 1);
                        Pace::every(case.interval).tokens(room) as u32
                    })
                    .collect();
                assert_eq!(drawn.held[..case.shape.own], held, "step {step}: {case:?}");
            }
            let written: Vec<(usize, u64)> = match want {
                Outcome::Grant(Single { index, tat, .. }) => vec![(index, tat)],
                Outcome::Pooled(pool) => pool.payments().map(|(j, _, tat, _)| (j, tat)).collect(),
                Outcome::Deny { .. } => vec![],
            };
            for &(index, tat) in &written {
                let key = script.key(index as u32).unwrap();
                let stored: Option<u64> = connection.get(key).await.unwrap();
                assert_eq!(stored.unwrap_or(0), tat, "step {step}: {case:?}");
            }
            match want {
                Outcome::Deny { .. } => denials += 1,
                _ => {
                    grants += 1;
                    zero += usize::from(case.n == 0);
                    ties += usize::from(case.tied());
                    pooled += usize::from(written.len() > 1);
                }
            }
        }
        assert!(function.calls_function(), "no FCALL fell back to the script");
        let (evalsha, fcall) = server.script_calls().await;
        assert!(fcall == 2500 && evalsha >= 2500, "{evalsha} EVALSHA, {fcall} FCALL");
        assert!(
            grants > 1000
                && denials > 400
                && zero > 100
                && ties > 300
                && borrowed > 100
                && pooled > 100,
            "{grants} grants, {denials} denials, {zero} of 0 tokens, {ties} ties, \
             {borrowed} borrowed, {pooled} pooled"
        );
    });
}

#[test]
fn a_bucket_holding_a_string_that_is_not_a_time_is_repaired_as_empty() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let script = DrawScript::new("repair", 2, Layout::OneSlot);
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
            let call = Call {
                ids: &[0, 1],
                shape: ShardShape::own(2),
                interval: MICROS,
                bursts: &[3, 3],
                n: 1,
                start: 0,
                version: 0,
                lead: 0,
                now: Some(now),
            };
            let got = drawn(script.run(&mut connection, &call).await.unwrap()).outcome;
            assert!(
                matches!(
                    got,
                    Outcome::Grant(Single {
                        index: 1,
                        remaining: 2,
                        ..
                    })
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

/// prelude.lua's latest time, plus the largest capacity the Rust side
/// lets through (`MAX_CAPACITY_MICROS`), is below 2^53: a sum a double
/// holds exactly, as the scripts count on.
#[test]
fn the_scripts_latest_time_and_the_largest_capacity_stay_exact() {
    let line = include_str!("../prelude.lua")
        .lines()
        .find_map(|line| line.strip_prefix("local MAX_NOW = "))
        .expect("prelude.lua sets MAX_NOW");
    let max_now: u64 = line.trim().parse().unwrap();
    let capacity = crate::redis::build::MAX_CAPACITY_MICROS;
    assert!(max_now + capacity < 1 << 53, "{max_now} + {capacity}");
    assert_eq!(max_now, (1 << 53) - capacity - 1);
}
