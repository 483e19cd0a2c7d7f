//! Loading the draw's library: what each answer of a real `redis-server`
//! to `FUNCTION LOAD` leaves a limiter calling, and whether it loads the
//! library again later ([`Library`]).

use std::time::Duration;

use super::differential::runtime;
use super::redis_server::RedisServer;
use super::{DrawScript, load_library};
use crate::redis::layout::Layout;
use crate::redis::lua::Library;

/// A limiter's library, as building one makes it: off, nothing lost.
fn fresh() -> DrawScript {
    DrawScript::new("library", 8, Layout::OneSlot)
}

fn library(script: &DrawScript) -> &Library {
    script.script.library().unwrap()
}

async fn config(server: &RedisServer, words: &[&str]) {
    let () = redis::cmd("CONFIG")
        .arg(words)
        .query_async(&mut server.connection().await)
        .await
        .unwrap();
}

#[test]
fn each_answer_to_a_load_leaves_the_functions_on_off_or_to_load_again() {
    let server = RedisServer::start();
    runtime().block_on(async {
        let wait = Duration::from_secs(10);
        let mut connection = server.connection().await;
        // Loaded, then found loaded already: on, nothing to load again.
        let script = fresh();
        for _ in 0..2 {
            load_library(library(&script), &mut connection, wait).await;
            assert!(library(&script).on());
            assert!(!library(&script).take_lost(u64::MAX));
        }

        // Refused for the moment (memory full): off, and loaded again later.
        let () = redis::cmd("FUNCTION")
            .arg("FLUSH")
            .query_async(&mut connection)
            .await
            .unwrap();
        config(&server, &["SET", "maxmemory", "1"]).await;
        let script = fresh();
        load_library(library(&script), &mut connection, wait).await;
        assert!(!library(&script).on());
        assert!(library(&script).take_lost(u64::MAX), "to load again");
        config(&server, &["SET", "maxmemory", "0"]).await;

        // No answer within the wait (writes paused, as a load is one): the
        // same.
        let (mut admin, mut paused) = (server.connection().await, server.connection().await);
        let () = redis::cmd("CLIENT")
            .arg(&["PAUSE", "2000", "WRITE"][..])
            .query_async(&mut admin)
            .await
            .unwrap();
        let script = fresh();
        load_library(library(&script), &mut paused, Duration::from_millis(50)).await;
        assert!(!library(&script).on());
        assert!(library(&script).take_lost(u64::MAX), "to load again");
        let () = redis::cmd("CLIENT")
            .arg("UNPAUSE")
            .query_async(&mut admin)
            .await
            .unwrap();

        // Refused for good: a user who may not load functions. Off, and
        // nothing to load again.
        let () = redis::cmd("ACL")
            .arg(
                &[
                    "SETUSER",
                    "no-load",
                    "on",
                    ">secret",
                    "~*",
                    "+@all",
                    "-function",
                ][..],
            )
            .query_async(&mut connection)
            .await
            .unwrap();
        let url = format!("redis://no-load:secret@127.0.0.1:{}", server.port);
        let mut no_load = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let script = fresh();
        load_library(library(&script), &mut no_load, wait).await;
        assert!(!library(&script).on());
        assert!(!library(&script).take_lost(u64::MAX), "refused for good");
        // The server itself still loads it.
        load_library(library(&script), &mut connection, wait).await;
        assert!(library(&script).on());
    });
}
