//! A batch against the same decisions one by one: `draw_batch.lua` applies
//! each decision exactly as `draw_one.lua` would alone, in order — the same
//! answers, the same values written — on a real `redis-server`.

use std::time::Duration;

use redis::AsyncCommands;

use super::differential::{XorShift, runtime};
use super::redis_server::RedisServer;
use super::{Answer, Call, DrawScript};
use crate::draw::ShardShape;
use crate::redis::batch::{BatchScript, answers};
use crate::redis::error::Error;
use crate::redis::layout::Layout;
use crate::redis::lua::query_value;

/// The buckets of the limiters compared.
const BUCKETS: u32 = 8;

/// One decision of a batch, owning what its `Call` borrows.
#[derive(Debug)]
struct Decision {
    ids: Vec<u32>,
    bursts: Vec<u32>,
    shape: ShardShape,
    n: u32,
    start: usize,
    version: u64,
    lead: u64,
}

impl Decision {
    fn call(&self, interval: u64, now: Option<u64>) -> Call<'_> {
        Call {
            ids: &self.ids,
            shape: self.shape,
            interval,
            bursts: &self.bursts,
            n: self.n,
            start: self.start,
            version: self.version,
            lead: self.lead,
            now,
        }
    }
}

/// A decision over distinct buckets drawn at random, some lending, some
/// booking ahead, some with another quota's version.
fn decision(rng: &mut XorShift, interval: u64, bursts: &[u32]) -> Decision {
    let mut all: Vec<u32> = (0..BUCKETS).collect();
    for i in (1..all.len()).rev() {
        all.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let ranked = 1 + rng.below(u64::from(BUCKETS)) as usize;
    let spill = if ranked > 1 && rng.below(2) == 0 {
        1 + rng.below(ranked as u64 - 1) as usize
    } else {
        0
    };
    let ids = all[..ranked].to_vec();
    let bursts: Vec<u32> = ids.iter().map(|&b| bursts[b as usize]).collect();
    let shape = ShardShape {
        own: ranked - spill,
        spill,
        reserve: [0, 1 << 31, u64::from(u32::MAX)][rng.below(3) as usize],
    };
    let most: u32 = bursts[..shape.own].iter().sum();
    Decision {
        n: rng.below(u64::from(most) + 1) as u32,
        start: rng.below(shape.own as u64) as usize,
        // One decision in eight carries a quota version the key does not hold.
        version: [3, 3, 3, 3, 3, 3, 3, 2][rng.below(8) as usize],
        lead: [0, 0, rng.below(2 * interval + 1)][rng.below(3) as usize],
        ids,
        bursts,
        shape,
    }
}

/// What an answer says, errors by their text (they hold no equality).
fn shown(answer: Result<Answer, Error>) -> String {
    match answer {
        Ok(answer) => format!("{answer:?}"),
        Err(error) => format!("error: {error}"),
    }
}

#[test]
fn a_batch_draws_exactly_as_its_decisions_one_by_one() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let alone = DrawScript::new("alone", BUCKETS, Layout::OneSlot);
        let batched = DrawScript::new("batched", BUCKETS, Layout::OneSlot);
        // The decisions alone by the script (`EVALSHA`), the batches by
        // their function (`FCALL`): each way of calling the draw against
        // the other.
        batched
            .load_functions(&mut connection, Duration::from_secs(10))
            .await;
        assert!(batched.calls_function() && !alone.calls_function());
        let batch_script = BatchScript::of(&batched);
        assert!(batch_script.script.function().is_some());
        let mut rng = XorShift(0xBA7C_4ED5);
        let (mut decisions, mut grants, mut denials, mut stale, mut errors) = (0, 0, 0, 0, 0);
        for round in 0..400 {
            let interval = [1, 7, 1000, 20_000][rng.below(4) as usize];
            let bursts: Vec<u32> = (0..BUCKETS).map(|_| 1 + rng.below(6) as u32).collect();
            let now = 1_764_000_000_000_000 + rng.below(1 << 30);
            // The same start for both: each bucket missing, full, part
            // empty or booked ahead; now and then one of another type.
            let wrong = (round % 10 == 0).then(|| rng.below(u64::from(BUCKETS)) as u32);
            for b in 0..BUCKETS {
                let capacity = u64::from(bursts[b as usize]) * interval;
                let tat = match rng.below(5) {
                    0 => None,
                    1 => Some(now.saturating_sub(rng.below(2 * capacity + 1)).to_string()),
                    2 => Some((now + rng.below(capacity + 1)).to_string()),
                    3 => Some((now + capacity + rng.below(capacity + 1)).to_string()),
                    // Not a time: repaired by the first decision to read it.
                    _ => Some(["nan", "-5", "1.5", "x"][rng.below(4) as usize].to_owned()),
                };
                for script in [&alone, &batched] {
                    let key = script.key(b).unwrap();
                    let _: () = connection.del(key).await.unwrap();
                    if wrong == Some(b) {
                        let _: () = connection.hset(key, "f", 1).await.unwrap();
                    } else if let Some(tat) = &tat {
                        let _: () = connection.set(key, tat).await.unwrap();
                    }
                    // Version 3 of a quota, set live (see quota.rs).
                    let quota = script.quota_key(0);
                    let _: () = connection.set(quota, "3 10 1000000000 10 8").await.unwrap();
                }
            }
            let batch: Vec<Decision> = (0..1 + rng.below(40))
                .map(|_| decision(&mut rng, interval, &bursts))
                .collect();
            let mut one_by_one = Vec::new();
            for decision in &batch {
                let call = decision.call(interval, Some(now));
                one_by_one.push(shown(alone.run(&mut connection, &call).await));
            }
            let calls = || batch.iter().map(|d| d.call(interval, None));
            let cmd = batch_script.cmd(calls(), Some(now));
            let reply = query_value(&batch_script.script, &cmd, &mut connection).await;
            let together: Vec<String> = (answers(&reply.unwrap(), calls()).into_iter())
                .map(shown)
                .collect();
            // Keys differ by name only: compare with the name taken out.
            let together: Vec<String> = (together.iter())
                .map(|a| a.replace("{batched}", "{alone}"))
                .collect();
            assert_eq!(together, one_by_one, "round {round}: {batch:?}");
            for b in 0..BUCKETS {
                let value = |script: &DrawScript| {
                    let key = script.key(b).unwrap().to_owned();
                    let mut connection = connection.clone();
                    async move {
                        let value: redis::RedisResult<Option<u64>> = connection.get(&key).await;
                        let ttl: i64 = connection.pttl(&key).await.unwrap();
                        // Written by a script (a lifetime), left as set (none), missing.
                        (value.ok(), if ttl > 0 { 1 } else { ttl })
                    }
                };
                let (want, got) = (value(&alone).await, value(&batched).await);
                assert_eq!(got, want, "round {round}, bucket {b}: {batch:?}");
            }
            decisions += batch.len();
            for answer in &one_by_one {
                match answer {
                    a if a.starts_with("Drawn(Drawn { outcome: Deny") => denials += 1,
                    a if a.starts_with("Drawn") => grants += 1,
                    a if a.starts_with("Stale") => stale += 1,
                    _ => errors += 1,
                }
            }
        }
        assert!(batched.calls_function(), "no FCALL fell back to the script");
        // A call a batch by FCALL, and each decision alone by EVALSHA.
        let (evalsha, fcall) = server.script_calls().await;
        assert!(
            fcall == 400 && evalsha >= decisions as u64,
            "{evalsha} EVALSHA, {fcall} FCALL"
        );
        assert!(
            decisions > 5000 && grants > 1000 && denials > 1000 && stale > 300 && errors > 50,
            "{decisions} decisions: {grants} grants, {denials} denials, {stale} stale, \
             {errors} errors"
        );
    });
}
