//! [`TokioClock`]: the limiter's time read from tokio's, so that tests on
//! paused time drive both.

use tokio::time::Instant;

use crate::clock::Clock;

/// A [`Clock`] that reads tokio's time, so that a limiter follows
/// `tokio::time::pause` and `advance` in tests.
///
/// Create it inside the runtime whose time it should follow: its origin is
/// the tokio instant at which it was created.
///
/// ```
/// use std::time::Duration;
/// use shuffle_limiter::{Clock, TokioClock};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let clock = TokioClock::new();
/// tokio::time::sleep(Duration::from_secs(3)).await; // instant while paused
/// assert_eq!(clock.now_nanos(), 3_000_000_000);
/// # }
/// ```
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    origin: Instant,
}

impl TokioClock {
    /// A clock whose origin is tokio's now.
    pub fn new() -> Self {
        TokioClock {
            origin: Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    #[inline]
    fn now_nanos(&self) -> u64 {
        let elapsed = Instant::now().saturating_duration_since(self.origin);
        u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX)
    }
}
