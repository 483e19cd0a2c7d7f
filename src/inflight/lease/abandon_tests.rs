//! abandon.lua, the give-back of an acquire whose reply never came, beyond
//! what the differential test (`tests.rs`) holds it to: the tombstone that
//! stops an acquire running after it, and keys holding other data.

use redis::aio::MultiplexedConnection;
use redis::{AsyncCommands, Script};

use super::model;
use super::script::{ABANDON_LUA, ACQUIRE_LUA};
use super::tests::{COUNTER, KEYS, RECORD, RECORD_MS, held, read, run, runtime};
use crate::redis::redis_server::RedisServer;

/// How long `RECORD` has left, in ms.
async fn pttl(connection: &mut MultiplexedConnection) -> i64 {
    redis::cmd("PTTL")
        .arg(RECORD)
        .query_async(connection)
        .await
        .unwrap()
}

/// A give-back that reaches Redis before its acquire (the acquire still on
/// its way, or on another connection) leaves a tombstone, and the acquire
/// that runs after it takes nothing: no seat, no token, no record.
#[test]
fn an_acquire_given_back_before_it_runs_takes_nothing() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let (acquire, abandon) = (Script::new(ACQUIRE_LUA), Script::new(ABANDON_LUA));
        // One pool of two seats; the acquire asks for one, for 1 s.
        let acquiring = || {
            run(
                &acquire,
                &[KEYS[0], COUNTER, RECORD],
                &[1_000_000, 1, 0, 0, 2, RECORD_MS],
            )
        };
        let given_back: i64 = run(&abandon, &[KEYS[0], RECORD], &[RECORD_MS])
            .invoke_async(&mut connection)
            .await
            .unwrap();
        assert_eq!(given_back, -1, "a tombstone");
        assert_eq!(
            held(&mut connection).await.as_deref(),
            Some(model::TOMBSTONE)
        );
        let left = pttl(&mut connection).await;
        assert!(0 < left && left <= RECORD_MS as i64, "{left}");
        let late: Vec<i64> = acquiring().invoke_async(&mut connection).await.unwrap();
        assert_eq!(late, [0, -1]);
        assert_eq!(read(&mut connection, 1).await, [Vec::new()]);
        assert_eq!(
            held(&mut connection).await.as_deref(),
            Some(model::TOMBSTONE)
        );
        let counter: Option<u64> = connection.get(COUNTER).await.unwrap();
        assert_eq!(counter, None, "no token taken");
        // A second give-back changes nothing.
        let again: i64 = run(&abandon, &[KEYS[0], RECORD], &[RECORD_MS])
            .invoke_async(&mut connection)
            .await
            .unwrap();
        assert_eq!(again, 0);
        assert_eq!(
            held(&mut connection).await.as_deref(),
            Some(model::TOMBSTONE)
        );
        // In the usual order, the acquire first: its lease is recorded, and
        // the give-back removes it and the record.
        let _: () = connection.del(RECORD).await.unwrap();
        let leased: Vec<i64> = acquiring().invoke_async(&mut connection).await.unwrap();
        assert_eq!(leased[0], 1, "{leased:?}");
        let token = leased[1].to_string();
        assert_eq!(held(&mut connection).await, Some(token.clone()));
        let left = pttl(&mut connection).await;
        assert!(0 < left && left <= RECORD_MS as i64, "{left}");
        assert_eq!(read(&mut connection, 1).await[0].len(), 1);
        let given_back: i64 = run(&abandon, &[KEYS[0], RECORD], &[RECORD_MS])
            .invoke_async(&mut connection)
            .await
            .unwrap();
        assert_eq!(given_back, 1);
        assert_eq!(read(&mut connection, 1).await, [Vec::new()]);
        assert_eq!(held(&mut connection).await, None);
    });
}

/// A give-back over a pool of another type (its acquire leased token 1):
/// refused, the other pool kept, and the record; a record that is not a
/// token nor a tombstone: refused, kept.
#[test]
fn a_give_back_over_other_data_is_refused_before_anything_is_written() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let mut connection = server.connection().await;
        let abandon = Script::new(ABANDON_LUA);
        let _: () = connection.zadd(KEYS[0], "1:1", 5000u64).await.unwrap();
        let _: () = connection.set(KEYS[1], "not a pool").await.unwrap();
        let _: () = connection.set(RECORD, "1").await.unwrap();
        let refused = run(&abandon, &[KEYS[0], KEYS[1], RECORD], &[RECORD_MS])
            .invoke_async::<i64>(&mut connection)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Some("NOTAPOOL"), "{refused}");
        assert!(refused.to_string().contains("{t}:p1"), "{refused}");
        assert_eq!(
            read(&mut connection, 1).await,
            [vec![("1:1".to_owned(), 5000)]]
        );
        assert_eq!(held(&mut connection).await.as_deref(), Some("1"));
        // A record of another type, or not a token: refused, kept.
        for stray in ["-1", "1e3", "9007199254740992", ""] {
            let _: () = connection.set(RECORD, stray).await.unwrap();
            let refused = run(&abandon, &[KEYS[0], RECORD], &[RECORD_MS])
                .invoke_async::<i64>(&mut connection)
                .await
                .unwrap_err();
            assert_eq!(refused.code(), Some("NOTAPOOL"), "{stray}: {refused}");
            assert_eq!(held(&mut connection).await.as_deref(), Some(stray));
        }
        let _: () = connection.del(RECORD).await.unwrap();
        let _: () = connection.hset(RECORD, "f", "v").await.unwrap();
        let refused = run(&abandon, &[KEYS[0], RECORD], &[RECORD_MS])
            .invoke_async::<i64>(&mut connection)
            .await
            .unwrap_err();
        assert_eq!(refused.code(), Some("NOTAPOOL"), "{refused}");
        assert_eq!(read(&mut connection, 1).await[0].len(), 1);
    });
}
