//! The Redis tests that run with batching on and off
//! ([`RedisOptions::batch`], [`RedisOptions::unbatched`]): the parent test
//! names the setting, its child processes read it back. (The other Redis
//! tests run with the default, batching in the one-slot layout.)

// Each test file uses a part of this.
#![allow(dead_code)]

use std::process::Command;
use std::time::Duration;

use shuffle_limiter::redis::RedisOptions;

/// Set to `on` in a child process whose limiters batch.
pub(crate) const BATCH_ENV: &str = "SHUFFLE_LIMITER_TEST_BATCH";

/// The batches of the tests: up to 32 decisions, a window of 2 ms.
pub(crate) const BATCH: (u32, Duration) = (32, Duration::from_millis(2));

/// `options`, batched when `batched`, else unbatched.
pub(crate) fn batched_if(options: RedisOptions, batched: bool) -> RedisOptions {
    if batched {
        options.batch(BATCH.0, BATCH.1)
    } else {
        options.unbatched()
    }
}

/// `options` as the parent process asked (batched when [`BATCH_ENV`] is `on`).
pub(crate) fn as_asked(options: RedisOptions) -> RedisOptions {
    batched_if(options, std::env::var(BATCH_ENV).is_ok_and(|v| v == "on"))
}

/// Tells a child process whether to batch.
pub(crate) fn tell(command: &mut Command, batched: bool) -> &mut Command {
    command.env(BATCH_ENV, if batched { "on" } else { "off" })
}
